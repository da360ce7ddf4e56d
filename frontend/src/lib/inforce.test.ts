import { describe, expect, it } from 'vitest';
import { MAX_AUTO_PARALLEL, SPECULATIVE_CHOICES, apiKeyEffect, flagNote, inForceRows, listLabels, restartNote, speculativeChoice } from './inforce';
import type { InForceSettings } from './api/types';

const inForce: InForceSettings = {
  context_length: { value: 32768, source: 'flag' },
  port: { value: 9123, source: 'settings' },
  expose: { value: false, source: 'default' },
  api_key: { value: 'set', source: 'settings' },
  allowed_origins: { value: [], source: 'default' },
};

describe('inForceRows', () => {
  it('says each value in words with where it came from, in the form’s order', () => {
    expect(inForceRows(inForce).map((r) => `${r.label}: ${r.value} (${r.from})`)).toEqual([
      'Context length: 32K tokens (from the command line (--context))',
      'Port: 9123 (saved on this page)',
      'Network access: this machine only (default)',
      'API key: required from every client (saved on this page)',
      'Allowed browser origins: none besides this page (default)',
    ]);
  });

  it('says where the prefix cache keeps its snapshots and how much disk it may take', () => {
    const words = (dir: string, gb: number) =>
      inForceRows({ prefix_cache_dir: { value: dir, source: 'settings' }, prefix_cache_gb: { value: gb, source: 'flag' } }).map(
        (r) => `${r.label}: ${r.value} (${r.from})`,
      );
    expect(words('', -1)).toEqual([
      'Prefix cache folder: the default folder in the user cache (saved on this page)',
      'Prefix cache size on disk: automatic: 10% of the free disk, at most 20 GB (from the command line (--prefix-cache-gb))',
    ]);
    expect(words('/data/petal', 0)[1]).toBe('Prefix cache size on disk: off (from the command line (--prefix-cache-gb))');
    expect(words('/data/petal', 5)).toEqual([
      'Prefix cache folder: /data/petal (saved on this page)',
      'Prefix cache size on disk: 5 GB (from the command line (--prefix-cache-gb))',
    ]);
  });

  it('says how many requests decode together, automatic when left to the memory fit', () => {
    const words = (n: number, source: 'flag' | 'settings' | 'default') =>
      inForceRows({ parallel: { value: n, source } }).map((r) => `${r.label}: ${r.value} (${r.from})`);
    expect(words(0, 'default')).toEqual([`Requests decoded together: automatic: as many as the memory holds, at most ${MAX_AUTO_PARALLEL} (default)`]);
    expect(words(1, 'settings')).toEqual(['Requests decoded together: one at a time (saved on this page)']);
    expect(words(3, 'flag')).toEqual(['Requests decoded together: up to 3 at once (from the command line (--parallel))']);
    expect(inForceRows({ ...inForce, parallel: { value: 2, source: 'flag' } }).map((r) => r.field).slice(0, 2)).toEqual(['context_length', 'parallel']);
    expect(flagNote(['parallel'])).toContain('--parallel');
    expect(restartNote(['parallel'], false)).toContain('Requests decoded together takes effect when Petal starts again');
  });

  it('offers the speculative setting as auto, off and on, reading a value left out as auto', () => {
    expect(SPECULATIVE_CHOICES.map((c) => c.value)).toEqual(['auto', 'off', 'on']);
    expect(SPECULATIVE_CHOICES[0].label).toMatch(/only while it makes replies faster/);
    expect(SPECULATIVE_CHOICES[1].label).toMatch(/never/);
    expect(speculativeChoice(undefined)).toBe('auto');
    expect(speculativeChoice('')).toBe('auto');
    expect(speculativeChoice('off')).toBe('off');
    expect(speculativeChoice('on')).toBe('on');
    expect(speculativeChoice('auto')).toBe('auto');
    // The form, "In force now" and the notes name it alike.
    expect(inForceRows({ speculative: { value: 'off', source: 'settings' } }).map((r) => `${r.label}: ${r.value}`)).toEqual(['Speculative decoding: off']);
    expect(restartNote(['speculative'], false)).toContain('Speculative decoding takes effect when Petal starts again');
    expect(flagNote(['speculative'])).toContain('--speculative');
  });

  it('leaves out what an older server does not report', () => {
    expect(inForceRows(undefined)).toEqual([]);
    expect(inForceRows({ port: { value: 8080, source: 'default' } }).map((r) => r.field)).toEqual(['port']);
  });
});

describe('apiKeyEffect', () => {
  it('says whether a request without the key is refused right now', () => {
    expect(apiKeyEffect(inForce)).toMatch(/must send the API key/);
    expect(apiKeyEffect({ ...inForce, api_key: { value: 'not set', source: 'default' } })).toMatch(/no API key is required: any program on this machine/);
    expect(
      apiKeyEffect({ ...inForce, api_key: { value: 'not set', source: 'default' }, expose: { value: true, source: 'flag' } }),
    ).toMatch(/anyone who can reach this machine’s port/);
    expect(apiKeyEffect(undefined)).toBeNull();
  });

  it('falls back on the status’s api_key_required where no settings in force are reported', () => {
    expect(apiKeyEffect(undefined, true)).toMatch(/must send the API key/);
    expect(apiKeyEffect(undefined, false)).toMatch(/no API key is required/);
    // What is in force wins over the status.
    expect(apiKeyEffect(inForce, false)).toMatch(/must send the API key/);
  });
});

describe('restartNote', () => {
  it('is absent when everything saved is in force', () => {
    expect(restartNote([], false)).toBeNull();
  });

  it('names the settings for people and says how to restart', () => {
    const web = restartNote(['context_length', 'api_key'], false)!;
    expect(web).toContain('Context length and API key take effect when Petal starts again');
    expect(web).not.toMatch(/context_length|api_key/);
    expect(web).toContain('stop petal serve');
    expect(web).toContain('quit the Petal app');
    const app = restartNote(['port'], true)!;
    expect(app).toContain('Port takes effect');
    expect(app).toContain('quit Petal from its menu');
    expect(app).not.toContain('petal serve');
  });
});

describe('flagNote', () => {
  it('names the flag that wins over a saved value', () => {
    expect(flagNote(['context_length'])).toBe(
      'Context length is set on the command line (--context), which wins over what is saved here; the saved value applies when petal serve runs without it.',
    );
    expect(flagNote([])).toBeNull();
    expect(flagNote(undefined)).toBeNull();
  });
});

describe('listLabels', () => {
  it('joins as a sentence does and makes unknown names readable', () => {
    expect(listLabels(['port', 'expose', 'new_thing'])).toBe('Port, Network access and New thing');
  });
});
