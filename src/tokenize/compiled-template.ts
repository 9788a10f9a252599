// Chat templates compiled to JavaScript closures over plain values. @huggingface/jinja interprets
// its syntax tree and boxes every intermediate value in a class instance: measured on Qwen3's
// template, 0.11-0.17 ms per message, 70% of it in those constructors, so a 40-message chat cost
// 4-7 ms to render on every turn. Here each node of the same parsed tree becomes a closure once,
// and rendering runs on strings, numbers and the request's own objects.
//
// Exactness comes first: the compiled form must render what the interpreter renders (which the
// tests check against Python's jinja2). It covers what chat templates use and nothing else; a node,
// filter or test it does not know makes compileTemplate refuse the template, and any value it is not
// sure of at run time (a float, a comparison of lists, an unknown method) throws, so the caller
// renders that chat with the interpreter instead. Errors raised by the template itself
// (raise_exception) throw the same way, and the interpreter then reports them in its own words.
//
// Tool JSON may hold PyNumbers (py-json.ts: a float written 1.0, an integer past 2^53), which only
// this form renders: tojson and printing write Python's text, truth and the number tests are
// Python's, and anything else done with one (arithmetic, comparison) throws NotCompiled; the
// interpreter cannot print them either, so such a chat then goes to the engine's /tokenize.
import {
  asText,
  bail,
  binary,
  dictMethod,
  filterIdentifier,
  globals,
  int,
  isDict,
  Joined,
  member,
  Namespace,
  ourFunctions,
  printed,
  sliceOf,
  stringMethod,
  tests,
  toJson,
  truthy,
  type Dict,
  type Fn,
} from './template-values.js';

/**
 * What compileTemplate answers: a render function, or why the template stays interpreted. It
 * renders to the strings the output is made of, in order (joined, the rendered text).
 */
export type Compiled = { readonly ok: true; readonly render: (vars: Readonly<Record<string, unknown>>) => readonly string[] } | { readonly ok: false; readonly reason: string };

class Scope {
  readonly vars = new Map<string, unknown>();
  constructor(readonly parent: Scope | undefined) {}

  lookup(name: string): unknown {
    if (this.vars.has(name)) return this.vars.get(name);
    return this.parent?.lookup(name);
  }
}

// What a render writes, in order. Never grown with +=: a rope of thousands of pieces cost 4 ms to
// flatten at 400k characters.
type Out = string[];

type Expr = (scope: Scope) => unknown;
type Stmt = (scope: Scope, out: Out) => void;

class Unsupported extends Error {}

function isNode(v: unknown): v is Record<string, unknown> & { type: string } {
  return typeof v === 'object' && v !== null && 'type' in v && typeof v.type === 'string';
}

function nodeOf(v: unknown, what: string): Record<string, unknown> & { type: string } {
  if (!isNode(v)) throw new Unsupported(`${what}: not a node`);
  return v;
}

function nodes(v: unknown, what: string): (Record<string, unknown> & { type: string })[] {
  if (!Array.isArray(v)) throw new Unsupported(`${what}: not a list of nodes`);
  return v.map((n, i) => nodeOf(n, `${what}[${i}]`));
}

function operatorOf(n: Record<string, unknown>): string {
  const op = n.operator;
  if (isNode(op) && typeof op.value === 'string') return op.value;
  throw new Unsupported('operator without a value');
}

function nameOf(n: unknown, what: string): string {
  if (isNode(n) && n.type === 'Identifier' && typeof n.value === 'string') return n.value;
  throw new Unsupported(`${what}: not an identifier`);
}

class Compiler {
  expr(n: Record<string, unknown> & { type: string }): Expr {
    switch (n.type) {
      case 'StringLiteral':
      case 'IntegerLiteral': {
        const v = n.value;
        return () => v;
      }
      case 'ArrayLiteral':
      case 'TupleLiteral': {
        const items = nodes(n.value, n.type).map((x) => this.expr(x));
        return (s) => items.map((e) => e(s));
      }
      case 'ObjectLiteral': {
        if (!(n.value instanceof Map)) throw new Unsupported('object literal');
        const pairs = [...n.value].map(([k, v]) => [this.expr(nodeOf(k, 'key')), this.expr(nodeOf(v, 'value'))] as const);
        return (s) => {
          const o: Dict = Object.create(null) as Dict;
          for (const [k, v] of pairs) {
            const key = k(s);
            if (typeof key !== 'string') return bail('object key');
            o[key] = v(s);
          }
          return o;
        };
      }
      case 'Identifier': {
        const name = nameOf(n, 'identifier');
        const fallback = globals.get(name);
        return (s) => {
          const v = s.lookup(name);
          return v === undefined ? fallback : v;
        };
      }
      case 'MemberExpression':
        return this.member(n);
      case 'CallExpression':
        return this.call(n);
      case 'UnaryExpression': {
        const op = operatorOf(n);
        const arg = this.expr(nodeOf(n.argument, 'operand'));
        if (op === 'not') return (s) => !truthy(arg(s));
        if (op === '-' || op === '+') {
          const sign = op === '-' ? -1 : 1;
          return (s) => {
            const v = arg(s);
            if (typeof v === 'boolean') return sign * (v ? 1 : 0);
            return sign * int(v);
          };
        }
        throw new Unsupported(`unary ${op}`);
      }
      case 'BinaryExpression': {
        const op = operatorOf(n);
        const l = this.expr(nodeOf(n.left, 'left'));
        const r = this.expr(nodeOf(n.right, 'right'));
        if (op === 'and') return (s) => {
          const a = l(s);
          return truthy(a) ? r(s) : a;
        };
        if (op === 'or') return (s) => {
          const a = l(s);
          return truthy(a) ? a : r(s);
        };
        if (!['==', '!=', '~', '+', '-', '*', '//', '%', '<', '>', '<=', '>=', 'in', 'not in'].includes(op)) throw new Unsupported(`operator ${op}`);
        return (s) => binary(op, l(s), r(s));
      }
      case 'FilterExpression':
        return this.filter(this.expr(nodeOf(n.operand, 'operand')), nodeOf(n.filter, 'filter'));
      case 'TestExpression': {
        const name = nameOf(n.test, 'test');
        const test = Object.hasOwn(tests, name) ? tests[name] : undefined;
        if (test === undefined) throw new Unsupported(`test ${name}`);
        const operand = this.expr(nodeOf(n.operand, 'operand'));
        const negate = n.negate === true;
        return (s) => test(operand(s)) !== negate;
      }
      case 'Ternary': {
        const c = this.expr(nodeOf(n.condition, 'condition'));
        const t = this.expr(nodeOf(n.trueExpr, 'then'));
        const f = this.expr(nodeOf(n.falseExpr, 'else'));
        return (s) => (truthy(c(s)) ? t(s) : f(s));
      }
      case 'SelectExpression': {
        const lhs = this.expr(nodeOf(n.lhs, 'value'));
        const cond = this.expr(nodeOf(n.test, 'condition'));
        return (s) => (truthy(cond(s)) ? lhs(s) : undefined);
      }
      default:
        throw new Unsupported(`expression ${n.type}`);
    }
  }

  member(n: Record<string, unknown>): Expr {
    const obj = this.expr(nodeOf(n.object, 'object'));
    const p = nodeOf(n.property, 'property');
    if (n.computed === true && p.type === 'SliceExpression') {
      const part = (k: string): Expr | undefined => (p[k] === undefined ? undefined : this.expr(nodeOf(p[k], k)));
      const [start, stop, step] = [part('start'), part('stop'), part('step')];
      const bound = (e: Expr | undefined, s: Scope): number | undefined => {
        if (e === undefined) return undefined;
        const v = e(s);
        return v === undefined ? undefined : int(v);
      };
      return (s) => {
        const o = obj(s);
        const args = [bound(start, s), bound(stop, s), bound(step, s)] as const;
        if (Array.isArray(o)) return sliceOf(o, ...args);
        if (typeof o === 'string') return sliceOf(Array.from(o), ...args).join('');
        return bail('slice of a scalar');
      };
    }
    if (n.computed === true) {
      const prop = this.expr(p);
      return (s) => member(obj(s), prop(s));
    }
    const key = p.type === 'IntegerLiteral' ? p.value : nameOf(p, 'attribute');
    return (s) => member(obj(s), key);
  }

  args(list: unknown): { positional: Expr[]; keyword: [string, Expr][] } {
    const positional: Expr[] = [];
    const keyword: [string, Expr][] = [];
    for (const a of nodes(list, 'arguments')) {
      if (a.type === 'KeywordArgumentExpression') keyword.push([nameOf(a.key, 'keyword'), this.expr(nodeOf(a.value, 'keyword value'))]);
      else if (a.type === 'SpreadExpression' || a.type === 'KeywordSpreadExpression') throw new Unsupported('spread arguments');
      else positional.push(this.expr(a));
    }
    return { positional, keyword };
  }

  call(n: Record<string, unknown>): Expr {
    const { positional, keyword } = this.args(n.args);
    const evalArgs = (s: Scope): unknown[] => positional.map((e) => e(s));
    const evalKwargs = (s: Scope): Map<string, unknown> => new Map(keyword.map(([k, e]) => [k, e(s)]));
    const callee = nodeOf(n.callee, 'callee');
    if (callee.type === 'MemberExpression' && callee.computed !== true) {
      const name = nameOf(callee.property, 'method');
      const obj = this.expr(nodeOf(callee.object, 'object'));
      return (s) => {
        const o = obj(s);
        if (keyword.length > 0) return bail('method keyword arguments');
        if (typeof o === 'string') return stringMethod(o, name, evalArgs(s));
        if (isDict(o) && !Object.hasOwn(o, name)) return dictMethod(o, name, evalArgs(s));
        return bail(`method ${name}`);
      };
    }
    const fn = this.expr(callee);
    return (s) => {
      const f = fn(s);
      if (typeof f !== 'function') return bail('call of a non-function');
      if (ourFunctions.has(f)) return (f as Fn)(evalArgs(s), evalKwargs(s));
      if (keyword.length > 0) return bail('keyword arguments to a variable function');
      return (f as (...a: unknown[]) => unknown)(...evalArgs(s)) ?? null;
    };
  }

  filter(operand: Expr, f: Record<string, unknown> & { type: string }): Expr {
    if (f.type === 'Identifier') {
      const name = nameOf(f, 'filter');
      if (!['safe', 'tojson', 'list', 'first', 'last', 'length', 'reverse', 'join', 'upper', 'lower', 'trim', 'string', 'items'].includes(name)) {
        throw new Unsupported(`filter ${name}`);
      }
      return (s) => filterIdentifier(name, operand(s));
    }
    if (f.type !== 'CallExpression') throw new Unsupported(`filter ${f.type}`);
    const name = nameOf(f.callee, 'filter');
    const { positional, keyword } = this.args(f.args);
    const kw = new Map(keyword);
    if (name === 'tojson') {
      const indent = kw.get('indent');
      if (positional.length > 0 || [...kw.keys()].some((k) => k !== 'indent')) throw new Unsupported('tojson options');
      return (s) => {
        const i = indent?.(s) ?? null;
        return toJson(operand(s), i === null ? null : int(i), 0);
      };
    }
    if (name === 'join') {
      if (keyword.length > 0 || positional.length > 1) throw new Unsupported('join options');
      const sep = positional[0];
      return (s) => {
        const v = operand(s);
        const sepv = sep === undefined ? '' : sep(s);
        if (typeof sepv !== 'string') return bail('join separator');
        const items = typeof v === 'string' ? Array.from(v) : Array.isArray(v) ? v : bail('join of a scalar');
        return items.map((x) => (typeof x === 'string' ? x : bail('join of a non-string'))).join(sepv);
      };
    }
    if (name === 'default') {
      if (keyword.length > 0 || positional.length > 2) throw new Unsupported('default options');
      const [dflt, flag] = positional;
      return (s) => {
        const v = operand(s);
        const b = flag === undefined ? false : flag(s);
        if (typeof b !== 'boolean') return bail('default flag');
        if (v === undefined || (b && !truthy(v))) return dflt === undefined ? '' : dflt(s);
        return v;
      };
    }
    throw new Unsupported(`filter ${name}()`);
  }

  block(list: unknown): Stmt {
    const body = nodes(list, 'block').map((x) => this.stmt(x));
    return (s, out) => {
      for (const st of body) st(s, out);
    };
  }

  stmt(n: Record<string, unknown> & { type: string }): Stmt {
    switch (n.type) {
      case 'Comment':
        return () => undefined;
      case 'If': {
        const t = this.expr(nodeOf(n.test, 'if'));
        const body = this.block(n.body);
        const alt = this.block(n.alternate ?? []);
        return (s, out) => (truthy(t(s)) ? body(s, out) : alt(s, out));
      }
      case 'Set':
        return this.set(n);
      case 'For':
        return this.for(n);
      default: {
        // The interpreter drops what a loop body printed before a break or continue, where jinja2
        // keeps it: templates using them render with the interpreter rather than with either rule.
        if (['Program', 'Macro', 'CallStatement', 'FilterStatement', 'Break', 'Continue'].includes(n.type)) throw new Unsupported(`statement ${n.type}`);
        const e = this.pieces(n);
        return (s, out) => {
          const v = e(s);
          if (v instanceof Joined) for (const p of v.parts) out.push(p);
          else out.push(printed(v));
        };
      }
    }
  }

  // A printed `a + b + c` of strings writes a, b and c as they are instead of the string they make,
  // so a message's content reaches the output as the very string the request holds: the encoder
  // then finds a next turn's shared text by identity instead of comparing it (and its rendered
  // copy is never built). Any other value is the expression's value.
  pieces(n: Record<string, unknown> & { type: string }): (s: Scope) => unknown {
    const op = n.type === 'BinaryExpression' ? operatorOf(n) : undefined;
    if (op !== '+' && op !== '~') return this.expr(n);
    const l = this.pieces(nodeOf(n.left, 'left'));
    const r = this.pieces(nodeOf(n.right, 'right'));
    return (s) => {
      const a = l(s);
      const b = r(s);
      const text = op === '~' || a instanceof Joined || b instanceof Joined || typeof a === 'string' || typeof b === 'string';
      // Numbers add, lists concatenate, undefined and none are refused: binary() decides as always.
      if (!text || a === undefined || b === undefined || a === null || b === null) return binary(op, a instanceof Joined ? a.text() : a, b instanceof Joined ? b.text() : b);
      return new Joined([...(a instanceof Joined ? a.parts : [asText(a)]), ...(b instanceof Joined ? b.parts : [asText(b)])]);
    };
  }

  set(n: Record<string, unknown>): Stmt {
    let value: (s: Scope) => unknown;
    if (n.value !== undefined && n.value !== null) value = this.expr(nodeOf(n.value, 'set value'));
    else {
      const body = this.block(n.body ?? []);
      value = (s) => {
        const o: Out = [];
        body(s, o);
        return o.join('');
      };
    }
    const target = nodeOf(n.assignee, 'set target');
    if (target.type === 'Identifier') {
      const name = nameOf(target, 'set target');
      return (s) => {
        s.vars.set(name, value(s));
      };
    }
    if (target.type === 'MemberExpression' && target.computed !== true) {
      const obj = this.expr(nodeOf(target.object, 'set object'));
      const key = nameOf(target.property, 'set attribute');
      return (s) => {
        const v = value(s);
        const o = obj(s);
        if (!(o instanceof Namespace)) bail('set on a non-namespace');
        else o.vars.set(key, v);
      };
    }
    throw new Unsupported(`set ${target.type}`);
  }

  for(n: Record<string, unknown>): Stmt {
    const loopvar = nodeOf(n.loopvar, 'loop variable');
    const names = loopvar.type === 'Identifier' ? [nameOf(loopvar, 'loop variable')] : loopvar.type === 'TupleLiteral' ? nodes(loopvar.value, 'loop variables').map((x) => nameOf(x, 'loop variable')) : undefined;
    if (names === undefined) throw new Unsupported(`loop variable ${loopvar.type}`);
    const unpack = loopvar.type === 'TupleLiteral';
    let it = nodeOf(n.iterable, 'loop iterable');
    let cond: Expr | undefined;
    if (it.type === 'SelectExpression') {
      cond = this.expr(nodeOf(it.test, 'loop condition'));
      it = nodeOf(it.lhs, 'loop iterable');
    }
    const iterable = this.expr(it);
    const body = this.block(n.body);
    const otherwise = this.block(n.defaultBlock ?? []);
    const bind = (scope: Scope, item: unknown): void => {
      if (!unpack) {
        scope.vars.set(names[0] ?? '', item);
        return;
      }
      if (!Array.isArray(item) || item.length !== names.length) {
        bail('loop unpacking');
        return;
      }
      names.forEach((name, j) => scope.vars.set(name, item[j]));
    };
    return (s, out) => {
      const scope = new Scope(s);
      const v = iterable(scope);
      const all = Array.isArray(v) ? v : isDict(v) ? Object.keys(v) : bail('loop over a scalar');
      let items: unknown[] = all;
      if (cond !== undefined) {
        items = all.filter((item) => {
          const probe = new Scope(scope);
          bind(probe, item);
          return truthy(cond(probe));
        });
      }
      for (let i = 0; i < items.length; i++) {
        const loop: Dict = Object.create(null) as Dict;
        loop.index = i + 1;
        loop.index0 = i;
        loop.revindex = items.length - i;
        loop.revindex0 = items.length - i - 1;
        loop.first = i === 0;
        loop.last = i === items.length - 1;
        loop.length = items.length;
        loop.previtem = i > 0 ? items[i - 1] : undefined;
        loop.nextitem = i < items.length - 1 ? items[i + 1] : undefined;
        scope.vars.set('loop', loop);
        bind(scope, items[i]);
        body(scope, out);
      }
      if (items.length === 0) otherwise(scope, out);
    };
  }
}

/**
 * The parsed template (Template.parsed of @huggingface/jinja) as a render function over plain
 * values, or the reason it is rendered by the interpreter. The function throws NotCompiled for a
 * value it cannot render exactly; the caller then renders that chat with the interpreter.
 */
export function compileTemplate(parsed: unknown): Compiled {
  let body: Stmt;
  try {
    const program = nodeOf(parsed, 'template');
    if (program.type !== 'Program') throw new Unsupported(`template root ${program.type}`);
    body = new Compiler().block(program.body);
  } catch (e) {
    if (e instanceof Unsupported) return { ok: false, reason: e.message };
    throw e;
  }
  return {
    ok: true,
    render: (vars) => {
      const root = new Scope(undefined);
      for (const [k, v] of Object.entries(vars)) root.vars.set(k, v);
      const out: Out = [];
      body(root, out);
      return out;
    },
  };
}
