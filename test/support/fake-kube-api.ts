// A fake Kubernetes API server for the InferencePool watch: plain node:http on 127.0.0.1 serving list and
// watch for pods and inferencepools in one namespace, with resourceVersions, label and field selectors,
// a compaction that answers old watches with 410 Gone (in-stream, as the real server does), and injected
// 500s. A kubeconfig pointing at it is written to a temp dir (plain http, which the client allows only
// with insecure-skip-tls-verify).
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

type Kind = 'pods' | 'inferencepools';
type EventType = 'ADDED' | 'MODIFIED' | 'DELETED';
interface KubeObject {
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; resourceVersion?: string; [k: string]: unknown };
  [k: string]: unknown;
}
interface Event {
  rv: number;
  kind: Kind;
  type: EventType;
  object: KubeObject;
}
interface Watcher {
  kind: Kind;
  matches: (o: KubeObject) => boolean;
  res: ServerResponse;
}

function selectorMatcher(labelSelector: string | null, fieldSelector: string | null): (o: KubeObject) => boolean {
  const labels = (labelSelector ?? '').split(',').filter(Boolean).map((kv) => kv.split('='));
  const fields = (fieldSelector ?? '').split(',').filter(Boolean).map((kv) => kv.split('='));
  return (o) =>
    labels.every(([k, v]) => k !== undefined && o.metadata.labels?.[k] === v) &&
    fields.every(([k, v]) => (k === 'metadata.name' ? o.metadata.name === v : k === 'metadata.namespace' ? o.metadata.namespace === v : false));
}

export interface FakeKubeApi {
  readonly url: string;
  readonly kubeconfig: string;
  /** Requests seen, as `list pods`, `watch inferencepools`, ... */
  readonly requests: string[];
  put(kind: Kind, object: KubeObject): void;
  remove(kind: Kind, name: string): void;
  /**
   * Makes `missed` changes no open watch hears, forgets all history and ends every watch stream: the
   * client's next watch is from a resourceVersion the server no longer has, so it gets 410 Gone and must
   * re-list to see the missed changes.
   */
  compact(missed?: () => void): void;
  /** Ends every open watch stream, as the server does at its watch timeout. */
  endWatches(): void;
  /** Answers the next `n` requests 500. */
  failNext(n: number): void;
  /** Holds every list request unanswered until the returned function is called: a slow first sync. */
  holdLists(): () => void;
  close(): Promise<void>;
}

export async function startFakeKubeApi(namespace = 'default'): Promise<FakeKubeApi> {
  const store: Record<Kind, Map<string, KubeObject>> = { pods: new Map(), inferencepools: new Map() };
  const events: Event[] = [];
  const watchers = new Set<Watcher>();
  const requests: string[] = [];
  let rv = 100;
  let compactedRv = 0;
  let failures = 0;
  let deliver = true;

  const send = (w: Watcher, type: string, object: unknown): void => void w.res.write(`${JSON.stringify({ type, object })}\n`);

  function record(kind: Kind, type: EventType, object: KubeObject): void {
    rv += 1;
    const stamped = { ...object, metadata: { ...object.metadata, namespace, resourceVersion: String(rv) } };
    if (type === 'DELETED') store[kind].delete(stamped.metadata.name);
    else store[kind].set(stamped.metadata.name, stamped);
    events.push({ rv, kind, type, object: stamped });
    if (deliver) for (const w of watchers) if (w.kind === kind && w.matches(stamped)) send(w, type, stamped);
  }

  let held: (() => void)[] | undefined;
  function handle(req: IncomingMessage, res: ServerResponse): void {
    const url = new URL(req.url ?? '/', 'http://fake');
    const pods = url.pathname === `/api/v1/namespaces/${namespace}/pods`;
    const pools = url.pathname === `/apis/inference.networking.k8s.io/v1/namespaces/${namespace}/inferencepools`;
    const isWatch = url.searchParams.get('watch') === 'true';
    if (!pods && !pools) {
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', code: 404, message: `no route ${url.pathname}` }));
      return;
    }
    const kind: Kind = pods ? 'pods' : 'inferencepools';
    requests.push(`${isWatch ? 'watch' : 'list'} ${kind}`);
    if (held !== undefined && !isWatch) held.push(() => answer(res, url, kind, pods, isWatch));
    else answer(res, url, kind, pods, isWatch);
  }

  function answer(res: ServerResponse, url: URL, kind: Kind, pods: boolean, isWatch: boolean): void {
    if (failures > 0) {
      failures -= 1;
      res.writeHead(500, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: 'Status', code: 500, message: 'injected failure' }));
      return;
    }
    const matches = selectorMatcher(url.searchParams.get('labelSelector'), url.searchParams.get('fieldSelector'));
    if (!isWatch) {
      const items = [...store[kind].values()].filter(matches);
      const listKind = pods ? 'PodList' : 'InferencePoolList';
      const apiVersion = pods ? 'v1' : 'inference.networking.k8s.io/v1';
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ kind: listKind, apiVersion, metadata: { resourceVersion: String(rv) }, items }));
      return;
    }
    const from = Number(url.searchParams.get('resourceVersion') ?? '0');
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    // The API server answers a watch's headers at once; Node holds them until the first write otherwise.
    res.flushHeaders();
    const w: Watcher = { kind, matches, res };
    if (from < compactedRv) {
      send(w, 'ERROR', { kind: 'Status', apiVersion: 'v1', status: 'Failure', reason: 'Expired', code: 410, message: `too old resource version: ${from} (${compactedRv})` });
      res.end();
      return;
    }
    for (const e of events) if (e.rv > from && e.kind === kind && matches(e.object)) send(w, e.type, e.object);
    watchers.add(w);
    res.on('close', () => watchers.delete(w));
  }

  const server = createServer(handle);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-fake-kube-'));
  const kubeconfig = join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters: [{name: fake, cluster: {server: "' + url + '", insecure-skip-tls-verify: true}}]',
      'users: [{name: fake, user: {token: fake-token}}]',
      'contexts: [{name: fake, context: {cluster: fake, user: fake, namespace: ' + namespace + '}}]',
      'current-context: fake',
      '',
    ].join('\n'),
  );

  const endWatches = (): void => {
    for (const w of watchers) w.res.end();
    watchers.clear();
  };
  return {
    url,
    kubeconfig,
    requests,
    put: (kind, object) => record(kind, store[kind].has(object.metadata.name) ? 'MODIFIED' : 'ADDED', object),
    remove: (kind, name) => {
      const o = store[kind].get(name);
      if (o !== undefined) record(kind, 'DELETED', o);
    },
    compact: (missed) => {
      deliver = false;
      missed?.();
      deliver = true;
      compactedRv = rv;
      events.length = 0;
      endWatches();
    },
    endWatches,
    failNext: (n) => void (failures = n),
    holdLists: () => {
      held ??= [];
      return () => {
        const waiting = held ?? [];
        held = undefined;
        for (const go of waiting) go();
      };
    },
    async close() {
      endWatches();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
