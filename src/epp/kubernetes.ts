// Endpoints of an InferencePool, watched through the Kubernetes API: the pool object itself (its selector
// and ports may change) and the pods its selector matches. The client's ListWatch keeps each cache: it
// lists, watches from the list's resourceVersion, and re-lists when the server answers 410 Gone. What it
// leaves to us is any other failure, which stops it: we restart it with a capped, doubling backoff.
import { CoreV1Api, CustomObjectsApi, KubeConfig, ListWatch, Watch } from '@kubernetes/client-node';
import type { KubernetesObject, KubernetesListObject } from '@kubernetes/client-node';
import { LlmgwError } from '../errors/index.js';
import type { DiscoverySource, PoolEndpoint } from './endpoints.js';
import { labelSelectorOf, poolEndpoints, poolSelection } from './pool-pods.js';
import type { InferencePoolObject, PodObject, PoolSelection, SkippedPod } from './pool-pods.js';

export const inferencePoolGroup = 'inference.networking.k8s.io';
export const inferencePoolVersion = 'v1';

export interface WatchInferencePoolOptions {
  readonly pool: string;
  /** Default 'default'. */
  readonly namespace?: string;
  /** A kubeconfig file; without one, the client's default order (KUBECONFIG, ~/.kube/config, in-cluster). */
  readonly kubeconfig?: string;
  /** Hears each matching pod left out of a new endpoint list, and why. */
  readonly onSkip?: (skipped: SkippedPod) => void;
  /** Hears each failure the watch recovers from (an unreachable API server, a pool that is missing or invalid). */
  readonly onProblem?: (message: string) => void;
  readonly backoffInitialMs?: number;
  readonly backoffMaxMs?: number;
}

export interface KubernetesDiscoveryCounts {
  /** Pods the selector matched at the last change, ready or not. */
  readonly pods: number;
  readonly endpoints: number;
  readonly skipped: number;
  /** Completed lists of the pool or its pods: the first ones, then one per 410 Gone or restart. */
  readonly lists: number;
  /** Failures that stopped a watch and were retried. */
  readonly errors: number;
}

export interface KubernetesDiscovery extends DiscoverySource {
  /** Resolves once the pool and (if it exists and is valid) its pods have been listed in full. */
  synced(): Promise<void>;
  counts(): KubernetesDiscoveryCounts;
}

// The client's last resort when it finds no config is http://localhost:8080 as an anonymous user:
// an EPP started outside a cluster by mistake would retry that forever, unready, saying only
// "connection refused". Refusing to start names the fix instead.
function kubeConfigFor(file: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (file !== undefined && file !== '') {
    try {
      kc.loadFromFile(file);
    } catch (e) {
      const why = e instanceof Error && 'code' in e ? String(e.code) : e instanceof Error ? e.message.split('\n')[0] : String(e);
      throw new LlmgwError('LLMGW_EPP_DISCOVERY', `discovery.kubernetes.kubeconfig: cannot load ${file} (${why}); give a kubeconfig file, or leave the key out inside the cluster`, { cause: e });
    }
  } else kc.loadFromDefault();
  const cluster = kc.getCurrentCluster();
  if (cluster === null || (cluster.name === 'cluster' && cluster.server === 'http://localhost:8080' && kc.getCurrentUser()?.name === 'user')) {
    throw new LlmgwError('LLMGW_EPP_DISCOVERY', 'discovery.kubernetes: found no Kubernetes API to watch (no KUBECONFIG, no ~/.kube/config, no service account token); run the EPP in the cluster or give discovery.kubernetes.kubeconfig');
  }
  return kc;
}

// ListWatch keeps the watch's controller only once the watch's response headers are in, and starts
// a watch after a list even when stop() came while the list was out: such a watch was never aborted
// and held the process open after close(). Every watch started here ends at close.
class ClosableWatch extends Watch {
  readonly #open = new Set<AbortController>();
  #closed = false;

  override async watch(...args: Parameters<Watch['watch']>): Promise<AbortController> {
    const c = await super.watch(...args);
    if (this.#closed) c.abort();
    else {
      this.#open.add(c);
      c.signal.addEventListener('abort', () => this.#open.delete(c), { once: true });
    }
    return c;
  }

  close(): void {
    this.#closed = true;
    for (const c of this.#open) c.abort();
    this.#open.clear();
  }
}

const sameEndpoints = (a: readonly PoolEndpoint[], b: readonly PoolEndpoint[]): boolean => JSON.stringify(a) === JSON.stringify(b);

/**
 * Starts watching; the returned source reports [] until synced() resolves and whenever the pool is gone.
 * Throws LLMGW_EPP_DISCOVERY when there is no kubeconfig to load.
 */
export function watchInferencePool(options: WatchInferencePoolOptions): KubernetesDiscovery {
  const namespace = options.namespace ?? 'default';
  const kc = kubeConfigFor(options.kubeconfig);
  const watch = new ClosableWatch(kc);
  const core = kc.makeApiClient(CoreV1Api);
  const custom = kc.makeApiClient(CustomObjectsApi);
  const backoffInitialMs = options.backoffInitialMs ?? 250;
  const backoffMaxMs = options.backoffMaxMs ?? 15_000;
  const listeners: ((eps: PoolEndpoint[]) => void)[] = [];
  const timers = new Set<NodeJS.Timeout>();
  let closed = false;
  let endpoints: PoolEndpoint[] = [];
  let matched = 0;
  let skippedCount = 0;
  let lists = 0;
  let errors = 0;
  let selection: PoolSelection | undefined;
  let selector = '';
  let pods: ListWatch<KubernetesObject> | undefined;
  let poolListed = false;
  let podsListed = false;
  let resolveSynced: () => void = () => {};
  const syncedPromise = new Promise<void>((resolve) => (resolveSynced = resolve));

  const problem = (message: string): void => options.onProblem?.(message);

  function publish(): void {
    let next: PoolEndpoint[] = [];
    if (selection !== undefined && pods !== undefined) {
      const podList = pods.list(namespace) as unknown as PodObject[];
      const result = poolEndpoints(selection, podList);
      next = result.endpoints;
      matched = podList.length;
      skippedCount = result.skipped.length;
      for (const s of result.skipped) options.onSkip?.(s);
    } else {
      matched = 0;
      skippedCount = 0;
    }
    if (poolListed && (selection === undefined || podsListed)) resolveSynced();
    if (sameEndpoints(next, endpoints)) return;
    endpoints = next;
    for (const fn of listeners) fn(endpoints.map((e) => ({ ...e, labels: { ...e.labels } })));
  }

  // The ListWatch applies a list's items synchronously once its list promise settles; setImmediate runs
  // after that, so one list (or one burst of watch events) gives one new endpoint list, not one per pod.
  let publishQueued = false;
  function queuePublish(): void {
    if (publishQueued || closed) return;
    publishQueued = true;
    setImmediate(() => {
      publishQueued = false;
      if (!closed) publish();
    });
  }

  // Each informer's next retry delay; a list that succeeds means the server is back, so it resets.
  const delays = new Map<ListWatch<KubernetesObject>, number>();
  function restartOnError(informer: ListWatch<KubernetesObject>, what: string, isCurrent: () => boolean): void {
    informer.on('error', (err: unknown) => {
      if (closed || !isCurrent()) return;
      errors += 1;
      const delayMs = delays.get(informer) ?? backoffInitialMs;
      problem(`kubernetes watch of ${what} failed (${err instanceof Error ? err.message : String(err)}); retrying in ${delayMs} ms`);
      const t = setTimeout(() => {
        timers.delete(t);
        if (!closed && isCurrent()) void informer.start();
      }, delayMs);
      timers.add(t);
      delays.set(informer, Math.min(delayMs * 2, backoffMaxMs));
    });
  }

  function watchPods(next: PoolSelection): void {
    const nextSelector = labelSelectorOf(next.matchLabels);
    selection = next;
    if (pods !== undefined && nextSelector === selector) return queuePublish();
    void pods?.stop();
    selector = nextSelector;
    podsListed = false;
    const listFn = async (): Promise<KubernetesListObject<KubernetesObject>> => {
      const list = await core.listNamespacedPod({ namespace, labelSelector: nextSelector });
      lists += 1;
      delays.delete(informer);
      if (informer === pods) {
        podsListed = true;
        queuePublish();
      }
      return list as KubernetesListObject<KubernetesObject>;
    };
    const informer = new ListWatch<KubernetesObject>(`/api/v1/namespaces/${namespace}/pods`, watch, listFn, false, nextSelector);
    pods = informer;
    for (const verb of ['add', 'update', 'delete'] as const) informer.on(verb, queuePublish);
    restartOnError(informer, `pods matching ${nextSelector} in ${namespace}`, () => informer === pods);
    void informer.start();
  }

  function stopPods(): void {
    void pods?.stop();
    if (pods !== undefined) delays.delete(pods);
    pods = undefined;
    selection = undefined;
    selector = '';
    queuePublish();
  }

  function onPool(obj: KubernetesObject | undefined): void {
    if (obj === undefined) {
      problem(`InferencePool ${options.pool} not found in namespace ${namespace}; no endpoints until it exists`);
      return stopPods();
    }
    const sel = poolSelection(obj as InferencePoolObject);
    if ('error' in sel) {
      problem(sel.error);
      return stopPods();
    }
    watchPods(sel);
  }

  const fieldSelector = `metadata.name=${options.pool}`;
  const poolPath = `/apis/${inferencePoolGroup}/${inferencePoolVersion}/namespaces/${namespace}/inferencepools`;
  const listPool = async (): Promise<KubernetesListObject<KubernetesObject>> => {
    const list = (await custom.listNamespacedCustomObject({
      group: inferencePoolGroup,
      version: inferencePoolVersion,
      namespace,
      plural: 'inferencepools',
      fieldSelector,
    })) as KubernetesListObject<KubernetesObject>;
    lists += 1;
    delays.delete(poolInformer);
    poolListed = true;
    // An empty list fires no callback: the pool is absent, which must still settle synced().
    if (list.items.length === 0) setImmediate(() => !closed && onPool(undefined));
    return list;
  };
  const poolInformer = new ListWatch<KubernetesObject>(poolPath, watch, listPool, false, undefined, fieldSelector);
  poolInformer.on('add', onPool);
  poolInformer.on('update', onPool);
  poolInformer.on('delete', () => onPool(undefined));
  restartOnError(poolInformer, `InferencePool ${options.pool} in ${namespace}`, () => true);
  void poolInformer.start();

  return {
    current: () => endpoints.map((e) => ({ ...e, labels: { ...e.labels } })),
    onChange: (fn) => void listeners.push(fn),
    synced: () => syncedPromise,
    counts: () => ({ pods: matched, endpoints: endpoints.length, skipped: skippedCount, lists, errors }),
    async close() {
      closed = true;
      for (const t of timers) clearTimeout(t);
      timers.clear();
      await poolInformer.stop();
      await pods?.stop();
      watch.close();
    },
  };
}
