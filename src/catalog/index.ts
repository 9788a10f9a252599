// catalog/: the models, their profiles and the replicas wanted, parsed and validated against the engines.
export { cpuClass, parseModels, parseReplicas, profileOf, validateCatalog } from './catalog.js';
export type { Catalog, EngineLookup, ExternalEndpoint, Model, ReplicaSet } from './catalog.js';
