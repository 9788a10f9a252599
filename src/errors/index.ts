// The one error class every subsystem throws. Callers branch on `code`, never on message text,
// because messages are written for operators and change; codes are stable.

import type { ErrorCode } from './catalog.js';

export { errorCatalog, errorCodes, type ErrorCode, type ErrorEntry } from './catalog.js';

/** Base error of llmgw: a stable code plus a message that names subject, bad value, want and fix. */
export class LlmgwError extends Error {
  readonly code: ErrorCode;
  constructor(code: ErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** A quota or budget said no (LLMGW_RATE_LIMITED per minute, LLMGW_BUDGET per day or month); `retryAfterS` is when the client may try again. */
export class RateLimitError extends LlmgwError {
  readonly retryAfterS: number;
  constructor(message: string, retryAfterS: number, code: 'LLMGW_RATE_LIMITED' | 'LLMGW_BUDGET' = 'LLMGW_RATE_LIMITED') {
    super(code, message);
    this.retryAfterS = retryAfterS;
  }
}

/** A request the client must fix (OpenAI 400); `param` names the offending field, as OpenAI does. */
export class RequestError extends LlmgwError {
  readonly param: string | null;
  constructor(code: ErrorCode, message: string, param: string | null = null, o?: ErrorOptions) {
    super(code, message, o);
    this.param = param;
  }
}

/** An engine failed the request (502), or gave no answer in time (504 when `timedOut`). */
export class UpstreamError extends LlmgwError {
  readonly replica: string;
  /** The engine's HTTP status when it answered with a failure; undefined when it did not answer. */
  readonly status: number | undefined;
  constructor(
    code:
      | 'LLMGW_UPSTREAM'
      | 'LLMGW_UPSTREAM_PROTOCOL'
      | 'LLMGW_UPSTREAM_TIMEOUT'
      | 'LLMGW_UPSTREAM_STALLED'
      | 'LLMGW_UPSTREAM_HEAD_TOO_LARGE'
      | 'LLMGW_UPSTREAM_ANSWER_TOO_LARGE'
      | 'LLMGW_UPSTREAM_EVENT_TOO_LARGE',
    replica: string,
    message: string,
    o?: ErrorOptions & { status?: number },
  ) {
    super(code, message, o);
    this.replica = replica;
    this.status = o?.status;
  }
}

/** One problem found while validating configuration: where, and what is wrong with it. */
export interface ConfigIssue {
  readonly path: string;
  readonly message: string;
}

/** Every problem in a configuration at once, so an operator fixes them in one pass. */
export class ConfigError extends LlmgwError {
  readonly issues: readonly ConfigIssue[];
  constructor(source: string, issues: readonly ConfigIssue[]) {
    const n = issues.length;
    super(
      'LLMGW_CONFIG',
      `${source} has ${n} problem${n === 1 ? '' : 's'}\n` + issues.map((i) => `  ${i.path}: ${i.message}`).join('\n'),
    );
    this.issues = issues;
  }
}

/** True when `e` is an LlmgwError with this code: the one way callers test for a kind of failure. */
export const hasCode = (e: unknown, code: ErrorCode): e is LlmgwError => e instanceof LlmgwError && e.code === code;
