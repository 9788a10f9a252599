// A chat resends its whole conversation every turn: the body of turn N+1 is the body of turn N up
// to the end of its last message, then the new messages and the fields after them. Parsing 400 KB
// of JSON again each turn cost 2-3 ms on the thread that proxies every stream. This parser keeps
// recent bodies with the byte offsets where each element of their top-level "messages" array
// ends; a body that begins with one of them up to such an offset reuses the parsed messages before
// it and parses only the rest. The JSON grammar makes that exact: after those identical bytes a
// parser is inside the top-level object, inside its "messages" array, after an element, and the
// rest is parsed from that same state behind a stand-in opening.
import { LlmgwError } from '../errors/index.js';
import { parseBoundedJson, type JsonLimits } from './json.js';

const QUOTE = 0x22;
const BACKSLASH = 0x5c;
const OPEN_ARRAY = 0x5b;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const COLON = 0x3a;
const COMMA = 0x2c;
const messagesKey = Buffer.from('"messages"');

// The state a scan resumes in: how deep, whether inside the top-level "messages" array.
interface ScanState {
  depth: number;
  inMessages: boolean;
}

/**
 * Offsets just after each element of the top-level "messages" array in `bytes[from..]`, scanning
 * from `state`. A key spelled with escapes is not recognised: such a body is simply parsed whole.
 */
function messageEnds(bytes: Uint8Array, from: number, state: ScanState, ends: number[]): void {
  let { depth, inMessages } = state;
  // Where the last string at depth 1 started, and whether a colon followed it: the key of the value that comes next.
  let keyAt = -1;
  let keyIsMessages = false;
  for (let i = from; i < bytes.length; i++) {
    const c = bytes[i];
    if (c === QUOTE) {
      const start = i;
      for (i = bytes.indexOf(QUOTE, i + 1); i >= 0; i = bytes.indexOf(QUOTE, i + 1)) {
        let slashes = 0;
        while (bytes[i - slashes - 1] === BACKSLASH) slashes++;
        if (slashes % 2 === 0) break;
      }
      if (i < 0) return;
      if (depth === 1) keyAt = start;
    } else if (c === COLON && depth === 1) {
      keyIsMessages = keyAt >= 0 && Buffer.compare(bytes.subarray(keyAt, keyAt + messagesKey.length), messagesKey) === 0;
    } else if (c === COMMA && depth === 1) {
      keyIsMessages = false;
      keyAt = -1;
    } else if (c === OPEN_ARRAY || c === OPEN_OBJECT) {
      if (depth === 1 && c === OPEN_ARRAY && keyIsMessages) inMessages = true;
      depth++;
    } else if (c === CLOSE_ARRAY || c === CLOSE_OBJECT) {
      depth--;
      if (inMessages && depth === 2 && c === CLOSE_OBJECT) ends.push(i + 1);
      if (inMessages && depth === 1) inMessages = false;
    }
  }
}

interface Kept {
  readonly bytes: Buffer;
  /** Offsets just after each message. */
  readonly ends: readonly number[];
  readonly messages: readonly unknown[];
  /** The top-level fields before "messages", in order. */
  readonly before: readonly (readonly [string, unknown])[];
}

// A stand-in for the bytes before a message end: the same parser state, and a key no body uses
// (checked after parsing) under which the rest of the messages array lands.
const standIn = '\u0000llmgw-rest';
const opening = Buffer.from('{"\\u0000llmgw-rest":[0');

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** What parse() did: 'whole', or 'extended' with the bytes it did not parse again. */
export type ExtendOutcome = { readonly how: 'whole' } | { readonly how: 'extended'; readonly reusedBytes: number };

// Bodies are found again by their first bytes; conversations that share those (a common system
// prompt) are told apart by the longest run of messages in common.
const headBytes = 256;
const perHead = 4;

/** Parses chat bodies, taking the messages of a recent body that the new one begins with. */
export class ChatBodyParser {
  readonly #limits: JsonLimits;
  readonly #minBytes: number;
  readonly #maxBytes: number;
  readonly #kept = new Map<string, Kept[]>();
  #keptBytes = 0;
  /** How the last body was parsed (for tests and the bench). */
  last: ExtendOutcome = { how: 'whole' };

  /**
   * `limits` bound every body as parseBoundedJson does; bodies under `minBytes` are parsed whole
   * and not kept (they parse in microseconds); kept bodies are bounded by `maxBytes` in all (0:
   * none kept).
   */
  constructor(o: { limits: JsonLimits; minBytes?: number; maxBytes?: number }) {
    this.#limits = o.limits;
    this.#minBytes = o.minBytes ?? 16 * 1024;
    this.#maxBytes = o.maxBytes ?? 64 * 1024 * 1024;
  }

  /**
   * The body parsed, as JSON.parse would give it; throws as parseBoundedJson does. Bytes that fill
   * their own buffer may be kept as they are: the caller must not write to them after.
   */
  parse(raw: Uint8Array, what = 'JSON document'): unknown {
    if (raw.length < this.#minBytes || this.#maxBytes === 0) {
      this.last = { how: 'whole' };
      return parseBoundedJson(raw, this.#limits, what);
    }
    if (raw.length > this.#limits.maxBytes) {
      throw new LlmgwError('LLMGW_JSON_LIMIT', `${what} of ${raw.length} bytes is over the limit of ${this.#limits.maxBytes} bytes`);
    }
    const bytes = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
    const head = bytes.toString('latin1', 0, headBytes);
    let best: { kept: Kept; k: number } | undefined;
    for (const kept of this.#kept.get(head) ?? []) {
      const k = sharedMessages(bytes, kept);
      if (k > (best?.k ?? 0)) best = { kept, k };
    }
    const extended = best === undefined ? undefined : this.#extend(head, bytes, best.kept, best.k, what);
    if (extended !== undefined) return extended;
    this.last = { how: 'whole' };
    const body = parseBoundedJson(bytes, this.#limits, what);
    this.#keep(head, bytes, body);
    return body;
  }

  #extend(head: string, bytes: Buffer, kept: Kept, k: number, what: string): Record<string, unknown> | undefined {
    const at = kept.ends[k - 1] ?? 0;
    const rest = Buffer.concat([opening, bytes.subarray(at)]);
    // The stand-in opens as deep as the body is at that point: the depth bound holds as it would.
    const tail = parseBoundedJson(rest, { maxDepth: this.#limits.maxDepth, maxBytes: rest.length }, what);
    if (!isRecord(tail) || 'messages' in tail) return undefined;
    const more = tail[standIn];
    if (!Array.isArray(more) || more[0] !== 0) return undefined;
    const messages = [...kept.messages.slice(0, k), ...more.slice(1)];
    const body: Record<string, unknown> = {};
    for (const [key, v] of kept.before) body[key] = v;
    body.messages = messages;
    for (const [key, v] of Object.entries(tail)) if (key !== standIn) body[key] = v;
    const ends = kept.ends.slice(0, k);
    messageEnds(bytes, at, { depth: 2, inMessages: true }, ends);
    if (ends.length === messages.length) this.#store(head, { bytes: keptBytes(bytes), ends, messages, before: kept.before });
    this.last = { how: 'extended', reusedBytes: at };
    return body;
  }

  #keep(head: string, bytes: Buffer, body: unknown): void {
    if (!isRecord(body) || !Array.isArray(body.messages)) return;
    // An integer-like key is listed first by Object.entries whatever its place in the text, so
    // which fields came before "messages" cannot be told: such a body is not kept.
    if (Object.keys(body).some((key) => /^(0|[1-9]\d*)$/.test(key))) return;
    const ends: number[] = [];
    messageEnds(bytes, 0, { depth: 0, inMessages: false }, ends);
    const messages: unknown[] = body.messages;
    // Offsets that do not match the parse one to one (a non-object element, an escaped key) are not kept.
    if (ends.length !== messages.length || ends.length === 0) return;
    const before: [string, unknown][] = [];
    for (const [key, v] of Object.entries(body)) {
      if (key === 'messages') break;
      before.push([key, v]);
    }
    this.#store(head, { bytes: keptBytes(bytes), ends, messages, before });
  }

  #store(head: string, k: Kept): void {
    if (k.bytes.length > this.#maxBytes) return;
    const list = this.#kept.get(head) ?? [];
    // A body the new one begins with is dropped: the new one holds all of its messages and more.
    const keep = list.filter((x) => sharedMessages(k.bytes, x) < x.ends.length);
    while (keep.length >= perHead) keep.pop();
    for (const x of list) if (!keep.includes(x)) this.#keptBytes -= x.bytes.length;
    this.#kept.delete(head);
    this.#kept.set(head, [k, ...keep]);
    this.#keptBytes += k.bytes.length;
    for (const [h, l] of this.#kept) {
      if (this.#keptBytes <= this.#maxBytes) break;
      this.#kept.delete(h);
      for (const x of l) this.#keptBytes -= x.bytes.length;
    }
  }
}

// A body that fills a buffer of its own (a request read whole, a task's moved bytes) is kept as it
// is, since nobody writes to it after: copying 400 KB every turn was a third of this parser's time.
// A view into a shared buffer (Node's pool) is copied, as that memory is reused.
function keptBytes(b: Buffer): Buffer {
  return b.byteOffset === 0 && b.byteLength === b.buffer.byteLength ? b : Buffer.from(b);
}

// How many leading messages `bytes` shares with a kept body, byte for byte up to their ends. Most
// often all of them (the next turn); else the longest run, by halving.
function sharedMessages(bytes: Buffer, kept: Kept): number {
  const same = (n: number): boolean => {
    const end = kept.ends[n - 1] ?? 0;
    // A kept buffer moved away since (detached: no bytes) matches nothing.
    return end <= bytes.length && end <= kept.bytes.length && bytes.compare(kept.bytes, 0, end, 0, end) === 0;
  };
  if (same(kept.ends.length)) return kept.ends.length;
  let lo = 0;
  let hi = kept.ends.length - 1;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (same(mid)) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}
