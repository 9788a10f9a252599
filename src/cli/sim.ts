// `llmgw sim`: the simulated vLLM engine as a process. Flags carry vLLM's names where vLLM has the
// setting (A's sim engine builder writes exactly these), so a profile can swap vLLM for the sim.
import { once } from 'node:events';
import { LlmgwError, hasCode } from '../errors/index.js';
import type { HashAlgo } from '../kv/index.js';
import { createLogger } from '../log/index.js';
import { awaitWorkers, checkRole, formatListDevices, joinLeader, parseKvEventsConfig, parseKvTransferConfig, resolveSimOptions, startSim } from '../sim/index.js';
import { reasoningParsers } from '../tokenize/index.js';
import type { Group, LoraModule, NodeRole, SimOptions } from '../sim/index.js';

const usage = `usage:
  llmgw sim serve <model> [--host H] [--port P] [--served-model-name N ...] [--block-size 16]
      [--enable-prefix-caching | --no-enable-prefix-caching] [--prefix-caching-hash-algo sha256|sha256_cbor]
      [--kv-events-config JSON] [--kv-transfer-config JSON] [--kv-bytes-per-token N] [--kv-transfer-bytes-per-s N]
      [--data-parallel-size N] [--lora-modules name=path ...] [--enable-lora]
      [--max-num-seqs N] [--max-num-batched-tokens N] [--scheduling-policy fcfs|priority] [--max-model-len N] [--api-key KEY]
      [--enable-prompt-tokens-details | --no-enable-prompt-tokens-details] [--trust-request-chat-template]
      [--kv-capacity-blocks N] [--prefill-tokens-per-s N] [--decode-tokens-per-s N] [--answer-tokens N]
      [--think-tokens N] [--reasoning-parser qwen3|deepseek_r1]
      [--runner generate|pooling [--pooler-config JSON] [--embedding-dimensions 384] [--matryoshka]]
      [--tokenizer qwen3|bytes|PATH/tokenizer.json] [--kv-events-format map|array] [--kv-replay-framing topic|legacy]
      [--load-time-ms N] [--fail-health-after-ms N] [--crash-after-requests N]
      [--crash-mid-stream-after-tokens N]
      [--drop-event-batches N,M] [--restart-events-after-batches N] [--hang]
      [--lora-load-time-ms N] [--fail-lora-loads NAME,...]
      [--nnodes N --node-rank R --master-addr A --master-port P [--headless]]
  llmgw sim --list-devices [--devices "CUDA0: NVIDIA L4 (22994 MiB, 22713 MiB free)" ...]
environment: PYTHONHASHSEED (block hash seed), VLLM_API_KEY, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES (default 1),
  VLLM_ALLOW_RUNTIME_LORA_UPDATING (1/true: POST /v1/load_lora_adapter and /v1/unload_lora_adapter)
`;

// Flags that take several values in vLLM (argparse nargs="+"): they read until the next --flag.
const multi = new Set(['--served-model-name', '--lora-modules', '--devices']);
const booleans = new Set([
  '--enable-prefix-caching',
  '--no-enable-prefix-caching',
  '--enable-prompt-tokens-details',
  '--no-enable-prompt-tokens-details',
  '--enable-lora',
  '--trust-request-chat-template',
  '--hang',
  '--matryoshka',
  '--headless',
  '--list-devices',
  '--help',
]);
const valued = new Set([
  '--host',
  '--port',
  '--block-size',
  '--prefix-caching-hash-algo',
  '--kv-events-config',
  '--kv-transfer-config',
  '--kv-bytes-per-token',
  '--kv-transfer-bytes-per-s',
  '--data-parallel-size',
  '--max-num-seqs',
  '--max-num-batched-tokens',
  '--scheduling-policy',
  '--max-model-len',
  '--api-key',
  '--kv-capacity-blocks',
  '--prefill-tokens-per-s',
  '--decode-tokens-per-s',
  '--answer-tokens',
  '--think-tokens',
  '--reasoning-parser',
  '--runner',
  // vLLM's pooling choice; the sim's vectors come from the token ids whatever it says.
  '--pooler-config',
  '--embedding-dimensions',
  '--tokenizer',
  '--kv-events-format',
  '--kv-replay-framing',
  '--load-time-ms',
  '--fail-health-after-ms',
  '--crash-after-requests',
  '--crash-mid-stream-after-tokens',
  '--drop-event-batches',
  '--restart-events-after-batches',
  '--lora-load-time-ms',
  '--fail-lora-loads',
  '--nnodes',
  '--node-rank',
  '--master-addr',
  '--master-port',
  // vLLM's launcher choice; the sim plays mp whatever it says.
  '--distributed-executor-backend',
]);

interface Parsed {
  readonly positional: string[];
  readonly flags: Map<string, string[]>;
}

function parseArgv(argv: readonly string[]): Parsed {
  const positional: string[] = [];
  const flags = new Map<string, string[]>();
  const add = (k: string, v: string): void => {
    flags.set(k, [...(flags.get(k) ?? []), v]);
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i] ?? '';
    if (!a.startsWith('--')) {
      positional.push(a);
      continue;
    }
    const eq = a.indexOf('=');
    const name = eq >= 0 ? a.slice(0, eq) : a;
    if (booleans.has(name)) {
      if (eq >= 0) throw new LlmgwError('LLMGW_SIM_ARGS', `${name} takes no value (got ${JSON.stringify(a)})`);
      add(name, 'true');
    } else if (valued.has(name) || multi.has(name)) {
      if (eq >= 0) {
        add(name, a.slice(eq + 1));
        continue;
      }
      const start = i;
      while (i + 1 < argv.length && !(argv[i + 1] ?? '').startsWith('--') && (multi.has(name) || i === start)) add(name, argv[++i] ?? '');
      if (i === start) throw new LlmgwError('LLMGW_SIM_ARGS', `${name} needs a value; see llmgw sim --help`);
    } else {
      throw new LlmgwError('LLMGW_SIM_ARGS', `unknown flag ${JSON.stringify(name)}; see llmgw sim --help`);
    }
  }
  return { positional, flags };
}

function one(p: Parsed, k: string): string | undefined {
  const v = p.flags.get(k);
  if (v === undefined) return undefined;
  if (v.length > 1) throw new LlmgwError('LLMGW_SIM_ARGS', `${k} given ${v.length} times (${v.join(', ')}); give it once`);
  return v[0];
}

function num(p: Parsed, k: string): number | undefined {
  const v = one(p, k);
  if (v === undefined) return undefined;
  const n = Number(v);
  if (v.trim() === '' || !Number.isFinite(n)) throw new LlmgwError('LLMGW_SIM_ARGS', `${k}: ${JSON.stringify(v)} is not a number`);
  return n;
}

function choice<T extends string>(p: Parsed, k: string, allowed: readonly T[]): T | undefined {
  const v = one(p, k);
  if (v === undefined) return undefined;
  if (!(allowed as readonly string[]).includes(v)) throw new LlmgwError('LLMGW_SIM_ARGS', `${k}: ${JSON.stringify(v)} is not one of ${allowed.join(', ')}`);
  return v as T;
}

function toggle(p: Parsed, name: string): boolean | undefined {
  const on = p.flags.has(`--${name}`);
  const off = p.flags.has(`--no-${name}`);
  if (on && off) throw new LlmgwError('LLMGW_SIM_ARGS', `--${name} and --no-${name} both given; keep one`);
  return on ? true : off ? false : undefined;
}

function loraModules(values: readonly string[]): LoraModule[] {
  return values.map((v) => {
    // vLLM also takes a JSON object per adapter; both forms name it and point at its files.
    if (v.startsWith('{')) {
      const j = JSON.parse(v) as { name?: unknown; path?: unknown };
      if (typeof j.name === 'string' && typeof j.path === 'string') return { name: j.name, path: j.path };
    }
    const eq = v.indexOf('=');
    if (eq <= 0 || eq === v.length - 1) throw new LlmgwError('LLMGW_SIM_ARGS', `--lora-modules: ${JSON.stringify(v)} is not name=path`);
    return { name: v.slice(0, eq), path: v.slice(eq + 1) };
  });
}

/** Maps `llmgw sim serve` argv and the environment to startSim options (exported for tests). */
export function simOptionsFromArgv(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): Partial<SimOptions> & { model: string } {
  const p = parseArgv(argv);
  const [sub, model, ...extra] = p.positional;
  if (sub !== 'serve' || model === undefined || extra.length > 0) {
    throw new LlmgwError('LLMGW_SIM_ARGS', `expected "llmgw sim serve <model> [flags]", got ${JSON.stringify(p.positional.join(' '))}`);
  }
  const kv = one(p, '--kv-events-config');
  const kvt = one(p, '--kv-transfer-config');
  const drop = one(p, '--drop-event-batches');
  const dropSeqs = drop === undefined ? [] : drop.split(',').map((s) => Number(s.trim()));
  if (dropSeqs.some((n) => !Number.isInteger(n) || n < 0)) throw new LlmgwError('LLMGW_SIM_ARGS', `--drop-event-batches: ${JSON.stringify(drop)} is not a list of sequence numbers like 3,7`);
  const intHashes = env.VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES;
  const opt = <T>(k: string, v: T | undefined): Record<string, T> => (v === undefined ? {} : { [k]: v });
  const apiKey = one(p, '--api-key') ?? env.VLLM_API_KEY;
  const runtimeLora = env.VLLM_ALLOW_RUNTIME_LORA_UPDATING;
  return {
    model,
    ...opt('servedModelNames', p.flags.get('--served-model-name')),
    ...opt('host', one(p, '--host')),
    ...opt('port', num(p, '--port')),
    ...opt('blockSizeTokens', num(p, '--block-size')),
    ...opt('enablePrefixCaching', toggle(p, 'enable-prefix-caching')),
    ...opt('hashAlgo', choice<HashAlgo>(p, '--prefix-caching-hash-algo', ['sha256', 'sha256_cbor'])),
    ...opt('hashSeed', env.PYTHONHASHSEED),
    ...opt('kvEvents', kv === undefined ? undefined : parseKvEventsConfig(kv)),
    ...opt('kvTransfer', kvt === undefined ? undefined : parseKvTransferConfig(kvt)),
    ...opt('kvBytesPerToken', num(p, '--kv-bytes-per-token')),
    ...opt('kvTransferBytesPerS', num(p, '--kv-transfer-bytes-per-s')),
    ...opt('kvEventsFormat', choice(p, '--kv-events-format', ['map', 'array'] as const)),
    ...opt('kvReplayFraming', choice(p, '--kv-replay-framing', ['topic', 'legacy'] as const)),
    ...opt('intBlockHashes', intHashes === undefined ? undefined : intHashes !== '0'),
    ...opt('dataParallelSize', num(p, '--data-parallel-size')),
    ...opt('loraModules', p.flags.has('--lora-modules') ? loraModules(p.flags.get('--lora-modules') ?? []) : undefined),
    ...opt('allowRuntimeLoraUpdating', runtimeLora === undefined ? undefined : ['1', 'true'].includes(runtimeLora.trim().toLowerCase())),
    ...opt('maxNumSeqs', num(p, '--max-num-seqs')),
    ...opt('maxNumBatchedTokens', num(p, '--max-num-batched-tokens')),
    ...opt('schedulingPolicy', choice(p, '--scheduling-policy', ['fcfs', 'priority'] as const)),
    ...opt('maxModelLen', num(p, '--max-model-len')),
    ...opt('kvCapacityBlocks', num(p, '--kv-capacity-blocks')),
    ...opt('prefillTokensPerS', num(p, '--prefill-tokens-per-s')),
    ...opt('decodeTokensPerS', num(p, '--decode-tokens-per-s')),
    ...opt('answerTokens', num(p, '--answer-tokens')),
    ...opt('thinkTokens', num(p, '--think-tokens')),
    ...opt('reasoningParser', choice(p, '--reasoning-parser', reasoningParsers)),
    ...opt('runner', choice(p, '--runner', ['generate', 'pooling'] as const)),
    ...opt('embeddingDimensions', num(p, '--embedding-dimensions')),
    ...opt('matryoshka', p.flags.has('--matryoshka') ? true : undefined),
    ...opt('tokenizer', one(p, '--tokenizer')),
    ...opt('apiKey', apiKey),
    ...opt('enablePromptTokensDetails', toggle(p, 'enable-prompt-tokens-details')),
    ...opt('loraLoadTimeMs', num(p, '--lora-load-time-ms')),
    ...opt('trustRequestChatTemplate', p.flags.has('--trust-request-chat-template') ? true : undefined),
    faults: {
      loadTimeMs: num(p, '--load-time-ms') ?? 0,
      failHealthAfterMs: num(p, '--fail-health-after-ms'),
      crashAfterRequests: num(p, '--crash-after-requests'),
      crashMidStreamAfterTokens: num(p, '--crash-mid-stream-after-tokens'),
      dropEventBatches: dropSeqs,
      restartEventsAfterBatches: num(p, '--restart-events-after-batches'),
      hang: p.flags.has('--hang'),
      failLoraLoads: (one(p, '--fail-lora-loads') ?? '').split(',').filter((n) => n !== ''),
    },
  };
}

/** The multi-node flags (vLLM's names); one node when none are given. */
export function nodeRoleFromArgv(argv: readonly string[]): NodeRole {
  const p = parseArgv(argv);
  const role: NodeRole = {
    nnodes: num(p, '--nnodes') ?? 1,
    nodeRank: num(p, '--node-rank') ?? 0,
    masterAddr: one(p, '--master-addr') ?? '',
    masterPort: num(p, '--master-port') ?? 0,
    headless: p.flags.has('--headless'),
  };
  checkRole(role);
  return role;
}

/** Entry point of `llmgw sim`. */
export async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage);
    return 0;
  }
  let options: ReturnType<typeof simOptionsFromArgv>;
  let role: NodeRole;
  try {
    if (argv.includes('--list-devices')) {
      const p = parseArgv(argv);
      process.stdout.write(formatListDevices(p.flags.get('--devices') ?? []));
      return 0;
    }
    options = simOptionsFromArgv(argv, process.env);
    role = nodeRoleFromArgv(argv);
    // Checked here as well as in startSim, so a bad value is a usage error (exit 2), not a failed load.
    resolveSimOptions(options);
  } catch (e) {
    if (!hasCode(e, 'LLMGW_SIM_ARGS') && !hasCode(e, 'LLMGW_SIM_OPTIONS')) throw e;
    process.stderr.write(`llmgw sim: ${e.message}\n${usage}`);
    return 2;
  }
  const log = createLogger().child({ component: 'sim' });
  const stop = new AbortController();
  const onSignal = (): void => stop.abort();
  process.once('SIGTERM', onSignal);
  process.once('SIGINT', onSignal);
  let group: Group | undefined;
  if (role.nnodes > 1) {
    // As vLLM: the leader serves nothing until every worker joined; a worker serves nothing at all.
    try {
      group = role.nodeRank === 0 ? await awaitWorkers(role, { signal: stop.signal, onJoined: (rank) => log.info({ rank }, 'sim.worker.joined') }) : await joinLeader(role, { signal: stop.signal });
    } catch (e) {
      if (stop.signal.aborted) return 0;
      throw e;
    }
    log.info({ rank: role.nodeRank, nnodes: role.nnodes }, 'sim.group.ready');
    // A peer leaving breaks the collective group: vLLM fails, and so does the sim.
    void group.lost.then((why) => {
      if (stop.signal.aborted) return;
      log.error({ why }, 'sim.group.lost');
      process.exit(1);
    });
    if (role.headless) {
      if (!stop.signal.aborted) await once(stop.signal, 'abort');
      group.close();
      return 0;
    }
  }
  const sim = await startSim({
    ...options,
    log,
    // The crash fault: die the way an engine does, without closing anything.
    onCrash: () => process.exit(1),
  });
  try {
    await Promise.race([sim.ready, once(stop.signal, 'abort')]);
  } catch {
    // startSim has logged the load failure with its cause; the exit code carries it to a supervisor.
    await sim.close();
    return 1;
  }
  if (!stop.signal.aborted) await once(stop.signal, 'abort');
  log.info({}, 'sim.stopping');
  group?.close();
  await sim.close();
  return 0;
}
