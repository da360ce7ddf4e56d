import { describe, expect, it } from 'vitest';
import { clientSetups } from './endpoint';

describe('clientSetups', () => {
  const setups = clientSetups({ baseURL: 'http://127.0.0.1:9000/v1', model: 'demo', contextLength: 4096, apiKeyRequired: true });

  it('covers every client CLIENTS.md names', () => {
    expect(setups.map((s) => s.id)).toEqual(['continue', 'zed', 'xcode', 'jetbrains', 'openwebui', 'curl']);
  });

  it('fills in the address, port, model and context', () => {
    const by = Object.fromEntries(setups.map((s) => [s.id, s.text]));
    expect(by.continue).toContain('apiBase: http://127.0.0.1:9000/v1');
    expect(by.continue).toContain('contextLength: 4096');
    expect(by.zed).toContain('"max_tokens": 4096');
    expect(by.xcode).toContain('Port: 9000');
    expect(by.curl).toContain("Authorization: Bearer YOUR_PETAL_API_KEY");
  });

  it('asks for no key when the server needs none', () => {
    const [c] = clientSetups({ baseURL: 'http://localhost/v1', model: 'm', contextLength: 0, apiKeyRequired: false });
    expect(c.text).toContain('apiKey: petal');
  });
});
