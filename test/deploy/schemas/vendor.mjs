// Rebuilds the schemas in this folder from their sources (README.md names the commits):
//   node test/deploy/schemas/vendor.mjs SWAGGER_JSON INFERENCEPOOL_CRD_YAML HTTPROUTE_CRD_YAML
// Kept so the pruning is reviewable and repeatable, not a hand edit of a 400 kB file.
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';

const [swaggerPath, poolCrdPath, routeCrdPath] = process.argv.slice(2);
if (routeCrdPath === undefined) {
  console.error('usage: node vendor.mjs SWAGGER_JSON INFERENCEPOOL_CRD_YAML HTTPROUTE_CRD_YAML');
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));

// Descriptions are most of the bytes and none of the rules.
function withoutDescriptions(node) {
  if (Array.isArray(node)) return node.map(withoutDescriptions);
  if (node === null || typeof node !== 'object') return node;
  const out = {};
  for (const [k, v] of Object.entries(node)) {
    if (k === 'description') continue;
    // A field may itself be named description: under properties, names are kept and only their schemas pruned.
    out[k] = k === 'properties' ? Object.fromEntries(Object.entries(v).map(([p, s]) => [p, withoutDescriptions(s)])) : withoutDescriptions(v);
  }
  return out;
}

// The kinds deploy/kubernetes/ uses from the core API, and every definition they reach.
const coreRoots = {
  'apps/v1 Deployment': 'io.k8s.api.apps.v1.Deployment',
  'v1 Service': 'io.k8s.api.core.v1.Service',
  'v1 ConfigMap': 'io.k8s.api.core.v1.ConfigMap',
  'v1 ServiceAccount': 'io.k8s.api.core.v1.ServiceAccount',
  'rbac.authorization.k8s.io/v1 Role': 'io.k8s.api.rbac.v1.Role',
  'rbac.authorization.k8s.io/v1 RoleBinding': 'io.k8s.api.rbac.v1.RoleBinding',
};
const swagger = JSON.parse(readFileSync(swaggerPath, 'utf8'));
const definitions = {};
const pending = Object.values(coreRoots);
while (pending.length > 0) {
  const name = pending.pop();
  if (name in definitions) continue;
  const def = swagger.definitions[name];
  if (def === undefined) throw new Error(`${swaggerPath}: no definition ${name}`);
  definitions[name] = withoutDescriptions(def);
  for (const [, ref] of JSON.stringify(def).matchAll(/"\$ref":"#\/definitions\/([^"]+)"/g)) pending.push(ref);
}
// The swagger types both as strings; YAML writes them as numbers too (port: 8000, nvidia.com/gpu: 1),
// and the API server takes either.
definitions['io.k8s.apimachinery.pkg.util.intstr.IntOrString'] = { anyOf: [{ type: 'integer' }, { type: 'string' }] };
definitions['io.k8s.apimachinery.pkg.api.resource.Quantity'] = { anyOf: [{ type: 'number' }, { type: 'string' }] };
const sorted = Object.fromEntries(Object.keys(definitions).sort().map((k) => [k, definitions[k]]));
writeFileSync(join(here, 'kubernetes-1.36.json'), `${JSON.stringify({ kinds: coreRoots, definitions: sorted }, null, 1)}\n`);

function crdSchema(path, version) {
  const crd = parse(readFileSync(path, 'utf8'));
  const v = crd.spec.versions.find((x) => x.name === version);
  if (v === undefined) throw new Error(`${path}: no version ${version}`);
  return { group: crd.spec.group, kind: crd.spec.names.kind, version, schema: withoutDescriptions(v.schema.openAPIV3Schema) };
}
writeFileSync(join(here, 'inferencepool-v1.json'), `${JSON.stringify(crdSchema(poolCrdPath, 'v1'), null, 1)}\n`);
writeFileSync(join(here, 'httproute-v1.json'), `${JSON.stringify(crdSchema(routeCrdPath, 'v1'), null, 1)}\n`);
