// Fails when a module can reach itself through relative imports (type-only ones included: a type
// circle is the same tangle to a reader, and turns into a load-order bug the day it gains a value).
// `npm run lint` runs it over src/, bench/ and test/; a path given instead is checked alone.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const roots = process.argv.length > 2 ? process.argv.slice(2) : ['src', 'bench', 'test'];
const files = (d) =>
  readdirSync(d).flatMap((n) => {
    const p = join(d, n);
    return statSync(p).isDirectory() ? files(p) : p.endsWith('.ts') ? [resolve(p)] : [];
  });
const importRe = /(?:^|\s)(?:import|export)\b[^'"]*?from\s+['"](\.[^'"]+)['"]|import\(\s*['"](\.[^'"]+)['"]\s*\)/g;
const graph = new Map();
for (const f of roots.flatMap(files)) {
  const specs = [...readFileSync(f, 'utf8').matchAll(importRe)].map((m) => m[1] ?? m[2]);
  graph.set(f, [...new Set(specs.map((s) => resolve(dirname(f), s).replace(/\.js$/, '.ts')))]);
}

// Tarjan's strongly connected components: every component of more than one module is a circle.
let next = 0;
const index = new Map();
const low = new Map();
const stack = [];
const onStack = new Set();
const circles = [];
function visit(v) {
  index.set(v, next);
  low.set(v, next++);
  stack.push(v);
  onStack.add(v);
  for (const w of graph.get(v) ?? []) {
    if (!graph.has(w)) continue;
    if (!index.has(w)) {
      visit(w);
      low.set(v, Math.min(low.get(v), low.get(w)));
    } else if (onStack.has(w)) low.set(v, Math.min(low.get(v), index.get(w)));
  }
  if (low.get(v) !== index.get(v)) return;
  const part = [];
  let w;
  do {
    w = stack.pop();
    onStack.delete(w);
    part.push(w);
  } while (w !== v);
  if (part.length > 1 || (graph.get(v) ?? []).includes(v)) circles.push(part);
}
for (const v of graph.keys()) if (!index.has(v)) visit(v);

if (circles.length > 0) {
  for (const c of circles) console.error(`import circle: ${c.map((f) => relative(process.cwd(), f)).sort().join(' <-> ')}`);
  process.exit(1);
}
console.log(`import-cycles: ${graph.size} modules, no circle`);
