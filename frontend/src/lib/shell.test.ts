import { afterEach, describe, expect, it, vi } from 'vitest';
import { copyText, hideWindow, inDesktop } from './shell';

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
    vi.stubGlobal('navigator', { platform: 'Linux x86_64' });
    hideWindow();
    expect(rt.WindowHide).not.toHaveBeenCalled();
    vi.stubGlobal('navigator', { platform: 'MacIntel' });
    hideWindow();
    expect(rt.WindowHide).toHaveBeenCalledOnce();
  });
});
