import { describe, expect, it } from 'vitest';
import { MAX_LINE_CHARS, SSEError, SSEParser, readSSE } from './sse';

function streamOf(parts: (string | Uint8Array)[]): ReadableStream<Uint8Array> {
  const enc = new TextEncoder();
  return new ReadableStream({
    start(c) {
      for (const p of parts) c.enqueue(typeof p === 'string' ? enc.encode(p) : p);
      c.close();
    },
  });
}

async function collect(body: ReadableStream<Uint8Array>, signal?: AbortSignal) {
  const out = [];
  for await (const ev of readSSE(body, signal)) out.push(ev);
  return out;
}

describe('SSEParser', () => {
  it('parses data events and skips comment pings', () => {
    const p = new SSEParser();
    const evs = p.push(': ping\n\ndata: {"a":1}\n\ndata: [DONE]\n\n');
    expect(evs.map((e) => e.data)).toEqual(['{"a":1}', '[DONE]']);
    expect(evs[0].event).toBe('message');
  });

  it('joins multi-line data with newlines and reads event and id fields', () => {
    const p = new SSEParser();
    const evs = p.push('event: update\nid: 7\ndata: one\ndata:two\n\n');
    expect(evs).toEqual([{ event: 'update', id: '7', data: 'one\ntwo' }]);
  });

  it('keeps an event split anywhere across pushes', () => {
    const text = 'data: {"x":"héllo"}\n\ndata: second\n\n';
    for (let cut = 0; cut <= text.length; cut++) {
      const p = new SSEParser();
      const evs = [...p.push(text.slice(0, cut)), ...p.push(text.slice(cut))];
      expect(evs.map((e) => e.data)).toEqual(['{"x":"héllo"}', 'second']);
    }
  });

  it('accepts CRLF and CR line ends, including a CRLF split between pushes', () => {
    const p = new SSEParser();
    const evs = [...p.push('data: a\r'), ...p.push('\n\r\n'), ...p.push('data: b\r\rdata: c\n\n')];
    expect(evs.map((e) => e.data)).toEqual(['a', 'b', 'c']);
  });

  it('emits nothing for a blank line without data', () => {
    const p = new SSEParser();
    expect(p.push('\n\n\nevent: x\n\n')).toEqual([]);
  });

  it('refuses a line longer than the limit', () => {
    const p = new SSEParser();
    expect(() => p.push('data: ' + 'x'.repeat(MAX_LINE_CHARS + 1))).toThrow(SSEError);
  });
});

describe('readSSE', () => {
  it('decodes UTF-8 split inside a character and drops an unterminated last event', async () => {
    const bytes = new TextEncoder().encode('data: ünï\n\n');
    const evs = await collect(streamOf([bytes.slice(0, 7), bytes.slice(7), 'data: half']));
    expect(evs.map((e) => e.data)).toEqual(['ünï']);
  });

  it('stops when the signal aborts', async () => {
    const abort = new AbortController();
    const enc = new TextEncoder();
    let pulls = 0;
    const body = new ReadableStream<Uint8Array>({
      pull(c) {
        pulls++;
        c.enqueue(enc.encode(`data: ${pulls}\n\n`));
      },
    });
    const seen: string[] = [];
    for await (const ev of readSSE(body, abort.signal)) {
      seen.push(ev.data);
      if (seen.length === 3) abort.abort();
    }
    expect(seen).toEqual(['1', '2', '3']);
  });
});
