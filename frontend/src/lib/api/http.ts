// One fetch wrapper for every JSON call the UI makes. Failures become an
// ApiError carrying the server's error code, so callers switch on codes,
// never on message text.

import type { ErrorBody } from './types';

/** Where the browser keeps the API key the user typed in (when the server wants one). */
export const API_KEY_STORAGE = 'petal.apiKey';

/** Codes the UI produces itself, beside the server's. */
export const NETWORK_ERROR = 'network_error';
export const BAD_RESPONSE = 'bad_response';

export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  /** The body's error type where it gives one ('model_loading'); some answers name their kind there, with no code. */
  readonly type: string;
  constructor(status: number, code: string, message: string, type = '') {
    super(message);
    this.name = 'ApiError';
    this.status = status;
    this.code = code;
    this.type = type;
  }
}

/** The API key saved in this browser, or '' when none. */
export function apiKey(): string {
  try {
    return localStorage.getItem(API_KEY_STORAGE) ?? '';
  } catch {
    return '';
  }
}

export function setApiKey(key: string): void {
  if (key) localStorage.setItem(API_KEY_STORAGE, key);
  else localStorage.removeItem(API_KEY_STORAGE);
}

/** Headers every request carries: JSON, and the key when one is saved. */
export function headers(): Record<string, string> {
  const h: Record<string, string> = { 'Content-Type': 'application/json', Accept: 'application/json' };
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

/** Turns a non-2xx response into an ApiError, reading the OpenAI-shaped body when there is one. */
export async function errorFrom(res: Response): Promise<ApiError> {
  let code = `http_${res.status}`;
  let message = `${res.status} ${res.statusText}`.trim();
  let type = '';
  try {
    const body = (await res.json()) as Partial<ErrorBody>;
    if (body.error?.message) message = body.error.message;
    if (typeof body.error?.code === 'string' && body.error.code) code = body.error.code;
    if (typeof body.error?.type === 'string') type = body.error.type;
  } catch {
    // Not JSON: keep the status line.
  }
  return new ApiError(res.status, code, message, type);
}

/** fetch that throws ApiError for network failures too. */
export async function send(path: string, init: RequestInit = {}): Promise<Response> {
  let res: Response;
  try {
    res = await fetch(path, { ...init, headers: { ...headers(), ...(init.headers as Record<string, string>) } });
  } catch (e) {
    if (e instanceof DOMException && e.name === 'AbortError') throw e;
    throw new ApiError(0, NETWORK_ERROR, 'Petal is not reachable: is it still running?');
  }
  if (!res.ok) throw await errorFrom(res);
  return res;
}

/** A JSON request; body, when given, is sent as JSON. */
export async function request<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
  const res = await send(path, {
    method,
    body: body === undefined ? undefined : JSON.stringify(body),
    signal,
  });
  if (res.status === 204) return undefined as T;
  try {
    return (await res.json()) as T;
  } catch {
    throw new ApiError(res.status, BAD_RESPONSE, `${method} ${path} answered something that is not JSON`);
  }
}
