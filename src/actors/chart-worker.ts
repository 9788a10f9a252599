// The thread chart-thread.ts starts: draws every machine's chart and hands the SVGs back.
import { parentPort } from 'node:worker_threads';
import { allCharts } from './board.js';
import { toSvg } from './chart-draw.js';

parentPort?.postMessage(Object.fromEntries(allCharts().map((c) => [c.machine, toSvg(c)])));
