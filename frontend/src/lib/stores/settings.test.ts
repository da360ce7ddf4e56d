import { describe, expect, it } from 'vitest';
import { DEFAULT_SETTINGS, SettingsStore } from './settings.svelte';
import { ApiError } from '../api/http';
import type { Settings, SettingsReply } from '../api/types';

describe('SettingsStore', () => {
  it('loads and saves through the server, keeping its restart list', async () => {
    let saved: Settings | null = null;
    const s = new SettingsStore({
      get: async () => ({ settings: { ...DEFAULT_SETTINGS, preset: 'coding' }, restart_required: [] }),
      put: async (next): Promise<SettingsReply> => {
        saved = next;
        return { settings: next, restart_required: ['port'] };
      },
    });
    await s.load();
    expect(s.managed).toBe(true);
    expect(s.settings.preset).toBe('coding');
    expect(await s.save({ ...s.settings, port: 9000 })).toBe(true);
    expect(saved!.port).toBe(9000);
    expect(s.restartRequired).toEqual(['port']);
  });

  it('keeps what the server says is in force, and drops it when a save answers without', async () => {
    const s = new SettingsStore({
      get: async () => ({
        settings: { ...DEFAULT_SETTINGS, api_key: 'k' },
        restart_required: ['api_key'],
        in_force: { api_key: { value: 'not set', source: 'default' } },
        overridden_by_flag: ['context_length'],
      }),
      put: async (next) => ({ settings: next, restart_required: [] }),
    });
    await s.load();
    expect(s.inForce?.api_key).toEqual({ value: 'not set', source: 'default' });
    expect(s.restartRequired).toEqual(['api_key']);
    expect(s.overriddenByFlag).toEqual(['context_length']);
    await s.save({ ...s.settings, api_key: '' });
    expect(s.inForce).toBeNull();
    expect(s.restartRequired).toEqual([]);
    expect(s.overriddenByFlag).toEqual([]);
  });

  it('keeps a refused save out and shows the server code', async () => {
    const s = new SettingsStore({
      get: async () => ({ settings: DEFAULT_SETTINGS, restart_required: [] }),
      put: async () => {
        throw new ApiError(400, 'bad_settings', 'port must be 1 to 65535, not 0');
      },
    });
    await s.load();
    expect(await s.save({ ...s.settings, port: 0 })).toBe(false);
    expect(s.error?.code).toBe('bad_settings');
    expect(s.settings.port).toBe(DEFAULT_SETTINGS.port);
  });

  it('works in this page alone when the server keeps no settings', async () => {
    const s = new SettingsStore({
      get: async () => {
        throw new ApiError(404, 'not_found', 'no route');
      },
      put: async () => {
        throw new Error('must not be called');
      },
    });
    await s.load();
    expect(s.managed).toBe(false);
    expect(s.error).toBeNull();
    expect(await s.save({ ...s.settings, thinking: false })).toBe(true);
    expect(s.settings.thinking).toBe(false);
  });
});

describe('SettingsStore theme', () => {
  const api = {
    get: async () => ({ settings: DEFAULT_SETTINGS, restart_required: [] }),
    put: async (next: Settings) => ({ settings: next, restart_required: [] }),
  };

  function memoryStorage(initial: Record<string, string> = {}) {
    const m = new Map(Object.entries(initial));
    return { getItem: (k: string) => m.get(k) ?? null, setItem: (k: string, v: string) => void m.set(k, v), m };
  }

  it('follows the system until a choice is made, then keeps it', () => {
    const storage = memoryStorage();
    const s = new SettingsStore(api, storage);
    expect(s.theme).toBe('');
    s.toggleTheme(true); // the system shows dark: the switch goes to light
    expect(s.theme).toBe('light');
    s.toggleTheme(true);
    expect(s.theme).toBe('dark');
    expect(new SettingsStore(api, storage).theme).toBe('dark');
  });

  it('ignores a kept value it does not know and survives storage that refuses writes', () => {
    expect(new SettingsStore(api, memoryStorage({ 'petal.theme': 'sepia' })).theme).toBe('');
    const s = new SettingsStore(api, {
      getItem: () => null,
      setItem: () => {
        throw new DOMException('full', 'QuotaExceededError');
      },
    });
    s.toggleTheme(false);
    expect(s.theme).toBe('dark');
  });

  it('waits, showing no error, while the server still loads its model, and takes the settings once it answers', async () => {
    let loading = true;
    const s = new SettingsStore({
      get: async () => {
        if (loading) throw new ApiError(503, 'http_503', 'Petal is loading the model; try again in a moment', 'model_loading');
        return { settings: { ...DEFAULT_SETTINGS, preset: 'coding' }, restart_required: [] };
      },
      put: async (next) => ({ settings: next, restart_required: [] }),
    });
    await s.load();
    expect(s.waiting).toBe(true);
    expect(s.error).toBeNull();
    expect(s.managed).toBe(false);
    loading = false;
    await s.load();
    expect(s.waiting).toBe(false);
    expect(s.managed).toBe(true);
    expect(s.settings.preset).toBe('coding');
  });
});
