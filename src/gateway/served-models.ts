// The models and adapters the gateway serves, as the directory of ready replicas says: the check a
// request's model passes first, and what the adapter metrics count.
import { LlmgwError } from '../errors/index.js';
import type { ReplicaDirectory } from '../routing/index.js';
import type { AdapterResidency } from '../upstream/index.js';
import { listsAdapters } from '../upstream/index.js';

/** The adapters the directory serves, each with its base model; none when it lists no adapters. */
export function adaptersOf(d: ReplicaDirectory): readonly { readonly name: string; readonly base: string }[] {
  return listsAdapters(d) ? d.adapters() : [];
}

/** Throws the 404 that lists what is served unless `model` is a model or an adapter served here. */
export function checkServed(d: ReplicaDirectory, model: string): void {
  const known = d.models();
  const adapters = adaptersOf(d);
  if (!known.includes(model) && !adapters.some((a) => a.name === model)) throw unknownModel(model, known, adapters);
}

// Unknown models and adapters get one 404 that lists what is served, so the client can correct itself.
function unknownModel(model: string, known: readonly string[], adapters: readonly { readonly name: string; readonly base: string }[]): LlmgwError {
  const quoted = (xs: readonly string[]): string => xs.map((m) => `"${m}"`).join(', ');
  const adapterList = adapters.length === 0 ? '' : `; adapters ${adapters.map((a) => `"${a.name}" (of "${a.base}")`).join(', ')}`;
  return new LlmgwError('LLMGW_UNKNOWN_MODEL', `model "${model}" is not served here (have models ${quoted(known)}${adapterList}); see GET /v1/models`);
}

/** What each ready replica holds; a replica that left the directory is no longer reported. */
export function residentNow(d: ReplicaDirectory, adapters: AdapterResidency | undefined): ReadonlyMap<string, readonly string[]> {
  const ready = new Set([...d.models(), ...adaptersOf(d).map((a) => a.name)].flatMap((m) => d.ready(m).map((r) => r.id)));
  return new Map([...(adapters?.resident() ?? [])].filter(([id]) => ready.has(id)));
}
