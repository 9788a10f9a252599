// placement/: which devices and ports each shard of each wanted replica gets on this node.
export { defaultNodeConfig, devicesOfClass, parseNodeConfig, withDiscovered } from './node.js';
export type { NodeConfig, NodeDevice, NodePorts } from './node.js';
export { cpuThreads, place, placeCluster, profileFingerprint } from './place.js';
export type { ClusterNodeConfig, ClusterPlacement, EngineLookup, PlacedShard, PlaceOptions } from './place.js';
export { devicesByClassLines, profileFitLines } from './views.js';
