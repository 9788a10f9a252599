// The HTTP/1.1 heads of the upstream client: the request head it writes (strictly: a caller's
// header cannot smuggle a second one) and the answer head and chunk lines it parses, with the
// errors an answer that is not well-formed HTTP/1.1 fails with.
import type { UpstreamRequest } from './client-types.js';
import { UpstreamClientError, upstreamAnswerTooLargeCode, upstreamHeadTooLargeCode, upstreamProtocolCode } from './client-types.js';

export const protocolError = (what: string): UpstreamClientError => new UpstreamClientError(upstreamProtocolCode, `engine answer is not valid HTTP/1.1: ${what}`);
export const headTooLarge = (what: string, max: number): UpstreamClientError =>
  new UpstreamClientError(upstreamHeadTooLargeCode, `the engine's ${what} is over ${max} bytes (gateway.upstream.max_head_bytes)`);

export const CRLF = Buffer.from('\r\n');
// What every answer starts with, checked as its bytes arrive: garbage fails on its first byte
// rather than waiting out the headers timeout for a blank line that never comes.
export const STATUS_PREFIX = Buffer.from('HTTP/1.');
// A chunk-size line with extensions; nothing legitimate comes near it.
export const CHUNK_LINE_MAX_BYTES = 4096;
// More hex digits than this is not a chunk any engine sends (12 digits is 256 TiB) and could lose
// precision in a double.
const CHUNK_SIZE_MAX_DIGITS = 12;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
// Field values: HTAB, SP, visible ASCII and obs-text. A CR or LF here would be a second header
// (request smuggling on our side, a bare-LF line ending on theirs).
const BAD_VALUE = /[^\t\x20-\x7e\x80-\xff]/;
const STATUS_LINE = /^HTTP\/1\.([01]) ([1-5]\d\d)(?:$| )/;
const PATH = /^\/[\x21-\x7e]*$/;
// The pool writes these itself; a caller's copy would contradict the framing it chose.
const reservedHeaders = new Set(['host', 'content-length', 'transfer-encoding', 'connection', 'keep-alive', 'upgrade', 'expect', 'te', 'trailer']);
export function requestHead(r: UpstreamRequest, hostHeader: string): string {
  if (!PATH.test(r.path)) throw new UpstreamClientError('ERR_INVALID_ARG_VALUE', `upstream path ${JSON.stringify(r.path)} must start with "/" and be percent-encoded (no spaces or control characters)`);
  const length = typeof r.body === 'string' ? Buffer.byteLength(r.body) : r.body.byteLength;
  let head = `POST ${r.path} HTTP/1.1\r\nhost: ${hostHeader}\r\nconnection: keep-alive\r\ncontent-length: ${length}\r\n`;
  for (const name of Object.keys(r.headers)) {
    const value = r.headers[name] ?? '';
    if (!TOKEN.test(name) || reservedHeaders.has(name.toLowerCase())) {
      throw new UpstreamClientError('ERR_INVALID_ARG_VALUE', `upstream header name ${JSON.stringify(name)} is not a token or is one the pool writes itself`);
    }
    if (BAD_VALUE.test(value)) throw new UpstreamClientError('ERR_INVALID_ARG_VALUE', `upstream header ${name} has a control or non-latin1 character in its value`);
    head += `${name}: ${value}\r\n`;
  }
  return head + '\r\n';
}


export interface ParsedHead {
  readonly minor: number;
  readonly status: number;
  readonly headers: Record<string, string>;
}

export function parseHead(text: string): ParsedHead {
  let eol = text.indexOf('\r\n');
  if (eol < 0) eol = text.length;
  const line = text.slice(0, eol);
  const m = STATUS_LINE.exec(line);
  if (m === null || BAD_VALUE.test(line)) throw protocolError(`status line ${JSON.stringify(line.slice(0, 80))} is not "HTTP/1.x NNN reason"`);
  const headers: Record<string, string> = {};
  let at = eol + 2;
  while (at < text.length) {
    let next = text.indexOf('\r\n', at);
    if (next < 0) next = text.length;
    const c = text.charCodeAt(at);
    // Folded lines were deprecated by RFC 7230; a parser that joins them and one that does not
    // read different headers from the same bytes.
    if (c === 32 || c === 9) throw protocolError(`header line ${JSON.stringify(text.slice(at, Math.min(next, at + 80)))} is folded (obs-fold)`);
    const colon = text.indexOf(':', at);
    if (colon < 0 || colon >= next) throw protocolError(`header line ${JSON.stringify(text.slice(at, Math.min(next, at + 80)))} has no colon`);
    const name = text.slice(at, colon);
    if (!TOKEN.test(name)) throw protocolError(`header name ${JSON.stringify(name.slice(0, 80))} is not a token`);
    let from = colon + 1;
    let to = next;
    while (from < to && (text.charCodeAt(from) === 32 || text.charCodeAt(from) === 9)) from++;
    while (to > from && (text.charCodeAt(to - 1) === 32 || text.charCodeAt(to - 1) === 9)) to--;
    const value = text.slice(from, to);
    if (BAD_VALUE.test(value)) throw protocolError(`header ${name} has a control character in its value`);
    const key = name.toLowerCase();
    const prev = Object.hasOwn(headers, key) ? headers[key] : undefined;
    const joined = prev === undefined ? value : `${prev}, ${value}`;
    // Assigning "__proto__" on a plain object would set its prototype instead of a header.
    if (key === '__proto__') Object.defineProperty(headers, key, { value: joined, enumerable: true, writable: true, configurable: true });
    else headers[key] = joined;
    at = next + 2;
  }
  return { minor: m[1] === '1' ? 1 : 0, status: Number(m[2]), headers };
}

export function hasToken(list: string, token: string): boolean {
  for (const t of list.split(',')) if (t.trim().toLowerCase() === token) return true;
  return false;
}

export function lastToken(list: string): string {
  const comma = list.lastIndexOf(',');
  return list.slice(comma + 1).trim().toLowerCase();
}

const DIGITS = /^\d{1,15}$/;

// A body length: one non-negative integer on one header line. RFC 9110 allows the same value
// repeated ("5, 5", or two lines, which parseHead joins into that); llhttp refuses it, and an
// engine that sends it has a bug we would rather see than guess around.
export function contentLengthOf(v: string): number {
  if (!DIGITS.test(v)) throw protocolError(`content-length ${JSON.stringify(v.slice(0, 40))} is not one non-negative integer`);
  return Number(v);
}

export function answerTooLarge(max: number, what: string): UpstreamClientError {
  return new UpstreamClientError(upstreamAnswerTooLargeCode, `the engine's answer (${what}) is over ${max} bytes (gateway.upstream.max_answer_bytes)`);
}

export function chunkSizeOf(b: Buffer, from: number, to: number): number {
  let size = 0;
  let i = from;
  for (; i < to; i++) {
    const c = b[i] ?? -1;
    const d = c >= 48 && c <= 57 ? c - 48 : c >= 97 && c <= 102 ? c - 87 : c >= 65 && c <= 70 ? c - 55 : -1;
    if (d < 0) break;
    if (i - from >= CHUNK_SIZE_MAX_DIGITS) throw protocolError(`a chunk size has more than ${CHUNK_SIZE_MAX_DIGITS} hex digits`);
    size = size * 16 + d;
  }
  const bad = (): UpstreamClientError => protocolError(`chunk-size line ${JSON.stringify(b.toString('latin1', from, Math.min(to, from + 80)))} is not hex digits and extensions`);
  if (i === from) throw bad();
  if (i < to) {
    // Extensions (";name=value") carry nothing for us; they are checked for control characters
    // and skipped.
    while (i < to && (b[i] === 32 || b[i] === 9)) i++;
    if (b[i] !== 59) throw bad();
    for (; i < to; i++) {
      const c = b[i] ?? -1;
      if ((c < 32 && c !== 9) || c === 127) throw bad();
    }
  }
  return size;
}

// One request from request() to the last byte of its answer, and that answer's body: one object
// per request, which is also the abort listener (handleEvent) and the body's iterator.
