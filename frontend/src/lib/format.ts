// Human-readable numbers for the UI.

const UNITS = ['B', 'KB', 'MB', 'GB', 'TB'];

/** Bytes in decimal units, as disks and the Hub count them (19.4 GB, not GiB): the one unit the UI states sizes in. */
export function formatBytes(n: number): string {
  if (!Number.isFinite(n) || n < 0) return '–';
  let i = 0;
  while (n >= 1000 && i < UNITS.length - 1) {
    n /= 1000;
    i++;
  }
  return `${n >= 100 || i === 0 ? Math.round(n) : n.toFixed(1)} ${UNITS[i]}`;
}

/** A duration in seconds as "1 h 5 min", "3 min 20 s" or "12 s". */
export function formatDuration(s: number): string {
  if (!Number.isFinite(s) || s <= 0) return '–';
  s = Math.round(s);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const sec = s % 60;
  if (h) return `${h} h ${m} min`;
  if (m) return `${m} min ${sec} s`;
  return `${sec} s`;
}

/** Tokens as "32K" style context lengths. */
export function formatTokens(n: number): string {
  if (n >= 1024 && n % 1024 === 0) return `${n / 1024}K`;
  return n.toLocaleString('en-US');
}

/** A count and its noun, singular for exactly one: "1 token", "12 tokens". */
export function plural(n: number, noun: string): string {
  return `${n.toLocaleString('en-US')} ${noun}${n === 1 ? '' : 's'}`;
}

/** A short wait: "0.42 s" under ten seconds, whole seconds above. */
export function formatSeconds(s: number): string {
  if (!Number.isFinite(s) || s < 0) return '–';
  return s < 10 ? `${s.toFixed(2)} s` : `${Math.round(s)} s`;
}
