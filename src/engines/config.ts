// The `engines:` and `kv_events:` sections: where each engine is installed and how it is launched,
// and the hashing facts every KV-event publisher is started with. Defaults live here, beside the parser.
import { deepFreeze, readMap, type Issues } from '../config/index.js';

/** The multi-node launchers vLLM has. */
export const launchModes = ['mp', 'ray'] as const;

/** Locates vLLM and picks how a multi-node replica is launched. */
export interface VllmConfig {
  /** The vllm executable. Empty: the installed one when the agent installed one, else `vllm` on PATH. */
  readonly bin: string;
  /** "mp" (the default) is what vLLM documents today: every node runs serve with its rank, the workers
   * headless, and needs nothing but vLLM. "ray" is the older way, for a vLLM too old for mp's
   * multi-node flags; it needs Ray on every node and has not been checked against a real cluster.
   * A string rather than the union because a registry can be built from code, and the engine must
   * refuse what it does not know rather than guess. */
  readonly launchMode: string;
  /** Used when launchMode is "ray". */
  readonly rayBin: string;
}

/** Locates SGLang: the interpreter its launcher module runs under. */
export interface SglangConfig {
  readonly python: string;
}

/** Locates llama.cpp and sets its per-server defaults. */
export interface LlamaCppConfig {
  /** The llama-server binary (the server, not the CLI: the gateway talks OpenAI over HTTP). Empty
   * means the agent installs llama.cpp itself (else `llama-server` on PATH); setting it opts out of that. */
  readonly bin: string;
  /** Requests a server handles at once when a profile does not say. llama.cpp's own default is one,
   * which makes every second request wait behind the first whatever the router decided. */
  readonly parallel: number;
  /** CPU threads for a shard with no GPU; 0 takes half this machine's CPUs. Not all of them, llama.cpp's
   * default: two servers each spinning on every CPU fight for them, and on an 8-vCPU node 7B
   * generation fell from 10 tokens/s to under 1 each. At half, one server alone is about a third
   * slower and two together keep 5.5 each. A node that only ever runs one CPU replica does better
   * with all of them; say so here. */
  readonly threads: number;
}

/** TensorRT-LLM, which the agent does not install: a node offers it only when its interpreter is named. */
export interface TrtllmConfig {
  readonly python: string;
}

/** The simulated engine: empty bin runs this llmgw's own `sim` subcommand. */
export interface SimConfig {
  readonly bin: string;
  /** The KV block size the sim hashes and reports in its events, in tokens. */
  readonly blockSize: number;
}

/** How the engine adapters are configured. */
export interface EnginesConfig {
  /** Engines this node never installs or advertises whatever the control plane asks: vLLM on a node
   * of cards no build of it runs on, meant for llama.cpp alone. */
  readonly disabled: readonly string[];
  readonly vllm: VllmConfig;
  readonly sglang: SglangConfig;
  readonly llamacpp: LlamaCppConfig;
  readonly trtllm: TrtllmConfig;
  readonly sim: SimConfig;
}

/** The block-hash algorithms the gateway can reproduce. sha256_cbor is the default and the one to
 * use: vLLM's own default, `sha256`, hashes Python pickles, which the gateway matches only by
 * re-implementing pickle protocol 5, so it breaks whenever Python's pickling does. */
export const hashAlgos = ['sha256_cbor', 'sha256'] as const;

/** What every KV-event publisher is started with, so the gateway's hashes match the engine's. */
export interface KvEventsConfig {
  /** PYTHONHASHSEED for vLLM and the sim: the string vLLM hashes into its first block's parent. */
  readonly hashSeed: string;
  readonly hashAlgo: (typeof hashAlgos)[number];
}

/** The engine names llmgw builds commands for, sorted. */
export const engineNames = ['llamacpp', 'sglang', 'sim', 'trtllm', 'vllm'] as const;

/** The defaults of the `engines:` section. */
export const defaultEnginesConfig: EnginesConfig = deepFreeze({
  disabled: [],
  vllm: { bin: '', launchMode: 'mp', rayBin: 'ray' },
  sglang: { python: 'python3' },
  llamacpp: { bin: '', parallel: 4, threads: 0 },
  trtllm: { python: '' },
  sim: { bin: '', blockSize: 16 },
});

/** The defaults of the `kv_events:` section. */
export const defaultKvEventsConfig: KvEventsConfig = deepFreeze({ hashSeed: '0', hashAlgo: 'sha256_cbor' });

/** Parses the `engines:` section, recording every problem in `issues`. */
export function parseEnginesConfig(raw: unknown, path: string, issues: Issues): EnginesConfig {
  const d = defaultEnginesConfig;
  const m = readMap(raw, path, issues, ['disabled', ...engineNames]);
  if (m === undefined) return d;
  const disabled = m.strings('disabled');
  disabled.forEach((n, i) => {
    if (!(engineNames as readonly string[]).includes(n)) {
      issues.push({ path: `${m.at('disabled')}[${i}]`, message: `unknown engine ${JSON.stringify(n)} (have ${engineNames.join(', ')})` });
    }
  });
  const v = m.map('vllm', ['bin', 'launch_mode', 'ray_bin']);
  const s = m.map('sglang', ['python']);
  const l = m.map('llamacpp', ['bin', 'parallel', 'threads']);
  const t = m.map('trtllm', ['python']);
  const sim = m.map('sim', ['bin', 'block_size']);
  return deepFreeze({
    disabled,
    vllm: {
      bin: v?.string('bin', d.vllm.bin) ?? d.vllm.bin,
      launchMode: v?.oneOf('launch_mode', launchModes, 'mp') ?? d.vllm.launchMode,
      rayBin: v?.string('ray_bin', d.vllm.rayBin) ?? d.vllm.rayBin,
    },
    sglang: { python: s?.string('python', d.sglang.python) ?? d.sglang.python },
    llamacpp: {
      bin: l?.string('bin', d.llamacpp.bin) ?? d.llamacpp.bin,
      parallel: l?.int('parallel', d.llamacpp.parallel, 1) ?? d.llamacpp.parallel,
      threads: l?.int('threads', d.llamacpp.threads, 0) ?? d.llamacpp.threads,
    },
    trtllm: { python: t?.string('python', d.trtllm.python) ?? d.trtllm.python },
    sim: {
      bin: sim?.string('bin', d.sim.bin) ?? d.sim.bin,
      blockSize: sim?.int('block_size', d.sim.blockSize, 1) ?? d.sim.blockSize,
    },
  });
}

/** Parses the `kv_events:` section, recording every problem in `issues`. */
export function parseKvEventsConfig(raw: unknown, path: string, issues: Issues): KvEventsConfig {
  const d = defaultKvEventsConfig;
  const m = readMap(raw, path, issues, ['hash_seed', 'hash_algo']);
  if (m === undefined) return d;
  const hashAlgo = m.oneOf('hash_algo', hashAlgos, d.hashAlgo);
  return deepFreeze({ hashSeed: m.string('hash_seed', d.hashSeed), hashAlgo });
}
