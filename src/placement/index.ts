// placement/: which devices and ports each shard of each wanted replica gets on this node.
export { defaultNodeConfig, devicesOfClass, parseNodeConfig } from './node.js';
export type { NodeConfig, NodeDevice, NodePorts } from './node.js';
export { place, profileFingerprint } from './place.js';
export type { EngineLookup } from './place.js';
