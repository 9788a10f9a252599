// Priority classes: what a key may ask for, what a request asks for, and what an engine that
// schedules by priority is told.
import { RequestError } from '../errors/index.js';

/** A request's class, highest first in `priorityClasses`. */
export type PriorityClass = 'interactive' | 'standard' | 'batch';

/** Every class, highest first: the order the queue dispatches in. */
export const priorityClasses: readonly PriorityClass[] = ['interactive', 'standard', 'batch'];

/** The class of a key that names none. */
export const defaultPriority: PriorityClass = 'standard';

/** Whether a value is a class name. */
export const isPriorityClass = (v: unknown): v is PriorityClass => priorityClasses.some((p) => p === v);

// vLLM's priority scheduling takes an integer and serves lower values first (0 is its default).
const enginePriorities: Readonly<Record<PriorityClass, number>> = { interactive: -1, standard: 0, batch: 1 };

/** The integer an engine scheduling by priority (vLLM --scheduling-policy priority, the sim) is sent. */
export const enginePriorityOf = (p: PriorityClass): number => enginePriorities[p];

// A header sent twice counts once, as its first value.
const first = (h: string | string[] | undefined): string | undefined => (Array.isArray(h) ? h[0] : h);

// A request's number read as vLLM reads it: below 0 ahead of the default, above it behind.
function classOfNumber(n: number): PriorityClass {
  return n < 0 ? 'interactive' : n > 0 ? 'batch' : 'standard';
}

/**
 * The class a request runs at: the one it asks for (the `x-llmgw-priority` header, else the body's
 * `priority`, a class name or vLLM's integer), never above what its key allows; without one, the
 * key's class. A request may always ask for less.
 */
export function requestPriority(allowed: PriorityClass, header: string | string[] | undefined, bodyPriority: unknown): PriorityClass {
  const asked = askedPriority(header, bodyPriority);
  if (asked === undefined) return allowed;
  return priorityClasses.indexOf(asked) < priorityClasses.indexOf(allowed) ? allowed : asked;
}

function askedPriority(header: string | string[] | undefined, body: unknown): PriorityClass | undefined {
  const h = first(header);
  if (h !== undefined && h !== '') {
    const v = h.trim().toLowerCase();
    if (isPriorityClass(v)) return v;
    throw new RequestError('LLMGW_BAD_REQUEST', `x-llmgw-priority: ${JSON.stringify(h).slice(0, 40)} is not a priority class; send one of ${priorityClasses.join(', ')}`, null);
  }
  if (body === undefined || body === null) return undefined;
  if (isPriorityClass(body)) return body;
  if (typeof body === 'number' && Number.isInteger(body)) return classOfNumber(body);
  throw new RequestError('LLMGW_BAD_REQUEST', `priority: ${JSON.stringify(body).slice(0, 40)} is neither a priority class (${priorityClasses.join(', ')}) nor an integer`, 'priority');
}

/**
 * How long a request may wait in the admission queue: the least of the gateway's bound, the
 * client's `x-llmgw-max-wait-ms`, and the timeout the OpenAI SDKs announce (`x-stainless-timeout`,
 * in seconds, for the whole request: half of it is left for the answer itself).
 */
export function maxWaitOf(headers: Readonly<Record<string, string | string[] | undefined>>, boundMs: number): number {
  let ms = boundMs;
  const own = first(headers['x-llmgw-max-wait-ms']);
  if (own !== undefined) {
    const v = Number(own);
    if (own.trim() === '' || !Number.isFinite(v) || v < 0) {
      throw new RequestError('LLMGW_BAD_REQUEST', `x-llmgw-max-wait-ms: ${JSON.stringify(own).slice(0, 40)} is not a number of milliseconds; send e.g. x-llmgw-max-wait-ms: 5000`, null);
    }
    ms = Math.min(ms, v);
  }
  const sdk = Number(first(headers['x-stainless-timeout']));
  if (Number.isFinite(sdk) && sdk > 0) ms = Math.min(ms, (sdk * 1000) / 2);
  return ms;
}
