import { afterEach, describe, expect, it, vi } from 'vitest';
import { applyChunk, emptyReply, listModels, streamChat } from './chat';
import { ApiError } from './http';
import type { ChatChunk, ChatRequest } from './types';

function chunk(delta: ChatChunk['choices'][0]['delta'], finish: ChatChunk['choices'][0]['finish_reason'] = null): ChatChunk {
  return { id: 'c', object: 'chat.completion.chunk', created: 0, model: 'm', choices: [{ index: 0, delta, finish_reason: finish }] };
}

const req: ChatRequest = { model: 'm', messages: [{ role: 'user', content: 'hi' }], stream: true, stream_options: { include_usage: true } };

function sseResponse(lines: string[], status = 200): Response {
  const enc = new TextEncoder();
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      for (const l of lines) c.enqueue(enc.encode(l));
      c.close();
    },
  });
  return new Response(body, { status, headers: { 'Content-Type': 'text/event-stream' } });
}

afterEach(() => vi.unstubAllGlobals());

describe('applyChunk', () => {
  it('appends content and takes reasoning once when both fields carry it', () => {
    const r = emptyReply();
    applyChunk(r, chunk({ role: 'assistant', reasoning_content: 'th', reasoning: 'th' }));
    applyChunk(r, chunk({ reasoning: 'ink' }));
    applyChunk(r, chunk({ content: 'Hel' }));
    applyChunk(r, chunk({ content: 'lo' }, 'stop'));
    expect(r).toMatchObject({ content: 'Hello', reasoning: 'think', finish: 'stop' });
  });

  it('assembles streamed tool calls by index', () => {
    const r = emptyReply();
    applyChunk(r, chunk({ tool_calls: [{ index: 0, id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '' } }] }));
    applyChunk(r, chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }));
    applyChunk(r, chunk({ tool_calls: [{ index: 1, id: 'call_b', function: { name: 'now', arguments: '{}' } }] }));
    applyChunk(r, chunk({ tool_calls: [{ index: 0, function: { arguments: '"Oslo"}' } }] }, 'tool_calls'));
    expect(r.toolCalls).toEqual([
      { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } },
      { id: 'call_b', type: 'function', function: { name: 'now', arguments: '{}' } },
    ]);
    expect(r.finish).toBe('tool_calls');
  });

  it('keeps usage from the final choiceless chunk', () => {
    const r = emptyReply();
    applyChunk(r, { ...chunk({}), choices: [], usage: { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 } });
    expect(r.usage?.total_tokens).toBe(7);
  });
});

describe('streamChat', () => {
  it('streams a reply over fetch and reports each update', async () => {
    const fetchMock = vi.fn(async () =>
      sseResponse([
        ': ping\n\n',
        `data: ${JSON.stringify(chunk({ role: 'assistant', content: 'A' }))}\n\n`,
        `data: ${JSON.stringify(chunk({ content: 'B' }, 'stop'))}\n\ndata: [DONE]\n\n`,
      ]),
    );
    vi.stubGlobal('fetch', fetchMock);
    const seen: string[] = [];
    const r = await streamChat(req, (x) => seen.push(x.content));
    expect(seen).toEqual(['A', 'AB']);
    expect(r.finish).toBe('stop');
    const [url, init] = fetchMock.mock.calls[0] as unknown as [string, RequestInit];
    expect(url).toBe('/v1/chat/completions');
    expect(JSON.parse(init.body as string).stream).toBe(true);
    expect((init.headers as Record<string, string>)['Content-Type']).toBe('application/json');
  });

  it('turns an error status into an ApiError with the server code', async () => {
    vi.stubGlobal('fetch', async () =>
      new Response(JSON.stringify({ error: { message: 'prompt is 9000 tokens, context is 4096', code: 'context_length_exceeded' } }), {
        status: 400,
      }),
    );
    await expect(streamChat(req, () => {})).rejects.toMatchObject({ status: 400, code: 'context_length_exceeded' });
  });

  it('keeps the error type of an answer with no code, as the app sends while its model loads', async () => {
    // The body loading.go writes for every route but /manage/status until the model is loaded.
    const body = { error: { message: 'Petal is loading the model; try again in a moment', type: 'model_loading', param: null, code: null } };
    vi.stubGlobal('fetch', async () => new Response(JSON.stringify(body), { status: 503, headers: { 'Retry-After': '1' } }));
    const err = await listModels().catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err).toMatchObject({ status: 503, code: 'http_503', type: 'model_loading' });
  });

  it('turns an error event inside the stream into an ApiError', async () => {
    vi.stubGlobal('fetch', async () =>
      sseResponse([`data: ${JSON.stringify(chunk({ content: 'x' }))}\n\n`, 'data: {"error":{"message":"engine failed","code":"internal"}}\n\n']),
    );
    const err = await streamChat(req, () => {}).catch((e) => e);
    expect(err).toBeInstanceOf(ApiError);
    expect(err.code).toBe('internal');
  });

  it('returns what arrived when aborted', async () => {
    const abort = new AbortController();
    const enc = new TextEncoder();
    let n = 0;
    vi.stubGlobal('fetch', async () =>
      new Response(
        new ReadableStream<Uint8Array>({
          pull(c) {
            n++;
            c.enqueue(enc.encode(`data: ${JSON.stringify(chunk({ content: 't' }))}\n\n`));
          },
        }),
      ),
    );
    const r = await streamChat(req, (x) => {
      if (x.content.length === 4) abort.abort();
    }, abort.signal);
    expect(r.content).toBe('tttt');
    expect(r.finish).toBeNull();
  });

  it('reports an unreachable server as a network error', async () => {
    vi.stubGlobal('fetch', async () => {
      throw new TypeError('Failed to fetch');
    });
    await expect(streamChat(req, () => {})).rejects.toMatchObject({ code: 'network_error' });
  });
});
