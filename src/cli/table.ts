// The plain-text tables the ctl commands print.

/** A row printer for `cells` under `head`: every column but the last padded to its widest cell, two spaces apart. */
export function columns(head: readonly string[], cells: readonly (readonly string[])[]): (row: readonly string[]) => string {
  const width = head.map((h, i) => Math.max(h.length, ...cells.map((c) => (c[i] ?? '').length)));
  return (row) => row.map((x, i) => (i === row.length - 1 ? x : x.padEnd(width[i] ?? 0))).join('  ').trimEnd();
}
