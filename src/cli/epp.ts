// `llmgw epp --config FILE`: the endpoint picker Envoy asks over ext_proc, until SIGINT or SIGTERM.
// Wiring only: the config parsed once, discovery chosen, startEpp from epp/.
import { readFileSync } from 'node:fs';
import { parse } from 'yaml';
import { fileDiscovery, parseEppConfig, startEpp, watchInferencePool, type EppConfig, type OpenDiscovery } from '../epp/index.js';
import { LlmgwError } from '../errors/index.js';
import { createLogger } from '../log/index.js';

const usage = `usage: llmgw epp --config FILE

Runs llmgw's router as a Gateway API Inference Extension endpoint picker: Envoy asks it over
ext_proc (default port 9002) which endpoint of the pool takes each request. gRPC health on 9003
(services "", liveness, readiness, envoy.service.ext_proc.v3.ExternalProcessor), Prometheus
metrics on 9090 (/metrics). FILE names the discovery (discovery: { file: endpoints.yaml } in
llm-d-router's file-discovery format, or discovery: { kubernetes: { pool: NAME } }), the pool
(pool: { models: [NAME], kv_events: 5557 }), listen: ports and gateway: router/admission settings.
Readiness (and the ext_proc service's health) is NOT_SERVING until discovery's first full list.
See docs/config.md (epp.yaml) and docs/kubernetes.md.
`;

// Kubernetes: the pool named in the config, in its namespace, through the kubeconfig given or the
// client's default order (KUBECONFIG, ~/.kube/config, the pod's service account).
function discoveryOf(c: EppConfig): OpenDiscovery {
  const d = c.discovery;
  if (d.kind === 'file') return fileDiscovery(d);
  return ({ log, onSkip }) =>
    watchInferencePool({
      pool: d.pool,
      namespace: d.namespace,
      kubeconfig: d.kubeconfig,
      onSkip: (s) => {
        log.info({ pod: s.pod, reason: s.reason }, 'epp.pod_skipped');
        onSkip(s.reason);
      },
      onProblem: (message) => log.warn({ pool: d.pool, namespace: d.namespace, why: message }, 'epp.discovery_problem'),
    });
}

/** Runs `epp` until a signal; returns the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  if (argv.includes('--help') || argv.includes('-h')) {
    process.stdout.write(usage);
    return 0;
  }
  const at = argv.indexOf('--config');
  const file = at >= 0 ? argv[at + 1] : undefined;
  if (file === undefined || argv.length !== 2) {
    process.stderr.write(`llmgw epp: give --config FILE\n${usage}`);
    return 2;
  }
  const log = createLogger();
  let epp;
  try {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (e) {
      throw new LlmgwError('LLMGW_CONFIG_READ', `cannot read ${file} (${e instanceof Error && 'code' in e ? String(e.code) : String(e)}); give the EPP's config file`, { cause: e });
    }
    const config = parseEppConfig(parse(text), file);
    epp = await startEpp(config, discoveryOf(config), { log });
  } catch (e) {
    if (e instanceof LlmgwError) {
      process.stderr.write(`llmgw epp: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
  log.info({ extProcPort: epp.extProcPort, healthPort: epp.healthPort, metricsPort: epp.metricsPort }, 'epp.ready');
  const sig = await new Promise<string>((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
  log.info({ signal: sig }, 'epp.stopping');
  await epp.close();
  return 0;
}
