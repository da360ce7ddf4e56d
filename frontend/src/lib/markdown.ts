// Markdown to safe HTML: marked parses, highlight.js colours code blocks,
// DOMPurify removes anything a model's output could use to run script.

import { Marked, type Tokens } from 'marked';
import DOMPurify from 'dompurify';
import hljs from 'highlight.js/lib/core';
import bash from 'highlight.js/lib/languages/bash';
import c from 'highlight.js/lib/languages/c';
import cpp from 'highlight.js/lib/languages/cpp';
import css from 'highlight.js/lib/languages/css';
import go from 'highlight.js/lib/languages/go';
import java from 'highlight.js/lib/languages/java';
import javascript from 'highlight.js/lib/languages/javascript';
import json from 'highlight.js/lib/languages/json';
import python from 'highlight.js/lib/languages/python';
import rust from 'highlight.js/lib/languages/rust';
import sql from 'highlight.js/lib/languages/sql';
import swift from 'highlight.js/lib/languages/swift';
import typescript from 'highlight.js/lib/languages/typescript';
import xml from 'highlight.js/lib/languages/xml';
import yaml from 'highlight.js/lib/languages/yaml';

for (const [name, lang] of Object.entries({
  bash, c, cpp, css, go, java, javascript, json, python, rust, sql, swift, typescript, xml, yaml,
})) {
  hljs.registerLanguage(name, lang);
}

function escapeHTML(s: string): string {
  return s.replace(/[&<>"']/g, (ch) => `&#${ch.charCodeAt(0)};`);
}

const marked = new Marked({
  gfm: true,
  // A model's single newlines are meant (a haiku's lines, an address), as the
  // API and the terminal show them; CommonMark would join them into one line.
  breaks: true,
  renderer: {
    code({ text, lang }: Tokens.Code): string {
      const name = (lang ?? '').trim().split(/\s+/)[0].toLowerCase();
      const known = name && hljs.getLanguage(name);
      const body = known ? hljs.highlight(text, { language: name, ignoreIllegals: true }).value : escapeHTML(text);
      const cls = known ? ` class="hljs language-${escapeHTML(name)}"` : ' class="hljs"';
      return `<pre><code${cls}>${body}</code></pre>\n`;
    },
  },
});

let hooked = false;

function sanitize(html: string): string {
  if (!hooked) {
    DOMPurify.addHook('afterSanitizeAttributes', (node) => {
      if (node.tagName === 'A') {
        node.setAttribute('target', '_blank');
        node.setAttribute('rel', 'noopener noreferrer');
      }
    });
    hooked = true;
  }
  return DOMPurify.sanitize(html, { USE_PROFILES: { html: true }, FORBID_TAGS: ['style', 'form', 'input'] });
}

/** Renders model output as sanitized HTML. Links open outside the app. */
export function renderMarkdown(src: string): string {
  return sanitize(marked.parse(src, { async: false }) as string);
}

/**
 * Renders a reply that grows chunk by chunk in time linear in its length:
 * every top-level block but the last is final once a later block has begun,
 * so it is lexed, highlighted and sanitized once; each chunk re-renders only
 * the open last block. Output equals renderMarkdown of the same text.
 */
export class StreamingMarkdown {
  #src = '';
  /** The length of the prefix of #src whose blocks are final. */
  #doneLen = 0;
  #doneHTML = '';
  /**
   * Reference definitions ([x]: url) change how earlier blocks render, and the
   * lexer resolves them only within what it is given; a raw HTML block left
   * open would wrap the blocks after it. A reply with either is rendered whole
   * from then on.
   */
  #whole = false;
  /** Characters handed to the lexer so far, which tests hold to a linear bound. */
  lexed = 0;

  render(src: string): string {
    src = src.replace(/\r\n?/g, '\n');
    if (!src.startsWith(this.#src.slice(0, this.#doneLen))) {
      this.#reset();
      this.#whole = false;
    }
    this.#src = src;
    if (this.#whole) {
      this.lexed += src.length;
      return renderMarkdown(src);
    }
    const tail = src.slice(this.#doneLen);
    this.lexed += tail.length;
    const tokens = marked.lexer(tail);
    if (
      Object.keys(tokens.links).length > 0 ||
      tokens.some((t) => t.type === 'html') ||
      tokens.reduce((n, t) => n + t.raw.length, 0) !== tail.length
    ) {
      this.#whole = true;
      this.#reset();
      this.lexed += src.length;
      return renderMarkdown(src);
    }
    let open = tokens.length - 1;
    while (open > 0 && tokens[open].type === 'space') open--;
    for (const t of tokens.slice(0, Math.max(open, 0))) {
      this.#doneHTML += sanitize(marked.parser([t]));
      this.#doneLen += t.raw.length;
    }
    return this.#doneHTML + sanitize(marked.parser(tokens.slice(Math.max(open, 0))));
  }

  #reset(): void {
    this.#doneLen = 0;
    this.#doneHTML = '';
  }
}
