// Untrusted JSON, parsed only once it is known to be shallow and small enough. V8's JSON.parse
// takes any depth, but everything after it (JSON.stringify for the engine, walks over messages)
// recurses: a field nested 10,000 deep overflowed the gateway's stack and came back as a 500.
import { LlmgwError } from '../errors/index.js';

/** How deep and how big a JSON document may be. */
export interface JsonLimits {
  /** Nesting of arrays and objects; the document's top-level object is depth 1. */
  readonly maxDepth: number;
  readonly maxBytes: number;
}

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;

/**
 * The deepest nesting in `bytes` (UTF-8 JSON), stopping as soon as it passes `stopAbove`. Works on
 * bytes, not a string: brackets, quotes and backslashes are ASCII and never part of a multi-byte
 * character, and one pass over a Buffer is several times cheaper than over a decoded string.
 */
export function jsonDepth(bytes: Uint8Array, stopAbove = Infinity): number {
  let depth = 0;
  let max = 0;
  for (let i = 0; i < bytes.length; i++) {
    const c = bytes[i];
    if (c === QUOTE) {
      i = stringEnd(bytes, i + 1);
      if (i < 0) return max; // unterminated: JSON.parse reports it
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      depth++;
      if (depth > max) {
        max = depth;
        if (max > stopAbove) return max;
      }
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) depth--;
  }
  return max;
}

// The index of the quote closing a string that starts at `from`, or -1. A prompt is mostly string
// bytes: the native indexOf skips them several times faster than a loop looking at each one.
function stringEnd(bytes: Uint8Array, from: number): number {
  for (let q = bytes.indexOf(QUOTE, from); q >= 0; q = bytes.indexOf(QUOTE, q + 1)) {
    let slashes = 0;
    while (q - slashes - 1 >= from && bytes[q - slashes - 1] === BACKSLASH) slashes++;
    if (slashes % 2 === 0) return q;
  }
  return -1;
}

/**
 * JSON.parse behind a size and depth check. Throws LlmgwError LLMGW_JSON_LIMIT naming the limit
 * passed (the caller turns it into its own 400), or LLMGW_BAD_JSON when the text is not JSON.
 */
export function parseBoundedJson(raw: Uint8Array | string, limits: JsonLimits, what = 'JSON document'): unknown {
  const bytes = typeof raw === 'string' ? Buffer.from(raw, 'utf8') : raw;
  if (bytes.length > limits.maxBytes) {
    throw new LlmgwError('LLMGW_JSON_LIMIT', `${what} of ${bytes.length} bytes is over the limit of ${limits.maxBytes} bytes`);
  }
  if (jsonDepth(bytes, limits.maxDepth) > limits.maxDepth) {
    throw new LlmgwError('LLMGW_JSON_LIMIT', `${what} nests arrays and objects deeper than the limit of ${limits.maxDepth} levels`);
  }
  const text = typeof raw === 'string' ? raw : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength).toString('utf8');
  try {
    return JSON.parse(text);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    throw new LlmgwError('LLMGW_BAD_JSON', `${what} is not valid JSON (${why})`, { cause: e });
  }
}
