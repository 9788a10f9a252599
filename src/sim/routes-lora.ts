// vLLM's runtime adapter routes, /v1/load_lora_adapter and /v1/unload_lora_adapter, present only
// with VLLM_ALLOW_RUNTIME_LORA_UPDATING; their success bodies are plain text, as vLLM's are.
import type { ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { SimRequestError } from './openai.js';
import type { SimContext } from './sim-context.js';

/** POST /v1/load_lora_adapter: adds an adapter under the next lora_id after the load delay. */
export async function loadLoraAdapter(ctx: SimContext, res: ServerResponse, body: () => Promise<unknown>): Promise<void> {
  const { o } = ctx;
  const raw = await body();
  const name = loraName(raw);
  const path = (raw as { lora_path?: unknown }).lora_path;
  if (typeof path !== 'string' || path === '') throw new SimRequestError('lora_path: a non-empty string is required', { param: 'lora_path' });
  if (ctx.loras.has(name) || ctx.loading.has(name) || o.servedModelNames.includes(name)) {
    throw new SimRequestError(`The lora adapter '${name}' has already been loaded.`, { param: 'lora_name' });
  }
  ctx.loading.add(name);
  try {
    // Reading the weights and moving them to the device: the cost a router pays once per replica.
    if (o.loraLoadTimeMs > 0) await sleep(o.loraLoadTimeMs, undefined, { signal: ctx.signal });
  } finally {
    ctx.loading.delete(name);
  }
  if (o.faults.failLoraLoads?.includes(name) === true) {
    throw new SimRequestError(`Loading lora ${name} failed: No adapter found for ${path}`, { param: 'lora_path' });
  }
  ctx.loras.set(name, { id: ctx.nextLoraId++, path });
  ctx.log.info({ adapter: name, id: ctx.nextLoraId - 1 }, 'sim.lora.loaded');
  res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`Success: LoRA adapter '${name}' added successfully.`);
}

/** POST /v1/unload_lora_adapter: removes an adapter; 404 for one not loaded. */
export async function unloadLoraAdapter(ctx: SimContext, res: ServerResponse, body: () => Promise<unknown>): Promise<void> {
  const name = loraName(await body());
  if (!ctx.loras.delete(name)) throw new SimRequestError(`The lora adapter '${name}' cannot be found.`, { status: 404, type: 'NotFoundError', param: 'lora_name' });
  res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' }).end(`Success: LoRA adapter '${name}' removed successfully.`);
}

function loraName(raw: unknown): string {
  const n = (raw as { lora_name?: unknown } | null)?.lora_name;
  if (typeof n !== 'string' || n === '') throw new SimRequestError('lora_name: a non-empty string is required', { param: 'lora_name' });
  return n;
}
