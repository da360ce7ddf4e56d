import { afterEach, describe, expect, it, vi } from 'vitest';
import { DOWNLOAD_POLL_MS, MODEL_LOADING, ModelStore, STATUS_POLL_MS, loadable, stillLoading, type ModelApi } from './model.svelte';
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

/** What the desktop app answers while it loads its model behind the open window (loading.go). */
function startingServer() {
  let state: 'loading' | 'ready' | 'failed' = 'loading';
  const calls = { status: 0, models: 0 };
  const api: ModelApi = {
    status: async () => {
      calls.status++;
      const st = status('/cache/demo', false);
      st.model.state = state;
      if (state === 'failed') st.model.error = 'not enough memory for this context';
      return st;
    },
    fit: async () => {
      throw new Error('not used');
    },
    download: async () => download('idle'),
    action: async () => download('idle'),
    load: async () => {
      throw new Error('not used');
    },
    models: async () => {
      calls.models++;
      if (state !== 'ready') throw new ApiError(503, 'http_503', 'Petal is loading the model; try again in a moment', MODEL_LOADING);
      return { object: 'list', data: [{ id: 'demo', object: 'model', owned_by: 'petal', context_length: 4096 }] };
    },
  };
  return { api, calls, set: (s: typeof state) => (state = s) };
}

describe('the model loading at start', () => {
  it('is a wait, not an error, and names the model once the status says ready', async () => {
    vi.useFakeTimers();
    const srv = startingServer();
    const m = new ModelStore(srv.api);
    let readied = 0;
    m.whenReady(() => readied++);
    await m.refresh();
    expect(m.error).toBeNull();
    expect(m.starting).toBe(true);
    expect(m.modelId).toBe('');
    m.poll();
    for (let t = 0; t < 3; t++) await vi.advanceTimersByTimeAsync(DOWNLOAD_POLL_MS);
    expect(srv.calls.status).toBe(4); // polled at the fast rate while loading
    expect(m.modelId).toBe('');
    srv.set('ready');
    await vi.advanceTimersByTimeAsync(DOWNLOAD_POLL_MS);
    expect(m.starting).toBe(false);
    expect(m.modelId).toBe('demo');
    expect(m.error).toBeNull();
    expect(readied).toBe(1);
    // Ready, the status goes back to the slow rate and the model is not read again.
    const models = srv.calls.models;
    await vi.advanceTimersByTimeAsync(STATUS_POLL_MS * 2);
    m.stopPolling();
    expect(srv.calls.models).toBe(models);
    expect(readied).toBe(1);
  });

  it('reads the model when the load ends between the two reads of refresh', async () => {
    vi.useFakeTimers();
    const srv = startingServer();
    const api: ModelApi = {
      ...srv.api,
      models: async () => {
        const l = srv.api.models();
        srv.set('ready'); // the status read next says ready
        return l;
      },
    };
    const m = new ModelStore(api);
    await m.refresh();
    expect(m.status?.model.state).toBe('ready');
    expect(m.modelId).toBe('');
    m.poll();
    await vi.advanceTimersByTimeAsync(DOWNLOAD_POLL_MS);
    m.stopPolling();
    expect(m.modelId).toBe('demo');
  });

  it('keeps a failed load as the status says it, and other 503s as errors', async () => {
    vi.useFakeTimers();
    const srv = startingServer();
    const m = new ModelStore(srv.api);
    await m.refresh();
    m.poll();
    srv.set('failed');
    await vi.advanceTimersByTimeAsync(DOWNLOAD_POLL_MS);
    m.stopPolling();
    expect(m.starting).toBe(false);
    expect(m.status?.model.error).toContain('not enough memory');
    expect(m.modelId).toBe('');

    const busy = new ModelStore({
      ...srv.api,
      models: async () => {
        throw new ApiError(503, 'http_503', 'the model failed to load: not enough memory', 'model_failed');
      },
    });
    await busy.refresh();
    expect(busy.error?.message).toContain('failed to load');
  });

  it('tells the loading 503 from others', () => {
    expect(stillLoading(new ApiError(503, 'http_503', 'loading', MODEL_LOADING))).toBe(true);
    expect(stillLoading(new ApiError(503, 'http_503', 'overloaded', 'server_error'))).toBe(false);
    expect(stillLoading(new ApiError(500, 'http_500', 'x', MODEL_LOADING))).toBe(false);
    expect(stillLoading(new Error('loading'))).toBe(false);
  });
});
