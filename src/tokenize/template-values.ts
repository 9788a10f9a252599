// The values a compiled chat template computes with, and the rules of Python and of
// @huggingface/jinja's interpreter for them: truth, text, equality, operators, methods, filters,
// tests and the globals every render sees. Wherever the interpreter and Python could disagree, or
// we are not sure what either does, these bail (NotCompiled) and the chat is rendered by the
// interpreter instead.
import { PyNumber } from './py-json.js';

/** A value the compiled form could not treat exactly as the interpreter does: render this chat with the interpreter. */
export class NotCompiled extends Error {}

// A string made by `+` or `~`, kept as the strings it joins.
export class Joined {
  constructor(readonly parts: readonly string[]) {}
  text(): string {
    return this.parts.join('');
  }
}

/** What namespace() makes: the one value a loop body can assign into and the code after the loop sees. */
export class Namespace {
  readonly vars = new Map<string, unknown>();
}

/** A mapping as the request hands it in: a plain object. */
export type Dict = Record<string, unknown>;
/** One of our global functions, called with the arguments as written. */
export type Fn = (args: unknown[], kwargs: Map<string, unknown>) => unknown;

/** Gives up on this render: the caller renders the chat with the interpreter. */
export const bail = (what: string): never => {
  throw new NotCompiled(what);
};

/** A plain mapping (not a list, a namespace or a Python number). */
export const isDict = (v: unknown): v is Dict => typeof v === 'object' && v !== null && !Array.isArray(v) && !(v instanceof Namespace) && !(v instanceof PyNumber);

// Python truthiness as the interpreter applies it.
export function truthy(v: unknown): boolean {
  if (typeof v !== 'object' || v === null) return Boolean(v);
  if (Array.isArray(v)) return v.length > 0;
  if (v instanceof Namespace) return true;
  if (v instanceof PyNumber) return v.truthy();
  return Object.keys(v).length > 0;
}

const isPrimitive = (v: unknown): v is string | number | boolean | null | undefined => v === null || (typeof v !== 'object' && typeof v !== 'function');

/** An integer argument, or bail. */
export function int(v: unknown): number {
  if (typeof v !== 'number' || !Number.isInteger(v)) return bail('not an integer');
  return v;
}

// What `+` and `~` make of a value beside a string: the interpreter's String(value).
export function asText(v: unknown): string {
  if (typeof v === 'string') return v;
  if (typeof v === 'boolean') return String(v);
  if (typeof v === 'number' && Number.isInteger(v)) return String(v);
  return bail('text of a non-scalar');
}

// What a block prints for a value; null and undefined print nothing, as the interpreter's blocks do.
export function printed(v: unknown): string {
  if (v === null || v === undefined) return '';
  if (typeof v === 'object' && v instanceof PyNumber) return v.str();
  return asText(v);
}

// The interpreter's toJSON (Python's json.dumps with its default separators).
export function toJson(v: unknown, indent: number | null, depth: number): string {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'number' || typeof v === 'boolean' || typeof v === 'string') return JSON.stringify(v);
  if (v instanceof PyNumber) return v.json;
  const pad = indent === null || indent === 0 ? '' : ' '.repeat(indent);
  const base = '\n' + pad.repeat(depth);
  const child = base + pad;
  const itemSep = pad !== '' ? ',' : ', ';
  if (Array.isArray(v)) {
    const core = v.map((x) => toJson(x, indent, depth + 1));
    return pad !== '' && core.length > 0 ? `[${child}${core.join(`${itemSep}${child}`)}${base}]` : `[${core.join(itemSep)}]`;
  }
  const entries: [string, unknown][] = v instanceof Namespace ? [...v.vars] : isDict(v) ? Object.entries(v) : bail('JSON of a function');
  const core = entries.map(([k, x]) => {
    const item = `${JSON.stringify(k)}: ${toJson(x, indent, depth + 1)}`;
    return pad !== '' ? `${child}${item}` : item;
  });
  return pad !== '' && core.length > 0 ? `{${core.join(itemSep)}${base}}` : `{${core.join(itemSep)}}`;
}

// Python-style slicing, as the interpreter's slice().
export function sliceOf<T>(a: readonly T[], start: number | undefined, stop: number | undefined, step = 1): T[] {
  if (step === 0) return bail('slice step 0');
  const dir = Math.sign(step);
  const n = a.length;
  let from: number;
  let to: number;
  if (dir >= 0) {
    from = (start ?? 0) < 0 ? Math.max(n + (start ?? 0), 0) : Math.min(start ?? 0, n);
    to = (stop ?? n) < 0 ? Math.max(n + (stop ?? n), 0) : Math.min(stop ?? n, n);
  } else {
    from = (start ?? n - 1) < 0 ? Math.max(n + (start ?? n - 1), -1) : Math.min(start ?? n - 1, n - 1);
    to = (stop ?? -1) < -1 ? Math.max(n + (stop ?? -1), -1) : Math.min(stop ?? -1, n - 1);
  }
  const out: T[] = [];
  for (let i = from; dir * i < dir * to; i += step) out.push(a[i] as T);
  return out;
}

function startsOrEnds(s: string, arg: unknown, ends: boolean): boolean {
  const test = (p: unknown): boolean => (typeof p === 'string' ? (ends ? s.endsWith(p) : s.startsWith(p)) : bail('startswith of a non-string'));
  if (Array.isArray(arg)) return arg.some(test);
  return test(arg);
}

function split(s: string, sep: unknown, maxsplit: unknown): string[] {
  const max = maxsplit === undefined ? -1 : int(maxsplit);
  if (sep === undefined || sep === null) {
    const text = s.trimStart();
    const out: string[] = [];
    for (const m of text.matchAll(/\S+/g)) {
      if (max !== -1 && out.length >= max) {
        out.push(m[0] + text.slice(m.index + m[0].length));
        break;
      }
      out.push(m[0]);
    }
    return out;
  }
  if (typeof sep !== 'string' || sep === '') return bail('split separator');
  const out = s.split(sep);
  if (max !== -1 && out.length > max) out.push(out.splice(max).join(sep));
  return out;
}

/** A string method the interpreter knows, called on `s`. */
export function stringMethod(s: string, name: string, args: unknown[]): unknown {
  switch (name) {
    case 'upper':
      return s.toUpperCase();
    case 'lower':
      return s.toLowerCase();
    case 'strip':
      return s.trim();
    case 'lstrip':
      return s.trimStart();
    case 'rstrip':
      return s.trimEnd();
    case 'startswith':
      return args.length === 0 ? bail('startswith()') : startsOrEnds(s, args[0], false);
    case 'endswith':
      return args.length === 0 ? bail('endswith()') : startsOrEnds(s, args[0], true);
    case 'split':
      return split(s, args[0], args[1]);
    case 'replace': {
      const [from, to, count] = args;
      if (typeof from !== 'string' || typeof to !== 'string' || from === '' || count !== undefined) return bail('replace()');
      return s.split(from).join(to);
    }
    default:
      return bail(`string method ${name}`);
  }
}

/** A mapping method the interpreter knows, called on `d`. */
export function dictMethod(d: Dict, name: string, args: unknown[]): unknown {
  switch (name) {
    case 'get': {
      const key = args[0];
      if (typeof key !== 'string') return bail('get() of a non-string key');
      return Object.hasOwn(d, key) ? d[key] : (args[1] ?? null);
    }
    case 'items':
      return Object.entries(d).map(([k, v]) => [k, v]);
    case 'keys':
      return Object.keys(d);
    case 'values':
      return Object.values(d);
    default:
      return bail(`dict method ${name}`);
  }
}

const stringMethods = new Set(['upper', 'lower', 'strip', 'lstrip', 'rstrip', 'startswith', 'endswith', 'split', 'replace', 'title', 'capitalize']);

// Attribute or item access, as the interpreter's evaluateMemberExpression; methods are called apart.
export function member(obj: unknown, prop: unknown): unknown {
  if (obj instanceof Namespace) return typeof prop === 'string' ? obj.vars.get(prop) : bail('namespace key');
  if (isDict(obj)) {
    if (typeof prop !== 'string') return bail('dict key');
    if (Object.hasOwn(obj, prop)) return obj[prop];
    return ['get', 'items', 'keys', 'values', 'dictsort'].includes(prop) ? bail('a dict method as a value') : undefined;
  }
  if (typeof obj === 'string' || Array.isArray(obj)) {
    if (typeof prop === 'number') return Number.isInteger(prop) ? obj.at(prop) : bail('fractional index');
    if (prop === 'length') return obj.length;
    if (typeof prop === 'string') return typeof obj === 'string' && stringMethods.has(prop) ? bail('a string method as a value') : undefined;
    return bail('index of another kind');
  }
  if (typeof prop !== 'string') return bail('index of a scalar');
  return undefined;
}

function equal(a: unknown, b: unknown): boolean {
  if (!isPrimitive(a) || !isPrimitive(b)) return bail('== between containers');
  // The interpreter compares with JavaScript's ==: none equals undefined, 1 equals true.
  return a == b;
}

function contains(item: unknown, where: unknown): boolean {
  if (Array.isArray(where)) {
    if (!isPrimitive(item)) return bail('in over containers');
    return where.some((x) => isPrimitive(x) && x === item);
  }
  if (typeof item === 'string' && typeof where === 'string') return where.includes(item);
  if (typeof item === 'string' && isDict(where)) return Object.hasOwn(where, item);
  return bail('in between these kinds');
}

/** A binary operator as the interpreter applies it, bailing where it is not sure to agree. */
export function binary(op: string, l: unknown, r: unknown): unknown {
  if (op === '==') return equal(l, r);
  if (op === '!=') return !equal(l, r);
  if (l === undefined || r === undefined) {
    if (r === undefined && (op === 'in' || op === 'not in')) return op === 'not in';
    return bail(`${op} on undefined`);
  }
  if (l === null || r === null) return bail(`${op} on none`);
  if (op === '~') return asText(l) + asText(r);
  if (typeof l === 'number' && typeof r === 'number') {
    const a = int(l);
    const b = int(r);
    switch (op) {
      case '+':
        return a + b;
      case '-':
        return a - b;
      case '*':
        return a * b;
      case '//':
        return b === 0 ? bail('// by zero') : Math.floor(a / b);
      case '%':
        return b === 0 ? bail('% by zero') : a % b;
      case '<':
        return a < b;
      case '>':
        return a > b;
      case '<=':
        return a <= b;
      case '>=':
        return a >= b;
      default:
        return bail(`${op} on numbers`);
    }
  }
  if (op === '+' && Array.isArray(l) && Array.isArray(r)) return l.concat(r);
  if (op === 'in') return contains(l, r);
  if (op === 'not in') return !contains(l, r);
  if (op === '+' && (typeof l === 'string' || typeof r === 'string')) return asText(l) + asText(r);
  return bail(`${op} between these kinds`);
}

/** A filter written without arguments (`x | length`), as the interpreter applies it. */
export function filterIdentifier(name: string, v: unknown): unknown {
  if (name === 'safe') return v;
  if (name === 'tojson') return toJson(v, null, 0);
  if (Array.isArray(v)) {
    switch (name) {
      case 'list':
        return v;
      case 'first':
        return v.length > 0 ? v[0] : bail('first of nothing');
      case 'last':
        return v.length > 0 ? v[v.length - 1] : bail('last of nothing');
      case 'length':
        return v.length;
      case 'reverse':
        return v.slice().reverse();
      case 'join':
        return v.map((x) => (typeof x === 'string' ? x : bail('join of a non-string'))).join('');
      default:
        return bail(`filter ${name} on a list`);
    }
  }
  if (typeof v === 'string') {
    switch (name) {
      case 'length':
        return v.length;
      case 'upper':
      case 'lower':
        return stringMethod(v, name, []);
      case 'trim':
        return stringMethod(v, 'strip', []);
      case 'string':
      case 'join':
        return v;
      default:
        return bail(`filter ${name} on a string`);
    }
  }
  if (isDict(v)) {
    if (name === 'items') return Object.entries(v).map(([k, x]) => [k, x]);
    if (name === 'length') return Object.keys(v).length;
  }
  if (typeof v === 'number' && Number.isInteger(v) && name === 'string') return String(v);
  return bail(`filter ${name}`);
}

// The `is` tests the interpreter knows, as it applies them; a template using another is refused.
export const tests: Readonly<Record<string, (v: unknown) => boolean>> = {
  boolean: (v) => typeof v === 'boolean',
  callable: (v) => typeof v === 'function',
  odd: (v) => int(v) % 2 !== 0,
  even: (v) => int(v) % 2 === 0,
  false: (v) => v === false,
  true: (v) => v === true,
  none: (v) => v === null,
  string: (v) => typeof v === 'string',
  number: (v) => typeof v === 'number' || v instanceof PyNumber,
  integer: (v) => (typeof v === 'number' && Number.isInteger(v)) || (v instanceof PyNumber && !v.isFloat),
  iterable: (v) => Array.isArray(v) || typeof v === 'string',
  mapping: (v) => isDict(v),
  sequence: (v) => Array.isArray(v) || isDict(v) || typeof v === 'string',
  defined: (v) => v !== undefined,
  undefined: (v) => v === undefined,
};

function namespaceOf(args: unknown[], kwargs: Map<string, unknown>): Namespace {
  if (args.length > 0) return bail('namespace() with a positional argument');
  const ns = new Namespace();
  for (const [k, v] of kwargs) ns.vars.set(k, v);
  return ns;
}

function rangeOf(args: unknown[]): number[] {
  const [a, b, c] = args.map(int);
  const start = b === undefined ? 0 : (a ?? 0);
  const stop = b === undefined ? (a ?? 0) : b;
  const step = c ?? 1;
  if (step === 0) return bail('range step 0');
  const out: number[] = [];
  for (let i = start; step > 0 ? i < stop : i > stop; i += step) out.push(i);
  return out;
}

const raiseException: Fn = (args) => bail(`raise_exception(${String(args[0])})`);
const range: Fn = (args) => rangeOf(args);
// The functions among the globals: called with (args, kwargs), where a function handed in with the
// variables takes plain arguments.
export const ourFunctions: ReadonlySet<unknown> = new Set<Fn>([namespaceOf, raiseException, range]);

// The names every render sees, as the interpreter's setupGlobals and Environment declare them.
// strftime_now is left out on purpose: a template that prints the date renders with the interpreter.
export const globals: ReadonlyMap<string, unknown> = new Map<string, unknown>([
  ['false', false],
  ['true', true],
  ['none', null],
  ['False', false],
  ['True', true],
  ['None', null],
  ['namespace', namespaceOf],
  ['raise_exception', raiseException],
  ['range', range],
]);
