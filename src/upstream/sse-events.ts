// Cutting an engine's SSE stream into whole events, in time linear in its length whatever the
// engine sends. The stream before this was searched from the start of the unfinished event on every
// chunk: an engine that never wrote a blank line made each read rescan everything so far, and 16 MiB
// of that held the event loop for seconds (other clients waited 5-10 s; at 64 MiB the agent's
// health checks timed out and a healthy engine was killed).

/** An SSE event longer than the bound: the engine is broken or hostile, and its answer is failed. */
export class EventTooLargeError extends Error {
  readonly code = 'LLMGW_UPSTREAM_EVENT_TOO_LARGE';
}

// The blank line that ends an event; vLLM writes "\n\n", other servers "\r\n\r\n".
const SEPARATOR = /\r?\n\r?\n/g;
// The longest separator less one: what of the unfinished event's end a new chunk may complete a
// separator with.
const CARRY_CHARS = 3;

/** Splits SSE text into events, each with its blank line; every character is searched once. */
export class EventSplitter {
  readonly #maxEventChars: number;
  // The unfinished event, in the pieces it arrived in (joined once, when it ends).
  #parts: string[] = [];
  #partsChars = 0;
  // The unfinished event's last few characters, searched again with the next chunk.
  #carry = '';

  /** `maxEventChars`: the longest event accepted, separator included. */
  constructor(maxEventChars: number) {
    this.#maxEventChars = maxEventChars;
  }

  /** The events `chunk` completes, in order; throws EventTooLargeError once the unfinished one is over the bound. */
  push(chunk: string): string[] {
    const events: string[] = [];
    const shift = this.#carry.length;
    const probe = shift === 0 ? chunk : this.#carry + chunk;
    SEPARATOR.lastIndex = 0;
    let from = 0;
    for (let m = SEPARATOR.exec(probe); m !== null; m = SEPARATOR.exec(probe)) {
      // The carry held no whole separator, so every match ends inside this chunk.
      const end = m.index + m[0].length - shift;
      const piece = chunk.slice(from, end);
      this.#check(this.#partsChars + piece.length);
      events.push(this.#parts.length === 0 ? piece : this.#parts.join('') + piece);
      this.#parts = [];
      this.#partsChars = 0;
      from = end;
    }
    const rest = from === 0 ? chunk : chunk.slice(from);
    if (rest !== '') {
      this.#check(this.#partsChars + rest.length);
      this.#parts.push(rest);
      this.#partsChars += rest.length;
    }
    this.#carry = (from === 0 ? probe : rest).slice(-CARRY_CHARS);
    return events;
  }

  /** The unfinished event (what came after the last blank line), and forgets it. */
  rest(): string {
    const r = this.#parts.join('');
    this.#parts = [];
    this.#partsChars = 0;
    this.#carry = '';
    return r;
  }

  #check(chars: number): void {
    if (chars > this.#maxEventChars) {
      throw new EventTooLargeError(`an SSE event is over ${this.#maxEventChars} characters without its blank line (gateway.upstream.max_event_bytes)`);
    }
  }
}
