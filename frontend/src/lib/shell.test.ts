import { afterEach, describe, expect, it, vi } from 'vitest';
import { copyText, hideWindow, inDesktop, onMac } from './shell';

afterEach(() => {
  vi.unstubAllGlobals();
  delete (globalThis as { runtime?: unknown }).runtime;
});

describe('shell', () => {
  it('does nothing in a browser', async () => {
    expect(inDesktop()).toBe(false);
    expect(() => hideWindow()).not.toThrow();
    const writeText = vi.fn(async () => {});
    vi.stubGlobal('navigator', { ...navigator, clipboard: { writeText } });
    expect(await copyText('x')).toBe(true);
    expect(writeText).toHaveBeenCalledWith('x');
  });

  it('uses the Wails runtime in the desktop window, hiding only on a Mac', async () => {
    const rt = { WindowHide: vi.fn(), BrowserOpenURL: vi.fn(), ClipboardSetText: vi.fn(async () => true) };
    (globalThis as { runtime?: unknown }).runtime = rt;
    expect(inDesktop()).toBe(true);
    expect(await copyText('url')).toBe(true);
    expect(rt.ClipboardSetText).toHaveBeenCalledWith('url');
    vi.stubGlobal('navigator', { userAgent: 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36' });
    hideWindow();
    expect(rt.WindowHide).not.toHaveBeenCalled();
    vi.stubGlobal('navigator', { userAgent: 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15' });
    hideWindow();
    expect(rt.WindowHide).toHaveBeenCalledOnce();
  });

  it('tells a Mac by the client hint first, else by the user agent', () => {
    const safari = 'Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/18.0 Safari/605.1.15';
    const chrome = 'Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/140.0 Safari/537.36';
    expect(onMac({ userAgent: safari })).toBe(true);
    expect(onMac({ userAgent: chrome })).toBe(false);
    expect(onMac({ userAgent: 'Mozilla/5.0 (iPhone; CPU iPhone OS 18_0 like Mac OS X)' })).toBe(false);
    // A hint wins over a user agent that a reduced-UA engine may freeze.
    expect(onMac({ userAgent: safari, userAgentData: { platform: 'Windows' } })).toBe(false);
    expect(onMac({ userAgent: chrome, userAgentData: { platform: 'macOS' } })).toBe(true);
  });
});
