// The one place that knows about the desktop shell. In the Wails window the
// runtime is injected as window.runtime; in a browser every call is a no-op,
// so components never need to ask where they run.

interface WailsRuntime {
  WindowHide(): void;
  BrowserOpenURL(url: string): void;
  ClipboardSetText(text: string): Promise<boolean>;
}

function runtime(): WailsRuntime | null {
  const w = globalThis as unknown as { runtime?: WailsRuntime };
  return w.runtime && typeof w.runtime.WindowHide === 'function' ? w.runtime : null;
}

/** Whether the UI runs inside the desktop app. */
export function inDesktop(): boolean {
  return runtime() !== null;
}

interface Navigatorish {
  userAgent: string;
  userAgentData?: { platform: string };
}

/**
 * Whether the page runs on a Mac: the client hint where the engine gives it,
 * else the user agent (WebKit, Wails' webview on macOS, sends no hints).
 * navigator.platform is deprecated and frozen in some engines.
 */
export function onMac(nav: Navigatorish = navigator): boolean {
  if (nav.userAgentData?.platform) return nav.userAgentData.platform === 'macOS';
  return /Macintosh/.test(nav.userAgent);
}

/**
 * Hides the chat window (Escape in the desktop app) on a Mac, where the
 * menu-bar item brings it back; elsewhere, and in a browser, nothing.
 */
export function hideWindow(): void {
  if (onMac()) runtime()?.WindowHide();
}

/** Copies text, through the shell when there is one (webviews may lack the clipboard API). */
export async function copyText(text: string): Promise<boolean> {
  const rt = runtime();
  if (rt) return rt.ClipboardSetText(text);
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    return false;
  }
}
