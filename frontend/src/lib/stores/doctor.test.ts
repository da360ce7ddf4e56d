import { describe, expect, it } from 'vitest';
import { DoctorStore } from './doctor.svelte';
import { ApiError } from '../api/http';
import type { DoctorReply } from '../api/types';

const failing: DoctorReply = {
  report: {
    backend: 'metal', device: 'Apple M2', os: 'macOS 14.5', arch: 'arm64', pass: false, failed: 1, seconds: 3,
    checks: [{ section: 'compile', name: 'attention.metal/attn_prep_f16kv', pass: false, message: 'attention.metal:91: error', seconds: 0.1 }],
  },
  text: 'FAIL compile attention.metal/attn_prep_f16kv\n    attention.metal:91: error\n',
};

describe('DoctorStore', () => {
  it('keeps the report of a run, failures included', async () => {
    const d = new DoctorStore(async () => failing);
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
    });
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
    });
    await d.check();
    busy = true;
    await d.check();
    expect(d.error?.code).toBe('doctor_busy');
    expect(d.reply).toStrictEqual(failing);
  });
});
