// Endpoints from a file in llm-d-router's file-discovery format, so an operator switches between
// llm-d's EPP and ours without rewriting it:
//   endpoints: [{ name, namespace?, address, port, labels? }]   (port an integer, or one as a string)
// Re-read when it changes (polled: a ConfigMap's symlink swap replaces the inode a watcher holds,
// which llm-d re-attaches its fsnotify watcher for). A bad entry is logged, counted and skipped, and
// the rest still load; a file that cannot be read or parsed keeps the last good list on a reload and
// fails the start.
import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { parse } from 'yaml';
import { LlmgwError } from '../errors/index.js';
import { silentLogger, type Logger } from '../log/index.js';
import type { DiscoverySource, PoolEndpoint } from './endpoints.js';

// llm-d's bound on the file: anything larger is not an endpoint list.
const maxFileBytes = 1024 * 1024;

/** Why an entry was skipped, as counted in llmgw_epp_discovery_skipped_total{reason}. */
export type SkipReason = 'not-a-map' | 'name' | 'duplicate' | 'address' | 'port' | 'labels';

/** One skipped entry: where it was, why, and the message logged. */
export interface Skipped {
  readonly index: number;
  readonly reason: SkipReason;
  readonly message: string;
}

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function portOf(v: unknown): number | undefined {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+$/.test(v.trim()) ? Number(v) : NaN;
  return Number.isInteger(n) && n >= 1 && n <= 65_535 ? n : undefined;
}

/** The endpoints a file's text lists, and the entries skipped; throws LLMGW_EPP_DISCOVERY when the text is not such a file. */
export function parseEndpointsFile(text: string, path: string): { endpoints: PoolEndpoint[]; skipped: Skipped[] } {
  let doc: unknown;
  try {
    doc = parse(text);
  } catch (e) {
    throw new LlmgwError('LLMGW_EPP_DISCOVERY', `discovery.file ${path}: not YAML or JSON (${e instanceof Error ? e.message.split('\n')[0] : String(e)}); write endpoints: [{ name, address, port }]`, { cause: e });
  }
  const list: unknown = isRecord(doc) ? doc.endpoints : undefined;
  if (!Array.isArray(list)) throw new LlmgwError('LLMGW_EPP_DISCOVERY', `discovery.file ${path}: has no endpoints: list; write endpoints: [{ name, address, port }]`);
  const endpoints: PoolEndpoint[] = [];
  const skipped: Skipped[] = [];
  const names = new Set<string>();
  list.forEach((e: unknown, index) => {
    const skip = (reason: SkipReason, message: string): void => void skipped.push({ index, reason, message: `endpoints[${index}]: ${message}` });
    if (!isRecord(e)) return skip('not-a-map', 'is not a map; write { name, address, port }');
    const { name, address, port, labels } = e;
    if (typeof name !== 'string' || name === '') return skip('name', 'has no name; each endpoint needs a name unique in the file');
    if (names.has(name)) return skip('duplicate', `name ${JSON.stringify(name)} is listed twice; names are unique in the file`);
    if (typeof address !== 'string' || isIP(address) === 0) return skip('address', `${name}: address ${JSON.stringify(address)} is not an IP address; write the pod's IP, e.g. 10.0.0.7`);
    const p = portOf(port);
    if (p === undefined) return skip('port', `${name}: port ${JSON.stringify(port)} is not an integer from 1 to 65535`);
    const l: Record<string, string> = {};
    if (labels !== undefined && labels !== null) {
      if (!isRecord(labels) || Object.values(labels).some((v) => typeof v !== 'string')) return skip('labels', `${name}: labels must map strings to strings (quote numbers)`);
      Object.assign(l, labels);
    }
    names.add(name);
    endpoints.push({ name, address, port: p, labels: l });
  });
  return { endpoints, skipped };
}

/** A file-discovery source: read at start, re-read every pollMs, listeners told of each changed list. */
export class FileDiscovery implements DiscoverySource {
  readonly #path: string;
  readonly #log: Logger;
  readonly #onSkip: (s: Skipped) => void;
  readonly #listeners: ((eps: PoolEndpoint[]) => void)[] = [];
  readonly #timer: NodeJS.Timeout;
  #text: string;
  #current: PoolEndpoint[];

  /** Reads the file now; throws LLMGW_EPP_DISCOVERY when it cannot be read or is not an endpoint list. */
  constructor(o: { path: string; pollMs: number; log?: Logger | undefined; onSkip?: ((s: Skipped) => void) | undefined }) {
    this.#path = o.path;
    this.#log = o.log ?? silentLogger;
    this.#onSkip = o.onSkip ?? (() => undefined);
    this.#text = this.#read();
    this.#current = this.#parse(this.#text);
    this.#timer = setInterval(() => this.#poll(), o.pollMs);
    // The poll is a watcher, not work: the process exits when everything else has.
    this.#timer.unref();
  }

  #read(): string {
    let text: string;
    try {
      text = readFileSync(this.#path, 'utf8');
    } catch (e) {
      const code = e instanceof Error && 'code' in e ? String(e.code) : String(e);
      throw new LlmgwError('LLMGW_EPP_DISCOVERY', `discovery.file: cannot read ${this.#path} (${code}); give the endpoints file's path`, { cause: e });
    }
    if (Buffer.byteLength(text) > maxFileBytes) throw new LlmgwError('LLMGW_EPP_DISCOVERY', `discovery.file ${this.#path}: over ${maxFileBytes} bytes; an endpoints file lists pods, not data`);
    return text;
  }

  #parse(text: string): PoolEndpoint[] {
    const { endpoints, skipped } = parseEndpointsFile(text, this.#path);
    for (const s of skipped) {
      this.#log.warn({ file: this.#path, index: s.index, reason: s.reason, why: s.message }, 'epp.discovery_skipped');
      this.#onSkip(s);
    }
    this.#log.info({ file: this.#path, endpoints: endpoints.map((e) => e.name), skipped: skipped.length }, 'epp.discovery_loaded');
    return endpoints;
  }

  #poll(): void {
    let text: string;
    let next: PoolEndpoint[];
    try {
      text = this.#read();
      if (text === this.#text) return;
      next = this.#parse(text);
    } catch (e) {
      // Half-written or removed for a moment (an editor's save, a ConfigMap swap): the last good list
      // keeps routing; the next poll reads it again.
      this.#log.warn({ file: this.#path, err: e }, 'epp.discovery_unreadable');
      return;
    }
    this.#text = text;
    this.#current = next;
    for (const l of this.#listeners) l(next);
  }

  /** The file was read whole in the constructor. */
  synced(): Promise<void> {
    return Promise.resolve();
  }

  current(): PoolEndpoint[] {
    return this.#current;
  }

  onChange(fn: (eps: PoolEndpoint[]) => void): void {
    this.#listeners.push(fn);
  }

  close(): Promise<void> {
    clearInterval(this.#timer);
    return Promise.resolve();
  }
}

/** The OpenDiscovery of a file-discovery config. */
export const fileDiscovery =
  (c: { readonly path: string; readonly pollMs: number }) =>
  (o: { log: Logger; onSkip: (reason: string) => void }): DiscoverySource =>
    new FileDiscovery({ path: c.path, pollMs: c.pollMs, log: o.log, onSkip: (s) => o.onSkip(s.reason) });
