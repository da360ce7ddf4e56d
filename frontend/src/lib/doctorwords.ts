// What the Setup screen's GPU check is called and says it does, which
// depends on what it tests: this Mac's GPU through Metal, or, on any other
// machine, Petal's simulator of an Apple GPU, which runs on the CPU and says
// nothing of the hardware.

import type { DoctorReport } from './api/types';

export interface DoctorWords {
  heading: string;
  button: string;
  about: string;
}

/**
 * The words for a check on backend: 'metal' (an Apple silicon Mac), 'sim', or
 * undefined while the server has not said which machine it runs on.
 */
export function doctorWords(backend: string | undefined): DoctorWords {
  switch (backend) {
    case 'metal':
      return {
        heading: 'This Mac’s GPU',
        button: 'Check this Mac',
        about:
          'Compiles every kernel on this Mac’s GPU, tests each against its reference, runs the demo model on the GPU against the CPU backend and times the kernels. Paste the report into a bug report.',
      };
    case 'sim':
      return {
        heading: 'GPU kernels, in the simulator',
        button: 'Check the kernels in the simulator',
        about:
          'This machine has no Apple GPU, so this tests Petal’s GPU kernels in its simulator of one, which runs on the CPU: it compiles every kernel for the simulator, tests each against its reference and runs the demo model there against the CPU backend. It does not test this machine’s hardware. Paste the report into a bug report.',
      };
    default:
      return {
        heading: 'GPU kernels',
        button: 'Check the GPU kernels',
        about: 'Compiles and tests Petal’s GPU kernels, then runs the demo model with them. Paste the report into a bug report.',
      };
  }
}

/**
 * The check's backend as the Setup screen can tell before a run: Metal where
 * the server says this is an Apple silicon Mac (its fit verdict's backend is
 * metal), the simulator where it says otherwise, else the last report's.
 */
export function doctorBackend(fitBackend: string | undefined, last: DoctorReport | undefined): string | undefined {
  if (fitBackend) return fitBackend === 'metal' ? 'metal' : 'sim';
  return last?.backend;
}

function checks(n: number): string {
  return n === 1 ? '1 check' : `${n} checks`;
}

/** How many of r's checks were skipped: the report's count, else its checks' marks. */
function skippedCount(r: DoctorReport): number {
  return r.skipped ?? r.checks.filter((c) => c.skipped).length;
}

/**
 * The headline of a finished run, which says what was tested, and never that
 * all passed when some could not run.
 */
export function doctorVerdict(r: DoctorReport): string {
  const where = r.backend === 'metal' ? ` on ${r.device || 'this Mac’s GPU'}` : ' in the GPU simulator (no GPU of this machine was tested)';
  const skipped = skippedCount(r);
  if (!skipped) return r.pass ? `All ${r.checks.length} checks passed${where}` : `${r.failed} of ${r.checks.length} checks failed${where}`;
  const ran = r.checks.length - skipped;
  if (r.failed) return `${r.failed} of ${checks(ran)} that ran failed, ${skipped} skipped${where}`;
  if (ran === 0) return `No check ran, ${skipped} skipped${where}`;
  return `${checks(ran)} passed, ${skipped} skipped${where}`;
}

/** The colour of the verdict: failed, incomplete (some skipped or none ran), or passed. */
export function doctorLevel(r: DoctorReport): 'fits' | 'reduced' | 'no' {
  if (r.failed) return 'no';
  return !r.pass || skippedCount(r) ? 'reduced' : 'fits';
}

/** Why checks were skipped: each reason once, with the checks it kept from running. */
export function doctorSkips(r: DoctorReport): { reason: string; checks: string[] }[] {
  const byReason = new Map<string, string[]>();
  for (const c of r.checks) {
    if (!c.skipped) continue;
    const names = byReason.get(c.message) ?? [];
    names.push(c.name);
    byReason.set(c.message, names);
  }
  return [...byReason].map(([reason, checks]) => ({ reason, checks }));
}
