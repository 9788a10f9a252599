// The thread a request's chat template renders on, so a template that loops for a minute stalls
// only this thread, which the sim terminates at its deadline.
import { parentPort, workerData } from 'node:worker_threads';
import { renderChat } from '../tokenize/index.js';
import type { RenderJob, RenderReply } from './chat-template.js';

const job = workerData as RenderJob;
let reply: RenderReply;
try {
  reply = { ok: true, text: renderChat(job.cfg, job.messages, job.o) };
} catch (e) {
  reply = { ok: false, reason: e instanceof Error ? e.message : String(e) };
}
parentPort?.postMessage(reply);
