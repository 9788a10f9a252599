// The EPP's YAML (`llmgw epp --config FILE`), read once into a frozen EppConfig: where the pool's
// endpoints come from, what the pool serves and publishes, the three ports, and the gateway section
// whose router and admission settings the EPP routes by (the same parser serve uses).
import { ConfigError } from '../errors/index.js';
import { deepFreeze, readMap, type Issues, type MapReader } from '../config/index.js';
import { gatewayDefaults, parseGatewaySection, type GatewayConfig } from '../gateway/index.js';

/** Endpoints from a file in llm-d-router's file-discovery format, re-read every pollMs. */
export interface FileDiscoveryConfig {
  readonly kind: 'file';
  readonly path: string;
  readonly pollMs: number;
}

/** Endpoints of an InferencePool watched through the Kubernetes API. */
export interface KubernetesDiscoveryConfig {
  readonly kind: 'kubernetes';
  readonly pool: string;
  readonly namespace: string;
  /** A kubeconfig file; '' for the in-cluster service account (or the default kubeconfig). */
  readonly kubeconfig: string;
}

/** What every endpoint of the pool serves and publishes. */
export interface PoolConfig {
  /** The served model names the pool answers for; anything else is a 404. */
  readonly models: readonly string[];
  /**
   * Each endpoint's KV-event publisher, as a template over {address}, {port}, {name} and
   * {labels.KEY}; '' when the pool publishes none (routing then has no precise tier).
   */
  readonly kvEvents: string;
  /** Each endpoint's replay ROUTER, the same kind of template; '' for none (a gap resets instead). */
  readonly replay: string;
  readonly topic: string;
  readonly hashSeed: string;
  readonly blockSizeTokens: number;
  readonly capacityBlocks: number;
  /** The pool's tokenizer for routing without /tokenize ('qwen3', 'bytes', a model directory); '' for /tokenize only. */
  readonly tokenizer: string;
  readonly healthIntervalMs: number;
}

/** Where the EPP listens. */
export interface ListenConfig {
  readonly host: string;
  readonly extProcPort: number;
  readonly healthPort: number;
  readonly metricsPort: number;
}

/** The whole EPP config. */
export interface EppConfig {
  readonly discovery: FileDiscoveryConfig | KubernetesDiscoveryConfig;
  readonly pool: PoolConfig;
  readonly listen: ListenConfig;
  /** Body bounds, router and admission settings; its host and port are serve's and unused here. */
  readonly gateway: GatewayConfig;
}

// llm-d's defaults: 9002 ext_proc, 9003 gRPC health, 9090 metrics. The EPP answers a gateway on
// another pod, so it listens on every address unless told otherwise.
const listenDefaults: ListenConfig = { host: '0.0.0.0', extProcPort: 9002, healthPort: 9003, metricsPort: 9090 };

const templateKeys = /\{([^}]*)\}/g;

// Kubernetes' names: an object's (DNS-1123 subdomain) and a namespace's (DNS-1123 label).
const dnsSubdomain = /^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const dnsLabel = /^(?=.{1,63}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

// A template names only what an endpoint has: a typo would connect every endpoint to nothing.
function checkTemplate(m: MapReader, key: string, v: string): void {
  for (const [, k] of v.matchAll(templateKeys)) {
    if (k === 'address' || k === 'port' || k === 'name' || /^labels\.[^.]+$/.test(k ?? '')) continue;
    m.problem(key, `${JSON.stringify(v)} names {${k}}; a template may name {address}, {port}, {name} and {labels.KEY}`);
  }
}

function parseDiscovery(m: MapReader | undefined, issues: Issues): EppConfig['discovery'] {
  const fallback: FileDiscoveryConfig = { kind: 'file', path: '', pollMs: 1000 };
  if (m === undefined) return fallback;
  const file = m.has('file');
  const kube = m.has('kubernetes');
  if (file === kube) {
    issues.push({ path: 'discovery', message: 'give exactly one of file: PATH (llm-d file-discovery format) or kubernetes: { pool: NAME }' });
    return fallback;
  }
  if (kube) {
    if (m.has('poll_ms')) m.problem('poll_ms', 'applies to discovery.file only; the Kubernetes API tells the EPP of each change, so leave it out');
    const k = m.map('kubernetes', ['pool', 'namespace', 'kubeconfig']);
    if (k === undefined) return { kind: 'kubernetes', pool: '', namespace: 'default', kubeconfig: '' };
    if (!k.has('pool')) k.problem('pool', "is required: the InferencePool's name");
    const pool = k.text('pool', '');
    const namespace = k.text('namespace', 'default');
    // Checked here, not by the API server: a name it cannot hold would list nothing, and the EPP would
    // wait unready for a pool that can never exist.
    if (pool !== '' && !dnsSubdomain.test(pool)) k.problem('pool', `${JSON.stringify(pool)} is not a Kubernetes object name (lower-case letters, digits, '-' and '.', at most 253); write the InferencePool's metadata.name`);
    if (!dnsLabel.test(namespace)) k.problem('namespace', `${JSON.stringify(namespace)} is not a namespace name (lower-case letters, digits and '-', at most 63); write the InferencePool's namespace`);
    return { kind: 'kubernetes', pool, namespace, kubeconfig: k.string('kubeconfig', '') };
  }
  return { kind: 'file', path: m.text('file', ''), pollMs: m.int('poll_ms', 1000, 50) };
}

function parsePool(m: MapReader | undefined): PoolConfig {
  const models = m?.strings('models') ?? [];
  if (m !== undefined && models.length === 0) m.problem('models', 'is required: the served model names the pool answers for, e.g. models: [qwen3-8b]');
  const port = m?.raw.kv_events;
  // A bare port number is the common case (every pod publishes on the same port, as vLLM's
  // --kv-events-config endpoint tcp://*:5557 does).
  const kvEvents = typeof port === 'number' && Number.isInteger(port) ? `tcp://{address}:${port}` : (m?.string('kv_events', '') ?? '');
  const replayPort = m?.raw.replay;
  const replay = typeof replayPort === 'number' && Number.isInteger(replayPort) ? `tcp://{address}:${replayPort}` : (m?.string('replay', '') ?? '');
  if (m !== undefined) {
    checkTemplate(m, 'kv_events', kvEvents);
    checkTemplate(m, 'replay', replay);
  }
  return {
    models,
    kvEvents,
    replay,
    topic: m?.string('topic', '') ?? '',
    hashSeed: m?.string('hash_seed', '0') ?? '0',
    blockSizeTokens: m?.int('block_size', 16, 1) ?? 16,
    capacityBlocks: m?.int('capacity_blocks', 65_536, 1) ?? 65_536,
    tokenizer: m?.string('tokenizer', '') ?? '',
    healthIntervalMs: m?.int('health_interval_ms', 1000, 50) ?? 1000,
  };
}

function parseListen(m: MapReader | undefined): ListenConfig {
  const d = listenDefaults;
  if (m === undefined) return d;
  return {
    host: m.text('host', d.host),
    extProcPort: m.int('ext_proc_port', d.extProcPort, 0, 65_535),
    healthPort: m.int('health_port', d.healthPort, 0, 65_535),
    metricsPort: m.int('metrics_port', d.metricsPort, 0, 65_535),
  };
}

/** Reads the EPP's YAML (already parsed to a value); throws ConfigError with every problem at once. */
export function parseEppConfig(raw: unknown, source = 'epp.yaml'): EppConfig {
  const issues: Issues = [];
  const top = readMap(raw, '', issues, ['discovery', 'pool', 'listen', 'gateway']);
  if (top !== undefined && !top.has('discovery')) issues.push({ path: 'discovery', message: 'is required: discovery: { file: endpoints.yaml } or discovery: { kubernetes: { pool: NAME } }' });
  if (top !== undefined && !top.has('pool')) issues.push({ path: 'pool', message: 'is required: pool: { models: [NAME], kv_events: 5557 }' });
  const discovery = parseDiscovery(top?.has('discovery') === true ? top.map('discovery', ['file', 'poll_ms', 'kubernetes']) : undefined, issues);
  const pool = parsePool(top?.map('pool', ['models', 'kv_events', 'replay', 'topic', 'hash_seed', 'block_size', 'capacity_blocks', 'tokenizer', 'health_interval_ms']));
  const listen = parseListen(top?.map('listen', ['host', 'ext_proc_port', 'health_port', 'metrics_port']));
  const gateway = top?.has('gateway') === true ? parseGatewaySection(top.raw.gateway, 'gateway', issues) : gatewayDefaults;
  if (issues.length > 0) throw new ConfigError(source, issues);
  return deepFreeze({ discovery, pool, listen, gateway });
}

/** An endpoint's address filled into a pool template ({address}, {port}, {name}, {labels.KEY}). */
export function filledTemplate(template: string, e: { readonly name: string; readonly address: string; readonly port: number; readonly labels: Readonly<Record<string, string>> }): string {
  return template.replace(templateKeys, (_, k: string) => {
    if (k === 'address') return e.address;
    if (k === 'port') return String(e.port);
    if (k === 'name') return e.name;
    return e.labels[k.slice('labels.'.length)] ?? '';
  });
}
