import { afterEach, describe, expect, it, vi } from 'vitest';
import { DOWNLOAD_POLL_MS, ModelStore, loadable, type ModelApi } from './model.svelte';
import { ApiError } from '../api/http';
import type { DownloadStatus, Status } from '../api/types';

const DOWNLOAD_DIR = '/models/Qwen3.6-35B-A3B-4bit';

function status(dir: string, load = true): Status {
  return {
    model: { name: dir.split('/').pop() ?? '', state: 'ready', context_length: 4096, backend: 'cpu', dir },
    endpoint: 'http://127.0.0.1:8080/v1',
    api_key_required: false,
    downloads: true,
    fit: true,
    load,
  };
}

function download(state: DownloadStatus['state']): DownloadStatus {
  return { state, repo: 'r', revision: 'abc', dir: DOWNLOAD_DIR, bytes_done: 2, bytes_total: 2, speed: 0, eta_seconds: 0 };
}

/** A server whose download moves through states, one per poll, and whose load serves the download. */
function server(states: DownloadStatus['state'][], over: Partial<ModelApi> = {}) {
  let served = status('/cache/demo');
  let i = 0;
  const loads: number[] = [];
  const api: ModelApi = {
    status: async () => served,
    fit: async () => {
      throw new Error('not used');
    },
    download: async () => download(states[Math.min(i++, states.length - 1)]),
    action: async () => download(states[0]),
    load: async () => {
      loads.push(i);
      served = status(DOWNLOAD_DIR);
      return served;
    },
    models: async () => ({ object: 'list', data: [{ id: served.model.name, object: 'model', owned_by: 'petal', context_length: 4096 }] }),
    ...over,
  };
  return { api, loads };
}

afterEach(() => vi.useRealTimers());

describe('loading the downloaded model', () => {
  it('says when the download can be loaded', () => {
    expect(loadable(status('/cache/demo'), download('done'))).toBe(true);
    expect(loadable(status(DOWNLOAD_DIR), download('done'))).toBe(false); // already served
    expect(loadable(status('/cache/demo', false), download('done'))).toBe(false); // no loader
    expect(loadable(status('/cache/demo'), download('running'))).toBe(false);
  });

  it('loads once a download it started is done, then names the new model', async () => {
    vi.useFakeTimers();
    const { api, loads } = server(['running', 'running', 'done', 'done']);
    const m = new ModelStore(api);
    await m.refresh();
    await m.act('start');
    expect(loads).toEqual([]);
    for (let t = 0; t < 5; t++) await vi.advanceTimersByTimeAsync(DOWNLOAD_POLL_MS);
    m.stopPolling();
    expect(loads.length).toBe(1);
    expect(m.status?.model.dir).toBe(DOWNLOAD_DIR);
    expect(m.modelId).toBe('Qwen3.6-35B-A3B-4bit');
    expect(m.loading).toBe(false);
  });

  it('does not load a download that failed, nor one nobody asked for', async () => {
    vi.useFakeTimers();
    const failed = server(['running', 'failed', 'done']);
    const m = new ModelStore(failed.api);
    await m.refresh();
    await m.act('start');
    for (let t = 0; t < 5; t++) await vi.advanceTimersByTimeAsync(DOWNLOAD_POLL_MS);
    m.stopPolling();
    expect(failed.loads).toEqual([]);

    const idle = server(['done']);
    const n = new ModelStore(idle.api);
    await n.refresh();
    n.poll();
    for (let t = 0; t < 3; t++) await vi.advanceTimersByTimeAsync(DOWNLOAD_POLL_MS);
    n.stopPolling();
    expect(idle.loads).toEqual([]);
  });

  it('shows a refused load by its code and keeps the served model', async () => {
    const { api } = server(['done'], {
      load: async () => {
        throw new ApiError(409, 'does_not_fit', 'not enough memory: Qwen3.6-35B-A3B does not fit');
      },
    });
    const m = new ModelStore(api);
    await m.refresh();
    await m.load();
    expect(m.error?.code).toBe('does_not_fit');
    expect(m.status?.model.dir).toBe('/cache/demo');
    expect(m.busy).toBe(false);
    expect(m.loading).toBe(false);
  });
});
