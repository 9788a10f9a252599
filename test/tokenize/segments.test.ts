// Where a text is cut into pieces encoded apart, when that is unsafe, and the cache of pieces.
import { strict as assert } from 'node:assert';
import { test } from 'node:test';
import { byteModel, dependentSegments, IncrementalEncoder, type Encoded, prefixStable, SegmentCache, sharedChars, splitterOf, type TokenizerModel } from '../../src/tokenize/index.js';

// What an encode hands its caller, copied while it stands (a later encode may write over the ids).
const snap = (e: Encoded): { ids: number[]; base: number[] | undefined; same: number; buffer: ArrayBufferLike } => ({
  ids: [...e.ids],
  base: e.base === undefined ? undefined : [...e.base],
  same: e.same,
  buffer: e.ids.buffer,
});

const qwenLike = {
  added_tokens: [{ id: 1, content: '<|im_start|>', lstrip: false, rstrip: false, single_word: false, normalized: false, special: true }],
  normalizer: { type: 'NFC' },
  pre_tokenizer: { type: 'Sequence', pretokenizers: [{ type: 'Split' }, { type: 'ByteLevel' }] },
};
const rows: readonly { why: string; json: unknown; dependent: RegExp | undefined }[] = [
  { why: 'NFC and ByteLevel work piece by piece (Qwen, Llama 3)', json: qwenLike, dependent: undefined },
  {
    why: 'an added token with lstrip takes the space before it from its neighbour',
    json: { ...qwenLike, added_tokens: [{ id: 1, content: '<mask>', lstrip: true }] },
    dependent: /lstrip/,
  },
  { why: 'a normalized added token is matched after normalizing, which the split does not see', json: { ...qwenLike, added_tokens: [{ id: 1, content: 'x', normalized: true }] }, dependent: /normalized/ },
  {
    why: "Metaspace's prepend_scheme first marks only the text's first piece",
    json: { ...qwenLike, pre_tokenizer: { type: 'Metaspace', replacement: '▁', prepend_scheme: 'first' } },
    dependent: /first piece/,
  },
  { why: 'Metaspace always prepending is the same for every piece', json: { ...qwenLike, pre_tokenizer: { type: 'Metaspace', prepend_scheme: 'always' } }, dependent: undefined },
  { why: 'a component we do not know is not assumed safe', json: { ...qwenLike, normalizer: { type: 'Sequence', normalizers: [{ type: 'NFC' }, { type: 'FutureThing' }] } }, dependent: /FutureThing/ },
];
for (const r of rows) {
  void test(`dependentSegments: ${r.why}`, () => {
    const why = dependentSegments(r.json);
    if (r.dependent === undefined) assert.equal(why, undefined);
    else assert.match(why ?? '', r.dependent);
  });
}

void test('splitter: the longest added token wins where two start at the same place', () => {
  const split = splitterOf([{ id: 1, content: '<a>' }, { id: 2, content: '<a><b>' }, { id: 3, content: '|' }]);
  assert.deepEqual(split('x<a><b>y<a>|'), ['x', 2, 'y', 1, 3]);
});

void test('cache: bounded in bytes; a piece used since its generation turned over is kept, one left unused is dropped', () => {
  const one = 10 * 2 + 4 * 4 + 96;
  const c = new SegmentCache({ maxBytes: 4 * one });
  const ids = Uint32Array.of(1, 2, 3, 4);
  c.set('aaaaaaaaaa', ids);
  c.set('bbbbbbbbbb', ids);
  c.set('cccccccccc', ids);
  assert.ok(c.get('aaaaaaaaaa'));
  c.set('dddddddddd', ids);
  assert.equal(c.get('bbbbbbbbbb'), undefined, 'b was not used since its generation turned over');
  assert.ok(c.get('aaaaaaaaaa') && c.get('cccccccccc') && c.get('dddddddddd'));
  assert.ok(c.stats.bytes <= 4 * one);
});

void test('encoder: pieces that turn out to depend on each other are caught by the first checks, and it encodes whole from then on', async () => {
  // A tokenizer whose whole-text ids are not its pieces laid end to end (as a Metaspace "first" would).
  const model: TokenizerModel = {
    source: 'fake',
    template: { template: '', specialTokens: {} },
    split: splitterOf([{ id: 9, content: '|' }]),
    dependent: undefined,
    prefixStable: true,
    added: new Map([[9, '|']]),
    around: { before: new Uint32Array(0), after: new Uint32Array(0) },
    encodePieces: (texts) => Promise.resolve(texts.map((t) => Uint32Array.of(t.length))),
    pieceEncoder: { name: 'bytes' },
    encodeWhole: (text) => Promise.resolve(Uint32Array.of(text.length, 0)),
  };
  const enc = new IncrementalEncoder(model, { cacheBytes: 1 << 20, selfChecks: 2 });
  assert.deepEqual([...(await enc.encode('ab|c', false))], [4, 0], 'the check answers with the whole encode');
  assert.match(enc.stats.broken ?? '', /differ/);
  assert.deepEqual([...(await enc.encode('ab|cd', false))], [5, 0]);
  assert.equal(enc.stats.whole, 1);
});

void test('prefixStable: pieces up to an added token stand whatever follows, unless one added token holds another', () => {
  const qwenLike = ['<|im_start|>', '<|im_end|>', '<think>', '</think>', '<tool_call>', '</tool_call>'].map((content, i) => ({ id: 100 + i, content }));
  assert.equal(prefixStable(qwenLike), true);
  assert.equal(prefixStable([...qwenLike, { id: 200, content: 'x<|im_end|>' }]), false, 'a match could start before an end and run past it');
  assert.equal(prefixStable([{ id: 1, content: '<a>' }, { id: 1, content: '<bb>' }]), false, 'one id, two lengths');
  assert.equal(prefixStable([{ id: 1, content: '<a>' }, { id: 1, content: '<a>' }]), true);
});

void test('encoder: a next turn takes the ids of the pieces it shares up to the last added token, and encodes only the rest', async () => {
  const model = byteModel();
  const enc = new IncrementalEncoder(model, { cacheBytes: 1 << 20, selfChecks: 0, rememberMinChars: 0 });
  const turn1 = '<|im_start|>user\nhello, and a question long enough to be found again<|im_end|>\n<|im_start|>assistant\n';
  const turn2 = `${turn1}hi there<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n`;
  const first = await enc.encodeExtending(turn1, false, snap);
  assert.equal(first.base, undefined);
  const second = await enc.encodeExtending(turn2, false, snap);
  assert.deepEqual(second.ids, [...(await model.encodeWhole(turn2, false))]);
  // Everything of turn 1 up to its last added token, '<|im_start|>' before "assistant\n".
  const upTo = turn1.lastIndexOf('<|im_start|>') + '<|im_start|>'.length;
  assert.equal(second.same, (await model.encodeWhole(turn1.slice(0, upTo), false)).length);
  assert.deepEqual((second.base ?? []).slice(0, second.same), second.ids.slice(0, second.same));
  // An edit of the assistant's answer: only the pieces before it are shared.
  const edited = turn2.replace('hi there', 'HI there');
  const third = await enc.encodeExtending(edited, false, snap);
  assert.deepEqual(third.ids, [...(await model.encodeWhole(edited, false))]);
  assert.equal(third.same, second.same, 'up to the <|im_start|> before the edited answer');
  assert.equal(enc.stats.extended, 2);
});

void test('encoder: a text shorter than rememberMinChars is encoded from the cache alone and not remembered; a longer one is', async () => {
  const model = byteModel();
  const enc = new IncrementalEncoder(model, { cacheBytes: 1 << 20, selfChecks: 0, rememberMinChars: 1000 });
  const turn = (doc: string): [string, string] => {
    const t1 = `<|im_start|>user\n${doc}<|im_end|>\n<|im_start|>assistant\n`;
    return [t1, `${t1}hi there<|im_end|>\n<|im_start|>user\nmore<|im_end|>\n<|im_start|>assistant\n`];
  };
  const [short1, short2] = turn('a short question, long enough for a head of its own though');
  await enc.encodeExtending(short1, false, snap);
  const second = await enc.encodeExtending(short2, false, snap);
  assert.equal(second.base, undefined, 'nothing of the short first turn was remembered');
  assert.deepEqual(second.ids, [...(await model.encodeWhole(short2, false))]);
  assert.equal(enc.stats.extended, 0);
  const [long1, long2] = turn(`a document: ${'some of its words '.repeat(60)}`);
  await enc.encodeExtending(long1, false, snap);
  const next = await enc.encodeExtending(long2, false, snap);
  assert.notEqual(next.base, undefined, 'the long first turn was remembered and extended');
  assert.deepEqual(next.ids, [...(await model.encodeWhole(long2, false))]);
  assert.equal(enc.stats.extended, 1);
});

// A conversation as the gateway sees it: each answered turn is prepared with a stand-in user message
// ('.'), then the real next turn parts from it at that message. Long enough for its ids' buffer to
// have room to grow (short texts are copied: it costs less).
const opening = `<|im_start|>user\nhello, and a document long enough to be found again: ${'words of it '.repeat(400)}<|im_end|>\n<|im_start|>assistant\n`;
const prepared = (answer: string): string => `${opening}${answer}<|im_end|>\n<|im_start|>user\n.<|im_end|>\n<|im_start|>assistant\n`;
const nextTurn = (answer: string, question: string): string => `${opening}${answer}<|im_end|>\n<|im_start|>user\n${question}<|im_end|>\n<|im_start|>assistant\n`;

void test("encoder: a conversation's next turn lays its ids in the buffer of the turn it extends, and a text written over is never taken from again", async () => {
  const model = byteModel();
  const enc = new IncrementalEncoder(model, { cacheBytes: 1 << 20, selfChecks: 0 });
  const first = await enc.encodeExtending(prepared('hi there'), false, snap);
  const second = await enc.encodeExtending(nextTurn('hi there', 'and then?'), false, snap);
  assert.deepEqual(second.ids, [...(await model.encodeWhole(nextTurn('hi there', 'and then?'), false))]);
  assert.equal(second.buffer, first.buffer, 'no copy of the ids the turns share');
  // The stand-in text again: its ids were written over by the real turn's, so it is not taken from them.
  const again = await enc.encodeExtending(prepared('hi there'), false, snap);
  assert.deepEqual(again.ids, first.ids);
  // An edit that parts from every text earlier than they end, and the texts it wrote over, again.
  for (const t of [nextTurn('HI there', 'and then?'), prepared('hi there'), nextTurn('hi there', 'and then?'), nextTurn('hi there', 'and now?')]) {
    assert.deepEqual((await enc.encodeExtending(t, false, snap)).ids, [...(await model.encodeWhole(t, false))], t);
  }
});

void test('encoder: a prompt sent again and again is laid over itself in one buffer 64 times, then in a new one', async () => {
  const model = byteModel();
  const enc = new IncrementalEncoder(model, { cacheBytes: 1 << 22, selfChecks: 0 });
  const text = nextTurn('hi there', 'and then?');
  const want = [...(await model.encodeWhole(text, false))];
  const buffers = new Set<ArrayBufferLike>();
  for (let i = 0; i < 70; i++) {
    const got = await enc.encodeExtending(text, false, snap);
    assert.deepEqual(got.ids, want);
    buffers.add(got.buffer);
  }
  assert.equal(buffers.size, 2, 'one run takes the first text and 64 laid over it; the rest go to a second');
});

void test('encoder: two texts extending one earlier text at once both get exact ids, whichever writes in its buffer first', async () => {
  const model = byteModel();
  const enc = new IncrementalEncoder(model, { cacheBytes: 1 << 20, selfChecks: 0 });
  const base = prepared('hi there');
  await enc.encodeExtending(base, false, snap);
  // One parts from the base early (at the answer), the other takes all of it and more: the early
  // one writes over the ids the later one wants while both wait for their pieces.
  const early = nextTurn('bye now', 'why?');
  const late = `${base}more<|im_end|>\n`;
  for (const order of [
    [early, late],
    [late, early],
  ]) {
    const got = await Promise.all(order.map((t) => enc.encodeExtending(t, false, snap)));
    for (const [i, t] of order.entries()) assert.deepEqual(got[i]?.ids, [...(await model.encodeWhole(t, false))], t);
    await enc.encodeExtending(base, false, snap);
  }
});

void test('encoder: a tokenizer whose added tokens nest keeps nothing between texts, and its ids stay exact', async () => {
  const nested = [{ id: 300, content: '<e>' }, { id: 301, content: '<e>!' }];
  const model: TokenizerModel = { ...byteModel(), split: splitterOf(nested), prefixStable: prefixStable(nested), added: new Map(nested.map((t) => [t.id, t.content])) };
  const enc = new IncrementalEncoder(model, { cacheBytes: 1 << 20, selfChecks: 0 });
  const long = 'x'.repeat(64);
  await enc.encodeExtending(`${long}<e>b`, false, snap);
  const next = await enc.encodeExtending(`${long}<e>!b`, false, snap);
  assert.equal(next.base, undefined);
  assert.deepEqual(next.ids.slice(64), [301, 98]);
});

void test('sharedChars: the leading characters two texts share, whether their parts are cut alike or not', () => {
  const content = 'a long message '.repeat(100);
  assert.equal(sharedChars(['<|im_start|>', 'user', '\n', content, '<|im_end|>'], ['<|im_start|>', 'user', '\n', content, '<|im_end|>', 'more']), 12 + 4 + 1 + content.length + 10);
  assert.equal(sharedChars(['abc', 'def'], ['abX', 'def']), 2, 'the first differing part counts its common start');
  assert.equal(sharedChars(['ab', 'cdef'], ['abc', 'def']), 6, 'cut differently, all 6 shared');
  assert.equal(sharedChars(['ab', 'cdef'], ['abc', 'dXf']), 4, 'cut differently, differing inside a part');
  // A checked render is one part, the compiled render of the same chat many.
  const parts = ['<|im_start|>', 'user', '\n', content, '<|im_end|>\n'];
  assert.equal(sharedChars([parts.join('')], [...parts, '<|im_start|>assistant\n']), parts.join('').length);
  assert.equal(sharedChars(['', 'ab', '', 'c'], ['a', '', 'bc', 'd']), 3, 'empty parts are passed over');
  assert.equal(sharedChars([], ['x']), 0);
});
