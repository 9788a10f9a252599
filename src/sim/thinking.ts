// The sim's "model" when it thinks (--think-tokens N): after a generation prompt that leaves the think
// block to the model (Qwen3's template, thinking on), it writes "<think>\n", N tokens of its cycle,
// "\n</think>\n\n" and then its answer, as a Qwen3 model does. A prompt that already holds the start
// of that text after the last assistant header (a raw continuation of a thinking stream) resumes
// where it leaves off, so a gateway that continued a thinking stream elsewhere can be checked for a
// gap or a repeat at the seam in either field.
import { thinkClose, thinkOpen } from '../tokenize/index.js';

// Qwen3's generation prompt; with enable_thinking off the template writes an empty think block
// after it, and the model then answers without thinking.
const assistantHeader = '<|im_start|>assistant\n';

/** A thinking answer's tokens: its head (think block) and the answer's cycle after it. */
export interface ThinkingScript {
  readonly head: readonly number[];
  readonly cycle: readonly number[];
  /** The text of each token, to find where a continuation resumes. */
  readonly piece: (id: number) => string;
}

/** The script of a model thinking `thinkTokens` tokens of its cycle, encoded with its tokenizer. */
export async function thinkingScript(
  encode: (text: string) => Promise<number[]>,
  cycle: readonly number[],
  thinkTokens: number,
  piece: (id: number) => string,
): Promise<ThinkingScript> {
  const reasoning = Array.from({ length: thinkTokens }, (_, i) => cycle[i % cycle.length] ?? 0);
  const head = [...(await encode(`${thinkOpen}\n`)), ...reasoning, ...(await encode(`\n${thinkClose}\n\n`))];
  return { head, cycle, piece };
}

/** The token at output position i of a thinking answer. */
export function scriptToken(s: ThinkingScript, i: number): number {
  return i < s.head.length ? (s.head[i] ?? 0) : (s.cycle[(i - s.head.length) % s.cycle.length] ?? 0);
}

/**
 * Where a thinking answer starts for this prompt, or undefined when the model does not think: the
 * prompt ends with the assistant header (a fresh answer, position 0), or what follows the last
 * header begins with <think> and is the script's text up to a token boundary (a continuation, the
 * position after it). Text after the header that is not the script's is an answer already under
 * way (an empty think block, an assistant message to continue): the model does not think again.
 */
export function thinkingStart(s: ThinkingScript, prompt: string): number | undefined {
  const at = prompt.lastIndexOf(assistantHeader);
  if (at < 0) return undefined;
  const tail = prompt.slice(at + assistantHeader.length);
  if (tail === '') return 0;
  if (!tail.startsWith(thinkOpen)) return undefined;
  let matched = 0;
  // One token at least a character long each time: the loop ends within tail.length turns.
  for (let i = 0; matched < tail.length; i++) {
    const p = s.piece(scriptToken(s, i));
    if (p === '' || !tail.startsWith(p, matched)) return undefined;
    matched += p.length;
    if (matched === tail.length) return i + 1;
  }
  return undefined;
}
