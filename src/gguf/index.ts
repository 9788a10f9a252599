// GGUF, llama.cpp's model file: a writer and a header reader, and the project's own tiny qwen3 model
// made with them, so a real engine can run in every test run without downloading a model.
export { encodeGguf, HeaderTooShort, readGgufHeader, type GgufHeader, type GgufTensor, type GgufTensorInfo, type GgufValue, type TensorType } from './format.js';
export { tinyQwen3File, type ModelFile } from './model-file.js';
export { tinyQwen3Gguf, tinyQwen3Shape, toHalf, type HfTokenizerFiles, type TinyQwen3Shape } from './tiny-qwen3.js';
