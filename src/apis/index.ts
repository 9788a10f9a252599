// apis/: the client protocols the gateway speaks beyond OpenAI's chat and completions (which it
// forwards as they are), each translated to and from the chat request the engine serves. Pure
// translation and the stored-responses interface; the gateway does the I/O.
export { deleteStoredResponse, messagesOfInput, responsesApi, responsesTurn, storedResponse, type ResponsesContext } from './responses.js';
export { messagesApi, messagesChat, messagesTurn } from './messages.js';
export { MemoryResponseStore, type MemoryStoreOptions, type ResponseStore, type StoredResponse } from './response-store.js';
export type { ApiError, ApiTurn, ClientApi } from './turn.js';
