// How a running engine serves a profile's LoRA adapters, as plain data the gateway acts on: the HTTP
// call that loads or unloads one at run time, and what a request naming one must carry. Built here,
// beside the command lines that register the same adapters, so the two cannot disagree; sent by the
// gateway, which never learns which engine it is talking to.
import { flagValue } from './argv.js';
import type { Adapter, Profile } from './types.js';

/** One JSON POST to an engine; `path` is relative to its base URL. */
export interface EngineCall {
  readonly path: string;
  readonly body: Readonly<Record<string, unknown>>;
}

/** How one adapter is reached on a running replica. */
export interface AdapterRoute {
  readonly name: string;
  /** Fields set on a request naming the adapter before it goes to the engine; empty: sent as written. */
  readonly requestFields: Readonly<Record<string, unknown>>;
  /** Loads it at run time; undefined when the engine registered it at start and always holds it. */
  readonly load: EngineCall | undefined;
  readonly unload: EngineCall | undefined;
}

/** A replica's adapters, and how many it may hold loaded at once (undefined: the gateway's bound). */
export interface AdapterAccess {
  readonly adapters: readonly AdapterRoute[];
  readonly maxLoaded: number | undefined;
}

/** An engine whose replicas serve LoRA adapters. */
export interface ServesAdapters {
  adapterAccess(profile: Profile): AdapterAccess;
}

/** True when the engine can serve LoRA adapters (TensorRT-LLM takes them only through its own file). */
export const servesAdapters = (e: object): e is ServesAdapters => 'adapterAccess' in e;

// The name the engine serves the base model under, as its builder passes it.
const servedName = (p: Profile): string => (p.servedModelName !== '' ? p.servedModelName : p.modelPath);

function positiveFlag(args: readonly string[], ...names: readonly string[]): number | undefined {
  const v = Number(flagValue(args, ...names));
  return Number.isInteger(v) && v > 0 ? v : undefined;
}

// What vLLM and SGLang share: on demand (runtime_lora) each adapter is loaded by name and path and
// unloaded by name through the engine's own routes, and the engine states its bound in one flag.
function loadedByName(
  p: Profile,
  routes: { load: string; unload: string; boundFlag: string },
  requestFields: (a: Adapter) => Readonly<Record<string, unknown>>,
): AdapterAccess {
  return {
    adapters: p.adapters.map((a) => ({
      name: a.name,
      requestFields: requestFields(a),
      load: p.runtimeLora ? { path: routes.load, body: { lora_name: a.name, lora_path: a.path } } : undefined,
      unload: p.runtimeLora ? { path: routes.unload, body: { lora_name: a.name } } : undefined,
    })),
    maxLoaded: p.runtimeLora ? positiveFlag(p.args, routes.boundFlag) : undefined,
  };
}

/** vLLM (and the sim): the adapter's name is the request's model; on demand through /v1/load_lora_adapter. */
export function vllmAdapterAccess(p: Profile): AdapterAccess {
  // vLLM keeps every adapter loaded over HTTP registered, but holds only --max-cpu-loras of their
  // weights in memory and reads the rest from disk again at their next request: holding more than
  // that trades the gateway's one load for a hidden reload on every switch.
  return loadedByName(p, { load: '/v1/load_lora_adapter', unload: '/v1/unload_lora_adapter', boundFlag: '--max-cpu-loras' }, () => ({}));
}

/** SGLang: the base model's name with `lora_path` naming the adapter (the form old and new releases
 * both take); on demand through /load_lora_adapter. */
export function sglangAdapterAccess(p: Profile): AdapterAccess {
  const model = servedName(p);
  return loadedByName(p, { load: '/load_lora_adapter', unload: '/unload_lora_adapter', boundFlag: '--max-loaded-loras' }, (a) => ({ model, lora_path: a.name }));
}

/** llama.cpp: every adapter is loaded at start at scale zero, and a request applies one by its index
 * in the profile at scale one. It cannot load at run time. */
export function llamaCppAdapterAccess(p: Profile): AdapterAccess {
  const model = servedName(p);
  return {
    adapters: p.adapters.map((a, id) => ({ name: a.name, requestFields: { model, lora: [{ id, scale: 1 }] }, load: undefined, unload: undefined })),
    maxLoaded: undefined,
  };
}
