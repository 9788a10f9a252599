// Metrics of stream migrations, registered on the registry the gateway is given.
import { Counter } from 'prom-client';
import type { Registry } from 'prom-client';
import type { BreakReason, Refusal } from './migration.js';

/** What the gateway reports about streams whose engine broke off mid-answer. */
export interface MigrationMetrics {
  /** One broken stream: continued on another replica ('resumed') or ended, and why. */
  broke(reason: BreakReason, outcome: 'resumed' | 'finished' | Refusal): void;
  /** Prompt tokens a continuation's engine had to prefill (its prompt less what it had cached). */
  reprefilled(tokens: number): void;
}

/** Registers the migration metrics on `registry`. */
export function migrationMetrics(registry: Registry): MigrationMetrics {
  const registers = [registry];
  const migrations = new Counter({
    name: 'llmgw_gateway_stream_migrations_total',
    help: 'Streams whose engine broke off mid-answer, by why (reset, timeout, error-event) and outcome: resumed on another replica, finished (the client already had the end), or the reason it could not be continued.',
    labelNames: ['reason', 'outcome'],
    registers,
  });
  const prefill = new Counter({
    name: 'llmgw_gateway_migration_prefill_tokens_total',
    help: "Prompt tokens continuations' engines prefilled again (prompt plus answer so far, less what they had cached); the gateway's cost, not billed to the client.",
    registers,
  });
  for (const reason of ['reset', 'timeout', 'error-event'] as const) migrations.inc({ reason, outcome: 'resumed' }, 0);
  return {
    broke: (reason, outcome) => migrations.inc({ reason, outcome }),
    reprefilled: (tokens) => prefill.inc(Math.max(0, tokens)),
  };
}
