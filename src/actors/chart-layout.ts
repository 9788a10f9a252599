// Where each part of a chart's SVG goes, worked out here so the debug page needs no layout library and
// nothing from the internet. States are nested boxes in rows by distance from the initial state, on
// a grid of GRID_PX; each arrow is routed on that grid around every box it neither leaves, enters nor
// lies inside, and never over a state's name, by a shortest-path search that charges for bends, for
// sharing a track with another arrow and for crossing one; its label then goes at the free spot along
// it that hides the fewest other arrows. A compound whose gutters cannot hold an arrow or its label is
// laid out again with wider gutters.
import { Grid, GRID_PX } from './chart-grid.js';
import type { Rect } from './chart-grid.js';
import type { Chart, ChartState, ChartTransition } from './chart.js';

/** One line of text, at its baseline. */
export interface LaidText {
  readonly text: string;
  readonly x: number;
  readonly y: number;
  readonly anchor: 'start' | 'middle';
}

/** A state's box, its name and the transitions that stay in it (listed inside the box). */
export interface LaidState extends Rect {
  readonly state: ChartState;
  readonly name: LaidText;
  readonly loops: readonly LaidText[];
  /** The dot and stub of the arrow to the initial child, for a compound state. */
  readonly initial: { readonly x: number; readonly y: number; readonly toY: number } | undefined;
}

/** One arrow between two states, every event that takes it written on its label. */
export interface LaidArrow {
  readonly from: string;
  readonly to: string;
  readonly events: readonly string[];
  /** From a point on the source's border to a point on the target's; straight pieces at right angles. */
  readonly points: readonly (readonly [number, number])[];
  readonly label: Rect;
  readonly lines: readonly LaidText[];
}

/** A chart laid out: states parents first, then arrows. */
export interface ChartLayout {
  readonly width: number;
  readonly height: number;
  readonly states: readonly LaidState[];
  readonly arrows: readonly LaidArrow[];
}

// Monospace text, so widths are known without measuring: 0.6 em a glyph. The sizes are chart-draw.ts's look.
const NAME_PX = 12;
const EVENT_PX = 10;
const charPx = (sizePx: number): number => sizePx * 0.6;
const LINE_PX = 14;
const SMALL_LINE_PX = 12;
const TEXT_PAD = 12;
/** Room above a compound's first row for the dot and stub of its initial arrow. */
const INITIAL_PX = 24;
/** Gutters a compound starts with, and how much they grow when an arrow or label did not fit. */
const START = { side: 24, gapX: 40, gapY: 48 } as const;
const GROW_PX = 16;
// After this many layouts the last is drawn as it is; test/actors/chart-draw.test.ts fails on what did not fit.
const ATTEMPTS = 8;

const up = (n: number): number => Math.ceil(n / GRID_PX - 1e-9) * GRID_PX;
const snap = (n: number): number => Math.round(n / GRID_PX) * GRID_PX;

/** The label a transition is written with: its event, and its guard in brackets. */
export const transitionLabel = (t: ChartTransition): string => (t.guard === undefined ? t.event : `${t.event} [${t.guard}]`);
/** A transition that leaves the machine where it was (actions only, or back to its own state). */
export const isLoop = (t: ChartTransition): boolean => t.targets.length === 0 || t.targets.every((x) => x === t.source);
/** The name a state is drawn with: the machine's id for the root. */
export const nameOf = (c: Chart, s: ChartState): string => (s.path === '' ? c.machine : s.key);
/** `outer` holds `inner` or is it ('' is the root, which holds every state). */
const holds = (outer: string, inner: string): boolean => outer === '' || inner === outer || inner.startsWith(`${outer}.`);

interface Gaps {
  side: number;
  gapX: number;
  gapY: number;
  /** A wider gap to the right of some children: two neighbours with a label between them. */
  readonly beside: Map<string, number>;
}

/** What did not fit in an attempt: a compound's gutters, or the gap right of one of its children. */
interface Cramped {
  readonly path: string;
  readonly rightOf?: { readonly path: string; readonly widthPx: number };
  /** An arrow from the compound's own border to a child of it: only its margin need grow. */
  readonly margin?: true;
}

interface Box {
  readonly state: ChartState;
  readonly loops: readonly string[];
  readonly rows: readonly (readonly Box[])[];
  readonly headerH: number;
  readonly gaps: Gaps;
  w: number;
  h: number;
  x: number;
  y: number;
}

/** Rows of a compound's children: breadth-first from the initial child along transitions between them. */
function rowsOf(s: ChartState, transitions: readonly ChartTransition[]): ChartState[][] {
  const childOf = (path: string): ChartState | undefined => s.children.find((k) => holds(k.path, path));
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

function measure(c: Chart, s: ChartState, transitions: readonly ChartTransition[], gapsOf: (path: string) => Gaps): Box {
  const loops = [...new Set(transitions.filter((t) => t.source === s.path && isLoop(t)).map(transitionLabel))];
  const titleW = nameOf(c, s).length * charPx(NAME_PX);
  const loopsW = Math.max(0, ...loops.map((l) => (l.length + 2) * charPx(EVENT_PX)));
  const headerH = LINE_PX + 8 + loops.length * SMALL_LINE_PX;
  const gaps = gapsOf(s.path);
  if (s.children.length === 0) {
    return { state: s, loops, rows: [], headerH, gaps, w: up(Math.max(72, titleW, loopsW) + 2 * TEXT_PAD), h: up(headerH + 6), x: 0, y: 0 };
  }
  // A few plain states (a probe and its rest) sit side by side, the labels between them in the gap.
  const small = s.children.length <= 3 && s.children.every((k) => k.children.length === 0);
  const rows = (small ? [s.children] : rowsOf(s, transitions)).map((r) => r.map((k) => measure(c, k, transitions, gapsOf)));
  const between = transitions.filter((t) => !isLoop(t) && s.children.some((k) => k.path === t.source) && t.targets.every((x) => s.children.some((k) => k.path === x)));
  const gapX = small ? up(Math.max(gaps.gapX, ...between.map((t) => transitionLabel(t).length * charPx(EVENT_PX) + 6 + 3 * GRID_PX))) : gaps.gapX;
  const gapAfter = (k: Box): number => Math.max(gapX, gaps.beside.get(k.state.path) ?? 0);
  const rowW = rows.map((r) => r.reduce((n, b, i) => n + b.w + (i < r.length - 1 ? gapAfter(b) : 0), 0));
  const rowH = rows.map((r) => Math.max(...r.map((b) => b.h)));
  const w = up(Math.max(titleW + 2 * TEXT_PAD, loopsW + 2 * TEXT_PAD, ...rowW.map((x) => x + 2 * gaps.side)));
  const h = up(headerH) + INITIAL_PX + rowH.reduce((n, x) => n + x, 0) + gaps.gapY * (rows.length - 1) + gaps.side;
  return { state: s, loops, rows, headerH, gaps: { ...gaps, gapX }, w, h, x: 0, y: 0 };
}

function place(b: Box, x: number, y: number): void {
  b.x = x;
  b.y = y;
  let top = y + up(b.headerH) + INITIAL_PX;
  for (const row of b.rows) {
    const gapAfter = (k: Box): number => Math.max(b.gaps.gapX, b.gaps.beside.get(k.state.path) ?? 0);
    const width = row.reduce((n, k, i) => n + k.w + (i < row.length - 1 ? gapAfter(k) : 0), 0);
    let left = x + snap((b.w - width) / 2);
    const height = Math.max(...row.map((k) => k.h));
    for (const k of row) {
      place(k, left, top + snap((height - k.h) / 2));
      left += k.w + gapAfter(k);
    }
    top += height + b.gaps.gapY;
  }
}

const boxesOf = (b: Box): Box[] => [b, ...b.rows.flat().flatMap(boxesOf)];

function texts(c: Chart, b: Box): { name: LaidText; loops: LaidText[] } {
  const plain = b.state.children.length === 0;
  const x = plain ? b.x + b.w / 2 : b.x + TEXT_PAD;
  const anchor = plain ? 'middle' : 'start';
  return {
    name: { text: nameOf(c, b.state), x, y: b.y + LINE_PX + 2, anchor },
    loops: b.loops.map((l, i) => ({ text: `↺ ${l}`, x, y: b.y + LINE_PX + 4 + SMALL_LINE_PX * (i + 1), anchor })),
  };
}

/** The rectangle a line of text covers: monospace glyphs, from ascent to descent. */
function textRect(t: LaidText, sizePx: number): Rect {
  const w = [...t.text].length * charPx(sizePx);
  return { x: t.anchor === 'middle' ? t.x - w / 2 : t.x, y: t.y - sizePx * 0.8, w, h: sizePx };
}

const overlaps = (a: Rect, b: Rect): boolean => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
const grow = (r: Rect, by: number): Rect => ({ x: r.x - by, y: r.y - by, w: r.w + 2 * by, h: r.h + 2 * by });

/** The corners of a path of grid points: its ends and every point where it turns. */
function corners(points: readonly (readonly [number, number])[]): [number, number][] {
  const out: [number, number][] = [];
  points.forEach((p, i) => {
    const a = points[i - 1];
    const b = points[i + 1];
    if (a === undefined || b === undefined || (a[0] === p[0]) !== (p[0] === b[0])) out.push([p[0], p[1]]);
  });
  return out;
}

interface Pair {
  readonly from: number;
  readonly to: number;
  readonly events: string[];
}

/** One attempt's boxes, measured and placed, and what its arrows and labels must keep clear of. */
interface Placed {
  readonly root: Box;
  /** Every box, the root first, then depth first. */
  readonly boxes: readonly Box[];
  readonly index: ReadonlyMap<string, number>;
  /** Each box's parent in `boxes`; -1 for the root. */
  readonly parent: readonly number[];
  readonly states: LaidState[];
  readonly textRects: readonly Rect[];
  readonly initials: readonly Rect[];
  readonly width: number;
  readonly height: number;
  readonly grid: Grid;
}

/** A segment of a routed arrow. */
interface Segment {
  readonly p: Pair;
  readonly a: readonly [number, number];
  readonly b: readonly [number, number];
}

/** One attempt at a layout; what did not fit names the compound whose gutters must grow. */
function attempt(c: Chart, gapsOf: (path: string) => Gaps): { layout: ChartLayout; cramped: Cramped[] } {
  const l = placedBoxes(c, gapsOf);
  const cramped: Cramped[] = [];
  const { order, routes } = routeArrows(l, pairsOf(c, l.index), cramped);
  const segments = [...routes.entries()].flatMap(([p, pts]) => pts.slice(1).map((b, i) => ({ p, a: pts[i] ?? b, b })));
  const placed: Rect[] = [];
  const arrows = order.map((p) => labelledArrow(l, p, routes.get(p) ?? [], segments, placed, cramped));
  return { layout: { width: l.width, height: l.height, states: l.states, arrows }, cramped };
}

/** Measures and places every box, lays out their texts, and builds the routing grid around them. */
function placedBoxes(c: Chart, gapsOf: (path: string) => Gaps): Placed {
  const root = measure(c, c.root, c.transitions, gapsOf);
  place(root, GRID_PX, GRID_PX);
  const boxes = boxesOf(root);
  const index = new Map(boxes.map((b, i) => [b.state.path, i]));
  const parent = boxes.map((b) => {
    const path = b.state.path;
    return path === '' ? -1 : (index.get(path.includes('.') ? path.slice(0, path.lastIndexOf('.')) : '') ?? -1);
  });
  const states: LaidState[] = boxes.map((b) => {
    const first = b.state.initial === undefined ? undefined : boxes[index.get(b.state.initial) ?? -1];
    const initial = first === undefined ? undefined : { x: first.x + first.w / 2, y: first.y - 18, toY: first.y };
    return { state: b.state, x: b.x, y: b.y, w: b.w, h: b.h, initial, ...texts(c, b) };
  });
  const textRects = states.flatMap((s) => [textRect(s.name, NAME_PX), ...s.loops.map((l) => textRect(l, EVENT_PX))]);
  const initials = states.flatMap((s) => (s.initial === undefined ? [] : [{ x: s.initial.x - 6, y: s.initial.y - 6, w: 12, h: s.initial.toY - s.initial.y + 6 }]));
  const width = root.w + 2 * GRID_PX;
  const height = root.h + 2 * GRID_PX;
  const grid = new Grid(width, height, boxes, parent, [...textRects.map((r) => grow(r, 2)), ...initials]);
  return { root, boxes, index, parent, states, textRects, initials, width, height, grid };
}

/** The arrows to draw: one per pair of distinct states a transition joins, with every event it carries. */
function pairsOf(c: Chart, index: ReadonlyMap<string, number>): Map<string, Pair> {
  const pairs = new Map<string, Pair>();
  for (const t of c.transitions) {
    if (isLoop(t)) continue;
    for (const target of t.targets) {
      const from = index.get(t.source);
      const to = index.get(target);
      if (from === undefined || to === undefined || from === to) continue;
      const key = `${t.source}\u0000${target}`;
      const p = pairs.get(key) ?? { from, to, events: [] };
      if (!p.events.includes(transitionLabel(t))) p.events.push(transitionLabel(t));
      pairs.set(key, p);
    }
  }
  return pairs;
}

const boxAt = (l: Placed, i: number): Box => l.boxes[i] ?? l.root;

// The innermost box holding both ends: its gutters are where the arrow and its label go.
function holder(l: Placed, p: Pair): number {
  for (let i = p.from; i >= 0; i = l.parent[i] ?? -1) if (holds(boxAt(l, i).state.path, boxAt(l, p.to).state.path)) return i;
  return 0;
}

// Two neighbours in a row of `home`, one holding each end of `p`: the label needs the gap between them.
function neighbours(l: Placed, home: Box, p: Pair, widthPx: number): Pick<Cramped, 'rightOf'> {
  for (const row of home.rows) {
    const a = row.findIndex((k) => holds(k.state.path, boxAt(l, p.from).state.path));
    const b = row.findIndex((k) => holds(k.state.path, boxAt(l, p.to).state.path));
    const left = row[Math.min(a, b)];
    if (a >= 0 && b >= 0 && Math.abs(a - b) === 1 && left !== undefined) return { rightOf: { path: left.state.path, widthPx: up(widthPx + 4 * GRID_PX) } };
  }
  return {};
}

const centre = (b: Box): [number, number] => [b.x + b.w / 2, b.y + b.h / 2];

/** Routes each arrow on the grid; one that finds no way is drawn straight and cramps its holder. */
function routeArrows(l: Placed, pairs: ReadonlyMap<string, Pair>, cramped: Cramped[]): { order: Pair[]; routes: Map<Pair, [number, number][]> } {
  // Short arrows first: they take the direct tracks, and the long ones go round them.
  const span = (p: Pair): number => {
    const [ax, ay] = centre(boxAt(l, p.from));
    const [bx, by] = centre(boxAt(l, p.to));
    return Math.abs(ax - bx) + Math.abs(ay - by);
  };
  const order = [...pairs.values()].sort((a, b) => span(a) - span(b));
  const routes = new Map<Pair, [number, number][]>();
  for (const p of order) {
    const path = l.grid.route(p.from, p.to);
    if (path === undefined) {
      cramped.push({ path: boxAt(l, holder(l, p)).state.path });
      const [ax, ay] = centre(boxAt(l, p.from));
      const [bx, by] = centre(boxAt(l, p.to));
      routes.set(p, [
        [ax, ay],
        [bx, by],
      ]);
    } else routes.set(p, corners(path.map((q) => l.grid.xy(q))));
  }
  return { order, routes };
}

/** An arrow with its label placed; a label with no free spot cramps its holder (or the gap it needs). */
function labelledArrow(l: Placed, p: Pair, pts: [number, number][], segments: readonly Segment[], placed: Rect[], cramped: Cramped[]): LaidArrow {
  const w = Math.max(...p.events.map((e) => e.length)) * charPx(EVENT_PX) + 6;
  const h = p.events.length * SMALL_LINE_PX + 2;
  const homeAt = holder(l, p);
  const home = boxAt(l, homeAt);
  const best = labelSpot(l, p, homeAt, pts, segments, placed, w, h);
  if (best === undefined) cramped.push({ path: home.state.path, ...neighbours(l, home, p, w), ...(boxAt(l, p.from) === home || boxAt(l, p.to) === home ? { margin: true as const } : {}) });
  const [mx, my] = pts[Math.floor(pts.length / 2)] ?? [0, 0];
  const label = best ?? { x: mx - w / 2, y: my - h / 2, w, h };
  placed.push(label);
  return {
    from: boxAt(l, p.from).state.path,
    to: boxAt(l, p.to).state.path,
    events: p.events,
    points: pts,
    label,
    lines: p.events.map((e, i) => ({ text: e, x: label.x + label.w / 2, y: label.y + SMALL_LINE_PX * (i + 1) - 2, anchor: 'middle' })),
  };
}

/** The cheapest free w×h spot along the arrow's path: near its middle, on it rather than beside, over few other arrows. */
function labelSpot(l: Placed, p: Pair, homeAt: number, pts: readonly [number, number][], segments: readonly Segment[], placed: readonly Rect[], w: number, h: number): Rect | undefined {
  const home = boxAt(l, homeAt);
  const homeInside = { x: home.x + 2, y: home.y + 2, w: home.w - 4, h: home.h - 4 };
  // Which boxes a label may lie on: those holding both ends of its arrow.
  const foreign = l.boxes.filter((_, i) => {
    for (let k = homeAt; k >= 0; k = l.parent[k] ?? -1) if (k === i) return false;
    return true;
  });
  const clear = (r: Rect): boolean =>
    r.x >= homeInside.x &&
    r.y >= homeInside.y &&
    r.x + r.w <= homeInside.x + homeInside.w &&
    r.y + r.h <= homeInside.y + homeInside.h &&
    !foreign.some((b) => overlaps(r, grow(b, 2))) &&
    !l.textRects.some((t) => overlaps(r, grow(t, 1))) &&
    !l.initials.some((t) => overlaps(r, t)) &&
    !placed.some((q) => overlaps(r, grow(q, 2)));
  const hidden = (r: Rect): number => segments.filter((s) => s.p !== p && crossesRect(s.a, s.b, r)).length;
  const total = pts.slice(1).reduce((n, b, i) => n + Math.abs(b[0] - (pts[i]?.[0] ?? 0)) + Math.abs(b[1] - (pts[i]?.[1] ?? 0)), 0);
  let best: { r: Rect; cost: number } | undefined;
  let walked = 0;
  pts.slice(1).forEach((b, i) => {
    const a = pts[i] ?? b;
    const len = Math.abs(b[0] - a[0]) + Math.abs(b[1] - a[1]);
    const horizontal = a[1] === b[1];
    for (let at = 0; at <= len; at += GRID_PX / 2) {
      const along = walked + at;
      // Clear of the arrowhead and of the border the arrow leaves.
      if (along < GRID_PX || total - along < 2 * GRID_PX) continue;
      const t = len === 0 ? 0 : at / len;
      const x = a[0] + (b[0] - a[0]) * t;
      const y = a[1] + (b[1] - a[1]) * t;
      const spots: [Rect, number][] = horizontal
        ? [
            [{ x: x - w / 2, y: y - h / 2, w, h }, 0],
            [{ x: x - w / 2, y: y - h - 2, w, h }, 6],
            [{ x: x - w / 2, y: y + 2, w, h }, 6],
          ]
        : [
            [{ x: x - w / 2, y: y - h / 2, w, h }, 2],
            [{ x: x + 3, y: y - h / 2, w, h }, 8],
            [{ x: x - w - 3, y: y - h / 2, w, h }, 8],
          ];
      for (const [r, extra] of spots) {
        // Cheapest test first: most spots lose on position alone, or are not free.
        const near = extra + Math.abs(along - total / 2) / 40;
        if ((best !== undefined && near >= best.cost) || !clear(r)) continue;
        const cost = near + 100 * hidden(r);
        if (best === undefined || cost < best.cost) best = { r, cost };
      }
    }
    walked += len;
  });
  return best?.r;
}

/** Whether the segment a–b passes through `r` (axis-parallel segments only). */
function crossesRect(a: readonly [number, number], b: readonly [number, number], r: Rect): boolean {
  const [x0, x1] = [Math.min(a[0], b[0]), Math.max(a[0], b[0])];
  const [y0, y1] = [Math.min(a[1], b[1]), Math.max(a[1], b[1])];
  return x0 <= r.x + r.w && x1 >= r.x && y0 <= r.y + r.h && y1 >= r.y;
}

/** Where every box, name, arrow and label of `c` goes. */
export function layoutOf(c: Chart): ChartLayout {
  const gaps = new Map<string, Gaps>();
  const gapsOf = (path: string): Gaps => {
    const g = gaps.get(path) ?? { ...START, beside: new Map<string, number>() };
    gaps.set(path, g);
    return g;
  };
  let tried = attempt(c, gapsOf);
  for (let i = 1; i < ATTEMPTS && tried.cramped.length > 0; i++) {
    for (const { path, rightOf, margin } of tried.cramped) {
      const g = gapsOf(path);
      const had = rightOf === undefined ? undefined : Math.max(g.gapX, g.beside.get(rightOf.path) ?? 0);
      if (rightOf !== undefined && had !== undefined && had < rightOf.widthPx) g.beside.set(rightOf.path, rightOf.widthPx);
      else if (margin === true) g.side += GROW_PX;
      else {
        g.side += GROW_PX;
        g.gapX += GROW_PX;
        g.gapY += GROW_PX;
      }
    }
    tried = attempt(c, gapsOf);
  }
  return tried.layout;
}
