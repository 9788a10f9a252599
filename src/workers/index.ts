// Public surface of workers/: the pool the router uses to tokenize, hash and score prompts off the event loop.
export { HashPool, type HashPoolOptions, type ScoreResult, type TokenizeResult } from './pool.js';
export type { HashTask, ScoreTask, TaskResult, TokenizeTask } from './task-runner.js';
