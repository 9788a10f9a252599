// The config file: YAML parsed once into frozen, typed sections. Each top-level key has its parser in
// the subsystem that owns it, named in the one table below; adding a section is adding a line there.
// Every problem in every section is reported at once, then the catalog is checked against the engines
// and the node's devices.
import { parseDocument } from 'yaml';
import { installedEngines, parseAgentSection } from '../actors/index.js';
import { parseModels, parseReplicas, validateCatalog } from '../catalog/index.js';
import { deepFreeze, readMap, type Issues, type SectionParser } from '../config/index.js';
import { Registry, parseEnginesConfig, parseKvEventsConfig } from '../engines/index.js';
import { ConfigError } from '../errors/index.js';
import { parseGatewaySection } from '../gateway/index.js';
import { parseClusterSection } from '../link/index.js';
import { devicesOfClass, parseNodeConfig } from '../placement/index.js';
import { parseStoreSection } from '../store/index.js';

interface Section<T> {
  /** The top-level YAML key. */
  readonly key: string;
  readonly parse: SectionParser<T>;
}

/** The sections of the config, by the name they have in `Config`. */
export const sections = {
  engines: { key: 'engines', parse: parseEnginesConfig },
  kvEvents: { key: 'kv_events', parse: parseKvEventsConfig },
  models: { key: 'models', parse: parseModels },
  node: { key: 'node', parse: parseNodeConfig },
  replicas: { key: 'replicas', parse: parseReplicas },
  gateway: { key: 'gateway', parse: parseGatewaySection },
  agent: { key: 'agent', parse: parseAgentSection },
  cluster: { key: 'cluster', parse: parseClusterSection },
  store: { key: 'store', parse: parseStoreSection },
} as const satisfies Record<string, Section<unknown>>;

type Sections = typeof sections;

/** The whole parsed configuration: one frozen value per section of the table. */
export type Config = { readonly [K in keyof Sections]: ReturnType<Sections[K]['parse']> };

/** The engine registry a config describes, pointed at the builds `llmgw engines install` put in its
 * state directory: a build the agent saw run wins over a configured or PATH binary. */
export function registryOf(config: Pick<Config, 'engines' | 'kvEvents' | 'agent'>): Registry {
  const registry = new Registry(config.engines, config.kvEvents);
  for (const i of installedEngines(config.agent.stateDir)) registry.useInstalled(i.engine, i.bin);
  return registry;
}

/** Parses and validates a config file's text; `source` names it in messages. Throws a ConfigError
 * with every problem found. An empty file is every default. */
export function loadConfig(text: string, source: string): Config {
  const doc = parseDocument(text, { prettyErrors: true, uniqueKeys: true });
  if (doc.errors.length > 0) {
    throw new ConfigError(
      source,
      doc.errors.map((e) => {
        const at = e.linePos?.[0];
        // The yaml package ends its first line with " at line L, column C:" (the excerpt followed); the
        // path already says where.
        const first = (e.message.split('\n')[0] ?? e.message).replace(/ at line \d+, column \d+:?$/, '');
        return { path: at === undefined ? 'line ?' : `line ${at.line}, column ${at.col}`, message: first };
      }),
    );
  }
  const raw: unknown = doc.toJS();
  const issues: Issues = [];
  const top = readMap(raw, '', issues, Object.values(sections).map((s) => s.key));
  const parsed: Record<string, unknown> = {};
  for (const [name, section] of Object.entries(sections)) {
    parsed[name] = section.parse(top?.raw[section.key], section.key, issues);
  }
  // Built from the table itself, so each entry's parser result lands under its own name.
  const config = parsed as Config;
  validateCatalog(config, new Registry(config.engines, config.kvEvents), (cls) => devicesOfClass(config.node, cls), issues);
  // A gateway (it lists the nodes) of several: the placer lease, keys and budgets live in the shared store.
  if (config.cluster.gateways.length > 1 && config.cluster.nodes.length > 0 && config.store.url === '') {
    issues.push({ path: 'store.url', message: `is empty, but cluster.gateways lists ${config.cluster.gateways.length} gateways: they share the placer lease, keys and budgets in one PostgreSQL; write store.url: postgres://…` });
  }
  if (issues.length > 0) throw new ConfigError(source, issues);
  return deepFreeze(config);
}
