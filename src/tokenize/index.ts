// Public surface of tokenize/: chat rendering as vLLM does it, model tokenizers, and incremental
// encoding by pieces between added tokens. Used by the sim (its /tokenize) and the workers (routing).
export {
  ChatError,
  chatInputOf,
  chatmlTemplate,
  conversationOf,
  readTemplateConfig,
  renderChat,
  renderChatParts,
  templateConfigOf,
  templateMode,
  vllmTools,
  type ChatInput,
  type ChatMessage,
  type RenderOptions,
  type TemplateConfig,
} from './chat.js';
export { NotExactHere, pyFloatRepr, pyJsonLoads } from './py-json.js';
export { defaultRememberMinChars, IncrementalEncoder, promptTextOf, sharedChars, type Encoded, type EncoderStats, type PromptText } from './incremental.js';
export {
  byteModel,
  byteSpecials,
  byteTemplate,
  firstDifference,
  ggufModel,
  hfModel,
  loadTokenizerModel,
  PieceEncoderNews,
  pieceEncoderName,
  piecesModelOf,
  piecesSnapshotOf,
  qwen3TokenizerFile,
  tokenizerFileOf,
  type PieceEncoder,
  type PiecesSnapshot,
  type TokenizerModel,
} from './model.js';
export { addedTokensOf, dependentSegments, prefixStable, SegmentCache, splitterOf, type AddedToken, type Segment, type SegmentStats } from './segments.js';
export {
  isReasoningParser,
  ReasoningSplitter,
  reasoningParsers,
  splitReasoning,
  thinkClose,
  thinkOpen,
  type ReasoningDelta,
  type ReasoningParserName,
  type ThinkState,
} from './reasoning.js';
