import { describe, expect, it } from 'vitest';
import { formatRate, memoryLabel, setupVerdict, USABLE_TOKENS_PER_S } from './verdict';
import type { FitReport } from './api/types';

const GB = 1e9;
const base: FitReport = {
  verdict: 'fits',
  max_context: 262144,
  context: 32768,
  working_set_bytes: 48 * GB,
  weights_bytes: 19 * GB,
  kv_bytes_per_token: 20480,
  advice: 'Fits: 19.81 GiB of the 44.70 GiB working set',
  working_set_source: 'MemAvailable of this machine',
  model: 'Qwen3.6-35B-A3B-4bit',
  backend: 'cpu',
  decode_bytes_per_token: 2.5 * GB,
  download_bytes: 20 * GB,
};
const cpu = (tps: number): FitReport => ({
  ...base,
  cpu_decode: { read_bytes_per_second: tps * 2.5 * GB, tokens_per_second: tps, machine: 'AMD EPYC, 2 cores', measured: '2026-12-03T14:00:00Z', how: 'x' },
});

describe('setupVerdict', () => {
  it('gives one red verdict for a CPU too slow to chat with, not a green fit above it', () => {
    const v = setupVerdict(cpu(4.2));
    expect(v.level).toBe('no');
    expect(v.headline).toBe('Too slow to chat with here: about 4.2 tokens per second');
    expect(v.headline).not.toMatch(/Fits/);
    expect(v.detail).toContain('AMD EPYC, 2 cores');
    expect(v.recommendDownload).toBe(false);
  });

  it('recommends a CPU fast enough, with its speed', () => {
    const v = setupVerdict(cpu(USABLE_TOKENS_PER_S + 1));
    expect(v.level).toBe('fits');
    expect(v.headline).toBe('Runs here on the CPU at about 6.0 tokens per second');
    expect(v.recommendDownload).toBe(true);
  });

  it('says the speed is not known, with no number, when the CPU was not measured', () => {
    const v = setupVerdict({ ...base, cpu_decode_error: 'measuring the CPU backend’s decode: interrupted' });
    expect(v.level).toBe('reduced');
    expect(v.headline).toBe('Fits in memory; its speed on this CPU is not known');
    expect(v.detail).toContain('interrupted');
    expect(v.headline + v.detail).not.toMatch(/tokens per second/);
  });

  it('says a model that does not fit does not, whatever the speed', () => {
    const v = setupVerdict({ ...cpu(50), verdict: 'no' });
    expect(v.level).toBe('no');
    expect(v.headline).toBe('Does not fit this machine');
    expect(v.recommendDownload).toBe(false);
  });

  it('gives a GPU’s memory verdict with the context it allows', () => {
    const metal = { ...base, backend: 'metal' as const };
    expect(setupVerdict(metal).headline).toBe('Fits this machine, with up to 256K tokens of context');
    expect(setupVerdict(metal).detail).toContain('this Mac’s GPU');
    const reduced = setupVerdict({ ...metal, verdict: 'reduced', max_context: 65536, context: 65536 });
    expect(reduced).toMatchObject({ level: 'reduced', headline: 'Fits at up to 64K tokens of context', recommendDownload: true });
  });

  it('states sizes in one unit and never Metal’s words off a Mac', () => {
    for (const f of [cpu(2), cpu(9), base, { ...base, verdict: 'no' as const }, { ...base, backend: 'cuda' as const }]) {
      const v = setupVerdict(f);
      const text = v.headline + ' ' + v.detail + ' ' + memoryLabel(f);
      expect(text).not.toMatch(/GiB|working set/);
    }
    expect(memoryLabel(base)).toBe('Memory available');
  });
});

describe('formatRate', () => {
  it('rounds as the screen shows it', () => {
    expect(formatRate(0.456)).toBe('0.46');
    expect(formatRate(4.26)).toBe('4.3');
  });
});
