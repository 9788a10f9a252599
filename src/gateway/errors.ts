// The one place that decides what a failure looks like to an OpenAI client: HTTP status (from the
// error catalog), the OpenAI error object, and headers. Everything else in the gateway throws an LlmgwError with a code.
import { AdmissionRefused } from '../admission/index.js';
import { errorCatalog, LlmgwError, RateLimitError, RequestError } from '../errors/index.js';
import type { ErrorCode } from '../errors/index.js';

/** What the client receives for a failure. */
export interface ErrorReply {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: { error: { message: string; type: string; param: string | null; code: string } };
}

// OpenAI's error `type` follows from the status, as in OpenAI's own API.
function openaiType(status: number): string {
  if (status === 429) return 'rate_limit_error';
  if (status === 403) return 'permission_error';
  return status < 500 ? 'invalid_request_error' : 'server_error';
}

// The OpenAI `code` field: the names OpenAI's own API uses where it has one, ours otherwise.
const openaiCode: Readonly<Partial<Record<ErrorCode, string>>> = {
  LLMGW_UNAUTHORIZED: 'invalid_api_key',
  LLMGW_UNKNOWN_MODEL: 'model_not_found',
  LLMGW_RATE_LIMITED: 'rate_limit_exceeded',
  LLMGW_BUDGET: 'insufficient_quota',
  LLMGW_TENANT_SHARE: 'rate_limit_exceeded',
  LLMGW_ADAPTER_LOAD: 'adapter_load_failed',
};

/** Status, headers and OpenAI error body for any thrown value; unknown failures are 500 without detail. */
export function errorReply(e: unknown): ErrorReply {
  // A 500 in the catalog is ours to fix, not the client's: its message stays in our log.
  const status = e instanceof LlmgwError ? errorCatalog[e.code].status : 500;
  if (e instanceof LlmgwError && status !== 500) {
    const headers: Record<string, string> = {};
    if (e instanceof RateLimitError || e instanceof AdmissionRefused) headers['retry-after'] = String(Math.max(1, Math.ceil(e.retryAfterS)));
    if (status === 401) headers['www-authenticate'] = 'Bearer';
    return {
      status,
      headers,
      body: {
        error: {
          message: e.message,
          type: openaiType(status),
          param: e instanceof RequestError ? e.param : null,
          code: openaiCode[e.code] ?? e.code.slice('LLMGW_'.length).toLowerCase(),
        },
      },
    };
  }
  // A bug of ours: the client learns only that it happened; the log has the rest.
  return {
    status: 500,
    headers: {},
    body: { error: { message: 'internal error in the llmgw gateway', type: 'server_error', param: null, code: 'internal' } },
  };
}
