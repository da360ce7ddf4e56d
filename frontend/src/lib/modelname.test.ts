import { describe, expect, it } from 'vitest';
import { displayName, isDemoModel } from './modelname';

describe('displayName', () => {
  it('calls the demo model by what it is and keeps other ids', () => {
    expect(displayName('demo-4171bf39e9c16271')).toBe('Demo model');
    expect(isDemoModel('demo-4171bf39e9c16271')).toBe(true);
    expect(displayName('Qwen3.6-35B-A3B-4bit')).toBe('Qwen3.6-35B-A3B-4bit');
    // A folder a user named demo-something is not the demo.
    expect(displayName('demo-mine')).toBe('demo-mine');
    expect(isDemoModel('demo-4171bf39e9c16271x')).toBe(false);
  });
});
