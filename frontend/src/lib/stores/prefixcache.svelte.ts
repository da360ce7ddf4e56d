// The Settings screen's view of the prefix cache on disk: how much it holds
// against its budget, and clearing it.

import { ApiError } from '../api/http';
import { clearPrefixCache, getPrefixCache } from '../api/manage';
import type { PrefixCacheCleared, PrefixCacheStatus } from '../api/types';
import { stillLoading } from './model.svelte';
import { formatBytes } from '../format';

function snapshots(n: number): string {
  return n === 1 ? '1 snapshot' : `${n} snapshots`;
}

/** What the tier holds against its budget, in words. */
export function tierSummary(st: PrefixCacheStatus): string {
  const held = `${formatBytes(st.bytes)} of ${formatBytes(st.budget_bytes)} in ${snapshots(st.files)}`;
  return st.on ? held : `${held}; off until Petal starts again, as the disk was full`;
}

/** The question a clear asks first: what goes, and what it costs. */
export function clearQuestion(st: PrefixCacheStatus): string {
  return `Remove ${snapshots(st.files)} (${formatBytes(st.bytes)})? Prompts they hold are read again in full the next time they come.`;
}

/** What a clear removed. */
export function clearedNote(c: PrefixCacheCleared): string {
  return `Removed ${snapshots(c.removed_files)} (${formatBytes(c.removed_bytes)}).`;
}

export interface PrefixCacheApi {
  get: typeof getPrefixCache;
  clear: typeof clearPrefixCache;
}

export class PrefixCacheStore {
  /** The tier as the server last said; null from servers without the route, or before the first answer. */
  status = $state<PrefixCacheStatus | null>(null);
  /** What the last clear removed. */
  cleared = $state<PrefixCacheCleared | null>(null);
  clearing = $state(false);
  error = $state<ApiError | null>(null);

  #api: PrefixCacheApi;

  constructor(api: PrefixCacheApi = { get: getPrefixCache, clear: clearPrefixCache }) {
    this.#api = api;
  }

  async load(): Promise<void> {
    try {
      this.status = await this.#api.get();
      this.error = null;
    } catch (e) {
      this.status = null;
      // An older server lacks the route, and one still loading its model answers nothing yet: neither is worth showing.
      this.error = e instanceof ApiError && e.status !== 404 && !stillLoading(e) ? e : null;
    }
  }

  /** Removes every snapshot, then reads the tier again; a refusal keeps what was shown. */
  async clear(): Promise<void> {
    if (this.clearing) return;
    this.clearing = true;
    this.cleared = null;
    try {
      this.cleared = await this.#api.clear();
      this.error = null;
      await this.load();
    } catch (e) {
      this.error = e instanceof ApiError ? e : new ApiError(0, 'clear_failed', String(e));
    } finally {
      this.clearing = false;
    }
  }
}
