// Settings as the server keeps them (/manage/settings), with the model card's
// defaults when no management API answers (a plain petal serve without it).

import { ApiError } from '../api/http';
import { getSettings, putSettings } from '../api/manage';
import { stillLoading } from './model.svelte';
import type { InForceSettings, Settings, SettingsReply } from '../api/types';

export const DEFAULT_SETTINGS: Settings = {
  context_length: 0,
  thinking: true,
  preset: 'thinking',
  port: 8080,
  expose: false,
  access_token: '',
  api_key: '',
  allowed_origins: [],
  start_at_login: false,
};

export interface SettingsApi {
  get: typeof getSettings;
  put: typeof putSettings;
}

/** The colour scheme: '' follows the system's; a choice made in the UI overrides it. */
export type Theme = '' | 'light' | 'dark';

/** Where the theme is kept: this browser's, not the server's, so each device keeps its own. */
export type ThemeStorage = Pick<Storage, 'getItem' | 'setItem'>;

const THEME_KEY = 'petal.theme';

export class SettingsStore {
  settings = $state<Settings>({ ...DEFAULT_SETTINGS });
  /** Saved settings the server says are not yet in force: they apply when petal starts again. */
  restartRequired = $state<string[]>([]);
  /** What the server runs with now and where each value came from; null from servers that do not say. */
  inForce = $state<InForceSettings | null>(null);
  /** Saved settings a command-line flag overrides. */
  overriddenByFlag = $state<string[]>([]);
  /** Whether the server keeps settings; false means edits stay in this page. */
  managed = $state(false);
  /** True while the server is still loading its model and answers no settings yet (read again once it is ready). */
  waiting = $state(false);
  error = $state<ApiError | null>(null);
  saving = $state(false);

  theme = $state<Theme>('');

  #api: SettingsApi;
  #storage: ThemeStorage | null;

  constructor(api: SettingsApi = { get: getSettings, put: putSettings }, storage: ThemeStorage | null = browserStorage()) {
    this.#api = api;
    this.#storage = storage;
    const kept = storage?.getItem(THEME_KEY);
    if (kept === 'light' || kept === 'dark') this.theme = kept;
  }

  /** Switches to the scheme not now shown (the system's while none was chosen) and keeps the choice. */
  toggleTheme(systemDark: boolean): void {
    const dark = this.theme ? this.theme === 'dark' : systemDark;
    this.theme = dark ? 'light' : 'dark';
    try {
      this.#storage?.setItem(THEME_KEY, this.theme);
    } catch {
      // Storage can be full or refused (private windows); the choice then lasts this page.
    }
  }

  async load(): Promise<void> {
    try {
      this.#take(await this.#api.get());
      this.managed = true;
      this.waiting = false;
      this.error = null;
    } catch (e) {
      this.managed = false;
      this.waiting = stillLoading(e);
      // A server without the management routes, or one still loading its model, is not an error worth showing.
      this.error = e instanceof ApiError && e.status !== 404 && !this.waiting ? e : null;
    }
  }

  #take(r: SettingsReply): void {
    this.settings = { ...DEFAULT_SETTINGS, ...r.settings };
    this.restartRequired = r.restart_required ?? [];
    this.inForce = r.in_force ?? null;
    this.overriddenByFlag = r.overridden_by_flag ?? [];
  }

  /** Saves next on the server, or only in this page when the server keeps no settings. */
  async save(next: Settings): Promise<boolean> {
    if (!this.managed) {
      this.settings = { ...next };
      return true;
    }
    this.saving = true;
    try {
      this.#take(await this.#api.put(next));
      this.error = null;
      return true;
    } catch (e) {
      this.error = e instanceof ApiError ? e : null;
      return false;
    } finally {
      this.saving = false;
    }
  }
}

function browserStorage(): ThemeStorage | null {
  try {
    return globalThis.localStorage ?? null;
  } catch {
    return null;
  }
}
