// Request traces: one OpenTelemetry trace per generation request, with a span per phase (auth,
// route with its tokenize and score, upstream, stream) and attributes after the GenAI semantic
// conventions. Off unless configured: without a tracer every call here runs its function and
// nothing else. The SDK and the OTLP exporter are built here, from gateway.tracing, and nowhere else.
import { AsyncLocalStorage } from 'node:async_hooks';
import { ROOT_CONTEXT, SpanKind, SpanStatusCode, trace, TraceFlags, type Attributes, type Context, type Span, type Tracer } from '@opentelemetry/api';
import { ExportResultCode } from '@opentelemetry/core';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { defaultResource, resourceFromAttributes } from '@opentelemetry/resources';
import { BatchSpanProcessor, TracerProvider, type ReadableSpan, type Span as SdkSpan, type SpanExporter, type SpanProcessor } from '@opentelemetry/sdk-trace';
import { Counter, type Registry } from 'prom-client';
import { LlmgwError } from '../errors/index.js';
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
  maxTokens: 'gen_ai.request.max_tokens',
  provider: 'gen_ai.provider.name',
  responseId: 'gen_ai.response.id',
  responseModel: 'gen_ai.response.model',
  finishReasons: 'gen_ai.response.finish_reasons',
  serverAddress: 'server.address',
  serverPort: 'server.port',
  status: 'http.response.status_code',
  tier: 'llmgw.route.tier',
  replica: 'llmgw.replica',
  predictedCachedTokens: 'llmgw.route.predicted_cached_tokens',
  outcome: 'llmgw.outcome',
  /** Which replica of a migrated stream a span is about: 0 the first, 1 the first continuation. */
  hop: 'llmgw.hop',
  /** How a disaggregated request's prefill hop ended: sent, failed, or why it was skipped. */
  prefillOutcome: 'llmgw.pd.prefill_outcome',
} as const;

/** A tracer built from config, with the shutdown that flushes what it holds. */
export interface ConfiguredTracer {
  readonly tracer: Tracer;
  shutdown(): Promise<void>;
}

/**
 * The resource every span carries: service.name from OTEL_SERVICE_NAME (else "llmgw"), over the
 * attributes of OTEL_RESOURCE_ATTRIBUTES (comma-separated key=value, values percent-encoded), as
 * every OpenTelemetry SDK reads them. A malformed entry is an error: a collector filing traces
 * under the wrong service is worse than a gateway that says so at start.
 */
export function resourceAttributesOf(env: Readonly<Record<string, string | undefined>>): Record<string, string> {
  const attrs: Record<string, string> = {};
  for (const entry of (env.OTEL_RESOURCE_ATTRIBUTES ?? '').split(',')) {
    if (entry.trim() === '') continue;
    const eq = entry.indexOf('=');
    const key = entry.slice(0, eq).trim();
    let value: string | undefined;
    try {
      value = eq > 0 ? decodeURIComponent(entry.slice(eq + 1).trim()) : undefined;
    } catch (e) {
      if (!(e instanceof URIError)) throw e;
    }
    if (key === '' || value === undefined) {
      throw new LlmgwError('LLMGW_OTEL_RESOURCE', `OTEL_RESOURCE_ATTRIBUTES: ${JSON.stringify(entry)} is not key=value with a percent-encoded value; write e.g. deployment.environment.name=prod,team=infra%20ops`);
    }
    attrs[key] = value;
  }
  const name = env.OTEL_SERVICE_NAME?.trim();
  attrs['service.name'] = name !== undefined && name !== '' ? name : (attrs['service.name'] ?? 'llmgw');
  return attrs;
}

/** Why a span never reached the collector. */
export type SpanDropReason = 'queue-full' | 'export-failed';

// Spans the batch holds for export at most: past it a span is dropped and counted, so a collector
// that is away costs a bounded amount of memory and a counted loss, never the requests.
const MAX_QUEUED_SPANS = 2048;

/**
 * The batch processor with its losses counted: spans refused because MAX_QUEUED_SPANS were still
 * unexported, and spans in a batch the collector did not take. The SDK itself only says so in a
 * diagnostic log nobody reads.
 */
function countedBatch(exporter: SpanExporter, dropped: (reason: SpanDropReason, n: number) => void): SpanProcessor {
  let unsettled = 0;
  const counted: SpanExporter = {
    export: (spans, done) => {
      exporter.export(spans, (r) => {
        unsettled -= spans.length;
        if (r.code !== ExportResultCode.SUCCESS) dropped('export-failed', spans.length);
        done(r);
      });
    },
    shutdown: () => exporter.shutdown(),
    forceFlush: () => exporter.forceFlush?.() ?? Promise.resolve(),
  };
  const batch = new BatchSpanProcessor({ exporter: counted, maxQueueSize: MAX_QUEUED_SPANS });
  return {
    onStart: (span: SdkSpan, parent: Context) => batch.onStart(span, parent),
    onEnd: (span: ReadableSpan) => {
      // The batch skips unsampled spans too; counting them would leave them unsettled for ever.
      if ((span.spanContext().traceFlags & TraceFlags.SAMPLED) === 0) return;
      if (unsettled >= MAX_QUEUED_SPANS) {
        dropped('queue-full', 1);
        return;
      }
      unsettled++;
      batch.onEnd(span);
    },
    forceFlush: () => batch.forceFlush(),
    shutdown: () => batch.shutdown(),
  };
}

/**
 * The OTLP tracer gateway.tracing asks for, or undefined when it asks for none. Its resource comes
 * from `env`; spans it loses are counted on `registry` as llmgw_gateway_trace_spans_dropped_total.
 */
export function tracerFromConfig(
  c: TracingConfig,
  o: { env: Readonly<Record<string, string | undefined>>; registry: Registry },
): ConfiguredTracer | undefined {
  if (c.otlpEndpoint === '') return undefined;
  const resource = defaultResource().merge(resourceFromAttributes(resourceAttributesOf(o.env)));
  const dropped = new Counter({
    name: 'llmgw_gateway_trace_spans_dropped_total',
    help: 'Spans that never reached the collector: queue-full (2048 waiting for a collector that is slow or away), export-failed (a batch it did not take).',
    labelNames: ['reason'],
    registers: [o.registry],
  });
  for (const reason of ['queue-full', 'export-failed'] as const) dropped.inc({ reason }, 0);
  // Batched: a request never waits on the collector.
  const exporter = new OTLPTraceExporter({ url: c.otlpEndpoint });
  const provider = new TracerProvider({ resource, spanProcessors: [countedBatch(exporter, (reason, n) => dropped.inc({ reason }, n))] });
  return {
    tracer: provider.getTracer('llmgw'),
    // The last batch failing to export (a collector that is away) rejects the flush; its spans
    // are counted as export-failed already, and a gateway's close must not fail for them.
    shutdown: () => provider.shutdown().catch((e: unknown) => void e),
  };
}

// What answers the client is llmgw's API; the engine behind it is llmgw.replica's.
const provider = 'llmgw';

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
    return this.#tracer?.startSpan(operation, { kind: SpanKind.SERVER, attributes: { [spanAttr.operation]: operation, [spanAttr.provider]: provider } });
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
export function endRequest(span: Span | undefined, attrs: Readonly<Record<string, string | number | readonly string[] | undefined>>): void {
  if (span === undefined) return;
  const set: Attributes = {};
  for (const [k, v] of Object.entries(attrs)) if (v !== undefined) set[k] = typeof v === 'object' ? [...v] : v;
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
