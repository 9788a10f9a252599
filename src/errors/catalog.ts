// Every error code llmgw throws, declared once: the HTTP status a gateway answers with when the
// failure reaches a client, and what the code means to an operator. `as const` makes the codes a
// closed union, so a misspelt code in a `throw` fails to compile instead of reaching a log no alert
// matches; docs/errors.md lists exactly this table (a test compares them).

/** One catalog entry: the HTTP status and a sentence for the docs. */
export interface ErrorEntry {
  /** What a client receives; 500 means a bug or a setup problem the client cannot fix (its message stays in our log). */
  readonly status: number;
  readonly meaning: string;
}

/** The catalog: code -> status and meaning, in the order docs/errors.md lists them. */
export const errorCatalog = {
  // Requests (gateway)
  LLMGW_BAD_JSON: { status: 400, meaning: 'The request body is not a JSON object.' },
  LLMGW_BAD_REQUEST: { status: 400, meaning: 'A field of the request is missing or has the wrong type or value; `param` names it.' },
  LLMGW_BAD_HTTP: { status: 400, meaning: 'The request is not well-formed HTTP.' },
  LLMGW_CLIENT_GONE: { status: 400, meaning: 'The client closed the connection before sending its whole body.' },
  LLMGW_UNAUTHORIZED: { status: 401, meaning: 'No API key, or one not listed in gateway.api_keys.' },
  LLMGW_FORBIDDEN: { status: 403, meaning: 'The API key may not use this route (the debug routes need an admin key).' },
  LLMGW_UNKNOWN_MODEL: { status: 404, meaning: 'The requested model is not served by this gateway.' },
  LLMGW_NOT_FOUND: { status: 404, meaning: 'No such path on the gateway.' },
  LLMGW_METHOD: { status: 405, meaning: 'The path exists but takes another HTTP method.' },
  LLMGW_BODY_TIMEOUT: { status: 408, meaning: 'The request body did not arrive within gateway.body_timeout_ms.' },
  LLMGW_BODY_TOO_LARGE: { status: 413, meaning: 'The request body is over gateway.max_body_bytes (a file upload: over gateway.batch.max_file_bytes; the message names which).' },
  LLMGW_EXPECTATION: { status: 417, meaning: 'An Expect header other than 100-continue.' },
  LLMGW_HEADERS_TOO_LARGE: { status: 431, meaning: 'The request headers are over Node\'s limit.' },
  LLMGW_RATE_LIMITED: { status: 429, meaning: 'A quota refused the request; Retry-After says when to try again.' },
  LLMGW_BUDGET: { status: 429, meaning: 'The key has spent its token or cost budget for the day or month; Retry-After says when the period ends.' },
  LLMGW_MODEL_NOT_ALLOWED: { status: 403, meaning: 'The API key may not use the requested model (its allowed models say which it may).' },
  LLMGW_STORE_DOWN: { status: 503, meaning: 'The key and usage database is down or full and store.when_down is fail_closed: requests with a budget are refused.' },
  LLMGW_TENANT_SHARE: { status: 429, meaning: 'Every replica is saturated, the admission queue is full and this tenant holds more than its share of it (or was displaced by one under its share); Retry-After says when to try again.' },
  LLMGW_UPSTREAM: { status: 502, meaning: 'The engine could not be reached or failed the request.' },
  LLMGW_NO_REPLICA: { status: 503, meaning: 'The model has no ready replica to route to.' },
  LLMGW_QUEUE_FULL: { status: 503, meaning: 'Every replica is saturated and the admission queue is full (or the gateway is closing); Retry-After says when to try again.' },
  LLMGW_DRAINING: { status: 503, meaning: 'The gateway is shutting down (SIGTERM) and its drain grace (gateway.drain_grace_ms) is over; Retry-After says when to try again, on another gateway.' },
  LLMGW_QUEUE_DEADLINE: { status: 503, meaning: 'Every replica is saturated and the request cannot start within the time it may wait (gateway.admission.max_wait_ms, x-llmgw-max-wait-ms); Retry-After says when to try again.' },
  LLMGW_ADAPTER_LOAD: { status: 503, meaning: 'A LoRA adapter could not be loaded on demand; the message names the adapter, the replica and the engine\'s answer.' },
  LLMGW_UPSTREAM_PROTOCOL: { status: 502, meaning: 'The engine\'s answer is not well-formed HTTP/1.1; the message names what was wrong.' },
  LLMGW_UPSTREAM_TIMEOUT: { status: 504, meaning: 'The engine sent no answer within gateway.upstream.headers_timeout_ms.' },
  LLMGW_UPSTREAM_STALLED: { status: 504, meaning: 'The engine went silent in the middle of its answer for gateway.upstream.idle_timeout_ms.' },
  LLMGW_UPSTREAM_HEAD_TOO_LARGE: { status: 502, meaning: 'The engine\'s response headers (or trailers) are over gateway.upstream.max_head_bytes.' },
  LLMGW_UPSTREAM_ANSWER_TOO_LARGE: { status: 502, meaning: 'The engine\'s answer body is over gateway.upstream.max_answer_bytes.' },
  LLMGW_UPSTREAM_EVENT_TOO_LARGE: { status: 502, meaning: 'One SSE event of the engine\'s stream is over gateway.upstream.max_event_bytes.' },
  LLMGW_LISTEN: { status: 500, meaning: 'The gateway cannot listen on its configured address and port.' },
  LLMGW_PORT_CLASH: { status: 500, meaning: 'gateway.port is also a port placement gives an engine.' },
  LLMGW_JSON_LIMIT: { status: 500, meaning: 'JSON over a size or nesting limit (a request\'s is answered as LLMGW_BAD_REQUEST naming the limit).' },
  LLMGW_DEADLINE: { status: 500, meaning: 'A bounded piece of work did not finish within its time.' },
  LLMGW_CTL_STATUS: { status: 500, meaning: 'llmgw ctl status: the gateway refused or failed the request.' },
  LLMGW_CTL_BAD_ANSWER: { status: 500, meaning: 'llmgw ctl status: the answer is not an llmgw gateway\'s of this version.' },
  LLMGW_CTL_GATEWAY: { status: 500, meaning: 'llmgw ctl nodes --gateway: the gateway cannot be read, or refused the request.' },
  LLMGW_CTL_ADMIN: { status: 500, meaning: 'llmgw ctl keys or ctl usage: the gateway cannot be reached, or refused the request.' },
  LLMGW_STORE: { status: 500, meaning: 'The key and usage database cannot be opened, or its migrations failed.' },
  LLMGW_STORE_SCHEMA: { status: 500, meaning: 'The database holds a newer schema than this llmgw knows; run the newer llmgw, or point store at another database.' },
  LLMGW_BENCH_USAGE: { status: 500, meaning: 'llmgw bench: an unknown bench, flag or value on its command line.' },
  LLMGW_BENCH_PORTS: { status: 500, meaning: 'llmgw bench e2e found no run of free ports on 127.0.0.1 for its fleet.' },
  LLMGW_BENCH_LLMGW: { status: 500, meaning: 'llmgw bench e2e was not told how to run llmgw (a bug in the caller).' },
  LLMGW_BENCH_START: { status: 500, meaning: 'llmgw bench e2e: its llmgw serve exited, or was not ready in time.' },
  LLMGW_BENCH_RESET: { status: 500, meaning: 'llmgw bench e2e: an engine refused to reset its prefix cache between workloads.' },
  LLMGW_BENCH_STOPPED: { status: 500, meaning: 'llmgw bench e2e was interrupted (SIGINT or SIGTERM).' },
  // Configuration and placement
  LLMGW_CONFIG: { status: 500, meaning: 'The configuration has problems; every one is listed with its path.' },
  LLMGW_CONFIG_READ: { status: 500, meaning: 'The configuration file cannot be read.' },
  LLMGW_PROFILE: { status: 500, meaning: 'An engine profile asks for something its engine or the hardware cannot do.' },
  LLMGW_UNKNOWN_ENGINE: { status: 500, meaning: 'A profile names an engine llmgw does not know.' },
  LLMGW_ENGINE_DISABLED: { status: 500, meaning: 'A profile names an engine listed in engines.disabled on this node.' },
  LLMGW_LAUNCH_MODE: { status: 500, meaning: 'engines.vllm.launch_mode is neither mp nor ray.' },
  LLMGW_GGUF: { status: 500, meaning: 'A llama.cpp model_path holds no single model .gguf file.' },
  LLMGW_ENGINE_INSTALL: { status: 500, meaning: 'An engine build given to `llmgw engines install` cannot be unpacked, holds no server, or does not run here.' },
  LLMGW_GGUF_FORMAT: { status: 500, meaning: 'A GGUF file cannot be read, is truncated, corrupt or not GGUF, or the tokenizer files to make one are unusable.' },
  LLMGW_GGUF_TOKENIZER: { status: 500, meaning: "A GGUF's tokenizer is one the gateway cannot rebuild (its model type, pre-tokenizer or vocabulary); that model is tokenized by its engine's /tokenize." },
  LLMGW_SIM_BIN: { status: 500, meaning: 'engines.sim.bin is empty and the running llmgw cannot be found.' },
  LLMGW_EPP_DISCOVERY: { status: 500, meaning: 'llmgw epp: the endpoints file cannot be read or is not an endpoint list, or discovery.kubernetes finds no kubeconfig (or cannot load the one given).' },
  LLMGW_EPP_LISTEN: { status: 500, meaning: 'llmgw epp cannot bind its ext_proc, health or metrics port.' },
  LLMGW_OTEL_RESOURCE: { status: 500, meaning: 'OTEL_RESOURCE_ATTRIBUTES holds an entry that is not key=value with a percent-encoded value.' },
  // GPU discovery
  LLMGW_NVIDIA_SMI: { status: 500, meaning: 'nvidia-smi failed, hung or exited non-zero.' },
  LLMGW_NVIDIA_SMI_MISSING: { status: 500, meaning: 'nvidia-smi is not installed or not on PATH.' },
  LLMGW_SMI_LIST: { status: 500, meaning: 'The output of nvidia-smi -L cannot be read.' },
  LLMGW_SMI_QUERY: { status: 500, meaning: 'The XML of nvidia-smi -q -x lacks a field llmgw needs.' },
  LLMGW_SMI_CSV: { status: 500, meaning: 'A CSV row of nvidia-smi --query-gpu cannot be split safely.' },
  LLMGW_XML: { status: 500, meaning: 'The nvidia-smi XML is truncated or corrupt.' },
  // Agent
  LLMGW_AGENT_STARTED: { status: 500, meaning: 'An agent was started twice (a bug in the caller).' },
  LLMGW_AGENT_NOT_STARTED: { status: 500, meaning: 'An agent was given replicas before it was started (a bug in the caller).' },
  LLMGW_AGENT_INTERNAL: { status: 500, meaning: 'The agent found its own records inconsistent (a bug).' },
  LLMGW_STATE_DIR: { status: 500, meaning: 'agent.state_dir cannot be created or written.' },
  LLMGW_IPC_DIR: { status: 500, meaning: 'The directory of the engines\' KV event sockets is not the agent\'s own.' },
  // KV events, hashing and the cluster index
  LLMGW_KV_BIND: { status: 500, meaning: 'A KV events endpoint cannot be bound.' },
  LLMGW_KV_ENDPOINT: { status: 500, meaning: 'A KV events endpoint has no port to offset for data-parallel ranks.' },
  LLMGW_KV_PUBLISHER: { status: 500, meaning: 'A KV event publisher option is not a positive integer.' },
  LLMGW_KV_PUBLISHER_CLOSED: { status: 500, meaning: 'Events were published after the publisher was closed (a bug in the caller).' },
  LLMGW_KV_UNPREPARED: { status: 500, meaning: 'A KV batch was applied before its hashes were computed (a bug in the caller).' },
  LLMGW_HASH_ALGO: { status: 500, meaning: 'A prefix-caching hash algorithm llmgw cannot reproduce.' },
  LLMGW_HASH_INPUT: { status: 500, meaning: 'A token id or offset that vLLM could not hash either.' },
  LLMGW_BLOCK_SIZE: { status: 500, meaning: 'A block size that is not a positive integer.' },
  LLMGW_DIGEST: { status: 500, meaning: 'A block digest too short to key (under 8 bytes).' },
  LLMGW_MEMO_SIZE: { status: 500, meaning: 'The prefix memo size is not a positive number of chunks.' },
  LLMGW_INDEX_CAPACITY: { status: 500, meaning: 'The cluster index capacity is outside what it can hold.' },
  LLMGW_INDEX_LAYOUT: { status: 500, meaning: 'A shared buffer that is not a cluster index of this layout version.' },
  LLMGW_INDEX_SLOT: { status: 500, meaning: 'An index slot outside the slots the index has.' },
  LLMGW_INDEX_SLOTS: { status: 500, meaning: 'Every slot of the cluster index is taken; the replica is routed without KV events.' },
  LLMGW_POOL_BUSY: { status: 500, meaning: 'The hash pool is closed or its queue is full.' },
  LLMGW_HASH_TASK: { status: 500, meaning: 'A worker refused a hashing task as bad input.' },
  // Chat rendering and local tokenization
  LLMGW_CHAT_TEMPLATE: { status: 400, meaning: 'A chat cannot be rendered with its template: bad messages, fields or a template error.' },
  LLMGW_PROMPT_SHAPE: { status: 400, meaning: 'A prompt cannot be tokenized in the gateway (several prompts, a request template); the engine tokenizes it.' },
  LLMGW_TOKENIZER_FILE: { status: 500, meaning: "A model's tokenizer.json cannot be read or parsed." },
  // The agent link
  LLMGW_KEY: { status: 500, meaning: 'A CURVE key is not 40 Z85 characters.' },
  LLMGW_KEY_FILE: { status: 500, meaning: 'A CURVE key file cannot be read or written.' },
  LLMGW_LINK_BIND: { status: 500, meaning: 'The gateway cannot bind cluster.link.' },
  LLMGW_LINK_DECODE: { status: 500, meaning: 'A message on the agent link is malformed; it is counted and dropped.' },
  // The simulated engine
  LLMGW_SIM_ARGS: { status: 500, meaning: 'llmgw sim was given an argument it does not take.' },
  LLMGW_SIM_OPTIONS: { status: 500, meaning: 'llmgw sim options have problems; each is listed.' },
  LLMGW_SIM_DEVICE: { status: 500, meaning: 'A --devices line of llmgw sim is not a llama.cpp device line.' },
  LLMGW_SIM_TOKENIZER: { status: 500, meaning: 'The sim cannot load its tokenizer.' },
  LLMGW_SIM_BAD_REQUEST: { status: 400, meaning: 'The sim refuses a request as vLLM would (its own 400).' },
  LLMGW_SIM_TEMPLATE_TIMEOUT: { status: 400, meaning: 'The sim gave up rendering a request\'s chat template (its own 400).' },
  LLMGW_SIM_NO_RANK: { status: 500, meaning: 'The sim has no data-parallel rank to schedule on.' },
  LLMGW_SIM_GROUP: { status: 500, meaning: 'A multi-node sim rank could not join its leader, or the leader refused it.' },
  LLMGW_PREFILL: { status: 502, meaning: 'A prefill replica of a disaggregated pool refused or answered without kv_transfer_params; the decode replica ran the request whole (never sent to a client).' },
} as const satisfies Readonly<Record<`LLMGW_${string}`, ErrorEntry>>;

/** A stable, greppable error code: one of the catalog's keys. */
export type ErrorCode = keyof typeof errorCatalog;

/** Every code in catalog order. */
export const errorCodes = Object.keys(errorCatalog) as ErrorCode[];
