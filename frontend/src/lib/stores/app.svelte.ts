// The stores the whole UI shares, created once.

import { ChatStore } from './chat.svelte';
import { DoctorStore } from './doctor.svelte';
import { ModelStore } from './model.svelte';
import { PrefixCacheStore } from './prefixcache.svelte';
import { SettingsStore } from './settings.svelte';

export const chat = new ChatStore();
export const model = new ModelStore();
export const settings = new SettingsStore();
export const doctor = new DoctorStore();
export const prefixCache = new PrefixCacheStore();

// What was read while the model was still loading was refused (503); read it again once it is ready.
model.whenReady(() => {
  settings.load();
  prefixCache.load();
});

export type View = 'chat' | 'setup' | 'settings' | 'endpoint';
export const VIEWS: { id: View; label: string; key: string }[] = [
  { id: 'chat', label: 'Chat', key: '1' },
  { id: 'setup', label: 'Model', key: '2' },
  { id: 'settings', label: 'Settings', key: '3' },
  { id: 'endpoint', label: 'Endpoint', key: '4' },
];

/** The view named by the URL hash (#/settings), chat when none. */
export function viewFromHash(hash: string): View {
  const name = hash.replace(/^#\/?/, '');
  return VIEWS.some((v) => v.id === name) ? (name as View) : 'chat';
}
