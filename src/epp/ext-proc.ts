// One ext_proc stream: one HTTP request through Envoy, answered as llm-d-router's handlers answer
// it (GIE's endpoint picker protocol). FULL_DUPLEX_STREAMED: the body is buffered to end_of_stream,
// then the header answer (clear_route_cache, the destination header and envoy.lb metadata) goes
// first and the body follows in chunks of at most 62,000 bytes. BUFFERED (and any mode Envoy waits
// on the header answer in): the headers are let through at once and the destination rides on the
// body answer. A request without a body (a GET) goes to any ready endpoint at once. Failures are an
// ImmediateResponse in the gateway's status and OpenAI error body; nothing one stream does stops another.
import { LlmgwError } from '../errors/index.js';
import type { Logger } from '../log/index.js';
import {
  bodyChunks,
  destinationMetadata,
  destinationNamespace,
  filterMetadata,
  headerMap,
  immediateFor,
  servedKey,
  setHeader,
  subsetOf,
  type HeaderOption,
  type PbHeaderValue,
  type PbStruct,
} from './envoy-messages.js';
import type { EppMetrics } from './metrics.js';
import { destinationOf, type Pick, type Picker } from './picker.js';
import { hostPortOf } from './pool.js';

/** One ProcessingRequest as proto-loader reads it (the fields the EPP uses). */
export interface ProcessingRequest {
  request?: string;
  request_headers?: { headers?: { headers?: PbHeaderValue[] }; end_of_stream?: boolean };
  request_body?: { body?: Buffer; end_of_stream?: boolean };
  request_trailers?: unknown;
  response_headers?: { headers?: { headers?: PbHeaderValue[] }; end_of_stream?: boolean };
  response_body?: { body?: Buffer; end_of_stream?: boolean };
  response_trailers?: unknown;
  metadata_context?: { filter_metadata?: Record<string, PbStruct> };
  protocol_config?: { request_body_mode?: string; response_body_mode?: string };
}

/** The stream as the handler needs it: grpc-js's ServerDuplexStream satisfies it. */
export interface ProcessStream {
  write(msg: unknown): boolean;
  end(): void;
  on(event: 'data', fn: (m: ProcessingRequest) => void): this;
  on(event: 'end' | 'cancelled', fn: () => void): this;
  on(event: 'error', fn: (e: Error) => void): this;
}

// The request headers the EPP consumes or sets: not echoed to the pod (llm-d's system-owned headers).
const ownedHeaders = new Set([
  'x-llm-d-inference-fairness-id',
  'x-gateway-inference-fairness-id',
  'x-llm-d-inference-objective',
  'x-gateway-inference-objective',
  'x-llm-d-model-name-rewrite',
  'x-gateway-model-name-rewrite',
  'x-gateway-destination-endpoint',
  'x-gateway-destination-endpoint-served',
  'x-gateway-destination-endpoint-subset',
  'content-length',
]);

/** What a stream handler is given. */
export interface StreamDeps {
  readonly picker: Picker;
  readonly metrics: EppMetrics;
  readonly log: Logger;
  readonly maxBodyBytes: number;
  /** The body mode assumed when Envoy does not say (its protocol_config came in Envoy 1.32). */
  readonly defaultMode: string;
}

/** Serves one Process stream until Envoy ends it. */
export function serveStream(s: ProcessStream, d: StreamDeps): void {
  const gone = new AbortController();
  let headers: Record<string, string> = {};
  let requestMode = d.defaultMode;
  let responseMode = d.defaultMode;
  const chunks: Buffer[] = [];
  let size = 0;
  let over = false;
  let pick: Pick | undefined;
  let answering = false;
  let streaming = false;
  let closed = false;
  let responseHeld: Buffer[] = [];
  // Envoy attaches the forwarded metadata namespaces to its messages; the latest that carries a
  // subset hint is the one that counts (llm-d reads the body's end).
  let subset: string[] | undefined;
  const t0 = performance.now();
  d.metrics.streams.inc();

  // The request's hold on its endpoint (load ticket, admission room) ends once, however the stream ends.
  const release = (): void => {
    pick?.routed?.ticket.done();
    pick = pick === undefined ? undefined : { ...pick, routed: undefined };
  };
  const finish = (): void => {
    if (closed) return;
    closed = true;
    d.metrics.streams.dec();
    gone.abort();
    release();
  };
  const send = (m: unknown): void => {
    if (!closed) s.write(m);
  };
  const refuse = (e: unknown, stage: string): void => {
    const reply = immediateFor(e);
    d.metrics.immediate.inc({ status: String((reply.immediate_response as { status: { code: number } }).status.code), stage });
    d.log.info({ stage, err: e }, 'epp.refused');
    send(reply);
    s.end();
    finish();
  };
  const full = (): boolean => requestMode === 'FULL_DUPLEX_STREAMED';

  const headerOptions = (p: Pick): HeaderOption[] => {
    const out = [setHeader('x-gateway-destination-endpoint', destinationOf(p.endpoints))];
    if (p.bodyChanged || full()) out.push(setHeader('content-length', String(p.body.length)));
    // In full duplex the headers were held back with the body: llm-d sets the client's own again
    // beside the destination, and so do we, leaving out the EPP's control headers.
    if (full()) for (const [k, v] of Object.entries(headers)) if (!ownedHeaders.has(k) && !k.startsWith(':')) out.push(setHeader(k, v));
    return out;
  };

  const answerPicked = (p: Pick): void => {
    const destination = destinationOf(p.endpoints);
    const metadata = destinationMetadata(destination);
    d.metrics.picks.inc({ tier: p.routed?.tier ?? 'any' });
    d.metrics.decisionSeconds.observe((performance.now() - t0) / 1000);
    d.log.info({ reqId: p.reqId, destination, tier: p.routed?.tier ?? 'any', model: p.targetModel }, 'epp.picked');
    if (full()) {
      send({ request_headers: { response: { clear_route_cache: true, header_mutation: { set_headers: headerOptions(p) } } }, dynamic_metadata: metadata });
      for (const c of bodyChunks(p.body, true)) send({ request_body: { response: { body_mutation: { streamed_response: c } } } });
    } else {
      const mutation = p.bodyChanged ? { body_mutation: { body: p.body } } : {};
      send({ request_body: { response: { clear_route_cache: true, header_mutation: { set_headers: headerOptions(p) }, ...mutation } }, dynamic_metadata: metadata });
    }
  };

  const onRequestHeaders = (m: NonNullable<ProcessingRequest['request_headers']>, req: ProcessingRequest): void => {
    headers = headerMap(m.headers?.headers);
    subset = subsetOf(req.metadata_context);
    requestMode = req.protocol_config?.request_body_mode ?? d.defaultMode;
    responseMode = req.protocol_config?.response_body_mode ?? d.defaultMode;
    if (m.end_of_stream === true) {
      // No body: a GET. llm-d sends it to an endpoint at random; so do we, among the ready ones.
      try {
        const e = d.picker.anyEndpoint(subset);
        const destination = hostPortOf(e);
        d.metrics.picks.inc({ tier: 'any' });
        send({ request_headers: { response: { clear_route_cache: true, header_mutation: { set_headers: [setHeader('x-gateway-destination-endpoint', destination)] } } }, dynamic_metadata: destinationMetadata(destination) });
      } catch (e) {
        refuse(e, 'headers');
      }
      return;
    }
    // Outside full duplex Envoy sends no body before it has the header answer.
    if (!full()) send({ request_headers: { response: {} } });
  };

  const onRequestBody = async (m: NonNullable<ProcessingRequest['request_body']>, req: ProcessingRequest): Promise<void> => {
    const b = m.body ?? Buffer.alloc(0);
    size += b.length;
    // Stop holding bytes at the bound; the answer is given at once rather than after the rest arrives.
    if (size > d.maxBodyBytes) {
      over = true;
      chunks.length = 0;
      refuse(new LlmgwError('LLMGW_BODY_TOO_LARGE', `request body of more than ${d.maxBodyBytes} bytes is over the EPP's limit; send less or raise gateway.max_body_bytes`), 'body');
      return;
    }
    chunks.push(b);
    if (m.end_of_stream !== true) return;
    const body = Buffer.concat(chunks, size);
    chunks.length = 0;
    try {
      pick = await d.picker.pick({ path: headers[':path'] ?? '', headers, body, subset: subsetOf(req.metadata_context) ?? subset, signal: gone.signal });
    } catch (e) {
      if (!closed) refuse(e, 'body');
      return;
    }
    // Envoy gave up while we decided: the decision's hold goes back at once.
    if (closed) release();
    else answerPicked(pick);
  };

  const onResponseHeaders = (m: NonNullable<ProcessingRequest['response_headers']>, req: ProcessingRequest): void => {
    const h = headerMap(m.headers?.headers);
    streaming = (h['content-type'] ?? '').includes('text/event-stream');
    const served = filterMetadata(req.metadata_context, destinationNamespace)?.[servedKey];
    const chosen = pick?.endpoints[0];
    if (typeof served === 'string' && chosen !== undefined) {
      // Envoy fell back to another endpoint of the list: the decision's predictions were for the first.
      const hit = served === hostPortOf(chosen);
      d.metrics.served.inc({ outcome: hit ? 'chosen' : 'fallback' });
      if (!hit) d.log.info({ reqId: pick?.reqId, chosen: hostPortOf(chosen), served }, 'epp.served_fallback');
    }
    answering = true;
    send({ response_headers: { response: {} } });
    if (m.end_of_stream === true) release();
  };

  const rewrite = (b: Buffer): Buffer => {
    const p = pick;
    if (p === undefined || p.targetModel === p.incomingModel || p.incomingModel === '') return b;
    const text = b.toString('utf8');
    for (const sep of ['"model":"', '"model": "']) {
      const from = `${sep}${p.targetModel}"`;
      if (text.includes(from)) return Buffer.from(text.replaceAll(from, `${sep}${p.incomingModel}"`));
    }
    return b;
  };

  const onResponseBody = (m: NonNullable<ProcessingRequest['response_body']>): void => {
    const b = m.body ?? Buffer.alloc(0);
    const eos = m.end_of_stream === true;
    if (answering && b.length > 0) {
      pick?.routed?.ticket.firstByte();
      answering = false;
    }
    if (responseMode !== 'FULL_DUPLEX_STREAMED') {
      const out = rewrite(b);
      send({ response_body: { response: out === b ? {} : { body_mutation: { body: out } } } });
    } else if (streaming) {
      for (const c of bodyChunks(rewrite(b), eos)) send({ response_body: { response: { body_mutation: { streamed_response: c } } } });
    } else {
      // A whole JSON answer: its model name may straddle two messages, so it is rewritten whole.
      responseHeld.push(b);
      if (eos) {
        const whole = rewrite(Buffer.concat(responseHeld));
        responseHeld = [];
        for (const c of bodyChunks(whole, true)) send({ response_body: { response: { body_mutation: { streamed_response: c } } } });
      }
    }
    if (eos) release();
  };

  // Messages are handled one at a time in order: a body's decision is awaited before the next message.
  let chain: Promise<void> = Promise.resolve();
  s.on('data', (req: ProcessingRequest) => {
    chain = chain.then(async () => {
      if (closed || over) return;
      if (req.request_headers !== undefined) onRequestHeaders(req.request_headers, req);
      else if (req.request_body !== undefined) await onRequestBody(req.request_body, req);
      else if (req.response_headers !== undefined) onResponseHeaders(req.response_headers, req);
      else if (req.response_body !== undefined) onResponseBody(req.response_body);
      else if (req.response_trailers !== undefined) {
        send({ response_trailers: {} });
        release();
      } else if (req.request_trailers !== undefined) send({ request_trailers: {} });
    }).catch((e: unknown) => {
      // A bug of ours: this stream gets a 500 and the log the rest; the other streams carry on.
      d.log.error({ err: e }, 'epp.stream_failed');
      refuse(e, 'internal');
    });
  });
  s.on('end', () => {
    void chain.finally(() => {
      if (!closed) s.end();
      finish();
    });
  });
  s.on('cancelled', finish);
  s.on('error', finish);
}
