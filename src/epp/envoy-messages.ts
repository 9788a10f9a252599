// The ext_proc messages the EPP sends, as plain objects in proto-loader's shape (keepCase field
// names): the header answer that names the destination, the body back in chunks, the immediate
// answers, and the reading of what Envoy sends (header values, metadata structs, the subset hint).
import { errorReply } from '../gateway/index.js';

/** Envoy buffers at most this much of one streamed body message: llm-d's BodyByteLimit. */
export const bodyChunkBytes = 62_000;

/** The header and metadata key of the chosen endpoints, the metadata namespace, and the served one Envoy reports. */
export const destinationKey = 'x-gateway-destination-endpoint';
export const destinationNamespace = 'envoy.lb';
export const servedKey = 'x-gateway-destination-endpoint-served';
export const subsetNamespace = 'envoy.lb.subset_hint';
export const subsetKey = 'x-gateway-destination-endpoint-subset';

/** One set header, as raw bytes (Envoy reads raw_value when it is set). */
export interface HeaderOption {
  header: { key: string; raw_value: Buffer };
}

/**
 * A google.protobuf.Value as proto-loader reads it (oneofs: true adds `kind`). Its field names are
 * camelCase although every other message keeps its case: protobufjs bundles the well-known types
 * as JSON descriptors in camelCase, and keepCase cannot give back names the descriptor never had.
 * The wire bytes are the same (fields go by number); snake_case here was silently dropped.
 */
export interface PbValue {
  kind?: string;
  nullValue?: unknown;
  numberValue?: number;
  stringValue?: string;
  boolValue?: boolean;
  structValue?: PbStruct;
  listValue?: { values?: PbValue[] };
}

/** A google.protobuf.Struct. */
export interface PbStruct {
  fields?: Record<string, PbValue>;
}

/** One header Envoy sent: key, and value or raw_value. */
export interface PbHeaderValue {
  key?: string;
  value?: string;
  raw_value?: Buffer;
}

export const setHeader = (key: string, value: string): HeaderOption => ({ header: { key, raw_value: Buffer.from(value) } });

/** Envoy's headers as a map of lower-cased names (a repeated name keeps its last value). */
export function headerMap(hs: readonly PbHeaderValue[] | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of hs ?? []) {
    if (h.key === undefined) continue;
    out[h.key.toLowerCase()] = h.raw_value !== undefined && h.raw_value.length > 0 ? h.raw_value.toString('utf8') : (h.value ?? '');
  }
  return out;
}

/** The dynamic metadata that names the destination: envoy.lb { x-gateway-destination-endpoint }. */
export function destinationMetadata(destination: string): PbStruct {
  return { fields: { [destinationNamespace]: { structValue: { fields: { [destinationKey]: { stringValue: destination } } } } } };
}

/** A Value as plain data (what llm-d's AsMap gives). */
export function plainOf(v: PbValue | undefined): unknown {
  if (v === undefined) return undefined;
  if (v.structValue !== undefined) return Object.fromEntries(Object.entries(v.structValue.fields ?? {}).map(([k, x]) => [k, plainOf(x)]));
  if (v.listValue !== undefined) return (v.listValue.values ?? []).map(plainOf);
  return v.stringValue ?? v.numberValue ?? v.boolValue ?? null;
}

/** One filter's metadata namespace as plain data, or undefined when Envoy sent none. */
export function filterMetadata(ctx: { filter_metadata?: Record<string, PbStruct> } | undefined, namespace: string): Record<string, unknown> | undefined {
  const s = ctx?.filter_metadata?.[namespace];
  return s === undefined ? undefined : Object.fromEntries(Object.entries(s.fields ?? {}).map(([k, x]) => [k, plainOf(x)]));
}

/**
 * The subset hint as llm-d reads it: undefined (no namespace or no key) means any endpoint; a list
 * (empty included: a filter upstream that matched nothing) narrows to its string entries.
 */
export function subsetOf(ctx: { filter_metadata?: Record<string, PbStruct> } | undefined): string[] | undefined {
  const list = filterMetadata(ctx, subsetNamespace)?.[subsetKey];
  if (!Array.isArray(list)) return undefined;
  return list.filter((x): x is string => typeof x === 'string');
}

/** The body in StreamedBodyResponse chunks of at most bodyChunkBytes, the last with end_of_stream when `eos`. */
export function bodyChunks(body: Buffer, eos: boolean): { body: Buffer; end_of_stream: boolean }[] {
  if (body.length === 0) return [{ body, end_of_stream: eos }];
  const out: { body: Buffer; end_of_stream: boolean }[] = [];
  for (let at = 0; at < body.length; at += bodyChunkBytes) {
    const end = Math.min(body.length, at + bodyChunkBytes);
    out.push({ body: body.subarray(at, end), end_of_stream: eos && end === body.length });
  }
  return out;
}

/** The ImmediateResponse for a failure: the gateway's status and OpenAI-style error body, as serve would answer. */
export function immediateFor(e: unknown): { immediate_response: unknown } {
  const r = errorReply(e);
  const headers = [setHeader('content-type', 'application/json'), ...Object.entries(r.headers).map(([k, v]) => setHeader(k, v))];
  return {
    immediate_response: {
      status: { code: r.status },
      headers: { set_headers: headers },
      body: Buffer.from(JSON.stringify(r.body)),
      details: r.body.error.code,
    },
  };
}
