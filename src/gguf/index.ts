// GGUF, llama.cpp's model file: a writer and a header reader, the project's own tiny qwen3 model
// made with them, so a real engine can run in every test run without downloading a model, and a
// model's tokenizer rebuilt from its metadata, so the gateway tokenizes what llama-server serves.
export { encodeGguf, HeaderTooShort, readGgufHeader, type GgufHeader, type GgufTensor, type GgufTensorInfo, type GgufValue, type TensorType } from './format.js';
export { readGgufHeaderFile } from './header-file.js';
export { tinyQwen3File, type ModelFile } from './model-file.js';
export { tinyQwen3Gguf, tinyQwen3Shape, toHalf, type HfTokenizerFiles, type TinyQwen3Shape } from './tiny-qwen3.js';
export { ggufTokenizer, type GgufTokenizer } from './tokenizer-json.js';
