// The `agent:` section of llmgw.yaml: where the agent keeps its records and logs, and the bounds of
// every wait it makes. Parsed once into a frozen object; every problem is reported at once.
import { ConfigError, type ConfigIssue } from '../errors/index.js';

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
  readonly restart: RestartPolicy;
  readonly timing: ShardTiming;
}

/** Defaults: a 70B model loading from network storage takes many minutes, so the load bound is long. */
export const defaultAgentConfig: AgentConfig = Object.freeze({
  stateDir: '.llmgw-state',
  logDir: '.llmgw-state/logs',
  tailLines: 40,
  restart: Object.freeze({ maxRestarts: 5, windowMs: 600_000, backoffBaseMs: 1_000, backoffMaxMs: 60_000 }),
  timing: Object.freeze({
    loadTimeoutMs: 1_800_000,
    leaderTimeoutMs: 600_000,
    drainTimeoutMs: 30_000,
    killAfterMs: 10_000,
    healthIntervalMs: 2_000,
    healthFailures: 3,
  }),
});

const topKeys = {
  state_dir: 'stateDir',
  log_dir: 'logDir',
  tail_lines: 'tailLines',
  restart: 'restart',
  load_timeout_ms: 'loadTimeoutMs',
  leader_timeout_ms: 'leaderTimeoutMs',
  drain_timeout_ms: 'drainTimeoutMs',
  kill_after_ms: 'killAfterMs',
  health_interval_ms: 'healthIntervalMs',
  health_failures: 'healthFailures',
} as const;

const restartKeys = {
  max_restarts: 'maxRestarts',
  window_ms: 'windowMs',
  backoff_base_ms: 'backoffBaseMs',
  backoff_max_ms: 'backoffMaxMs',
} as const;

const isTopKey = (k: string): k is keyof typeof topKeys => Object.hasOwn(topKeys, k);
const isRestartKey = (k: string): k is keyof typeof restartKeys => Object.hasOwn(restartKeys, k);

function isRecord(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

function closest(key: string, known: readonly string[]): string {
  const hit = known.find((k) => k.startsWith(key.slice(0, 4)) || key.startsWith(k.slice(0, 4)));
  return hit === undefined ? `(have ${known.join(', ')})` : `(did you mean "${hit}"?)`;
}

/** Parses `agent:`; `path` prefixes every reported problem (normally "agent"). Throws ConfigError. */
export function parseAgentConfig(raw: unknown, path = 'agent', source = 'llmgw.yaml'): AgentConfig {
  const issues: ConfigIssue[] = [];
  const config = parseAgentSection(raw, path, issues);
  if (issues.length > 0) throw new ConfigError(source, issues);
  return config;
}

/** The section parser for the config table: problems go to `issues`, defaults stand in for bad values. */
export function parseAgentSection(raw: unknown, path: string, issues: ConfigIssue[]): AgentConfig {
  if (raw === undefined || raw === null) return defaultAgentConfig;
  if (!isRecord(raw)) {
    issues.push({ path, message: `${JSON.stringify(raw)} is not a mapping; write keys such as state_dir: and restart:` });
    return defaultAgentConfig;
  }

  const count = (p: string, v: unknown, min: number): number | undefined => {
    if (typeof v === 'number' && Number.isInteger(v) && v >= min) return v;
    issues.push({ path: p, message: `${JSON.stringify(v)} is not a whole number >= ${min}` });
    return undefined;
  };
  const text = (p: string, v: unknown): string | undefined => {
    if (typeof v === 'string' && v !== '') return v;
    issues.push({ path: p, message: `${JSON.stringify(v)} is not a non-empty path` });
    return undefined;
  };

  let stateDir = defaultAgentConfig.stateDir;
  let logDir = defaultAgentConfig.logDir;
  let tailLines = defaultAgentConfig.tailLines;
  const timing: { -readonly [K in keyof ShardTiming]: ShardTiming[K] } = { ...defaultAgentConfig.timing };
  const restart: { -readonly [K in keyof RestartPolicy]: RestartPolicy[K] } = { ...defaultAgentConfig.restart };

  for (const [key, value] of Object.entries(raw)) {
    const p = `${path}.${key}`;
    if (!isTopKey(key)) {
      issues.push({ path: p, message: `unknown key ${closest(key, Object.keys(topKeys))}` });
      continue;
    }
    const field = topKeys[key];
    switch (field) {
      case 'stateDir':
        stateDir = text(p, value) ?? stateDir;
        break;
      case 'logDir':
        logDir = text(p, value) ?? logDir;
        break;
      case 'tailLines':
        tailLines = count(p, value, 1) ?? tailLines;
        break;
      case 'restart':
        if (!isRecord(value)) {
          issues.push({ path: p, message: `${JSON.stringify(value)} is not a mapping; write max_restarts:, window_ms:, backoff_base_ms:, backoff_max_ms:` });
          break;
        }
        for (const [rk, rv] of Object.entries(value)) {
          if (!isRestartKey(rk)) {
            issues.push({ path: `${p}.${rk}`, message: `unknown key ${closest(rk, Object.keys(restartKeys))}` });
            continue;
          }
          const rf = restartKeys[rk];
          restart[rf] = count(`${p}.${rk}`, rv, rf === 'maxRestarts' ? 0 : 1) ?? restart[rf];
        }
        break;
      case 'healthFailures':
        timing.healthFailures = count(p, value, 1) ?? timing.healthFailures;
        break;
      case 'loadTimeoutMs':
      case 'leaderTimeoutMs':
      case 'drainTimeoutMs':
      case 'killAfterMs':
      case 'healthIntervalMs':
        timing[field] = count(p, value, 1) ?? timing[field];
        break;
    }
  }
  if (restart.backoffMaxMs < restart.backoffBaseMs) {
    issues.push({
      path: `${path}.restart.backoff_max_ms`,
      message: `${restart.backoffMaxMs} is below backoff_base_ms ${restart.backoffBaseMs}; raise it to at least that`,
    });
  }
  return Object.freeze({ stateDir, logDir, tailLines, restart: Object.freeze(restart), timing: Object.freeze(timing) });
}
