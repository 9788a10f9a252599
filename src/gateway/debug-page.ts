// The debug page itself: plain HTML, CSS and one small script, served whole by the gateway (no
// build step, nothing fetched from anywhere else). Machine charts arrive drawn, as SVG templates;
// the script clones one per actor, lights its active states and follows `/debug/actors/events`.

const style = `
:root { color-scheme: light; --ink: #1d2733; --muted: #5b6675; --line: #d5dbe3; --bg: #f4f6f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: var(--ink); background: var(--bg); }
header { position: sticky; top: 0; z-index: 2; display: flex; gap: 16px; align-items: center; padding: 10px 20px; background: #1d2733; color: #fff; }
header h1 { font-size: 16px; margin: 0; font-weight: 600; }
#live { font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #8a6d00; }
#live.on { background: #1c7c3c; }
main { padding: 16px 20px; }
.actor { background: #fff; border: 1px solid var(--line); border-left: 5px solid var(--line); border-radius: 6px; margin: 10px 0; padding: 10px 12px; }
.actor .children { margin-left: 18px; }
.head { display: flex; flex-wrap: wrap; gap: 10px; align-items: baseline; }
.kind { font-size: 11px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); }
.id { font-family: monospace; font-weight: 600; }
.phase { font-family: monospace; padding: 1px 8px; border-radius: 10px; background: #e3e8ef; }
.since, .reason { color: var(--muted); font-size: 13px; }
.reason { flex-basis: 100%; color: #9b1c1c; }
.reason:empty { display: none; }
.detail { flex-basis: 100%; font-size: 12px; color: var(--muted); }
.detail pre { margin: 4px 0 0; white-space: pre-wrap; word-break: break-all; font-size: 11px; }
.body { display: flex; flex-wrap: wrap; gap: 14px; margin-top: 8px; }
.chart { flex: 1 1 100%; overflow: auto; border: 1px solid var(--line); border-radius: 4px; background: #fbfcfd; }
.chart svg { display: block; max-width: 100%; height: auto; }
.side { flex: 1 1 100%; min-width: 0; display: flex; flex-wrap: wrap; gap: 16px; }
.side > div { flex: 1 1 380px; min-width: 0; }
.side h3 { font-size: 12px; text-transform: uppercase; color: var(--muted); margin: 4px 0; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
td { border-top: 1px solid var(--line); padding: 2px 6px 2px 0; vertical-align: top; }
td.t { font-family: monospace; white-space: nowrap; color: var(--muted); }
td.move { font-family: monospace; white-space: nowrap; }
pre.tail { max-height: 220px; overflow: auto; background: #1d2733; color: #d7e0ea; padding: 8px; font-size: 11px; border-radius: 4px; white-space: pre-wrap; }
pre.tail:empty::before { content: 'no output yet'; color: #8894a3; }
[data-phase=ready] { border-left-color: #1c7c3c; } [data-phase=ready] > .head .phase { background: #cdeed8; }
[data-phase=streaming], [data-phase=running] { border-left-color: #1c7c3c; }
[data-phase=failed], [data-phase=given-up] { border-left-color: #b42318; } [data-phase=failed] > .head .phase { background: #f8d4d0; }
[data-phase=cpu-fallback] { border-left-color: #c4570c; } [data-phase=cpu-fallback] > .head .phase { background: #fde2c8; }
[data-phase=starting], [data-phase=loading], [data-phase=waiting-for-leader], [data-phase=adopted], [data-phase=checking-devices], [data-phase=binding], [data-phase=waiting], [data-phase=resyncing] { border-left-color: #2f6fd0; }
[data-phase=stopped] { opacity: .6; }
svg .state.active > rect { fill: #fff4cc; stroke: #b07d00; stroke-width: 1.6; }
svg .state.current > rect { fill: #ffd34d; stroke: #8a5a00; stroke-width: 2.4; }
`;

const script = `
'use strict';
const actors = new Map();
const tails = new Map();
let skew = 0;
const main = document.querySelector('main');
const live = document.getElementById('live');
const ago = (at) => {
  const s = Math.max(0, Math.round((Date.now() - skew - at) / 1000));
  return s < 120 ? s + ' s' : s < 7200 ? Math.round(s / 60) + ' min' : Math.round(s / 3600) + ' h';
};
const clock = (at) => new Date(at).toLocaleTimeString();
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function card(a) {
  let c = document.querySelector('[data-actor="' + CSS.escape(a.id) + '"]');
  if (c) return c;
  c = el('section', 'actor');
  c.dataset.actor = a.id;
  c.dataset.kind = a.kind;
  const head = el('div', 'head');
  // The reason is one line; the command that failed and the advice are one click away.
  const detail = el('details', 'detail');
  detail.append(el('summary', '', 'details'), el('pre'));
  head.append(el('span', 'kind', a.kind), el('span', 'id', a.id), el('span', 'phase'), el('span', 'since'), el('span', 'reason'), detail);
  const body = el('div', 'body');
  const chart = el('div', 'chart');
  const tpl = document.getElementById('chart-' + a.machine);
  if (tpl) chart.append(tpl.content.cloneNode(true));
  const side = el('div', 'side');
  const moves = el('div');
  moves.append(el('h3', '', 'recent transitions'), el('table', 'transitions'));
  side.append(moves);
  if (a.kind === 'shard') {
    const log = el('div');
    log.append(el('h3', '', 'last log lines'), el('pre', 'tail'));
    side.append(log);
  }
  body.append(chart, side);
  c.append(head, body, el('div', 'children'));
  const parent = a.parent && document.querySelector('[data-actor="' + CSS.escape(a.parent) + '"] > .children');
  (parent || main).append(c);
  // Children that arrived before their parent move under it now.
  for (const o of actors.values()) {
    if (o.parent !== a.id) continue;
    const child = document.querySelector('[data-actor="' + CSS.escape(o.id) + '"]');
    if (child && child.parentElement !== c.lastChild) c.lastChild.append(child);
  }
  return c;
}
function render(a) {
  actors.set(a.id, a);
  const c = card(a);
  c.dataset.phase = a.phase;
  c.dataset.status = a.status;
  const head = c.firstChild;
  head.querySelector('.phase').textContent = a.phase;
  head.querySelector('.since').textContent = 'for ' + ago(a.since);
  head.querySelector('.reason').textContent = a.reason || '';
  const detail = head.querySelector('.detail');
  detail.hidden = !a.detail;
  detail.querySelector('pre').textContent = a.detail || '';
  const leaf = a.states[a.states.length - 1];
  for (const g of c.querySelectorAll(':scope > .body .chart g.state')) {
    const p = g.dataset.state;
    g.classList.toggle('active', p === '' ? a.status === 'active' : a.states.includes(p));
    g.classList.toggle('current', p === leaf);
  }
  const table = c.querySelector(':scope > .body .transitions');
  table.replaceChildren(...a.transitions.slice().reverse().map((t) => {
    const tr = el('tr');
    tr.append(el('td', 't', clock(t.at)), el('td', 'move', (t.from || '·') + ' → ' + t.to), el('td', 'ev', t.event || ''), el('td', 'why', t.reason || ''));
    return tr;
  }));
  if (a.kind === 'shard') loadTail(a.id);
}
async function loadTail(id) {
  const last = tails.get(id) || 0;
  if (Date.now() - last < 2000) return;
  tails.set(id, Date.now());
  try {
    const r = await fetch('/debug/actors/tail?actor=' + encodeURIComponent(id), { credentials: 'same-origin' });
    if (!r.ok) return;
    const body = await r.json();
    const pre = document.querySelector('[data-actor="' + CSS.escape(id) + '"] pre.tail');
    if (pre) pre.textContent = body.lines.join('\\n');
  } catch (e) {
    // The next change of the shard asks again.
  }
}
function connect() {
  const es = new EventSource('/debug/actors/events');
  es.addEventListener('open', () => { live.textContent = 'live'; live.classList.add('on'); });
  es.addEventListener('error', () => { live.textContent = 'reconnecting'; live.classList.remove('on'); });
  es.addEventListener('actors', (e) => {
    const d = JSON.parse(e.data);
    skew = Date.now() - d.now;
    for (const a of d.actors) render(a);
    document.getElementById('count').textContent = actors.size + ' actors';
  });
  es.addEventListener('actor', (e) => {
    render(JSON.parse(e.data));
    document.getElementById('count').textContent = actors.size + ' actors';
  });
}
setInterval(() => {
  for (const a of actors.values()) {
    const s = document.querySelector('[data-actor="' + CSS.escape(a.id) + '"] > .head .since');
    if (s) s.textContent = 'for ' + ago(a.since);
  }
}, 1000);
connect();
`;

const escapeAttr = (s: string): string => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');

/** The page, with each machine's chart (SVG, keyed by machine id) as a template the script clones per actor. */
export function debugPage(charts: Readonly<Record<string, string>>): string {
  const templates = Object.entries(charts)
    .map(([machine, svg]) => `<template id="chart-${escapeAttr(machine)}">${svg}</template>`)
    .join('\n');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<title>llmgw actors</title>
<style>${style}</style>
</head>
<body>
<header><h1>llmgw · actors</h1><span id="live">connecting</span><span id="count"></span></header>
<main></main>
${templates}
<script>${script}</script>
</body>
</html>
`;
}
