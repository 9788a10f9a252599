// What engine tests import from the code under test, in one place.
export * from '../../src/engines/index.js';
export { hasCode } from '../../src/errors/index.js';
export type { Issues } from '../../src/config/index.js';
