// The actors subsystem: shard, publisher, replica and node-agent machines, and the supervisor edge.
export { defaultAgentConfig, parseAgentConfig, parseAgentSection, type AgentConfig, type RestartPolicy, type ShardTiming } from './config.js';
export { backoffMs, drawJitter } from './backoff.js';
export type { ProcessExit, ProcessRecord } from './processes.js';
export {
  countInFlightWith,
  listDevicesWith,
  shardMachine,
  shardPhase,
  shardPhaseOf,
  shardPhases,
  type ProcessesCommand,
  type ShardContext,
  type ShardEvent,
  type ShardInput,
  type ShardPhase,
} from './shard-machine.js';
export { noKvSink, publisherMachine, streamEventsTo, type KvSink, type KvStateStore, type OpenKvStream, type PublisherContext, type PublisherEvent, type PublisherInput } from './publisher-machine.js';
export { replicaMachine, replicaPhase, replicaPhaseOf, replicaPhases, type ReplicaContext, type ReplicaEvent, type ReplicaInput, type ReplicaPhase, type ShardView } from './replica-machine.js';
export { agentMachine, reconcile, type AgentContext, type AgentEvent, type Reconciled, type RunningReplica } from './agent-machine.js';
export { ActorBoard, actorKinds, allCharts, machinesByKind, phaseOf, type ActorKind, type ActorTransition, type ActorView, type ReportedActor } from './board.js';
export { chartOf, eventsOf, statesOf, type Chart, type ChartState, type ChartTransition } from './chart.js';
export { stateId, toDot, toMermaid, toSvg } from './chart-draw.js';
export { createInspector, publicRecord, type EventRecord, type InspectRecord, type SnapshotRecord } from './inspect.js';
export { installedEngines, installEngine, versionLine, type InstalledEngine } from './engine-install.js';
export { durableWriteSteps, writeDurably, type DurableWriteStep } from './durable-file.js';
export { ensurePrivateDir, shardFingerprint, StateDir, type ShardRecord } from './state-dir.js';
export { NodeAgent, type EngineSource, type NodeAgentOptions, type ReadyReplica, type ReplicaPlan } from './node-agent.js';
export { planReplicas, type PlanFacts } from './plans.js';
