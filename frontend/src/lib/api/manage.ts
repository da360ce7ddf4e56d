// The management client: same-origin routes under /manage that only the UI
// uses (model status, memory fit, downloads, settings, the doctor's checks,
// the prefix cache on disk). The server refuses them from any other origin.

import { request } from './http';
import type {
  DoctorReply,
  DownloadAction,
  DownloadStatus,
  FitReport,
  PrefixCacheCleared,
  PrefixCacheStatus,
  Settings,
  SettingsReply,
  Status,
} from './types';

/** The management routes, in one place so the Go side can be checked against them. */
export const routes = {
  status: '/manage/status',
  fit: '/manage/fit',
  download: '/manage/download',
  load: '/manage/model/load',
  settings: '/manage/settings',
  doctor: '/manage/doctor',
  prefixCache: '/manage/prefix-cache',
} as const;

export function getStatus(signal?: AbortSignal): Promise<Status> {
  return request<Status>('GET', routes.status, undefined, signal);
}

/** The memory verdict at a context length (0: the model's own). */
export function getFit(context: number, signal?: AbortSignal): Promise<FitReport> {
  const q = context > 0 ? `?context=${encodeURIComponent(String(context))}` : '';
  return request<FitReport>('GET', routes.fit + q, undefined, signal);
}

export function getDownload(signal?: AbortSignal): Promise<DownloadStatus> {
  return request<DownloadStatus>('GET', routes.download, undefined, signal);
}

export function downloadAction(action: DownloadAction): Promise<DownloadStatus> {
  return request<DownloadStatus>('POST', `${routes.download}/${action}`, {});
}

export function loadModel(): Promise<Status> {
  return request<Status>('POST', routes.load, {});
}

export function getSettings(signal?: AbortSignal): Promise<SettingsReply> {
  return request<SettingsReply>('GET', routes.settings, undefined, signal);
}

export function putSettings(s: Settings): Promise<SettingsReply> {
  return request<SettingsReply>('PUT', routes.settings, s);
}

/** Runs petal doctor's checks on the server's machine: up to a minute or two. */
export function runDoctor(signal?: AbortSignal): Promise<DoctorReply> {
  return request<DoctorReply>('POST', routes.doctor, {}, signal);
}

export function getPrefixCache(signal?: AbortSignal): Promise<PrefixCacheStatus> {
  return request<PrefixCacheStatus>('GET', routes.prefixCache, undefined, signal);
}

/** Removes every snapshot of the prefix cache on disk. */
export function clearPrefixCache(): Promise<PrefixCacheCleared> {
  return request<PrefixCacheCleared>('POST', `${routes.prefixCache}/clear`, {});
}
