// Request traces: one OpenTelemetry trace per generation request, with a span per phase (auth,
// route with its tokenize and score, upstream, stream) and attributes after the GenAI semantic
// conventions. Off unless configured: without a tracer every call here runs its function and
// nothing else. The SDK and the OTLP exporter are built here, from gateway.tracing, and nowhere else.
import { AsyncLocalStorage } from 'node:async_hooks';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, type Attributes, type Span, type Tracer } from '@opentelemetry/api';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { BatchSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import type { Scorer } from '../routing/index.js';

/** The `gateway.tracing` section: where spans go; no endpoint, no tracing. */
export interface TracingConfig {
  /** OTLP/HTTP traces URL, e.g. http://127.0.0.1:4318/v1/traces; empty: tracing off. */
  readonly otlpEndpoint: string;
}

/** The attribute names we set, after the GenAI semantic conventions where one exists. */
export const spanAttr = {
  operation: 'gen_ai.operation.name',
  model: 'gen_ai.request.model',
  inputTokens: 'gen_ai.usage.input_tokens',
  outputTokens: 'gen_ai.usage.output_tokens',
  cachedTokens: 'gen_ai.usage.cache_read.input_tokens',
  status: 'http.response.status_code',
  tier: 'llmgw.route.tier',
  replica: 'llmgw.replica',
  predictedCachedTokens: 'llmgw.route.predicted_cached_tokens',
  outcome: 'llmgw.outcome',
  /** Which replica of a migrated stream a span is about: 0 the first, 1 the first continuation. */
  hop: 'llmgw.hop',
} as const;

/** A tracer built from config, with the shutdown that flushes what it holds. */
export interface ConfiguredTracer {
  readonly tracer: Tracer;
  shutdown(): Promise<void>;
}

/** The OTLP tracer gateway.tracing asks for, or undefined when it asks for none. */
export function tracerFromConfig(c: TracingConfig): ConfiguredTracer | undefined {
  if (c.otlpEndpoint === '') return undefined;
  // Batched: a request never waits on the collector, and a collector that is down costs dropped
  // spans, not requests.
  const provider = new TracerProvider({ spanProcessors: [new BatchSpanProcessor({ exporter: new OTLPTraceExporter({ url: c.otlpEndpoint }) })] });
  return { tracer: provider.getTracer('llmgw'), shutdown: () => provider.shutdown() };
}

// The span a request's work runs in, so the scorer and tokenizer wrappers (shared by every
// request) find their parent without a parameter through the router.
const current = new AsyncLocalStorage<Span>();

/** Spans of the gateway's requests; a no-op without a tracer. */
export class RequestTracing {
  readonly #tracer: Tracer | undefined;

  constructor(tracer: Tracer | undefined) {
    this.#tracer = tracer;
  }

  /** The root span of one request, or undefined when tracing is off. */
  request(operation: string): Span | undefined {
    return this.#tracer?.startSpan(operation, { kind: SpanKind.SERVER, attributes: { [spanAttr.operation]: operation } });
  }

  /** A child span of `parent`, for a phase the caller ends itself; undefined when tracing is off. */
  start(name: string, parent: Span | undefined): Span | undefined {
    if (this.#tracer === undefined || parent === undefined) return undefined;
    // The parent is passed as a context of its own: no global context manager is installed.
    return this.#tracer.startSpan(name, { kind: SpanKind.INTERNAL }, trace.setSpan(ROOT_CONTEXT, parent));
  }

  /** Runs `fn` in a child span of `parent` (or of the span it is called in), ended when `fn` settles. */
  async phase<T>(name: string, parent: Span | undefined, fn: (span: Span | undefined) => Promise<T> | T): Promise<T> {
    const span = this.start(name, parent ?? current.getStore());
    if (span === undefined) return fn(undefined);
    try {
      return await current.run(span, () => fn(span));
    } catch (e) {
      failed(span, e);
      throw e;
    } finally {
      span.end();
    }
  }

  /** The scorer, its calls traced as `score` spans of the request routing them. */
  scorer(s: Scorer | undefined): Scorer | undefined {
    if (s === undefined || this.#tracer === undefined) return s;
    return { score: (task) => this.phase('score', undefined, () => s.score(task)) };
  }

  /** A tokenizer, its calls traced as `tokenize` spans of the request routing them. */
  tokenizer<A extends unknown[], R>(t: { tokens(...a: A): Promise<R> }): { tokens(...a: A): Promise<R> } {
    if (this.#tracer === undefined) return t;
    return { tokens: (...a) => this.phase('tokenize', undefined, () => t.tokens(...a)) };
  }
}

/** Ends a request's root span with its outcome; attributes with an undefined value are left out. */
export function endRequest(span: Span | undefined, attrs: Readonly<Record<string, string | number | undefined>>): void {
  if (span === undefined) return;
  const set: Attributes = {};
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined) set[k] = v;
  span.setAttributes(set);
  const status = attrs[spanAttr.status];
  if (typeof status === 'number' && status >= 500) span.setStatus({ code: SpanStatusCode.ERROR });
  span.end();
}

/** Marks a span failed with `e`. */
export function failed(span: Span | undefined, e: unknown): void {
  if (span === undefined) return;
  span.recordException(e instanceof Error ? e : String(e));
  span.setStatus({ code: SpanStatusCode.ERROR, message: e instanceof Error ? e.message : String(e) });
}
