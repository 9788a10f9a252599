// The actors subsystem: shard, publisher, replica and node-agent machines, and the supervisor edge.
export { defaultAgentConfig, parseAgentConfig, parseAgentSection, type AgentConfig, type RestartPolicy, type ShardTiming } from './config.js';
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
export { awaitIdleWith } from './shard-machine.js';
export { noKvSink, publisherMachine, streamEventsTo, type KvSink, type KvStateStore, type OpenKvStream, type PublisherContext, type PublisherEvent, type PublisherInput } from './publisher-machine.js';
export { replicaMachine, replicaPhase, type ReplicaContext, type ReplicaEvent, type ReplicaInput, type ReplicaPhase, type ShardView } from './replica-machine.js';
export { agentMachine, type AgentContext, type AgentEvent } from './agent-machine.js';
export { createInspector, publicRecord, type EventRecord, type InspectRecord, type SnapshotRecord } from './inspect.js';
export { shardFingerprint, StateDir, type ShardRecord } from './state-dir.js';
export { NodeAgent, type ActorStatus, type EngineSource, type NodeAgentOptions, type ReadyReplica, type ReplicaPlan } from './node-agent.js';
export { planReplicas, type PlanFacts } from './plans.js';
