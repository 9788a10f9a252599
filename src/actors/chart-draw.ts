// Drawing a Chart: Mermaid's stateDiagram-v2, Graphviz dot, and SVG laid out here (states as nested
// boxes in rows by distance from the initial state, transitions as labelled arrows), so the debug
// page needs no layout library and nothing from the internet.
import { statesOf, type Chart, type ChartState, type ChartTransition } from './chart.js';

/** A stable identifier for a state path in Mermaid and dot (`running.waiting-for-leader` → `s_running_waiting_for_leader`). */
export function stateId(path: string): string {
  return path === '' ? 's_root' : `s_${path.replace(/[^A-Za-z0-9]/g, '_')}`;
}

const label = (t: ChartTransition): string => (t.guard === undefined ? t.event : `${t.event} [${t.guard}]`);
const isLoop = (t: ChartTransition): boolean => t.targets.length === 0 || t.targets.every((x) => x === t.source);
const nameOf = (c: Chart, s: ChartState): string => (s.path === '' ? c.machine : s.key);

// A path inside another (`running.loading` inside `running`; everything inside the root).
const isInside = (inner: string, outer: string): boolean => inner !== outer && (outer === '' || inner.startsWith(`${outer}.`));

// A transition of a compound state fires in whichever of its states the machine is: drawn from a
// point inside it named "any", since Mermaid (an edge from a compound to its own child fails to
// render) and Graphviz (a head inside the tail's cluster) cannot draw it from the compound itself.
const anyOf = (path: string): string => `${stateId(path)}__any`;
const inward = (c: Chart): Set<string> => new Set(c.transitions.flatMap((t) => (t.targets.some((x) => isInside(x, t.source)) ? [t.source] : [])));

/** The chart as a Mermaid stateDiagram-v2. */
export function toMermaid(c: Chart): string {
  const out = ['stateDiagram-v2'];
  const mermaidText = (s: string): string => s.replace(/[":;#]/g, ' ').replace(/\s+/g, ' ').trim();
  const withAny = inward(c);
  const walk = (s: ChartState, indent: string): void => {
    const id = stateId(s.path);
    if (s.children.length === 0) {
      out.push(`${indent}state "${mermaidText(nameOf(c, s))}" as ${id}`);
      return;
    }
    out.push(`${indent}state "${mermaidText(nameOf(c, s))}" as ${id} {`);
    if (s.initial !== undefined) out.push(`${indent}  [*] --> ${stateId(s.initial)}`);
    if (withAny.has(s.path)) out.push(`${indent}  state "any" as ${anyOf(s.path)}`);
    for (const k of s.children) walk(k, `${indent}  `);
    for (const k of s.children) if (k.kind === 'final') out.push(`${indent}  ${stateId(k.path)} --> [*]`);
    out.push(`${indent}}`);
  };
  walk(c.root, '  ');
  for (const t of c.transitions) {
    const targets = isLoop(t) ? [t.source] : t.targets;
    for (const target of targets) out.push(`  ${isInside(target, t.source) ? anyOf(t.source) : stateId(t.source)} --> ${stateId(target)} : ${mermaidText(label(t))}`);
  }
  return out.join('\n') + '\n';
}

const dotText = (s: string): string => `"${s.replace(/\\/g, '\\\\').replace(/"/g, '\\"')}"`;

/** The chart as a Graphviz digraph: compound states are clusters, reached through an invisible anchor. */
export function toDot(c: Chart): string {
  const out = [`digraph ${dotText(c.machine)} {`, '  compound=true;', '  node [shape=box, style=rounded, fontname="monospace"];', '  edge [fontname="monospace", fontsize=10];'];
  const isCluster = (s: ChartState): boolean => s.children.length > 0;
  const byPath = new Map(statesOf(c).map((s) => [s.path, s]));
  byPath.set('', c.root);
  const withAny = inward(c);
  const walk = (s: ChartState, indent: string): void => {
    const id = stateId(s.path);
    if (!isCluster(s)) {
      out.push(`${indent}${dotText(id)} [label=${dotText(s.key)}${s.kind === 'final' ? ', peripheries=2' : ''}];`);
      return;
    }
    out.push(`${indent}subgraph ${dotText(`cluster_${id}`)} {`, `${indent}  label=${dotText(nameOf(c, s))};`);
    out.push(`${indent}  ${dotText(id)} [shape=point, style=invis, width=0, height=0];`);
    if (s.initial !== undefined) {
      out.push(`${indent}  ${dotText(`${id}__initial`)} [shape=point, width=0.1];`);
      out.push(`${indent}  ${dotText(`${id}__initial`)} -> ${dotText(stateId(s.initial))}${clusterEnd('lhead', s.initial)};`);
    }
    if (withAny.has(s.path)) out.push(`${indent}  ${dotText(anyOf(s.path))} [label="any", shape=plaintext, fontsize=10];`);
    for (const k of s.children) walk(k, `${indent}  `);
    out.push(`${indent}}`);
  };
  const clusterEnd = (end: 'lhead' | 'ltail', path: string): string => {
    const s = byPath.get(path);
    return s !== undefined && isCluster(s) ? ` [${end}=${dotText(`cluster_${stateId(path)}`)}]` : '';
  };
  walk(c.root, '  ');
  for (const t of c.transitions) {
    const targets = isLoop(t) ? [t.source] : t.targets;
    for (const target of targets) {
      const attrs = [`label=${dotText(label(t))}`];
      const src = byPath.get(t.source);
      const dst = byPath.get(target);
      const from = isInside(target, t.source) ? anyOf(t.source) : stateId(t.source);
      // A cluster's anchor to itself is a loop graphviz cannot clip to the cluster: leave it a plain
      // loop; nor can it clip an edge to a cluster one of its ends is inside.
      if (src !== undefined && isCluster(src) && t.source !== target && !isInside(target, t.source)) attrs.push(`ltail=${dotText(`cluster_${stateId(t.source)}`)}`);
      if (dst !== undefined && isCluster(dst) && t.source !== target && !isInside(t.source, target)) attrs.push(`lhead=${dotText(`cluster_${stateId(target)}`)}`);
      out.push(`  ${dotText(from)} -> ${dotText(stateId(target))} [${attrs.join(', ')}];`);
    }
  }
  out.push('}');
  return out.join('\n') + '\n';
}

// SVG layout: monospace text, so widths are known without measuring.
const CHAR_PX = 7.2;
const SMALL_CHAR_PX = 6;
const LINE_PX = 14;
const SMALL_LINE_PX = 12;
const PAD = 12;
const GAP_X = 28;
const GAP_Y = 56;

interface Box {
  readonly state: ChartState;
  /** Transitions that stay in this state (actions only), listed inside its box. */
  readonly loops: readonly string[];
  readonly rows: readonly (readonly Box[])[];
  w: number;
  h: number;
  x: number;
  y: number;
  readonly headerH: number;
  /** Space between neighbours in a row: wide enough for the labels of arrows between them. */
  readonly gapX: number;
}

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

/** Rows of a compound's children: breadth-first from the initial child along transitions between them. */
function rowsOf(s: ChartState, transitions: readonly ChartTransition[]): ChartState[][] {
  const childOf = (path: string): ChartState | undefined => s.children.find((k) => path === k.path || path.startsWith(`${k.path}.`));
  const next = new Map<string, Set<string>>();
  for (const t of transitions) {
    const a = childOf(t.source);
    for (const target of t.targets) {
      const b = childOf(target);
      if (a === undefined || b === undefined || a === b) continue;
      const set = next.get(a.path) ?? new Set<string>();
      set.add(b.path);
      next.set(a.path, set);
    }
  }
  const depth = new Map<string, number>();
  const start = s.children.find((k) => k.path === s.initial) ?? s.children[0];
  const queue: string[] = start === undefined ? [] : [start.path];
  if (start !== undefined) depth.set(start.path, 0);
  for (let i = 0; i < queue.length; i++) {
    const p = queue[i] ?? '';
    for (const q of next.get(p) ?? []) {
      if (depth.has(q)) continue;
      depth.set(q, (depth.get(p) ?? 0) + 1);
      queue.push(q);
    }
  }
  const deepest = Math.max(0, ...depth.values());
  const rows: ChartState[][] = [];
  for (const k of s.children) {
    const d = depth.get(k.path) ?? deepest + 1;
    (rows[d] ??= []).push(k);
  }
  // Each row in the order of the states above that lead to it (their mean position), so fewer arrows cross.
  const at = new Map<string, number>();
  const out = rows.filter((r) => r.length > 0);
  for (const row of out) {
    const weight = (k: ChartState): number => {
      const from = [...next.entries()].filter(([, to]) => to.has(k.path)).map(([p]) => at.get(p)).filter((x) => x !== undefined);
      return from.length === 0 ? 0.5 : from.reduce((n, x) => n + x, 0) / from.length;
    };
    const w = new Map(row.map((k) => [k.path, weight(k)]));
    row.sort((a, b) => (w.get(a.path) ?? 0) - (w.get(b.path) ?? 0));
    row.forEach((k, i) => at.set(k.path, (i + 0.5) / row.length));
  }
  return out;
}

function measure(c: Chart, s: ChartState, transitions: readonly ChartTransition[]): Box {
  const loops = [...new Set(transitions.filter((t) => t.source === s.path && isLoop(t)).map(label))];
  const titleW = nameOf(c, s).length * CHAR_PX;
  const loopsW = Math.max(0, ...loops.map((l) => (l.length + 2) * SMALL_CHAR_PX));
  const headerH = LINE_PX + 8 + loops.length * SMALL_LINE_PX;
  if (s.children.length === 0) {
    return { state: s, loops, rows: [], w: Math.max(72, titleW, loopsW) + 2 * PAD, h: headerH + 6, x: 0, y: 0, headerH, gapX: GAP_X };
  }
  // A few plain states (a probe and its rest) sit side by side, the labels between them in the gap.
  const small = s.children.length <= 3 && s.children.every((k) => k.children.length === 0);
  const states = small ? [s.children] : rowsOf(s, transitions);
  const inside = transitions.filter((t) => !isLoop(t) && t.targets.every((x) => s.children.some((k) => k.path === x)) && s.children.some((k) => k.path === t.source));
  const gapX = small ? Math.max(GAP_X, ...inside.map((t) => label(t).length * SMALL_CHAR_PX + 16)) : GAP_X;
  const rows = states.map((r) => r.map((k) => measure(c, k, transitions)));
  const rowW = rows.map((r) => r.reduce((n, b) => n + b.w, 0) + gapX * (r.length - 1));
  const rowH = rows.map((r) => Math.max(...r.map((b) => b.h)));
  const w = Math.max(titleW, loopsW, ...rowW) + 2 * PAD;
  const h = headerH + PAD + rowH.reduce((n, x) => n + x, 0) + GAP_Y * rows.length;
  return { state: s, loops, rows, w, h, x: 0, y: 0, headerH, gapX };
}

function place(b: Box, x: number, y: number): void {
  b.x = x;
  b.y = y;
  let top = y + b.headerH + GAP_Y * 0.6;
  for (const row of b.rows) {
    const width = row.reduce((n, k) => n + k.w, 0) + b.gapX * (row.length - 1);
    let left = x + (b.w - width) / 2;
    const height = Math.max(...row.map((k) => k.h));
    for (const k of row) {
      place(k, left, top + (height - k.h) / 2);
      left += k.w + b.gapX;
    }
    top += height + GAP_Y;
  }
}

function boxes(b: Box): Box[] {
  return [b, ...b.rows.flat().flatMap(boxes)];
}

/** Where the line from the centre of `b` towards (tx, ty) leaves its border. */
function border(b: Box, tx: number, ty: number): [number, number] {
  const cx = b.x + b.w / 2;
  const cy = b.y + b.h / 2;
  const dx = tx - cx;
  const dy = ty - cy;
  if (dx === 0 && dy === 0) return [cx, cy];
  const scale = Math.min(Math.abs(b.w / 2 / (dx || 1e-9)), Math.abs(b.h / 2 / (dy || 1e-9)));
  return [cx + dx * Math.min(scale, 1), cy + dy * Math.min(scale, 1)];
}

const contains = (outer: Box, inner: Box): boolean => inner.state.path.startsWith(outer.state.path === '' ? '' : `${outer.state.path}.`) && outer !== inner;

// The look as presentation attributes on each element, not a <style> block: rsvg, Inkscape and most
// converters ignore or half-read CSS and fill every shape black. A page's own CSS still wins over
// them, which is how the debug page lights the current state.
const look = {
  box: 'fill="#fff" fill-opacity="0.85" stroke="#345" stroke-width="1.2"',
  inner: 'fill="none" stroke="#345" stroke-width="1.2"',
  name: 'font-family="monospace" font-size="12" fill="#000"',
  small: 'font-family="monospace" font-size="10" fill="#555"',
  edge: 'fill="none" stroke="#567" stroke-width="1.1"',
  label: 'fill="#fff" fill-opacity="0.9" stroke="none"',
  initial: 'fill="#345"',
} as const;

/**
 * The chart as a standalone SVG document. Each state is a `<g class="state" data-state="<path>">`,
 * so a page highlights the current state by adding a class; arrows carry `data-event` labels.
 */
export function toSvg(c: Chart): string {
  const root = measure(c, c.root, c.transitions);
  place(root, 8, 8);
  const all = boxes(root);
  const byPath = new Map(all.map((b) => [b.state.path, b]));
  const parts: string[] = [];
  const f = (n: number): string => n.toFixed(1);
  for (const b of all) {
    const s = b.state;
    const cls = ['state', s.kind, ...s.tags.map((t) => `tag-${t}`)].join(' ');
    parts.push(`<g class="${esc(cls)}" data-state="${esc(s.path)}">`);
    parts.push(`<rect x="${f(b.x)}" y="${f(b.y)}" width="${f(b.w)}" height="${f(b.h)}" rx="8" ${look.box}/>`);
    if (s.kind === 'final') parts.push(`<rect class="inner" x="${f(b.x + 3)}" y="${f(b.y + 3)}" width="${f(b.w - 6)}" height="${f(b.h - 6)}" rx="6" ${look.inner}/>`);
    const tx = s.children.length === 0 ? b.x + b.w / 2 : b.x + PAD;
    const anchor = s.children.length === 0 ? 'middle' : 'start';
    parts.push(`<text class="name" x="${f(tx)}" y="${f(b.y + LINE_PX + 2)}" text-anchor="${anchor}" ${look.name}>${esc(nameOf(c, s))}</text>`);
    b.loops.forEach((l, i) => {
      parts.push(`<text class="loop" x="${f(tx)}" y="${f(b.y + LINE_PX + 4 + SMALL_LINE_PX * (i + 1))}" text-anchor="${anchor}" ${look.small}>↺ ${esc(l)}</text>`);
    });
    if (s.initial !== undefined) {
      const first = byPath.get(s.initial);
      if (first !== undefined) {
        const x = first.x + first.w / 2;
        parts.push(`<circle class="initial" cx="${f(x)}" cy="${f(first.y - 18)}" r="4" ${look.initial}/>`);
        parts.push(`<line class="edge" x1="${f(x)}" y1="${f(first.y - 14)}" x2="${f(x)}" y2="${f(first.y)}" marker-end="url(#arrow)" ${look.edge}/>`);
      }
    }
    parts.push('</g>');
  }
  // Centres and sizes of what a label must not cover: every state's name line, then each placed label.
  const taken = all.map((b) => ({ x: b.state.children.length === 0 ? b.x + b.w / 2 : b.x + PAD + (nameOf(c, b.state).length * CHAR_PX) / 2, y: b.y + LINE_PX - 2, w: b.state.children.length === 0 ? b.w : nameOf(c, b.state).length * CHAR_PX, h: b.headerH }));
  // One arrow per pair of states, every event that takes it listed on its label.
  const pairs = new Map<string, { from: Box; to: Box; labels: string[] }>();
  for (const t of c.transitions) {
    if (isLoop(t)) continue;
    for (const target of t.targets) {
      const from = byPath.get(t.source);
      const to = byPath.get(target);
      if (from === undefined || to === undefined || from === to) continue;
      const key = `${t.source}\u0000${target}`;
      const p = pairs.get(key) ?? { from, to, labels: [] };
      if (!p.labels.includes(label(t))) p.labels.push(label(t));
      pairs.set(key, p);
    }
  }
  for (const { from, to, labels } of pairs.values()) {
    let x1: number;
    let y1: number;
    let x2: number;
    let y2: number;
    if (contains(from, to)) {
      // From a compound state into its own child: down from the compound's header.
      x1 = to.x + to.w / 2 + 10;
      y1 = from.y + from.headerH;
      [x2, y2] = [x1, to.y];
    } else {
      const [tcx, tcy] = [to.x + to.w / 2, to.y + to.h / 2];
      const [fcx, fcy] = [from.x + from.w / 2, from.y + from.h / 2];
      [x1, y1] = contains(to, from) ? [fcx, from.y + from.h] : border(from, tcx, tcy);
      [x2, y2] = contains(to, from) ? [fcx, to.y + to.h] : border(to, fcx, fcy);
    }
    // A pair drawn both ways is bent apart, so the two arrows and labels do not sit on each other.
    const back = pairs.has(`${to.state.path}\u0000${from.state.path}`);
    const nx = back ? ((y2 - y1) / Math.hypot(x2 - x1, y2 - y1 || 1)) * 24 : 0;
    const ny = back ? (-(x2 - x1) / Math.hypot(x2 - x1 || 1, y2 - y1)) * 24 : 0;
    const mx = (x1 + x2) / 2 + nx;
    const my = (y1 + y2) / 2 + ny;
    const events = labels.join('\n');
    parts.push(`<g class="transition" data-from="${esc(from.state.path)}" data-to="${esc(to.state.path)}" data-event="${esc(events)}">`);
    parts.push(`<path class="edge" d="M${f(x1)},${f(y1)} Q${f(mx)},${f(my)} ${f(x2)},${f(y2)}" marker-end="url(#arrow)" ${look.edge}/>`);
    const w = Math.max(...labels.map((l) => l.length)) * SMALL_CHAR_PX + 6;
    const h = labels.length * SMALL_LINE_PX + 2;
    // The label goes at the first point along the arrow where it covers no other label and no state's name.
    const along = (t: number): [number, number] => [(1 - t) ** 2 * x1 + 2 * (1 - t) * t * mx + t ** 2 * x2, (1 - t) ** 2 * y1 + 2 * (1 - t) * t * my + t ** 2 * y2];
    const free = (x: number, y: number): boolean => !taken.some((r) => Math.abs(r.x - x) * 2 < r.w + w && Math.abs(r.y - y) * 2 < r.h + h);
    const [lx, ly] = [0.5, 0.35, 0.65, 0.25, 0.75, 0.15, 0.85].map(along).find(([x, y]) => free(x, y)) ?? along(0.5);
    taken.push({ x: lx, y: ly, w, h });
    parts.push(`<rect class="label" x="${f(lx - w / 2)}" y="${f(ly - h / 2)}" width="${f(w)}" height="${f(h)}" rx="3" ${look.label}/>`);
    labels.forEach((l, i) => {
      parts.push(`<text class="event" x="${f(lx)}" y="${f(ly - h / 2 + SMALL_LINE_PX * (i + 1) - 2)}" text-anchor="middle" ${look.small}>${esc(l)}</text>`);
    });
    parts.push('</g>');
  }
  const width = root.w + 16;
  const height = root.h + 16;
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-machine="${esc(c.machine)}" viewBox="0 0 ${f(width)} ${f(height)}" width="${f(width)}" height="${f(height)}">` +
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#567"/></marker></defs>' +
    parts.join('') +
    '</svg>\n'
  );
}
