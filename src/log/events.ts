// A JSON log read back: what waits on a process's events (the bench and the tests waiting for
// serve.ready) finds them by name here, the one place that knows how a line is laid out.

/** The records named `msg` among the complete lines of a JSON log; a last line still being written is left for the next read. */
export function loggedEvents(text: string, msg: string): Record<string, unknown>[] {
  const name = `"msg":${JSON.stringify(msg)}`;
  const lines = text.split('\n');
  lines.pop();
  return lines.filter((l) => l.startsWith('{') && l.includes(name)).flatMap((l) => {
    const o: unknown = JSON.parse(l);
    return typeof o === 'object' && o !== null && !Array.isArray(o) && (o as { msg?: unknown }).msg === msg ? [o as Record<string, unknown>] : [];
  });
}
