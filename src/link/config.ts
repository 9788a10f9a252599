// The `cluster:` section: where the agent link is (the gateway binds it, agents connect to it), this
// process's key file, the gateway's public key (agents), and the nodes allowed to join (gateway),
// in the order placement fills them, each with how many cpu replicas it takes. Without `link` there
// is no cluster: serve runs its one node. `gateways` lists every gateway of a cluster with several:
// an agent joins each, and the gateways take turns placing under a lease in the shared store.
import { deepFreeze, readMap, type Issues } from '../config/index.js';
import { z85Decode } from './keys.js';

/** A node allowed to join, as listed under cluster.nodes. */
export interface ClusterNode {
  readonly name: string;
  /** Z85 public key of its agent; absent only for the gateway's own node (its in-process agent). */
  readonly publicKey: string | undefined;
  /** `cpu_replicas`: the most gpu_class: cpu replicas placed here; undefined: as many as the node has cores. */
  readonly cpuReplicas: number | undefined;
}

/** The parsed `cluster:` section. */
export interface ClusterConfig {
  /** tcp://ADDR:PORT; empty: no link, one node. */
  readonly link: string;
  /**
   * Every gateway's link (tcp://ADDR:PORT), for a cluster with several: an agent joins each (instead
   * of `link`), and a gateway with two or more here places only while it holds the placer lease.
   */
  readonly gateways: readonly string[];
  /** How long the placer lease lasts unless renewed (it is renewed every quarter of it). */
  readonly leaseTtlMs: number;
  readonly keyFile: string;
  /** The gateway's public key (Z85), which agents check the gateway by. */
  readonly gatewayKey: string;
  readonly nodes: readonly ClusterNode[];
  readonly heartbeatMs: number;
  readonly silentAfterMs: number;
  /** The largest link message either side accepts, handshake frames included. */
  readonly maxMessageBytes: number;
}

/** The defaults: no cluster. */
// 16 MiB: the largest message is a replica's full copy of its blocks, 8 bytes a block, so this is
// two million blocks. ZeroMQ allocates a frame's announced size before it has the bytes, and before
// the peer is authenticated: this is also what one connection can make the gateway hold.
export const defaultClusterConfig: ClusterConfig = deepFreeze({
  link: '',
  gateways: [],
  leaseTtlMs: 4_000,
  keyFile: '',
  gatewayKey: '',
  nodes: [],
  heartbeatMs: 500,
  silentAfterMs: 3_000,
  maxMessageBytes: 16 * 1024 * 1024,
});

const isLink = (v: string): boolean => /^tcp:\/\/[^:]+:(\d+|\*)$/.test(v);

const keyProblem = 'is not a CURVE public key (40 Z85 characters, the "public" line of a file llmgw keys wrote)';

/** Parses the `cluster:` section, recording every problem in `issues`. */
export function parseClusterSection(raw: unknown, path: string, issues: Issues): ClusterConfig {
  const d = defaultClusterConfig;
  const m = readMap(raw, path, issues, ['link', 'gateways', 'lease_ttl_ms', 'key_file', 'gateway_key', 'nodes', 'heartbeat_ms', 'silent_after_ms', 'max_message_bytes']);
  if (m === undefined) return d;
  const link = m.string('link', d.link);
  if (link !== '' && !isLink(link)) m.problem('link', `${JSON.stringify(link)} is not tcp://ADDRESS:PORT; write e.g. link: tcp://10.0.0.1:5555`);
  const gateways = m.strings('gateways');
  gateways.forEach((g, i) => {
    if (!isLink(g) || g.endsWith(':*')) m.problem(`gateways[${i}]`, `${JSON.stringify(g)} is not tcp://ADDRESS:PORT; write each gateway's link as its agents reach it, e.g. tcp://10.0.0.1:5555`);
    if (gateways.indexOf(g) !== i) m.problem(`gateways[${i}]`, `${JSON.stringify(g)} is listed twice; list each gateway once`);
  });
  const leaseTtlMs = m.int('lease_ttl_ms', d.leaseTtlMs, 500, 60_000);
  const gatewayKey = m.string('gateway_key', d.gatewayKey);
  if (gatewayKey !== '' && z85Decode(gatewayKey) === undefined) m.problem('gateway_key', keyProblem);
  const seen = new Set<string>();
  const nodes = m.list('nodes', (r, at) => {
    const n = readMap(r, at, issues, ['name', 'public_key', 'cpu_replicas']);
    if (n === undefined) return undefined;
    const name = n.text('name', '');
    if (name === '') n.problem('name', 'is missing; write the node.name its agent runs with');
    if (seen.has(name)) n.problem('name', `${JSON.stringify(name)} is listed twice; list each node once`);
    seen.add(name);
    const key = n.string('public_key', '');
    if (key !== '' && z85Decode(key) === undefined) n.problem('public_key', keyProblem);
    // 0 is a node that takes no cpu replica (a GPU node whose cores feed its GPUs).
    const cpuReplicas = n.has('cpu_replicas') ? n.int('cpu_replicas', 1, 0) : undefined;
    return { name, publicKey: key === '' ? undefined : key, cpuReplicas };
  });
  const keyFile = m.string('key_file', d.keyFile);
  const heartbeatMs = m.int('heartbeat_ms', d.heartbeatMs, 10);
  const silentAfterMs = m.int('silent_after_ms', d.silentAfterMs, 1);
  const maxMessageBytes = m.int('max_message_bytes', d.maxMessageBytes, 64 * 1024, 1024 * 1024 * 1024);
  if (silentAfterMs <= heartbeatMs) m.problem('silent_after_ms', `${silentAfterMs} is not above heartbeat_ms (${heartbeatMs}); a node would count as silent between two heartbeats`);
  if ((link !== '' || gateways.length > 0) && keyFile === '') m.problem('key_file', 'is missing; the link needs this process\'s keypair: make one with llmgw keys --out FILE');
  // With several gateways every one must see every engine: an agent in one gateway's process would
  // report to that gateway only.
  if (gateways.length > 1) {
    for (const n of nodes) {
      if (n.publicKey === undefined) {
        m.problem('nodes', `${JSON.stringify(n.name)} has no public_key, but with ${gateways.length} gateways every node joins each over the link; run llmgw agent on it and list its key`);
      }
    }
  }
  return deepFreeze({ link, gateways, leaseTtlMs, keyFile, gatewayKey, nodes, heartbeatMs, silentAfterMs, maxMessageBytes });
}
