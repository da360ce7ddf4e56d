import { describe, expect, it } from 'vitest';
import { renderMarkdown, StreamingMarkdown } from './markdown';

describe('renderMarkdown', () => {
  it('renders Markdown and highlights known languages', () => {
    const html = renderMarkdown('# Hi\n\n**bold** and `x`\n\n```go\nfunc main() {}\n```\n');
    expect(html).toContain('<h1>Hi</h1>');
    expect(html).toContain('<strong>bold</strong>');
    expect(html).toContain('class="hljs language-go"');
    expect(html).toContain('<span class="hljs-keyword">func</span>');
  });

  it('escapes code in unknown languages', () => {
    const html = renderMarkdown('```zzz\n<b>&\n```');
    expect(html).toContain('&lt;b&gt;&amp;');
  });

  it('removes script, event handlers and javascript: links', () => {
    const html = renderMarkdown(
      '<script>alert(1)</script><img src=x onerror="alert(2)"><a href="javascript:alert(3)">x</a><iframe src="http://e"></iframe>\n\n[y](javascript:alert(4))',
    );
    expect(html).toContain('<img src="x">');
    expect(html).not.toMatch(/<script|onerror|href="javascript:|<iframe/i);
  });

  it('keeps a reply\'s single line breaks', () => {
    const haiku = 'Old silent pond\nA frog jumps into the pond\nSplash! Silence again';
    const html = renderMarkdown(haiku);
    expect(html.match(/<br>/g)).toHaveLength(2);
    expect(html).toBe('<p>Old silent pond<br>A frog jumps into the pond<br>Splash! Silence again</p>\n');
  });

  it('opens links outside the app', () => {
    const html = renderMarkdown('[docs](https://example.com)');
    expect(html).toContain('target="_blank"');
    expect(html).toContain('rel="noopener noreferrer"');
  });
});

describe('StreamingMarkdown', () => {
  const replies = [
    '# Plan\n\nFirst a paragraph with **bold**, `code` and a [link](https://example.com).\n\n' +
      '1. one\n2. two\n\n   still two\n3. three\n\n```go\nfunc main() {\n\tprintln("hi")\n}\n```\n\n' +
      '| a | b |\n|---|---|\n| 1 | 2 |\n| 3 | 4 |\n\nSetext\n======\n\n> quoted\n> more\n\n- x\n- y\n\n    indented code\n\n    more code\n\nThe end.',
    'Short answer.',
    '```\nunclosed fence\nstill code',
    'Text\n---\nafter a setext heading\n\n***\n\n* a\n\n  b\n* c',
    'See [the docs][d] for more.\n\n[d]: https://example.com/docs\n\nAfter.',
    '<div>\n\nraw html left open\n\nthen text',
    'A haiku:\n\nOld silent pond\nA frog jumps in\nSplash',
  ];

  // Chunk sizes as a model's stream produces them: single characters, words, and uneven runs.
  const chunkings = [2, 5, 13];

  it.each(replies.map((r, i) => [i, r] as const))('renders reply %i as renderMarkdown does at every chunk', (_, reply) => {
    for (const size of chunkings) {
      const md = new StreamingMarkdown();
      for (let end = size; ; end += size) {
        const prefix = reply.slice(0, Math.min(end, reply.length));
        expect(md.render(prefix), `size ${size}, ${prefix.length} chars`).toBe(renderMarkdown(prefix));
        if (end >= reply.length) break;
      }
    }
  }, 60_000);

  it('starts over when the text is replaced rather than extended', () => {
    const md = new StreamingMarkdown();
    md.render('# One\n\nfirst reply\n\nmore');
    expect(md.render('Another *reply*')).toBe(renderMarkdown('Another *reply*'));
  });

  it('lexes a long streamed reply in linear time', () => {
    const block = (i: number) => `Paragraph ${i} says something with *emphasis* and \`code\`.\n\n`;
    let reply = '';
    for (let i = 0; i < 150; i++) reply += block(i);
    const md = new StreamingMarkdown();
    let wholeLexed = 0;
    for (let end = 8; end < reply.length + 8; end += 8) {
      const prefix = reply.slice(0, end);
      md.render(prefix);
      wholeLexed += prefix.length;
    }
    // Each chunk lexes only the open paragraph: about a paragraph's length per chunk.
    expect(md.lexed).toBeLessThan(reply.length * 10);
    // Rendering every prefix whole, as Message.svelte did, lexes quadratically more.
    expect(wholeLexed).toBeGreaterThan(md.lexed * 10);
  }, 60_000);
});
