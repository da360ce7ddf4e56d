// End-to-end tests of the web UI: a real `petal serve` on the demo model,
// driven in Debian's Chromium through playwright-core. Run by
// scripts/e2e.sh, which builds petal and says where the binary and the
// artifacts (screenshots) go.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';
import { startFakeHub } from './fakehub.mjs';

const PETAL = process.env.PETAL_BIN;
const MODEL = process.env.PETAL_MODEL ?? resolve('..', 'models', 'demo');
const ARTIFACTS = process.env.E2E_ARTIFACTS ?? resolve('e2e', 'artifacts');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
/** How long the server may take to start and the model to answer. */
const START_MS = 30_000;
const REPLY_MS = 60_000;
/** Bytes per second the stop test lets through, so a short demo reply streams for seconds. */
const SLOW_BYTES_PER_S = 300;

let server;
let baseURL;
let browser;
let settingsFile;
let fakeHub;
let modelsDir;

/**
 * What the fake Hub serves: the demo model's folder, under the real model's name and revision, so
 * that the downloaded model can be loaded and served.
 */
const HUB_FIXTURE = resolve('..', 'models', 'demo');
const HUB_FILES = [
  'config.json',
  'generation_config.json',
  'tokenizer.json',
  'tokenizer_config.json',
  'chat_template.jinja',
  'model.safetensors',
];
/** The folder and name the download gets. */
const DOWNLOADED = 'Qwen3.6-35B-A3B-4bit';
const HUB_REPO = 'mlx-community/Qwen3.6-35B-A3B-4bit';
const HUB_REVISION = '38740b847e4cb78f352aba30aa41c76e08e6eb46';

/** A safetensors file's tensors (dtype, shape, bytes by name) and where its data section starts. */
function shard(file) {
  const b = readFileSync(file);
  const dataOffset = 8 + Number(b.readBigUInt64LE(0));
  const header = JSON.parse(b.subarray(8, dataOffset).toString());
  delete header.__metadata__;
  const tensors = {};
  for (const [name, e] of Object.entries(header)) {
    const [begin, end] = e.data_offsets;
    tensors[name] = { dtype: e.dtype, shape: e.shape, bytes: b.subarray(dataOffset + begin, dataOffset + end) };
  }
  return { dataOffset, tensors };
}

function startServer() {
  const dir = mkdtempSync(join(tmpdir(), 'petal-e2e-'));
  settingsFile = join(dir, 'settings.json');
  modelsDir = join(dir, 'models');
  server = spawn(PETAL, ['serve', '--model', MODEL, '--addr', '127.0.0.1:0', '--settings', settingsFile], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      HF_ENDPOINT: fakeHub.url,
      HF_TOKEN: '',
      HF_HUB_CACHE: join(dir, 'hf-cache'),
      PETAL_MODELS: modelsDir,
    },
  });
  let log = '';
  server.stderr.on('data', (b) => (log += b));
  return new Promise((ok, fail) => {
    const timer = setTimeout(() => fail(new Error(`petal serve did not start:\n${log}`)), START_MS);
    server.on('exit', (code) => fail(new Error(`petal serve exited (${code}):\n${log}`)));
    server.stdout.on('data', (b) => {
      const m = /on (http:\/\/[^/\s]+)\/v1/.exec(String(b));
      if (m) {
        clearTimeout(timer);
        ok(m[1]);
      }
    });
  });
}

before(async () => {
  assert.ok(PETAL, 'PETAL_BIN must name a built petal binary');
  mkdirSync(ARTIFACTS, { recursive: true });
  fakeHub = await startFakeHub({ dir: HUB_FIXTURE, files: HUB_FILES, repo: HUB_REPO, revision: HUB_REVISION });
  baseURL = await startServer();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
  await fakeHub?.close();
});

async function newPage(colorScheme = 'light') {
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 760 }, colorScheme });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e));
  page.on('console', (m) => m.type() === 'error' && errors.push(new Error(m.text())));
  await page.goto(baseURL + '/');
  await page.getByRole('status').filter({ hasText: 'Ready' }).waitFor({ timeout: START_MS });
  return { page, errors };
}

const shot = (page, name) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });

test('a message streams into a reply that is kept across reloads', async () => {
  const { page, errors } = await newPage();
  const prompt = page.getByLabel('Message');
  await prompt.fill('Hello');
  await prompt.press('Enter');
  await page.getByRole('article', { name: 'You' }).filter({ hasText: 'Hello' }).waitFor();
  const stats = page.getByTestId('stats');
  await stats.waitFor({ timeout: REPLY_MS });
  const reply = (await page.getByTestId('reply').last().innerText()).trim();
  assert.ok(reply.length > 0, 'the reply is empty');
  assert.match(await stats.innerText(), /^\d+ tokens/);
  await shot(page, 'chat-reply');

  await page.reload();
  await page.getByRole('article', { name: 'Petal' }).filter({ hasText: reply.slice(0, 20) }).waitFor();
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('a slow stream shows partial text and Stop ends it, keeping what arrived', async () => {
  const { page, errors } = await newPage('dark');
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', {
    offline: false,
    latency: 0,
    downloadThroughput: SLOW_BYTES_PER_S,
    uploadThroughput: -1,
  });
  const prompt = page.getByLabel('Message');
  await prompt.fill('Tell me about the city.');
  await prompt.press('Enter');
  const stop = page.getByRole('button', { name: 'Stop' });
  await stop.waitFor({ timeout: REPLY_MS });

  // Watch the reply grow: at least two different partial texts before Stop.
  const reply = page.getByTestId('reply').last();
  const seen = new Set();
  const deadline = Date.now() + REPLY_MS;
  while (seen.size < 2 && Date.now() < deadline) {
    const t = (await reply.innerText()).trim();
    if (t) seen.add(t);
    await page.waitForTimeout(50);
  }
  assert.ok(seen.size >= 2, `the reply did not stream: saw ${[...seen].join(' | ')}`);
  await shot(page, 'chat-streaming-dark');

  await page.keyboard.press('Escape');
  await page.getByRole('button', { name: 'Send' }).waitFor();
  const meta = page.getByRole('article', { name: 'Petal' }).last();
  await meta.getByText('Stopped').waitFor();
  const kept = (await reply.innerText()).trim();
  assert.ok(kept.length > 0, 'the partial reply was lost');
  await shot(page, 'chat-stopped-dark');

  // The server is free again: the next message gets a full reply.
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  await prompt.fill('Hello');
  await prompt.press('Enter');
  await page.getByTestId('stats').last().waitFor({ timeout: REPLY_MS });
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('settings open from the keyboard and are saved on the server', async () => {
  const { page, errors } = await newPage();
  await page.keyboard.press('Control+3');
  await page.getByRole('heading', { name: 'Settings' }).waitFor();
  await page.getByLabel('Sampling preset').selectOption('coding');
  await page.getByLabel('Port', { exact: true }).fill('9123');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByTestId('saved').waitFor();
  await page.getByText(/Restart Petal to apply: .*port/).waitFor();
  await shot(page, 'settings');

  const saved = JSON.parse(readFileSync(settingsFile, 'utf8'));
  assert.equal(saved.preset, 'coding');
  assert.equal(saved.port, 9123);

  // A bad value is refused with the server's message, and nothing is written.
  await page.getByLabel('Allowed browser origins').fill('evil.example/path');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('[data-code="bad_settings"]').waitFor();
  assert.equal(JSON.parse(readFileSync(settingsFile, 'utf8')).port, 9123);
  assert.deepEqual(errors.filter((e) => !/400/.test(e.message)), []);
  await page.context().close();
});

test('the endpoint panel shows this server and setups to copy', async () => {
  const { page } = await newPage();
  await page.keyboard.press('Control+4');
  await page.getByTestId('endpoint-url').filter({ hasText: baseURL + '/v1' }).waitFor();
  for (const name of ['Continue', 'Zed', 'Xcode', 'JetBrains AI Assistant', 'Open WebUI']) {
    await page.getByRole('heading', { name }).waitFor();
  }
  await page.getByText(`apiBase: ${baseURL}/v1`).waitFor();
  await shot(page, 'endpoint');
  await page.keyboard.press('Control+2');
  await page.getByTestId('model-state').filter({ hasText: 'ready' }).waitFor();
  // The memory verdict for the real model on this machine, whatever it is.
  await page.getByTestId('fit-verdict').filter({ hasText: /Fits this machine|Fits at a shorter context|Does not fit/ }).waitFor();
  await page.getByText(/GiB working set|does not fit|GiB/).first().waitFor();
  await shot(page, 'model');
  await page.context().close();
});

test('Check this Mac runs petal doctor on the server and shows the report to copy', async () => {
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: baseURL });
  const page = await ctx.newPage();
  await page.goto(baseURL + '/#/setup');
  await page.getByRole('button', { name: 'Check this Mac' }).click();
  await page.getByRole('button', { name: 'Checking…' }).waitFor();
  // Every kernel compiled and tested in the sim, then the demo model: minutes on a loaded machine.
  const verdict = page.getByTestId('doctor-verdict');
  await verdict.waitFor({ timeout: 600_000 });
  assert.match(await verdict.innerText(), /All checks passed · sim on Petal sim/);
  const report = await page.getByTestId('doctor-report').innerText();
  assert.match(report, /^petal doctor, sim backend/);
  assert.match(report, /PASS compile attention\.metal\/attn_decode_f16kv \[600=256 601=8\]/);
  assert.match(report, /PASS model {3}demo model, GPU path against the CPU backend/);
  await shot(page, 'doctor');
  await page.getByRole('button', { name: 'Copy report' }).click();
  await page.getByRole('button', { name: 'Copied' }).waitFor();
  assert.equal((await page.evaluate(() => navigator.clipboard.readText())).trim(), report.trim());
  await ctx.close();
});

test('management routes refuse another origin', async () => {
  const res = await fetch(baseURL + '/manage/settings', {
    method: 'PUT',
    headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example', 'Sec-Fetch-Site': 'cross-site' },
    body: JSON.stringify({ port: 1, preset: 'thinking' }),
  });
  assert.equal(res.status, 403);
  assert.equal((await res.json()).error.code, 'cross_origin');
});

test('the model downloads from a fake Hub through a 404 and a cut connection, pauses, resumes, and is loaded without a restart', async () => {
  const { page } = await newPage();
  await page.keyboard.press('Control+2');
  const state = page.getByTestId('download-state');
  await state.and(page.locator('[data-state="idle"]')).waitFor();

  fakeHub.missingOnce.add('tokenizer.json');
  await page.getByRole('button', { name: 'Download' }).click();
  await state.and(page.locator('[data-state="failed"]')).waitFor({ timeout: REPLY_MS });
  await page.locator('[data-code="not_found"]').waitFor();
  await shot(page, 'download-failed');

  // Slow enough (about 100 KB/s) to see progress and pause it.
  fakeHub.sliceDelayMs = 160;
  fakeHub.cutOnce.add('model.safetensors');
  await page.getByRole('button', { name: 'Retry' }).click();
  await state.and(page.locator('[data-state="running"]')).waitFor();
  await page.getByText(/B\/s · .* left$/).waitFor(); // speed and ETA shown
  await shot(page, 'download-running');
  await page.getByRole('button', { name: 'Pause' }).click();
  await state.and(page.locator('[data-state="paused"]')).waitFor();
  const pausedAt = fakeHub.served;
  await shot(page, 'download-paused');
  fakeHub.sliceDelayMs = 0;
  await page.getByRole('button', { name: 'Resume' }).click();
  await state.and(page.locator('[data-state="done"]')).waitFor({ timeout: REPLY_MS });
  await shot(page, 'download-done');
  assert.ok(fakeHub.served - pausedAt < fakeHub.total, 'resuming started the download over');
  for (const name of HUB_FILES) {
    const got = join(modelsDir, DOWNLOADED, name);
    const want = join(HUB_FIXTURE, name);
    if (name.endsWith('.safetensors')) {
      // Stored realigned: the same tensors, the data section on a 16-byte boundary.
      const stored = shard(got);
      assert.equal(stored.dataOffset % 16, 0, name);
      assert.deepEqual(stored.tensors, shard(want).tensors, name);
    } else {
      assert.deepEqual(readFileSync(got), readFileSync(want), name);
    }
  }

  // The click on Download was the last one: the finished download is loaded and served.
  await page.getByTestId('load-state').filter({ hasText: 'Loaded' }).waitFor({ timeout: REPLY_MS });
  await page.getByTestId('model-name').filter({ hasText: DOWNLOADED }).waitFor();
  await shot(page, 'download-loaded');
  const models = await (await fetch(baseURL + '/v1/models')).json();
  assert.equal(models.data[0].id, DOWNLOADED);
  const health = await (await fetch(baseURL + '/health')).json();
  assert.equal(health.model, DOWNLOADED);
  const reply = await fetch(baseURL + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'Hello!' }], max_tokens: 8 }),
  });
  assert.equal(reply.status, 200);
  assert.equal((await reply.json()).model, DOWNLOADED);

  // The served model verifies again, and cannot be deleted from under the server.
  await page.getByRole('button', { name: 'Verify' }).click();
  await state.and(page.locator('[data-state="done"]')).waitFor();
  assert.equal(await page.getByRole('button', { name: 'Delete' }).count(), 0);
  assert.ok(existsSync(join(modelsDir, DOWNLOADED)));
  await page.context().close();
});
