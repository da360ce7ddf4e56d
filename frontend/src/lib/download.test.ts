import { describe, expect, it } from 'vitest';
import { describeProblem, secondsToRetry } from './download';
import type { DownloadStatus } from './api/types';

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
  const d = (retry_at?: string): DownloadStatus => ({
    state: 'running', repo: 'r', revision: 'v', dir: '', bytes_done: 0, bytes_total: 0, speed: 0, eta_seconds: 0, retry_at,
  });
  it('counts down to the next attempt and is null without one', () => {
    const now = Date.parse('2026-12-01T21:00:00Z');
    expect(secondsToRetry(d('2026-12-01T21:00:12.2Z'), now)).toBe(13);
    expect(secondsToRetry(d('2026-12-01T20:59:00Z'), now)).toBe(0);
    expect(secondsToRetry(d(), now)).toBeNull();
    expect(secondsToRetry(d('soon'), now)).toBeNull();
  });
});
