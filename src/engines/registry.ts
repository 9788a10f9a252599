// The known engines by catalog name, with the node's refusals applied.
import { LlmgwError } from '../errors/index.js';
import type { EnginesConfig, KvEventsConfig } from './config.js';
import { LlamaCpp } from './llamacpp.js';
import { Sglang } from './sglang.js';
import { Sim } from './sim.js';
import { Trtllm } from './trtllm.js';
import type { Engine } from './types.js';
import { Vllm } from './vllm.js';

interface Installable {
  useInstalled(path: string): void;
}

const installable = (e: Engine): e is Engine & Installable => 'useInstalled' in e;

/** The engines this node can build commands for: the five built in, minus the disabled ones. */
export class Registry {
  readonly #engines = new Map<string, Engine>();
  readonly #disabled: ReadonlySet<string>;

  constructor(cfg: EnginesConfig, kvEvents: KvEventsConfig) {
    this.#disabled = new Set(cfg.disabled);
    this.add(new Vllm(cfg.vllm, kvEvents));
    this.add(new Sglang(cfg.sglang));
    this.add(new LlamaCpp(cfg.llamacpp));
    this.add(new Trtllm(cfg.trtllm));
    this.add(new Sim(cfg.sim, kvEvents));
  }

  /** Registers an engine, replacing any engine of the same name. */
  add(e: Engine): void {
    this.#engines.set(e.name, e);
  }

  /** The registered engine names, sorted. */
  names(): string[] {
    return [...this.#engines.keys()].sort();
  }

  /** The engine of this name; unknown and disabled engines are refused with the reason. */
  get(name: string): Engine {
    const e = this.#engines.get(name);
    if (e === undefined) {
      throw new LlmgwError('LLMGW_UNKNOWN_ENGINE', `unknown engine ${JSON.stringify(name)} (have ${this.names().join(', ')})`);
    }
    if (this.#disabled.has(name)) {
      throw new LlmgwError(
        'LLMGW_ENGINE_DISABLED',
        `engine ${JSON.stringify(name)} is disabled on this node (engines.disabled), so it is never started here; ` +
          `remove it from engines.disabled or choose another engine`,
      );
    }
    return e;
  }

  /** Points an engine at a build the agent installed, and reports whether the engine takes one. */
  useInstalled(name: string, path: string): boolean {
    const e = this.#engines.get(name);
    if (e === undefined || !installable(e)) return false;
    e.useInstalled(path);
    return true;
  }
}
