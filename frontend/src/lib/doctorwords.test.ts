import { describe, expect, it } from 'vitest';
import { doctorBackend, doctorLevel, doctorSkips, doctorVerdict, doctorWords } from './doctorwords';
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

describe('a run with skipped checks', () => {
  // A hosted CI Mac's paravirtual GPU, as petal doctor reports it: the GPU checks SKIP with the reason.
  const why = 'skipped: Apple Paravirtual device is an Apple5 GPU, and Petal\'s Metal driver opens Apple7 (M1) or later only';
  const vm = (over: Partial<DoctorReport> = {}): DoctorReport =>
    report({
      backend: 'metal',
      device: 'Apple Paravirtual device',
      skipped: 3,
      checks: [
        { section: 'device', name: 'macOS', pass: true, message: '15.5', seconds: 0 },
        { section: 'device', name: 'GPU family', pass: false, skipped: true, message: 'Apple5 (Apple Paravirtual device): a virtual machine', seconds: 0 },
        { section: 'compile', name: 'rmsnorm.metal', pass: false, skipped: true, message: why, seconds: 0 },
        { section: 'model', name: 'demo', pass: false, skipped: true, message: why, seconds: 0 },
      ],
      ...over,
    });

  it('says how many were skipped, never that all passed', () => {
    expect(doctorVerdict(vm())).toBe('1 check passed, 3 skipped on Apple Paravirtual device');
    expect(doctorVerdict(vm())).not.toMatch(/All/);
    expect(doctorLevel(vm())).toBe('reduced');
    expect(doctorVerdict(vm({ pass: false, failed: 1 }))).toBe('1 of 1 check that ran failed, 3 skipped on Apple Paravirtual device');
    expect(doctorLevel(vm({ pass: false, failed: 1 }))).toBe('no');
  });

  it('says none ran when every check was skipped', () => {
    const none = vm({ pass: false, skipped: 1, checks: vm().checks.slice(1, 2) });
    expect(doctorVerdict(none)).toBe('No check ran, 1 skipped on Apple Paravirtual device');
    expect(doctorLevel(none)).toBe('reduced');
  });

  it('counts skips from the checks where the report gives no count', () => {
    expect(doctorVerdict(vm({ skipped: undefined }))).toBe('1 check passed, 3 skipped on Apple Paravirtual device');
  });

  it('gives each reason once, with the checks it kept from running', () => {
    expect(doctorSkips(vm())).toEqual([
      { reason: 'Apple5 (Apple Paravirtual device): a virtual machine', checks: ['GPU family'] },
      { reason: why, checks: ['rmsnorm.metal', 'demo'] },
    ]);
    expect(doctorSkips(report({}))).toEqual([]);
    expect(doctorLevel(report({}))).toBe('fits');
  });
});
