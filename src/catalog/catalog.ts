// The catalog: which models exist, the profiles each runs under (engine, GPU class, parallelism), and
// how many replicas of which profile to run. Parsed from `models:` and `replicas:`, then checked
// against the engines and the node's devices, every problem reported with its path.
import { deepFreeze, nearest, readList, readMap, type Issues, type MapReader } from '../config/index.js';
import type { Adapter, Engine, GpuInfo, Profile } from '../engines/index.js';
import { LlmgwError, type ConfigIssue } from '../errors/index.js';
import { migProfileIssues } from '../discovery/index.js';
import { ProfileError, disaggRoles, isModelTask, isPooling, modelTasks, poolings, publishesKvEvents, sglangBootstrapPortDefault, unsafeEnv } from '../engines/index.js';
import type { DisaggRole } from '../engines/index.js';
import { disaggIssues } from './disagg-checks.js';

/** A model and the profiles it can run under. */
export interface Model {
  readonly name: string;
  /** The name clients ask for; the model's key when not given. */
  readonly servedModelName: string;
  readonly profiles: readonly Profile[];
}

/** An engine llmgw did not start: where it serves, and where its KV events can be read. */
export interface ExternalEndpoint {
  /** The replica's id in routing, metrics and headers. */
  readonly name: string;
  /** Base URL of its OpenAI server, e.g. http://10.0.0.7:8000/. */
  readonly url: string;
  /** The key it demands (VLLM_API_KEY), or '' for none. */
  readonly apiKey: string;
  /** vLLM's bound KV-event PUB endpoint (tcp://host:port), or '' when it publishes none. */
  readonly kvEvents: string;
  /** Its replay ROUTER endpoint, or '' (gaps then reset instead of being replayed). */
  readonly replay: string;
  /** The topic it publishes under (vLLM's default is empty). */
  readonly topic: string;
  /** PYTHONHASHSEED it runs with; without the same seed its block hashes never match ours. */
  readonly hashSeed: string;
  readonly blockSizeTokens: number;
  /** Blocks its cache holds, bounding the gateway's mirror of it. */
  readonly capacityBlocks: number;
  /** A PEM file of the CA that signed its https certificate, trusted for it alone instead of the system's; '' for none. */
  readonly caFile: string;
}

/** How many replicas of one model's profile to run, or one replica llmgw did not start (`endpoint`). */
export interface ReplicaSet {
  readonly model: string;
  readonly profile: string;
  readonly count: number;
  readonly endpoint?: ExternalEndpoint | undefined;
}

/** The models by name, and the replicas wanted of them. */
export interface Catalog {
  readonly models: Readonly<Record<string, Model>>;
  readonly replicas: readonly ReplicaSet[];
}

/** The GPU class that means "no GPU": its profiles run on the CPU. */
export const cpuClass = 'cpu';

const profileKeys = [
  'name',
  'engine',
  'gpu_class',
  'tp',
  'pp',
  'gpus_per_node',
  'nodes',
  'model_path',
  'kv_events',
  'runtime_lora',
  'reasoning_parser',
  'task',
  'pooling',
  'args',
  'env',
  'adapters',
  'role',
  'bootstrap_port',
] as const;

function parseAdapter(raw: unknown, path: string, issues: Issues): Adapter | undefined {
  const m = readMap(raw, path, issues, ['name', 'path']);
  if (m === undefined) return undefined;
  const name = m.string('name', '');
  const p = m.string('path', '');
  if (name === '') m.problem('name', 'is missing; every adapter needs the name requests use for it');
  if (p === '') m.problem('path', 'is missing; write the adapter directory');
  return { name, path: p };
}

function parseProfile(raw: unknown, path: string, issues: Issues, servedModelName: string): Profile | undefined {
  const m = readMap(raw, path, issues, profileKeys);
  if (m === undefined) return undefined;
  const name = m.string('name', '');
  if (name === '') m.problem('name', 'is missing; every profile needs a name replicas refer to it by');
  const engine = m.string('engine', '');
  if (engine === '') m.problem('engine', 'is missing; write one of llamacpp, sglang, sim, trtllm, vllm');
  const gpuClass = m.string('gpu_class', '');
  if (gpuClass === '') m.problem('gpu_class', `is missing; write the node device class it runs on, or ${cpuClass}`);
  const adapters = m.list('adapters', (a, p) => parseAdapter(a, p, issues));
  const role = m.has('role') ? m.string('role', '') : undefined;
  const task = m.has('task') ? m.string('task', '') : undefined;
  if (task !== undefined && !isModelTask(task)) m.problem('task', `${JSON.stringify(task)} is not one of ${modelTasks.join(', ')}; write embed for an embedding model, or drop task`);
  const pooling = m.has('pooling') ? m.string('pooling', '') : undefined;
  if (pooling !== undefined && !isPooling(pooling)) m.problem('pooling', `${JSON.stringify(pooling)} is not one of ${poolings.join(', ')}; write how the embedding model pools, or drop pooling for its own`);
  if (role !== undefined && !isRole(role)) m.problem('role', `${JSON.stringify(role)} is not one of ${disaggRoles.join(', ')}; write the part this profile plays in prefill/decode disaggregation, or drop role`);
  return {
    name,
    engine,
    gpuClass,
    tp: m.int('tp', 1, 1),
    pp: m.int('pp', 1, 1),
    gpusPerNode: m.int('gpus_per_node', 0, 0),
    nodes: m.int('nodes', 1, 1),
    args: m.strings('args'),
    env: m.stringMap('env'),
    modelPath: m.string('model_path', ''),
    servedModelName,
    adapters,
    runtimeLora: m.bool('runtime_lora', false),
    kvEvents: m.bool('kv_events', false),
    ...(role !== undefined && isRole(role) ? { role } : {}),
    ...(m.has('bootstrap_port') ? { bootstrapPort: m.int('bootstrap_port', sglangBootstrapPortDefault, 1) } : {}),
    // Only when written: a profile without one keeps the shape (and fingerprint) it always had.
    ...(m.has('reasoning_parser') ? { reasoningParser: m.string('reasoning_parser', '') } : {}),
    ...(task !== undefined && isModelTask(task) ? { task } : {}),
    ...(pooling !== undefined && isPooling(pooling) ? { pooling } : {}),
  };
}

const isRole = (v: string): v is DisaggRole => (disaggRoles as readonly string[]).includes(v);

/** Parses the `models:` section: a map of model name to its served name and profiles. */
export function parseModels(raw: unknown, path: string, issues: Issues): Readonly<Record<string, Model>> {
  const all = readMap(raw, path, issues, undefined);
  const out: Record<string, Model> = {};
  if (all === undefined) return deepFreeze(out);
  for (const key of Object.keys(all.raw)) {
    const m = all.map(key, ['served_model_name', 'profiles']);
    if (m === undefined) continue;
    const servedModelName = m.text('served_model_name', key);
    const profiles = m.list('profiles', (p, at) => parseProfile(p, at, issues, servedModelName));
    const seen = new Set<string>();
    profiles.forEach((p, i) => {
      if (p.name !== '' && seen.has(p.name)) {
        issues.push({ path: `${m.at('profiles')}[${i}].name`, message: `${JSON.stringify(p.name)} is already a profile of ${key}; give each profile its own name` });
      }
      seen.add(p.name);
    });
    if (profiles.length === 0) m.problem('profiles', `model ${key} has no profiles; add at least one`);
    out[key] = { name: key, servedModelName, profiles };
  }
  return deepFreeze(out);
}

const tcpEndpoint = /^tcp:\/\/[^:/]+:\d+$/;

// An external replica: `{ model, endpoint: { name, url, kv_events, replay, hash_seed, block_size, … } }`.
// Its model is the name it serves under, not a key under models: (llmgw starts nothing for it).
function parseExternal(m: MapReader): ReplicaSet | undefined {
  const model = m.string('model', '');
  if (model === '') m.problem('model', 'is missing; write the model name the endpoint serves');
  if (m.has('profile') || m.has('count')) m.problem('endpoint', 'an endpoint names one running replica; drop profile and count from this entry');
  const e = m.map('endpoint', ['name', 'url', 'api_key', 'kv_events', 'replay', 'topic', 'hash_seed', 'block_size', 'capacity_blocks', 'ca_file']);
  if (e === undefined) return undefined;
  const name = e.text('name', '');
  if (name === '') e.problem('name', 'is missing; give the replica the id routing and metrics show');
  const url = e.string('url', '');
  if (!/^https?:\/\/[^/]+\/?$/.test(url)) e.problem('url', `${JSON.stringify(url)} is not http://HOST:PORT/ (the OpenAI server's base, without /v1)`);
  const kvEvents = e.string('kv_events', '');
  if (kvEvents !== '' && !tcpEndpoint.test(kvEvents)) e.problem('kv_events', `${JSON.stringify(kvEvents)} is not tcp://HOST:PORT (the endpoint vLLM's publisher binds, with its host)`);
  const replay = e.string('replay', '');
  if (replay !== '' && !tcpEndpoint.test(replay)) e.problem('replay', `${JSON.stringify(replay)} is not tcp://HOST:PORT`);
  if (replay !== '' && kvEvents !== '' && replay.replace(/:\d+$/, '') !== kvEvents.replace(/:\d+$/, '')) e.problem('replay', 'is on another host than kv_events; both are the same engine\'s');
  const caFile = e.string('ca_file', '');
  if (caFile !== '' && !url.startsWith('https://')) e.problem('ca_file', `is for an https:// url, and this one is ${JSON.stringify(url)}; drop ca_file or use https`);
  const hashSeed = e.string('hash_seed', '');
  if (kvEvents !== '' && hashSeed === '') e.problem('hash_seed', 'is missing; with kv_events the gateway hashes prompts as the engine does, so write the PYTHONHASHSEED it runs with');
  const endpoint: ExternalEndpoint = {
    name,
    url: url.endsWith('/') ? url : `${url}/`,
    apiKey: e.string('api_key', ''),
    kvEvents,
    replay,
    topic: e.string('topic', ''),
    hashSeed,
    blockSizeTokens: e.int('block_size', 16, 1),
    capacityBlocks: e.int('capacity_blocks', 262_144, 1),
    caFile,
  };
  return { model, profile: '', count: 1, endpoint };
}

/** Parses the `replicas:` section: a list of { model, profile, count }, or { model, endpoint } for a replica llmgw did not start. */
export function parseReplicas(raw: unknown, path: string, issues: Issues): readonly ReplicaSet[] {
  // Replica ids are model-profile-n, so a second line for the same pair would start its shards under
  // the ids of the first's.
  const listedAt = new Map<string, string>();
  const list = readList(raw, path, issues, (r, at) => {
    const m = readMap(r, at, issues, ['model', 'profile', 'count', 'endpoint']);
    if (m === undefined) return undefined;
    if (m.has('endpoint')) return parseExternal(m);
    const model = m.string('model', '');
    const profile = m.string('profile', '');
    if (model === '') m.problem('model', 'is missing; write the name of a model under models:');
    if (profile === '') m.problem('profile', "is missing; write the name of one of the model's profiles");
    const first = listedAt.get(`${model}/${profile}`);
    if (first !== undefined) issues.push({ path: at, message: `${model}/${profile} is already listed at ${first}; drop this entry and raise count there instead` });
    else if (model !== '' && profile !== '') listedAt.set(`${model}/${profile}`, at);
    return { model, profile, count: m.int('count', 1, 0) };
  });
  return deepFreeze([...list]);
}

/** What catalog validation needs to know about engines: find one by name (refusing unknown and
 * disabled ones with the reason). */
export interface EngineLookup {
  get(name: string): Engine;
}

/** Checks every profile against its engine and the node's devices of its GPU class, every replica
 * against the models, and reports refused env keys; adds each problem to `issues` with its path. */
export function validateCatalog(
  catalog: Catalog,
  engines: EngineLookup,
  devicesOfClass: (gpuClass: string) => readonly GpuInfo[],
  issues: Issues,
): void {
  for (const [key, model] of Object.entries(catalog.models)) {
    model.profiles.forEach((p, i) => {
      const at = `models.${key}.profiles[${i}]`;
      for (const k of Object.keys(p.env)) {
        const v = unsafeEnv(k);
        if (v.refused) issues.push({ path: `${at}.env.${k}`, message: `refused: ${v.why}` });
      }
      for (const m of migProfileIssues(p)) issues.push({ path: `${at}.${m.key}`, message: m.message });
      if (p.engine === '') return;
      let engine: Engine;
      try {
        engine = engines.get(p.engine);
      } catch (e) {
        if (!(e instanceof LlmgwError)) throw e;
        issues.push({ path: `${at}.engine`, message: e.message });
        return;
      }
      if (p.kvEvents && !publishesKvEvents(engine)) {
        issues.push({
          path: `${at}.kv_events`,
          message: `true, but profile ${JSON.stringify(p.name)} runs ${p.engine}, which publishes no KV events llmgw reads; write kv_events: false, or use vllm or sim`,
        });
      }
      issues.push(...engineRefusals(engine, p, devicesOfClass(p.gpuClass), at));
    });
  }
  const names = new Map<string, string>();
  catalog.replicas.forEach((r, i) => {
    const at = `replicas[${i}]`;
    if (r.endpoint !== undefined) {
      // An external replica serves its own model name; only its id must be unique.
      const first = names.get(r.endpoint.name);
      if (first !== undefined) issues.push({ path: `${at}.endpoint.name`, message: `${JSON.stringify(r.endpoint.name)} is already the name of ${first}; give each endpoint its own name` });
      names.set(r.endpoint.name, at);
      return;
    }
    if (r.model === '') return;
    const model = catalog.models[r.model];
    if (model === undefined) {
      const near = nearest(r.model, Object.keys(catalog.models));
      issues.push({ path: `${at}.model`, message: `${JSON.stringify(r.model)} is not a model under models:${near !== undefined ? ` (did you mean ${JSON.stringify(near)}?)` : ''}` });
      return;
    }
    if (r.profile !== '' && !model.profiles.some((p) => p.name === r.profile)) {
      const names = model.profiles.map((p) => p.name);
      const near = nearest(r.profile, names);
      issues.push({
        path: `${at}.profile`,
        message: `${JSON.stringify(r.profile)} is not a profile of ${r.model} (have ${names.join(', ')})${near !== undefined ? `; did you mean ${JSON.stringify(near)}?` : ''}`,
      });
    }
  });
  issues.push(...disaggIssues(catalog));
}

function engineRefusals(engine: Engine, p: Profile, gpus: readonly GpuInfo[], at: string): ConfigIssue[] {
  try {
    engine.validate(p, gpus);
    return [];
  } catch (e) {
    if (e instanceof ProfileError) return [{ path: `${at}.${e.field}`, message: e.message }];
    if (e instanceof LlmgwError) return [{ path: at, message: e.message }];
    throw e;
  }
}

/** The profile a replica set runs, or undefined when the catalog has no such model or profile. */
export function profileOf(catalog: Catalog, r: ReplicaSet): Profile | undefined {
  return catalog.models[r.model]?.profiles.find((p) => p.name === r.profile);
}
