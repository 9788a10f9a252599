// A batch input file read as OpenAI reads one: JSONL, each line {custom_id, method: "POST", url, body}
// with url the batch's endpoint and custom_id unique. A file with a bad line fails the batch at
// validation with one error per bad line, naming it (OpenAI's errors.data[].line, 1-based); a model
// the gateway does not serve is not a file error: that line's request is answered 404 in the error file.

/** One request of a batch, as the runner sends it. */
export interface BatchLine {
  /** 0-based position among the file's non-empty lines. */
  readonly line: number;
  readonly customId: string;
  /** The request body as JSON text. */
  readonly body: string;
}

/** One validation error, in OpenAI's errors.data shape. */
export interface LineError {
  readonly code: string;
  readonly message: string;
  readonly param: string | null;
  readonly line: number | null;
}

// Errors listed beyond this only repeat the same lesson and make the batch object huge.
const maxErrors = 100;

/** The file's requests, or the errors that fail the batch (more than `maxLines` requests is one). */
export function parseBatchFile(text: string, endpoint: string, maxLines: number): { lines: BatchLine[]; errors: LineError[] } {
  const lines: BatchLine[] = [];
  const errors: LineError[] = [];
  const seen = new Set<string>();
  const raw = text.split('\n');
  const fail = (e: LineError): void => {
    if (errors.length < maxErrors) errors.push(e);
  };
  for (const [i, l] of raw.entries()) {
    if (l.trim() === '') continue;
    const n = i + 1;
    let v: unknown;
    try {
      v = JSON.parse(l);
    } catch {
      fail({ code: 'invalid_json_line', message: `line ${n} is not valid JSON; write one JSON object per line`, param: null, line: n });
      continue;
    }
    if (typeof v !== 'object' || v === null || Array.isArray(v)) {
      fail({ code: 'invalid_json_line', message: `line ${n} is not a JSON object`, param: null, line: n });
      continue;
    }
    const o = v as Record<string, unknown>;
    if (typeof o.custom_id !== 'string' || o.custom_id === '') {
      fail({ code: 'missing_required_parameter', message: `line ${n} has no custom_id string`, param: 'custom_id', line: n });
      continue;
    }
    if (seen.has(o.custom_id)) {
      fail({ code: 'duplicate_custom_id', message: `line ${n}: custom_id ${JSON.stringify(o.custom_id).slice(0, 80)} is used by an earlier line; each request of a batch needs its own`, param: 'custom_id', line: n });
      continue;
    }
    seen.add(o.custom_id);
    if (o.method !== 'POST') {
      fail({ code: 'invalid_request', message: `line ${n}: method ${JSON.stringify(o.method)} is not "POST"`, param: 'method', line: n });
      continue;
    }
    if (o.url !== endpoint) {
      fail({ code: 'invalid_url', message: `line ${n}: url ${JSON.stringify(o.url)} is not the batch's endpoint ${endpoint}; a batch runs one endpoint`, param: 'url', line: n });
      continue;
    }
    if (typeof o.body !== 'object' || o.body === null || Array.isArray(o.body) || typeof (o.body as Record<string, unknown>).model !== 'string') {
      fail({ code: 'missing_required_parameter', message: `line ${n}: body must be a request object with a model`, param: 'body.model', line: n });
      continue;
    }
    lines.push({ line: lines.length, customId: o.custom_id, body: JSON.stringify(o.body) });
  }
  if (lines.length === 0 && errors.length === 0) errors.push({ code: 'empty_file', message: 'the input file has no requests', param: null, line: null });
  if (lines.length > maxLines) errors.push({ code: 'too_many_tasks', message: `the input file has ${lines.length} requests; a batch takes at most ${maxLines} (gateway.batch.max_lines)`, param: null, line: null });
  return { lines: errors.length === 0 ? lines : [], errors };
}
