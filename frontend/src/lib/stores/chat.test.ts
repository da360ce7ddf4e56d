import { describe, expect, it } from 'vitest';
import { ChatStore, STORAGE_KEY, describeStats, toMessages, tokensPerSecond, type CountFn, type StreamFn } from './chat.svelte';
import { emptyReply } from '../api/chat';
import { ApiError } from '../api/http';
import type { ChatRequest } from '../api/types';

class MemoryStorage {
  data = new Map<string, string>();
  getItem(k: string) {
    return this.data.get(k) ?? null;
  }
  setItem(k: string, v: string) {
    this.data.set(k, v);
  }
}

const opts = { model: 'demo', thinking: false, preset: 'instruct' as const };

/**
 * A fake stream that replies with the given tokens, one update each, honouring abort. As Petal's
 * server does, it first sends a chunk that only names the role, then waits (wait ms on the
 * clock) while the prompt is read.
 */
function scripted(tokens: string[], seen: ChatRequest[] = [], clock?: { t: number }, wait = 0): StreamFn {
  return async (req, onUpdate, signal) => {
    seen.push(req);
    const r = emptyReply();
    onUpdate(r);
    if (clock) clock.t += wait;
    for (const t of tokens) {
      if (signal?.aborted) return r;
      if (clock) clock.t += 100;
      r.content += t;
      onUpdate(r);
      await Promise.resolve();
    }
    r.finish = 'stop';
    r.usage = { prompt_tokens: 10, completion_tokens: tokens.length, total_tokens: 10 + tokens.length };
    return r;
  };
}

describe('ChatStore', () => {
  it('sends, streams the reply into a new conversation and keeps it in storage', async () => {
    const storage = new MemoryStorage();
    const seen: ChatRequest[] = [];
    const clock = { t: 0 };
    const s = new ChatStore({ storage, stream: scripted(['Hel', 'lo', '!'], seen, clock), now: () => clock.t });
    await s.send('  Say hello  ', opts);
    const c = s.current!;
    expect(c.title).toBe('Say hello');
    expect(c.turns.map((t) => [t.role, t.content])).toEqual([
      ['user', 'Say hello'],
      ['assistant', 'Hello!'],
    ]);
    expect(c.turns[1].finish).toBe('stop');
    expect(c.turns[1].stats).toMatchObject({ tokens: 3, promptTokens: 10, seconds: 0.2 });
    expect(tokensPerSecond(c.turns[1].stats)).toBeCloseTo(10);
    expect(s.contextUsed).toBe(13);
    expect(seen[0].messages).toEqual([{ role: 'user', content: 'Say hello' }]);
    expect(seen[0]).toMatchObject({ temperature: 0.7, top_p: 0.8, top_k: 20, chat_template_kwargs: { enable_thinking: false } });

    const again = new ChatStore({ storage, stream: scripted([]) });
    expect(again.conversations).toHaveLength(1);
    expect(again.current?.turns[1].content).toBe('Hello!');
    expect(JSON.parse(storage.getItem(STORAGE_KEY)!)[0].id).toBe(c.id);
  });

  it('times the first token apart from the decode rate', async () => {
    const clock = { t: 5000 };
    const s = new ChatStore({ storage: new MemoryStorage(), stream: scripted(['a', 'b', 'c'], [], clock, 2000), now: () => clock.t });
    await s.send('go', opts);
    const st = s.current!.turns[1].stats!;
    // Sent at 5 s, the role chunk at once, the first token after 2 s of prompt and then one every 100 ms.
    expect(st.firstTokenSeconds).toBeCloseTo(2.1);
    expect(st.seconds).toBeCloseTo(0.2);
    expect(tokensPerSecond(st)).toBeCloseTo(10);
    expect(describeStats(st)).toEqual(['3 tokens', 'first token after 2.10 s', '10.0 tokens/s']);
  });

  it('a stopped reply, which has no usage, counts its prompt in the context', async () => {
    const count: CountFn = async (messages) => 40 + messages.length;
    const s = new ChatStore({ storage: new MemoryStorage(), stream: scripted(['a', 'b', 'c', 'd', 'e']), count });
    const p = s.send('go', opts);
    await Promise.resolve();
    await Promise.resolve();
    s.stop();
    await p;
    const st = s.current!.turns[1].stats!;
    expect(st.promptTokens).toBe(41);
    expect(s.contextUsed).toBe(41 + st.tokens);
    expect(describeStats({ ...st, tokens: 1 })[0]).toBe('1 token');
  });

  it('counts the prompt while the reply streams', async () => {
    let release!: () => void;
    const gate = new Promise<void>((ok) => (release = ok));
    const stream: StreamFn = async (_req, onUpdate) => {
      const r = emptyReply();
      r.content = 'x';
      onUpdate(r);
      await gate;
      r.usage = { prompt_tokens: 30, completion_tokens: 1, total_tokens: 31 };
      return r;
    };
    const s = new ChatStore({ storage: new MemoryStorage(), stream, count: async () => 30 });
    const p = s.send('go', opts);
    await new Promise((ok) => setTimeout(ok));
    expect(s.streaming).toBe(true);
    expect(s.contextUsed).toBe(31);
    release();
    await p;
    expect(s.contextUsed).toBe(31);
  });

  it('says what cached prompt tokens are', () => {
    expect(describeStats({ tokens: 12, seconds: 0, promptTokens: 40, cachedTokens: 12 })).toEqual([
      '12 tokens',
      '12 of 40 prompt tokens reused from earlier',
    ]);
  });

  it('stop keeps the partial reply and marks it stopped', async () => {
    const s = new ChatStore({ storage: new MemoryStorage(), stream: scripted(['a', 'b', 'c', 'd', 'e']) });
    const p = s.send('go', opts);
    expect(s.streaming).toBe(true);
    await Promise.resolve();
    await Promise.resolve();
    s.stop();
    await p;
    const last = s.current!.turns[1];
    expect(s.streaming).toBe(false);
    expect(last.finish).toBe('stopped');
    expect(last.content.length).toBeGreaterThan(0);
    expect(last.content.length).toBeLessThan(5);
  });

  it('regenerate replaces the last reply and resends the same history', async () => {
    const seen: ChatRequest[] = [];
    const s = new ChatStore({ storage: new MemoryStorage(), stream: scripted(['x'], seen) });
    await s.send('q1', opts);
    await s.regenerate(opts);
    expect(s.current!.turns).toHaveLength(2);
    expect(seen[1].messages).toEqual(seen[0].messages);
  });

  it('records a server error on the reply and leaves it out of the next request', async () => {
    const seen: ChatRequest[] = [];
    let fail = true;
    const stream: StreamFn = async (req, onUpdate, signal) => {
      if (fail) {
        fail = false;
        throw new ApiError(429, 'queue_full', 'busy');
      }
      return scripted(['ok'], seen)(req, onUpdate, signal);
    };
    const s = new ChatStore({ storage: new MemoryStorage(), stream });
    await s.send('first', opts);
    expect(s.current!.turns[1].error).toEqual({ code: 'queue_full', message: 'busy' });
    await s.send('second', opts);
    expect(seen[0].messages).toEqual([
      { role: 'user', content: 'first' },
      { role: 'user', content: 'second' },
    ]);
  });

  it('ignores damaged storage and survives a full one', () => {
    const storage = new MemoryStorage();
    storage.setItem(STORAGE_KEY, '{not json');
    expect(new ChatStore({ storage }).conversations).toEqual([]);
    storage.setItem(STORAGE_KEY, JSON.stringify([{ id: 1 }, { id: 'a', title: 't', turns: [], updated: 0 }]));
    expect(new ChatStore({ storage }).conversations.map((c) => c.id)).toEqual(['a']);
    const full = { getItem: () => null, setItem: () => { throw new Error('QuotaExceededError'); } };
    const s = new ChatStore({ storage: full });
    s.newConversation();
    expect(() => s.save()).not.toThrow();
  });

  it('remove picks another conversation', () => {
    const s = new ChatStore({ storage: new MemoryStorage() });
    const a = s.newConversation();
    const b = s.newConversation();
    expect(s.currentId).toBe(b.id);
    s.remove(b.id);
    expect(s.currentId).toBe(a.id);
    expect(s.conversations).toHaveLength(1);
  });
});

describe('toMessages', () => {
  it('sends tool calls in history and drops reasoning', () => {
    const calls = [{ id: 'c1', type: 'function' as const, function: { name: 'f', arguments: '{}' } }];
    expect(
      toMessages([
        { role: 'user', content: 'u' },
        { role: 'assistant', content: '', reasoning: 'hmm', toolCalls: calls },
      ]),
    ).toEqual([
      { role: 'user', content: 'u' },
      { role: 'assistant', content: '', tool_calls: calls },
    ]);
  });
});
