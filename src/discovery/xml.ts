// A small, strict XML reader for `nvidia-smi -q -x`. No XML package is installed, and nvidia-smi's
// output uses a narrow subset: a declaration, a DOCTYPE naming its DTD, elements with attributes,
// text, the five predefined entities and character references. Anything outside that subset, or
// malformed (a mismatched close tag, a second root, text after the root), is an error naming the
// line, because a lenient reader that guesses would turn a truncated capture into a card with
// fewer instances than it has.
import { LlmgwError } from '../errors/index.js';

/** One element: its name, attributes, and children in document order (text nodes are strings). */
export interface XmlElement {
  readonly name: string;
  readonly attributes: Readonly<Record<string, string>>;
  readonly children: readonly XmlNode[];
}

/** A child of an element: another element, or a run of text with entities already decoded. */
export type XmlNode = XmlElement | string;

interface Building {
  readonly name: string;
  readonly attributes: Record<string, string>;
  readonly children: XmlNode[];
}

const predefined: Readonly<Record<string, string>> = { amp: '&', lt: '<', gt: '>', quot: '"', apos: "'" };

const nameRe = /[A-Za-z_:][-A-Za-z0-9_:.]*/y;

function lineOf(text: string, at: number): number {
  let line = 1;
  for (let i = 0; i < at && i < text.length; i++) if (text.charCodeAt(i) === 10) line++;
  return line;
}

function fail(text: string, at: number, what: string): never {
  throw new LlmgwError('LLMGW_XML', `nvidia-smi XML, line ${lineOf(text, at)}: ${what}; the output is not the XML nvidia-smi -q -x writes (truncated or corrupted?)`);
}

function decodeEntities(text: string, raw: string, at: number): string {
  return raw.replace(/&([^;&\s]*);?/g, (whole, body: string) => {
    if (!whole.endsWith(';')) fail(text, at, `"&${body}" is not terminated by ";"`);
    const named = predefined[body];
    if (named !== undefined) return named;
    const m = /^#(?:x([0-9A-Fa-f]+)|([0-9]+))$/.exec(body);
    if (m === null) fail(text, at, `unknown entity "&${body};"`);
    const code = m[1] !== undefined ? Number.parseInt(m[1], 16) : Number(m[2]);
    if (!Number.isInteger(code) || code > 0x10ffff || code === 0) fail(text, at, `character reference "&${body};" is out of range`);
    return String.fromCodePoint(code);
  });
}

function readName(text: string, at: number): string {
  nameRe.lastIndex = at;
  const m = nameRe.exec(text);
  if (m === null) fail(text, at, 'expected a name');
  return m[0];
}

function skipSpace(text: string, at: number): number {
  let i = at;
  while (i < text.length && /\s/.test(text.charAt(i))) i++;
  return i;
}

/** The index just past `close`, searching from `at`; an error when the document ends first. */
function past(text: string, at: number, close: string, what: string): number {
  const end = text.indexOf(close, at);
  if (end < 0) fail(text, at, `${what} is not closed`);
  return end + close.length;
}

/** Parses a whole document and returns its root element. */
export function parseXml(text: string): XmlElement {
  const stack: Building[] = [];
  let root: XmlElement | undefined;
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0;

  const finish = (b: Building): XmlElement => ({ name: b.name, attributes: b.attributes, children: b.children });
  const addChild = (node: XmlNode): void => {
    const top = stack[stack.length - 1];
    if (top !== undefined) top.children.push(node);
  };

  while (i < text.length) {
    const lt = text.indexOf('<', i);
    const end = lt < 0 ? text.length : lt;
    if (end > i) {
      const raw = text.slice(i, end);
      if (stack.length === 0) {
        if (raw.trim() !== '') fail(text, i, `text ${JSON.stringify(raw.trim().slice(0, 40))} outside the root element`);
      } else {
        addChild(decodeEntities(text, raw, i));
      }
    }
    if (lt < 0) break;
    i = lt;
    if (text.startsWith('<?', i)) {
      if (root !== undefined || stack.length > 0) fail(text, i, 'processing instruction after the document started');
      i = past(text, i, '?>', 'processing instruction');
    } else if (text.startsWith('<!--', i)) {
      i = past(text, i + 4, '-->', 'comment');
    } else if (text.startsWith('<![CDATA[', i)) {
      if (stack.length === 0) fail(text, i, 'CDATA outside the root element');
      const close = past(text, i + 9, ']]>', 'CDATA section');
      addChild(text.slice(i + 9, close - 3));
      i = close;
    } else if (text.startsWith('<!DOCTYPE', i)) {
      if (root !== undefined || stack.length > 0) fail(text, i, 'DOCTYPE after the root element started');
      const close = text.indexOf('>', i);
      const bracket = text.indexOf('[', i);
      // nvidia-smi names an external DTD and never has an internal subset; refusing one keeps
      // entity definitions (and their expansion) out of this reader entirely.
      if (close < 0) fail(text, i, 'DOCTYPE is not closed');
      if (bracket >= 0 && bracket < close) fail(text, i, 'DOCTYPE with an internal subset is not supported');
      i = close + 1;
    } else if (text.startsWith('</', i)) {
      const name = readName(text, i + 2);
      const after = skipSpace(text, i + 2 + name.length);
      if (text.charAt(after) !== '>') fail(text, after, `expected ">" closing </${name}`);
      const top = stack.pop();
      if (top === undefined) fail(text, i, `close tag </${name}> with no open element`);
      if (top.name !== name) fail(text, i, `close tag </${name}> does not match <${top.name}>`);
      const done = finish(top);
      if (stack.length === 0) root = done;
      else addChild(done);
      i = after + 1;
    } else if (text.startsWith('<!', i)) {
      fail(text, i, 'unsupported markup declaration');
    } else {
      if (root !== undefined) fail(text, i, 'a second root element');
      const name = readName(text, i + 1);
      let j = i + 1 + name.length;
      const attributes: Record<string, string> = {};
      for (;;) {
        const k = skipSpace(text, j);
        const c = text.charAt(k);
        if (c === '>' || text.startsWith('/>', k)) {
          const building: Building = { name, attributes, children: [] };
          if (c === '>') {
            stack.push(building);
            i = k + 1;
          } else {
            const done = finish(building);
            if (stack.length === 0) root = done;
            else addChild(done);
            i = k + 2;
          }
          break;
        }
        if (k === j) fail(text, k, `expected whitespace, ">" or "/>" in <${name}>`);
        if (k >= text.length) fail(text, k, `<${name}> is not closed`);
        const attr = readName(text, k);
        let v = skipSpace(text, k + attr.length);
        if (text.charAt(v) !== '=') fail(text, v, `attribute ${attr} of <${name}> has no "="`);
        v = skipSpace(text, v + 1);
        const quote = text.charAt(v);
        if (quote !== '"' && quote !== "'") fail(text, v, `attribute ${attr} of <${name}> is not quoted`);
        const close = text.indexOf(quote, v + 1);
        if (close < 0) fail(text, v, `attribute ${attr} of <${name}> is not closed`);
        const rawValue = text.slice(v + 1, close);
        if (rawValue.includes('<')) fail(text, v, `attribute ${attr} of <${name}> contains "<"`);
        if (Object.hasOwn(attributes, attr)) fail(text, k, `attribute ${attr} repeated in <${name}>`);
        attributes[attr] = decodeEntities(text, rawValue, v);
        j = close + 1;
      }
    }
  }
  const open = stack[stack.length - 1];
  if (open !== undefined) fail(text, text.length, `<${open.name}> is not closed (the document ends first)`);
  if (root === undefined) fail(text, text.length, 'no root element');
  return root;
}

/** The element's child elements, optionally only those with this name. */
export function elementsOf(el: XmlElement, name?: string): XmlElement[] {
  const out: XmlElement[] = [];
  for (const c of el.children) if (typeof c !== 'string' && (name === undefined || c.name === name)) out.push(c);
  return out;
}

/** The first child element with this name, or undefined when the driver's schema has none. */
export function childOf(el: XmlElement | undefined, ...path: readonly string[]): XmlElement | undefined {
  let cur = el;
  for (const name of path) {
    if (cur === undefined) return undefined;
    cur = cur.children.find((c): c is XmlElement => typeof c !== 'string' && c.name === name);
  }
  return cur;
}

/** The element's own text, trimmed (nested elements' text is not included). */
export function textOf(el: XmlElement | undefined): string | undefined {
  if (el === undefined) return undefined;
  return el.children
    .filter((c): c is string => typeof c === 'string')
    .join('')
    .trim();
}
