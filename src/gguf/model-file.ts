// The tiny qwen3 model as a file: made once into a cache directory and reused while its inputs (this
// writer's version, the shape, the tokenizer files) are unchanged, so a test run or a bench pays the
// few seconds of writing it once per machine, not once per start.
import { createHash } from 'node:crypto';
import { createWriteStream, existsSync, mkdirSync, readFileSync, renameSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { LlmgwError } from '../errors/index.js';
import { tinyQwen3Gguf, tinyQwen3Shape, type TinyQwen3Shape } from './tiny-qwen3.js';

// Bumped whenever the bytes written for the same inputs change, so a stale file is never reused.
const WRITER_VERSION = 2;

/** Where the model is, and whether this call made it. */
export interface ModelFile {
  readonly path: string;
  readonly made: boolean;
}

/**
 * The path of the tiny qwen3 GGUF for the tokenizer in `tokenizerDir` (its tokenizer.json and
 * tokenizer_config.json) under `cacheDir`, written first when it is not there. Written to a temporary
 * name and renamed, so a concurrent maker or a crash never leaves half a model under the real name.
 */
export async function tinyQwen3File(o: { cacheDir: string; tokenizerDir: string; shape?: TinyQwen3Shape }): Promise<ModelFile> {
  const shape = o.shape ?? tinyQwen3Shape;
  let tokenizerText: string;
  let configText: string;
  try {
    tokenizerText = readFileSync(join(o.tokenizerDir, 'tokenizer.json'), 'utf8');
    configText = readFileSync(join(o.tokenizerDir, 'tokenizer_config.json'), 'utf8');
  } catch (e) {
    throw new LlmgwError('LLMGW_GGUF_FORMAT', `tokenizer files in ${o.tokenizerDir} cannot be read (${e instanceof Error ? e.message : String(e)}); point at a directory with tokenizer.json and tokenizer_config.json`, { cause: e });
  }
  const key = createHash('sha256').update(JSON.stringify({ WRITER_VERSION, shape })).update(tokenizerText).update(configText).digest('hex').slice(0, 16);
  const path = join(o.cacheDir, `tiny-qwen3-${key}.gguf`);
  if (existsSync(path)) return { path, made: false };
  mkdirSync(o.cacheDir, { recursive: true });
  const chunks = tinyQwen3Gguf({ tokenizer: JSON.parse(tokenizerText) as unknown, config: JSON.parse(configText) as unknown }, shape);
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    await pipeline(chunks, createWriteStream(tmp));
    renameSync(tmp, path);
  } finally {
    rmSync(tmp, { force: true });
  }
  return { path, made: true };
}
