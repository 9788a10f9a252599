// The actors subsystem: shard, publisher, replica and node-agent machines, and the supervisor edge.
export { defaultAgentConfig, parseAgentConfig, type AgentConfig, type RestartPolicy, type ShardTiming } from './config.js';
export { backoffMs } from './backoff.js';
export type { ProcessExit, ProcessRecord } from './processes.js';
export {
  listDevicesWith,
  shardMachine,
  shardPhase,
  type ProcessesCommand,
  type ShardContext,
  type ShardEvent,
  type ShardInput,
  type ShardPhase,
} from './shard-machine.js';
