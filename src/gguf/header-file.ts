// A GGUF's header read from its file: only the bytes the header takes, never the tensor data (a
// model is gigabytes; its vocabulary and template are the first few megabytes).
import { open } from 'node:fs/promises';
import { LlmgwError } from '../errors/index.js';
import { HeaderTooShort, readGgufHeader, type GgufHeader } from './format.js';

/** The largest header read by default: a 256k-token vocabulary with its merges is about 20 MB. */
const maxGgufHeaderBytes = 256 * 1024 * 1024;

const firstReadBytes = 1024 * 1024;

/**
 * The header of the GGUF at `path`. Reads its first megabyte and reads on as far as the header says
 * it reaches, refusing a header that claims more than the file holds or than `maxHeaderBytes`: a
 * hostile or truncated file costs a clear error, not the gateway's memory.
 */
export async function readGgufHeaderFile(path: string, o: { maxHeaderBytes?: number; signal?: AbortSignal } = {}): Promise<GgufHeader> {
  const maxBytes = o.maxHeaderBytes ?? maxGgufHeaderBytes;
  o.signal?.throwIfAborted();
  let file;
  try {
    file = await open(path, 'r');
  } catch (e) {
    throw new LlmgwError('LLMGW_GGUF_FORMAT', `model ${path}: cannot open it (${e instanceof Error && 'code' in e ? String(e.code) : String(e)}); give the path of a GGUF file`, { cause: e });
  }
  try {
    const fileBytes = (await file.stat()).size;
    let want = Math.min(firstReadBytes, fileBytes, maxBytes);
    // Each read adds only the bytes past those already held.
    let held = Buffer.alloc(0);
    for (;;) {
      o.signal?.throwIfAborted();
      const buf = Buffer.allocUnsafe(want);
      held.copy(buf);
      const { bytesRead: added } = await file.read(buf, held.length, want - held.length, held.length);
      held = buf.subarray(0, held.length + added);
      const bytesRead = held.length;
      try {
        return readGgufHeader(held);
      } catch (e) {
        if (!(e instanceof HeaderTooShort)) throw new LlmgwError('LLMGW_GGUF_FORMAT', `model ${path}: ${e instanceof Error ? e.message : String(e)}`, { cause: e });
        if (bytesRead >= fileBytes) throw new LlmgwError('LLMGW_GGUF_FORMAT', `model ${path}: ${e.message}, but the file has ${fileBytes}; it is truncated or corrupt`, { cause: e });
        if (bytesRead >= maxBytes) throw new LlmgwError('LLMGW_GGUF_FORMAT', `model ${path}: its header is larger than ${maxBytes} bytes (${e.message}); a GGUF's metadata is megabytes, so the file is corrupt or hostile`, { cause: e });
        // At least what the header says it needs, at least double (a long run of short strings
        // would otherwise cost one read each), never past the file or the bound.
        want = Math.min(Math.max(e.needBytes, want * 2), fileBytes, maxBytes);
      }
    }
  } finally {
    await file.close();
  }
}
