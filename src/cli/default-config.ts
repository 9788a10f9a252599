// The config llmgw runs on when none is given: two simulated replicas of one model on this machine's
// CPU, publishing KV events, so the whole path (placement, engines, events, routing) runs anywhere.
// Kept as a string in a module rather than a .yaml file because tsc copies no .yaml into dist.

/** The embedded default config, as an operator would write it. */
export const defaultConfigYaml = `# llmgw's built-in default: two sim replicas of qwen3 on the CPU.
engines:
  sim: { bin: "" }          # empty: this llmgw's own \`sim\` subcommand
kv_events:
  hash_seed: "0"
  hash_algo: sha256_cbor
node:
  name: local
  addr: 127.0.0.1
  devices: []
  ports: { http_base: 8100, kv_events_base: 5600 }
models:
  qwen3:
    served_model_name: qwen3
    profiles:
      - name: sim-cpu
        engine: sim
        gpu_class: cpu
        tp: 1
        model_path: qwen3
        kv_events: true
        reasoning_parser: qwen3   # answers in reasoning and content, as vLLM's qwen3 parser
        args: [--think-tokens, "32"]   # the sim thinks 32 tokens before it answers
replicas:
  - { model: qwen3, profile: sim-cpu, count: 2 }
gateway:
  host: 127.0.0.1           # loopback only: the default has no client keys
  port: 8080
`;

/** How messages name the embedded default. */
export const defaultConfigSource = 'the built-in default config';
