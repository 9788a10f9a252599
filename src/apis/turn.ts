// What the gateway needs of a client protocol to serve it like a chat: the chat request to route
// and send, and the engine's answer written back in the protocol's own shape.

/** One client request, translated: the chat the engine runs, and how its answer goes back. */
export interface ApiTurn {
  /** The chat completions body sent to the engine (routed, tokenized and accounted as any chat). */
  readonly chat: Readonly<Record<string, unknown>>;
  readonly stream: boolean;
  /** The engine's whole JSON answer (status 200) as the client's body; stores it first when asked. */
  answer(engine: unknown): Promise<unknown>;
  /** One parsed event of the engine's stream (undefined for [DONE]) as the client's events ('' for none). */
  event(data: unknown): string;
  /** The client's closing events once the engine's stream ended well; stores the answer first when asked. */
  end(): Promise<string>;
  /** The client's event for an engine that failed mid-stream. */
  failure(message: string): string;
}

/** An OpenAI-shaped error as the gateway decided it (status, type, message, param, code). */
export interface ApiError {
  readonly status: number;
  readonly type: string;
  readonly message: string;
  readonly param: string | null;
  readonly code: string;
}

/** A client protocol served on the gateway's routes. */
export interface ClientApi {
  /** Its name in metrics, logs and traces. */
  readonly name: 'responses' | 'messages';
  /** The request's key as `Authorization: Bearer <key>`, wherever this protocol's clients send it. */
  authorization(headers: Readonly<Record<string, string | string[] | undefined>>): string | undefined;
  /** The error body this protocol's clients read. */
  errorBody(e: ApiError): unknown;
}
