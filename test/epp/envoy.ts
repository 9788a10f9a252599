// Envoy's side of ext_proc for the EPP tests: a gRPC client over the same vendored .proto files,
// sending what Envoy sends (request headers with protocol_config, the body in chunks, the response
// phase with the served endpoint in envoy.lb metadata), and sim pods from a discovery file.
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import type { TestContext } from 'node:test';
import * as grpc from '@grpc/grpc-js';
import { loadSync } from '@grpc/proto-loader';
import { fileURLToPath } from 'node:url';
import { freePort, waitFor } from '../support/wait.js';
import { llmgwMain } from '../support/serve.js';

const protoDir = fileURLToPath(new URL('../../../proto/', import.meta.url));

/** A stub of the ExternalProcessor service. */
export function extProcClient(t: TestContext, port: number): grpc.Client & { Process(): grpc.ClientDuplexStream<unknown, Answer> } {
  const def = loadSync('envoy/service/ext_proc/v3/external_processor.proto', { includeDirs: [protoDir], keepCase: true, longs: String, enums: String, defaults: false, oneofs: true });
  const pkg = grpc.loadPackageDefinition(def) as unknown as { envoy: { service: { ext_proc: { v3: { ExternalProcessor: grpc.ServiceClientConstructor } } } } };
  const Ctor = pkg.envoy.service.ext_proc.v3.ExternalProcessor;
  const c = new Ctor(`127.0.0.1:${port}`, grpc.credentials.createInsecure()) as unknown as grpc.Client & { Process(): grpc.ClientDuplexStream<unknown, Answer> };
  t.after(() => c.close());
  return c;
}

/** One ProcessingResponse as the client reads it (the parts the tests look at). */
export interface Answer {
  response?: string;
  request_headers?: { response?: Common };
  request_body?: { response?: Common };
  response_headers?: { response?: Common };
  response_body?: { response?: Common };
  immediate_response?: { status?: { code?: string }; body?: Buffer; headers?: { set_headers?: SetHeader[] } };
  dynamic_metadata?: { fields?: Record<string, { structValue?: { fields?: Record<string, { stringValue?: string }> } }> };
}
interface SetHeader {
  header?: { key?: string; raw_value?: Buffer; value?: string };
}
interface Common {
  clear_route_cache?: boolean;
  header_mutation?: { set_headers?: SetHeader[] };
  body_mutation?: { body?: Buffer; streamed_response?: { body?: Buffer; end_of_stream?: boolean } };
}

export const headerOf = (c: Common | undefined, key: string): string | undefined => {
  const h = c?.header_mutation?.set_headers?.find((x) => x.header?.key === key)?.header;
  return h === undefined ? undefined : (h.raw_value?.toString() ?? h.value);
};

const hv = (key: string, value: string) => ({ key, raw_value: Buffer.from(value) });

/** What a test request looks like to Envoy. */
export interface RequestShape {
  path?: string;
  method?: string;
  headers?: Record<string, string>;
  eos?: boolean;
  mode?: 'FULL_DUPLEX_STREAMED' | 'BUFFERED';
  subset?: readonly string[];
}

/** The metadata_context Envoy forwards with each message: the subset hint when the route set one. */
export const subsetContext = (subset: readonly string[] | undefined) =>
  subset === undefined ? {} : { metadata_context: { filter_metadata: { 'envoy.lb.subset_hint': { fields: { 'x-gateway-destination-endpoint-subset': { listValue: { values: subset.map((s) => ({ stringValue: s })) } } } } } } };

/** Envoy's request_headers message for a POST (or a GET with end_of_stream). */
export function requestHeaders(o: RequestShape) {
  const hs = [hv(':method', o.method ?? 'POST'), hv(':path', o.path ?? '/v1/chat/completions'), hv(':authority', 'gw.example'), hv('content-type', 'application/json'), ...Object.entries(o.headers ?? {}).map(([k, v]) => hv(k, v))];
  const mode = o.mode ?? 'FULL_DUPLEX_STREAMED';
  return {
    request_headers: { headers: { headers: hs }, end_of_stream: o.eos === true },
    protocol_config: { request_body_mode: mode, response_body_mode: mode },
    ...subsetContext(o.subset),
  };
}

/** A stream's answers as they come; `next` waits (bounded) for the next one. */
export class Exchange {
  readonly call: grpc.ClientDuplexStream<unknown, Answer>;
  readonly #got: Answer[] = [];
  readonly #waiters: (() => void)[] = [];
  ended = false;
  error: Error | undefined;

  constructor(client: { Process(): grpc.ClientDuplexStream<unknown, Answer> }) {
    this.call = client.Process();
    this.call.on('data', (a: Answer) => {
      this.#got.push(a);
      this.#wake();
    });
    this.call.on('end', () => {
      this.ended = true;
      this.#wake();
    });
    this.call.on('error', (e: Error) => {
      this.error = e;
      this.ended = true;
      this.#wake();
    });
  }

  #wake(): void {
    for (const w of this.#waiters.splice(0)) w();
  }

  send(m: unknown): void {
    this.call.write(m);
  }

  async next(timeoutMs = 20_000): Promise<Answer> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const a = this.#got.shift();
      if (a !== undefined) return a;
      if (this.ended) throw new Error(`stream ended with no further answer (${this.error?.message ?? 'ok'})`);
      const left = deadline - Date.now();
      if (left <= 0) throw new Error(`no answer within ${timeoutMs} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, left);
        this.#waiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
  }

  close(): void {
    this.call.end();
  }
}

/** Runs one request the way Envoy does in full duplex: headers, body chunks; returns the header answer and the body Envoy would forward. */
export async function pickFor(client: { Process(): grpc.ClientDuplexStream<unknown, Answer> }, body: string, o: RequestShape & { chunkBytes?: number } = {}) {
  const x = new Exchange(client);
  x.send(requestHeaders(o));
  const bytes = Buffer.from(body);
  const step = o.chunkBytes ?? 16_384;
  for (let at = 0; at < bytes.length || at === 0; at += step) {
    x.send({ request_body: { body: bytes.subarray(at, at + step), end_of_stream: at + step >= bytes.length }, ...subsetContext(o.subset) });
    if (bytes.length === 0) break;
  }
  const first = await x.next();
  if (first.immediate_response !== undefined) return { x, first, destination: undefined, forwarded: Buffer.alloc(0) };
  const destination = headerOf(first.request_headers?.response, 'x-gateway-destination-endpoint');
  const parts: Buffer[] = [];
  for (;;) {
    const a = await x.next();
    const s = a.request_body?.response?.body_mutation?.streamed_response;
    parts.push(s?.body ?? Buffer.alloc(0));
    if (s?.end_of_stream === true) break;
  }
  return { x, first, destination, forwarded: Buffer.concat(parts), chunks: parts.length };
}

/** Envoy's response phase: the engine's answer headers (with the served endpoint) and its body; returns the body given back. */
export async function respond(x: Exchange, served: string, answer: Buffer, contentType = 'application/json'): Promise<Buffer> {
  x.send({
    response_headers: { headers: { headers: [hv(':status', '200'), hv('content-type', contentType)] } },
    metadata_context: { filter_metadata: { 'envoy.lb': { fields: { 'x-gateway-destination-endpoint-served': { stringValue: served } } } } },
  });
  const h = await x.next();
  if (h.response_headers === undefined) throw new Error(`expected a response_headers answer, got ${JSON.stringify(h)}`);
  x.send({ response_body: { body: answer, end_of_stream: true } });
  const out: Buffer[] = [];
  for (;;) {
    const a = await x.next();
    const s = a.response_body?.response?.body_mutation?.streamed_response;
    out.push(s?.body ?? Buffer.alloc(0));
    if (s?.end_of_stream === true) break;
  }
  x.close();
  return Buffer.concat(out);
}

/** A sim pod: its HTTP and KV-event ports. */
export interface SimPod {
  readonly name: string;
  readonly host: string;
  readonly port: number;
  readonly kvPort: number;
  readonly replayPort: number;
  readonly proc: ChildProcess;
  kill(): Promise<void>;
}

/**
 * Starts a sim serving `model`, publishing KV events on its own ports as vLLM binds them. `httpPort`
 * puts pods on one port at several addresses, as an InferencePool's targetPorts do.
 */
export async function startSimPod(t: TestContext, name: string, model: string, host = '127.0.0.1', httpPort?: number): Promise<SimPod> {
  const [port, kvPort, replayPort] = [httpPort ?? (await freePort()), await freePort(), await freePort()];
  const kv = JSON.stringify({ enable_kv_cache_events: true, publisher: 'zmq', endpoint: `tcp://*:${kvPort}`, replay_endpoint: `tcp://*:${replayPort}`, topic: '' });
  const proc = spawn(
    process.execPath,
    [llmgwMain, 'sim', 'serve', model, '--host', host, '--port', String(port), '--tokenizer', 'bytes', '--block-size', '16', '--prefix-caching-hash-algo', 'sha256_cbor', '--kv-events-config', kv],
    { env: { ...process.env, PYTHONHASHSEED: '7' }, stdio: ['ignore', 'ignore', 'ignore'] },
  );
  const exited = once(proc, 'exit');
  const kill = async (): Promise<void> => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      await exited;
    }
  };
  t.after(kill);
  await waitFor(async () => (await fetch(`http://${host}:${port}/health`)).status === 200, { timeoutMs: 30_000, what: `sim ${name} healthy` });
  return { name, host, port, kvPort, replayPort, proc, kill };
}

/** The discovery file's text for these pods (llm-d-router's file-discovery format), kv ports in labels. */
export function endpointsFile(pods: readonly SimPod[], extra = ''): string {
  const lines = pods.map((p) => `  - name: ${p.name}\n    address: ${p.host}\n    port: "${p.port}"\n    labels: { kv_port: "${p.kvPort}", replay_port: "${p.replayPort}" }`);
  return `endpoints:\n${lines.join('\n')}\n${extra}`;
}

/** Forwards the body to the chosen pod as Envoy would; returns the engine's answer. */
export async function forward(destination: string, path: string, body: Buffer): Promise<Buffer> {
  const first = destination.split(',')[0] ?? '';
  const r = await fetch(`http://${first}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
  return Buffer.from(await r.arrayBuffer());
}
