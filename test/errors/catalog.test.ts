// The error catalog is the one table of codes: docs/errors.md lists exactly it, every code the
// source throws is in it (the compiler checks literal codes; this also catches a code built at run
// time or hidden in a string), and the gateway's reply follows its status.
import { strict as assert } from 'node:assert';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { errorCatalog, errorCodes, LlmgwError } from '../../src/errors/index.js';
import { errorReply } from '../../src/gateway/errors.js';

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..');

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    return statSync(p).isDirectory() ? filesUnder(p) : p.endsWith('.ts') ? [p] : [];
  });
}

void test('docs/errors.md lists exactly the catalog, in its order, with status and meaning', () => {
  const doc = readFileSync(join(root, 'docs', 'errors.md'), 'utf8');
  const rows = [...doc.matchAll(/^\| `(LLMGW_[A-Z0-9_]+)` \| (\d+) \| (.*) \|$/gm)].map((m) => `| \`${m[1]}\` | ${m[2]} | ${m[3]} |`);
  const want = errorCodes.map((c) => `| \`${c}\` | ${errorCatalog[c].status} | ${errorCatalog[c].meaning} |`);
  assert.deepEqual(rows, want, `docs/errors.md must list the catalog; its table rows should be:\n${want.join('\n')}`);
});

void test('every LLMGW_ code thrown in src/ is in the catalog', () => {
  // Environment variables share the prefix; they are not error codes.
  const envVars = new Set(['LLMGW_SGLANG_API_KEY']);
  const missing: string[] = [];
  for (const f of filesUnder(join(root, 'src'))) {
    for (const m of readFileSync(f, 'utf8').matchAll(/'(LLMGW_[A-Z0-9_]+)'/g)) {
      const code = m[1] ?? '';
      if (!envVars.has(code) && !(code in errorCatalog)) missing.push(`${f}: ${code}`);
    }
  }
  assert.deepEqual(missing, []);
});

const replies = [
  { why: 'a client error keeps its message and status', code: 'LLMGW_BAD_REQUEST', status: 400, type: 'invalid_request_error', openai: 'bad_request' },
  { why: 'OpenAI names a missing model model_not_found', code: 'LLMGW_UNKNOWN_MODEL', status: 404, type: 'invalid_request_error', openai: 'model_not_found' },
  { why: 'a quota is a rate_limit_error', code: 'LLMGW_RATE_LIMITED', status: 429, type: 'rate_limit_error', openai: 'rate_limit_exceeded' },
  { why: 'an engine failure is the server\'s, 502', code: 'LLMGW_UPSTREAM', status: 502, type: 'server_error', openai: 'upstream' },
  { why: 'a 500 in the catalog hides its message from the client', code: 'LLMGW_INDEX_SLOTS', status: 500, type: 'server_error', openai: 'internal' },
] as const;
for (const r of replies) {
  void test(`errorReply: ${r.why}`, () => {
    const reply = errorReply(new LlmgwError(r.code, 'the operator-facing message'));
    assert.equal(reply.status, r.status);
    assert.equal(reply.body.error.type, r.type);
    assert.equal(reply.body.error.code, r.openai);
    assert.equal(reply.body.error.message === 'the operator-facing message', r.status !== 500);
  });
}

void test('every catalog status is one the gateway can answer with', () => {
  for (const c of errorCodes) assert.ok([400, 401, 403, 404, 405, 408, 413, 417, 429, 431, 500, 502, 503, 504].includes(errorCatalog[c].status), c);
});
