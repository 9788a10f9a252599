// Writing a file so that a crash at any moment leaves either its old bytes or its new ones, never a
// mix: the agent's state directory is read back by a successor that may follow a kill -9 or a
// power cut, and a torn KV stream there costs every cached conversation its precise route.
import { closeSync, fsyncSync, openSync, renameSync, writeSync } from 'node:fs';
import { dirname } from 'node:path';

/** The steps of a durable write, in order; a crash after any of them leaves the old or the new file whole. */
export const durableWriteSteps = ['opened', 'half-written', 'written', 'synced', 'renamed', 'dir-synced'] as const;

/** One step of a durable write. */
export type DurableWriteStep = (typeof durableWriteSteps)[number];

/** How a durable write is made; `onStep` hears each step as it completes (tests crash the process there). */
export interface DurableWriteOptions {
  readonly mode: number;
  readonly onStep?: ((step: DurableWriteStep) => void) | undefined;
}

/**
 * Replaces `file` with `bytes`: written to a temporary file beside it and fsynced, renamed over it,
 * then the directory fsynced. A rename alone survives a killed process (the page cache outlives it)
 * but not a power cut: without the first fsync the new name can point at a file whose data never
 * reached the disk, and without the second the rename itself can be lost.
 */
export function writeDurably(file: string, bytes: Uint8Array, o: DurableWriteOptions): void {
  const tmp = `${file}.tmp`;
  const step = o.onStep ?? ((): void => undefined);
  const fd = openSync(tmp, 'w', o.mode);
  try {
    step('opened');
    const half = bytes.byteLength >> 1;
    writeAll(fd, bytes.subarray(0, half));
    step('half-written');
    writeAll(fd, bytes.subarray(half));
    step('written');
    fsyncSync(fd);
    step('synced');
  } finally {
    closeSync(fd);
  }
  renameSync(tmp, file);
  step('renamed');
  const dir = openSync(dirname(file), 'r');
  try {
    fsyncSync(dir);
  } finally {
    closeSync(dir);
  }
  step('dir-synced');
}

// writeSync may write fewer bytes than asked (a full disk answers with an error instead).
function writeAll(fd: number, bytes: Uint8Array): void {
  for (let at = 0; at < bytes.byteLength; ) at += writeSync(fd, bytes, at, bytes.byteLength - at);
}
