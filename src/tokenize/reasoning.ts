// A thinking model's answer split into its reasoning and its content, as vLLM's reasoning parsers
// split it (--reasoning-parser qwen3 | deepseek_r1): the text between <think> and </think> is the
// reasoning, what follows is the content, the tags themselves are in neither. Shared by the sim (its
// answers) and the gateway (a thinking stream continued as raw text on another replica): both must
// cut the same text at the same place, or a migrated stream would show its seam.
//
// vLLM works on token ids, where each tag is one token; this works on text and holds back a tail
// that could still become a tag, so a tag split across deltas (a tokenizer without the added token,
// a delta of several tokens) is cut exactly where the whole text would be.

/** The reasoning parsers the sim and the gateway know, by vLLM's names. */
export const reasoningParsers = ['qwen3', 'deepseek_r1'] as const;

/** One of vLLM's reasoning parser names. */
export type ReasoningParserName = (typeof reasoningParsers)[number];

/** True when `s` names a reasoning parser we know. */
export const isReasoningParser = (s: string): s is ReasoningParserName => (reasoningParsers as readonly string[]).includes(s);

/** What a piece of answer text adds to each field. */
export interface ReasoningDelta {
  readonly reasoning: string;
  readonly content: string;
}

export const thinkOpen = '<think>';
export const thinkClose = '</think>';

/** Where a stream stands: before any tag, inside the think block, or past it. */
export type ThinkState = 'before' | 'thinking' | 'answering';

// The longest tail of `text` that is a proper start of one of `tags`: it may still become the tag.
function heldTail(text: string, tags: readonly string[]): number {
  let best = 0;
  for (const tag of tags) {
    for (let n = Math.min(tag.length - 1, text.length); n > best; n--) {
      if (text.endsWith(tag.slice(0, n))) {
        best = n;
        break;
      }
    }
  }
  return best;
}

/**
 * Splits a streamed answer as vLLM's streaming reasoning parsers do. Text before any tag is content
 * for qwen3 (its template leaves <think> for the model to write, so an answer without one did not
 * think) and reasoning for deepseek_r1 (R1's template writes <think> into the prompt, so the model
 * starts inside it). A </think> that never comes leaves everything after <think> as reasoning.
 */
export class ReasoningSplitter {
  readonly #parser: ReasoningParserName;
  #state: ThinkState;
  #held = '';

  /** `state` is where the text begins: 'thinking' for a continuation whose prompt ends inside the think block. */
  constructor(parser: ReasoningParserName, state: ThinkState = 'before') {
    this.#parser = parser;
    this.#state = state;
  }

  get state(): ThinkState {
    return this.#state;
  }

  /** Adds answer text; returns what is now safe to show in each field. */
  push(piece: string): ReasoningDelta {
    let text = this.#held + piece;
    this.#held = '';
    let reasoning = '';
    let content = '';
    for (;;) {
      if (this.#state === 'answering') {
        content += text;
        return { reasoning, content };
      }
      const open = this.#state === 'before' ? text.indexOf(thinkOpen) : -1;
      const close = text.indexOf(thinkClose);
      if (open >= 0 && (close < 0 || open < close)) {
        // vLLM drops what comes before <think> in its delta; a model writes the tag first anyway.
        text = text.slice(open + thinkOpen.length);
        this.#state = 'thinking';
        continue;
      }
      if (close >= 0) {
        reasoning += text.slice(0, close);
        text = text.slice(close + thinkClose.length);
        this.#state = 'answering';
        continue;
      }
      const hold = heldTail(text, this.#state === 'before' ? [thinkOpen, thinkClose] : [thinkClose]);
      const shown = text.slice(0, text.length - hold);
      this.#held = text.slice(text.length - hold);
      if (this.#state === 'thinking' || this.#parser === 'deepseek_r1') reasoning += shown;
      else content += shown;
      return { reasoning, content };
    }
  }

  /** The held-back tail at the end of the answer: it never became a tag. */
  flush(): ReasoningDelta {
    const tail = this.#held;
    this.#held = '';
    const asReasoning = this.#state === 'thinking' || (this.#state === 'before' && this.#parser === 'deepseek_r1');
    return asReasoning ? { reasoning: tail, content: '' } : { reasoning: '', content: tail };
  }
}

/**
 * Splits a whole answer as vLLM's non-streaming parsers do; null where a field is absent. qwen3 needs
 * both tags, else the whole text is content (so an answer cut off mid-think is content when whole,
 * reasoning when streamed: vLLM's own difference, kept); deepseek_r1 without </think> is all reasoning.
 */
export function splitReasoning(parser: ReasoningParserName, text: string): { reasoning: string | null; content: string | null } {
  const open = text.indexOf(thinkOpen);
  if (parser === 'qwen3' && (open < 0 || !text.includes(thinkClose, open))) return { reasoning: null, content: text };
  const inner = open >= 0 ? text.slice(open + thinkOpen.length) : text;
  const close = inner.indexOf(thinkClose);
  if (close < 0) return { reasoning: inner, content: null };
  const content = inner.slice(close + thinkClose.length);
  return { reasoning: inner.slice(0, close), content: content === '' ? null : content };
}
