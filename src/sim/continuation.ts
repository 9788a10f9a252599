// Where the sim's own text picks up when it is asked to continue it. The sim's "model" writes one
// fixed cycle of tokens; a request whose text to continue (a chat's final assistant message under
// continue_final_message, a completion's prompt) ends with the start of that text resumes after it,
// as a model continues its own answer. Without this a continued answer restarted the cycle, and a
// gateway that spliced a migrated stream could not be checked for a gap or a repeat at the seam.

/**
 * The output position (in tokens of the cycle) to continue from: the longest tail of `text` that is
 * the cycle's text read from its start, ending on a token boundary; 0 when `text` ends with none of it.
 * `pieces` are the cycle's tokens as text. Cost: one backward scan per token boundary of the cycle.
 */
export function continuationOffset(text: string, pieces: readonly string[]): number {
  const cycle = pieces.join('');
  const period = cycle.length;
  if (period === 0 || text === '') return 0;
  let best = 0;
  let bestChars = 0;
  let boundary = 0;
  for (let k = 0; k < pieces.length; k++) {
    boundary += pieces[k]?.length ?? 0;
    // How far `text`, read backwards, agrees with the cycle read backwards from this boundary.
    const end = boundary % period;
    let matched = 0;
    while (matched < text.length && text[text.length - 1 - matched] === cycle[(end - 1 - (matched % period) + 2 * period) % period]) matched++;
    // The tail must begin where the cycle begins: its length is this boundary plus whole cycles.
    const whole = Math.floor((matched - boundary) / period);
    const chars = boundary + whole * period;
    if (whole >= 0 && chars > bestChars) {
      bestChars = chars;
      best = whole * pieces.length + k + 1;
    }
  }
  return best;
}
