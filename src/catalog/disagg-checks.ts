// The checks a prefill/decode pool must pass before anything starts: each model's replicas with a
// role, read together, since the KV cache moves between them and a mismatch is found only when the
// first request's transfer fails (or, worse, reads another model's blocks).
import { blockSizeArgOf, disaggOf } from '../engines/index.js';
import type { Profile } from '../engines/index.js';
import type { ConfigIssue } from '../errors/index.js';

// Engines that can hand a KV cache over: vLLM and the sim through NIXL, SGLang through its own.
const disaggEngines = new Set(['vllm', 'sim', 'sglang']);

/** What the checks read of the catalog (its Catalog satisfies it; declared here so the two files do not import each other). */
export interface PoolCatalog {
  readonly models: Readonly<Record<string, { readonly profiles: readonly Profile[] }>>;
  readonly replicas: readonly { readonly model: string; readonly profile: string; readonly count: number; readonly endpoint?: unknown }[];
}

/** Every reason the catalog's disaggregated pools cannot work, each at its replica's or profile's path. */
export function disaggIssues(catalog: PoolCatalog): ConfigIssue[] {
  const issues: ConfigIssue[] = [];
  for (const [key, model] of Object.entries(catalog.models)) {
    model.profiles.forEach((p, i) => {
      if (p.role === undefined) return;
      const at = `models.${key}.profiles[${i}].role`;
      if (!disaggEngines.has(p.engine)) issues.push({ path: at, message: `${p.role}, but ${p.engine} cannot hand a KV cache to another engine; drop role, or run vllm, sglang or sim` });
      else if (p.engine === 'sglang' && p.role === 'both') issues.push({ path: at, message: 'both, but SGLang runs a replica in one --disaggregation-mode; write prefill or decode' });
    });
    const pool = catalog.replicas
      .map((r, i) => ({ r, at: `replicas[${i}]`, p: r.endpoint === undefined && r.model === key && r.count > 0 ? model.profiles.find((p) => p.name === r.profile) : undefined }))
      .filter((x): x is { r: (typeof x)['r']; at: string; p: Profile } => x.p?.role !== undefined);
    const prefill = pool.filter((x) => x.p.role === 'prefill');
    const decode = pool.filter((x) => x.p.role !== 'prefill');
    const first = prefill[0];
    if (first !== undefined && decode.length === 0) {
      issues.push({ path: `${first.at}.profile`, message: `${key} has prefill replicas (profile ${first.p.name}) and none that decode; add a replica of a profile with role: decode or both, or drop role` });
    }
    for (const d of decode) {
      for (const f of prefill) {
        const why = mismatch(f.p, d.p);
        if (why !== undefined) issues.push({ path: `${d.at}.profile`, message: `${key}: decode profile ${d.p.name} cannot take prefill profile ${f.p.name}'s KV cache: ${why}` });
      }
    }
  }
  return issues;
}

// Why a decode replica cannot read a prefill replica's blocks, or undefined when it can.
function mismatch(f: Profile, d: Profile): string | undefined {
  const fp = disaggOf(f)?.protocol;
  const dp = disaggOf(d)?.protocol;
  if (fp !== dp) return `${f.engine} and ${d.engine} move KV caches differently (NIXL and SGLang's bootstrap); run one engine family on both sides`;
  if (f.modelPath !== d.modelPath) return `model_path ${JSON.stringify(f.modelPath)} is not ${JSON.stringify(d.modelPath)}; the blocks are one model's weights' activations, so both sides must load the same model`;
  const fb = blockSizeArgOf(f);
  const db = blockSizeArgOf(d);
  // vLLM's NIXL handshake compares the remote's block size with its own and fails the transfer when they differ.
  if (fb !== db) return `block size ${fb ?? 'default'} is not ${db ?? 'default'}; give both profiles the same --block-size`;
  // vLLM's NixlConnector maps a prefill rank's blocks onto decode ranks only when the decode tp is a
  // whole multiple of the prefill tp (nixl_connector.py, add_remote_agent: tp_ratio must divide
  // evenly); SGLang asks the same of its decode side.
  if (d.tp % f.tp !== 0) return `decode tp ${d.tp} is not a multiple of prefill tp ${f.tp}; the connector splits each prefill rank's heads over whole decode ranks, so use a decode tp of ${f.tp}, ${f.tp * 2}, …`;
  return undefined;
}
