// The chat client: POST /v1/chat/completions with stream: true, folding the
// chunks into one growing reply.

import { ApiError, BAD_RESPONSE, request, send } from './http';
import { readSSE } from './sse';
import type { ChatChunk, ChatMessage, ChatRequest, ErrorBody, FinishReason, ModelList, ToolCall, Usage } from './types';

/** A reply as far as it has streamed. */
export interface Reply {
  content: string;
  reasoning: string;
  toolCalls: ToolCall[];
  finish: FinishReason | null;
  usage: Usage | null;
}

export function emptyReply(): Reply {
  return { content: '', reasoning: '', toolCalls: [], finish: null, usage: null };
}

/**
 * Folds one chunk into reply. Reasoning arrives both as reasoning_content and
 * reasoning (CLIENTS.md); the first is used when both are present. Tool-call
 * deltas are matched by index: the first names the call, later ones append
 * argument fragments.
 */
export function applyChunk(reply: Reply, chunk: ChatChunk): void {
  if (chunk.usage) reply.usage = chunk.usage;
  for (const choice of chunk.choices ?? []) {
    if (choice.index !== 0) continue;
    const d = choice.delta ?? {};
    if (d.content) reply.content += d.content;
    const r = d.reasoning_content ?? d.reasoning;
    if (r) reply.reasoning += r;
    for (const tc of d.tool_calls ?? []) {
      let call = reply.toolCalls[tc.index];
      if (!call) {
        call = { id: tc.id ?? '', type: 'function', function: { name: '', arguments: '' } };
        reply.toolCalls[tc.index] = call;
      }
      if (tc.id) call.id = tc.id;
      if (tc.function?.name) call.function.name += tc.function.name;
      if (tc.function?.arguments) call.function.arguments += tc.function.arguments;
    }
    if (choice.finish_reason) reply.finish = choice.finish_reason;
  }
}

/**
 * Streams a chat completion, calling onUpdate after every chunk with the
 * reply so far. Resolves with the whole reply; when signal aborts it resolves
 * with what arrived, finish left null.
 */
export async function streamChat(
  req: ChatRequest,
  onUpdate: (r: Reply) => void,
  signal?: AbortSignal,
): Promise<Reply> {
  const reply = emptyReply();
  let res: Response;
  try {
    res = await send('/v1/chat/completions', {
      method: 'POST',
      body: JSON.stringify(req),
      signal,
      headers: { Accept: 'text/event-stream' },
    });
  } catch (e) {
    if (signal?.aborted) return reply;
    throw e;
  }
  if (!res.body) throw new ApiError(res.status, BAD_RESPONSE, 'the chat stream has no body');
  try {
    for await (const ev of readSSE(res.body, signal)) {
      if (ev.data === '[DONE]') break;
      let parsed: ChatChunk | ErrorBody;
      try {
        parsed = JSON.parse(ev.data);
      } catch {
        throw new ApiError(res.status, BAD_RESPONSE, 'the chat stream sent an event that is not JSON');
      }
      if ('error' in parsed && parsed.error) {
        throw new ApiError(res.status, parsed.error.code ?? 'stream_error', parsed.error.message);
      }
      applyChunk(reply, parsed as ChatChunk);
      onUpdate(reply);
    }
  } catch (e) {
    if (signal?.aborted) return reply;
    throw e;
  }
  return reply;
}

/**
 * Tokens the server's chat template makes of messages (POST /v1/tokenize):
 * the prompt a reply is generated from, counted without waiting for the queue.
 */
export async function countPromptTokens(
  messages: ChatMessage[],
  thinking: boolean,
  signal?: AbortSignal,
): Promise<number> {
  const r = await request<{ count: number }>(
    'POST',
    '/v1/tokenize',
    { messages, chat_template_kwargs: { enable_thinking: thinking } },
    signal,
  );
  return r.count;
}

/** The served models, with their context lengths. */
export function listModels(signal?: AbortSignal): Promise<ModelList> {
  return request<ModelList>('GET', '/v1/models', undefined, signal);
}
