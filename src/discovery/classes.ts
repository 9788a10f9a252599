// Device classes: the names catalog profiles ask for (`gpu_class: a100-80g`). A whole card's class is
// its product and memory; a MIG instance's is its card's plus the profile nvidia-smi -L prints.

// Words that name a form factor, brand or memory technology rather than the chip. Two A100 80GB
// cards, SXM4 and PCIe, run the same profiles, so they share a class.
const noise = new Set(['nvidia', 'tesla', 'geforce', 'sxm', 'sxm2', 'sxm4', 'sxm5', 'pcie', 'hbm2', 'hbm2e', 'hbm3', 'hbm3e']);

/**
 * The class of a whole card: `NVIDIA A100-SXM4-80GB` -> `a100-80g`. The memory comes from the product
 * name when it carries one (`80GB`), else from the total in MiB rounded to GiB; without either the
 * class is the product alone.
 */
export function cardClass(productName: string, memoryTotalMib: number | undefined): string {
  const words = productName
    .toLowerCase()
    .split(/[\s\-_/]+/)
    .filter((w) => w !== '');
  let gb: number | undefined;
  const kept: string[] = [];
  for (const w of words) {
    const m = /^(\d+)gb$/.exec(w);
    if (m !== null) gb = Number(m[1]);
    else if (!noise.has(w)) kept.push(w.replace(/[^a-z0-9.]/g, ''));
  }
  if (gb === undefined && memoryTotalMib !== undefined && memoryTotalMib > 0) gb = Math.round(memoryTotalMib / 1024);
  const product = kept.filter((w) => w !== '').join('-');
  return gb === undefined ? product : `${product}-${gb}g`;
}

/** The class of a MIG instance: the card's class, `-mig-`, and the profile exactly as -L names it. */
export function migClass(cardClassName: string, profile: string): string {
  return `${cardClassName}-mig-${profile}`;
}

/** True when a class names MIG instances, whose replicas get exactly one instance. */
export function isMigClass(cls: string): boolean {
  return cls.includes('-mig-');
}
