// Every machine exported as a diagram, from the definitions the runtime runs: Mermaid and dot checked
// by strict parsers of the subset we emit, SVG rendered in Chromium; every state and every event of
// each machine appears in each format, and the events each machine's type names are all handled.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  actorKinds,
  chartOf,
  eventsOf,
  machinesByKind,
  replicaPhases,
  shardPhases,
  stateId,
  statesOf,
  toDot,
  toMermaid,
  toSvg,
  type Chart,
} from '../../src/actors/index.js';
import { chromiumContext } from '../support/browser.js';

const charts: Chart[] = actorKinds.map((k) => chartOf(machinesByKind[k]));

// The events each machine's event union names (commands and facts), which its chart must take somewhere.
const declared: Record<string, readonly string[]> = {
  shard: ['process.spawned', 'processes.started', 'leader.awaited', 'process.exited', 'restart.expired', 'adoption.check', 'drain', 'stop', 'restart'],
  replica: ['drain', 'stop', 'restart', ...replicaPhases.map((p) => `shards.${p}`)],
  publisher: ['stream.bound', 'stream.failed', 'stream.flowing', 'stream.gapped', 'stream.resynced', 'stream.reset', 'hashes.verified', 'hashes.mismatched', 'engine.restarted'],
  node: ['replicas.desired', 'drain', 'stop', 'restart'],
};

void test('charts: each machine handles every event its type declares, and names its states with the one phase list', () => {
  for (const c of charts) {
    const events = eventsOf(c);
    for (const e of declared[c.machine] ?? []) assert.ok(events.includes(e), `${c.machine} takes ${e} (has ${events.join(', ')})`);
  }
  const shard = charts.find((c) => c.machine === 'shard');
  const running = shard?.root.children.find((s) => s.key === 'running');
  assert.deepEqual([...(running?.children.map((s) => s.key) ?? []), 'failed', 'stopped'].sort(), [...shardPhases].sort());
  const replica = charts.find((c) => c.machine === 'replica');
  const active = replica?.root.children.find((s) => s.key === 'active');
  assert.deepEqual([...(active?.children.map((s) => s.key) ?? []), 'draining', 'stopped'].sort(), [...replicaPhases].sort());
});

void test('charts: the replica is a real chart: no state decides where to go by guards alone', () => {
  const replica = charts.find((c) => c.machine === 'replica');
  const always = replica?.transitions.filter((t) => t.event === 'always') ?? [];
  assert.ok(always.length <= 2, `at most the two start-up checks (retiring, adopted), not a complete graph of guards: ${always.length}`);
});

/** A strict reader of the Mermaid we emit: declarations, composite blocks, transitions with labels. */
function parseMermaid(text: string): { ids: Set<string>; labels: string[] } {
  const lines = text.trimEnd().split('\n');
  assert.equal(lines[0], 'stateDiagram-v2');
  const ids = new Set<string>();
  const labels: string[] = [];
  const edges: [string, string][] = [];
  // The composite states each state is declared in, innermost last.
  const open: string[] = [];
  const inside = new Map<string, readonly string[]>();
  let depth = 0;
  for (const [n, raw] of lines.slice(1).entries()) {
    const line = raw.trim();
    let m: RegExpExecArray | null;
    if ((m = /^state "([^"]+)" as ([A-Za-z_][A-Za-z0-9_]*)( \{)?$/.exec(line)) !== null) {
      const id = m[2] ?? '';
      assert.ok(!ids.has(id), `line ${n + 2}: ${id} declared twice`);
      ids.add(id);
      inside.set(id, [...open]);
      if (m[3] !== undefined) {
        depth++;
        open.push(id);
      }
    } else if (line === '}') {
      depth--;
      open.pop();
      assert.ok(depth >= 0, `line ${n + 2}: unbalanced }`);
    } else if ((m = /^\[\*\] --> ([A-Za-z_][A-Za-z0-9_]*)$/.exec(line)) !== null) {
      edges.push(['[*]', m[1] ?? '']);
    } else if ((m = /^([A-Za-z_][A-Za-z0-9_]*) --> \[\*\]$/.exec(line)) !== null) {
      edges.push([m[1] ?? '', '[*]']);
    } else if ((m = /^([A-Za-z_][A-Za-z0-9_]*) --> ([A-Za-z_][A-Za-z0-9_]*) : ([^:;"#]+)$/.exec(line)) !== null) {
      edges.push([m[1] ?? '', m[2] ?? '']);
      labels.push(m[3] ?? '');
    } else {
      assert.fail(`line ${n + 2} is not Mermaid we emit: ${JSON.stringify(raw)}`);
    }
  }
  assert.equal(depth, 0, 'every { is closed');
  for (const [a, b] of edges) for (const x of [a, b]) assert.ok(x === '[*]' || ids.has(x), `${x} is declared before use`);
  // Mermaid 11 and 12 fail to lay out an edge from a composite state to a state inside it.
  for (const [a, b] of edges) assert.ok(!(inside.get(b) ?? []).includes(a), `${a} --> ${b}: an edge from a composite into itself does not render`);
  return { ids, labels };
}

type Token = { kind: 'id'; text: string } | { kind: 'punct'; text: string };

function tokenizeDot(text: string): Token[] {
  const out: Token[] = [];
  const re = /\s+|->|[{}[\];=,]|"((?:[^"\\]|\\.)*)"|([A-Za-z_][A-Za-z0-9_.]*|-?\d+(?:\.\d+)?)/gy;
  let m: RegExpExecArray | null;
  let at = 0;
  while (at < text.length) {
    re.lastIndex = at;
    m = re.exec(text);
    assert.ok(m !== null && m.index === at, `dot: cannot read ${JSON.stringify(text.slice(at, at + 30))}`);
    at = re.lastIndex;
    const [all, quoted, bare] = m;
    if (/^\s+$/.test(all)) continue;
    if (quoted !== undefined) out.push({ kind: 'id', text: quoted.replace(/\\(.)/g, '$1') });
    else if (bare !== undefined) out.push({ kind: 'id', text: bare });
    else out.push({ kind: 'punct', text: all });
  }
  return out;
}

/** A strict parser of the dot subset we emit: digraph, subgraph clusters, node/edge statements with attribute lists. */
function parseDot(text: string): { nodes: Set<string>; clusters: Set<string>; edges: { from: string; to: string; attrs: Record<string, string> }[] } {
  const toks = tokenizeDot(text);
  let i = 0;
  const peek = (): Token | undefined => toks[i];
  const take = (want?: string): Token => {
    const t = toks[i++];
    assert.ok(t !== undefined, 'dot: unexpected end');
    if (want !== undefined) assert.equal(t.text, want, `dot: wanted ${want} at token ${i}`);
    return t;
  };
  const id = (): string => {
    const t = take();
    assert.equal(t.kind, 'id', `dot: wanted an identifier at token ${i}, got ${t.text}`);
    return t.text;
  };
  const attrs = (): Record<string, string> => {
    const out: Record<string, string> = {};
    take('[');
    while (peek()?.text !== ']') {
      const k = id();
      take('=');
      out[k] = id();
      if (peek()?.text === ',') take(',');
    }
    take(']');
    return out;
  };
  const nodes = new Set<string>();
  const clusters = new Set<string>();
  const edges: { from: string; to: string; attrs: Record<string, string> }[] = [];
  const open: string[] = [];
  const inCluster = new Map<string, readonly string[]>();
  const block = (): void => {
    take('{');
    while (peek()?.text !== '}') {
      const t = peek();
      if (t?.text === 'subgraph') {
        take();
        const name = id();
        clusters.add(name);
        open.push(name);
        block();
        open.pop();
        continue;
      }
      const first = id();
      if (peek()?.text === '=') {
        take('=');
        id();
      } else if (first === 'node' || first === 'edge') {
        attrs();
      } else if (peek()?.text === '->') {
        take('->');
        const to = id();
        edges.push({ from: first, to, attrs: peek()?.text === '[' ? attrs() : {} });
      } else {
        nodes.add(first);
        inCluster.set(first, [...open]);
        if (peek()?.text === '[') attrs();
      }
      take(';');
    }
    take('}');
  };
  take('digraph');
  id();
  block();
  assert.equal(i, toks.length, 'dot: nothing after the graph');
  for (const e of edges) for (const n of [e.from, e.to]) assert.ok(nodes.has(n), `dot: edge end ${n} is a declared node`);
  for (const e of edges) for (const k of ['lhead', 'ltail']) if (e.attrs[k] !== undefined) assert.ok(clusters.has(e.attrs[k] ?? ''), `dot: ${k} ${e.attrs[k]} is a cluster`);
  // What Graphviz warns of and then draws wrong: "head is inside tail cluster", "tail is inside head cluster".
  for (const e of edges) {
    const tail = e.attrs.ltail;
    const head = e.attrs.lhead;
    if (tail !== undefined) assert.ok(!(inCluster.get(e.to) ?? []).includes(tail), `dot: ${e.from} -> ${e.to}: head is inside tail cluster ${tail}`);
    if (head !== undefined) assert.ok(!(inCluster.get(e.from) ?? []).includes(head), `dot: ${e.from} -> ${e.to}: tail is inside head cluster ${head}`);
  }
  return { nodes, clusters, edges };
}

for (const c of charts) {
  void test(`mermaid: the ${c.machine} machine parses and shows every state and event`, () => {
    const { ids, labels } = parseMermaid(toMermaid(c));
    for (const s of statesOf(c)) assert.ok(ids.has(stateId(s.path)), `state ${s.path}`);
    for (const e of eventsOf(c)) assert.ok(labels.some((l) => l === e || l.startsWith(`${e} [`)), `event ${e}`);
  });
  void test(`dot: the ${c.machine} machine parses and shows every state and event`, () => {
    const { nodes, edges } = parseDot(toDot(c));
    for (const s of statesOf(c)) assert.ok(nodes.has(stateId(s.path)), `state ${s.path}`);
    for (const e of eventsOf(c)) assert.ok(edges.some((x) => x.attrs.label === e || (x.attrs.label ?? '').startsWith(`${e} [`)), `event ${e}`);
  });
}

void test('svg: every machine renders in Chromium with every state drawn and every event written', { timeout: 120_000 }, async (t) => {
  const ctx = await chromiumContext(t);
  const page = await ctx.newPage();
  for (const c of charts) {
    await page.setContent(`<!doctype html><body style="margin:0">${toSvg(c)}</body>`);
    const drawn: unknown = await page.evaluate(`(() => {
      const svg = document.querySelector('svg');
      const box = svg.getBBox();
      return {
        width: box.width,
        height: box.height,
        states: [...svg.querySelectorAll('g.state')].map((g) => g.getAttribute('data-state')),
        text: [...svg.querySelectorAll('text')].map((x) => x.textContent).join('\\n'),
      };
    })()`);
    assert.ok(typeof drawn === 'object' && drawn !== null && 'states' in drawn && 'text' in drawn && 'width' in drawn && 'height' in drawn);
    const { states, text, width, height } = drawn;
    assert.ok(typeof width === 'number' && typeof height === 'number' && width > 100 && height > 100, `${c.machine} has a size`);
    assert.ok(Array.isArray(states) && typeof text === 'string');
    for (const s of statesOf(c)) assert.ok(states.includes(s.path), `${c.machine}: state ${s.path} drawn`);
    for (const e of eventsOf(c)) assert.ok(text.includes(e), `${c.machine}: event ${e} written`);
  }
});

void test('svg: every machine drawn as an image, as a converter sees it (no page CSS), is light with dark lines, not a black block', { timeout: 120_000 }, async (t) => {
  const ctx = await chromiumContext(t);
  const page = await ctx.newPage();
  for (const c of charts) {
    const svg = toSvg(c);
    assert.ok(!svg.includes('<style'), `${c.machine}: the look is in presentation attributes, not a <style> block`);
    // DOMParser as an XML reader: a converter reads the file as XML, not as forgiving HTML.
    const measured: unknown = await page.evaluate(`(async () => {
      const text = ${JSON.stringify(svg)};
      const parsed = new DOMParser().parseFromString(text, 'image/svg+xml');
      if (parsed.querySelector('parsererror') !== null) return { error: parsed.querySelector('parsererror').textContent };
      const img = new Image();
      img.src = 'data:image/svg+xml;base64,' + btoa(unescape(encodeURIComponent(text)));
      await img.decode();
      const canvas = document.createElement('canvas');
      canvas.width = img.width;
      canvas.height = img.height;
      const g = canvas.getContext('2d');
      g.fillStyle = '#fff';
      g.fillRect(0, 0, canvas.width, canvas.height);
      g.drawImage(img, 0, 0);
      const data = g.getImageData(0, 0, canvas.width, canvas.height).data;
      let dark = 0;
      for (let i = 0; i < data.length; i += 4) if (data[i] + data[i + 1] + data[i + 2] < 200) dark++;
      return { dark: dark / (data.length / 4), width: img.width };
    })()`);
    assert.ok(typeof measured === 'object' && measured !== null);
    assert.ok(!('error' in measured), `${c.machine}: the SVG is well-formed XML: ${JSON.stringify(measured)}`);
    assert.ok('dark' in measured && typeof measured.dark === 'number' && 'width' in measured && typeof measured.width === 'number');
    assert.ok(measured.width > 100, `${c.machine}: drawn at its size`);
    assert.ok(measured.dark > 0.001 && measured.dark < 0.1, `${c.machine}: ${(measured.dark * 100).toFixed(1)}% dark pixels: lines and text on light boxes`);
  }
});
