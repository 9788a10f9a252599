// The Batch API (issue 50): files and batches over the store, and the runner that sends each line
// through the gateway's own request path at the batch priority.
export { batchDefaults, batchKeys, parseBatchSection } from './config.js';
export type { BatchConfig } from './config.js';
export { parseBatchFile } from './lines.js';
export type { BatchLine, LineError } from './lines.js';
export { parseMultipart } from './multipart.js';
export { BatchRunner } from './runner.js';
export type { LineAnswer, LineSender, RunnerOptions } from './runner.js';
export { batchObject, BatchService, completionWindowMs, fileObject } from './service.js';
export { InnerKeys } from './inner-key.js';
