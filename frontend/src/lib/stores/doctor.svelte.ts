// The Setup screen's "Check this Mac": one run of petal doctor on the
// server's machine, its report kept for showing and copying.

import { ApiError } from '../api/http';
import { runDoctor } from '../api/manage';
import type { DoctorReply } from '../api/types';

export class DoctorStore {
  reply = $state<DoctorReply | null>(null);
  running = $state(false);
  error = $state<ApiError | null>(null);

  #run: typeof runDoctor;

  constructor(run: typeof runDoctor = runDoctor) {
    this.#run = run;
  }

  /** Runs the checks unless a run is under way; a failure keeps the last report. */
  async check(): Promise<void> {
    if (this.running) return;
    this.running = true;
    this.error = null;
    try {
      this.reply = await this.#run();
    } catch (e) {
      this.error = e instanceof ApiError ? e : new ApiError(0, 'doctor_failed', String(e));
    } finally {
      this.running = false;
    }
  }
}
