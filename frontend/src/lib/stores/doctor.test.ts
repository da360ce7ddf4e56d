import { describe, expect, it } from 'vitest';
import { DOCTOR_KEY, DoctorStore, type DoctorStorage } from './doctor.svelte';
import { ApiError } from '../api/http';
import type { DoctorReply } from '../api/types';

const failing: DoctorReply = {
  report: {
    backend: 'metal', device: 'Apple M2', os: 'macOS 14.5', arch: 'arm64', pass: false, failed: 1, started: '2026-12-03T14:00:00Z', seconds: 3,
    checks: [{ section: 'compile', name: 'attention.metal/attn_prep_f16kv', pass: false, message: 'attention.metal:91: error', seconds: 0.1 }],
  },
  text: 'FAIL compile attention.metal/attn_prep_f16kv\n    attention.metal:91: error\n',
};

describe('DoctorStore', () => {
  it('keeps the report of a run, failures included', async () => {
    const d = new DoctorStore(async () => failing, null);
    const run = d.check();
    expect(d.running).toBe(true);
    await run;
    expect(d.running).toBe(false);
    expect(d.reply?.report.failed).toBe(1);
    expect(d.reply?.text).toContain('attention.metal:91');
    expect(d.error).toBeNull();
  });

  it('runs once at a time', async () => {
    let calls = 0;
    let release: () => void = () => {};
    const d = new DoctorStore(() => {
      calls++;
      return new Promise((resolve) => (release = () => resolve(failing)));
    }, null);
    const first = d.check();
    await d.check();
    release();
    await first;
    expect(calls).toBe(1);
  });

  it('shows a refusal and keeps the last report', async () => {
    let busy = false;
    const d = new DoctorStore(async () => {
      if (busy) throw new ApiError(409, 'doctor_busy', 'a check is already running');
      return failing;
    }, null);
    await d.check();
    busy = true;
    await d.check();
    expect(d.error?.code).toBe('doctor_busy');
    expect(d.reply).toStrictEqual(failing);
  });
});

/** A Storage of one page's lifetime, shared by the stores a test makes as reloads would. */
function memoryStorage(): DoctorStorage & { items: Map<string, string> } {
  const items = new Map<string, string>();
  return { items, getItem: (k) => items.get(k) ?? null, setItem: (k, v) => void items.set(k, v) };
}

describe('DoctorStore across reloads', () => {
  it('shows the last report again after a reload', async () => {
    const storage = memoryStorage();
    expect(new DoctorStore(async () => failing, storage).reply).toBeNull();
    await new DoctorStore(async () => failing, storage).check();
    const reloaded = new DoctorStore(async () => {
      throw new Error('must not run');
    }, storage);
    expect(reloaded.reply).toStrictEqual(failing);
  });

  it('ignores a kept value that is not a report', () => {
    const storage = memoryStorage();
    for (const bad of ['{', '{"text":1}', '{"text":"x","report":{}}', 'null']) {
      storage.items.set(DOCTOR_KEY, bad);
      expect(new DoctorStore(async () => failing, storage).reply, bad).toBeNull();
    }
  });

  it('keeps the report for this page when storage refuses it', async () => {
    const d = new DoctorStore(async () => failing, {
      getItem: () => null,
      setItem: () => {
        throw new DOMException('full', 'QuotaExceededError');
      },
    });
    await d.check();
    expect(d.reply).toStrictEqual(failing);
    expect(d.error).toBeNull();
  });
});
