import { describe, expect, it } from 'vitest';
import { PrefixCacheStore, clearQuestion, clearedNote, tierSummary, type PrefixCacheApi } from './prefixcache.svelte';
import { ApiError } from '../api/http';
import type { PrefixCacheStatus } from '../api/types';

/** A disk tier holding files snapshots of size bytes each, emptied by clear. */
function tier(files: number, size: number, over: Partial<PrefixCacheApi> = {}) {
  let held = files;
  const calls: string[] = [];
  const status = (): PrefixCacheStatus => ({ enabled: true, dir: '/cache/petal/prefix', on: true, budget_bytes: 5e9, files: held, bytes: held * size });
  const api: PrefixCacheApi = {
    get: async () => {
      calls.push('get');
      return status();
    },
    clear: async () => {
      calls.push('clear');
      const removed = { removed_files: held, removed_bytes: held * size };
      held = 0;
      return removed;
    },
    ...over,
  };
  return { api, calls };
}

describe('PrefixCacheStore', () => {
  it('shows what the tier holds, and after a clear what went and what is left', async () => {
    const { api, calls } = tier(3, 2e8);
    const p = new PrefixCacheStore(api);
    await p.load();
    expect(p.status).toMatchObject({ enabled: true, files: 3, bytes: 6e8, budget_bytes: 5e9 });
    await p.clear();
    expect(p.cleared).toEqual({ removed_files: 3, removed_bytes: 6e8 });
    expect(p.status).toMatchObject({ files: 0, bytes: 0 });
    expect(calls).toEqual(['get', 'clear', 'get']);
    expect(p.clearing).toBe(false);
  });

  it('shows nothing for a server without the route or still loading its model', async () => {
    const old = new PrefixCacheStore(tier(1, 1, { get: async () => { throw new ApiError(404, 'not_found', 'no route'); } }).api);
    await old.load();
    expect(old.status).toBeNull();
    expect(old.error).toBeNull();

    const loading = new PrefixCacheStore(
      tier(1, 1, { get: async () => { throw new ApiError(503, 'http_503', 'Petal is loading the model', 'model_loading'); } }).api,
    );
    await loading.load();
    expect(loading.error).toBeNull();
  });

  it('keeps what it showed when a clear is refused, with the server’s code', async () => {
    const { api, calls } = tier(2, 1e9, {
      clear: async () => {
        throw new ApiError(500, 'clear_failed', 'the prefix cache could not be cleared; the server log says why');
      },
    });
    const p = new PrefixCacheStore(api);
    await p.load();
    await p.clear();
    expect(p.error?.code).toBe('clear_failed');
    expect(p.status?.files).toBe(2);
    expect(p.cleared).toBeNull();
    expect(calls).toEqual(['get']);
  });
});

describe('the words of the prefix cache card', () => {
  const st: PrefixCacheStatus = { enabled: true, dir: '/c', on: true, budget_bytes: 20e9, files: 12, bytes: 1.5e9 };

  it('say what the tier holds against its budget, and when a full disk turned it off', () => {
    expect(tierSummary(st)).toBe('1.5 GB of 20.0 GB in 12 snapshots');
    expect(tierSummary({ ...st, on: false, files: 1 })).toBe('1.5 GB of 20.0 GB in 1 snapshot; off until Petal starts again, as the disk was full');
  });

  it('ask before a clear what goes, and say after what went', () => {
    expect(clearQuestion(st)).toBe('Remove 12 snapshots (1.5 GB)? Prompts they hold are read again in full the next time they come.');
    expect(clearedNote({ removed_files: 1, removed_bytes: 4e8 })).toBe('Removed 1 snapshot (400 MB).');
  });
});
