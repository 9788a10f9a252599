// Which way each engine's KV events travel, said the same in `llmgw plan` and `llmgw doctor`: ipc://
// in the agent's private directory where vLLM allows it, loopback TCP (open to every local process)
// where it does not, with the reason, so an operator knows what a local user could reach.
import { statSync } from 'node:fs';
import { resolve } from 'node:path';
import { dataParallelSizeOf, kvEventsEndpoints, kvIpcFits, type ShardSpec } from '../engines/index.js';
import type { Config } from './config.js';

/** The agent's private directory (0700) for its engines' KV event sockets, beside its state. */
export function kvIpcDirOf(config: Pick<Config, 'agent'>): string {
  return resolve(config.agent.stateDir, 'kv');
}

/** How a shard's KV events travel, in one line; `exposed` when any local process can connect. */
export function kvTransportOf(spec: ShardSpec, ipcDir: string): { line: string; exposed: boolean } | undefined {
  if (spec.kvEventsPort <= 0) return undefined;
  const where = kvEventsEndpoints(spec);
  const replay = where.replayEndpoint === undefined ? 'no replay' : `replay ${where.replayEndpoint}`;
  if (where.transport === 'ipc') return { line: `kv events ${where.endpoint} (${replay}), in a directory only the agent's user can enter`, exposed: false };
  const why =
    dataParallelSizeOf(spec.profile.args) > 1
      ? "data parallel: vLLM refuses ipc:// for ranks above 0"
      : kvIpcFits(ipcDir, spec.kvEventsPort)
        ? 'not started by this agent'
        : `the socket path in ${ipcDir} would be over 107 bytes; shorten agent.state_dir`;
  return {
    line: `kv events ${where.endpoint} (${replay}) on loopback TCP (${why}): any local process can read its prompt token ids and forge events`,
    exposed: true,
  };
}

/** A warning when the ipc directory exists and others can enter it (made by hand, or by an older llmgw). */
export function ipcDirWarning(dir: string, uid: number | undefined): string | undefined {
  let st;
  try {
    st = statSync(dir);
  } catch {
    return undefined; // the agent creates it, 0700, when it starts
  }
  const mode = st.mode & 0o777;
  if (mode === 0o700 && (uid === undefined || st.uid === uid)) return undefined;
  return `${dir}: mode ${mode.toString(8)}, owner uid ${st.uid}; the agent wants mode 700 and its own user, and refuses to start engines there until it is (chmod 700 ${dir})`;
}
