// How nvidia-smi writes a reading it does not have. Each of these becomes undefined: the field is
// unknown, and an unknown must never be read as zero (0 MiB free would stop placement; 0 W would
// look like an idle card).

const unknownWords = new Set([
  '',
  'n/a',
  'insufficient permissions',
  'not supported',
  'requested functionality has been deprecated',
  'unknown error',
  'unknown',
]);

/** The trimmed value, or undefined when nvidia-smi says it has none (`N/A`, `[Insufficient Permissions]`, …). */
export function known(raw: string | undefined): string | undefined {
  if (raw === undefined) return undefined;
  const v = raw.trim();
  // CSV brackets every missing value (`[N/A]`); XML writes it bare. Both mean the same.
  const bare = v.startsWith('[') && v.endsWith(']') ? v.slice(1, -1).trim() : v;
  return unknownWords.has(bare.toLowerCase()) ? undefined : v;
}

/** A number with an optional unit suffix (`19968 MiB`, `67.03 W`, `27 C`, `0 %`), or undefined. */
export function numberOf(raw: string | undefined): number | undefined {
  const v = known(raw);
  if (v === undefined) return undefined;
  // Anonymised captures write sizes as letters ("A MiB"): no number, so unknown rather than NaN.
  const m = /^(-?\d+(?:\.\d+)?)(?:\s*(?:MiB|W|C|%|MHz|mV|bank\(s\)|us|ms))?$/.exec(v);
  return m === null ? undefined : Number(m[1]);
}

/** A non-negative integer (ids, counts), or undefined. */
export function integerOf(raw: string | undefined): number | undefined {
  const n = numberOf(raw);
  return n !== undefined && Number.isInteger(n) && n >= 0 ? n : undefined;
}

/** `Yes`/`No` as nvidia-smi writes flags, or undefined. */
export function flagOf(raw: string | undefined): boolean | undefined {
  const v = known(raw)?.toLowerCase();
  if (v === 'yes') return true;
  if (v === 'no') return false;
  return undefined;
}

/** A PCI bus id with a 4-digit domain: nvidia-smi writes 8 digits, llama.cpp 4. */
export function normaliseBusId(raw: string | undefined): string | undefined {
  const v = known(raw);
  if (v === undefined) return undefined;
  const m = /^([0-9A-Fa-f]+):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})\.([0-7])$/.exec(v);
  if (m === null) return undefined;
  const [, domain = '', bus = '', dev = '', fn = ''] = m;
  return `${domain.slice(-4).padStart(4, '0')}:${bus}:${dev}.${fn}`.toLowerCase();
}
