// link/: the agent link. Messages and their codec, CURVE keys, the agent's session, the gateway's
// control plane, and the ZeroMQ sockets that carry them between nodes.
export { AgentSession, PlacerFence, type AgentSessionOptions, type LinkState } from './agent-session.js';
export { defaultClusterConfig, parseClusterSection, type ClusterConfig, type ClusterNode } from './config.js';
export {
  ControlPlane,
  type AllowedNode,
  type ControlPlaneOptions,
  type ControlPlaneStats,
  type DeltaWriter,
  type NodeStatus,
  type Placement,
  type Placer,
  type RoutedReplica,
} from './control-plane.js';
export { ExternalReplicas, externalOwner, type ExternalReplica, type HealthGet } from './external.js';
export { keyFileText, makeKeyPair, newChallenge, proveKey, readKeyFile, writeKeyFile, z85Decode, z85Encode, type Challenge, type KeyPair } from './keys.js';
export {
  decodeAgentMessage,
  decodeGatewayMessage,
  encodeAgentMessage,
  encodeGatewayMessage,
  LinkDecodeError,
  type ActorPhase,
  type AgentMessage,
  type AssignedReplica,
  type GatewayMessage,
  type NodeInventory,
  type ReplicaState,
  type Sequenced,
} from './messages.js';
export { linkMetrics } from './metrics.js';
export { RefusalLog, type RefusalReason } from './refusals.js';
export { LinkClient, LinkServer, type LinkClientOptions, type LinkServerOptions } from './sockets.js';
