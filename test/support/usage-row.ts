// A finished request's ledger row as the store's tests write them: an ordinary chat, 10 tokens in
// and 5 out, with what a test cares about changed.
import { randomUUID } from 'node:crypto';
import type { KeyRecord, UsageRow } from '../../src/store/index.js';

/** A row of key `k` (or of key "k" of team "t"), `over` changing any field. */
export function usageRow(k: KeyRecord | undefined, over: Partial<UsageRow> = {}): UsageRow {
  return {
    requestId: `req-${randomUUID()}`,
    at: Date.now(),
    keyId: k?.id ?? 'k',
    keyName: k?.name ?? 'k',
    team: k?.team ?? 't',
    model: 'm',
    endpoint: 'chat',
    replica: 'r0',
    tier: 'precise',
    status: 200,
    promptTokens: 10,
    cachedTokens: 0,
    completionTokens: 5,
    usageReported: true,
    ttftMs: 1,
    totalMs: 2,
    ...over,
  };
}
