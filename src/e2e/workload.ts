// Workloads with the shapes public serving benchmarks use, generated from a seed so every policy
// (and the oracle) replays the very same trace:
// - shared-prefix: groups of users sharing one system prompt, each asking its own question, in
//   random order (SGLang's generated-shared-prefix: groups x prompts per group, system and question
//   lengths);
// - multi-turn: sessions that resend their whole history each turn, with recorded answers (as
//   ShareGPT replays do), a turn waiting for the previous answer;
// - long-doc: long documents in the user message, several questions asked of each.
// Arrivals are Poisson at the given rate. Text is ASCII, so with the sim's byte tokenizer one
// character is one token and lengths in tokens are exact.

/** The workload shapes. */
export const shapes = ['shared-prefix', 'multi-turn', 'long-doc'] as const;

/** One workload shape's name. */
export type Shape = (typeof shapes)[number];

/** Sizes and rates; each shape reads the fields it needs. */
export interface WorkloadOptions {
  readonly shape: Shape;
  readonly seed: number;
  /** Mean arrivals per second (Poisson). */
  readonly ratePerS: number;
  /** Tokens each answer generates (max_tokens). */
  readonly outputTokens: number;
  /** shared-prefix: system prompts; long-doc: documents; multi-turn: sessions. */
  readonly groups: number;
  /** shared-prefix: users (questions) per system prompt; long-doc: questions per document; multi-turn: turns. */
  readonly perGroup: number;
  /** shared-prefix: system prompt; long-doc: document; multi-turn: the session's own system prompt. */
  readonly prefixTokens: number;
  /** The question (or, multi-turn, each user turn). */
  readonly questionTokens: number;
  /** multi-turn: each recorded assistant answer in the history. */
  readonly answerTokens: number;
}

/** A chat message as the bench sends it. */
export interface BenchMessage {
  readonly role: 'system' | 'user' | 'assistant';
  readonly content: string;
}

/** One request of a trace. */
export interface TraceRequest {
  readonly id: number;
  /** When it is due, from the start of the run. */
  readonly atMs: number;
  /** The request whose answer must have arrived before this one is sent (the previous turn). */
  readonly after: number | undefined;
  /** Its group, document or session, for reports. */
  readonly group: number;
  readonly messages: readonly BenchMessage[];
  readonly maxTokens: number;
}

/** A generated trace: its options and requests in arrival order. */
export interface Trace {
  readonly options: WorkloadOptions;
  readonly requests: readonly TraceRequest[];
}

/**
 * Defaults per shape, for two replicas of the sim's 64k-token caches: each workload's prompts need
 * between one and two caches (the case where a request goes decides whether it hits), and
 * shared-prefix arrives about as fast as round-robin can prefill its misses.
 */
export function workloadDefaults(shape: Shape): WorkloadOptions {
  const common = { shape, seed: 1, outputTokens: 16, answerTokens: 0 };
  switch (shape) {
    case 'shared-prefix':
      return { ...common, ratePerS: 12, groups: 16, perGroup: 40, prefixTokens: 6_000, questionTokens: 32 };
    case 'multi-turn':
      return { ...common, ratePerS: 4, groups: 24, perGroup: 5, prefixTokens: 1_000, questionTokens: 400, answerTokens: 300 };
    case 'long-doc':
      return { ...common, ratePerS: 1, groups: 6, perGroup: 4, prefixTokens: 16_000, questionTokens: 100 };
  }
}

/** A small deterministic generator (mulberry32): the same seed gives the same trace everywhere. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

// Words of lower-case letters: `tokens` characters exactly, starting with a tag that makes every
// text differ from its first block (two system prompts must not share a cached prefix by chance).
function text(tag: string, tokens: number, rand: () => number): string {
  let s = `${tag}: `;
  while (s.length < tokens) {
    const n = 2 + Math.floor(rand() * 8);
    for (let i = 0; i < n; i++) s += String.fromCharCode(97 + Math.floor(rand() * 26));
    s += ' ';
  }
  return s.slice(0, Math.max(1, tokens));
}

function shuffle<T>(xs: T[], rand: () => number): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    const a = xs[i];
    const b = xs[j];
    if (a === undefined || b === undefined) continue;
    xs[i] = b;
    xs[j] = a;
  }
  return xs;
}

/** Generates the trace of `o`: the same options always give the same requests and arrival times. */
export function generateTrace(o: WorkloadOptions): Trace {
  const rand = prng(o.seed);
  const units: { group: number; index: number }[] = [];
  for (let g = 0; g < o.groups; g++) for (let i = 0; i < o.perGroup; i++) units.push({ group: g, index: i });
  // Multi-turn keeps each session's turns in order, interleaving sessions at random; the others shuffle freely.
  let order: { group: number; index: number }[];
  if (o.shape === 'multi-turn') {
    const next = new Map<number, number>();
    const pool = shuffle(units.map((u) => u.group), rand);
    order = pool.map((group) => {
      const index = next.get(group) ?? 0;
      next.set(group, index + 1);
      return { group, index };
    });
  } else order = shuffle(units, rand);
  const prefixes = Array.from({ length: o.groups }, (_, g) => text(`${g} ${o.shape} ${o.seed}`, o.prefixTokens, rand));
  const lastTurn = new Map<number, number>();
  let at = 0;
  const requests = order.map(({ group, index }, id): TraceRequest => {
    // Exponential gaps: a Poisson process of rate ratePerS.
    at += (-Math.log(1 - rand()) / o.ratePerS) * 1000;
    const prefix = prefixes[group] ?? '';
    const question = text(`question ${group}.${index}`, o.questionTokens, rand);
    let messages: BenchMessage[];
    let after: number | undefined;
    switch (o.shape) {
      case 'shared-prefix':
        messages = [
          { role: 'system', content: prefix },
          { role: 'user', content: question },
        ];
        break;
      case 'long-doc':
        messages = [{ role: 'user', content: `${prefix}\n\n${question}` }];
        break;
      case 'multi-turn': {
        const history: BenchMessage[] = [{ role: 'system', content: prefix }];
        // The turns before this one, with their recorded answers; texts are regenerated from a
        // per-turn seed so turn k's history is exactly what turn k-1 sent.
        for (let k = 0; k < index; k++) {
          const r = prng(o.seed * 7919 + group * 104_729 + k);
          history.push({ role: 'user', content: text(`turn ${group}.${k}`, o.questionTokens, r) });
          history.push({ role: 'assistant', content: text(`answer ${group}.${k}`, o.answerTokens, r) });
        }
        const r = prng(o.seed * 7919 + group * 104_729 + index);
        history.push({ role: 'user', content: text(`turn ${group}.${index}`, o.questionTokens, r) });
        messages = history;
        after = lastTurn.get(group);
        lastTurn.set(group, id);
        break;
      }
    }
    return { id, atMs: at, after, group, messages, maxTokens: o.outputTokens };
  });
  return { options: o, requests };
}
