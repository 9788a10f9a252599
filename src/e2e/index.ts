// The end-to-end routing bench: workloads, the oracle, the fleet, the driver and the report.
export { runE2e, traceTokens } from './e2e.js';
export type { E2eOptions, E2eReport, OracleSummary } from './e2e.js';
export { driveTrace } from './drive.js';
export type { RequestResult } from './drive.js';
export { fleetConfig, startFleet } from './fleet.js';
export type { BenchEngine, Fleet, FleetOptions } from './fleet.js';
export { distinctBlocks, oracle } from './oracle.js';
export type { OracleFleet, OracleRequest, OracleResult } from './oracle.js';
export { chartSvg, percentiles, summarise } from './report.js';
export type { Percentiles, RunSummary } from './report.js';
export { generateTrace, prng, shapes, workloadDefaults } from './workload.js';
export type { BenchMessage, Shape, Trace, TraceRequest, WorkloadOptions } from './workload.js';
export { pdWorkload, runPd } from './pd.js';
export type { PdOptions, PdReport, PdRun } from './pd.js';
