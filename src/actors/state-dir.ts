// The agent's memory across its own restarts: one JSON file per running shard with its spec, its
// commands and its processes. A restarted agent reads them to take back engines that are still
// running instead of killing minutes of model loading.
import { decode, encode } from '@msgpack/msgpack';
import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { Command, ShardSpec } from '../engines/index.js';
import { LlmgwError } from '../errors/index.js';
import { parseStreamState, type StreamState } from '../kv/index.js';
import { writeDurably, type DurableWriteStep } from './durable-file.js';
import type { ProcessRecord } from './processes.js';
import type { ReplicaInput } from './replica-machine.js';
import type { ShardInput } from './shard-machine.js';

/** One running shard as recorded: enough to adopt it, or to drain it when its spec changed. */
export interface ShardRecord {
  readonly version: 1;
  /** The replica it belongs to, without its shard list (each shard has its own record). */
  readonly replica: Omit<ReplicaInput, 'shards' | 'retire' | 'publisher'> & { readonly publisher: ReplicaInput['publisher'] };
  readonly shard: ShardInput;
  readonly fingerprint: string;
  readonly processes: readonly ProcessRecord[];
}

/**
 * Makes `dir` a directory only this process's user can enter (mode 0700), creating it if need be.
 * The engines' KV event and replay sockets live there: the replay socket hands out prompt token ids
 * and the event socket takes whatever is published to it, so no other local user may reach either.
 * A directory owned by someone else, or a symlink, is refused rather than trusted.
 */
export function ensurePrivateDir(dir: string): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const st = lstatSync(dir);
  const uid = process.getuid?.();
  if (!st.isDirectory() || (uid !== undefined && st.uid !== uid)) {
    throw new LlmgwError(
      'LLMGW_IPC_DIR',
      `${dir} is ${st.isDirectory() ? `owned by uid ${st.uid}, not the agent's uid ${String(uid)}` : 'not a directory'}; ` +
        'the engines\' KV event sockets must be private to the agent: remove it, or set agent.state_dir elsewhere',
    );
  }
  if ((st.mode & 0o777) !== 0o700) chmodSync(dir, 0o700);
}

/** The fingerprint of what a shard runs, blind to its API key (random per start) and to inherited environment. */
export function shardFingerprint(spec: ShardSpec, commands: readonly Command[]): string {
  const key = spec.apiKey;
  const hide = (v: string): string => (key !== '' && v === key ? '' : v);
  const doc = {
    spec: { ...spec, apiKey: '' },
    commands: commands.map((c) => ({
      name: c.name,
      path: c.path,
      args: c.args.map(hide),
      waitForLeaderPort: c.waitForLeaderPort,
      // Only what llmgw generated: a changed shell variable in the agent's environment is no new spec.
      env: c.env.filter(([k]) => c.generated.includes(k)).map(([k, v]) => [k, hide(v)]),
    })),
  };
  return createHash('sha256').update(JSON.stringify(doc)).digest('hex').slice(0, 32);
}

const fileOf = (dir: string, shardId: string): string => join(dir, `${encodeURIComponent(shardId)}.json`);
const kvFileOf = (dir: string, replicaId: string): string => join(dir, `${encodeURIComponent(replicaId)}.kv`);

function isShardRecord(v: unknown): v is ShardRecord {
  if (typeof v !== 'object' || v === null) return false;
  return (
    'version' in v &&
    v.version === 1 &&
    'fingerprint' in v &&
    typeof v.fingerprint === 'string' &&
    'processes' in v &&
    Array.isArray(v.processes) &&
    'shard' in v &&
    typeof v.shard === 'object' &&
    'replica' in v &&
    typeof v.replica === 'object'
  );
}

/** The state directory: read at start, written as shards start and stop. */
export class StateDir {
  readonly dir: string;
  readonly #onWriteStep: ((step: DurableWriteStep) => void) | undefined;

  /** `onWriteStep` hears each step of every write (durable-file.ts): tests crash the process there. */
  constructor(dir: string, o: { onWriteStep?: (step: DurableWriteStep) => void } = {}) {
    this.dir = dir;
    this.#onWriteStep = o.onWriteStep;
    try {
      mkdirSync(dir, { recursive: true });
    } catch (e) {
      throw new LlmgwError('LLMGW_STATE_DIR', `agent.state_dir ${JSON.stringify(dir)} cannot be created (${e instanceof Error ? e.message : String(e)}); point it at a writable directory`, { cause: e });
    }
  }

  /** Every readable record; an unreadable one is reported to `onBad` and removed, since nothing can adopt from it. */
  read(onBad: (file: string, why: string) => void): ShardRecord[] {
    const out: ShardRecord[] = [];
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith('.json')) continue;
      const file = join(this.dir, name);
      let v: unknown;
      try {
        v = JSON.parse(readFileSync(file, 'utf8'));
      } catch (e) {
        onBad(file, e instanceof Error ? e.message : String(e));
        rmSync(file, { force: true });
        continue;
      }
      if (!isShardRecord(v)) {
        onBad(file, 'not a shard record of this llmgw version');
        rmSync(file, { force: true });
        continue;
      }
      out.push(v);
    }
    return out;
  }

  /** Writes a record durably (writeDurably), so a crash never leaves half a file. */
  write(r: ShardRecord): void {
    writeDurably(fileOf(this.dir, r.shard.spec.shardId), Buffer.from(JSON.stringify(r)), { mode: 0o600, onStep: this.#onWriteStep });
  }

  remove(shardId: string): void {
    rmSync(fileOf(this.dir, shardId), { force: true });
  }

  /** A replica's KV event stream as it was last saved, or undefined (none, or unreadable: it is removed). */
  readKv(replicaId: string): StreamState | undefined {
    const file = kvFileOf(this.dir, replicaId);
    let v: unknown;
    try {
      v = decode(readFileSync(file), { useBigInt64: true });
    } catch (e) {
      // No file is the usual case (a replica never saved); a torn or foreign one is dropped.
      if (!(e instanceof Error && 'code' in e && e.code === 'ENOENT')) rmSync(file, { force: true });
      return undefined;
    }
    const state = parseStreamState(v);
    if (state === undefined) rmSync(file, { force: true });
    return state;
  }

  /**
   * Saves a replica's KV event stream durably (msgpack: keys stay 64-bit integers): a kill -9 or a
   * power cut during the save leaves the last save or this one, and readKv drops the stream only
   * when neither was ever written whole.
   */
  writeKv(replicaId: string, state: StreamState): void {
    writeDurably(kvFileOf(this.dir, replicaId), encode(state, { useBigInt64: true }), { mode: 0o600, onStep: this.#onWriteStep });
  }

  /** Removes every saved KV stream but those of `replicaIds` (the adopted engines): the others' engines started anew. */
  keepKvOnly(replicaIds: ReadonlySet<string>): void {
    for (const name of readdirSync(this.dir)) {
      if (!name.endsWith('.kv')) continue;
      if (!replicaIds.has(decodeURIComponent(name.slice(0, -'.kv'.length)))) rmSync(join(this.dir, name), { force: true });
    }
  }
}
