// The SVG chart of every machine, read back as geometry from the very SVG the page shows: no arrow
// runs through a state it does not leave, enter or lie inside, none runs over a state's name, and
// every event label sits on open ground (no state box but those holding both ends of its arrow, no
// state's name, no other label), and each arrow runs from border to border, touching a border where
// no other arrow does: what makes the chart readable at 100% zoom.
import * as assert from 'node:assert/strict';
import { test } from 'node:test';
import { actorKinds, chartOf, machinesByKind, toSvg } from '../../src/actors/index.js';

interface Rect {
  readonly x: number;
  readonly y: number;
  readonly w: number;
  readonly h: number;
}
type Point = readonly [number, number];

interface Drawn {
  readonly boxes: ReadonlyMap<string, Rect>;
  /** Each state's name and loop lines, as the rectangles their glyphs take. */
  readonly texts: readonly { readonly state: string; readonly text: string; readonly rect: Rect }[];
  readonly arrows: readonly { readonly from: string; readonly to: string; readonly events: string; readonly line: readonly Point[]; readonly label: Rect }[];
}

const attr = (tag: string, name: string): string => {
  const m = new RegExp(`\\s${name}="([^"]*)"`).exec(tag);
  assert.ok(m !== null, `${name} in ${tag}`);
  return m[1] ?? '';
};
const num = (tag: string, name: string): number => Number(attr(tag, name));
const rectOf = (tag: string): Rect => ({ x: num(tag, 'x'), y: num(tag, 'y'), w: num(tag, 'width'), h: num(tag, 'height') });
const unescape = (s: string): string => s.replace(/&lt;/g, '<').replace(/&gt;/g, '>').replace(/&quot;/g, '"').replace(/&amp;/g, '&');

/** A path's `d` (M, L and Q, absolute) as a polyline; a curve is cut into 24 straight pieces. */
function polyline(d: string): Point[] {
  const out: Point[] = [];
  const re = /([MLQ])\s*([-\d.]+)[ ,]([-\d.]+)(?:\s+([-\d.]+)[ ,]([-\d.]+))?/g;
  for (let m = re.exec(d); m !== null; m = re.exec(d)) {
    const [, cmd, a, b, c, e] = m;
    if (cmd === 'Q') {
      const [x0, y0] = out[out.length - 1] ?? [0, 0];
      const [qx, qy, x2, y2] = [Number(a), Number(b), Number(c), Number(e)];
      for (let i = 1; i <= 24; i++) {
        const t = i / 24;
        out.push([(1 - t) ** 2 * x0 + 2 * (1 - t) * t * qx + t ** 2 * x2, (1 - t) ** 2 * y0 + 2 * (1 - t) * t * qy + t ** 2 * y2]);
      }
    } else out.push([Number(a), Number(b)]);
  }
  return out;
}

/** The geometry of an SVG toSvg drew: its state boxes, their texts, and its arrows with their labels. */
function read(svg: string): Drawn {
  const boxes = new Map<string, Rect>();
  const texts: Drawn['texts'][number][] = [];
  const arrows: Drawn['arrows'][number][] = [];
  for (const [, open, body = ''] of svg.matchAll(/(<g [^>]*>)(.*?)<\/g>/gs)) {
    if (open === undefined) continue;
    if (/class="state[ "]/.test(open)) {
      const state = unescape(attr(open, 'data-state'));
      const rect = /<rect [^>]*>/.exec(body);
      assert.ok(rect !== null, `state ${state} has a box`);
      boxes.set(state, rectOf(rect[0]));
      for (const [, tag = '', content = ''] of body.matchAll(/(<text [^>]*>)([^<]*)<\/text>/g)) {
        const size = num(tag, 'font-size');
        const text = unescape(content);
        // Monospace glyphs are 0.6 em wide; the box of a line runs from its ascent to its descent.
        const w = [...text].length * size * 0.6;
        const anchor = attr(tag, 'text-anchor');
        const x = num(tag, 'x') - (anchor === 'middle' ? w / 2 : anchor === 'end' ? w : 0);
        texts.push({ state, text, rect: { x, y: num(tag, 'y') - size * 0.8, w, h: size } });
      }
    } else if (/class="transition"/.test(open)) {
      const path = /<path [^>]*class="edge"[^>]*>/.exec(body);
      const label = /<rect [^>]*class="label"[^>]*>/.exec(body);
      assert.ok(path !== null && label !== null, `arrow ${open} has a line and a label`);
      arrows.push({ from: unescape(attr(open, 'data-from')), to: unescape(attr(open, 'data-to')), events: unescape(attr(open, 'data-event')), line: polyline(attr(path[0], 'd')), label: rectOf(label[0]) });
    }
  }
  return { boxes, texts, arrows };
}

// A rectangle's inside, less a pixel: an arrow may end on a border and a label may touch one.
const inside = (r: Rect): Rect => ({ x: r.x + 1, y: r.y + 1, w: r.w - 2, h: r.h - 2 });

/** Whether the segment a–b passes through `r` (Liang–Barsky clipping). */
function crosses([ax, ay]: Point, [bx, by]: Point, r: Rect): boolean {
  let t0 = 0;
  let t1 = 1;
  const dx = bx - ax;
  const dy = by - ay;
  for (const [p, q] of [
    [-dx, ax - r.x],
    [dx, r.x + r.w - ax],
    [-dy, ay - r.y],
    [dy, r.y + r.h - ay],
  ] as const) {
    if (p === 0) {
      if (q < 0) return false;
    } else if (p < 0) t0 = Math.max(t0, q / p);
    else t1 = Math.min(t1, q / p);
  }
  return t0 < t1;
}

const overlap = (a: Rect, b: Rect): boolean => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
// `outer` is `inner` or holds it: '' is the machine's root.
const holds = (outer: string, inner: string): boolean => outer === '' || inner === outer || inner.startsWith(`${outer}.`);

/** Every way a drawn chart breaks the rules above, one line each. */
function faults(d: Drawn): { crossings: string[]; labels: string[] } {
  const crossings: string[] = [];
  const labels: string[] = [];
  for (const a of d.arrows) {
    const name = `${a.from || '(root)'} -> ${a.to} (${a.events.replace(/\n/g, ', ')})`;
    const segments = a.line.slice(1).map((p, i) => [a.line[i] ?? p, p] as const);
    for (const [state, box] of d.boxes) {
      // An arrow leaves its source, enters its target, and crosses the borders of the states holding either.
      if (holds(state, a.from) || holds(state, a.to)) continue;
      if (segments.some(([p, q]) => crosses(p, q, inside(box)))) crossings.push(`${name} crosses state ${state}`);
    }
    for (const t of d.texts) if (segments.some(([p, q]) => crosses(p, q, t.rect))) crossings.push(`${name} runs over the text "${t.text}" of ${t.state || '(root)'}`);
    for (const [state, box] of d.boxes) {
      if (holds(state, a.from) && holds(state, a.to)) continue;
      if (overlap(a.label, inside(box))) labels.push(`label of ${name} covers state ${state}`);
    }
    for (const t of d.texts) if (overlap(a.label, t.rect)) labels.push(`label of ${name} covers the text "${t.text}" of ${t.state || '(root)'}`);
  }
  d.arrows.forEach((a, i) => {
    for (const b of d.arrows.slice(i + 1)) if (overlap(inside(a.label), b.label)) labels.push(`labels of ${a.from} -> ${a.to} and ${b.from} -> ${b.to} overlap`);
  });
  // Each arrow runs from its source's border to its target's, and no two touch a border at one point:
  // one arrow in and one out there read as a single arrow through the state.
  const ends = new Map<string, string>();
  for (const a of d.arrows) {
    const name = `${a.from || '(root)'} -> ${a.to}`;
    for (const [state, p] of [
      [a.from, a.line[0]],
      [a.to, a.line[a.line.length - 1]],
    ] as const) {
      const box = d.boxes.get(state);
      if (box === undefined || p === undefined) continue;
      const onX = (Math.abs(p[0] - box.x) < 0.5 || Math.abs(p[0] - box.x - box.w) < 0.5) && p[1] >= box.y && p[1] <= box.y + box.h;
      const onY = (Math.abs(p[1] - box.y) < 0.5 || Math.abs(p[1] - box.y - box.h) < 0.5) && p[0] >= box.x && p[0] <= box.x + box.w;
      if (!onX && !onY) crossings.push(`${name} does not end on the border of ${state || '(root)'}`);
      const key = `${p[0].toFixed(1)},${p[1].toFixed(1)}`;
      const other = ends.get(key);
      if (other !== undefined) crossings.push(`${name} and ${other} meet at ${key}`);
      ends.set(key, name);
    }
  }
  return { crossings, labels };
}

for (const kind of actorKinds) {
  void test(`svg: the ${kind} chart has no arrow through a state or its name, and no label on a state, a name or another label`, () => {
    const c = chartOf(machinesByKind[kind]);
    const drawn = read(toSvg(c));
    assert.ok(drawn.boxes.size > 1 && drawn.arrows.length > 0, 'the chart was read back');
    const { crossings, labels } = faults(drawn);
    assert.deepEqual([...crossings, ...labels], [], `${kind}: ${crossings.length} crossings, ${labels.length} misplaced labels`);
  });
}

void test('svg geometry check: catches an arrow through a state and a label on another', () => {
  const svg =
    '<svg><g class="state atomic" data-state="a"><rect x="0" y="0" width="50" height="20"/></g>' +
    '<g class="state atomic" data-state="b"><rect x="100" y="0" width="50" height="20"/></g>' +
    '<g class="state atomic" data-state="c"><rect x="200" y="0" width="50" height="20"/></g>' +
    '<g class="transition" data-from="a" data-to="c" data-event="go"><path class="edge" d="M50,10 L200,10"/><rect class="label" x="120" y="5" width="20" height="10"/></g></svg>';
  const { crossings, labels } = faults(read(svg));
  assert.deepEqual(crossings, ['a -> c (go) crosses state b']);
  assert.deepEqual(labels, ['label of a -> c (go) covers state b']);
});
