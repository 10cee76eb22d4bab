/**
 * frontend: what the frontend kit costs. The playground's page weight (gzipped, as served compressed by a CDN or
 * proxy) and its first render in Debian's Chromium on localhost (navigation start to the frame that shows the tools,
 * as the page marks it, the key already in sessionStorage, a fresh browser context each time); and the typed client's overhead per call: item
 * reads through `client.item` against the same requests made with a bare `fetch`, in alternating rounds.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { gzipSync } from 'node:zlib';
import { launchBrowser } from '../../../test/support/chromium.mjs';
import { DIST, ROOT, createBenchEnv, createUserWithKey, fmtMs, log, percentile, record } from '../lib.mjs';

const RENDERS = 15;
const CALLS = 400;
const ROUNDS = 6;
const WARMUP_ROUNDS = 3;
const MARK_TIMEOUT_MS = 10_000;

export const description = `playground weight and first render (p50 of ${RENDERS}); client.item vs bare fetch (${ROUNDS} x ${CALLS} calls)`;

export async function run() {
  const gzipped = ['app.js', 'app.css'].map(
    (file) => gzipSync(readFileSync(join(DIST, 'playground', file)), { level: 9 }).length,
  );
  record(
    'frontend',
    'playground script + stylesheet, gzipped',
    gzipped[0] + gzipped[1],
    `${((gzipped[0] + gzipped[1]) / 1024).toFixed(1)} KB (${(gzipped[0] / 1024).toFixed(1)} + ${(gzipped[1] / 1024).toFixed(1)})`,
    {
      op: '<=',
      value: 100 * 1024,
      text: '<= 100 KB',
    },
  );

  const env = await createBenchEnv();
  const browser = await launchBrowser();
  try {
    const service = await env.startService();
    const { key } = await createUserWithKey(env.databaseUrl);

    const renders = [];
    const htmlArrived = [];
    for (let i = 0; i < RENDERS; i++) {
      const context = await browser.newContext();
      await context.addInitScript(`sessionStorage.setItem('igs.apiKey', ${JSON.stringify(key)});`);
      const page = await context.newPage();
      await page.goto(`${service.baseUrl}/playground/`);
      await page.waitForSelector('#tools input[name="tool"]');
      renders.push(await page.evaluate(toolsShownMark, MARK_TIMEOUT_MS));
      htmlArrived.push(await page.evaluate(() => performance.getEntriesByType('navigation')[0].responseEnd));
      await context.close();
    }
    renders.sort((a, b) => a - b);
    htmlArrived.sort((a, b) => a - b);
    // The baseline: the same navigation up to the page's own HTML, which costs the browser, not the playground.
    record(
      'frontend',
      'playground first render p50: navigation start to the tools shown / to the HTML received',
      percentile(renders, 50),
      `${fmtMs(percentile(renders, 50))} / ${fmtMs(percentile(htmlArrived, 50))} (tools shown: min ${fmtMs(renders[0])}, max ${fmtMs(renders.at(-1))})`,
    );

    const { createClient } = await import(pathToFileURL(join(ROOT, 'client/dist/index.js')).href);
    const client = createClient({ baseUrl: service.baseUrl, apiKey: key });
    const created = await fetch(`${service.baseUrl}/generation/generate_image_v2/`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}` },
      body: (() => {
        const form = new FormData();
        form.append('tool', 'default');
        form.append(
          'image',
          new Blob([readFileSync(join(ROOT, 'docs/examples/default/input-image.jpg'))]),
          'image.jpg',
        );
        return form;
      })(),
    });
    const { history_item_id: id } = await created.json();
    const url = `${service.baseUrl}/user/generation-history/${id}`;
    const bare = async () => {
      const response = await fetch(url, { headers: { Authorization: `Bearer ${key}` } });
      if (!response.ok) throw new Error(`GET answered ${response.status}`);
      return response.json();
    };
    const viaClient = () => client.item(id);
    const time = async (call) => {
      const started = performance.now();
      for (let i = 0; i < CALLS; i++) await call();
      return CALLS / ((performance.now() - started) / 1000);
    };
    for (let round = 0; round < WARMUP_ROUNDS; round++) {
      await time(bare);
      await time(viaClient);
    }
    const bareRates = [];
    const clientRates = [];
    for (let round = 0; round < ROUNDS; round++) {
      bareRates.push(await time(bare));
      clientRates.push(await time(viaClient));
    }
    const best = (rates) => Math.max(...rates);
    const ratio = best(clientRates) / best(bareRates);
    log(
      `  bare fetch calls/s: ${bareRates.map((r) => r.toFixed(0)).join(', ')}; client: ${clientRates.map((r) => r.toFixed(0)).join(', ')}`,
    );
    record(
      'frontend',
      'client.item / bare fetch, calls/s (sequential, best round)',
      ratio,
      `${best(clientRates).toFixed(0)} / ${best(bareRates).toFixed(0)} = ${ratio.toFixed(2)}`,
      {
        op: '>=',
        value: 0.9,
        text: '>= 0.9',
      },
    );
  } finally {
    await browser.close();
    await env.dispose();
  }
}

/**
 * Runs in the page: the start time of the page's own mark of the frame that first showed the tools. A function (sent
 * as one, never compiled from a string), so the playground's Content-Security-Policy, which has no 'unsafe-eval',
 * allows it; Playwright's waitForFunction evaluates its predicate in the page and is refused.
 */
/* global PerformanceObserver -- a browser's, where this runs */
function toolsShownMark(timeoutMs) {
  const name = 'igs:tools-shown';
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ${name} mark within ${timeoutMs} ms`)), timeoutMs);
    const found = (entry) => {
      clearTimeout(timer);
      observer.disconnect();
      resolve(entry.startTime);
    };
    const observer = new PerformanceObserver((list) => {
      const entry = list.getEntriesByName(name)[0];
      if (entry) found(entry);
    });
    observer.observe({ type: 'mark' });
    const entry = performance.getEntriesByName(name)[0];
    if (entry) found(entry);
  });
}
