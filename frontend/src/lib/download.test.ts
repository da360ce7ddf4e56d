import { describe, expect, it } from 'vitest';
import { describeProblem, downloadProblem, secondsToRetry } from './download';
import type { DownloadRetry, DownloadStatus } from './api/types';

// A retry as manage.DownloadRetry writes it.
const retry = (next_attempt_at: string): DownloadRetry => ({
  reason: 'dns',
  message: 'The Hub\'s address huggingface.co cannot be looked up: check the internet connection.',
  detail: 'dial tcp: lookup huggingface.co: no such host',
  unreachable: true,
  next_attempt_at,
  attempt: 2,
  max_attempts: 11,
});

describe('describeProblem', () => {
  it('puts a raw network error behind the words for an unreachable Hub', () => {
    const raw = 'Get "https://huggingface.co/api/models/x": dial tcp: lookup huggingface.co: no such host';
    for (const code of ['unreachable', 'dns', 'no_route', 'refused', 'tls', 'timeout', 'network']) {
      expect(describeProblem({ code, message: raw })).toEqual({
        headline: 'The Hugging Face Hub cannot be reached: check this machine’s internet connection.',
        detail: raw,
      });
    }
    // An answer that was an error is not a missing network.
    expect(describeProblem({ code: 'server', message: '503 Service Unavailable' }).headline).toBe('The download failed.');
  });

  it('takes the server’s words when it sends the detail apart', () => {
    expect(describeProblem({ code: 'dns', message: 'The Hub’s name does not resolve.', detail: 'lookup: no such host' })).toEqual({
      headline: 'The Hub’s name does not resolve.',
      detail: 'lookup: no such host',
    });
  });

  it('says what an unknown failure is without showing the Go error as the headline', () => {
    const p = describeProblem({ code: 'download_failed', message: 'open /x/.part: input/output error' });
    expect(p.headline).toBe('The download failed.');
    expect(p.detail).toBe('open /x/.part: input/output error');
    expect(describeProblem({ code: 'no_space', message: 'write: no space left on device' }).headline).toMatch(/disk is full/);
  });
});

describe('secondsToRetry', () => {
  const d = (next_attempt_at?: string): DownloadStatus => ({
    state: 'running', repo: 'r', revision: 'v', dir: '', bytes_done: 0, bytes_total: 0, speed: 0, eta_seconds: 0,
    retry: next_attempt_at === undefined ? undefined : retry(next_attempt_at),
  });
  it('counts down to the next attempt and is null without one', () => {
    const now = Date.parse('2026-12-01T21:00:00Z');
    expect(secondsToRetry(d('2026-12-01T21:00:12.2Z'), now)).toBe(13);
    expect(secondsToRetry(d('2026-12-01T20:59:00Z'), now)).toBe(0);
    expect(secondsToRetry(d(), now)).toBeNull();
    expect(secondsToRetry(d('soon'), now)).toBeNull();
  });
});

describe('downloadProblem', () => {
  const base: DownloadStatus = { state: 'running', repo: 'r', revision: 'v', dir: '', bytes_done: 0, bytes_total: 0, speed: 0, eta_seconds: 0 };
  it('shows the retry the hub reports while running, its error behind the disclosure', () => {
    const p = downloadProblem({ ...base, retry: retry('2026-12-01T21:00:12Z') });
    expect(p?.headline).toMatch(/cannot be looked up/);
    expect(p?.detail).toBe('dial tcp: lookup huggingface.co: no such host');
  });
  it('shows the last error once the download has stopped, and nothing without one', () => {
    const failed: DownloadStatus = { ...base, state: 'failed', error: { code: 'unreachable', message: 'gave up' }, retry: retry('2026-12-01T21:00:12Z') };
    expect(downloadProblem(failed)?.headline).toMatch(/cannot be reached/);
    expect(downloadProblem(base)).toBeNull();
  });
});
