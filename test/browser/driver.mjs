// A small remote control for a real Chromium, for leasehold's end-to-end
// tests: it reads one JSON command a line on standard input and answers
// each with one JSON line on standard output, {"ok":true,"value":...} or
// {"ok":false,"error":"..."}. The Go test owns the server and the
// assertions; this only drives the page.
//
// Environment: LEASEHOLD_CHROMIUM, the browser to launch (default
// chromium on the PATH).
import { accessSync, constants } from 'node:fs';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

function onPath(name) {
  for (const dir of (process.env.PATH || '').split(':')) {
    try {
      accessSync(join(dir, name), constants.X_OK);
      return join(dir, name);
    } catch (_) {
      // not here
    }
  }
  throw new Error(`no ${name} on the PATH; set LEASEHOLD_CHROMIUM`);
}

const browser = await chromium.launch({
  executablePath: process.env.LEASEHOLD_CHROMIUM || onPath('chromium'),
  // The tests run as root in a container, where Chromium's sandbox cannot start.
  args: ['--no-sandbox'],
});
// The server's certificate is signed by the data directory's own CA.
const context = await browser.newContext({ ignoreHTTPSErrors: true, viewport: { width: 1280, height: 900 } });
const page = await context.newPage();
const problems = [];
page.on('pageerror', (err) => problems.push(`page error: ${err.message}`));
page.on('console', (msg) => {
  if (msg.type() === 'error') problems.push(`console error: ${msg.text()}`);
});

const waitOptions = (c) => ({ timeout: c.timeoutMs || 30000, polling: 100 });

const commands = {
  goto: async (c) => (await page.goto(c.url, { waitUntil: 'load' })).status(),
  reload: async () => (await page.reload({ waitUntil: 'load' })).status(),
  fill: (c) => page.fill(c.selector, c.value),
  click: (c) => page.click(c.selector),
  text: (c) => page.innerText(c.selector),
  visible: (c) => page.isVisible(c.selector),
  count: (c) => page.locator(c.selector).count(),
  // waitText waits until the element's text contains c.text (or, with
  // c.absent, no longer does).
  waitText: (c) => page.waitForFunction(
    ({ selector, text, absent }) => {
      const el = document.querySelector(selector);
      const has = !!el && el.textContent.includes(text);
      return absent ? !has : has;
    },
    { selector: c.selector, text: c.text, absent: !!c.absent },
    waitOptions(c),
  ).then(() => true),
  // rowText returns the text of the cells of the table row whose first
  // cell is c.name, or null.
  rowText: (c) => page.evaluate(({ table, name }) => {
    for (const tr of document.querySelectorAll(`${table} tbody tr`)) {
      const cells = [...tr.cells].map((td) => td.textContent);
      if (cells[0] === name) return cells;
    }
    return null;
  }, { table: c.table, name: c.name }),
  // webSocketWatch opens a watch of c.path over a WebSocket from the page,
  // with c.token as a subprotocol as browsers send it, and returns its
  // first message.
  webSocketWatch: (c) => page.evaluate(({ path, token }) => new Promise((resolve, reject) => {
    const encoded = btoa(token).replace(/\+/g, '-').replace(/\//g, '_').replace(/=+$/, '');
    const ws = new WebSocket(location.origin.replace(/^http/, 'ws') + path,
      [`base64url.bearer.authorization.k8s.io.${encoded}`, 'base64.binary.k8s.io']);
    const timer = setTimeout(() => { ws.close(); reject(new Error('no message within 20 s')); }, 20000);
    ws.onmessage = (m) => {
      clearTimeout(timer);
      ws.close();
      resolve({ protocol: ws.protocol, text: typeof m.data === 'string', data: String(m.data) });
    };
    ws.onerror = () => { clearTimeout(timer); reject(new Error('the WebSocket failed')); };
  }), { path: c.path, token: c.token }),
  // fetchWithToken fetches c.url from the page with c.token as its bearer
  // token (a cross-origin one needs the server's CORS) and returns the
  // status, or the browser's error.
  fetchWithToken: (c) => page.evaluate(async ({ url, token }) => {
    try {
      const r = await fetch(url, { headers: { Authorization: `Bearer ${token}` } });
      return { status: r.status, body: (await r.text()).slice(0, 300) };
    } catch (err) {
      return { error: String(err) };
    }
  }, { url: c.url, token: c.token }),
  // failNext answers the next c.times requests to URLs matching c.url (a
  // glob) with c.status and a Status body, as a proxy in front of a
  // restarting server would.
  failNext: (c) => page.route(c.url, (route) => route.fulfill({
    status: c.status,
    contentType: 'application/json',
    body: JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', message: 'injected by the test', reason: 'ServiceUnavailable', code: c.status }),
  }), { times: c.times || 1 }),
  // clockAhead sets the page's clock c.ms ahead of the real one, running,
  // from the next load on.
  clockAhead: async (c) => {
    await page.clock.install({ time: Date.now() + c.ms });
    await page.clock.resume();
  },
  viewport: (c) => page.setViewportSize({ width: c.width, height: c.height }),
  // overflow returns how far the page is wider than the window, in CSS
  // pixels: 0 when nothing scrolls the page sideways.
  overflow: () => page.evaluate(() => document.documentElement.scrollWidth - document.documentElement.clientWidth),
  sessionToken: () => page.evaluate(() => sessionStorage.getItem('leasehold.token')),
  screenshot: (c) => page.screenshot({ path: c.path, fullPage: c.fullPage !== false }).then(() => c.path),
  problems: () => problems.splice(0),
};

const lines = createInterface({ input: process.stdin });
for await (const line of lines) {
  if (!line.trim()) continue;
  let answer;
  try {
    const c = JSON.parse(line);
    const run = commands[c.op];
    if (!run) throw new Error(`unknown op ${JSON.stringify(c.op)}`);
    const value = await run(c);
    answer = { ok: true, value: value === undefined ? null : value };
  } catch (err) {
    answer = { ok: false, error: String(err && err.message ? err.message : err) };
  }
  process.stdout.write(JSON.stringify(answer) + '\n');
}
await browser.close();
