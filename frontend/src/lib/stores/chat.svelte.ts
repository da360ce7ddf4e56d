// Conversations, kept in localStorage, and the one reply that may be
// streaming at a time.

import { ApiError, NETWORK_ERROR } from '../api/http';
import { countPromptTokens, streamChat, type Reply } from '../api/chat';
import type { ChatMessage, ChatRequest, FinishReason, ToolCall } from '../api/types';
import { PRESETS } from '../presets';
import { formatSeconds, plural } from '../format';
import type { SamplingPreset } from '../api/types';

/** localStorage key of the saved conversations. */
export const STORAGE_KEY = 'petal.conversations';
/** How many conversations are kept; the oldest beyond this are dropped. */
export const MAX_CONVERSATIONS = 200;
/** Characters of the first message used as a conversation's title. */
export const TITLE_CHARS = 60;

export interface TurnStats {
  /** Completion tokens (from usage, or counted chunks when the stream was stopped). */
  tokens: number;
  /** Seconds from the first streamed token to the last. */
  seconds: number;
  /** Seconds from sending the request to the first token: the wait in the queue and the reading of the prompt. */
  firstTokenSeconds?: number;
  promptTokens: number;
  /** Prompt tokens the server did not read again because an earlier reply had already read them. */
  cachedTokens: number;
}

export interface Turn {
  role: 'user' | 'assistant';
  content: string;
  /** A user turn's images, as data: URLs, shown before its text. */
  images?: string[];
  reasoning?: string;
  toolCalls?: ToolCall[];
  finish?: FinishReason | 'stopped' | null;
  stats?: TurnStats;
  error?: { code: string; message: string };
}

export interface Conversation {
  id: string;
  title: string;
  turns: Turn[];
  updated: number;
}

/** What a reply is generated with. */
export interface GenerationOptions {
  model: string;
  thinking: boolean;
  preset: SamplingPreset;
}

export type StreamFn = typeof streamChat;
export type CountFn = typeof countPromptTokens;

export interface ChatDeps {
  storage?: Pick<Storage, 'getItem' | 'setItem'>;
  stream?: StreamFn;
  /** Counts a request's prompt tokens, for the context counter while a reply streams or when it was stopped. */
  count?: CountFn;
  now?: () => number;
}

function newId(): string {
  return typeof crypto !== 'undefined' && 'randomUUID' in crypto
    ? crypto.randomUUID()
    : `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** The history sent to the server: finished turns, without errors or the reasoning text. */
export function toMessages(turns: Turn[]): ChatMessage[] {
  const out: ChatMessage[] = [];
  for (const t of turns) {
    if (t.error && !t.content) continue;
    const m: ChatMessage = { role: t.role, content: t.content };
    if (t.images?.length) {
      m.content = [
        ...t.images.map((url) => ({ type: 'image_url' as const, image_url: { url } })),
        { type: 'text' as const, text: t.content },
      ];
    }
    if (t.toolCalls?.length) m.tool_calls = t.toolCalls;
    out.push(m);
  }
  return out;
}

export class ChatStore {
  conversations = $state<Conversation[]>([]);
  currentId = $state<string | null>(null);
  streaming = $state(false);
  /** The streaming reply's prompt tokens (once counted) and the tokens that arrived so far. */
  #live = $state({ prompt: 0, tokens: 0 });
  /** Tokens of context the current conversation fills: its last prompt and the reply to it. */
  contextUsed = $derived.by(() => {
    const c = this.current;
    if (!c) return 0;
    if (this.streaming && this.#live.prompt) return this.#live.prompt + this.#live.tokens;
    for (let i = c.turns.length - 1; i >= 0; i--) {
      const s = c.turns[i].stats;
      if (s) return s.promptTokens + s.tokens;
    }
    return 0;
  });

  #abort: AbortController | null = null;
  #storage: Pick<Storage, 'getItem' | 'setItem'> | null;
  #stream: StreamFn;
  #count: CountFn;
  #now: () => number;

  constructor(deps: ChatDeps = {}) {
    this.#storage = deps.storage ?? (typeof localStorage !== 'undefined' ? localStorage : null);
    this.#stream = deps.stream ?? streamChat;
    this.#count = deps.count ?? countPromptTokens;
    this.#now = deps.now ?? (() => performance.now());
    this.#load();
  }

  get current(): Conversation | undefined {
    return this.conversations.find((c) => c.id === this.currentId);
  }

  newConversation(): Conversation {
    const c: Conversation = { id: newId(), title: 'New chat', turns: [], updated: Date.now() };
    this.conversations.unshift(c);
    this.currentId = c.id;
    return this.conversations[0];
  }

  select(id: string): void {
    if (this.streaming) this.stop();
    if (this.conversations.some((c) => c.id === id)) this.currentId = id;
  }

  remove(id: string): void {
    if (id === this.currentId && this.streaming) this.stop();
    this.conversations = this.conversations.filter((c) => c.id !== id);
    if (this.currentId === id) this.currentId = this.conversations[0]?.id ?? null;
    this.save();
  }

  /** Sends text, with any images (data: URLs), as the user's next message and streams the reply. */
  async send(text: string, opts: GenerationOptions, images: string[] = []): Promise<void> {
    text = text.trim();
    if ((!text && images.length === 0) || this.streaming) return;
    const c = this.current ?? this.newConversation();
    const title = text || plural(images.length, 'image');
    if (c.turns.length === 0) c.title = title.length > TITLE_CHARS ? title.slice(0, TITLE_CHARS - 1) + '…' : title;
    const turn: Turn = { role: 'user', content: text };
    if (images.length) turn.images = [...images];
    c.turns.push(turn);
    await this.#reply(c, opts);
  }

  /** Replaces the last reply with a new one. */
  async regenerate(opts: GenerationOptions): Promise<void> {
    const c = this.current;
    if (!c || this.streaming) return;
    while (c.turns.length && c.turns[c.turns.length - 1].role === 'assistant') c.turns.pop();
    if (c.turns.length === 0) return;
    await this.#reply(c, opts);
  }

  /** Stops the streaming reply; what arrived is kept. */
  stop(): void {
    this.#abort?.abort();
  }

  save(): void {
    if (!this.#storage) return;
    const keep = $state.snapshot(this.conversations).slice(0, MAX_CONVERSATIONS);
    try {
      this.#storage.setItem(STORAGE_KEY, JSON.stringify(keep));
      return;
    } catch {
      // Storage full (images fill its few megabytes fast) or disabled.
    }
    try {
      // Kept without the images rather than not at all.
      const text = keep.map((c) => ({ ...c, turns: c.turns.map(({ images: _, ...t }) => t) }));
      this.#storage.setItem(STORAGE_KEY, JSON.stringify(text));
    } catch {
      // Disabled: the chat still works, it is just not kept.
    }
  }

  #load(): void {
    try {
      const raw = this.#storage?.getItem(STORAGE_KEY);
      if (!raw) return;
      const parsed: unknown = JSON.parse(raw);
      if (!Array.isArray(parsed)) return;
      this.conversations = parsed.filter(
        (c): c is Conversation =>
          !!c && typeof c.id === 'string' && typeof c.title === 'string' && Array.isArray(c.turns),
      );
      this.currentId = this.conversations[0]?.id ?? null;
    } catch {
      // A damaged store is ignored rather than breaking the app.
    }
  }

  async #reply(c: Conversation, opts: GenerationOptions): Promise<void> {
    const messages = toMessages(c.turns);
    c.turns.push({ role: 'assistant', content: '', reasoning: '', finish: null });
    const turn = c.turns[c.turns.length - 1];
    const sampling = PRESETS[opts.preset].sampling;
    const req: ChatRequest = {
      model: opts.model,
      messages,
      stream: true,
      stream_options: { include_usage: true },
      ...sampling,
      chat_template_kwargs: { enable_thinking: opts.thinking },
    };
    const abort = new AbortController();
    this.#abort = abort;
    this.streaming = true;
    this.#live = { prompt: 0, tokens: 0 };
    // Counted beside the reply, not before it: the counter fills in while it streams,
    // and a stopped reply, which gets no usage from the server, still counts its prompt.
    const counted = this.#count(messages, opts.thinking).then(
      (n) => {
        if (this.#abort === abort) this.#live.prompt = n;
        return n;
      },
      () => 0,
    );
    const start = this.#now();
    // The first chunk names the role before the prompt is read; time starts at the first token.
    let first: number | null = null;
    let last = 0;
    let chunks = 0;
    let seen = 0;
    const apply = (r: Reply) => {
      turn.content = r.content;
      turn.reasoning = r.reasoning;
      if (r.toolCalls.length) turn.toolCalls = r.toolCalls.map((tc) => ({ ...tc, function: { ...tc.function } }));
    };
    const onChunk = (r: Reply) => {
      const size = r.content.length + r.reasoning.length + r.toolCalls.reduce((n, tc) => n + tc.function.arguments.length + 1, 0);
      if (size > seen) {
        const t = this.#now();
        first ??= t;
        last = t;
        chunks++;
        seen = size;
        this.#live.tokens = chunks;
      }
      apply(r);
    };
    try {
      const r = await this.#stream(req, onChunk, abort.signal);
      apply(r);
      turn.finish = abort.signal.aborted ? 'stopped' : r.finish;
      turn.stats = {
        tokens: r.usage?.completion_tokens ?? chunks,
        seconds: first === null ? 0 : Math.max(0, (last - first) / 1000),
        promptTokens: r.usage?.prompt_tokens ?? (await counted),
        cachedTokens: r.usage?.prompt_tokens_details?.cached_tokens ?? 0,
      };
      if (first !== null) turn.stats.firstTokenSeconds = Math.max(0, (first - start) / 1000);
    } catch (e) {
      const err = e instanceof ApiError ? e : new ApiError(0, NETWORK_ERROR, String(e));
      turn.error = { code: err.code, message: err.message };
    } finally {
      this.streaming = false;
      this.#abort = null;
      c.updated = Date.now();
      this.save();
    }
  }
}

/** Decode rate of a finished reply in tokens per second, the wait for the first token left out; 0 when too short to say. */
export function tokensPerSecond(s: TurnStats | undefined): number {
  if (!s || s.seconds <= 0 || s.tokens < 2) return 0;
  return (s.tokens - 1) / s.seconds;
}

/** The parts of the line under a reply: its length, the wait for its first token, its speed, the prompt it reused. */
export function describeStats(s: TurnStats): string[] {
  const out = [plural(s.tokens, 'token')];
  if (s.firstTokenSeconds !== undefined) out.push(`first token after ${formatSeconds(s.firstTokenSeconds)}`);
  const tps = tokensPerSecond(s);
  if (tps) out.push(`${tps.toFixed(1)} tokens/s`);
  if (s.cachedTokens > 0 && s.promptTokens > 0) {
    out.push(`${s.cachedTokens.toLocaleString('en-US')} of ${plural(s.promptTokens, 'prompt token')} reused from earlier`);
  }
  return out;
}
