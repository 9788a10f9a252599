// One round of the ledger's crash guarantee: a gateway with a store in its own process serves
// streamed and whole answers to concurrent clients, is killed with SIGKILL mid-traffic, and every
// answer a client received complete must have its row in the ledger. Shared by the test (a few
// rounds) and bench/ledger.ts (twenty).
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Agent, request } from 'undici';
import { hashApiKey } from '../../src/gateway/index.js';
import type { Db, StoreConfig } from '../../src/store/index.js';

const child = join(dirname(fileURLToPath(import.meta.url)), '..', 'store', 'gateway-child.js');
const adminKey = 'sk-kill-loop-admin';

/** What one round saw: answers completed, and how many of them the ledger lacks. */
export interface KillRound {
  readonly completed: number;
  readonly missing: number;
  readonly rows: number;
}

/**
 * Starts the child on `store`, sends traffic from `clients` loops until `killAfter` answers
 * completed, kills it with SIGKILL, and checks the ledger through `openDb`.
 */
export async function killRound(o: { store: StoreConfig; engine: URL; clients: number; killAfter: number; openDb: () => Db }): Promise<KillRound> {
  const proc = spawn(process.execPath, [child, JSON.stringify({ store: o.store, engine: o.engine.href, adminSha256: hashApiKey(adminKey) })], { stdio: ['ignore', 'pipe', 'inherit'] });
  try {
    const [line] = (await Promise.race([
      once(proc.stdout, 'data'),
      once(proc, 'exit').then(() => {
        throw new Error('the gateway child exited before it listened');
      }),
    ])) as [Buffer];
    const url = new URL(line.toString('utf8').trim());
    const dispatcher = new Agent({ connections: o.clients });
    const completed: string[] = [];
    let stop = false;
    let reached = (): void => undefined;
    const threshold = new Promise<void>((resolve) => (reached = resolve));
    const loop = async (i: number): Promise<void> => {
      for (let n = 0; !stop; n++) {
        try {
          const stream = (i + n) % 2 === 0;
          const res = await request(new URL('/v1/chat/completions', url), {
            method: 'POST',
            dispatcher,
            headers: { 'content-type': 'application/json', authorization: `Bearer ${adminKey}` },
            body: JSON.stringify({ model: 'm', stream, messages: [{ role: 'user', content: `client ${i} turn ${n}` }] }),
          });
          const text = await res.body.text();
          const id = res.headers['x-request-id'];
          // Complete: a streamed answer through its [DONE], a whole one parsed.
          const whole = stream ? text.endsWith('data: [DONE]\n\n') : (JSON.parse(text) as { choices?: unknown }).choices !== undefined;
          if (res.statusCode === 200 && whole && typeof id === 'string') completed.push(id);
        } catch {
          // The gateway was killed under this request: it never completed, which is allowed.
          if (stop) return;
        }
        if (completed.length >= o.killAfter) reached();
      }
    };
    const loops = Array.from({ length: o.clients }, (_, i) => loop(i));
    // Killed while the other clients' requests are in flight, some of them mid-commit.
    await Promise.race([threshold, once(proc, 'exit')]);
    proc.kill('SIGKILL');
    stop = true;
    await Promise.all(loops);
    await dispatcher.destroy();
    const db = o.openDb();
    try {
      const ids = new Set((await db.all('SELECT request_id FROM usage_ledger')).map((r) => String(r.request_id)));
      return { completed: completed.length, missing: completed.filter((id) => !ids.has(id)).length, rows: ids.size };
    } finally {
      await db.close();
    }
  } finally {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGKILL');
      await once(proc, 'exit');
    }
  }
}
