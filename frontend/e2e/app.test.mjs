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
let cacheDir;

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
  cacheDir = join(dir, 'cache');
  server = spawn(PETAL, ['serve', '--model', MODEL, '--addr', '127.0.0.1:0', '--settings', settingsFile], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: {
      ...process.env,
      HF_ENDPOINT: fakeHub.url,
      HF_TOKEN: '',
      HF_HUB_CACHE: join(dir, 'hf-cache'),
      PETAL_MODELS: modelsDir,
      // A cache folder of its own: the Model screen measures this machine's CPU once and keeps it there.
      XDG_CACHE_HOME: cacheDir,
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

/** The widths every screen is checked at: a phone held upright and a laptop. */
const PHONE = { viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };
const DESKTOP = { viewport: { width: 1280, height: 800 } };

async function newPage(colorScheme = 'light', device = { viewport: { width: 1100, height: 760 } }) {
  const ctx = await browser.newContext({ ...device, colorScheme });
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

test('the chat window says the demo is a toy, asks it not to think, and keeps a reply’s line breaks', async () => {
  const { page, errors } = await newPage();
  const banner = page.getByTestId('demo-banner');
  await banner.waitFor();
  assert.match(await banner.innerText(), /demo model.*toy/);
  const think = page.getByLabel('Think');
  assert.equal(await think.isChecked(), false, 'Think is on for a model that never thinks');
  assert.equal(await think.isDisabled(), true);

  // The reply the server would stream, a haiku in three lines, as the chat route's SSE; the
  // request the page sends is kept to see what it asked for.
  const haiku = ['Old silent pond', 'A frog jumps into the pond', 'Splash! Silence again'];
  let asked;
  await page.route('**/v1/chat/completions', async (route) => {
    asked = route.request().postDataJSON();
    const chunk = (delta, finish = null) =>
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: asked.model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
    const usage = { prompt_tokens: 9, completion_tokens: 12, total_tokens: 21 };
    const body =
      chunk({ role: 'assistant', content: '' }) +
      haiku.map((l, i) => chunk({ content: (i ? '\n' : '') + l })).join('') +
      chunk({}, 'stop') +
      `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: asked.model, choices: [], usage })}\n\n` +
      'data: [DONE]\n\n';
    await route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body });
  });
  const prompt = page.getByLabel('Message');
  await prompt.fill('Write a haiku');
  await prompt.press('Enter');
  await page.getByTestId('stats').waitFor({ timeout: REPLY_MS });
  assert.equal(asked.chat_template_kwargs?.enable_thinking, false, 'the demo was asked to think');
  const reply = page.getByTestId('reply').last();
  assert.deepEqual((await reply.innerText()).split('\n'), haiku);
  assert.equal(await reply.locator('br').count(), 2);
  await shot(page, 'chat-demo-haiku');
  await page.unroute('**/v1/chat/completions');
  assert.deepEqual(errors, []);
  await page.context().close();
});

test('a window opened while the model loads says so, then chats once it is loaded, with no refresh', async () => {
  // petal serve listens only once its model is loaded, so the wait the desktop app shows (its
  // window opens first: loading.go) is played here in the page: until the load "ends", the status
  // says loading and every other route answers loading.go's 503; then the real server answers.
  const status = await (await fetch(baseURL + '/manage/status')).json();
  const loading = { ...status, downloads: false, fit: false, load: false, doctor: false, model: { ...status.model, state: 'loading', context_length: 0 } };
  const busy = { error: { message: 'Petal is loading the model; try again in a moment', type: 'model_loading', param: null, code: null } };
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(e));
  // Chromium logs each 503 it is given as a console error: those are the wait itself.
  page.on('console', (m) => m.type() === 'error' && !/\b503\b/.test(m.text()) && errors.push(new Error(m.text())));
  const hold = async (route) => {
    const path = new URL(route.request().url()).pathname;
    if (path === '/manage/status') await route.fulfill({ status: 200, contentType: 'application/json', body: JSON.stringify(loading) });
    else await route.fulfill({ status: 503, contentType: 'application/json', headers: { 'Retry-After': '1' }, body: JSON.stringify(busy) });
  };
  await page.route(/\/(v1|manage)\//, hold);
  await page.goto(baseURL + '/');
  await page.getByTestId('chat-loading').filter({ hasText: 'Loading the model…' }).waitFor({ timeout: START_MS });
  await page.getByRole('status').filter({ hasText: 'Loading…' }).waitFor();
  assert.equal(await page.getByLabel('Message').isDisabled(), true);
  assert.equal(await page.getByRole('alert').count(), 0, 'the wait is shown as an error');
  await shot(page, 'chat-model-loading');
  await page.keyboard.press('Control+3');
  await page.getByTestId('settings-waiting').waitFor();
  assert.equal(await page.getByRole('alert').count(), 0, 'the Settings screen shows the wait as an error');
  await page.keyboard.press('Control+1');

  await page.unroute(/\/(v1|manage)\//, hold);
  await page.getByTestId('chat-model').waitFor({ timeout: START_MS });
  await page.getByRole('status').filter({ hasText: 'Ready' }).waitFor();
  assert.equal(await page.getByLabel('Message').isDisabled(), false);
  // Settings refused while loading are read again once the model is ready.
  await page.keyboard.press('Control+3');
  await page.getByRole('heading', { name: 'Settings' }).waitFor();
  await page.getByLabel('Sampling preset').waitFor();
  await page.getByTestId('in-force').waitFor();
  assert.equal(await page.getByTestId('settings-waiting').count(), 0);
  assert.equal(await page.getByRole('alert').count(), 0, 'an error from the wait is still shown');
  assert.deepEqual(errors, []);
  await ctx.close();
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
  const reply = page.getByTestId('reply').last();
  const meta = page.getByRole('article', { name: 'Petal' }).last();
  // The UI samples without a seed, and the demo model sometimes answers in a
  // dozen tokens that arrive whole before Stop is pressed; such a reply
  // cannot show Stop, so the test asks again (at most three times) until
  // Stop lands inside a reply.
  let stopped = false;
  for (let attempt = 0; attempt < 3 && !stopped; attempt++) {
    await prompt.fill('Tell me about the city.');
    await prompt.press('Enter');
    const stop = page.getByRole('button', { name: 'Stop' });
    await stop.waitFor({ timeout: REPLY_MS });

    // Watch the reply grow: at least two different partial texts before Stop.
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
    stopped = await meta
      .getByText('Stopped')
      .waitFor({ timeout: 5_000 })
      .then(() => true, () => false);
  }
  assert.ok(stopped, 'Stop never ended a reply in three tries');
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
  await page.getByLabel(/^Context length/).fill('8192');
  // Auto is the default and says when it drafts; off is saved as off.
  assert.equal(await page.getByTestId('speculative').inputValue(), 'auto');
  assert.match(await page.locator('#speculative-note').innerText(), /auto drafts only while that pays, off never does/);
  await page.getByLabel('Speculative decoding').selectOption('off');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.getByTestId('saved').waitFor();
  // The saved context is not the one served (no --context was given): the note names it for
  // people and says how to restart.
  const note = page.getByTestId('restart-note');
  await note.filter({ hasText: /Context length.* take(s)? effect when Petal starts again/ }).waitFor();
  assert.match(await note.innerText(), /stop petal serve \(Ctrl\+C in its terminal\) and run it again, or quit the Petal app/);
  assert.doesNotMatch(await note.innerText(), /context_length|api_key/);
  // The server was started without a key: the page says what that means now.
  await page.getByTestId('api-key-effect').filter({ hasText: 'Right now no API key is required: any program on this machine' }).waitFor();
  const reply = await (await fetch(baseURL + '/manage/settings')).json();
  if (reply.in_force) {
    // A server that applies saved settings: --addr pins the port, so the saved one waits for no
    // restart; the page says the flag wins instead.
    assert.doesNotMatch(await note.innerText(), /Port/);
    await page.getByTestId('flag-note').filter({ hasText: /Port.* set on the command line \(--addr\)/ }).waitFor();
    await page.getByTestId('in-force').locator('dd[data-field="port"][data-source="flag"]').waitFor();
  }
  await shot(page, 'settings');

  const saved = JSON.parse(readFileSync(settingsFile, 'utf8'));
  assert.equal(saved.preset, 'coding');
  assert.equal(saved.port, 9123);
  assert.equal(saved.context_length, 8192);
  assert.equal(saved.speculative, 'off');

  // A bad value is refused with the server's message, and nothing is written.
  await page.getByLabel('Allowed browser origins').fill('evil.example/path');
  await page.getByRole('button', { name: 'Save' }).click();
  await page.locator('[data-code="bad_settings"]').waitFor();
  assert.equal(JSON.parse(readFileSync(settingsFile, 'utf8')).port, 9123);
  assert.deepEqual(errors.filter((e) => !/400/.test(e.message)), []);
  await page.context().close();
});

test('the Settings screen says which values are in force and why, and what the API key does now', async () => {
  // The reply of a server started with --context over saved settings whose key and port are not yet in force.
  const reply = {
    settings: { context_length: 0, thinking: true, preset: 'thinking', port: 9123, expose: false, access_token: '', api_key: 'k', allowed_origins: [], start_at_login: false },
    restart_required: ['port', 'api_key'],
    overridden_by_flag: ['context_length'],
    in_force: {
      context_length: { value: 8192, source: 'flag' },
      port: { value: 8080, source: 'default' },
      expose: { value: false, source: 'default' },
      api_key: { value: 'not set', source: 'default' },
      allowed_origins: { value: ['http://localhost:3000'], source: 'settings' },
    },
  };
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 900 } });
  const page = await ctx.newPage();
  await page.route('**/manage/settings', (route) =>
    route.request().method() === 'GET' ? route.fulfill({ json: reply }) : route.continue(),
  );
  await page.goto(baseURL + '/#/settings');
  const card = page.getByTestId('in-force');
  await card.waitFor({ timeout: START_MS });
  const row = (field) => card.locator(`dd[data-field="${field}"]`);
  assert.equal(await row('context_length').innerText(), '8K tokens · from the command line (--context)');
  assert.equal(await row('port').innerText(), '8080 · default');
  assert.equal(await row('api_key').innerText(), 'not required · default');
  assert.equal(await row('allowed_origins').innerText(), 'http://localhost:3000 · saved on this page');
  assert.deepEqual(await card.locator('dt').allInnerTexts(), ['Context length', 'Port', 'Network access', 'API key', 'Allowed browser origins']);
  await card.getByTestId('api-key-effect').filter({ hasText: 'Right now no API key is required' }).waitFor();
  await card.getByTestId('flag-note').filter({ hasText: 'Context length is set on the command line (--context)' }).waitFor();
  const note = await page.getByTestId('restart-note').innerText();
  assert.match(note, /^Saved, not yet in force: Port and API key take effect when Petal starts again\./);
  assert.doesNotMatch(note, /api_key|\bport\b/);
  await shot(page, 'settings-in-force');
  await ctx.close();
});

test('the Settings screen shows the prompt cache on disk and clears it after asking', async () => {
  // A reply leaves a snapshot of its conversation on disk, written in the background.
  const asked = await fetch(baseURL + '/v1/chat/completions', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ messages: [{ role: 'user', content: 'What is the capital of France?' }], max_tokens: 8 }),
  });
  assert.equal(asked.status, 200);
  let held;
  for (const until = Date.now() + REPLY_MS; Date.now() < until; await new Promise((ok) => setTimeout(ok, 200))) {
    held = await (await fetch(baseURL + '/manage/prefix-cache')).json();
    if (held.files > 0) break;
  }
  assert.ok(held.enabled && held.files > 0, `no snapshot on disk: ${JSON.stringify(held)}`);

  const { page, errors } = await newPage();
  await page.keyboard.press('Control+3');
  const card = page.getByTestId('prefix-cache');
  await card.waitFor();
  assert.match(await page.getByTestId('prefix-cache-size').innerText(), /^[\d.]+ [kMG]?B of [\d.]+ [kMG]?B in \d+ snapshots?$/);
  await card.getByRole('button', { name: 'Clear…' }).click();
  const question = page.getByTestId('prefix-cache-confirm');
  assert.match(await question.innerText(), /^Remove \d+ snapshots? \(/);
  await card.scrollIntoViewIfNeeded();
  await shot(page, 'settings-prefix-cache-confirm');
  // Cancel keeps every file; Remove, asked again, takes them all.
  await card.getByRole('button', { name: 'Cancel' }).click();
  assert.ok((await (await fetch(baseURL + '/manage/prefix-cache')).json()).files > 0, 'Cancel removed snapshots');
  await card.getByRole('button', { name: 'Clear…' }).click();
  await card.getByRole('button', { name: 'Remove' }).click();
  await page.getByTestId('prefix-cache-cleared').filter({ hasText: /^Removed \d+ snapshots? \(/ }).waitFor();
  assert.equal((await (await fetch(baseURL + '/manage/prefix-cache')).json()).files, 0);
  assert.match(await page.getByTestId('prefix-cache-size').innerText(), / in 0 snapshots$/);
  assert.equal(await card.getByRole('button', { name: 'Clear…' }).isDisabled(), true);
  assert.deepEqual(errors, []);
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
  await page.getByTestId('fit-verdict').waitFor({ timeout: START_MS });
  // One unit for sizes, and none of Metal's words off a Mac.
  const screen = await page.locator('.setup').innerText();
  assert.doesNotMatch(screen, /GiB/);
  if (process.platform !== 'darwin') assert.doesNotMatch(screen, /working set|this Mac\b/i);
  await shot(page, 'model');
  await page.context().close();
});

test('the GPU check says what it tests, runs petal doctor on the server, and its report survives a reload', async () => {
  const ctx = await browser.newContext({ viewport: { width: 1100, height: 760 } });
  await ctx.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: baseURL });
  const page = await ctx.newPage();
  await page.goto(baseURL + '/#/setup');
  const mac = process.platform === 'darwin' && process.arch === 'arm64';
  const card = page.getByTestId('doctor');
  // The name waits for the server's fit verdict, which says whether this is a Mac.
  await page.getByTestId('fit-verdict').waitFor({ timeout: START_MS });
  if (mac) {
    await card.getByRole('heading', { name: 'This Mac’s GPU' }).waitFor();
  } else {
    await card.getByRole('heading', { name: 'GPU kernels, in the simulator' }).waitFor();
    const about = await card.getByTestId('doctor-about').innerText();
    assert.match(about, /no Apple GPU/);
    assert.match(about, /does not test this machine’s hardware/);
    assert.equal(await card.getByText(/this Mac/).count(), 0, 'a check off a Mac speaks of a Mac');
  }
  await card.getByRole('button', { name: mac ? 'Check this Mac' : 'Check the kernels in the simulator' }).click();
  await page.getByRole('button', { name: 'Checking…' }).waitFor();
  // Every kernel compiled and tested in the sim, then the demo model: minutes on a loaded machine.
  const verdict = page.getByTestId('doctor-verdict');
  await verdict.waitFor({ timeout: 600_000 });
  const said = await verdict.innerText();
  if (!mac) {
    assert.match(said, /^All \d+ checks passed in the GPU simulator \(no GPU of this machine was tested\)$/);
    assert.doesNotMatch(said, /this machine's GPU|compiled every kernel on/);
  }
  const report = await page.getByTestId('doctor-report').innerText();
  assert.match(report, /^petal doctor, sim backend/);
  assert.match(report, /PASS compile attention\.metal\/attn_decode_f16kv \[600=256 601=8\]/);
  assert.match(report, /PASS model {3}demo model, GPU path against the CPU backend/);
  await shot(page, 'doctor');
  await page.getByRole('button', { name: 'Copy report' }).click();
  await page.getByRole('button', { name: 'Copied' }).waitFor();
  assert.equal((await page.evaluate(() => navigator.clipboard.readText())).trim(), report.trim());

  // A reload shows the same report and verdict without running the checks again.
  await page.reload();
  await page.getByTestId('doctor-verdict').filter({ hasText: said }).waitFor();
  assert.equal((await page.getByTestId('doctor-report').innerText()).trim(), report.trim());
  await page.getByTestId('doctor-when').filter({ hasText: /^Checked .* kept in this browser\.$/ }).waitFor();
  await page.getByTestId('doctor-verdict').scrollIntoViewIfNeeded();
  await shot(page, 'doctor-after-reload');
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

/**
 * What is wrong with the layout as it stands: elements that stick out of the viewport sideways
 * (text in pre blocks scrolls inside them and is left out), a page that scrolls sideways, children
 * of a row that overlap, and one-line status texts that wrapped or were cut.
 */
function layoutProblems(page) {
  return page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const problems = [];
    const name = (el) =>
      `${el.tagName.toLowerCase()}${el.id ? '#' + el.id : ''}${el.className && typeof el.className === 'string' ? '.' + el.className.trim().split(/\s+/).join('.') : ''} "${(el.textContent ?? '').trim().slice(0, 30)}"`;
    const shown = (el) => {
      const b = el.getBoundingClientRect();
      return b.width > 0 && b.height > 0 && getComputedStyle(el).visibility !== 'hidden';
    };
    if (document.documentElement.scrollWidth > vw) problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
    for (const el of document.querySelectorAll('body *')) {
      if (!shown(el) || el.closest('pre, .sr-only') || el.tagName === 'OPTION') continue;
      const b = el.getBoundingClientRect();
      if (b.left < -0.5 || b.right > vw + 0.5) problems.push(`${name(el)} spans ${b.left.toFixed(0)}..${b.right.toFixed(0)} of ${vw}`);
    }
    for (const row of document.querySelectorAll('.brand, .views, .controls, .meta, .buttons, .url')) {
      const kids = [...row.children].filter(shown).map((el) => [el, el.getBoundingClientRect()]);
      for (let i = 0; i < kids.length; i++) {
        for (let j = i + 1; j < kids.length; j++) {
          const [a, ra] = kids[i];
          const [b, rb] = kids[j];
          const w = Math.min(ra.right, rb.right) - Math.max(ra.left, rb.left);
          const h = Math.min(ra.bottom, rb.bottom) - Math.max(ra.top, rb.top);
          if (w > 0.5 && h > 0.5) problems.push(`${name(a)} overlaps ${name(b)}`);
        }
      }
    }
    for (const el of document.querySelectorAll('.state, .views button, .controls > *, .meta .part, .meta > span:not([data-testid]), .meta button')) {
      if (!shown(el)) continue;
      const st = getComputedStyle(el);
      const line = parseFloat(st.lineHeight) || parseFloat(st.fontSize) * 1.5;
      const box = parseFloat(st.paddingTop) + parseFloat(st.paddingBottom) + parseFloat(st.borderTopWidth) + parseFloat(st.borderBottomWidth);
      const h = el.getBoundingClientRect().height;
      if (h - box > 1.5 * line && h > parseFloat(st.minHeight || '0') + 1) problems.push(`${name(el)} wraps: ${h.toFixed(0)} px high`);
      if (el.scrollWidth > el.clientWidth + 1 && st.overflow !== 'visible') problems.push(`${name(el)} is cut: ${el.scrollWidth} > ${el.clientWidth}`);
    }
    return problems;
  });
}

/** Fails unless locator's element is shown wholly inside the viewport. */
async function assertInView(page, locator, what) {
  await locator.waitFor();
  const b = await locator.boundingBox();
  const vp = page.viewportSize();
  assert.ok(b, `${what} is not shown`);
  assert.ok(b.x >= 0 && b.y >= 0 && b.x + b.width <= vp.width + 0.5 && b.y + b.height <= vp.height + 0.5, `${what} lies outside the ${vp.width}x${vp.height} viewport: ${JSON.stringify(b)}`);
}

/** The keyboard hints a user can see. */
const visibleHints = (page) => page.locator('kbd').evaluateAll((els) => els.filter((e) => e.getBoundingClientRect().width > 0).length);

for (const [label, device] of [
  ['375', PHONE],
  ['1280', DESKTOP],
]) {
  test(`every screen is usable at ${label} px`, async () => {
    const { page, errors } = await newPage('light', device);
    const phone = device === PHONE;
    const check = async (screen) => {
      assert.deepEqual(await layoutProblems(page), [], `${screen} at ${label} px`);
      await shot(page, `${screen}-${label}`);
    };
    const nav = async (name) => {
      await page.getByRole('navigation').getByRole('button', { name: new RegExp(`^${name}`) }).click();
    };

    // Chat, empty and then with a reply; the composer and its controls in view.
    await page.getByRole('navigation').getByRole('button', { name: /New chat/ }).or(page.getByRole('button', { name: 'Chats' })).first().waitFor();
    await assertInView(page, page.getByLabel('Message'), 'the message box');
    await assertInView(page, page.getByRole('button', { name: 'Send' }), 'Send');
    // Keyboard hints are for keyboards: none on a touch screen, some on a desktop.
    if (phone) assert.equal(await visibleHints(page), 0, 'keyboard hints show on a touch screen');
    else assert.ok((await visibleHints(page)) > 0, 'no keyboard hints on the desktop');
    await check('chat-empty');
    const prompt = page.getByLabel('Message');
    await prompt.fill(`Hello from ${label} px`);
    await page.getByRole('button', { name: 'Send' }).click();
    await page.getByTestId('stats').last().waitFor({ timeout: REPLY_MS });
    await assertInView(page, page.getByTestId('stats').last(), 'the reply statistics');
    await check('chat-reply');

    // The conversation list and the theme switch are reachable: behind the menu on a phone.
    if (phone) {
      assert.equal(await page.getByRole('button', { name: 'Light / dark' }).isVisible(), false, 'the menu is open before it was asked for');
      await page.getByRole('button', { name: 'Chats' }).click();
    }
    const conv = page.getByRole('button', { name: `Hello from ${label} px`, exact: true });
    await assertInView(page, conv, 'the conversation in the list');
    const theme = page.getByRole('button', { name: 'Light / dark' });
    await assertInView(page, theme, 'the theme switch');
    await check('conversations');
    await theme.click();
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'dark');
    if (phone) {
      await conv.click();
      assert.equal(await theme.isVisible(), false, 'choosing a conversation leaves the menu open');
      await page.getByRole('button', { name: 'Chats' }).click();
      await theme.click();
    } else {
      await theme.click();
    }
    assert.equal(await page.evaluate(() => document.documentElement.dataset.theme), 'light');
    if (phone) await page.getByRole('button', { name: 'Close' }).click();

    // The Model screen: what runs here, the download's size before the click.
    await nav('Model');
    await page.getByTestId('fit-verdict').waitFor();
    const download = page.getByRole('button', { name: /^Download( anyway)? \(.*GB\)$/ });
    await assertInView(page, page.getByTestId('fit-verdict'), 'the memory verdict');
    await check('model');
    await download.scrollIntoViewIfNeeded();
    await assertInView(page, download, 'Download with its size');

    await nav('Settings');
    await page.getByRole('heading', { name: 'Settings' }).waitFor();
    // Below what is in force now: reached by scrolling, and then wholly in view.
    await page.getByLabel('Sampling preset').scrollIntoViewIfNeeded();
    await assertInView(page, page.getByLabel('Sampling preset'), 'the preset picker');
    await check('settings');

    await nav('Endpoint');
    await page.getByTestId('endpoint-url').waitFor();
    await assertInView(page, page.getByRole('button', { name: 'Copy URL' }), 'Copy URL');
    await check('endpoint');
    assert.deepEqual(errors, []);
    await page.context().close();
  });
}

test('the Model screen gives one verdict on the 35B model here, with the CPU speed measured on this machine', async () => {
  const { page } = await newPage();
  await page.keyboard.press('Control+2');
  const card = page.getByTestId('fit');
  const verdict = card.getByTestId('fit-verdict');
  await verdict.waitFor({ timeout: START_MS });
  const fit = await (await fetch(baseURL + '/manage/fit?context=32768')).json();
  assert.equal(fit.backend, process.platform === 'darwin' && process.arch === 'arm64' ? 'metal' : 'cpu');
  // One verdict: never a second, contrary one beside it.
  assert.equal(await page.locator('.setup .verdict').count(), 1 + (await page.getByTestId('doctor-verdict').count()));
  const level = await verdict.getAttribute('data-level');
  const said = await verdict.innerText();
  const download = page.getByRole('button', { name: /^Download( anyway)? \(/ });
  if (fit.backend === 'cpu') {
    // Measured here, once, and kept in the cache folder for the next start.
    assert.ok(fit.cpu_decode, `no CPU figure: ${fit.cpu_decode_error}`);
    const kept = JSON.parse(readFileSync(join(cacheDir, 'petal', 'cpu-speed.json'), 'utf8'));
    assert.equal(kept.read_bytes_per_second, fit.cpu_decode.read_bytes_per_second);
    assert.equal(kept.cores > 0 && kept.cpu.length > 0, true);
    // Shown as the screen rounds it: two decimals below 1 token/s, one above.
    const tps = fit.cpu_decode.tokens_per_second;
    assert.ok(said.includes(`about ${tps < 1 ? tps.toFixed(2) : tps.toFixed(1)} tokens per second`), `${said} does not give the server's ${tps}`);
    if (tps < 5) {
      assert.equal(level, 'no');
      assert.match(said, /^Too slow to chat with here/);
      assert.doesNotMatch(said, /Fits/);
      // Not recommended: offered, but not as the main button.
      assert.match(await download.innerText(), /^Download anyway/);
      assert.equal(await download.evaluate((b) => b.classList.contains('primary')), false);
    } else {
      assert.match(said, /^Runs here on the CPU at about/);
    }
    await card.getByText('How the speed was measured').click();
    await card.getByText(fit.cpu_decode.how.slice(0, 60)).waitFor();
    assert.ok(fit.cpu_decode.how.includes(join(cacheDir, 'petal', 'cpu-speed.json')));
  }
  await shot(page, 'model-verdict');
  // The served demo's context belongs to the Running now card, not to the 35B's.
  const demo = (await (await fetch(baseURL + '/v1/models')).json()).data[0];
  const name = page.getByTestId('model-name');
  await name.filter({ hasText: 'Demo model' }).waitFor();
  assert.equal(await name.locator('code').innerText(), demo.id, 'the id API clients send is not beside the name');
  const ctx = `${demo.context_length / 1024}K tokens`;
  await page.getByRole('heading', { name: `${fit.model} on this machine` }).waitFor();
  const running = page.locator('.card').filter({ has: page.getByTestId('model-name') });
  await running.getByText(ctx, { exact: true }).waitFor();
  assert.deepEqual(
    (await card.locator('dt').allInnerTexts()).filter((t) => ['Model', 'Context', 'State', 'Backend'].includes(t.trim())),
    [],
    "the 35B card shows the served model's facts",
  );
  assert.match(await download.innerText(), new RegExp(`\\(${(fit.download_bytes / 1e9).toFixed(1)} GB\\)$`));
  await page.getByText(/Not downloaded · about [\d.]+ GB/).waitFor();
  await page.context().close();
});

// Last: it replaces the served demo with the downloaded model, which the tests above do not expect.
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
      // Tensor by tensor with Buffer.equals: a deepEqual over the whole
      // shard builds a diff of megabytes when it fails, and ran Node out of
      // memory instead of naming the tensor.
      const original = shard(want).tensors;
      assert.deepEqual(Object.keys(stored.tensors).sort(), Object.keys(original).sort(), name);
      for (const [t, w] of Object.entries(original)) {
        const g = stored.tensors[t];
        assert.equal(g.dtype, w.dtype, `${name}: ${t}`);
        assert.deepEqual(g.shape, w.shape, `${name}: ${t}`);
        assert.ok(g.bytes.equals(w.bytes), `${name}: ${t}: stored bytes differ`);
      }
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
