// Words for the Settings screen's "In force now": which value the server
// runs with, where it came from, and what a saved change still waits for.

import type { InForce, InForceSettings, ServerSetting, SettingSource } from './api/types';
import { formatTokens } from './format';

/** The settings' names as people read them; restart_required and overridden_by_flag use the wire names. */
export const SETTING_LABELS: Record<string, string> = {
  context_length: 'Context length',
  port: 'Port',
  expose: 'Network access',
  api_key: 'API key',
  access_token: 'API key for other machines',
  allowed_origins: 'Allowed browser origins',
  thinking: 'Think by default',
  preset: 'Sampling preset',
  start_at_login: 'Start at login',
  prefix_cache_dir: 'Prefix cache folder',
  prefix_cache_gb: 'Prefix cache size on disk',
  parallel: 'Requests decoded together',
  speculative: 'Speculative decoding',
};

/** The flag of petal serve that sets each server setting, for saying which one wins. */
export const SETTING_FLAGS: Record<ServerSetting, string> = {
  context_length: '--context',
  port: '--addr',
  expose: '--addr',
  api_key: '--api-key (or $PETAL_API_KEY)',
  allowed_origins: '--allow-origin',
  prefix_cache_dir: '--prefix-cache-dir',
  prefix_cache_gb: '--prefix-cache-gb',
  parallel: '--parallel',
  speculative: '--speculative',
};

/** The order "In force now" lists the settings in, as the form above it does. */
export const IN_FORCE_ORDER: ServerSetting[] = ['context_length', 'parallel', 'port', 'expose', 'api_key', 'allowed_origins', 'prefix_cache_dir', 'prefix_cache_gb', 'speculative'];

/** A field's label, or its wire name made readable when the server sends one the UI does not know. */
export function settingLabel(field: string): string {
  return SETTING_LABELS[field] ?? field.replace(/_/g, ' ').replace(/^./, (c) => c.toUpperCase());
}

/** Labels joined as a sentence lists them: "Port", "Port and API key", "Port, API key and Context length". */
export function listLabels(fields: string[]): string {
  const l = fields.map(settingLabel);
  return l.length <= 1 ? (l[0] ?? '') : `${l.slice(0, -1).join(', ')} and ${l.at(-1)}`;
}

/** Where a value came from, as a short note beside it. */
export function sourceWords(field: ServerSetting, source: SettingSource): string {
  switch (source) {
    case 'flag':
      return `from the command line (${SETTING_FLAGS[field]})`;
    case 'settings':
      return 'saved on this page';
    default:
      return 'default';
  }
}

/** A value in force, in words. */
export function valueWords(field: ServerSetting, f: InForce<unknown>): string {
  const v = f.value;
  switch (field) {
    case 'context_length':
      return typeof v === 'number' && v > 0 ? `${formatTokens(v)} tokens` : 'the model’s own';
    case 'port':
      return String(v);
    case 'expose':
      return v ? 'other machines can connect' : 'this machine only';
    case 'api_key':
      return v === 'set' ? 'required from every client' : 'not required';
    case 'allowed_origins':
      return Array.isArray(v) && v.length ? v.join(', ') : 'none besides this page';
    case 'prefix_cache_dir':
      return typeof v === 'string' && v ? v : 'the default folder in the user cache';
    case 'prefix_cache_gb':
      if (typeof v !== 'number' || v < 0) return 'automatic: 10% of the free disk, at most 20 GB';
      return v === 0 ? 'off' : `${v} GB`;
    case 'parallel':
      return parallelWords(typeof v === 'number' ? v : 0);
    case 'speculative':
      return v === 'off' ? 'off' : v === 'on' ? 'a draft at every step' : 'drafts while they pay';
  }
}

/** The most requests the server decodes together when left to decide (the Go side's fit.MaxAutoParallel). */
export const MAX_AUTO_PARALLEL = 4;

/** The most requests the parallel setting may ask for (the Go side's manage.MaxParallel). */
export const MAX_PARALLEL = 8;

/** The parallel setting in words: 0 is auto. */
export function parallelWords(n: number): string {
  if (n <= 0) return `automatic: as many as the memory holds, at most ${MAX_AUTO_PARALLEL}`;
  return n === 1 ? 'one at a time' : `up to ${n} at once`;
}

/** The speculative setting's choices, as the Settings screen offers them; auto first, the server's default. */
export const SPECULATIVE_CHOICES: { value: 'auto' | 'off' | 'on'; label: string }[] = [
  { value: 'auto', label: 'Auto: draft only while it makes replies faster' },
  { value: 'off', label: 'Off: never draft' },
  { value: 'on', label: 'On: draft at every step' },
];

/** The saved speculative value as one of the choices: '' or absent (older servers, older files) is auto. */
export function speculativeChoice(v: string | undefined): 'auto' | 'off' | 'on' {
  return v === 'off' || v === 'on' ? v : 'auto';
}

/** One row of "In force now". */
export interface InForceRow {
  field: ServerSetting;
  label: string;
  value: string;
  source: SettingSource;
  from: string;
}

/** The rows "In force now" shows, in the form's order; settings the server did not report are left out. */
export function inForceRows(f: InForceSettings | undefined): InForceRow[] {
  if (!f) return [];
  const rows: InForceRow[] = [];
  for (const field of IN_FORCE_ORDER) {
    const e = f[field] as InForce<unknown> | undefined;
    if (!e) continue;
    rows.push({ field, label: settingLabel(field), value: valueWords(field, e), source: e.source, from: sourceWords(field, e.source) });
  }
  return rows;
}

/**
 * What the API key does right now, from the settings in force, else from the
 * status's api_key_required (servers that report no settings in force); null
 * when neither says. A server that requires none is open to anything that can
 * reach its port.
 */
export function apiKeyEffect(f: InForceSettings | undefined, keyRequired?: boolean): string | null {
  const required = f?.api_key ? f.api_key.value === 'set' : keyRequired;
  if (required === undefined) return null;
  if (required) {
    return 'Right now every API request must send the API key (Authorization: Bearer …); requests without it are refused.';
  }
  return f?.expose?.value
    ? 'Right now no API key is required: anyone who can reach this machine’s port can use the model.'
    : 'Right now no API key is required: any program on this machine can use the model.';
}

/**
 * The note shown when a saved setting is not yet in force: which ones, and how to
 * restart where the page is shown (the desktop app, or a browser, where the server
 * may be petal serve or the app). Null when everything saved is in force.
 */
export function restartNote(restartRequired: string[], desktop: boolean): string | null {
  if (!restartRequired.length) return null;
  const what = listLabels(restartRequired);
  const verb = restartRequired.length === 1 ? 'takes' : 'take';
  const how = desktop
    ? 'quit Petal from its menu and open it again'
    : 'stop petal serve (Ctrl+C in its terminal) and run it again, or quit the Petal app and open it again';
  return `Saved, not yet in force: ${what} ${verb} effect when Petal starts again. To apply now, ${how}.`;
}

/** The note for saved settings a flag overrides: they stay saved and apply when petal serve runs without the flag. */
export function flagNote(overridden: string[] | undefined): string | null {
  if (!overridden?.length) return null;
  const flags = [...new Set(overridden.map((f) => SETTING_FLAGS[f as ServerSetting]).filter(Boolean))];
  const verb = overridden.length === 1 ? 'is' : 'are';
  return `${listLabels(overridden)} ${verb} set on the command line (${flags.join(', ')}), which wins over what is saved here; the saved value applies when petal serve runs without it.`;
}
