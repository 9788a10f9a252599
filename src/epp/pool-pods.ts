// An InferencePool (inference.networking.k8s.io/v1) and the pods its selector matches, turned into the
// endpoints the picker routes among. Pure: kubernetes.ts does the watching and calls this on every change.
import type { PoolEndpoint } from './endpoints.js';

/** The parts of an InferencePool this reads; the rest of the object is the GIE controller's business. */
export interface InferencePoolObject {
  readonly metadata?: { readonly name?: string; readonly namespace?: string };
  readonly spec?: {
    readonly selector?: { readonly matchLabels?: Readonly<Record<string, string>> };
    readonly targetPorts?: readonly { readonly number?: number }[];
    readonly endpointPickerRef?: { readonly name?: string; readonly port?: { readonly number?: number } };
  };
}

/** The parts of a Pod this reads. */
export interface PodObject {
  readonly metadata?: { readonly name?: string; readonly labels?: Readonly<Record<string, string>>; readonly deletionTimestamp?: unknown };
  readonly status?: { readonly podIP?: string; readonly conditions?: readonly { readonly type?: string; readonly status?: string }[] };
}

export type PodSkipReason = 'not-ready' | 'no-ip' | 'terminating';

/** A matching pod left out of the endpoints, and why: the operator's first question when one is missing. */
export interface SkippedPod {
  readonly pod: string;
  readonly reason: PodSkipReason;
}

/** What the pool selects and which ports of each pod serve; read once per pool change. */
export interface PoolSelection {
  readonly matchLabels: Readonly<Record<string, string>>;
  readonly targetPorts: readonly number[];
}

/**
 * The selector and ports of a pool, or a message naming what is missing. The v1 CRD requires both, so a
 * pool without them is one the API server would not have accepted: refusing it beats routing to nothing.
 */
export function poolSelection(pool: InferencePoolObject): PoolSelection | { readonly error: string } {
  const name = pool.metadata?.name ?? '(unnamed)';
  const matchLabels = pool.spec?.selector?.matchLabels ?? {};
  if (Object.keys(matchLabels).length === 0) {
    return { error: `InferencePool ${name}: spec.selector.matchLabels is empty; give the labels of the model server pods` };
  }
  const targetPorts = (pool.spec?.targetPorts ?? []).map((p) => p.number).filter((n): n is number => n !== undefined && Number.isInteger(n) && n > 0 && n < 65536);
  if (targetPorts.length === 0) {
    return { error: `InferencePool ${name}: spec.targetPorts has no port number; give the model servers' port, e.g. targetPorts: [{number: 8000}]` };
  }
  return { matchLabels, targetPorts };
}

/** The selector as the API's labelSelector query parameter, sorted so the same pool gives the same query. */
export function labelSelectorOf(matchLabels: Readonly<Record<string, string>>): string {
  return Object.keys(matchLabels)
    .sort()
    .map((k) => `${k}=${matchLabels[k]}`)
    .join(',');
}

function matches(pod: PodObject, matchLabels: Readonly<Record<string, string>>): boolean {
  const labels = pod.metadata?.labels ?? {};
  return Object.entries(matchLabels).every(([k, v]) => labels[k] === v);
}

/** The pod's address if it takes requests, else why not. */
function addressOf(pod: PodObject): { address: string } | { reason: PodSkipReason } {
  // A terminating pod may still report Ready for its grace period; new requests must not start there.
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null) return { reason: 'terminating' };
  const address = pod.status?.podIP;
  if (address === undefined || address === '') return { reason: 'no-ip' };
  const ready = pod.status?.conditions?.some((c) => c.type === 'Ready' && c.status === 'True') ?? false;
  return ready ? { address } : { reason: 'not-ready' };
}

/**
 * The pool's endpoints: each ready matching pod once per target port, sorted by name. With several target
 * ports each is a data-parallel rank with its own engine and KV cache, so each is its own endpoint named
 * `pod:port`; with one port the endpoint is the pod's name.
 */
export function poolEndpoints(selection: PoolSelection, pods: readonly PodObject[]): { endpoints: PoolEndpoint[]; skipped: SkippedPod[] } {
  const endpoints: PoolEndpoint[] = [];
  const skipped: SkippedPod[] = [];
  for (const pod of pods) {
    const name = pod.metadata?.name;
    // The watch is already filtered by the selector; checking again keeps a stale event from a
    // selector the pool no longer has out of the endpoints.
    if (name === undefined || !matches(pod, selection.matchLabels)) continue;
    const at = addressOf(pod);
    if ('reason' in at) {
      skipped.push({ pod: name, reason: at.reason });
      continue;
    }
    for (const port of selection.targetPorts) {
      endpoints.push({
        name: selection.targetPorts.length === 1 ? name : `${name}:${port}`,
        address: at.address,
        port,
        labels: { ...(pod.metadata?.labels ?? {}) },
      });
    }
  }
  endpoints.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  skipped.sort((a, b) => (a.pod < b.pod ? -1 : a.pod > b.pod ? 1 : 0));
  return { endpoints, skipped };
}
