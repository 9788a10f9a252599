// The error of a chat the template cannot render here, apart from chat.ts so that the modules
// chat.ts uses can throw it too.
import { LlmgwError } from '../errors/index.js';

/** A chat request the template cannot render (a 400 for the client, a fallback for the router). */
export class ChatError extends LlmgwError {
  constructor(
    message: string,
    readonly param: string,
  ) {
    super('LLMGW_CHAT_TEMPLATE', message);
  }
}
