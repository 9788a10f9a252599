// Public surface of sim/: the simulated vLLM engine (HTTP API, tokenizer, prefix cache, KV events).
export { formatListDevices } from './list-devices.js';
export { awaitWorkers, checkRole, joinLeader, type Group, type NodeRole } from './multi-node.js';
export {
  parseKvEventsConfig,
  resolveSimOptions,
  simDefaults,
  type KvEventsConfig,
  type LoraModule,
  type SimFaults,
  type SimOptions,
} from './options.js';
export type { RequestAccount } from './scheduler.js';
export { parseKvTransferConfig, type KvTransferConfig, type TransferRecord } from './kv-transfer.js';
export { startSim, type SimHandle } from './server.js';
export { byteTokenizer, loadTokenizer, type SimTokenizer } from './tokenizer.js';
export { simEmbedding } from './embeddings.js';
