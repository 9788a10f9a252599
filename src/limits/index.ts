// limits/: bounds on what comes from outside, shared by the gateway, the workers, the agent and the
// sim. A leaf: every folder may use it, it uses only errors/.
export { jsonDepth, parseBoundedJson } from './json.js';
export type { JsonLimits } from './json.js';
export { DeadlineError, withDeadline } from './deadline.js';
export { embeddingBase64, embeddingLimits, parseEmbeddingRequest } from './embeddings.js';
export type { EmbeddingInput, EmbeddingRequest } from './embeddings.js';
export { ChatBodyParser, type ExtendOutcome } from './json-extend.js';
export {
  defaultRequestPolicy,
  isParsedRequest,
  parsedRequestOf,
  parseGenerationRequest,
  parseRequestJson,
  promptKeys,
  type Endpoint,
  type GenerationRequest,
  type ParseAnswer,
  type ParsedRequest,
  type ParseTask,
  type RequestPolicy,
} from './request.js';
