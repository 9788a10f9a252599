// Prefill/decode disaggregation as the engines are told it: vLLM (and the sim, which plays it) by a
// KV connector in --kv-transfer-config, SGLang by --disaggregation-mode and its bootstrap server.
// Pure: the catalog's role becomes flags here, and what the gateway must know to split a request.
import { flagValue, hasFlag } from './argv.js';
import type { DisaggRole, Profile } from './types.js';

/** The catalog's spellings of the roles, for its parser and messages. */
export const disaggRoles: readonly DisaggRole[] = ['prefill', 'decode', 'both'];

/** How the KV cache moves: vLLM's NixlConnector (prefill first, then decode with what it returned)
 * or SGLang's bootstrap server (both sent at once, meeting at a bootstrap room). */
export type DisaggProtocol = 'nixl' | 'sglang';

/** What the gateway must know of a replica in a disaggregated pool. */
export interface Disagg {
  readonly role: DisaggRole;
  readonly protocol: DisaggProtocol;
  /** SGLang's bootstrap server port on a prefill replica (decode replicas are told it per request); 0 for NIXL. */
  readonly bootstrapPort: number;
}

/** SGLang's own default for --disaggregation-bootstrap-port. */
export const sglangBootstrapPortDefault = 8998;

// kv_both on every role, as vLLM's NixlConnector guide and llm-d's P/D manifests run both halves:
// the connector decides per request from kv_transfer_params (do_remote_decode on the prefill,
// do_remote_prefill on the decode), so a role-specific kv_role adds nothing, and kv_both keeps a
// replica able to take a whole request when the gateway falls back to it.
const nixlKvRole = 'kv_both';

/** vLLM's --kv-transfer-config for the role (the NIXL connector), unless the profile's args give their own. */
export function vllmKvTransferArgs(p: Profile): string[] {
  if (p.role === undefined || hasFlag(p.args, '--kv-transfer-config')) return [];
  return ['--kv-transfer-config', JSON.stringify({ kv_connector: 'NixlConnector', kv_role: nixlKvRole })];
}

/** SGLang's disaggregation flags: its mode, and on a prefill replica the port its bootstrap server listens on. */
export function sglangDisaggArgs(p: Profile): string[] {
  // SGLang has no "both": a replica is one mode or the other; the catalog refuses both for it.
  if (p.role === undefined || p.role === 'both' || hasFlag(p.args, '--disaggregation-mode')) return [];
  const args = ['--disaggregation-mode', p.role];
  if (p.role === 'prefill' && !hasFlag(p.args, '--disaggregation-bootstrap-port')) args.push('--disaggregation-bootstrap-port', String(bootstrapPortOf(p)));
  return args;
}

/** The bootstrap port a SGLang prefill profile runs with: its args' when they set it, else the profile's. */
export function bootstrapPortOf(p: Profile): number {
  const v = Number(flagValue(p.args, '--disaggregation-bootstrap-port') ?? p.bootstrapPort ?? sglangBootstrapPortDefault);
  return Number.isInteger(v) && v > 0 ? v : sglangBootstrapPortDefault;
}

/** What the gateway needs to split a request for a replica of this profile; undefined when it is not disaggregated. */
export function disaggOf(p: Profile): Disagg | undefined {
  if (p.role === undefined) return undefined;
  const protocol: DisaggProtocol = p.engine === 'sglang' ? 'sglang' : 'nixl';
  return { role: p.role, protocol, bootstrapPort: protocol === 'sglang' && p.role === 'prefill' ? bootstrapPortOf(p) : 0 };
}

/** The KV block size the profile's args ask for (`--block-size`, vLLM's and the sim's flag, SGLang's --page-size), or undefined. */
export function blockSizeArgOf(p: Profile): number | undefined {
  const v = flagValue(p.args, '--block-size', '--page-size');
  return v === undefined ? undefined : Number(v);
}
