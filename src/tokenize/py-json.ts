// JSON as vLLM's Python sees it, for the template: tool-call arguments are json.loads'ed and tool
// schemas come through pydantic, and the template writes them back with json.dumps. A number
// Python would print as JS does stays a JS number (nearly all of them); one it would print
// otherwise (a float written 1.0, 1e16, 1e-05, -0.0; an integer past 2^53; NaN, Infinity) is read
// into a PyNumber holding Python's text of it, which the compiled template prints as json.dumps
// and str() do. Keys are kept as sent, numeric-looking ones included (JS objects move those
// first; a proxy lists them in the order the client wrote them).
import { ChatError } from './chat-error.js';

/** This value cannot be rendered here exactly as vLLM renders it: the engine's /tokenize must. */
export class NotExactHere extends ChatError {}

/**
 * A number JS would write back otherwise than Python's json.dumps: `json` is Python's text of it
 * (1.0, 1e+16, -0.0, 12345678901234567890, NaN), `value` the nearest JS number, for comparisons.
 */
export class PyNumber {
  constructor(
    readonly json: string,
    readonly value: number,
    readonly isFloat: boolean,
  ) {}

  /** Python's str(): a float's repr, which json.dumps writes alike except nan and inf. */
  str(): string {
    if (Number.isNaN(this.value)) return 'nan';
    if (this.isFloat && !Number.isFinite(this.value)) return this.value > 0 ? 'inf' : '-inf';
    return this.json;
  }

  /** Python's truth value: zero is false, NaN true. */
  truthy(): boolean {
    return this.value !== 0;
  }
}

/** Python's repr of a float (what json.dumps and str() write): shortest digits, e+XX past 1e16 and below 1e-4. */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return 'NaN';
  if (!Number.isFinite(x)) return x > 0 ? 'Infinity' : '-Infinity';
  if (x === 0) return Object.is(x, -0) ? '-0.0' : '0.0';
  const [mantissa = '', expText = '0'] = x.toExponential().split('e');
  const exp = Number(expText);
  const sign = mantissa.startsWith('-') ? '-' : '';
  const digits = mantissa.replace('-', '').replace('.', '');
  if (exp < -4 || exp >= 16) {
    const m = digits.length === 1 ? digits : `${digits[0] ?? ''}.${digits.slice(1)}`;
    return `${sign}${m}e${exp < 0 ? '-' : '+'}${String(Math.abs(exp)).padStart(2, '0')}`;
  }
  if (exp < 0) return `${sign}0.${'0'.repeat(-exp - 1)}${digits}`;
  const int = digits.slice(0, exp + 1).padEnd(exp + 1, '0');
  const frac = digits.slice(exp + 1);
  return `${sign}${int}.${frac === '' ? '0' : frac}`;
}

const arrayIndex = /^(?:0|[1-9][0-9]{0,9})$/;
// What JS objects put first, in ascending order, whatever order they were written in.
const isIndexKey = (k: string): boolean => arrayIndex.test(k) && Number(k) < 2 ** 32 - 1;

// An object whose keys list in the order given: JS would put numeric-looking keys first.
function ordered(entries: readonly (readonly [string, unknown])[]): Record<string, unknown> {
  const target: Record<string, unknown> = {};
  for (const [k, v] of entries) target[k] = v;
  const keys = [...new Set(entries.map(([k]) => k))];
  if (!keys.some(isIndexKey)) return target;
  return new Proxy(target, { ownKeys: () => keys });
}

// Sticky, so a token is matched where the parser stands without copying the rest of the text.
// Control characters are refused inside a string, as json.loads (strict) and JSON.parse refuse them.
// eslint-disable-next-line no-control-regex
const stringToken = /"(?:[^"\\\u0000-\u001f]|\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4}))*"/y;
const numberToken = /-?(?:0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;

/**
 * Parses JSON text as Python's json.loads does, numbers JS would print otherwise read as PyNumber;
 * throws ChatError for text vLLM refuses. `approximate` (the sim, which is its own engine) reads
 * every number as the JS number nearest it instead.
 */
export function pyJsonLoads(text: string, what: string, approximate = false): unknown {
  let at = 0;
  const from = (re: RegExp, i: number): string => {
    re.lastIndex = i;
    return text;
  };
  const fail = (why: string): never => {
    throw new ChatError(`${what}: not valid JSON (${why} at character ${at}); vLLM refuses such a request`, 'messages');
  };
  const ws = (): void => {
    while (at < text.length && (text[at] === ' ' || text[at] === '\t' || text[at] === '\n' || text[at] === '\r')) at++;
  };
  const str = (): string => {
    const m = stringToken.exec(from(stringToken, at));
    if (m === null) return fail('a bad string');
    at += m[0].length;
    return JSON.parse(m[0]) as string;
  };
  const value = (depth: number): unknown => {
    if (depth > 512) fail('nesting too deep');
    ws();
    const c = text[at];
    if (c === '{') {
      at++;
      const entries: [string, unknown][] = [];
      ws();
      if (text[at] === '}') {
        at++;
        return {};
      }
      for (;;) {
        ws();
        const k = str();
        ws();
        if (text[at] !== ':') fail('a missing colon');
        at++;
        const v = value(depth + 1);
        // A repeated key keeps its first place and its last value, as a Python dict built in order does.
        const seen = entries.findIndex(([e]) => e === k);
        if (seen >= 0) entries[seen] = [k, v];
        else entries.push([k, v]);
        ws();
        if (text[at] === ',') at++;
        else if (text[at] === '}') {
          at++;
          return ordered(entries);
        } else fail('a missing comma');
      }
    }
    if (c === '[') {
      at++;
      const out: unknown[] = [];
      ws();
      if (text[at] === ']') {
        at++;
        return out;
      }
      for (;;) {
        out.push(value(depth + 1));
        ws();
        if (text[at] === ',') at++;
        else if (text[at] === ']') {
          at++;
          return out;
        } else fail('a missing comma');
      }
    }
    if (c === '"') return str();
    for (const [word, v] of [['true', true], ['false', false], ['null', null]] as const) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return v;
      }
    }
    for (const [word, n] of [['NaN', NaN], ['Infinity', Infinity], ['-Infinity', -Infinity]] as const) {
      if (!text.startsWith(word, at)) continue;
      at += word.length;
      return approximate ? n : new PyNumber(word, n, true);
    }
    const m = numberToken.exec(from(numberToken, at));
    if (m === null) return fail('an unexpected character');
    at += m[0].length;
    return approximate ? Number(m[0]) : numberOf(m[0], m[1] !== undefined || m[2] !== undefined);
  };
  const v = value(0);
  ws();
  if (at !== text.length) fail('text after the value');
  return v;
}

// A number as Python holds it (int or float by how it is written): a JS number where JS prints it
// as Python does, else a PyNumber with Python's text (an int's digits, -0 written 0 as int(-0) is).
function numberOf(token: string, isFloat: boolean): number | PyNumber {
  const n = Number(token);
  if (isFloat) {
    const repr = pyFloatRepr(n);
    // Past the float range Python reads inf, which JSON.stringify would write as null.
    return repr === String(n) && Number.isFinite(n) ? n : new PyNumber(repr, n, true);
  }
  return Number.isSafeInteger(n) ? n : new PyNumber(BigInt(token).toString(), n, false);
}

/**
 * Checks a value JSON.parse made, where the body's text is not at hand, renders as Python's would:
 * every fractional number prints alike, no integer lost precision, and no object had
 * numeric-looking keys (their order as sent is gone). Throws NotExactHere otherwise. A float
 * written 1.0 came out as 1 and passes: only the text tells them apart, which is why chatInputOf
 * reads a body's tools and object arguments from its bytes.
 */
export function assertPyExact(v: unknown, what: string): void {
  if (typeof v === 'number') {
    if (Number.isInteger(v) ? Number.isSafeInteger(v) : pyFloatRepr(v) === String(v)) return;
    throw new NotExactHere(`${what}: ${String(v)} is written back by Python's json.dumps as ${pyFloatRepr(v)}`, 'tools');
  }
  if (Array.isArray(v)) {
    for (const x of v) assertPyExact(x, what);
    return;
  }
  if (typeof v !== 'object' || v === null) return;
  for (const [k, x] of Object.entries(v)) {
    if (isIndexKey(k)) throw new NotExactHere(`${what}: key "${k}" may have been sent in another order than JS keeps`, 'tools');
    assertPyExact(x, what);
  }
}

const quote = 0x22;
const backslash = 0x5c;
const isJsonSpace = (b: number | undefined): boolean => b === 0x20 || b === 0x09 || b === 0x0a || b === 0x0d;

/**
 * The text of a chat body's top-level `tools` list, cut from the body's bytes: what JSON.parse
 * made of it has lost how its numbers were written (1.0 is 1) and the order of numeric-looking
 * keys, and pyJsonLoads reads both from the text. Undefined when the body has no such list.
 * The first unescaped `"tools":[` is taken: inside a string its quotes would be escaped.
 */
export function toolsText(raw: Uint8Array): string | undefined {
  const bytes = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
  for (let at = bytes.indexOf('"tools"'); at >= 0; at = bytes.indexOf('"tools"', at + 1)) {
    if (at > 0 && bytes[at - 1] === backslash) continue;
    let i = at + 7;
    while (isJsonSpace(bytes[i])) i++;
    if (bytes[i] !== 0x3a) continue;
    i++;
    while (isJsonSpace(bytes[i])) i++;
    if (bytes[i] !== 0x5b) continue;
    const start = i;
    let depth = 0;
    for (; i < bytes.length; i++) {
      const b = bytes[i];
      if (b === quote) {
        for (i++; i < bytes.length && bytes[i] !== quote; i++) if (bytes[i] === backslash) i++;
      } else if (b === 0x5b || b === 0x7b) depth++;
      else if (b === 0x5d || b === 0x7d) {
        depth--;
        if (depth === 0) return bytes.toString('utf8', start, i + 1);
      }
    }
    return undefined;
  }
  return undefined;
}
