// The `agent:` section of llmgw.yaml: where the agent keeps its records and logs, and the bounds of
// every wait it makes. Parsed once into a frozen object; every problem is reported at once.
import { deepFreeze, readMap, type Issues } from '../config/index.js';
import { ConfigError } from '../errors/index.js';

/** How often and how fast a failed shard is started again. */
export interface RestartPolicy {
  /** Restarts allowed within `windowMs`; one more and the shard stays failed. */
  readonly maxRestarts: number;
  readonly windowMs: number;
  /** First backoff; each restart still inside the window doubles it, up to `backoffMaxMs`. */
  readonly backoffBaseMs: number;
  readonly backoffMaxMs: number;
}

/** The bounds of the waits a shard makes, each one a named delay of the shard machine. */
export interface ShardTiming {
  /** How long a model may load before the shard is failed (big models load for many minutes). */
  readonly loadTimeoutMs: number;
  /** How long a shard waits for its leader's port before giving up. */
  readonly leaderTimeoutMs: number;
  /** How long draining waits for in-flight requests before stopping anyway. */
  readonly drainTimeoutMs: number;
  /** Between SIGTERM and SIGKILL of a shard's process group. */
  readonly killAfterMs: number;
  /** Between health probes, while loading and once ready. */
  readonly healthIntervalMs: number;
  /** Consecutive failed probes of a ready shard before it is failed and restarted. */
  readonly healthFailures: number;
}

/** The agent section, camelCase and frozen. */
export interface AgentConfig {
  /** Records of running shards, so a restarted agent adopts them instead of starting them again. */
  readonly stateDir: string;
  /** One log file per shard (stdout and stderr of all its processes). */
  readonly logDir: string;
  /** Lines of a shard's output kept with its failure. */
  readonly tailLines: number;
  /** A shard's log past this size is rotated (copied to .1, then emptied); 0 never rotates. */
  readonly logMaxBytes: number;
  /** Rotated copies kept per shard (.1 is the newest). */
  readonly logKeep: number;
  readonly restart: RestartPolicy;
  readonly timing: ShardTiming;
}

/** Defaults: a 70B model loading from network storage takes many minutes, so the load bound is long. */
export const defaultAgentConfig: AgentConfig = deepFreeze({
  stateDir: '.llmgw-state',
  logDir: '.llmgw-state/logs',
  tailLines: 40,
  // An engine at debug level writes hundreds of MB a day; four files of 64 MiB bound a shard's logs.
  logMaxBytes: 64 * 1024 * 1024,
  logKeep: 3,
  restart: { maxRestarts: 5, windowMs: 600_000, backoffBaseMs: 1_000, backoffMaxMs: 60_000 },
  timing: {
    loadTimeoutMs: 1_800_000,
    leaderTimeoutMs: 600_000,
    drainTimeoutMs: 30_000,
    killAfterMs: 10_000,
    healthIntervalMs: 2_000,
    healthFailures: 3,
  },
});

/** Parses `agent:`; `path` prefixes every reported problem (normally "agent"). Throws ConfigError. */
export function parseAgentConfig(raw: unknown, path = 'agent', source = 'llmgw.yaml'): AgentConfig {
  const issues: Issues = [];
  const config = parseAgentSection(raw, path, issues);
  if (issues.length > 0) throw new ConfigError(source, issues);
  return config;
}

/** The section parser for the config table: problems go to `issues`, defaults stand in for bad values. */
export function parseAgentSection(raw: unknown, path: string, issues: Issues): AgentConfig {
  const d = defaultAgentConfig;
  const m = readMap(raw, path, issues, [
    'state_dir',
    'log_dir',
    'tail_lines',
    'log_max_bytes',
    'log_keep',
    'restart',
    'load_timeout_ms',
    'leader_timeout_ms',
    'drain_timeout_ms',
    'kill_after_ms',
    'health_interval_ms',
    'health_failures',
  ]);
  if (m === undefined) return d;
  const r = m.map('restart', ['max_restarts', 'window_ms', 'backoff_base_ms', 'backoff_max_ms']);
  const dr = d.restart;
  const restart: RestartPolicy = {
    maxRestarts: r?.int('max_restarts', dr.maxRestarts, 0) ?? dr.maxRestarts,
    windowMs: r?.int('window_ms', dr.windowMs, 1) ?? dr.windowMs,
    backoffBaseMs: r?.int('backoff_base_ms', dr.backoffBaseMs, 1) ?? dr.backoffBaseMs,
    backoffMaxMs: r?.int('backoff_max_ms', dr.backoffMaxMs, 1) ?? dr.backoffMaxMs,
  };
  if (r !== undefined && restart.backoffMaxMs < restart.backoffBaseMs) {
    r.problem('backoff_max_ms', `${restart.backoffMaxMs} is below backoff_base_ms ${restart.backoffBaseMs}; raise it to at least that`);
  }
  const t = d.timing;
  return deepFreeze({
    stateDir: m.text('state_dir', d.stateDir),
    logDir: m.text('log_dir', d.logDir),
    tailLines: m.int('tail_lines', d.tailLines, 1),
    logMaxBytes: m.int('log_max_bytes', d.logMaxBytes, 0),
    logKeep: m.int('log_keep', d.logKeep, 1, 100),
    restart,
    timing: {
      loadTimeoutMs: m.int('load_timeout_ms', t.loadTimeoutMs, 1),
      leaderTimeoutMs: m.int('leader_timeout_ms', t.leaderTimeoutMs, 1),
      drainTimeoutMs: m.int('drain_timeout_ms', t.drainTimeoutMs, 1),
      killAfterMs: m.int('kill_after_ms', t.killAfterMs, 1),
      healthIntervalMs: m.int('health_interval_ms', t.healthIntervalMs, 1),
      healthFailures: m.int('health_failures', t.healthFailures, 1),
    },
  });
}
