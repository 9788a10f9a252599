// The store: section: defaults, every problem reported with its path, prices read per model.
import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { ConfigIssue } from '../../src/errors/index.js';
import { parseStoreSection, storeDefaults } from '../../src/store/index.js';

void test('store: absent is the embedded database with every default', () => {
  const issues: ConfigIssue[] = [];
  assert.deepEqual(parseStoreSection(undefined, 'store', issues), storeDefaults);
  assert.deepEqual(issues, []);
});

void test('store: a PostgreSQL URL, a policy and prices are read; cached tokens default to the prompt price', () => {
  const issues: ConfigIssue[] = [];
  const c = parseStoreSection(
    { url: 'postgres://llmgw@db:5432/llmgw', when_down: 'serve', retention_days: 30, prices: { m: { prompt_per_million: 0.5, completion_per_million: 1.5 } } },
    'store',
    issues,
  );
  assert.deepEqual(issues, []);
  assert.equal(c.url, 'postgres://llmgw@db:5432/llmgw');
  assert.equal(c.whenDown, 'serve');
  assert.deepEqual(c.prices.m, { promptPerMillion: 0.5, cachedPerMillion: 0.5, completionPerMillion: 1.5 });
});

void test('store: every problem at once, each with its path', () => {
  const issues: ConfigIssue[] = [];
  parseStoreSection({ url: 'mysql://x', when_down: 'maybe', retention_dayz: 3, prices: { m: { prompt_per_million: -1 } } }, 'store', issues);
  assert.deepEqual(
    issues.map((i) => i.path),
    ['store.retention_dayz', 'store.prices.m.prompt_per_million', 'store.url', 'store.when_down'],
  );
});
