import { describe, expect, it } from 'vitest';
import { doctorBackend, doctorVerdict, doctorWords } from './doctorwords';
import type { DoctorReport } from './api/types';

const report = (over: Partial<DoctorReport>): DoctorReport => ({
  backend: 'sim', device: 'Petal sim', os: 'linux', arch: 'amd64', pass: true, failed: 0, started: '2026-12-03T14:00:00Z', seconds: 90,
  checks: [
    { section: 'compile', name: 'a', pass: true, message: '', seconds: 1 },
    { section: 'model', name: 'demo', pass: true, message: '', seconds: 1 },
  ],
  ...over,
});

describe('doctorWords', () => {
  it('calls a check on a Mac what it is', () => {
    expect(doctorWords('metal').button).toBe('Check this Mac');
    expect(doctorWords('metal').about).toContain('this Mac’s GPU');
  });

  it('says off a Mac that the simulator, not this machine’s GPU, is tested', () => {
    for (const w of Object.values(doctorWords('sim'))) {
      expect(w).not.toMatch(/this Mac|on this machine's GPU/);
    }
    expect(doctorWords('sim').about).toContain('does not test this machine’s hardware');
    expect(doctorWords(undefined).button).not.toContain('Mac');
  });
});

describe('doctorBackend', () => {
  it('follows the server’s machine, else the last report', () => {
    expect(doctorBackend('metal', undefined)).toBe('metal');
    expect(doctorBackend('cpu', report({ backend: 'metal' }))).toBe('sim');
    expect(doctorBackend('cuda', undefined)).toBe('sim');
    expect(doctorBackend(undefined, report({}))).toBe('sim');
    expect(doctorBackend(undefined, undefined)).toBeUndefined();
  });
});

describe('doctorVerdict', () => {
  it('never says a simulator run tested this machine', () => {
    expect(doctorVerdict(report({}))).toBe('All 2 checks passed in the GPU simulator (no GPU of this machine was tested)');
    expect(doctorVerdict(report({ pass: false, failed: 1 }))).toBe('1 of 2 checks failed in the GPU simulator (no GPU of this machine was tested)');
  });

  it('names the Mac’s GPU a Metal run tested', () => {
    expect(doctorVerdict(report({ backend: 'metal', device: 'Apple M3 Max' }))).toBe('All 2 checks passed on Apple M3 Max');
  });
});
