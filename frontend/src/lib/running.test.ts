import { describe, expect, it } from 'vitest';
import { requestsWords } from './running';
import type { Status } from './api/types';
import manageStatus from './api/contract/manage-status.json';
import manageStatusFailed from './api/contract/manage-status-failed.json';

const ready: Status['model'] = { name: 'demo', state: 'ready', context_length: 32768, backend: 'cpu', dir: '/m' };

describe('requestsWords', () => {
  it('says how many requests run now and how many may run together', () => {
    expect(requestsWords({ ...ready, requests_running: 0, parallel: 4 })).toBe('none running now · up to 4 decoded together');
    expect(requestsWords({ ...ready, requests_running: 1, parallel: 4 })).toBe('1 running now · up to 4 decoded together');
    expect(requestsWords({ ...ready, requests_running: 3, parallel: 3 })).toBe('3 running now · up to 3 decoded together');
    expect(requestsWords({ ...ready, requests_running: 1, parallel: 1 })).toBe('1 running now · one at a time');
  });

  it('says nothing where the server does not say, or serves no model', () => {
    expect(requestsWords(ready)).toBeNull();
    expect(requestsWords({ ...ready, state: 'failed', requests_running: 0, parallel: 0 })).toBeNull();
  });

  it('reads the status the Go server writes', () => {
    expect(requestsWords((manageStatus as unknown as Status).model)).toBe('1 running now · up to 4 decoded together');
    expect(requestsWords((manageStatusFailed as unknown as Status).model)).toBeNull();
  });
});
