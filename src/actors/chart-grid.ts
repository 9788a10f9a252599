// The grid arrows are routed on: each cell's cost (free, beside a box's border, on a track another
// arrow takes, crossing one) and the shortest-path search over it that charges for bends.
/** A rectangle in SVG user units (px at 100% zoom). */
export interface Rect {
  readonly x: number;
  readonly y: number;
  readonly w: number;
  readonly h: number;
}

/** Every box edge and every arrow lies on this grid, so arrows a track apart never touch. */
export const GRID_PX = 8;

// Directions on the grid: right, down, left, up.
const dx = (d: number): number => (d === 0 ? 1 : d === 2 ? -1 : 0);
const dy = (d: number): number => (d === 1 ? 1 : d === 3 ? -1 : 0);
const BEND = 4;
const SHARED = 40;
const CROSSED = 6;
const BORDER = 12;

/** A binary min-heap of grid states keyed by cost. */
class Heap {
  readonly #keys: number[] = [];
  readonly #items: number[] = [];
  get size(): number {
    return this.#items.length;
  }
  push(key: number, item: number): void {
    const k = this.#keys;
    const v = this.#items;
    let i = v.length;
    k.push(key);
    v.push(item);
    while (i > 0) {
      const p = (i - 1) >> 1;
      if ((k[p] ?? 0) <= key) break;
      k[i] = k[p] ?? 0;
      v[i] = v[p] ?? 0;
      i = p;
    }
    k[i] = key;
    v[i] = item;
  }
  pop(): number {
    const k = this.#keys;
    const v = this.#items;
    const top = v[0] ?? 0;
    const lastK = k.pop() ?? 0;
    const lastV = v.pop() ?? 0;
    const n = v.length;
    if (n === 0) return top;
    let i = 0;
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && (k[c + 1] ?? 0) < (k[c] ?? 0)) c++;
      if ((k[c] ?? 0) >= lastK) break;
      k[i] = k[c] ?? 0;
      v[i] = v[c] ?? 0;
      i = c;
    }
    k[i] = lastK;
    v[i] = lastV;
    return top;
  }
}

/** The grid the arrows are routed on, and what earlier arrows left on it. */
export class Grid {
  readonly nx: number;
  readonly ny: number;
  /** Per point: the innermost box whose closed rectangle holds it (-1 outside every box). */
  readonly closed: Int32Array;
  /** Per point: on a box's border, where an arrow is charged for each step so it crosses borders and never runs along one. */
  readonly border: Uint8Array;
  /** Per point: text or an initial arrow is there. */
  readonly busy: Uint8Array;
  /** Per point: arrows through it horizontally (bit 1) and vertically (bit 2). */
  readonly through: Uint8Array;
  /** Per point: arrows on the grid edge to its right (index p) and below it (index p + n). */
  readonly used: Uint16Array;

  constructor(
    width: number,
    height: number,
    readonly boxes: readonly Rect[],
    readonly parent: readonly number[],
    keepOut: readonly Rect[],
  ) {
    this.nx = Math.floor(width / GRID_PX) + 1;
    this.ny = Math.floor(height / GRID_PX) + 1;
    const n = this.nx * this.ny;
    this.closed = new Int32Array(n).fill(-1);
    this.border = new Uint8Array(n);
    this.busy = new Uint8Array(n);
    this.through = new Uint8Array(n);
    this.used = new Uint16Array(2 * n);
    // Parents come before children, so the innermost box is written last.
    boxes.forEach((b, i) => {
      for (let gy = Math.ceil(b.y / GRID_PX); gy * GRID_PX <= b.y + b.h; gy++) {
        for (let gx = Math.ceil(b.x / GRID_PX); gx * GRID_PX <= b.x + b.w; gx++) {
          const p = gy * this.nx + gx;
          this.closed[p] = i;
          const onBorder = gx * GRID_PX === b.x || gx * GRID_PX === b.x + b.w || gy * GRID_PX === b.y || gy * GRID_PX === b.y + b.h;
          if (onBorder) this.border[p] = 1;
        }
      }
    });
    for (const r of keepOut) {
      // The points inside: every keep-out is over a grid step across, so no piece of arrow slips between two.
      for (let gy = Math.max(0, Math.ceil(r.y / GRID_PX)); gy <= Math.min(this.ny - 1, Math.floor((r.y + r.h) / GRID_PX)); gy++) {
        for (let gx = Math.max(0, Math.ceil(r.x / GRID_PX)); gx <= Math.min(this.nx - 1, Math.floor((r.x + r.w) / GRID_PX)); gx++) this.busy[gy * this.nx + gx] = 1;
      }
    }
  }

  /** Points of box `i`'s border an arrow may leave or enter by, each with the direction it moves there. */
  ports(i: number, inward: boolean): Map<number, number> {
    const b = this.boxes[i];
    const out = new Map<number, number>();
    if (b === undefined) return out;
    const [x0, y0, x1, y1] = [b.x / GRID_PX, b.y / GRID_PX, (b.x + b.w) / GRID_PX, (b.y + b.h) / GRID_PX];
    // Not at a corner, where the border is rounded.
    const add = (gx: number, gy: number, outwards: number): void => {
      const d = inward ? (outwards + 2) % 4 : outwards;
      const p = gy * this.nx + gx;
      // The port and the point the arrow goes to first, clear of names and initial arrows; and a port
      // no other arrow has, or an arrow in and one out there would read as one arrow through the border.
      const next = (gy + dy(d)) * this.nx + gx + dx(d);
      if (this.busy[p] === 1 || this.busy[next] === 1 || this.through[p] !== 0) return;
      out.set(p, d);
    };
    for (let gx = x0 + 2; gx <= x1 - 2; gx++) {
      add(gx, y0, 3);
      add(gx, y1, 1);
    }
    for (let gy = y0 + 2; gy <= y1 - 2; gy++) {
      add(x0, gy, 2);
      add(x1, gy, 0);
    }
    return out;
  }

  /** The cheapest path from a port of box `from` to a port of box `to`, as grid points; undefined if there is none. */
  route(from: number, to: number): number[] | undefined {
    const isIn = (inner: number, outer: number): boolean => {
      for (let i: number | undefined = inner; i !== undefined && i >= 0; i = this.parent[i]) if (i === outer) return true;
      return false;
    };
    const inward = isIn(to, from);
    const outward = isIn(from, to);
    // The boxes the arrow may pass: those holding either end, and an end that holds the other.
    const allowed = new Uint8Array(this.boxes.length);
    for (let i = this.parent[from] ?? -1; i >= 0; i = this.parent[i] ?? -1) allowed[i] = 1;
    for (let i = this.parent[to] ?? -1; i >= 0; i = this.parent[i] ?? -1) allowed[i] = 1;
    if (inward) allowed[from] = 1;
    if (outward) allowed[to] = 1;
    const starts = this.ports(from, inward);
    // Entering the target: inwards through its border, or outwards when the target holds the source.
    const ends = new Map([...this.ports(to, outward)].map(([p, d]) => [p, (d + 2) % 4]));
    const target = this.boxes[to];
    if (target === undefined || starts.size === 0 || ends.size === 0) return undefined;
    // Per point: 1 + the direction an arrow leaves a start port by, or 5 + the one it enters an end port by.
    const n = this.nx * this.ny;
    const port = new Uint8Array(n);
    for (const [p, d] of starts) port[p] = 1 + d;
    for (const [p, d] of ends) port[p] = 5 + d;
    const [tx0, ty0, tx1, ty1] = [target.x / GRID_PX, target.y / GRID_PX, (target.x + target.w) / GRID_PX, (target.y + target.h) / GRID_PX];
    const guess = (p: number): number => {
      const gx = p % this.nx;
      const gy = (p - gx) / this.nx;
      return Math.max(0, tx0 - gx, gx - tx1) + Math.max(0, ty0 - gy, gy - ty1);
    };
    const cost = new Float64Array(4 * n).fill(Infinity);
    const done = new Uint8Array(4 * n);
    const prev = new Int32Array(4 * n).fill(-1);
    const heap = new Heap();
    for (const [p, d] of starts) {
      cost[4 * p + d] = 0;
      heap.push(guess(p), 4 * p + d);
    }
    while (heap.size > 0) {
      const s = heap.pop();
      if (done[s] === 1) continue;
      done[s] = 1;
      const p = s >> 2;
      const d = s & 3;
      const here = cost[s] ?? Infinity;
      const at = port[p] ?? 0;
      if (at === 5 + d) return this.#walk(prev, s);
      const gx = p % this.nx;
      const gy = (p - gx) / this.nx;
      for (let nd = 0; nd < 4; nd++) {
        if (nd === (d + 2) % 4) continue;
        // Straight out of a port, and straight into one.
        if (nd !== d && at >= 1 && at <= 4) continue;
        const ngx = gx + dx(nd);
        const ngy = gy + dy(nd);
        if (ngx < 0 || ngy < 0 || ngx >= this.nx || ngy >= this.ny) continue;
        const q = ngy * this.nx + ngx;
        const into = port[q] ?? 0;
        if (into >= 5) {
          if (into !== 5 + nd) continue;
        } else if (into >= 1 || this.busy[q] === 1 || allowed[this.closed[q] ?? -1] !== 1) continue;
        const edge = nd === 0 ? p : nd === 2 ? q : nd === 1 ? n + p : n + q;
        const across = nd % 2 === 0 ? 2 : 1;
        const step =
          1 +
          (nd === d ? 0 : BEND) +
          SHARED * (this.used[edge] ?? 0) +
          ((this.through[q] ?? 0) & across ? CROSSED : 0) +
          BORDER * (this.border[q] ?? 0);
        const ns = 4 * q + nd;
        if (here + step < (cost[ns] ?? Infinity)) {
          cost[ns] = here + step;
          prev[ns] = s;
          heap.push(here + step + guess(q), ns);
        }
      }
    }
    return undefined;
  }

  #walk(prev: Int32Array, last: number): number[] {
    const states: number[] = [];
    for (let s = last; s >= 0; s = prev[s] ?? -1) states.push(s);
    states.reverse();
    const n = this.nx * this.ny;
    const points = states.map((s) => s >> 2);
    points.forEach((p, i) => {
      const q = points[i + 1];
      if (q === undefined) return;
      const horizontal = Math.abs(q - p) === 1;
      const edge = horizontal ? Math.min(p, q) : n + Math.min(p, q);
      this.used[edge] = (this.used[edge] ?? 0) + 1;
      const bit = horizontal ? 1 : 2;
      this.through[p] = (this.through[p] ?? 0) | bit;
      this.through[q] = (this.through[q] ?? 0) | bit;
    });
    return points;
  }

  xy(p: number): [number, number] {
    const gx = p % this.nx;
    return [gx * GRID_PX, ((p - gx) / this.nx) * GRID_PX];
  }
}
