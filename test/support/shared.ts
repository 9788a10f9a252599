// Where the project's shared material (specs, golden vectors, captured tool outputs) lives: beside
// the repository as every checkout and CI lay it out (../shared), or where LLMGW_SHARED points.
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root (this file runs from dist/test/support). */
export const repoRoot = fileURLToPath(new URL('../../../', import.meta.url));

/** The shared/ folder. */
export const sharedDir = process.env.LLMGW_SHARED ?? join(repoRoot, '..', 'shared');
