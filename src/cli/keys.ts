// `llmgw keys`: makes a CURVE keypair for the agent link. The gateway and every agent each have
// one; the public line goes into the other side's config (cluster.nodes[].public_key on the gateway,
// cluster.gateway_key on each agent).
import { LlmgwError } from '../errors/index.js';
import { makeKeyPair, writeKeyFile } from '../link/index.js';

const usage = `usage: llmgw keys --out FILE

Writes a new CURVE keypair to FILE (mode 600; an existing file is never overwritten) and prints its
public key, which the other end of the agent link lists in its config.
`;

/** Runs `keys`; 0 written, 1 the file could not be written, 2 bad usage. */
export function main(argv: readonly string[]): Promise<number> {
  const [flag, file, ...rest] = argv;
  if (flag === '--help' || flag === '-h') {
    process.stdout.write(usage);
    return Promise.resolve(0);
  }
  const out = flag?.startsWith('--out=') === true ? flag.slice('--out='.length) : flag === '--out' ? file : undefined;
  if (out === undefined || out === '' || out.startsWith('--') || rest.length > (flag === '--out' ? 0 : 1) || (flag !== '--out' && file !== undefined)) {
    process.stderr.write(`llmgw keys: --out FILE is required, and nothing else\n${usage}`);
    return Promise.resolve(2);
  }
  const k = makeKeyPair();
  try {
    writeKeyFile(out, k);
  } catch (e) {
    const why = e instanceof Error ? e.message : String(e);
    process.stderr.write(`llmgw keys: ${new LlmgwError('LLMGW_KEY_FILE', `cannot write ${out} (${why}); name a new file in a directory you can write`).message}\n`);
    return Promise.resolve(1);
  }
  process.stdout.write(`wrote ${out}\npublic ${k.publicKey}\n`);
  return Promise.resolve(0);
}
