// The sim's chat answers with --reasoning-parser: the raw text (after stop strings) split into
// vLLM's `reasoning` and `content` fields. vLLM named the field reasoning_content until PR 27752
// (Nov 2025) and removed that name in PR 33402 (Jan 2026); the sim writes the current one only, so
// a gateway that reads only the old name fails against it as it would against vLLM.
import { ReasoningSplitter, splitReasoning } from '../tokenize/index.js';
import type { ReasoningDelta, ReasoningParserName } from '../tokenize/index.js';

/** A chat delta's fields: content only without a parser, reasoning and/or content with one. */
export type ChatDelta = Readonly<Record<string, string>>;

function deltaOf(d: ReasoningDelta): ChatDelta | undefined {
  const out: Record<string, string> = {};
  if (d.reasoning !== '') out.reasoning = d.reasoning;
  if (d.content !== '') out.content = d.content;
  return Object.keys(out).length > 0 ? out : undefined;
}

/** One chat answer's text as the client sees it, streamed or whole. */
export class ChatAnswerFields {
  readonly #parser: ReasoningParserName | undefined;
  readonly #splitter: ReasoningSplitter | undefined;

  constructor(parser: ReasoningParserName | undefined) {
    this.#parser = parser;
    this.#splitter = parser === undefined ? undefined : new ReasoningSplitter(parser);
  }

  /** The delta to stream for this text, or undefined when nothing can be shown yet (a tag under way, a tag alone). */
  push(text: string): ChatDelta | undefined {
    if (this.#splitter === undefined) return text === '' ? undefined : { content: text };
    return deltaOf(this.#splitter.push(text));
  }

  /** What was held back at the end of the answer. */
  flush(): ChatDelta | undefined {
    return this.#splitter === undefined ? undefined : deltaOf(this.#splitter.flush());
  }

  /** The whole message's text fields. */
  whole(text: string): { content: string | null; reasoning?: string | null } {
    if (this.#parser === undefined) return { content: text };
    const s = splitReasoning(this.#parser, text);
    return { content: s.content, reasoning: s.reasoning };
  }
}
