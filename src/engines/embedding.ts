// A profile's task (embed rather than generate) and pooling, written as each engine takes them. The
// profile says `task: embed` once; each builder turns it into its engine's switch, so an operator
// moving an embedding model between engines keeps one word. Set in args already, it is left to args.
import { hasFlag } from './argv.js';
import type { ModelTask, Pooling, Profile } from './types.js';
import { ProfileError } from './validate.js';

/** What a profile's replicas serve: chat and completions, or /v1/embeddings. */
export const modelTasks = ['generate', 'embed'] as const;

/** How an embedding engine pools a prompt's hidden states into one vector (vLLM's and llama.cpp's common names). */
export const poolings = ['mean', 'cls', 'last'] as const;

/** Whether `v` names a task. */
export const isModelTask = (v: string): v is ModelTask => (modelTasks as readonly string[]).includes(v);

/** Whether `v` names a pooling. */
export const isPooling = (v: string): v is Pooling => (poolings as readonly string[]).includes(v);

/** Whether the profile's replicas answer /v1/embeddings instead of generating. */
export const embeds = (p: Profile): boolean => p.task === 'embed';

/** Refuses what `engine` cannot do with a profile's task and pooling, naming the field to change. */
export function validateTask(engine: 'vllm' | 'sglang' | 'trtllm' | 'llamacpp' | 'sim', p: Profile): void {
  const name = JSON.stringify(p.name);
  if (p.pooling !== undefined && !embeds(p)) {
    throw new ProfileError('pooling', `profile ${name}: pooling ${p.pooling} applies only to an embedding model; add task: embed or drop pooling`);
  }
  if (!embeds(p)) return;
  if (engine === 'trtllm') throw new ProfileError('task', `profile ${name}: trtllm-serve has no embeddings endpoint; use vllm, sglang or llamacpp for task: embed`);
  if (engine === 'sglang' && p.pooling !== undefined) {
    throw new ProfileError('pooling', `profile ${name}: SGLang takes its pooling from the model, not a flag; drop pooling`);
  }
}

/** The flags that make `engine` serve the profile's model as an embedding model; none for a generating one. */
export function embeddingArgs(engine: 'vllm' | 'sglang' | 'llamacpp' | 'sim', p: Profile): string[] {
  if (!embeds(p)) return [];
  switch (engine) {
    case 'vllm':
    case 'sim':
      return [...vllmRunnerArgs(p), ...vllmPoolerArgs(p.args, p.pooling)];
    case 'sglang':
      return hasFlag(p.args, '--is-embedding') ? [] : ['--is-embedding'];
    case 'llamacpp':
      // Without --embeddings llama-server answers /v1/embeddings 501; a generative GGUF's own pooling
      // is "none", which its OpenAI route refuses, hence the profile's pooling.
      return [...(hasFlag(p.args, '--embeddings', '--embedding') ? [] : ['--embeddings']), ...(p.pooling === undefined || hasFlag(p.args, '--pooling') ? [] : ['--pooling', p.pooling])];
  }
}

// Since vLLM 0.10.1 the runner is chosen with --runner (--task was deprecated then and later removed);
// a causal LM under the pooling runner is converted to an embedding model by its architecture's name.
function vllmRunnerArgs(p: Profile): string[] {
  return hasFlag(p.args, '--runner', '--task') ? [] : ['--runner', 'pooling'];
}

// vLLM's pooler types are upper case; --override-pooler-config is the name before 0.10.2.
function vllmPoolerArgs(args: readonly string[], pooling: Pooling | undefined): string[] {
  if (pooling === undefined || hasFlag(args, '--pooler-config', '--override-pooler-config')) return [];
  return ['--pooler-config', JSON.stringify({ pooling_type: pooling.toUpperCase() })];
}
