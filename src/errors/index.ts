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

/** A request the client must fix (OpenAI 400); `param` names the offending field, as OpenAI does. */
export class RequestError extends LlmgwError {
  readonly param: string | null;
  constructor(code: ErrorCode, message: string, param: string | null = null, o?: ErrorOptions) {
    super(code, message, o);
    this.param = param;
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
