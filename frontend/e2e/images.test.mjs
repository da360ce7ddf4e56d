// End-to-end tests of images in the chat window (issue 34): attached by the
// file picker, a paste or a drop, shown as thumbnails, removed before
// sending, sent as image_url parts and shown in the sent message, at a
// phone's width and a laptop's; and refused, with the reason shown, for a
// text-only model. The server is `petal serve` on the demo model, which is
// text-only: the cases of a model that reads images answer /v1/models and
// the chat route in the page. Run by scripts/e2e.sh, as app.test.mjs.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { chromium } from 'playwright-core';

const PETAL = process.env.PETAL_BIN;
const MODEL = process.env.PETAL_MODEL ?? resolve('..', 'models', 'demo');
const ARTIFACTS = process.env.E2E_ARTIFACTS ?? resolve('e2e', 'artifacts');
const CHROMIUM = process.env.CHROMIUM ?? '/usr/bin/chromium';
/** How long the server may take to start. */
const START_MS = 30_000;

const PHONE = { viewport: { width: 375, height: 740 }, isMobile: true, hasTouch: true, deviceScaleFactor: 2 };
const DESKTOP = { viewport: { width: 1280, height: 800 } };

/** A 2x2 PNG, red, green, blue and white. */
const PNG = Buffer.from(
  'iVBORw0KGgoAAAANSUhEUgAAAAIAAAACCAIAAAD91JpzAAAAEklEQVR4nGP4z8DAAMIM/4EAAB/uBfsL2WiLAAAAAElFTkSuQmCC',
  'base64',
);

let server;
let baseURL;
let browser;

function startServer() {
  const dir = mkdtempSync(join(tmpdir(), 'petal-e2e-images-'));
  server = spawn(PETAL, ['serve', '--model', MODEL, '--addr', '127.0.0.1:0', '--settings', join(dir, 'settings.json')], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, XDG_CACHE_HOME: join(dir, 'cache'), PETAL_MODELS: join(dir, 'models') },
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
  baseURL = await startServer();
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking', '--disable-sync'],
  });
});

after(async () => {
  await browser?.close();
  server?.kill('SIGTERM');
});

/**
 * A page on the server; with vision, /v1/models says the model reads images
 * and the chat route answers "A cat." in the page, keeping each request.
 */
async function newPage(device, { vision }) {
  const ctx = await browser.newContext({ ...device });
  const page = await ctx.newPage();
  const errors = [];
  const asked = [];
  page.on('pageerror', (e) => errors.push(e));
  page.on('console', (m) => m.type() === 'error' && errors.push(new Error(m.text())));
  if (vision) {
    await page.route('**/v1/models', async (route) => {
      const res = await route.fetch();
      const list = await res.json();
      for (const m of list.data) Object.assign(m, { type: 'vlm', capabilities: { ...m.capabilities, vision: true } });
      await route.fulfill({ response: res, json: list });
    });
    await page.route('**/v1/tokenize', (route) => route.fulfill({ json: { tokens: [], count: 90, context_length: 4096 } }));
    await page.route('**/v1/chat/completions', async (route) => {
      const req = route.request().postDataJSON();
      asked.push(req);
      const chunk = (delta, finish = null) =>
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: req.model, choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      const usage = { prompt_tokens: 90, completion_tokens: 3, total_tokens: 93 };
      const body =
        chunk({ role: 'assistant', content: '' }) +
        chunk({ content: 'A cat.' }) +
        chunk({}, 'stop') +
        `data: ${JSON.stringify({ id: 'c', object: 'chat.completion.chunk', created: 0, model: req.model, choices: [], usage })}\n\n` +
        'data: [DONE]\n\n';
      await route.fulfill({ status: 200, headers: { 'Content-Type': 'text/event-stream' }, body });
    });
  }
  await page.goto(baseURL + '/');
  await page.getByRole('status').filter({ hasText: 'Ready' }).waitFor({ timeout: START_MS });
  return { page, errors, asked };
}

/** Hands the page an image file as a paste into the message box or a drop on the composer. */
function handOver(page, how, name) {
  return page.evaluate(
    ({ how, name, bytes }) => {
      const dt = new DataTransfer();
      dt.items.add(new File([new Uint8Array(bytes)], name, { type: 'image/png' }));
      if (how === 'paste') {
        document.getElementById('prompt').dispatchEvent(new ClipboardEvent('paste', { clipboardData: dt, bubbles: true, cancelable: true }));
      } else {
        const composer = document.querySelector('form.composer');
        composer.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }));
        composer.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }));
      }
    },
    { how, name, bytes: [...PNG] },
  );
}

/** Fails when the page scrolls sideways or an element sticks out of the viewport. */
async function assertFits(page, what) {
  const out = await page.evaluate(() => {
    const vw = document.documentElement.clientWidth;
    const bad = [];
    if (document.documentElement.scrollWidth > vw) bad.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} > ${vw}`);
    for (const el of document.querySelectorAll('.composer *, .msg *')) {
      const b = el.getBoundingClientRect();
      if (b.width > 0 && (b.left < -0.5 || b.right > vw + 0.5)) bad.push(`${el.tagName.toLowerCase()}.${el.className} spans ${b.left}..${b.right}`);
    }
    return bad;
  });
  assert.deepEqual(out, [], what);
}

const shot = (page, name) => page.screenshot({ path: join(ARTIFACTS, `${name}.png`) });

for (const [label, device] of [
  ['375', PHONE],
  ['1280', DESKTOP],
]) {
  test(`images are attached by picker, paste and drop, removed, and sent with the message at ${label} px`, async () => {
    const { page, errors, asked } = await newPage(device, { vision: true });
    const attached = page.getByRole('list', { name: 'Images to send' }).getByRole('img');
    assert.equal(await page.getByTestId('chat-vision').innerText(), 'It reads images too.');
    assert.equal(await page.getByRole('button', { name: 'Image' }).getAttribute('aria-disabled'), 'false');

    await page.getByTestId('image-picker').setInputFiles({ name: 'picked.png', mimeType: 'image/png', buffer: PNG });
    await attached.first().waitFor();
    await handOver(page, 'paste', 'pasted.png');
    await handOver(page, 'drop', 'dropped.png');
    await page.waitForFunction(() => document.querySelectorAll('[data-testid="attached"] img').length === 3);
    assert.deepEqual(await attached.evaluateAll((els) => els.map((e) => e.alt)), [
      'Image 1: picked.png',
      'Image 2: pasted.png',
      'Image 3: dropped.png',
    ]);
    // Each thumbnail shows the picture: decoded, with a size.
    assert.ok(await attached.evaluateAll((els) => els.every((e) => e.complete && e.naturalWidth === 2)), 'a thumbnail is not drawn');
    await assertFits(page, `the composer with three images at ${label} px`);
    await shot(page, `images-attached-${label}`);

    await page.getByRole('button', { name: 'Remove image 2' }).click();
    assert.deepEqual(await attached.evaluateAll((els) => els.map((e) => e.alt)), ['Image 1: picked.png', 'Image 2: dropped.png']);

    const prompt = page.getByLabel('Message');
    await prompt.fill('What is in these?');
    await page.getByRole('button', { name: 'Send' }).click();
    await page.getByTestId('stats').waitFor();
    const url = 'data:image/png;base64,' + PNG.toString('base64');
    assert.deepEqual(asked.at(-1).messages.at(-1).content, [
      { type: 'image_url', image_url: { url } },
      { type: 'image_url', image_url: { url } },
      { type: 'text', text: 'What is in these?' },
    ]);
    assert.equal(await page.getByRole('list', { name: 'Images to send' }).count(), 0, 'the composer kept the sent images');
    const sent = page.getByRole('article', { name: 'You' }).getByRole('list', { name: 'Images sent' }).getByRole('img');
    assert.equal(await sent.count(), 2);
    assert.ok(await sent.evaluateAll((els) => els.every((e) => e.complete && e.naturalWidth === 2)), 'a sent image is not drawn');
    await assertFits(page, `the sent message at ${label} px`);
    await shot(page, `images-sent-${label}`);

    // An image alone is a message too.
    await handOver(page, 'paste', 'alone.png');
    await attached.first().waitFor();
    await page.getByRole('button', { name: 'Send' }).click();
    await page.getByTestId('stats').nth(1).waitFor();
    assert.deepEqual(asked.at(-1).messages.at(-1).content, [
      { type: 'image_url', image_url: { url } },
      { type: 'text', text: '' },
    ]);
    assert.deepEqual(errors, []);
    await page.context().close();
  });

  test(`a text-only model takes no image and says why at ${label} px`, async () => {
    const { page, errors } = await newPage(device, { vision: false });
    assert.equal(await page.getByTestId('chat-vision').innerText(), 'It reads text only.');
    const button = page.getByRole('button', { name: 'Image' });
    assert.equal(await button.getAttribute('aria-disabled'), 'true');
    const chooser = page.waitForEvent('filechooser', { timeout: 1000 }).then(
      () => true,
      () => false,
    );
    // aria-disabled, which Playwright takes for disabled: a person can still click it.
    await button.click({ force: true });
    const note = page.getByTestId('attach-note');
    await note.waitFor();
    assert.match(await note.innerText(), /is text-only: it cannot read images/);
    assert.equal(await chooser, false, 'the file picker opened for a text-only model');
    await handOver(page, 'paste', 'pasted.png');
    await handOver(page, 'drop', 'dropped.png');
    assert.equal(await page.getByRole('list', { name: 'Images to send' }).count(), 0, 'an image was attached for a text-only model');
    await assertFits(page, `the refusal at ${label} px`);
    await shot(page, `images-text-only-${label}`);
    assert.deepEqual(errors, []);
    await page.context().close();
  });
}
