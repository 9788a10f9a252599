// Drawing a Chart: Mermaid's stateDiagram-v2, Graphviz dot, and SVG from the layout chart-layout.ts
// works out (states as nested boxes, transitions as labelled arrows routed around them), so the debug
// page needs no layout library and nothing from the internet.
import { statesOf, type Chart, type ChartState } from './chart.js';
import { isLoop, layoutOf, nameOf, transitionLabel as label, type LaidText } from './chart-layout.js';

/** A stable identifier for a state path in Mermaid and dot (`running.waiting-for-leader` → `s_running_waiting_for_leader`). */
export function stateId(path: string): string {
  return path === '' ? 's_root' : `s_${path.replace(/[^A-Za-z0-9]/g, '_')}`;
}


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

const esc = (s: string): string => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

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
 * The chart as a standalone SVG document, laid out by `layoutOf`. Each state is a
 * `<g class="state" data-state="<path>">`, so a page highlights the current state by adding a class;
 * arrows carry `data-event` labels.
 */
export function toSvg(c: Chart): string {
  const layout = layoutOf(c);
  const parts: string[] = [];
  const f = (n: number): string => n.toFixed(1);
  const text = (cls: string, t: LaidText, style: string): string => `<text class="${cls}" x="${f(t.x)}" y="${f(t.y)}" text-anchor="${t.anchor}" ${style}>${esc(t.text)}</text>`;
  for (const b of layout.states) {
    const s = b.state;
    const cls = ['state', s.kind, ...s.tags.map((t) => `tag-${t}`)].join(' ');
    parts.push(`<g class="${esc(cls)}" data-state="${esc(s.path)}">`);
    parts.push(`<rect x="${f(b.x)}" y="${f(b.y)}" width="${f(b.w)}" height="${f(b.h)}" rx="8" ${look.box}/>`);
    if (s.kind === 'final') parts.push(`<rect class="inner" x="${f(b.x + 3)}" y="${f(b.y + 3)}" width="${f(b.w - 6)}" height="${f(b.h - 6)}" rx="6" ${look.inner}/>`);
    parts.push(text('name', b.name, look.name));
    for (const l of b.loops) parts.push(text('loop', l, look.small));
    if (b.initial !== undefined) {
      const { x, y, toY } = b.initial;
      parts.push(`<circle class="initial" cx="${f(x)}" cy="${f(y)}" r="4" ${look.initial}/>`);
      parts.push(`<line class="edge" x1="${f(x)}" y1="${f(y + 4)}" x2="${f(x)}" y2="${f(toY)}" marker-end="url(#arrow)" ${look.edge}/>`);
    }
    parts.push('</g>');
  }
  for (const a of layout.arrows) {
    parts.push(`<g class="transition" data-from="${esc(a.from)}" data-to="${esc(a.to)}" data-event="${esc(a.events.join('\n'))}">`);
    parts.push(`<path class="edge" d="${pathOf(a.points, f)}" marker-end="url(#arrow)" ${look.edge}/>`);
    parts.push(`<rect class="label" x="${f(a.label.x)}" y="${f(a.label.y)}" width="${f(a.label.w)}" height="${f(a.label.h)}" rx="3" ${look.label}/>`);
    for (const l of a.lines) parts.push(text('event', l, look.small));
    parts.push('</g>');
  }
  const [width, height] = [f(layout.width), f(layout.height)];
  return (
    `<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-machine="${esc(c.machine)}" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}">` +
    '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#567"/></marker></defs>' +
    parts.join('') +
    '</svg>\n'
  );
}

/** An arrow's straight pieces as a path, each turn rounded so two arrows meeting at a corner read apart. */
function pathOf(points: readonly (readonly [number, number])[], f: (n: number) => string): string {
  const [first, ...rest] = points;
  if (first === undefined) return '';
  const out = [`M${f(first[0])},${f(first[1])}`];
  rest.forEach((p, i) => {
    const a = points[i] ?? p;
    const b = rest[i + 1];
    if (b === undefined) {
      out.push(`L${f(p[0])},${f(p[1])}`);
      return;
    }
    const r = Math.min(4, Math.hypot(p[0] - a[0], p[1] - a[1]) / 2, Math.hypot(b[0] - p[0], b[1] - p[1]) / 2);
    const towards = (q: readonly [number, number], by: number): [number, number] => {
      const len = Math.hypot(q[0] - p[0], q[1] - p[1]) || 1;
      return [p[0] + ((q[0] - p[0]) / len) * by, p[1] + ((q[1] - p[1]) / len) * by];
    };
    const [ix, iy] = towards(a, r);
    const [ox, oy] = towards(b, r);
    out.push(`L${f(ix)},${f(iy)}`, `Q${f(p[0])},${f(p[1])} ${f(ox)},${f(oy)}`);
  });
  return out.join(' ');
}
