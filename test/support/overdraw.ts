// Several gateways (stores, each with its own pools) spend one key's day budget until it refuses
// them all; what they spent past it is set beside the bound the reservation scheme promises.
// Shared by test/store/overdraw.test.ts and bench/ledger.ts.
//
// The bound. Admission reads the key's committed spend and every live hold in one snapshot, under
// the key's row lock, and admits only if spend + holds + the new hold <= budget; a ledger commit
// adds a request's use to spend and deletes its hold at once. So after the last admission (at T)
// spend + holds <= budget, and each request still in flight at T changes that sum, when it settles,
// by what it used minus what it held. Hence
//     overdraw <= sum over requests in flight at T of max(0, used - held),
// 0 while every request stays within its hold (prompt bound + max_tokens x n, or the imposed
// limit). Without reservations it would be the sum of their whole uses, each up to its prompt plus
// max_tokens: `heldAtExhaustion` is that figure, for comparison.
import { LlmgwError } from '../../src/errors/index.js';
import type { Store, StoreHold } from '../../src/store/index.js';
import { usageRow } from './usage-row.js';

/** What a run spent, beside its bound. */
export interface OverdrawRun {
  readonly budget: number;
  readonly spent: number;
  readonly overdraw: number;
  /** Sum over requests in flight when the budget ran out of what each used beyond its hold. */
  readonly bound: number;
  readonly inFlightAtExhaustion: number;
  /** Sum of the holds in flight when the budget ran out: what a scheme without reservations could overdraw. */
  readonly heldAtExhaustion: number;
  readonly admitted: number;
  /** Requests whose engine reported more than their hold (a prompt longer than the gateway's bound). */
  readonly overHold: number;
}

interface Settled {
  readonly hold: StoreHold;
  readonly used: number;
  readonly settledAt: number;
}

/**
 * Runs `clientsPerStore` clients on each store against the key `keyName` (a day budget of
 * `budget` tokens) until each is refused with nothing in flight. Every `overEvery`-th request (0:
 * none) reports up to 20 prompt tokens more than it was admitted with, so the bound is not 0.
 */
export async function overdrawRun(o: { stores: readonly Store[]; keyName: string; budget: number; clientsPerStore: number; overEvery: number }): Promise<OverdrawRun> {
  const settled: Settled[] = [];
  let lastAdmitStart = -Infinity;
  let n = 0;
  let inFlight = 0;
  let admitted = 0;
  const client = async (s: Store, withLimit: boolean): Promise<void> => {
    const k = s.keys.get(o.keyName);
    if (k === undefined) throw new Error(`no key ${o.keyName}`);
    for (;;) {
      const i = n++;
      const started = performance.now();
      let hold: StoreHold;
      try {
        hold = await s.admit({ key: k, model: 'm', promptTokens: 50, completionTokens: withLimit ? 100 : undefined });
      } catch (e) {
        if (!(e instanceof LlmgwError && e.code === 'LLMGW_BUDGET')) throw e;
        // Refused while others hold: their settling may free room, so the budget is not out yet.
        if (inFlight === 0) return;
        await new Promise((r) => setTimeout(r, 2));
        continue;
      }
      inFlight++;
      lastAdmitStart = Math.max(lastAdmitStart, started);
      await new Promise((r) => setTimeout(r, i % 5));
      const maxCompletion = hold.tokens - 50;
      // An over request writes its whole completion limit after a prompt the engine counted longer.
      const over = o.overEvery > 0 && admitted++ % o.overEvery === 0;
      const completion = over ? maxCompletion : 1 + ((i * 37) % maxCompletion);
      const prompt = 50 + (over ? 1 + ((i * 13) % 20) : 0);
      await s.record(usageRow(k, { requestId: `od-${i}`, promptTokens: prompt, completionTokens: completion }), hold);
      inFlight--;
      settled.push({ hold, used: prompt + completion, settledAt: performance.now() });
    }
  };
  await Promise.all(o.stores.flatMap((s, g) => Array.from({ length: o.clientsPerStore }, (_, c) => client(s, (g + c) % 2 === 0))));
  const first = o.stores[0];
  if (first === undefined) throw new Error('no store');
  const id = first.keys.get(o.keyName)?.id ?? '';
  const rows = await first.db.all("SELECT tokens FROM spend WHERE key_id = $1 AND period LIKE 'd%'", [id]);
  const spent = rows.reduce((t, r) => t + Number(r.tokens), 0);
  // In flight at the last admission's commit: its row committed after it. A request whose row was
  // acknowledged after that admission started is counted, which can only widen the bound.
  const late = settled.filter((r) => r.settledAt > lastAdmitStart);
  return {
    budget: o.budget,
    spent,
    overdraw: Math.max(0, spent - o.budget),
    bound: late.reduce((t, r) => t + Math.max(0, r.used - r.hold.tokens), 0),
    inFlightAtExhaustion: late.length,
    heldAtExhaustion: late.reduce((t, r) => t + r.hold.tokens, 0),
    admitted: settled.length,
    overHold: settled.filter((r) => r.used > r.hold.tokens).length,
  };
}
