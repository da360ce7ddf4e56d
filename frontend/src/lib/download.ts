// What the Setup screen says about a download problem: a sentence a user can
// act on, with the server's own words kept for a disclosure.

import type { DownloadError, DownloadStatus } from './api/types';

/**
 * Codes of a Hub that cannot be reached at all: package hub's ErrUnreachable and the reasons its
 * Diagnose gives (dns, no_route, refused, tls, timeout, network).
 */
const UNREACHABLE = new Set(['unreachable', 'hub_unreachable', 'dns', 'no_route', 'refused', 'tls', 'timeout', 'network']);

const HEADLINES: Record<string, string> = {
  checksum: 'A downloaded file did not match its checksum; retrying downloads it again.',
  no_space: 'The disk is full: free some space, then retry.',
  not_found: 'The Hub does not have one of the model’s files.',
  auth: 'The Hub refused access: check the HF_TOKEN Petal runs with.',
  stalled: 'The download stopped moving.',
  bad_listing: 'The Hub sent a list of files Petal cannot use.',
  busy: 'Another download of this model is running.',
};

export interface Problem {
  /** What happened, in words for a user. */
  headline: string;
  /** The server's exact message, for a bug report; '' when the headline already is it. */
  detail: string;
}

/**
 * The words for a download error. A server that sends human words in
 * message puts the raw error in detail; one that does not gets a headline
 * chosen by code, with its message as the detail.
 */
export function describeProblem(e: DownloadError): Problem {
  if (e.detail) return { headline: e.message, detail: e.detail };
  if (UNREACHABLE.has(e.code)) {
    return { headline: 'The Hugging Face Hub cannot be reached: check this machine’s internet connection.', detail: e.message };
  }
  return { headline: HEADLINES[e.code] ?? 'The download failed.', detail: e.message };
}

/** Whole seconds until the next attempt of a retrying download, or null when none is planned. */
export function secondsToRetry(d: DownloadStatus, now: number): number | null {
  if (!d.retry?.next_attempt_at) return null;
  const t = Date.parse(d.retry.next_attempt_at);
  if (!Number.isFinite(t)) return null;
  return Math.max(0, Math.ceil((t - now) / 1000));
}

/**
 * The problem a download shows: the retry under way while it is running (the hub's own words, its
 * error behind the disclosure), else its last error.
 */
export function downloadProblem(d: DownloadStatus): Problem | null {
  if (d.state === 'running' && d.retry) return { headline: d.retry.message, detail: d.retry.detail };
  return d.error ? describeProblem(d.error) : null;
}
