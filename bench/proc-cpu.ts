// CPU time of processes, by thread, from Linux's /proc. A throughput ratio says how fast; this says
// where the machine's cores went per request: on a 2-core machine the gateway, the engines and the
// load generator share the same cores, so a proxy that costs more CPU per request leaves less for
// the engines behind it, and no latency profile shows that (a sampled profile counts the time a
// thread was preempted inside a syscall as the syscall's own).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';

/** CPU milliseconds a process tree has used: its main threads', and every other thread's (workers, GC, I/O). */
export interface CpuUse {
  readonly mainMs: number;
  readonly otherMs: number;
}

let tickMs: number | undefined;

// USER_HZ is 100 on every Linux we know of, but it is the kernel's to say.
function msPerTick(): number {
  tickMs ??= 1000 / Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
  return tickMs;
}

function read(path: string): string | undefined {
  try {
    return readFileSync(path, 'latin1');
  } catch {
    return undefined; // the thread or process ended between listing and reading
  }
}

// utime + stime of one thread, in ticks; the command name is in parentheses and may hold spaces, so
// fields are counted after the last ')' (utime is field 14, the 12th after it).
function ticksOf(stat: string): number {
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[11]) + Number(fields[12]);
}

function threadsOf(pid: number): string[] {
  try {
    return readdirSync(`/proc/${pid}/task`);
  } catch {
    return [];
  }
}

/** A process's children, through each thread's children list. */
export function childrenOf(pid: number): number[] {
  return threadsOf(pid).flatMap((tid) => (read(`/proc/${pid}/task/${tid}/children`) ?? '').split(' ').filter((c) => c.trim() !== '').map(Number));
}

// A process and its descendants (nginx's master and its worker), less the trees rooted at `apart`.
function treeOf(pid: number, apart: ReadonlySet<number>): number[] {
  return apart.has(pid) ? [] : [pid, ...childrenOf(pid).flatMap((c) => treeOf(c, apart))];
}

/**
 * CPU used so far by `pids` and their descendants, less the trees rooted at `apart` (the engines
 * `llmgw serve` runs as its children); undefined where /proc is not Linux's.
 */
export function cpuOf(pids: readonly number[], apart: readonly number[] = []): CpuUse | undefined {
  if (process.platform !== 'linux') return undefined;
  let main = 0;
  let other = 0;
  const skip = new Set(apart);
  for (const pid of pids.flatMap((p) => treeOf(p, skip))) {
    for (const tid of threadsOf(pid)) {
      const stat = read(`/proc/${pid}/task/${tid}/stat`);
      if (stat === undefined) continue;
      if (Number(tid) === pid) main += ticksOf(stat);
      else other += ticksOf(stat);
    }
  }
  const ms = msPerTick();
  return { mainMs: main * ms, otherMs: other * ms };
}

/**
 * Busy CPU milliseconds of the whole machine so far, every core, process and the kernel's own work
 * (interrupts included), from /proc/stat; undefined where it is not Linux's. Time a hypervisor took
 * from us (steal) is not counted: none of it was spent on requests.
 */
export function machineBusyMs(): number | undefined {
  if (process.platform !== 'linux') return undefined;
  const line = read('/proc/stat')?.split('\n', 1)[0];
  if (line === undefined || !line.startsWith('cpu ')) return undefined;
  // user nice system idle iowait irq softirq steal ...; guest time is already inside user.
  const [user = 0, nice = 0, system = 0, , , irq = 0, softirq = 0] = line.trim().split(/\s+/).slice(1).map(Number);
  return (user + nice + system + irq + softirq) * msPerTick();
}

/** CPU per request between two readings, in ms, rounded to microseconds. */
export function perRequest(before: CpuUse | undefined, after: CpuUse | undefined, requests: number): CpuUse | undefined {
  if (before === undefined || after === undefined || requests <= 0) return undefined;
  const r = (v: number): number => Math.round((v / requests) * 1000) / 1000;
  return { mainMs: r(after.mainMs - before.mainMs), otherMs: r(after.otherMs - before.otherMs) };
}
