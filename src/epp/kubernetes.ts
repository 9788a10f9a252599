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

/** One watch's clients and state, shared by the functions below. */
interface PoolWatch {
  readonly options: WatchInferencePoolOptions;
  readonly namespace: string;
  readonly watch: ClosableWatch;
  readonly core: CoreV1Api;
  readonly custom: CustomObjectsApi;
  readonly backoffInitialMs: number;
  readonly backoffMaxMs: number;
  readonly listeners: ((eps: PoolEndpoint[]) => void)[];
  readonly timers: Set<NodeJS.Timeout>;
  // Each informer's next retry delay; a list that succeeds means the server is back, so it resets.
  readonly delays: Map<ListWatch<KubernetesObject>, number>;
  readonly resolveSynced: () => void;
  closed: boolean;
  endpoints: PoolEndpoint[];
  matched: number;
  skippedCount: number;
  lists: number;
  errors: number;
  selection: PoolSelection | undefined;
  selector: string;
  pods: ListWatch<KubernetesObject> | undefined;
  poolListed: boolean;
  podsListed: boolean;
  publishQueued: boolean;
}

/**
 * Starts watching; the returned source reports [] until synced() resolves and whenever the pool is gone.
 * Throws LLMGW_EPP_DISCOVERY when there is no kubeconfig to load.
 */
export function watchInferencePool(options: WatchInferencePoolOptions): KubernetesDiscovery {
  const kc = kubeConfigFor(options.kubeconfig);
  let resolveSynced: () => void = () => {};
  const syncedPromise = new Promise<void>((resolve) => (resolveSynced = resolve));
  const w: PoolWatch = {
    options,
    namespace: options.namespace ?? 'default',
    watch: new ClosableWatch(kc),
    core: kc.makeApiClient(CoreV1Api),
    custom: kc.makeApiClient(CustomObjectsApi),
    backoffInitialMs: options.backoffInitialMs ?? 250,
    backoffMaxMs: options.backoffMaxMs ?? 15_000,
    listeners: [],
    timers: new Set(),
    delays: new Map(),
    resolveSynced,
    closed: false,
    endpoints: [],
    matched: 0,
    skippedCount: 0,
    lists: 0,
    errors: 0,
    selection: undefined,
    selector: '',
    pods: undefined,
    poolListed: false,
    podsListed: false,
    publishQueued: false,
  };
  const poolInformer = startPoolInformer(w);
  return {
    current: () => w.endpoints.map((e) => ({ ...e, labels: { ...e.labels } })),
    onChange: (fn) => void w.listeners.push(fn),
    synced: () => syncedPromise,
    counts: () => ({ pods: w.matched, endpoints: w.endpoints.length, skipped: w.skippedCount, lists: w.lists, errors: w.errors }),
    async close() {
      w.closed = true;
      for (const t of w.timers) clearTimeout(t);
      w.timers.clear();
      await poolInformer.stop();
      await w.pods?.stop();
      w.watch.close();
    },
  };
}

const problem = (w: PoolWatch, message: string): void => w.options.onProblem?.(message);

/** Makes the endpoint list from the pool's selection and its pods, and tells the listeners when it changed. */
function publish(w: PoolWatch): void {
  let next: PoolEndpoint[] = [];
  if (w.selection !== undefined && w.pods !== undefined) {
    const podList = w.pods.list(w.namespace) as unknown as PodObject[];
    const result = poolEndpoints(w.selection, podList);
    next = result.endpoints;
    w.matched = podList.length;
    w.skippedCount = result.skipped.length;
    for (const s of result.skipped) w.options.onSkip?.(s);
  } else {
    w.matched = 0;
    w.skippedCount = 0;
  }
  if (w.poolListed && (w.selection === undefined || w.podsListed)) w.resolveSynced();
  if (sameEndpoints(next, w.endpoints)) return;
  w.endpoints = next;
  for (const fn of w.listeners) fn(w.endpoints.map((e) => ({ ...e, labels: { ...e.labels } })));
}

// The ListWatch applies a list's items synchronously once its list promise settles; setImmediate runs
// after that, so one list (or one burst of watch events) gives one new endpoint list, not one per pod.
function queuePublish(w: PoolWatch): void {
  if (w.publishQueued || w.closed) return;
  w.publishQueued = true;
  setImmediate(() => {
    w.publishQueued = false;
    if (!w.closed) publish(w);
  });
}

function restartOnError(w: PoolWatch, informer: ListWatch<KubernetesObject>, what: string, isCurrent: () => boolean): void {
  informer.on('error', (err: unknown) => {
    if (w.closed || !isCurrent()) return;
    w.errors += 1;
    const delayMs = w.delays.get(informer) ?? w.backoffInitialMs;
    problem(w, `kubernetes watch of ${what} failed (${err instanceof Error ? err.message : String(err)}); retrying in ${delayMs} ms`);
    const t = setTimeout(() => {
      w.timers.delete(t);
      if (!w.closed && isCurrent()) void informer.start();
    }, delayMs);
    w.timers.add(t);
    w.delays.set(informer, Math.min(delayMs * 2, w.backoffMaxMs));
  });
}

/** Watches the pods `next` selects, replacing the pod informer only when the selector changed. */
function watchPods(w: PoolWatch, next: PoolSelection): void {
  const { namespace } = w;
  const nextSelector = labelSelectorOf(next.matchLabels);
  w.selection = next;
  if (w.pods !== undefined && nextSelector === w.selector) return queuePublish(w);
  void w.pods?.stop();
  w.selector = nextSelector;
  w.podsListed = false;
  const listFn = async (): Promise<KubernetesListObject<KubernetesObject>> => {
    const list = await w.core.listNamespacedPod({ namespace, labelSelector: nextSelector });
    w.lists += 1;
    w.delays.delete(informer);
    if (informer === w.pods) {
      w.podsListed = true;
      queuePublish(w);
    }
    return list as KubernetesListObject<KubernetesObject>;
  };
  const informer = new ListWatch<KubernetesObject>(`/api/v1/namespaces/${namespace}/pods`, w.watch, listFn, false, nextSelector);
  w.pods = informer;
  for (const verb of ['add', 'update', 'delete'] as const) informer.on(verb, () => queuePublish(w));
  restartOnError(w, informer, `pods matching ${nextSelector} in ${namespace}`, () => informer === w.pods);
  void informer.start();
}

function stopPods(w: PoolWatch): void {
  void w.pods?.stop();
  if (w.pods !== undefined) w.delays.delete(w.pods);
  w.pods = undefined;
  w.selection = undefined;
  w.selector = '';
  queuePublish(w);
}

function onPool(w: PoolWatch, obj: KubernetesObject | undefined): void {
  if (obj === undefined) {
    problem(w, `InferencePool ${w.options.pool} not found in namespace ${w.namespace}; no endpoints until it exists`);
    return stopPods(w);
  }
  const sel = poolSelection(obj as InferencePoolObject);
  if ('error' in sel) {
    problem(w, sel.error);
    return stopPods(w);
  }
  watchPods(w, sel);
}

/** Starts the informer of the InferencePool object itself, whose changes start and stop the pods' watch. */
function startPoolInformer(w: PoolWatch): ListWatch<KubernetesObject> {
  const { namespace, options } = w;
  const fieldSelector = `metadata.name=${options.pool}`;
  const poolPath = `/apis/${inferencePoolGroup}/${inferencePoolVersion}/namespaces/${namespace}/inferencepools`;
  const listPool = async (): Promise<KubernetesListObject<KubernetesObject>> => {
    const list = (await w.custom.listNamespacedCustomObject({
      group: inferencePoolGroup,
      version: inferencePoolVersion,
      namespace,
      plural: 'inferencepools',
      fieldSelector,
    })) as KubernetesListObject<KubernetesObject>;
    w.lists += 1;
    w.delays.delete(poolInformer);
    w.poolListed = true;
    // An empty list fires no callback: the pool is absent, which must still settle synced().
    if (list.items.length === 0) setImmediate(() => !w.closed && onPool(w, undefined));
    return list;
  };
  const poolInformer = new ListWatch<KubernetesObject>(poolPath, w.watch, listPool, false, undefined, fieldSelector);
  poolInformer.on('add', (obj) => onPool(w, obj));
  poolInformer.on('update', (obj) => onPool(w, obj));
  poolInformer.on('delete', () => onPool(w, undefined));
  restartOnError(w, poolInformer, `InferencePool ${options.pool} in ${namespace}`, () => true);
  void poolInformer.start();
  return poolInformer;
}
