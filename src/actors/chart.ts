// A machine's chart as plain data, read from the same definitions the runtime runs (never a copy),
// and drawn from that data as SVG (the debug page, `llmgw viz`), Mermaid or Graphviz dot. Drawing is
// pure: a chart in, text out.
import type { AnyStateMachine } from 'xstate';

/** One state of a chart: its path from the root (`running.loading`), kind, children and tags. */
export interface ChartState {
  /** Dot-joined keys from the machine's root; '' is the root itself. */
  readonly path: string;
  readonly key: string;
  readonly kind: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  /** Path of the initial child, for a compound state. */
  readonly initial: string | undefined;
  readonly children: readonly ChartState[];
  readonly tags: readonly string[];
  /** Actors invoked while the state is active, by the name they have in `setup()`. */
  readonly invokes: readonly string[];
}

/** One transition: `event` names what causes it (an event type, `after <delay>`, `done <actor>`, `always`). */
export interface ChartTransition {
  readonly source: string;
  /** Target state paths; empty for a transition that only runs actions. */
  readonly targets: readonly string[];
  readonly event: string;
  readonly guard: string | undefined;
}

/** A machine's chart. */
export interface Chart {
  readonly machine: string;
  readonly root: ChartState;
  readonly transitions: readonly ChartTransition[];
}

interface NodeLike {
  readonly key: string;
  readonly path: readonly string[];
  readonly type: ChartState['kind'];
  readonly initial: { readonly target: readonly { readonly path: readonly string[] }[] } | undefined;
  readonly states: Readonly<Record<string, NodeLike>>;
  readonly tags: readonly string[];
  readonly invoke: readonly { readonly id: string; readonly src: unknown }[];
  readonly transitions: ReadonlyMap<string, readonly TransitionLike[]>;
  readonly always?: readonly TransitionLike[] | undefined;
}

interface TransitionLike {
  readonly target?: readonly { readonly path: readonly string[] }[] | undefined;
  readonly guard?: unknown;
}

function guardName(g: unknown): string | undefined {
  if (g === undefined || g === null) return undefined;
  if (typeof g === 'string') return g;
  if (typeof g === 'function') {
    // XState's not()/and()/or() are functions holding the guards they combine.
    const inner = 'guards' in g && Array.isArray(g.guards) ? g.guards.map(guardName).join(g.name === 'and' ? ' && ' : ' || ') : g.name;
    return g.name === 'not' ? `!${inner}` : inner;
  }
  if (typeof g === 'object' && 'type' in g && typeof g.type === 'string') return g.type;
  return 'guard';
}

function srcName(src: unknown): string {
  return typeof src === 'string' ? src : 'actor';
}

/** The event a transition's XState-internal type stands for, in words a reader of the chart knows. */
function eventLabel(type: string, node: NodeLike): string {
  const after = /^xstate\.after\.([^.]+)\./.exec(type);
  if (after?.[1] !== undefined) return `after ${after[1]}`;
  for (const [prefix, word] of [['xstate.done.actor.', 'done'], ['xstate.error.actor.', 'error']] as const) {
    if (!type.startsWith(prefix)) continue;
    const id = type.slice(prefix.length);
    const inv = node.invoke.find((i) => i.id === id);
    return `${word} ${inv === undefined ? id : srcName(inv.src)}`;
  }
  return type;
}

const pathOf = (n: { readonly path: readonly string[] }): string => n.path.join('.');

/** The chart of `machine`, from its definition. */
export function chartOf(machine: AnyStateMachine): Chart {
  const transitions: ChartTransition[] = [];
  const walk = (n: NodeLike): ChartState => {
    const path = pathOf(n);
    const add = (event: string, list: readonly TransitionLike[]): void => {
      for (const t of list) transitions.push({ source: path, targets: (t.target ?? []).map(pathOf), event, guard: guardName(t.guard) });
    };
    for (const [type, list] of n.transitions) add(eventLabel(type, n), list);
    if (n.always !== undefined) add('always', n.always);
    const children = Object.values(n.states).map(walk);
    const first = n.initial?.target[0];
    return {
      path,
      key: n.key,
      kind: n.type,
      initial: n.type === 'compound' && first !== undefined ? pathOf(first) : undefined,
      children,
      tags: [...n.tags],
      invokes: n.invoke.map((i) => srcName(i.src)),
    };
  };
  const root: NodeLike = machine.root;
  return { machine: machine.id, root: walk(root), transitions };
}

/** Every state of a chart below its root, parents before children. */
export function statesOf(c: Chart): ChartState[] {
  const out: ChartState[] = [];
  const walk = (s: ChartState): void => {
    for (const k of s.children) {
      out.push(k);
      walk(k);
    }
  };
  walk(c.root);
  return out;
}

/** Every distinct event label of a chart, sorted. */
export function eventsOf(c: Chart): string[] {
  return [...new Set(c.transitions.map((t) => t.event))].sort();
}
