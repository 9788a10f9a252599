// Running nvidia-smi: the one effectful part of discovery. Each command is bounded by a timeout
// because nvidia-smi hangs for minutes when the driver is wedged, and a hung doctor or agent start
// tells the operator nothing.
import { execa } from 'execa';
import { LlmgwError } from '../errors/index.js';
import { inventoryFromSmi } from './inventory.js';
import { parseSmiCsv, type CsvRow } from './smi-csv.js';
import { parseSmiList, type ListedGpu } from './smi-list.js';
import { parseSmiQuery, type Queried } from './smi-query.js';
import { parseSmiQueryText } from './smi-query-text.js';
import type { Inventory } from './types.js';

/** How to run nvidia-smi. */
export interface SmiOptions {
  /** The binary; `LLMGW_NVIDIA_SMI` or `--nvidia-smi` point it at a fake. */
  readonly bin: string;
  readonly timeoutMs: number;
  readonly signal?: AbortSignal;
  /** The environment nvidia-smi runs with (the fake reads its fixtures from it). */
  readonly env?: Readonly<Record<string, string | undefined>>;
}

/** The query discovery asks for: compute capability is reported nowhere else. */
export const csvFields = ['uuid', 'compute_cap', 'mig.mode.current', 'mig.mode.pending'] as const;

/** Runs `nvidia-smi <args>` and returns stdout; a missing binary, a failure or a timeout is an LlmgwError. */
export async function runNvidiaSmi(args: readonly string[], o: SmiOptions): Promise<string> {
  o.signal?.throwIfAborted();
  const shown = `${o.bin} ${args.join(' ')}`;
  let r;
  try {
    r = await execa(o.bin, [...args], {
      timeout: o.timeoutMs,
      reject: false,
      stdin: 'ignore',
      encoding: 'utf8',
      maxBuffer: 64 * 1024 * 1024,
      ...(o.signal === undefined ? {} : { cancelSignal: o.signal }),
      ...(o.env === undefined ? {} : { env: o.env, extendEnv: false }),
    });
  } catch (e) {
    throw new LlmgwError('LLMGW_NVIDIA_SMI', `${shown}: could not run: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
  }
  if (r.failed) {
    const code = (r as { code?: string }).code;
    if (code === 'ENOENT') {
      throw new LlmgwError('LLMGW_NVIDIA_SMI_MISSING', `${o.bin}: not found; install the NVIDIA driver utilities, or pass --nvidia-smi PATH (or set LLMGW_NVIDIA_SMI)`);
    }
    if (r.timedOut) throw new LlmgwError('LLMGW_NVIDIA_SMI', `${shown}: no answer within ${o.timeoutMs} ms; the driver may be hung (check dmesg for Xid errors)`, { cause: r });
    const said = `${r.stderr}\n${r.stdout}`.trim().split('\n').slice(0, 3).join(' / ');
    throw new LlmgwError('LLMGW_NVIDIA_SMI', `${shown}: exited ${r.exitCode ?? r.signal ?? 'abnormally'}${said === '' ? '' : `: ${said}`}`);
  }
  return r.stdout;
}

async function attempt<T>(what: string, run: () => Promise<T>, problems: string[]): Promise<T | undefined> {
  try {
    return await run();
  } catch (e) {
    if (!(e instanceof LlmgwError)) throw e;
    problems.push(`${what}: ${e.message}`);
    return undefined;
  }
}

/**
 * Discovers the node's GPUs through nvidia-smi: -L, -q -x (or -q when the XML fails) and the CSV query. A failing command is a
 * problem in the inventory, not a throw, so doctor can say what it could and could not read; a
 * missing binary stops after the first command.
 */
export async function discoverWithSmi(o: SmiOptions): Promise<Inventory> {
  const problems: string[] = [];
  let missing = false;
  // A driver that hung once hangs every query: one timeout is enough, not one per command.
  let hung = false;
  const run = async (args: readonly string[]): Promise<string> => {
    if (hung) throw new LlmgwError('LLMGW_NVIDIA_SMI', `not run: an earlier nvidia-smi command gave no answer within ${o.timeoutMs} ms`);
    try {
      return await runNvidiaSmi(args, o);
    } catch (e) {
      if (e instanceof LlmgwError && (e.cause as { timedOut?: unknown } | undefined)?.timedOut === true) hung = true;
      throw e;
    }
  };
  const list = await attempt<ListedGpu[]>(
    'nvidia-smi -L',
    async () => {
      try {
        return parseSmiList(await run(['-L']));
      } catch (e) {
        if (e instanceof LlmgwError && e.code === 'LLMGW_NVIDIA_SMI_MISSING') missing = true;
        throw e;
      }
    },
    problems,
  );
  if (missing) return { source: 'none', driverVersion: undefined, cards: [], problems };
  let query = await attempt<Queried>('nvidia-smi -q -x', async () => parseSmiQuery(await run(['-q', '-x'])), problems);
  // The text form carries the same facts; reading it keeps MIG modes and memory known when only the
  // XML writer fails.
  query ??= await attempt<Queried>('nvidia-smi -q', async () => parseSmiQueryText(await run(['-q'])), problems);
  const csv = await attempt<CsvRow[]>(
    'nvidia-smi --query-gpu',
    async () => parseSmiCsv(await run([`--query-gpu=${csvFields.join(',')}`, '--format=csv'])),
    problems,
  );
  return inventoryFromSmi({ list, query, csv, problems });
}
