// The Setup screen's GPU check: one run of petal doctor on the server's
// machine, its report kept for showing and copying, and kept in this browser
// so that a reload still shows the last one.

import { ApiError } from '../api/http';
import { runDoctor } from '../api/manage';
import type { DoctorReply } from '../api/types';

/** localStorage key of the last report. */
export const DOCTOR_KEY = 'petal.doctor';

/** Where the last report is kept. */
export type DoctorStorage = Pick<Storage, 'getItem' | 'setItem'>;

export class DoctorStore {
  reply = $state<DoctorReply | null>(null);
  running = $state(false);
  error = $state<ApiError | null>(null);

  #run: typeof runDoctor;
  #storage: DoctorStorage | null;

  constructor(run: typeof runDoctor = runDoctor, storage: DoctorStorage | null = browserStorage()) {
    this.#run = run;
    this.#storage = storage;
    this.reply = kept(storage);
  }

  /** Runs the checks unless a run is under way; a failure keeps the last report. */
  async check(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.error = null;
    try {
      this.reply = await this.#run();
      try {
        this.#storage?.setItem(DOCTOR_KEY, JSON.stringify(this.reply));
      } catch {
        // Storage can be full or refused (private windows); the report then lasts this page.
      }
    } catch (e) {
      this.error = e instanceof ApiError ? e : new ApiError(0, 'doctor_failed', String(e));
    } finally {
      this.running = false;
    }
  }
}

/** The report kept by an earlier page, or null when there is none or it is not one. */
function kept(storage: DoctorStorage | null): DoctorReply | null {
  try {
    const r = JSON.parse(storage?.getItem(DOCTOR_KEY) ?? 'null');
    return typeof r?.text === 'string' && typeof r?.report?.backend === 'string' && Array.isArray(r.report.checks) ? r : null;
  } catch {
    return null;
  }
}

function browserStorage(): DoctorStorage | null {
  try {
    return globalThis.localStorage ?? null;
  } catch {
    return null;
  }
}
