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
  const st: StreamState = {
    gone: new AbortController(),
    headers: {},
    requestMode: d.defaultMode,
    responseMode: d.defaultMode,
    chunks: [],
    size: 0,
    over: false,
    pick: undefined,
    answering: false,
    streaming: false,
    closed: false,
    responseHeld: [],
    subset: undefined,
    t0: performance.now(),
  };
  d.metrics.streams.inc();
  const r = streamReplies(s, d, st);
  const request = requestSide(d, st, r);
  const response = responseSide(d, st, r);

  // Messages are handled one at a time in order: a body's decision is awaited before the next message.
  let chain: Promise<void> = Promise.resolve();
  s.on('data', (req: ProcessingRequest) => {
    chain = chain.then(async () => {
      if (st.closed || st.over) return;
      if (req.request_headers !== undefined) request.onHeaders(req.request_headers, req);
      else if (req.request_body !== undefined) await request.onBody(req.request_body, req);
      else if (req.response_headers !== undefined) response.onHeaders(req.response_headers, req);
      else if (req.response_body !== undefined) response.onBody(req.response_body);
      else if (req.response_trailers !== undefined) {
        r.send({ response_trailers: {} });
        r.release();
      } else if (req.request_trailers !== undefined) r.send({ request_trailers: {} });
    }).catch((e: unknown) => {
      // A bug of ours: this stream gets a 500 and the log the rest; the other streams carry on.
      d.log.error({ err: e }, 'epp.stream_failed');
      r.refuse(e, 'internal');
    });
  });
  s.on('end', () => {
    void chain.finally(() => {
      if (!st.closed) s.end();
      r.finish();
    });
  });
  s.on('cancelled', r.finish);
  s.on('error', r.finish);
}

/** What one stream knows so far, as Envoy's messages arrive. */
interface StreamState {
  /** Aborted when the stream ends, so a decision in progress stops. */
  readonly gone: AbortController;
  headers: Record<string, string>;
  requestMode: string;
  responseMode: string;
  /** The request body's chunks until its end. */
  readonly chunks: Buffer[];
  size: number;
  /** The body went over maxBodyBytes: the stream was refused and what follows is ignored. */
  over: boolean;
  pick: Pick | undefined;
  /** The response headers went through and no byte of the body yet. */
  answering: boolean;
  streaming: boolean;
  closed: boolean;
  responseHeld: Buffer[];
  // Envoy attaches the forwarded metadata namespaces to its messages; the latest that carries a
  // subset hint is the one that counts (llm-d reads the body's end).
  subset: string[] | undefined;
  readonly t0: number;
}

/** How a stream answers Envoy and ends. */
interface StreamReplies {
  /** Ends the request's hold on its endpoint. */
  release(): void;
  finish(): void;
  send(m: unknown): void;
  /** Answers with an ImmediateResponse for `e` and ends the stream. */
  refuse(e: unknown, stage: string): void;
}

function streamReplies(s: ProcessStream, d: StreamDeps, st: StreamState): StreamReplies {
  // The request's hold on its endpoint (load ticket, admission room) ends once, however the stream ends.
  const release = (): void => {
    st.pick?.routed?.ticket.done();
    st.pick = st.pick === undefined ? undefined : { ...st.pick, routed: undefined };
  };
  const finish = (): void => {
    if (st.closed) return;
    st.closed = true;
    d.metrics.streams.dec();
    st.gone.abort();
    release();
  };
  const send = (m: unknown): void => {
    if (!st.closed) s.write(m);
  };
  const refuse = (e: unknown, stage: string): void => {
    const reply = immediateFor(e);
    d.metrics.immediate.inc({ status: String((reply.immediate_response as { status: { code: number } }).status.code), stage });
    d.log.info({ stage, err: e }, 'epp.refused');
    send(reply);
    s.end();
    finish();
  };
  return { release, finish, send, refuse };
}

/** The request's half of a stream: its headers, then its body, picked an endpoint at the body's end. */
function requestSide(
  d: StreamDeps,
  st: StreamState,
  r: StreamReplies,
): {
  onHeaders(m: NonNullable<ProcessingRequest['request_headers']>, req: ProcessingRequest): void;
  onBody(m: NonNullable<ProcessingRequest['request_body']>, req: ProcessingRequest): Promise<void>;
} {
  const { send, refuse } = r;
  const full = (): boolean => st.requestMode === 'FULL_DUPLEX_STREAMED';

  const headerOptions = (p: Pick): HeaderOption[] => {
    const out = [setHeader('x-gateway-destination-endpoint', destinationOf(p.endpoints))];
    if (p.bodyChanged || full()) out.push(setHeader('content-length', String(p.body.length)));
    // In full duplex the headers were held back with the body: llm-d sets the client's own again
    // beside the destination, and so do we, leaving out the EPP's control headers.
    if (full()) for (const [k, v] of Object.entries(st.headers)) if (!ownedHeaders.has(k) && !k.startsWith(':')) out.push(setHeader(k, v));
    return out;
  };

  const answerPicked = (p: Pick): void => {
    const destination = destinationOf(p.endpoints);
    const metadata = destinationMetadata(destination);
    d.metrics.picks.inc({ tier: p.routed?.tier ?? 'any' });
    d.metrics.decisionSeconds.observe((performance.now() - st.t0) / 1000);
    d.log.info({ reqId: p.reqId, destination, tier: p.routed?.tier ?? 'any', model: p.targetModel }, 'epp.picked');
    if (full()) {
      send({ request_headers: { response: { clear_route_cache: true, header_mutation: { set_headers: headerOptions(p) } } }, dynamic_metadata: metadata });
      for (const c of bodyChunks(p.body, true)) send({ request_body: { response: { body_mutation: { streamed_response: c } } } });
    } else {
      const mutation = p.bodyChanged ? { body_mutation: { body: p.body } } : {};
      send({ request_body: { response: { clear_route_cache: true, header_mutation: { set_headers: headerOptions(p) }, ...mutation } }, dynamic_metadata: metadata });
    }
  };

  const onHeaders = (m: NonNullable<ProcessingRequest['request_headers']>, req: ProcessingRequest): void => {
    st.headers = headerMap(m.headers?.headers);
    st.subset = subsetOf(req.metadata_context);
    st.requestMode = req.protocol_config?.request_body_mode ?? d.defaultMode;
    st.responseMode = req.protocol_config?.response_body_mode ?? d.defaultMode;
    if (m.end_of_stream === true) {
      // No body: a GET. llm-d sends it to an endpoint at random; so do we, among the ready ones.
      try {
        const e = d.picker.anyEndpoint(st.subset);
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

  const onBody = async (m: NonNullable<ProcessingRequest['request_body']>, req: ProcessingRequest): Promise<void> => {
    const b = m.body ?? Buffer.alloc(0);
    st.size += b.length;
    // Stop holding bytes at the bound; the answer is given at once rather than after the rest arrives.
    if (st.size > d.maxBodyBytes) {
      st.over = true;
      st.chunks.length = 0;
      refuse(new LlmgwError('LLMGW_BODY_TOO_LARGE', `request body of more than ${d.maxBodyBytes} bytes is over the EPP's limit; send less or raise gateway.max_body_bytes`), 'body');
      return;
    }
    st.chunks.push(b);
    if (m.end_of_stream !== true) return;
    const body = Buffer.concat(st.chunks, st.size);
    st.chunks.length = 0;
    let pick: Pick;
    try {
      pick = await d.picker.pick({ path: st.headers[':path'] ?? '', headers: st.headers, body, subset: subsetOf(req.metadata_context) ?? st.subset, signal: st.gone.signal });
    } catch (e) {
      if (!st.closed) refuse(e, 'body');
      return;
    }
    st.pick = pick;
    // Envoy gave up while we decided: the decision's hold goes back at once.
    if (st.closed) r.release();
    else answerPicked(pick);
  };

  return { onHeaders, onBody };
}

/** The response's half of a stream: the served endpoint noted, the model name given back as the client sent it. */
function responseSide(
  d: StreamDeps,
  st: StreamState,
  r: StreamReplies,
): { onHeaders(m: NonNullable<ProcessingRequest['response_headers']>, req: ProcessingRequest): void; onBody(m: NonNullable<ProcessingRequest['response_body']>): void } {
  const { send, release } = r;
  const onHeaders = (m: NonNullable<ProcessingRequest['response_headers']>, req: ProcessingRequest): void => {
    const h = headerMap(m.headers?.headers);
    st.streaming = (h['content-type'] ?? '').includes('text/event-stream');
    const served = filterMetadata(req.metadata_context, destinationNamespace)?.[servedKey];
    const chosen = st.pick?.endpoints[0];
    if (typeof served === 'string' && chosen !== undefined) {
      // Envoy fell back to another endpoint of the list: the decision's predictions were for the first.
      const hit = served === hostPortOf(chosen);
      d.metrics.served.inc({ outcome: hit ? 'chosen' : 'fallback' });
      if (!hit) d.log.info({ reqId: st.pick?.reqId, chosen: hostPortOf(chosen), served }, 'epp.served_fallback');
    }
    st.answering = true;
    send({ response_headers: { response: {} } });
    if (m.end_of_stream === true) release();
  };

  const rewrite = (b: Buffer): Buffer => {
    const p = st.pick;
    if (p === undefined || p.targetModel === p.incomingModel || p.incomingModel === '') return b;
    const text = b.toString('utf8');
    for (const sep of ['"model":"', '"model": "']) {
      const from = `${sep}${p.targetModel}"`;
      if (text.includes(from)) return Buffer.from(text.replaceAll(from, `${sep}${p.incomingModel}"`));
    }
    return b;
  };

  const onBody = (m: NonNullable<ProcessingRequest['response_body']>): void => {
    const b = m.body ?? Buffer.alloc(0);
    const eos = m.end_of_stream === true;
    if (st.answering && b.length > 0) {
      st.pick?.routed?.ticket.firstByte();
      st.answering = false;
    }
    if (st.responseMode !== 'FULL_DUPLEX_STREAMED') {
      const out = rewrite(b);
      send({ response_body: { response: out === b ? {} : { body_mutation: { body: out } } } });
    } else if (st.streaming) {
      for (const c of bodyChunks(rewrite(b), eos)) send({ response_body: { response: { body_mutation: { streamed_response: c } } } });
    } else {
      // A whole JSON answer: its model name may straddle two messages, so it is rewritten whole.
      st.responseHeld.push(b);
      if (eos) {
        const whole = rewrite(Buffer.concat(st.responseHeld));
        st.responseHeld = [];
        for (const c of bodyChunks(whole, true)) send({ response_body: { response: { body_mutation: { streamed_response: c } } } });
      }
    }
    if (eos) release();
  };

  return { onHeaders, onBody };
}
