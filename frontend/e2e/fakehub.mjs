// A small stand-in for the Hugging Face Hub over real HTTP, for the
// download tests: the model API listing (sizes and LFS sha256) and
// /{repo}/resolve/{rev}/{file} with byte ranges, slowed down so a person
// (or a test) can pause it, with one-shot faults: a 404, or a connection
// cut halfway through a file.

import { createServer } from 'node:http';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

/** Bytes written per slice of a response; hub.sliceDelayMs pauses between slices. */
const SLICE_BYTES = 16 << 10;

export async function startFakeHub({ dir, files, repo, revision }) {
  const blobs = new Map(files.map((name) => [name, readFileSync(join(dir, name))]));
  const hub = {
    missingOnce: new Set(),
    cutOnce: new Set(),
    served: 0,
    sliceDelayMs: 0,
    total: [...blobs.values()].reduce((n, b) => n + b.length, 0),
    url: '',
    close: () => new Promise((ok) => server.close(ok)),
  };
  const listing = JSON.stringify({
    id: repo,
    sha: revision,
    siblings: [...blobs].map(([name, data]) => ({
      rfilename: name,
      size: data.length,
      lfs: { sha256: createHash('sha256').update(data).digest('hex'), size: data.length },
    })),
  });
  const resolvePrefix = `/${repo}/resolve/${revision}/`;

  const server = createServer(async (req, res) => {
    const url = new URL(req.url, 'http://hub');
    if (url.pathname === `/api/models/${repo}/revision/${revision}`) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(listing);
      return;
    }
    const name = url.pathname.startsWith(resolvePrefix) ? decodeURIComponent(url.pathname.slice(resolvePrefix.length)) : '';
    const data = blobs.get(name);
    if (!data || hub.missingOnce.delete(name)) {
      res.writeHead(404, { 'Content-Type': 'text/plain' });
      res.end('Entry not found');
      return;
    }
    let start = 0;
    let end = data.length - 1;
    const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? '');
    if (range) {
      start = Number(range[1]);
      if (range[2]) end = Math.min(end, Number(range[2]));
      if (start > end) {
        res.writeHead(416, { 'Content-Range': `bytes */${data.length}` });
        res.end();
        return;
      }
    }
    const etag = `"${createHash('sha256').update(data).digest('hex')}"`;
    const headers = { 'Content-Type': 'application/octet-stream', 'Content-Length': end - start + 1, ETag: etag, 'Accept-Ranges': 'bytes' };
    if (range) headers['Content-Range'] = `bytes ${start}-${end}/${data.length}`;
    res.writeHead(range ? 206 : 200, headers);
    const cutAt = hub.cutOnce.delete(name) ? start + Math.floor((end - start + 1) / 2) : Infinity;
    for (let off = start; off <= end; off += SLICE_BYTES) {
      const stop = Math.min(end + 1, off + SLICE_BYTES);
      if (stop > cutAt) {
        res.write(data.subarray(off, cutAt));
        hub.served += cutAt - off;
        res.socket?.destroy();
        return;
      }
      if (!res.write(data.subarray(off, stop))) await new Promise((ok) => res.once('drain', ok));
      hub.served += stop - off;
      if (res.destroyed) return;
      if (hub.sliceDelayMs) await new Promise((ok) => setTimeout(ok, hub.sliceDelayMs));
    }
    res.end();
  });
  await new Promise((ok) => server.listen(0, '127.0.0.1', ok));
  hub.url = `http://127.0.0.1:${server.address().port}`;
  return hub;
}
