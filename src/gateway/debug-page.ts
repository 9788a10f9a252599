// The debug page itself: plain HTML, CSS and one small script, served whole by the gateway (no
// build step, nothing fetched from anywhere else). It opens on the cluster at a glance: one row per
// node, in it a cell per replica holding the badges of the replica, its shards and its publisher.
// An operator with 8 nodes of 8 replicas looks for the one that is not ready; the charts that used
// to be stacked in full (5,000 px for two replicas) are one click away, in a dialog. Machine charts
// arrive drawn, as SVG templates; the script clones the one it shows, lights its active states and
// follows `/debug/actors/events`.

const style = `
:root { color-scheme: light; --ink: #1d2733; --muted: #5b6675; --line: #d5dbe3; --bg: #f4f6f9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.4 system-ui, sans-serif; color: var(--ink); background: var(--bg); }
header { position: sticky; top: 0; z-index: 2; display: flex; flex-wrap: wrap; gap: 8px 14px; align-items: center; padding: 8px 16px; background: #1d2733; color: #fff; }
header h1 { font-size: 16px; margin: 0; font-weight: 600; }
#live { font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #8a6d00; }
#live.on { background: #1c7c3c; }
#count { font-size: 13px; color: #c9d3df; }
#filter { font: 13px system-ui, sans-serif; padding: 3px 8px; width: 240px; border-radius: 4px; border: 1px solid #51606f; }
#states { display: flex; flex-wrap: wrap; gap: 4px; }
#states button { font: 12px system-ui, sans-serif; color: #fff; background: #33414f; border: 1px solid #51606f; border-radius: 10px; padding: 1px 9px; cursor: pointer; }
#states button[aria-pressed=true] { background: #fff; color: var(--ink); }
main { padding: 10px 16px; }
.row { display: grid; grid-template-columns: 100px 1fr; gap: 4px; margin: 0 0 6px; padding: 6px; background: #fff; border: 1px solid var(--line); border-radius: 6px; }
.row[hidden], .cell[hidden] { display: none; }
.lead .loose { font-size: 12px; color: var(--muted); }
.cells { display: grid; grid-template-columns: repeat(auto-fill, minmax(130px, 1fr)); gap: 4px; }
.cell { display: flex; flex-direction: column; gap: 2px; min-width: 0; padding: 2px; border: 1px solid var(--line); border-radius: 4px; background: #fbfcfd; }
.badge { display: flex; flex-wrap: wrap; align-items: baseline; gap: 0 5px; width: 100%; min-width: 0; margin: 0; padding: 1px 4px; text-align: left; font: 12px/1.35 system-ui, sans-serif; color: var(--ink); background: #eef1f5; border: 0; border-left: 3px solid #9aa6b4; border-radius: 3px; cursor: pointer; }
.badge:hover, .badge:focus-visible { outline: 2px solid #2f6fd0; outline-offset: -1px; }
.badge .name { flex: 1 1 100%; min-width: 0; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; font: 600 12px/1.35 ui-monospace, monospace; }
.badge[data-kind=shard] .name, .badge[data-kind=publisher] .name { font-weight: 400; }
.badge .phase { font-weight: 600; }
.badge .since { color: var(--muted); }
/* Two lines of reason: "vllm exited with code 1: torch.OutOfMemoryError…" says enough; the dialog has the rest. */
.badge .reason { flex: 1 1 100%; min-width: 0; display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2; overflow: hidden; overflow-wrap: anywhere; color: #9b1c1c; }
.badge .reason:empty { display: none; }
.badge[data-tone=ok] { background: #e4f5ea; border-left-color: #1c7c3c; }
.badge[data-tone=busy] { background: #e3edfb; border-left-color: #2f6fd0; }
.badge[data-tone=warn] { background: #fdecd9; border-left-color: #c4570c; }
.badge[data-tone=bad] { background: #fbe1de; border-left-color: #b42318; }
.badge[data-tone=off] { background: #eef1f5; border-left-color: #9aa6b4; color: var(--muted); }
.badge.selected { outline: 2px solid #1d2733; outline-offset: -1px; }
dialog { width: min(1500px, calc(100vw - 32px)); max-height: calc(100vh - 32px); padding: 0; border: 1px solid var(--line); border-radius: 6px; }
dialog::backdrop { background: rgba(29, 39, 51, .45); }
.sheet { padding: 12px 16px; }
.head { display: flex; flex-wrap: wrap; gap: 10px; align-items: baseline; }
.head .kind { font-size: 12px; text-transform: uppercase; letter-spacing: .05em; color: var(--muted); }
.head .id { font-family: ui-monospace, monospace; font-weight: 600; }
.head .phase { font-family: ui-monospace, monospace; padding: 1px 8px; border-radius: 10px; background: #e3e8ef; }
.head .since { color: var(--muted); font-size: 13px; }
.head .fit { margin-left: auto; }
.head .fit, .head .close { font: 13px system-ui, sans-serif; cursor: pointer; }
.head .reason { flex-basis: 100%; color: #9b1c1c; font-size: 13px; }
.head .reason:empty { display: none; }
.detail { flex-basis: 100%; font-size: 12px; color: var(--muted); }
.detail pre { margin: 4px 0 0; white-space: pre-wrap; word-break: break-all; font-size: 12px; }
/* The drawing's own svg has the class chart too: the frame has a name of its own. */
.drawing { margin-top: 8px; overflow: auto; max-height: 62vh; border: 1px solid var(--line); border-radius: 4px; background: #fbfcfd; }
.drawing svg { display: block; }
.side { display: flex; flex-wrap: wrap; gap: 16px; margin-top: 8px; }
.side > div { flex: 1 1 380px; min-width: 0; }
.side h3 { font-size: 12px; text-transform: uppercase; color: var(--muted); margin: 4px 0; }
table { border-collapse: collapse; width: 100%; font-size: 12px; }
td { border-top: 1px solid var(--line); padding: 2px 6px 2px 0; vertical-align: top; }
td.t { font-family: ui-monospace, monospace; white-space: nowrap; color: var(--muted); }
td.move { font-family: ui-monospace, monospace; white-space: nowrap; }
pre.tail { max-height: 220px; overflow: auto; background: #1d2733; color: #d7e0ea; padding: 8px; font-size: 12px; border-radius: 4px; white-space: pre-wrap; }
pre.tail:empty::before { content: 'no output yet'; color: #8894a3; }
svg .state.active > rect { fill: #fff4cc; stroke: #b07d00; stroke-width: 1.6; }
svg .state.current > rect { fill: #ffd34d; stroke: #8a5a00; stroke-width: 2.4; }
`;

const script = `
'use strict';
const actors = new Map();
const badges = new Map();
const tails = new Map();
let skew = 0;
let stateFilter = 'all';
let layoutQueued = false;
const grid = document.getElementById('grid');
const live = document.getElementById('live');
const filterBox = document.getElementById('filter');
const statesBar = document.getElementById('states');
const dialog = document.getElementById('detail');
// The phases in which an actor does its job: every other one is what "not ready" shows.
const fine = new Set(['ready', 'streaming', 'running', 'up']);
const tones = { ready: 'ok', streaming: 'ok', running: 'ok', up: 'ok', failed: 'bad', 'given-up': 'bad', unknown: 'bad', silent: 'bad', 'cpu-fallback': 'warn', draining: 'warn', stopping: 'warn', stopped: 'off' };
const kindRank = { node: 0, replica: 1, shard: 2, publisher: 3 };
const ago = (at) => {
  const s = Math.max(0, Math.round((Date.now() - skew - at) / 1000));
  return s < 120 ? s + ' s' : s < 7200 ? Math.round(s / 60) + ' min' : Math.round(s / 3600) + ' h';
};
const clock = (at) => new Date(at).toLocaleTimeString();
const bare = (id) => id.slice(id.indexOf(':') + 1);
// Numbers in ids sort as numbers: replica 9 before replica 10.
const byKindThenId = (a, b) => (kindRank[a.kind] ?? 9) - (kindRank[b.kind] ?? 9) || a.id.localeCompare(b.id, 'en', { numeric: true });
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
// Inside its replica's cell a shard needs only what follows the replica's id, and a publisher is
// named after its replica: the short name keeps eight cells side by side at 1280 px.
function nameOf(a) {
  const own = bare(a.id);
  const parent = a.parent ? bare(a.parent) : '';
  if (a.kind === 'node') return 'node ' + own;
  if (a.kind === 'publisher' && own === parent) return 'publisher';
  if (parent && own.startsWith(parent + '-')) return a.kind + ' ' + own.slice(parent.length + 1);
  return own;
}
function badge(a) {
  let b = badges.get(a.id);
  if (b) return b;
  b = el('button', 'badge');
  b.type = 'button';
  b.dataset.actor = a.id;
  b.dataset.kind = a.kind;
  b.append(el('span', 'name'), el('span', 'phase'), el('span', 'since'), el('span', 'reason'));
  badges.set(a.id, b);
  return b;
}
function paint(a) {
  const b = badge(a);
  b.dataset.phase = a.phase;
  b.dataset.tone = tones[a.phase] || 'busy';
  b.querySelector('.name').textContent = nameOf(a);
  b.querySelector('.phase').textContent = a.phase;
  b.querySelector('.since').textContent = ago(a.since);
  b.querySelector('.reason').textContent = a.reason || '';
  b.title = a.id + ' · ' + a.phase + (a.reason ? '\\n' + a.reason : '');
}
// A node is a row; each actor under it (a replica, or anything reported straight under the node)
// heads a cell holding it and everything below it. What has no node (yet) gets a row of its own.
function layout() {
  const sorted = [...actors.values()].sort(byKindThenId);
  const below = new Map();
  for (const a of sorted) {
    if (!a.parent || !actors.has(a.parent)) continue;
    if (!below.has(a.parent)) below.set(a.parent, []);
    below.get(a.parent).push(a);
  }
  const descendants = (a) => (below.get(a.id) || []).flatMap((k) => [k, ...descendants(k)]);
  const cell = (head) => {
    const c = el('div', 'cell');
    c.append(...[head, ...descendants(head).sort(byKindThenId)].map((a) => badge(a)));
    return c;
  };
  const row = (node, heads) => {
    const r = el('section', 'row');
    const lead = el('div', 'lead');
    if (node) {
      r.dataset.node = node.id;
      lead.append(badge(node));
    } else lead.append(el('span', 'loose', 'not under a node'));
    const cells = el('div', 'cells');
    cells.append(...heads.map(cell));
    r.append(lead, cells);
    return r;
  };
  const rows = sorted.filter((a) => a.kind === 'node').map((n) => row(n, below.get(n.id) || []));
  const loose = sorted.filter((a) => a.kind !== 'node' && (!a.parent || !actors.has(a.parent)));
  if (loose.length > 0) rows.push(row(undefined, loose));
  grid.replaceChildren(...rows);
  if (rows.length === 0) grid.append(el('p', '', 'no actors yet'));
}
const textOf = (a) => (a.id + ' ' + a.phase + ' ' + (a.reason || '')).toLowerCase();
const wanted = (a) => stateFilter === 'all' || (stateFilter === 'not-ready' ? !fine.has(a.phase) : a.phase === stateFilter);
// A cell shows when every word typed is somewhere in it or its node, and it or its node is in the
// state asked for: a silent node's replicas all show under "not ready", since none of them routes.
function applyFilter() {
  const words = filterBox.value.toLowerCase().split(/\\s+/).filter(Boolean);
  for (const r of grid.querySelectorAll('.row')) {
    const node = actors.get(r.dataset.node);
    const nodeText = node ? textOf(node) : '';
    let anyCell = false;
    for (const c of r.querySelectorAll('.cell')) {
      const members = [...c.querySelectorAll('.badge')].map((b) => actors.get(b.dataset.actor));
      const text = nodeText + ' ' + members.map(textOf).join(' ');
      c.hidden = !(words.every((w) => text.includes(w)) && (members.some(wanted) || (node !== undefined && wanted(node))));
      anyCell ||= !c.hidden;
    }
    r.hidden = !(anyCell || (node !== undefined && wanted(node) && words.every((w) => nodeText.includes(w))));
  }
  const shown = [...badges.values()].filter((b) => b.isConnected && !b.closest('[hidden]')).length;
  document.getElementById('count').textContent = shown === actors.size ? actors.size + ' actors' : shown + ' of ' + actors.size + ' actors shown';
}
function stateButtons() {
  const counts = new Map();
  for (const a of actors.values()) counts.set(a.phase, (counts.get(a.phase) || 0) + 1);
  const notReady = [...actors.values()].filter((a) => !fine.has(a.phase)).length;
  const choices = [['all', 'all ' + actors.size], ['not-ready', 'not ready ' + notReady], ...[...counts].sort((x, y) => y[1] - x[1]).map(([p, n]) => [p, p + ' ' + n])];
  if (!choices.some(([k]) => k === stateFilter)) stateFilter = 'all';
  statesBar.replaceChildren(...choices.map(([k, label]) => {
    const b = el('button', '', label);
    b.type = 'button';
    b.dataset.state = k;
    b.setAttribute('aria-pressed', String(k === stateFilter));
    return b;
  }));
}
// Every event may add an actor or move one under another parent: the grid is laid out again once
// the event's changes are all in, not once per actor.
function refresh() {
  if (layoutQueued) return;
  layoutQueued = true;
  queueMicrotask(() => {
    layoutQueued = false;
    layout();
    stateButtons();
    applyFilter();
  });
}
function render(a) {
  const before = actors.get(a.id);
  actors.set(a.id, a);
  paint(a);
  if (!before || before.parent !== a.parent || before.phase !== a.phase || before.reason !== a.reason) refresh();
  if (dialog.open && dialog.dataset.shows === a.id) showDetail(a);
}
function sheet(a) {
  const s = el('div', 'sheet');
  const head = el('div', 'head');
  const close = el('button', 'close', 'close');
  close.type = 'button';
  close.addEventListener('click', () => dialog.close());
  // The reason is one line; the command that failed and the advice are one click further.
  const detail = el('details', 'detail');
  detail.append(el('summary', '', 'details'), el('pre'));
  const fit = el('button', 'fit', 'whole chart');
  fit.type = 'button';
  head.append(el('span', 'kind', a.kind), el('span', 'id', a.id), el('span', 'phase'), el('span', 'since'), fit, close, el('span', 'reason'), detail);
  const chart = el('div', 'drawing');
  const tpl = document.getElementById('chart-' + a.machine);
  const svg = tpl && tpl.content.cloneNode(true).querySelector('svg');
  if (svg) {
    // Drawn so that its smallest text (the events, 10 px in the drawing) is 12 px on the screen at
    // 100% zoom, scrolled within the frame; "whole chart" fits it to the dialog for the overview.
    const smallest = Math.min(...[...svg.querySelectorAll('text')].map((t) => parseFloat(t.getAttribute('font-size')) || 12));
    const scale = Math.max(1, 12 / smallest);
    const legible = () => {
      svg.style.width = parseFloat(svg.getAttribute('width')) * scale + 'px';
      svg.style.height = parseFloat(svg.getAttribute('height')) * scale + 'px';
    };
    legible();
    fit.addEventListener('click', () => {
      const whole = fit.textContent === 'whole chart';
      if (whole) {
        svg.style.width = '100%';
        svg.style.height = 'auto';
      } else legible();
      fit.textContent = whole ? 'legible size' : 'whole chart';
    });
    chart.append(svg);
  } else fit.hidden = true;
  const side = el('div', 'side');
  const moves = el('div');
  moves.append(el('h3', '', 'recent transitions'), el('table', 'transitions'));
  side.append(moves);
  if (a.kind === 'shard') {
    const log = el('div');
    log.append(el('h3', '', 'last log lines'), el('pre', 'tail'));
    side.append(log);
  }
  s.append(head, chart, side);
  return s;
}
function showDetail(a) {
  if (dialog.dataset.shows !== a.id) {
    dialog.dataset.shows = a.id;
    dialog.replaceChildren(sheet(a));
  }
  dialog.dataset.phase = a.phase;
  const head = dialog.querySelector('.head');
  head.querySelector('.phase').textContent = a.phase;
  head.querySelector('.since').textContent = 'for ' + ago(a.since);
  head.querySelector('.reason').textContent = a.reason || '';
  const detail = head.querySelector('.detail');
  detail.hidden = !a.detail;
  detail.querySelector('pre').textContent = a.detail || '';
  const leaf = a.states[a.states.length - 1];
  for (const g of dialog.querySelectorAll('.drawing g.state')) {
    const p = g.dataset.state;
    g.classList.toggle('active', p === '' ? a.status === 'active' : a.states.includes(p));
    g.classList.toggle('current', p === leaf);
  }
  dialog.querySelector('.transitions').replaceChildren(...a.transitions.slice().reverse().map((t) => {
    const tr = el('tr');
    tr.append(el('td', 't', clock(t.at)), el('td', 'move', (t.from || '·') + ' → ' + t.to), el('td', 'ev', t.event || ''), el('td', 'why', t.reason || ''));
    return tr;
  }));
  if (a.kind === 'shard') loadTail(a.id);
}
function select(id) {
  const a = actors.get(id);
  if (!a) return;
  for (const b of grid.querySelectorAll('.badge.selected')) b.classList.remove('selected');
  badge(a).classList.add('selected');
  showDetail(a);
  if (!dialog.open) dialog.showModal();
  // A legible chart is bigger than the dialog: it opens on the state the actor is in.
  const current = dialog.querySelector('.drawing g.state.current') || dialog.querySelector('.drawing g.state.active');
  if (current) current.scrollIntoView({ block: 'center', inline: 'center' });
  history.replaceState(null, '', '#' + encodeURIComponent(id));
}
async function loadTail(id) {
  const last = tails.get(id) || 0;
  if (Date.now() - last < 2000) return;
  tails.set(id, Date.now());
  try {
    const r = await fetch('/debug/actors/tail?actor=' + encodeURIComponent(id), { credentials: 'same-origin' });
    if (!r.ok) return;
    const body = await r.json();
    const pre = dialog.dataset.shows === id && dialog.querySelector('pre.tail');
    if (pre) pre.textContent = body.lines.join('\\n');
  } catch (e) {
    // The next change of the shard, or opening it again, asks again.
  }
}
grid.addEventListener('click', (e) => {
  const b = e.target.closest('.badge');
  if (b) select(b.dataset.actor);
});
statesBar.addEventListener('click', (e) => {
  const b = e.target.closest('button');
  if (!b) return;
  stateFilter = b.dataset.state;
  for (const o of statesBar.children) o.setAttribute('aria-pressed', String(o === b));
  applyFilter();
});
filterBox.addEventListener('input', applyFilter);
// A click on the backdrop lands on the dialog itself (the sheet fills the rest of it).
dialog.addEventListener('click', (e) => { if (e.target === dialog) dialog.close(); });
dialog.addEventListener('close', () => {
  for (const b of grid.querySelectorAll('.badge.selected')) b.classList.remove('selected');
  history.replaceState(null, '', location.pathname + location.search);
});
function connect() {
  const es = new EventSource('/debug/actors/events');
  es.addEventListener('open', () => { live.textContent = 'live'; live.classList.add('on'); });
  es.addEventListener('error', () => { live.textContent = 'reconnecting'; live.classList.remove('on'); });
  es.addEventListener('actors', (e) => {
    const d = JSON.parse(e.data);
    skew = Date.now() - d.now;
    for (const a of d.actors) render(a);
    // A link to an actor (the address after a click) opens on its chart.
    const linked = decodeURIComponent(location.hash.slice(1));
    if (linked && actors.has(linked) && !dialog.open) queueMicrotask(() => select(linked));
  });
  es.addEventListener('actor', (e) => render(JSON.parse(e.data)));
}
setInterval(() => {
  for (const a of actors.values()) badge(a).querySelector('.since').textContent = ago(a.since);
  const shown = dialog.open && actors.get(dialog.dataset.shows);
  if (shown) dialog.querySelector('.head .since').textContent = 'for ' + ago(shown.since);
}, 1000);
connect();
`;

const escapeAttr = (s: string): string => s.replace(/&/g, '&amp;').replace(/"/g, '&quot;').replace(/</g, '&lt;');

/** The page, with each machine's chart (SVG, keyed by machine id) as a template the script clones for the actor it shows. */
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
<header><h1>llmgw · actors</h1><span id="live">connecting</span><span id="count"></span>
<input id="filter" type="search" placeholder="filter: node, replica, state, reason" aria-label="filter actors">
<div id="states" role="group" aria-label="show actors in state"></div></header>
<main id="grid"></main>
<dialog id="detail" aria-label="actor chart"></dialog>
${templates}
<script>${script}</script>
</body>
</html>
`;
}
