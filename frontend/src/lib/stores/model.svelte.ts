// The model as the Setup screen sees it: status, memory fit and the download,
// polled while something is moving. Polling never waits on generation: the
// server answers /manage routes beside the queue.

import { ApiError } from '../api/http';
import { listModels } from '../api/chat';
import { downloadAction, getDownload, getFit, getStatus, loadModel } from '../api/manage';
import type { DownloadAction, DownloadStatus, FitReport, Status } from '../api/types';
import { DEMO_DISPLAY_NAME, displayName, isDemoModel } from '../modelname';

/** How often the download is polled while it runs. */
export const DOWNLOAD_POLL_MS = 500;
/** How often the status is polled otherwise. */
export const STATUS_POLL_MS = 5000;

/**
 * The error type of the 503 every route but /manage/status answers while the
 * desktop app loads the model behind its open window: a wait, not a fault.
 */
export const MODEL_LOADING = 'model_loading';

/** Whether e is the server saying it is still loading the model. */
export function stillLoading(e: unknown): boolean {
  return e instanceof ApiError && e.status === 503 && e.type === MODEL_LOADING;
}

export interface ModelApi {
  status: typeof getStatus;
  fit: typeof getFit;
  download: typeof getDownload;
  action: typeof downloadAction;
  load: typeof loadModel;
  models: typeof listModels;
}

const defaultApi: ModelApi = {
  status: getStatus,
  fit: getFit,
  download: getDownload,
  action: downloadAction,
  load: loadModel,
  models: listModels,
};

/** Download actions after which the finished, verified model is loaded: one click takes the user from nothing to a loaded model. */
const LOAD_AFTER: ReadonlySet<DownloadAction> = new Set(['start', 'resume', 'verify']);

/** True when the server can load the downloaded model and serves another one. */
export function loadable(st: Status | null, d: DownloadStatus | null): boolean {
  return !!st?.load && d?.state === 'done' && st.model.dir !== d.dir;
}

/** Whether st describes the model chat requests go to (id), not one since replaced. */
function describes(st: Status | null, id: string): st is Status {
  return !!st && !!id && st.model.name === id;
}

/**
 * Whether the model served as id is the built-in demo: the server's word where
 * it gives one, else the display name it gives the demo alone, else the id the
 * unpacked demo is served under.
 */
export function servesDemo(st: Status | null, id: string): boolean {
  if (!describes(st, id)) return isDemoModel(id);
  return st.model.demo ?? (st.model.display_name === DEMO_DISPLAY_NAME || isDemoModel(id));
}

/**
 * Whether the model served as id thinks before answering. The demo's chat
 * template closes the think block before every reply: it never thinks.
 * Unknown models are taken to think, as the real model does.
 */
export function modelThinks(st: Status | null, id: string): boolean {
  if (!describes(st, id)) return !isDemoModel(id);
  return st.model.thinks ?? !servesDemo(st, id);
}

/** True while a download state means bytes may still move. */
export function downloadActive(d: DownloadStatus | null): boolean {
  return !!d && (d.state === 'running' || d.state === 'verifying');
}

export class ModelStore {
  status = $state<Status | null>(null);
  fit = $state<FitReport | null>(null);
  download = $state<DownloadStatus | null>(null);
  /** The model id chat requests name, from /v1/models. */
  modelId = $state('');
  contextLength = $state(0);
  /** Whether the served model reads images (/v1/models' capabilities.vision); a text-only model does not. */
  vision = $state(false);
  error = $state<ApiError | null>(null);
  busy = $state(false);
  /** True while the server loads the downloaded model. */
  loading = $state(false);
  /** True while the fit verdict is asked for: the first time on a CPU machine, the server measures the CPU for a second. */
  fitting = $state(false);
  /** True while the server loads its model at start, before /v1 answers; the status is polled fast meanwhile. */
  starting = $derived(this.status?.model.state === 'loading');
  /** The served model's name for people: the server's, else one made from the id. */
  displayName = $derived(
    this.status?.model.name === this.modelId && this.status.model.display_name
      ? this.status.model.display_name
      : displayName(this.modelId),
  );

  /**
   * Whether the served model is the built-in demo: the server's word, else its
   * display name (which the server gives the demo alone).
   */
  isDemo = $derived(servesDemo(this.status, this.modelId));
  /** Whether the served model can think before answering: the server's word, else all but the demo. */
  thinks = $derived(modelThinks(this.status, this.modelId));

  #api: ModelApi;
  /** Set by an action whose download, once done and verified, is to be loaded. */
  #loadWhenDone = false;
  #timer: ReturnType<typeof setTimeout> | null = null;
  #onReady: (() => void)[] = [];
  /** Set when /v1/models last answered that the model is still loading: the id is yet to be read. */
  #idPending = false;

  constructor(api: ModelApi = defaultApi) {
    this.#api = api;
  }

  /**
   * Calls f each time polling sees the model become ready after the server
   * said otherwise (after a load at start), once this store has read the
   * model anew: what else was refused while loading can be asked again.
   */
  whenReady(f: () => void): void {
    this.#onReady.push(f);
  }

  /** Reads everything once; management routes that are missing leave their fields null. */
  async refresh(): Promise<void> {
    try {
      const list = await this.#api.models();
      const m = list.data[0];
      if (m) {
        this.modelId = m.id;
        this.contextLength = m.context_length;
        this.vision = m.capabilities?.vision ?? false;
      }
      this.error = null;
      this.#idPending = false;
    } catch (e) {
      this.#idPending = stillLoading(e);
      this.error = e instanceof ApiError && !this.#idPending ? e : null;
    }
    try {
      this.status = await this.#api.status();
      if (this.status.model.context_length) this.contextLength = this.status.model.context_length;
      if (this.status.downloads) this.download = await this.#api.download();
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 404)) this.error = e instanceof ApiError ? e : null;
    }
  }

  async checkFit(context: number): Promise<void> {
    this.fitting = true;
    try {
      this.fit = await this.#api.fit(context);
    } catch (e) {
      this.error = e instanceof ApiError ? e : null;
    } finally {
      this.fitting = false;
    }
  }

  async act(action: DownloadAction): Promise<void> {
    this.busy = true;
    try {
      this.download = await this.#api.action(action);
      this.error = null;
      this.#loadWhenDone = LOAD_AFTER.has(action) || (action === 'pause' && this.#loadWhenDone);
      this.poll();
    } catch (e) {
      this.error = e instanceof ApiError ? e : null;
    } finally {
      this.busy = false;
    }
  }

  async load(): Promise<void> {
    this.busy = true;
    this.loading = true;
    try {
      this.status = await this.#api.load();
      await this.refresh();
    } catch (e) {
      this.error = e instanceof ApiError ? e : null;
    } finally {
      this.busy = false;
      this.loading = false;
    }
  }

  /** Loads the download an action asked for once it is done; a failed or stopped one asks for nothing more. */
  async #afterDownload(): Promise<void> {
    const state = this.download?.state;
    if (!this.#loadWhenDone || state === 'running' || state === 'verifying' || state === 'paused') return;
    this.#loadWhenDone = false;
    if (loadable(this.status, this.download)) await this.load();
  }

  /**
   * Reads the model anew once the status turns ready where it was not, or
   * where /v1/models last answered that it was still loading (the load can end
   * between the two reads of refresh).
   */
  async #afterReady(was: string | undefined): Promise<void> {
    if (this.status?.model.state !== 'ready' || (was === 'ready' && !this.#idPending)) return;
    await this.refresh();
    for (const f of this.#onReady) f();
  }

  /** Polls fast while a download moves or the model loads, slowly otherwise, until stopPolling. */
  poll(): void {
    this.stopPolling();
    const tick = async () => {
      try {
        const was = this.status?.model.state;
        if (this.status?.downloads) this.download = await this.#api.download();
        this.status = await this.#api.status();
        await this.#afterReady(was);
        await this.#afterDownload();
      } catch {
        // A missed poll is retried at the next tick.
      }
      const fast = downloadActive(this.download) || this.starting;
      this.#timer = setTimeout(tick, fast ? DOWNLOAD_POLL_MS : STATUS_POLL_MS);
    };
    this.#timer = setTimeout(tick, DOWNLOAD_POLL_MS);
  }

  stopPolling(): void {
    if (this.#timer) clearTimeout(this.#timer);
    this.#timer = null;
  }
}
