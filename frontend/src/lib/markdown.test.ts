import { describe, expect, it } from 'vitest';
import { renderMarkdown } from './markdown';

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

  it('opens links outside the app', () => {
    const html = renderMarkdown('[docs](https://example.com)');
    expect(html).toContain('target="_blank"');
    expect(html).toContain('rel="noopener noreferrer"');
  });
});
