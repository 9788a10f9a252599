// engines/: pure command construction. Describes what to run; starts nothing, reads nothing.
export type { Adapter, Command, DisaggRole, CpuFallback, Engine, GpuInfo, HelpCommand, Host, KvEventsPublisher, ModelTask, Pooling, Profile, ShardSpec } from './types.js';
export { embeddingArgs, embeds, isModelTask, isPooling, modelTasks, poolings, validateTask } from './embedding.js';
export { canFallBackToCpu, hasHelpCommand, publishesKvEvents } from './types.js';
export { apiKeyVars, baseEnv, isLeader, listenHost, materializeEnv, ncclEnv, onMig, unsafeEnv } from './env.js';
export type { EnvMap, EnvVerdict } from './env.js';
export { ProfileError, gpusPerShard, quantizationOf, requireComputeCapability, validateCommon } from './validate.js';
export type { ProfileField } from './validate.js';
export { dataParallelSizeOf, flagValue, hasFlag } from './argv.js';
export { IPC_PATH_MAX, kvEventsEndpoints, kvEventsTopic, kvIpcFits, kvIpcPaths, vllmKvEventsArgs, vllmKvEventsEnv } from './kv-events.js';
export type { KvEventsEndpoints, KvEventsPorts } from './kv-events.js';
export {
  defaultEnginesConfig,
  defaultKvEventsConfig,
  engineNames,
  hashAlgos,
  launchModes,
  parseEnginesConfig,
  parseKvEventsConfig,
} from './config.js';
export type { EnginesConfig, KvEventsConfig, LlamaCppConfig, SglangConfig, SimConfig, TrtllmConfig, VllmConfig } from './config.js';
// The type engines' section parsers record problems in, for callers that name it through engines/.
export { llamaCppAdapterAccess, servesAdapters, sglangAdapterAccess, vllmAdapterAccess } from './lora.js';
export type { AdapterAccess, AdapterRoute, EngineCall, ServesAdapters } from './lora.js';
export { Vllm, loraModules, schedulingPolicyArgs, schedulingPolicyOf } from './vllm.js';
export { LlamaCpp, modelFileOf, parseDevices, pickGguf } from './llamacpp.js';
export type { GgufPick } from './llamacpp.js';
export { Sglang, sglangKeyVar } from './sglang.js';
export { Trtllm } from './trtllm.js';
export { Sim } from './sim.js';
export { Registry } from './registry.js';
export { blockSizeArgOf, bootstrapPortOf, disaggOf, disaggRoles, sglangBootstrapPortDefault, sglangDisaggArgs, vllmKvTransferArgs } from './disagg.js';
export type { Disagg, DisaggProtocol } from './disagg.js';
