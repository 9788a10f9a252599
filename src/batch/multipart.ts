// multipart/form-data as the OpenAI SDKs send a file upload: text fields and one file part. Only what
// POST /v1/files needs; a body that is not that is a 400 naming what was wrong.
import { RequestError } from '../errors/index.js';

/** A multipart body's parts: text fields by name, and the file with its name. */
export interface FormData {
  readonly fields: Readonly<Record<string, string>>;
  readonly file: { readonly name: string; readonly filename: string; readonly data: Buffer } | undefined;
}

/** Parses `body` by the boundary of `contentType`. */
export function parseMultipart(contentType: string | undefined, body: Buffer): FormData {
  const m = /^multipart\/form-data;.*boundary=(?:"([^"]+)"|([^;\s]+))/i.exec(contentType ?? '');
  const boundary = m?.[1] ?? m?.[2];
  if (boundary === undefined) {
    throw new RequestError('LLMGW_BAD_REQUEST', `content-type ${JSON.stringify(contentType ?? '')} is not multipart/form-data with a boundary; upload the file as a form (file, purpose)`, null);
  }
  const delim = Buffer.from(`--${boundary}`);
  const fields: Record<string, string> = {};
  let file: FormData['file'];
  let at = body.indexOf(delim);
  while (at >= 0) {
    const start = at + delim.length;
    if (body.subarray(start, start + 2).toString() === '--') break;
    const next = body.indexOf(delim, start);
    if (next < 0) break;
    // Each part: CRLF, headers, CRLF CRLF, content, CRLF before the next delimiter.
    const part = body.subarray(start + 2, next - 2);
    const split = part.indexOf('\r\n\r\n');
    if (split < 0) throw new RequestError('LLMGW_BAD_REQUEST', 'a multipart part has no blank line after its headers', null);
    const head = part.subarray(0, split).toString('utf8');
    const data = part.subarray(split + 4);
    const name = /name="([^"]*)"/i.exec(head)?.[1];
    const filename = /filename="([^"]*)"/i.exec(head)?.[1];
    if (name !== undefined && filename !== undefined) file = { name, filename, data };
    else if (name !== undefined) fields[name] = data.toString('utf8');
    at = next;
  }
  return { fields, file };
}
