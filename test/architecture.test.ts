// Enforces the import boundaries of STYLE §1: a boundary nobody checks erodes in a week. A failure
// names the file and the forbidden edge.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');
const src = join(root, 'src');

// Every folder may also use errors/, log/, config/ and limits/, the leaves below everything.
const allowed = {
  errors: [],
  log: [],
  config: [],
  limits: [],
  engines: [],
  kv: [],
  // llama.cpp's model file, written and read over bytes; its one effect is writing the test model.
  gguf: [],
  // Chat rendering and tokenizers, which the sim (its /tokenize) and the workers (routing) must
  // share so both give the ids the engine hashes: below both, so neither imports the other. A
  // llama.cpp model's tokenizer is read from its GGUF.
  tokenize: ['gguf'],
  workers: ['kv', 'tokenize'],
  discovery: ['engines'],
  catalog: ['engines', 'discovery'],
  placement: ['engines', 'catalog', 'discovery'],
  actors: ['engines', 'kv', 'discovery', 'catalog', 'placement'],
  // The floors of a request, lowest first: the way to the engines knows nothing of routing; routing
  // reads the kv index and hands adapter loads to upstream; admission holds requests until routing
  // has room; the HTTP surface on top wires them together and is the only one that sees a client.
  store: [],
  batch: ['store'],
  // A thinking stream continued raw is split back at </think> by the reasoning parser the sim
  // uses, so both cut the same text at the same place.
  upstream: ['tokenize'],
  routing: ['kv', 'workers', 'tokenize', 'upstream'],
  // Pure queueing and fairness rules with their timers: routing's load facts reach it through an
  // interface it declares, so it imports nothing of ours.
  admission: [],
  // Client protocols translated to and from the chat request the engines serve.
  apis: ['tokenize'],
  gateway: ['kv', 'workers', 'tokenize', 'routing', 'upstream', 'admission', 'apis', 'store', 'batch'],
  // The agent link: its messages carry the agent's replica plans (actors), shard specs (engines),
  // node inventories (placement) and kv's deltas, and it fronts the catalog's external replicas; it
  // never sees the gateway, which cli wires to it through interfaces.
  link: ['kv', 'engines', 'placement', 'catalog', 'actors'],
  sim: ['kv', 'tokenize'],
  // The e2e harness drives a whole `llmgw serve` over HTTP, and renders prompts with the sim's tokenizer
  // so the oracle replays the exact token ids the engines cache.
  e2e: ['sim', 'tokenize'],
  // The endpoint picker behind Envoy's ext_proc: the gateway's routing parts, body parsing and error
  // answers without its HTTP server, over a pool's endpoints fronted as the link's external replicas.
  epp: ['kv', 'workers', 'tokenize', 'routing', 'upstream', 'admission', 'apis', 'gateway', 'link', 'catalog'],
  cli: ['*'],
} as const satisfies Record<string, readonly string[]>;

const leaves = new Set(['errors', 'log', 'config', 'limits']);

// Modules a folder must not load, whatever the route: engines/ describes and never acts.
const forbiddenModules: Partial<Record<keyof typeof allowed, readonly RegExp[]>> = {
  engines: [/^node:(fs|child_process|net|http|dgram)/, /^(execa|undici|zeromq|xstate|piscina)$/],
  kv: [/^(undici|node:http|xstate|piscina)$/],
  tokenize: [/^(undici|node:http|xstate|piscina|zeromq)$/],
  workers: [/^(undici|node:http|xstate)$/, /^zeromq$/],
  discovery: [/^(xstate|undici|node:http)$/],
  gateway: [/^xstate$/],
  routing: [/^(xstate|zeromq)$/],
  upstream: [/^(xstate|zeromq|piscina)$/],
  admission: [/^(xstate|zeromq|piscina|undici)$/],
  apis: [/^(xstate|zeromq|piscina|undici|node:http)$/],
  store: [/^(xstate|zeromq|piscina|undici)$/],
  link: [/^(xstate|undici|node:http|piscina)$/],
};

function filesUnder(dir: string): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...filesUnder(p));
    else if (p.endsWith('.ts')) out.push(p);
  }
  return out;
}

const importRe = /(?:^|\s)(?:import|export)\b[^'"]*?from\s+['"]([^'"]+)['"]|import\(\s*['"]([^'"]+)['"]\s*\)/g;

function importsOf(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const found: string[] = [];
  for (const m of text.matchAll(importRe)) {
    const spec = m[1] ?? m[2];
    if (spec !== undefined) found.push(spec);
  }
  return found;
}

test('every src folder is named in the boundary table', () => {
  // Folders named for what the next changes add may not exist yet; every one that exists is named.
  const folders = readdirSync(src).filter((n) => statSync(join(src, n)).isDirectory());
  const unknown = folders.filter((f) => !(f in allowed));
  assert.deepEqual(unknown, [], `folders missing from the table in test/architecture.test.ts: ${unknown.join(', ')}`);
});

test('imports between folders follow the boundary table', () => {
  const violations: string[] = [];
  for (const file of filesUnder(src)) {
    const folder = relative(src, file).split('/')[0] as keyof typeof allowed;
    const may: readonly string[] = allowed[folder] ?? [];
    for (const spec of importsOf(file)) {
      for (const re of forbiddenModules[folder] ?? []) {
        if (re.test(spec)) violations.push(`${relative(root, file)}: ${folder}/ must not import ${spec}`);
      }
      if (!spec.startsWith('.')) continue;
      const target = relative(src, join(dirname(file), spec)).split('/');
      const other = target[0];
      if (other === undefined || other === folder || other.startsWith('..')) continue;
      if (leaves.has(other) || may.includes('*') || may.includes(other)) {
        // Another folder is reached only through its public surface.
        if (target.length !== 2 || target[1] !== 'index.js') {
          violations.push(`${relative(root, file)}: imports ${spec}; use ../${other}/index.js`);
        }
        continue;
      }
      violations.push(`${relative(root, file)}: ${folder}/ may not import ${other}/ (${spec})`);
    }
  }
  assert.deepEqual(violations, []);
});

test('the boundary table has no circle, so every folder sits on a floor', () => {
  const floorOf = new Map<string, number>();
  const visiting = new Set<string>();
  const floor = (f: string): number => {
    const known = floorOf.get(f);
    if (known !== undefined) return known;
    assert.ok(!visiting.has(f), `the boundary table lets ${f}/ reach itself: ${[...visiting].join(' -> ')}`);
    visiting.add(f);
    const below = (allowed[f as keyof typeof allowed] as readonly string[]).filter((d) => d !== '*');
    const n = 1 + Math.max(0, ...below.map(floor));
    visiting.delete(f);
    floorOf.set(f, n);
    return n;
  };
  for (const f of Object.keys(allowed)) floor(f);
});

test('the import-circle check run by `npm run lint` finds a circle, type-only edges included', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-circle-'));
  try {
    writeFileSync(join(dir, 'a.ts'), "import { b } from './b.js';\nexport const a = b;\n");
    writeFileSync(join(dir, 'b.ts'), "import type { c } from './c.js';\nexport const b = 1 as c;\n");
    writeFileSync(join(dir, 'c.ts'), "export { a } from './a.js';\nexport type c = number;\n");
    const run = spawnSync(process.execPath, [join(root, 'scripts', 'import-cycles.mjs'), dir], { encoding: 'utf8' });
    assert.equal(run.status, 1);
    assert.match(run.stderr, /import circle: .*a\.ts <-> .*b\.ts <-> .*c\.ts/);
    rmSync(join(dir, 'c.ts'));
    assert.equal(spawnSync(process.execPath, [join(root, 'scripts', 'import-cycles.mjs'), dir]).status, 0);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

// A file past 600 lines is one a newcomer scrolls through instead of reading: split it by what it
// holds. Lines as `wc -l` counts them.
const MAX_FILE_LINES = 600;

function longFiles(dir: string): string[] {
  return filesUnder(dir)
    .map((f) => ({ f, lines: readFileSync(f, 'utf8').split('\n').length - 1 }))
    .filter((x) => x.lines > MAX_FILE_LINES)
    .map((x) => `${relative(root, x.f)}: ${x.lines} lines (at most ${MAX_FILE_LINES}; split it by what it holds)`);
}

test(`no file in src/ is over ${MAX_FILE_LINES} lines`, () => {
  assert.deepEqual(longFiles(src), []);
});

test('the file-length check names a file one line over the limit, and not one at it', () => {
  const dir = mkdtempSync(join(tmpdir(), 'llmgw-long-'));
  try {
    writeFileSync(join(dir, 'at.ts'), 'x;\n'.repeat(MAX_FILE_LINES));
    writeFileSync(join(dir, 'over.ts'), 'x;\n'.repeat(MAX_FILE_LINES + 1));
    assert.deepEqual(longFiles(dir).map((l) => l.split(':')[0]?.split('/').pop()), ['over.ts']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
