// The replay client: asks an engine's replay ROUTER for the batches from a sequence number on, and
// reads the frames both the live and the replay socket carry. The sequencer calls it on a gap.
import { Dealer } from 'zeromq';
import type { ReplayResult, SeqFrame } from './sequencer.js';

const END_MARKER = 0xffff_ffff_ffff_ffffn;
const MAX_REPLAY_MESSAGES = 1_000_000;

/** The 8-byte big-endian unsigned sequence frame, or undefined when it is not one we can use. */
export function readSeq(frame: Uint8Array): number | 'end' | undefined {
  if (frame.byteLength !== 8) return undefined;
  const v = new DataView(frame.buffer, frame.byteOffset, 8).getBigUint64(0, false);
  if (v === END_MARKER) return 'end';
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) return undefined;
  return Number(v);
}

/** The 8-byte big-endian form of a sequence number, as vLLM's replay request wants it. */
export function seqFrame(seq: number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt(seq), false);
  return out;
}

/**
 * Reads one replay reply as a DEALER receives it: `["", seq, payload]` up to v0.25 and
 * `["", topic, seq, payload]` from v0.26 on, each ending with a marker whose seq is all ones.
 */
export function parseReplayReply(frames: readonly Uint8Array[]): SeqFrame | 'end' | { malformed: string } {
  if (frames.length !== 3 && frames.length !== 4) return { malformed: `${frames.length} frames, wanted 3 or 4` };
  const delimiter = frames[0];
  if (delimiter === undefined || delimiter.byteLength !== 0) return { malformed: 'first frame is not the empty delimiter' };
  const seqAt = frames.length === 3 ? 1 : 2;
  const seqBytes = frames[seqAt];
  const payload = frames[seqAt + 1];
  if (seqBytes === undefined || payload === undefined) return { malformed: 'missing frames' };
  const seq = readSeq(seqBytes);
  if (seq === undefined) return { malformed: `sequence frame of ${seqBytes.byteLength} bytes is not a usable uint64` };
  if (seq === 'end') return 'end';
  return { seq, payload };
}

/**
 * Asks a vLLM replay ROUTER for every batch from `from` on through a fresh DEALER (a REQ socket
 * would get only the first reply). A fresh socket per request means a late answer to an earlier,
 * abandoned request can never be mistaken for this one's.
 */
export async function requestReplay(
  endpoint: string,
  from: number,
  o: { timeoutMs: number; signal: AbortSignal },
): Promise<ReplayResult> {
  const dealer = new Dealer({ linger: 0, receiveTimeout: o.timeoutMs });
  const onAbort = (): void => dealer.close();
  o.signal.addEventListener('abort', onAbort, { once: true });
  try {
    dealer.connect(endpoint);
    await dealer.send([new Uint8Array(0), seqFrame(from)]);
    const frames: SeqFrame[] = [];
    for (let n = 0; n < MAX_REPLAY_MESSAGES; n++) {
      let reply: Buffer[];
      try {
        reply = await dealer.receive();
      } catch (e) {
        if (o.signal.aborted) return { ok: false, reason: 'replay-unavailable', detail: 'subscriber closed' };
        if ((e as { code?: unknown }).code === 'EAGAIN') {
          return {
            ok: false,
            reason: 'replay-timeout',
            detail: `${endpoint} sent ${frames.length === 0 ? 'no answer' : `${frames.length} batches and no end marker`} within ${o.timeoutMs} ms`,
          };
        }
        throw e;
      }
      const parsed = parseReplayReply(reply);
      if (parsed === 'end') return { ok: true, frames };
      if ('malformed' in parsed) return { ok: false, reason: 'replay-unavailable', detail: `malformed reply: ${parsed.malformed}` };
      frames.push(parsed);
    }
    return { ok: false, reason: 'replay-unavailable', detail: `more than ${MAX_REPLAY_MESSAGES} replies and no end marker` };
  } finally {
    o.signal.removeEventListener('abort', onAbort);
    if (!dealer.closed) dealer.close();
  }
}
