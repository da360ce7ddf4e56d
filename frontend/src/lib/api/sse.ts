// A reader of Server-Sent Events from a POST response body (EventSource can
// only GET). The parser follows the WHATWG event-stream rules that matter for
// /v1/chat/completions: "data:" lines joined by newlines, comment lines
// (pings) ignored, LF, CR or CRLF line ends, events split across reads.

export interface SSEEvent {
  event: string;
  data: string;
  id: string;
}

/** The longest line the parser keeps; a stream that exceeds it is broken or hostile. */
export const MAX_LINE_CHARS = 4 << 20;

export class SSEError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'SSEError';
  }
}

/** Incremental parser: push text as it arrives, get the complete events back. */
export class SSEParser {
  #buf = '';
  #data: string[] = [];
  #event = '';
  #id = '';
  #sawCR = false;

  push(text: string): SSEEvent[] {
    const out: SSEEvent[] = [];
    // A CR that ended the previous chunk may be the first half of a CRLF.
    if (this.#sawCR && text.startsWith('\n')) text = text.slice(1);
    this.#sawCR = false;
    this.#buf += text;
    let start = 0;
    for (let i = 0; i < this.#buf.length; i++) {
      const c = this.#buf.charCodeAt(i);
      if (c !== 10 && c !== 13) continue;
      this.#line(this.#buf.slice(start, i), out);
      if (c === 13) {
        if (i + 1 < this.#buf.length) {
          if (this.#buf.charCodeAt(i + 1) === 10) i++;
        } else {
          this.#sawCR = true;
        }
      }
      start = i + 1;
    }
    this.#buf = this.#buf.slice(start);
    if (this.#buf.length > MAX_LINE_CHARS) throw new SSEError(`an event-stream line is longer than ${MAX_LINE_CHARS} characters`);
    return out;
  }

  /** Ends the stream: an event without its closing blank line is dropped, as the spec says. */
  end(): void {
    this.#buf = '';
    this.#data = [];
    this.#event = '';
  }

  #line(line: string, out: SSEEvent[]): void {
    if (line === '') {
      if (this.#data.length > 0) {
        out.push({ event: this.#event || 'message', data: this.#data.join('\n'), id: this.#id });
      }
      this.#data = [];
      this.#event = '';
      return;
    }
    if (line.startsWith(':')) return;
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    switch (field) {
      case 'data':
        this.#data.push(value);
        break;
      case 'event':
        this.#event = value;
        break;
      case 'id':
        if (!value.includes('\0')) this.#id = value;
        break;
    }
  }
}

/** Yields the events of a response body until it ends or signal aborts. */
export async function* readSSE(body: ReadableStream<Uint8Array>, signal?: AbortSignal): AsyncGenerator<SSEEvent> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  const parser = new SSEParser();
  const onAbort = () => void reader.cancel().catch(() => {});
  signal?.addEventListener('abort', onAbort, { once: true });
  try {
    for (;;) {
      if (signal?.aborted) return;
      const { value, done } = await reader.read();
      if (done) {
        yield* parser.push(decoder.decode());
        parser.end();
        return;
      }
      yield* parser.push(decoder.decode(value, { stream: true }));
    }
  } finally {
    signal?.removeEventListener('abort', onAbort);
    reader.releaseLock();
  }
}
