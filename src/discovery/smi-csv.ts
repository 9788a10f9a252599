// `nvidia-smi --query-gpu=… --format=csv` and `--query-compute-apps=…`: the one place nvidia-smi
// reports compute capability (`compute_cap`, not in -q -x), and a cross-check of MIG modes.
import { LlmgwError } from '../errors/index.js';

/** One CSV row keyed by field name without its unit (`memory.total [MiB]` -> `memory.total`). */
export type CsvRow = Readonly<Record<string, string>>;

/**
 * Parses nvidia-smi's CSV. With `fields`, the output was asked for with `noheader`; otherwise the
 * first line is the header. Columns are separated by ", " and never quoted; a row with a different
 * column count is an error rather than a shifted reading.
 */
export function parseSmiCsv(text: string, fields?: readonly string[]): CsvRow[] {
  const lines = text.split(/\r?\n/).filter((l) => l.trim() !== '');
  let names: readonly string[];
  let body: string[];
  if (fields === undefined) {
    const [header, ...rest] = lines;
    if (header === undefined) return [];
    names = header.split(',').map((h) => h.trim().replace(/\s*\[[^\]]*\]$/, ''));
    body = rest;
  } else {
    names = fields;
    body = lines;
  }
  return body.map((line, n) => {
    const cells = line.split(', ');
    if (cells.length !== names.length) {
      throw new LlmgwError(
        'LLMGW_SMI_CSV',
        `nvidia-smi CSV row ${n + 1} has ${cells.length} values for ${names.length} fields (${names.slice(0, 4).join(', ')}…); a value containing ", " cannot be split safely`,
      );
    }
    const row: Record<string, string> = {};
    names.forEach((name, i) => {
      row[name] = (cells[i] ?? '').trim();
    });
    return row;
  });
}
