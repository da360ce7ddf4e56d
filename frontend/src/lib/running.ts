// Words for the Setup screen's "Running now": how many requests the model
// answers at this moment and how many it decodes together.

import type { Status } from './api/types';

/** The requests on the served model in words; null where the server does not say (older servers, no model served). */
export function requestsWords(m: Status['model']): string | null {
  if (!m.parallel) return null;
  const running = m.requests_running ?? 0;
  const now = running === 0 ? 'none running now' : running === 1 ? '1 running now' : `${running} running now`;
  const limit = m.parallel === 1 ? 'one at a time' : `up to ${m.parallel} decoded together`;
  return `${now} · ${limit}`;
}
