// The chats a runner tokenizes right after loading a tokenizer, before the gateway says /ready: the
// first conversation after start otherwise paid for everything that happens once per thread (the
// template compiled, the splitter's and the BPE's code compiled by V8, the hashing path, and a
// worker's self-checks of our pieces against tokenizers, 8 texts encoded whole a second time),
// which made its turns 10x a warm one's (bench/conversation). Text of every kind a prompt holds,
// so the self-checks spent here test the pieces on prose, code, numbers, CJK, accents, emoji and
// runs of whitespace; sizes up to the largest text a self-check takes, so the long path is compiled too.
// The sized chats spend one piece batch's check each, and a model checks more batches than there
// are sizes (tokenize/model.ts pieceSelfChecks): short chats of their own text follow until none is
// left (checkChat), or the first turns after /ready paid 42-103 ms each for tokenizers' encodes.

const kinds = [
  'The gateway routes each request to the replica that holds the longest cached prefix of its prompt.',
  'function score(keys: BigUint64Array, slot: number): number {\n  let n = 0;\n  while (n < keys.length && held(keys[n], slot)) n++;\n  return n;\n}\n',
  '3.14159 2718 -42 1e-9 0x1F 2026-12-07T16:00:00Z $1,234.56 99.9% #7 ',
  '日本語のテキストと中文文本，한국어 문장도 함께。',
  'Zürich naïve café façade Ærøskøbing résumé ñandú Ελληνικά Русский ',
  'emoji 🙂🚀✨ and symbols → ≤ ≥ ∑ ∞ «quoted» “curly” ',
  '    indented\tline\n\n\n  trailing spaces   \r\n',
  '{"name": "lookup", "arguments": {"city": "Paris", "days": [1, 2, 3]}}',
];

// Texts from about 500 characters to just under the self-check's bound (tokenize/model.ts's
// selfCheckMaxChars, 32k), each mixing every kind in its own order.
function text(i: number, chars: number): string {
  let s = '';
  for (let k = 0; s.length < chars; k++) s += kinds[(k * (i + 3) + i) % kinds.length] ?? '';
  return s.slice(0, chars);
}

const sizes = [500, 2_000, 4_000, 8_000, 12_000, 16_000, 24_000, 30_000];

/** The warm-up chats as request bodies, a system and a user message each, in growing size. */
export function warmUpBodies(): Uint8Array[] {
  return sizes.map((chars, i) =>
    new TextEncoder().encode(JSON.stringify({ model: 'warm-up', messages: [{ role: 'system', content: text(i + 1, 200) }, { role: 'user', content: text(i, chars) }] })),
  );
}

/** Short chats a warm-up may add to spend the self-checks the sized ones left: a bound, should a check never be spent. */
export const maxCheckChats = 64;

/** Short chat `n` of those: text no earlier warm-up chat holds, so its pieces miss the segment cache and are checked. */
export function checkChat(n: number): Uint8Array {
  const content = `check ${n}: ${text(n, 300)}`;
  return new TextEncoder().encode(JSON.stringify({ model: 'warm-up', messages: [{ role: 'user', content }] }));
}
