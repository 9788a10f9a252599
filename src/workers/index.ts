// Public surface of workers/: the pool the router uses to hash and score prompts off the event loop.
export { HashPool, type HashPoolOptions, type ScoreResult } from './pool.js';
export type { HashTask, ScoreTask, TaskResult } from './tasks.js';
