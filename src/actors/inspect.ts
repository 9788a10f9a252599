// The one reader of the actors: passed as `inspect` to the root actor, it turns XState's inspection
// events into plain, JSON-safe records. The agent's bookkeeping (state directory, replica
// directory, logs) and the visualizer consume these records; nothing else looks at actors.
import { isMachineSnapshot, type InspectionEvent } from 'xstate';

/** A machine actor's state after a step. `context` is plain data, secrets included: see `publicRecord`. */
export interface SnapshotRecord {
  readonly kind: 'snapshot';
  readonly at: number;
  /** The actor's system id (`shard:<id>`, `replica:<id>`, `publisher:<id>`), else its id. */
  readonly actor: string;
  readonly machine: string;
  readonly status: 'active' | 'done' | 'error' | 'stopped';
  readonly value: unknown;
  readonly tags: readonly string[];
  readonly context: unknown;
}

/** An event delivered to a machine actor: its type and scalar fields only. */
export interface EventRecord {
  readonly kind: 'event';
  readonly at: number;
  readonly actor: string;
  readonly source: string | undefined;
  readonly event: Readonly<Record<string, string | number | boolean | null>>;
}

/** What the inspector republishes. */
export type InspectRecord = SnapshotRecord | EventRecord;

function actorName(ref: unknown): string | undefined {
  if (typeof ref !== 'object' || ref === null) return undefined;
  if ('systemId' in ref && typeof ref.systemId === 'string') return ref.systemId;
  if ('id' in ref && typeof ref.id === 'string') return ref.id;
  return undefined;
}

/** A JSON-safe copy: bigints as strings, functions and class instances other than arrays dropped. */
function plain(v: unknown, depth = 0): unknown {
  if (depth > 12) return '[deep]';
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'function' || typeof v === 'symbol') return undefined;
  if (Array.isArray(v)) return v.map((x) => plain(x, depth + 1));
  if (typeof v === 'object' && v !== null) {
    if (Object.getPrototypeOf(v) !== Object.prototype && Object.getPrototypeOf(v) !== null) return String(v);
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = plain(x, depth + 1);
    return out;
  }
  return v;
}

function scalars(e: Record<string, unknown>): Record<string, string | number | boolean | null> {
  const out: Record<string, string | number | boolean | null> = {};
  for (const [k, x] of Object.entries(e)) {
    if (typeof x === 'string' || typeof x === 'number' || typeof x === 'boolean' || x === null) out[k] = x;
  }
  return out;
}

/** The `inspect` option for the root actor, handing each record to `onRecord`. */
export function createInspector(onRecord: (r: InspectRecord) => void, now: () => number = Date.now): (e: InspectionEvent) => void {
  return (e) => {
    if (e.type === '@xstate.snapshot') {
      const s = e.snapshot;
      const actor = actorName(e.actorRef);
      if (!isMachineSnapshot(s) || actor === undefined) return;
      onRecord({
        kind: 'snapshot',
        at: now(),
        actor,
        machine: s.machine.id,
        status: s.status,
        value: plain(s.value),
        tags: [...s.tags],
        context: plain(s.context),
      });
    } else if (e.type === '@xstate.event') {
      const actor = actorName(e.actorRef);
      if (actor === undefined) return;
      // A relayed child snapshot is already the child's own snapshot record: only its type is kept,
      // so the parent's next transition can name what caused it.
      const event = e.event.type.startsWith('xstate.snapshot.') ? { type: e.event.type } : scalars(e.event);
      onRecord({ kind: 'event', at: now(), actor, source: actorName(e.sourceRef), event });
    }
  };
}

const secretKey = /^(api[_-]?key|apikey|authorization|password|secret|token)$/i;
const secretEnv = /(KEY|TOKEN|SECRET|PASSWORD)/;

function redact(v: unknown): unknown {
  if (Array.isArray(v)) {
    // An environment entry [name, value] of a secret: keep the name, drop the value.
    if (v.length === 2 && typeof v[0] === 'string' && typeof v[1] === 'string' && secretEnv.test(v[0])) return [v[0], '[redacted]'];
    return v.map(redact);
  }
  if (typeof v === 'object' && v !== null) {
    const out: Record<string, unknown> = {};
    for (const [k, x] of Object.entries(v)) out[k] = secretKey.test(k) ? '[redacted]' : redact(x);
    return out;
  }
  return v;
}

/** A record fit to leave the process (visualizer, logs): API keys and secret environment values removed. */
export function publicRecord(r: InspectRecord): InspectRecord {
  return r.kind === 'snapshot' ? { ...r, context: redact(r.context) } : r;
}
