// The golden files of shared/vectors/ (vLLM's own hashes and real captured ZeroMQ frames), found
// beside the repository as CI lays them out (../shared), or where LLMGW_SHARED points.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { sharedDir } from '../support/shared.js';



/**
 * Parsed JSON of a file in shared/vectors/. Integers of 16 or more digits (the uint64 hashes) come
 * back as decimal strings: JSON.parse would round them to a double and lose the low bits.
 */
export function readVector(name: string): unknown {
  const text = readFileSync(join(sharedDir, 'vectors', name), 'utf8');
  return JSON.parse(text.replace(/([[:,]\s*)(-?\d{16,})(?=\s*[,\]}])/g, '$1"$2"'));
}

/** Bytes of a hex string (the golden files write every byte string as hex). */
export const hex = (s: string): Uint8Array => new Uint8Array(Buffer.from(s, 'hex'));

/** Hex of bytes, for readable assertion failures. */
export const toHex = (b: Uint8Array): string => Buffer.from(b.buffer, b.byteOffset, b.byteLength).toString('hex');
