// The link's metrics, read from the control plane's counters at scrape time.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { ControlPlane } from './control-plane.js';

/** Registers llmgw_link_* on `registry`. */
export function linkMetrics(registry: Registry, plane: ControlPlane): void {
  const seen = new Map<string, number>();
  new Counter({
    name: 'llmgw_link_refused_total',
    help: 'Peers, nodes and reports the link refused: malformed, wrong-mechanism, wrong-server-key, unlisted-key, handshake (in the handshake); decode, unknown-node, bad-proof, bad-inventory, not-placed (a replica the node does not run)',
    labelNames: ['reason'],
    registers: [registry],
    collect() {
      for (const [reason, n] of plane.stats.refused) {
        this.inc({ reason }, n - (seen.get(reason) ?? 0));
        seen.set(reason, n);
      }
    },
  });
  new Gauge({
    name: 'llmgw_link_nodes',
    help: 'Nodes by state: up, silent (joined once, not heard from), waiting (never joined)',
    labelNames: ['state'],
    registers: [registry],
    collect() {
      const by = { up: 0, silent: 0, waiting: 0 };
      for (const n of plane.nodes()) by[n.state]++;
      for (const [state, n] of Object.entries(by)) this.set({ state }, n);
    },
  });
  let gaps = 0;
  let silences = 0;
  new Counter({
    name: 'llmgw_link_resyncs_total',
    help: 'Node sessions started over: gap (messages lost), silent (heartbeats missed)',
    labelNames: ['why'],
    registers: [registry],
    collect() {
      this.inc({ why: 'gap' }, plane.stats.gaps - gaps);
      this.inc({ why: 'silent' }, plane.stats.silences - silences);
      gaps = plane.stats.gaps;
      silences = plane.stats.silences;
    },
  });
}
