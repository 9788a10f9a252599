// What a tool-calling chat costs to render in the gateway's pool (promptTextOf: the tools read
// from the body's text, arguments json.loads'ed, Qwen3's compiled template), with numbers written
// as JavaScript writes them, beside the same chat written with numbers only Python writes that way
// (1.0, 1e+16, an integer past 2^53), which are kept as Python's text, and beside the chat with
// no tools at all. Run alternately, so the ratios hold on a machine shared with other work.
// Run: npx tsc -p . && node dist/bench/tool-render.js [--quick]   (writes bench/results/tool-render.json)
import { mkdirSync, writeFileSync } from 'node:fs';
import { availableParallelism, cpus, loadavg } from 'node:os';
import { hfModel, promptTextOf, type TokenizerModel } from '../src/tokenize/index.js';

const quick = process.argv.includes('--quick');
const TURNS = 10;
const BATCH = quick ? 10 : 100;
const ROUNDS = quick ? 6 : 60;

const round = (v: number, d = 4): number => Math.round(v * 10 ** d) / 10 ** d;
const p50 = (xs: readonly number[]): number => [...xs].sort((a, b) => a - b)[xs.length >> 1] ?? NaN;

// A chat of TURNS tool calls and answers; `n` writes each number the way the variant does.
function body(n: { one: string; big: string; ratio: string }, withTools: boolean): string {
  const tool = (name: string): string =>
    `{"type": "function", "function": {"name": "${name}", "description": "Look up ${name}", "parameters": {"type": "object", "properties": ` +
    `{"city": {"type": "string"}, "days": {"type": "integer", "minimum": ${n.one}, "maximum": 14}, "ratio": {"type": "number", "minimum": ${n.ratio}}}, "required": ["city"]}}}`;
  const messages = ['{"role": "system", "content": "You are a helpful assistant."}'];
  for (let t = 0; t < TURNS; t++) {
    const args = JSON.stringify(`{"city": "City ${t}", "days": ${n.one}, "id": ${n.big}, "ratio": ${n.ratio}, "units": ["c", "f"]}`);
    messages.push(
      `{"role": "user", "content": "What is the weather in city ${t} for the next days? Please be precise and brief."}`,
      `{"role": "assistant", "content": "", "tool_calls": [{"id": "call_${t}", "type": "function", "function": {"name": "get_weather", "arguments": ${args}}}]}`,
      `{"role": "tool", "tool_call_id": "call_${t}", "content": "{\\"temp\\": 21.5, \\"sky\\": \\"clear\\"}"}`,
      `{"role": "assistant", "content": "It is 21.5 C and clear in City ${t}."}`,
    );
  }
  messages.push('{"role": "user", "content": "And tomorrow?"}');
  const tools = withTools ? `, "tools": [${['get_weather', 'get_time', 'get_news'].map(tool).join(', ')}]` : '';
  return `{"model": "qwen3", "messages": [${messages.join(', ')}]${tools}}`;
}

function msPerRender(model: TokenizerModel, text: string): number {
  const raw = Buffer.from(text);
  const t0 = performance.now();
  for (let i = 0; i < BATCH; i++) promptTextOf('chat', JSON.parse(text), model, raw);
  return (performance.now() - t0) / BATCH;
}

async function main(): Promise<void> {
  const model = await hfModel('qwen3');
  const variants = {
    ordinary: body({ one: '1', big: '9007199254740991', ratio: '0.5' }, true),
    pythonNumbers: body({ one: '1.0', big: '12345678901234567890', ratio: '1e16' }, true),
    noTools: body({ one: '1', big: '9007199254740991', ratio: '0.5' }, false),
  };
  const times: Record<keyof typeof variants, number[]> = { ordinary: [], pythonNumbers: [], noTools: [] };
  const names = Object.keys(variants) as (keyof typeof variants)[];
  // Warm-up also spends the template's first renders, which are checked against the interpreter.
  for (let i = 0; i < 10; i++) for (const k of names) msPerRender(model, variants[k]);
  for (let r = 0; r < ROUNDS; r++) {
    const order = r % 2 === 0 ? names : [...names].reverse();
    for (const k of order) times[k].push(msPerRender(model, variants[k]));
  }
  const out = {
    bench: 'tool-render',
    quick,
    when: new Date().toISOString(),
    machine: { cpus: availableParallelism(), model: cpus()[0]?.model ?? 'unknown', loadavg: loadavg().map((v) => round(v, 2)), shared: true },
    node: process.version,
    bodyBytes: Buffer.byteLength(variants.ordinary),
    messages: 2 + 4 * TURNS,
    p50Ms: { ordinary: round(p50(times.ordinary)), pythonNumbers: round(p50(times.pythonNumbers)), noTools: round(p50(times.noTools)) },
    pythonNumbersOverOrdinary: round(p50(times.pythonNumbers) / p50(times.ordinary), 3),
    ordinaryOverNoTools: round(p50(times.ordinary) / p50(times.noTools), 3),
  };
  console.log(
    `tool chat of ${out.messages} messages (${out.bodyBytes} bytes), promptTextOf p50: ${out.p50Ms.ordinary} ms; the same written with numbers only Python writes so ` +
      `${out.p50Ms.pythonNumbers} ms (${out.pythonNumbersOverOrdinary}x); without its tools ${out.p50Ms.noTools} ms (tools cost ${out.ordinaryOverNoTools}x)`,
  );
  mkdirSync(new URL('../../bench/results/', import.meta.url), { recursive: true });
  const file = quick ? 'tool-render-quick.json' : 'tool-render.json';
  writeFileSync(new URL(`../../bench/results/${file}`, import.meta.url), JSON.stringify(out, null, 2) + '\n');
  console.log(`wrote bench/results/${file}`);
}

await main();
