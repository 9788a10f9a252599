// What `llmgw serve` and `llmgw agent` tell their operator while they start, as log events: where
// the gateway listens and the page that shows each step (serve.listening), each replica's step
// (serve.replica), every 15 s which are still on their way (serve.waiting), and once all serve, the
// URL and a curl to try (serve.ready).
// Events rather than lines of their own on stdout: the JSON log holds them for a script to wait on,
// a terminal shows them among the other lines, and `--status` copies them to stdout.
import type { ActorBoard, ActorView } from '../actors/index.js';
import { createLogger, teeLogger, type Logger } from '../log/index.js';

/**
 * The logger for status events: `log`, and with `--status` stdout too, in the terminal form whatever
 * the log's is (a person asked for it; the log, perhaps JSON in a file, is for machines).
 */
export function statusLogger(log: Logger, toStdout: boolean): Logger {
  if (!toStdout) return log;
  const stdout = createLogger({ format: 'pretty', color: process.stdout.isTTY, sink: (line) => process.stdout.write(`${line}\n`) });
  return teeLogger(log, stdout);
}

/** serve.ready's fields: where the gateway is, what it serves, and a request to paste. */
export function readyFields(o: { url: URL; replicas: number; models: readonly string[]; keyed: boolean }): Record<string, unknown> {
  const auth = o.keyed ? ` -H 'Authorization: Bearer YOUR_KEY'` : '';
  const body = JSON.stringify({ model: o.models[0] ?? 'MODEL', messages: [{ role: 'user', content: 'Hello' }] });
  return {
    url: o.url.href,
    replicas: o.replicas,
    models: o.models,
    try: `curl -s ${new URL('/v1/chat/completions', o.url).href} -H 'Content-Type: application/json'${auth} -d '${body}'`,
  };
}

const replicaName = (a: ActorView): string => a.id.slice('replica:'.length);

/**
 * serve.waiting's fields: every replica not yet ready with its phase and how long it has been in it,
 * and the longest waiting one apart, what a terminal line has room for (the page of each step is on
 * serve.listening: beside a long replica name it took the line past 160 columns); undefined when
 * none is waiting.
 */
export function waitingFields(actors: readonly ActorView[], now: number): Record<string, unknown> | undefined {
  const waiting = actors.filter((a) => a.kind === 'replica' && a.phase !== 'ready').map((a) => ({ replica: replicaName(a), phase: a.phase, waitedMs: now - a.since }));
  const longest = waiting.reduce<(typeof waiting)[number] | undefined>((l, w) => (l === undefined || w.waitedMs > l.waitedMs ? w : l), undefined);
  if (longest === undefined) return undefined;
  return { waiting, longest: longest.replica, phase: longest.phase, waitedMs: longest.waitedMs };
}

const PROGRESS_EVERY_MS = 15_000;

/**
 * Until `done`, logs each replica's phase when it changes (serve.replica), and every 15 s which are
 * still on their way (serve.waiting): loading a model takes minutes, and a silent terminal looks like
 * a hang. Returns the stop.
 */
export function reportProgress(board: ActorBoard, log: Logger, done: () => boolean): () => void {
  const said = new Map<string, string>();
  const unsubscribe = board.subscribe((a) => {
    if (done() || a.kind !== 'replica' || said.get(a.id) === a.phase) return;
    said.set(a.id, a.phase);
    log.info({ replica: replicaName(a), phase: a.phase, reason: a.reason }, 'serve.replica');
  });
  const timer = setInterval(() => {
    if (done()) return;
    const fields = waitingFields(board.actors(), Date.now());
    if (fields !== undefined) log.info(fields, 'serve.waiting');
  }, PROGRESS_EVERY_MS);
  return () => {
    clearInterval(timer);
    unsubscribe();
  };
}
