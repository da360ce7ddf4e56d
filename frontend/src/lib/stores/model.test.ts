import { describe, expect, it } from 'vitest';
import { ModelStore, downloadActive, modelThinks, servesDemo, type ModelApi } from './model.svelte';
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

describe('ModelStore.checkFit', () => {
  it('says it is checking while the server measures, and not after a failure', async () => {
    let answer: () => void = () => {};
    const m = new ModelStore(
      api({
        fit: () =>
          new Promise((_, fail) => (answer = () => fail(new ApiError(500, 'fit_failed', 'no')))),
      }),
    );
    const asked = m.checkFit(32768);
    expect(m.fitting).toBe(true);
    answer();
    await asked;
    expect(m.fitting).toBe(false);
    expect(m.error?.code).toBe('fit_failed');
  });
});

describe('servesDemo and modelThinks', () => {
  const served = (model: Partial<Status['model']>): Status => ({ ...status, model: { ...status.model, ...model } });

  it('take the server’s word where it gives one', () => {
    expect(servesDemo(served({ demo: true, display_name: 'x' }), 'demo')).toBe(true);
    expect(servesDemo(served({ demo: false, display_name: 'Demo model' }), 'demo')).toBe(false);
    expect(modelThinks(served({ demo: true, thinks: true }), 'demo')).toBe(true);
    expect(modelThinks(served({ thinks: false, display_name: 'Qwen' }), 'demo')).toBe(false);
  });

  it('know the demo by its display name or its unpacked id, and take it never to think', () => {
    expect(servesDemo(served({ display_name: 'Demo model' }), 'demo')).toBe(true);
    expect(modelThinks(served({ display_name: 'Demo model' }), 'demo')).toBe(false);
    expect(servesDemo(null, 'demo-0123456789abcdef')).toBe(true);
    expect(modelThinks(null, 'demo-0123456789abcdef')).toBe(false);
  });

  it('take any other model to think', () => {
    expect(servesDemo(served({ name: 'Qwen3.6-35B-A3B-4bit', display_name: 'Qwen3.6-35B-A3B-4bit' }), 'Qwen3.6-35B-A3B-4bit')).toBe(false);
    expect(modelThinks(served({ name: 'Qwen3.6-35B-A3B-4bit', display_name: 'Qwen3.6-35B-A3B-4bit' }), 'Qwen3.6-35B-A3B-4bit')).toBe(true);
  });

  it('ignore a status that describes a model since replaced', () => {
    expect(servesDemo(served({ display_name: 'Demo model' }), 'Qwen3.6-35B-A3B-4bit')).toBe(false);
  });

  it('follow the store’s status', async () => {
    const m = new ModelStore(
      api({
        status: async () => served({ name: 'demo-1', display_name: 'Demo model' }),
      }),
    );
    expect(m.isDemo).toBe(false);
    await m.refresh();
    expect(m.isDemo).toBe(true);
    expect(m.thinks).toBe(false);
  });
});
