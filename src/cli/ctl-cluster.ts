// `llmgw ctl nodes --gateway URL`: every node of a running gateway's cluster, read from its
// /llmgw/status view, printed one node per block.
import { request } from 'undici';
import { LlmgwError } from '../errors/index.js';

/** What /llmgw/nodes answers per node (link's NodeStatus, read defensively: it crossed HTTP). */
interface NodeView {
  readonly name: string;
  readonly state: string;
  readonly addr: string | undefined;
  readonly devices: Record<string, number>;
  readonly cpus: number | undefined;
  readonly lastSeenMsAgo: number | undefined;
  readonly assigned: string[];
  readonly ready: string[];
  readonly actors: { actor: string; phase: string; reason: string | undefined }[];
}

const str = (v: unknown): string => (typeof v === 'string' ? v : '');
const strs = (v: unknown): string[] => (Array.isArray(v) ? v.map(str) : []);
const field = (o: unknown, k: string): unknown => (typeof o === 'object' && o !== null && k in o ? Object.getOwnPropertyDescriptor(o, k)?.value : undefined);

function nodeOf(o: unknown): NodeView {
  const devices: Record<string, number> = {};
  const d = field(o, 'devices');
  if (typeof d === 'object' && d !== null) for (const [k, v] of Object.entries(d)) if (typeof v === 'number') devices[k] = v;
  const seen = field(o, 'lastSeenMsAgo');
  const cpus = field(o, 'cpus');
  const actors = field(o, 'actors');
  return {
    name: str(field(o, 'name')),
    state: str(field(o, 'state')),
    addr: typeof field(o, 'addr') === 'string' ? str(field(o, 'addr')) : undefined,
    devices,
    cpus: typeof cpus === 'number' ? cpus : undefined,
    lastSeenMsAgo: typeof seen === 'number' ? seen : undefined,
    assigned: strs(field(o, 'assigned')),
    ready: strs(field(o, 'ready')),
    actors: Array.isArray(actors) ? actors.map((a) => ({ actor: str(field(a, 'actor')), phase: str(field(a, 'phase')), reason: typeof field(a, 'reason') === 'string' ? str(field(a, 'reason')) : undefined })) : [],
  };
}

/** Reads one of the gateway's views; throws LlmgwError naming the gateway when it cannot. */
export async function readView(gateway: string, view: string, o: { apiKey: string | undefined; timeoutMs: number }): Promise<unknown> {
  const url = new URL(`/llmgw/${view}`, gateway);
  const ctl = new AbortController();
  const timer = setTimeout(() => ctl.abort(), o.timeoutMs);
  try {
    const r = await request(url, { signal: ctl.signal, headers: o.apiKey === undefined ? {} : { authorization: `Bearer ${o.apiKey}` } });
    const body: unknown = await r.body.json();
    if (r.statusCode !== 200) throw new LlmgwError('LLMGW_CTL_GATEWAY', `${url.href} answered ${r.statusCode}: ${JSON.stringify(body)}; with client keys configured pass --api-key or set LLMGW_API_KEY`);
    return body;
  } catch (e) {
    if (e instanceof LlmgwError) throw e;
    throw new LlmgwError('LLMGW_CTL_GATEWAY', `cannot read ${url.href} (${e instanceof Error ? e.message : String(e)}); is llmgw serve running there? pass its address with --gateway`, { cause: e });
  } finally {
    clearTimeout(timer);
  }
}

function nodeLines(n: NodeView): string[] {
  const devices = Object.entries(n.devices).map(([cls, k]) => `${k} ${cls}`).join(', ') || 'no GPU devices';
  const seen = n.lastSeenMsAgo === undefined ? 'never joined' : `last heard ${n.lastSeenMsAgo} ms ago`;
  const lines = [`node ${n.name} (${n.addr ?? '?'}): ${n.state}, ${seen}; ${devices}${n.cpus === undefined ? '' : `, ${n.cpus} cores`}`];
  lines.push(`  placed: ${n.assigned.length === 0 ? 'nothing' : n.assigned.join(', ')}`);
  lines.push(`  ready:  ${n.ready.length === 0 ? 'nothing' : n.ready.join(', ')}`);
  for (const a of n.actors) lines.push(`    ${a.actor}: ${a.phase}${a.reason === undefined ? '' : ` (${a.reason})`}`);
  return lines;
}

/** The lines of `ctl nodes --gateway`: every node with its actors' phases, external replicas, and what waits for room. */
export function clusterStatusLines(body: unknown): string[] {
  const nodes = field(body, 'nodes');
  const lines = Array.isArray(nodes) ? nodes.flatMap((n) => nodeLines(nodeOf(n))) : [];
  const external = field(body, 'external');
  for (const e of Array.isArray(external) ? external : []) {
    lines.push(`external ${str(field(e, 'name'))} (${str(field(e, 'model'))} at ${str(field(e, 'url'))}): ${field(e, 'healthy') === true ? 'healthy' : 'not answering'}${field(e, 'kvEvents') === true ? ', KV events indexed' : ''}`);
  }
  const unplaced = field(body, 'unplaced');
  for (const u of Array.isArray(unplaced) ? unplaced : []) lines.push(`waiting for room: ${str(field(u, 'path'))}: ${str(field(u, 'message'))}`);
  return lines;
}
