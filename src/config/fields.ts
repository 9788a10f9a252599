// Reading one YAML section into typed values while collecting every problem, each with its path, the
// bad value and the fix, so an operator corrects a config in one pass. Unknown keys are problems: a
// typo must not silently become a default. Every section parser (engines, catalog, node, agent,
// gateway) uses this, so all of them report in the same words.
import type { ConfigIssue } from '../errors/index.js';

/** Where a section parser records problems; the composed loader throws them all at once. */
export type Issues = ConfigIssue[];

/** A section parser: the raw YAML value (undefined when the key is absent) to a typed, frozen value. */
export type SectionParser<T> = (raw: unknown, path: string, issues: Issues) => T;

/** A YAML value as an operator wrote it, for messages. */
export function shown(v: unknown): string {
  if (v === undefined) return 'nothing';
  if (v === null) return 'null';
  if (typeof v === 'string') return JSON.stringify(v);
  if (Array.isArray(v)) return 'a list';
  if (typeof v === 'object') return 'a map';
  return String(v);
}

// Levenshtein distance, for "did you mean": a typo is usually one or two keystrokes from the key meant.
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) {
      const sub = (prev[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1);
      cur.push(Math.min((prev[j] ?? 0) + 1, (cur[j - 1] ?? 0) + 1, sub));
    }
    prev = cur;
  }
  return prev[b.length] ?? 0;
}

/** The known name closest to a misspelt one, when it is close enough to be what was meant. */
export function nearest(name: string, known: readonly string[]): string | undefined {
  let best: string | undefined;
  let bestD = Infinity;
  for (const k of known) {
    const d = editDistance(name.toLowerCase(), k.toLowerCase());
    if (d < bestD) {
      best = k;
      bestD = d;
    }
  }
  return best !== undefined && bestD <= Math.max(2, Math.floor(best.length / 3)) ? best : undefined;
}

/** "unknown key" with the nearest known key, or the list of known ones. */
export function unknownKeyMessage(key: string, known: readonly string[]): string {
  const near = nearest(key, known);
  return near !== undefined ? `unknown key (did you mean ${JSON.stringify(near)}?)` : `unknown key (known: ${known.join(', ')})`;
}

/** Deep-freezes a parsed value: configuration is read once and never changed downstream. */
export function deepFreeze<T>(v: T): T {
  if (typeof v === 'object' && v !== null && !Object.isFrozen(v)) {
    for (const child of Object.values(v)) deepFreeze(child);
    Object.freeze(v);
  }
  return v;
}

/** A YAML map being read: each getter reports a wrong type at its path and returns the default, so
 * parsing continues and every problem is found. Created by `readMap`, which checks unknown keys. */
export class MapReader {
  readonly path: string;
  readonly raw: Readonly<Record<string, unknown>>;
  readonly #issues: Issues;

  constructor(raw: Readonly<Record<string, unknown>>, path: string, issues: Issues) {
    this.raw = raw;
    this.path = path;
    this.#issues = issues;
  }

  /** The path of a key in this map, for messages and nested readers. */
  at(key: string): string {
    return this.path === '' ? key : `${this.path}.${key}`;
  }

  /** Records a problem at `key` of this map. */
  problem(key: string, message: string): void {
    this.#issues.push({ path: this.at(key), message });
  }

  has(key: string): boolean {
    return this.raw[key] !== undefined && this.raw[key] !== null;
  }

  string(key: string, dflt: string): string {
    const v = this.raw[key];
    if (v === undefined || v === null) return dflt;
    if (typeof v === 'string') return v;
    this.problem(key, `${shown(v)} is not a string; write it in quotes, e.g. ${key}: "${String(v)}"`);
    return dflt;
  }

  /** A non-empty string: for a path or an address, where "" would be taken for a real value. */
  text(key: string, dflt: string): string {
    if (this.raw[key] !== '') return this.string(key, dflt);
    this.problem(key, dflt === '' ? '"" is empty; write a value' : `"" is empty; write a value, or leave the key out for ${shown(dflt)}`);
    return dflt;
  }

  /** A whole number of at least `min` (and at most `max`, when given). */
  int(key: string, dflt: number, min = 0, max?: number): number {
    const v = this.raw[key];
    if (v === undefined || v === null) return dflt;
    if (typeof v === 'number' && Number.isInteger(v) && v >= min && (max === undefined || v <= max)) return v;
    const want = max === undefined ? `of at least ${min}` : `from ${min} to ${max}`;
    this.problem(key, `${shown(v)} is not a whole number ${want}; write e.g. ${key}: ${Math.max(min, dflt)}`);
    return dflt;
  }

  /** A value `accept` takes; anything else is a problem saying it is not `want` (which carries the fix). */
  value<T>(key: string, dflt: T, accept: (v: unknown) => v is T, want: string): T {
    const v = this.raw[key];
    if (v === undefined || v === null) return dflt;
    if (accept(v)) return v;
    this.problem(key, `${shown(v)} is not ${want}`);
    return dflt;
  }

  bool(key: string, dflt: boolean): boolean {
    const v = this.raw[key];
    if (v === undefined || v === null) return dflt;
    if (typeof v === 'boolean') return v;
    this.problem(key, `${shown(v)} is not true or false`);
    return dflt;
  }

  /** One of a fixed set of strings. */
  oneOf<T extends string>(key: string, choices: readonly T[], dflt: T): T {
    const v = this.string(key, dflt);
    const hit = choices.find((c) => c === v);
    if (hit !== undefined) return hit;
    this.problem(key, `${shown(v)} is not one of ${choices.map((c) => JSON.stringify(c)).join(', ')}`);
    return dflt;
  }

  strings(key: string): readonly string[] {
    const v = this.raw[key];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) {
      this.problem(key, `${shown(v)} is not a list of strings; write ${key}: [a, b]`);
      return [];
    }
    const out: string[] = [];
    v.forEach((item: unknown, i) => {
      if (typeof item === 'string') out.push(item);
      else this.#issues.push({ path: `${this.at(key)}[${i}]`, message: `${shown(item)} is not a string; write it in quotes` });
    });
    return out;
  }

  /** A map of string to string (an environment). Numbers and booleans are refused rather than
   * converted: `FOO: 010` would otherwise arrive as "8". */
  stringMap(key: string): Readonly<Record<string, string>> {
    const m = readMap(this.raw[key], this.at(key), this.#issues, undefined);
    const out: Record<string, string> = {};
    if (m === undefined) return out;
    for (const [k, v] of Object.entries(m.raw)) {
      if (typeof v === 'string') out[k] = v;
      else m.problem(k, `${shown(v)} is not a string; write it in quotes, e.g. ${k}: "${String(v)}"`);
    }
    return out;
  }

  /** Each element of a list, handed to `item` with its path; problems in one element do not stop the rest. */
  list<T>(key: string, item: (raw: unknown, path: string) => T | undefined): readonly T[] {
    return readList(this.raw[key], this.at(key), this.#issues, item);
  }

  /** A nested map with its known keys (undefined when absent, which callers default). */
  map(key: string, known: readonly string[] | undefined): MapReader | undefined {
    return readMap(this.raw[key], this.at(key), this.#issues, known);
  }
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** Opens a YAML map for reading; absent (undefined or null) gives an empty map, anything else that is
 * not a map is a problem. `known` lists the keys it may have (undefined: any key, as in an env map). */
export function readMap(raw: unknown, path: string, issues: Issues, known: readonly string[] | undefined): MapReader | undefined {
  if (raw === undefined || raw === null) return new MapReader({}, path, issues);
  if (!isRecord(raw)) {
    // The whole file has the empty path; a message starting ": " would name nothing.
    issues.push({ path: path === '' ? '(top level)' : path, message: `${shown(raw)} is not a mapping; write it as "key: value" lines` });
    return undefined;
  }
  const r = new MapReader(raw, path, issues);
  if (known !== undefined) {
    for (const k of Object.keys(raw)) if (!known.includes(k)) r.problem(k, unknownKeyMessage(k, known));
  }
  return r;
}

/** Reads each element of a YAML list with its path (`path[i]`); absent gives an empty list, and a
 * problem in one element does not stop the rest. */
export function readList<T>(raw: unknown, path: string, issues: Issues, item: (raw: unknown, path: string) => T | undefined): readonly T[] {
  if (raw === undefined || raw === null) return [];
  if (!Array.isArray(raw)) {
    issues.push({ path, message: `${shown(raw)} is not a list; write each entry on its own "- " line` });
    return [];
  }
  const out: T[] = [];
  raw.forEach((el: unknown, i) => {
    const r = item(el, `${path}[${i}]`);
    if (r !== undefined) out.push(r);
  });
  return out;
}
