import { describe, expect, it } from 'vitest';
import { ModelStore, downloadActive, type ModelApi } from './model.svelte';
import { ApiError } from '../api/http';
import type { DownloadStatus, Status } from '../api/types';

const status: Status = {
  model: { name: 'demo', state: 'ready', context_length: 4096, backend: 'cpu', dir: '/m' },
  endpoint: 'http://127.0.0.1:8080/v1',
  api_key_required: false,
  downloads: true,
  fit: true,
  load: false,
};

function download(state: DownloadStatus['state']): DownloadStatus {
  return { state, repo: 'r', revision: 'abc', dir: '/d', bytes_done: 1, bytes_total: 2, speed: 0, eta_seconds: 0 };
}

function api(over: Partial<ModelApi> = {}): ModelApi {
  return {
    status: async () => status,
    fit: async (n) => ({ verdict: 'fits', max_context: n, context: n, working_set_bytes: 1, weights_bytes: 1, kv_bytes_per_token: 1, advice: '', working_set_source: '' }),
    download: async () => download('idle'),
    action: async (a) => download(a === 'start' ? 'running' : 'paused'),
    load: async () => status,
    models: async () => ({ object: 'list', data: [{ id: 'demo-1', object: 'model', owned_by: 'petal', context_length: 4096 }] }),
    ...over,
  };
}

describe('ModelStore', () => {
  it('reads the model id, context, status and download', async () => {
    const m = new ModelStore(api());
    await m.refresh();
    expect(m.modelId).toBe('demo-1');
    expect(m.contextLength).toBe(4096);
    expect(m.status?.model.state).toBe('ready');
    expect(m.download?.state).toBe('idle');
    await m.checkFit(32768);
    expect(m.fit?.context).toBe(32768);
  });

  it('runs download actions and keeps their answer', async () => {
    const m = new ModelStore(api());
    await m.refresh();
    await m.act('start');
    expect(m.download?.state).toBe('running');
    expect(downloadActive(m.download)).toBe(true);
    m.stopPolling();
  });

  it('treats missing management routes as absent, other failures as errors', async () => {
    const missing = new ModelStore(api({ status: async () => { throw new ApiError(404, 'not_found', 'no'); } }));
    await missing.refresh();
    expect(missing.status).toBeNull();
    expect(missing.error).toBeNull();
    expect(missing.modelId).toBe('demo-1');

    const refused = new ModelStore(api({ action: async () => { throw new ApiError(409, 'download_pause_refused', 'not running'); } }));
    await refused.act('pause');
    expect(refused.error?.code).toBe('download_pause_refused');
  });
});
