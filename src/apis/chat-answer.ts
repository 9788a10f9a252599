// What an engine's chat completion says, read once for every client protocol: the whole JSON answer
// as one message, and each streamed chunk as the deltas it carries. The protocols differ only in
// how they write these out.
import { isRecord } from './fields.js';

/** Token counts of one answer, as the engine reported them. */
export interface ChatUsage {
  readonly promptTokens: number;
  readonly completionTokens: number;
  /** Prompt tokens the engine found in its prefix cache (0 when it did not say). */
  readonly cachedTokens: number;
}

/** One tool call of the answer; `arguments` is the JSON text the model wrote. */
export interface ChatToolCall {
  readonly id: string;
  readonly name: string;
  readonly arguments: string;
}

/** A whole answer: its text, reasoning, tool calls, why it ended and what it cost. */
export interface ChatAnswer {
  readonly text: string;
  readonly reasoning: string;
  readonly toolCalls: readonly ChatToolCall[];
  /** OpenAI's finish_reason: stop, length, tool_calls… */
  readonly finishReason: string | null;
  /** vLLM's stop_reason: the stop string (or token id) that ended the answer, when one did. */
  readonly stopReason: string | number | null;
  readonly usage: ChatUsage | undefined;
}

/** One thing a streamed chunk says. */
export type ChatDelta =
  | { readonly type: 'text'; readonly text: string }
  | { readonly type: 'reasoning'; readonly text: string }
  | { readonly type: 'tool'; readonly index: number; readonly id: string | undefined; readonly name: string | undefined; readonly arguments: string }
  | { readonly type: 'finish'; readonly reason: string; readonly stopReason: string | number | null }
  | { readonly type: 'usage'; readonly usage: ChatUsage };

const str = (v: unknown): string => (typeof v === 'string' ? v : '');

function usageOf(v: unknown): ChatUsage | undefined {
  if (!isRecord(v) || typeof v.prompt_tokens !== 'number') return undefined;
  const d = v.prompt_tokens_details;
  const cached = isRecord(d) && typeof d.cached_tokens === 'number' ? d.cached_tokens : 0;
  return { promptTokens: v.prompt_tokens, completionTokens: typeof v.completion_tokens === 'number' ? v.completion_tokens : 0, cachedTokens: cached };
}

// vLLM named the field reasoning_content until 0.10.2 and reasoning after; an engine of either
// version is read, whichever it wrote.
const reasoningOf = (m: Record<string, unknown>): string => str(m.reasoning) || str(m.reasoning_content);

const stopReasonOf = (v: unknown): string | number | null => (typeof v === 'string' || typeof v === 'number' ? v : null);

/** Reads an engine's whole chat completion (choice 0); undefined when it is not one. */
export function chatAnswerOf(body: unknown): ChatAnswer | undefined {
  if (!isRecord(body) || !Array.isArray(body.choices)) return undefined;
  const choice: unknown = body.choices[0];
  if (!isRecord(choice) || !isRecord(choice.message)) return undefined;
  const m = choice.message;
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  const toolCalls = calls.filter(isRecord).map((c) => {
    const f = isRecord(c.function) ? c.function : {};
    return { id: str(c.id), name: str(f.name), arguments: str(f.arguments) };
  });
  return {
    text: str(m.content),
    reasoning: reasoningOf(m),
    toolCalls,
    finishReason: typeof choice.finish_reason === 'string' ? choice.finish_reason : null,
    stopReason: stopReasonOf(choice.stop_reason),
    usage: usageOf(body.usage),
  };
}

/** The deltas of one streamed chunk, in the order a client should see them. */
export function chatDeltasOf(chunk: unknown): ChatDelta[] {
  if (!isRecord(chunk)) return [];
  const out: ChatDelta[] = [];
  const choice: unknown = Array.isArray(chunk.choices) ? chunk.choices[0] : undefined;
  if (isRecord(choice)) {
    const d = isRecord(choice.delta) ? choice.delta : {};
    const reasoning = reasoningOf(d);
    if (reasoning !== '') out.push({ type: 'reasoning', text: reasoning });
    const text = str(d.content);
    if (text !== '') out.push({ type: 'text', text });
    for (const c of Array.isArray(d.tool_calls) ? d.tool_calls : []) {
      if (!isRecord(c)) continue;
      const f = isRecord(c.function) ? c.function : {};
      out.push({
        type: 'tool',
        index: typeof c.index === 'number' ? c.index : 0,
        id: typeof c.id === 'string' ? c.id : undefined,
        name: typeof f.name === 'string' ? f.name : undefined,
        arguments: str(f.arguments),
      });
    }
    if (typeof choice.finish_reason === 'string') out.push({ type: 'finish', reason: choice.finish_reason, stopReason: stopReasonOf(choice.stop_reason) });
  }
  const usage = usageOf(chunk.usage);
  if (usage !== undefined) out.push({ type: 'usage', usage });
  return out;
}

/** One SSE event with a name, as both Responses and Messages stream them. */
export const sseEvent = (name: string, data: unknown): string => `event: ${name}\ndata: ${JSON.stringify(data)}\n\n`;
