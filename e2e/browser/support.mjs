// What the browser tests share: the stack's addresses (from e2e/browser.sh), Debian's Chromium
// launched by playwright-core, signing in through the demo's stand-in login, the database and
// screenshots.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { launch } from './launch.mjs';

function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the browser tests with bash e2e/browser.sh`);
  return v;
}

export const BASE = need('BASE_URL');
export const RUN_ID = need('RUN_ID');
export const OPEN_AT_MS = Number(need('OPEN_AT_MS'));
export const PREQ_AT_MS = Number(need('PREQ_AT_MS'));
export const DRAW_AT_MS = Number(need('DRAW_AT_MS'));
export const DB_URL = need('DB_URL');
export const SHOTS = need('SHOTS');
export const REPORT_HTML = process.env.REPORT_HTML || '';
export const SALE_REPORT_HTML = process.env.SALE_REPORT_HTML || '';
export { launch };
export const CAMPAIGN = {
  open: `${RUN_ID}open`, sold: `${RUN_ID}sold`, crowd: `${RUN_ID}crowd`, room: `${RUN_ID}room`, preq: `${RUN_ID}preq`,
  draw: `${RUN_ID}draw`,
};

mkdirSync(SHOTS, { recursive: true });

// A page of a new context signed in as `user` (the demo's stand-in login sets the cookie and
// sends the browser to the campaign's page). `skewMs`: the device's clock that far off.
export async function buyer(browser, { user, campaign, locale = 'en-GB', width = 800, height = 900, skewMs = 0 }) {
  const context = await browser.newContext({ locale, viewport: { width, height } });
  if (skewMs) {
    await context.addInitScript((skew) => {
      const RealDate = Date;
      class DeviceDate extends RealDate {
        constructor(...args) {
          if (args.length === 0) super(RealDate.now() + skew);
          else super(...args);
        }
        static now() {
          return RealDate.now() + skew;
        }
      }
      globalThis.Date = DeviceDate;
    }, skewMs);
  }
  const page = await context.newPage();
  const next = `/seckill/${campaign}/`;
  await page.goto(`${BASE}/login?user=${encodeURIComponent(user)}&next=${encodeURIComponent(next)}`);
  await page.waitForFunction(() => document.body.dataset.state !== undefined, null, { timeout: 30000 });
  return page;
}

export function sql(query) {
  return execFileSync('psql', [DB_URL, '-tAc', query], { encoding: 'utf8' }).trim();
}

export async function shot(page, name) {
  await page.screenshot({ path: join(SHOTS, `${name}.png`), fullPage: true });
}

// Leading zero bits of SHA-256(challenge ":" answer), as the gateway checks it.
export function zeroBits(challenge, answer) {
  const d = createHash('sha256').update(`${challenge}:${answer}`).digest();
  let bits = 0;
  for (const byte of d) {
    if (byte === 0) {
      bits += 8;
      continue;
    }
    return bits + Math.clz32(byte) - 24;
  }
  return bits;
}

// The state the page says it is in, and the answer code it shows.
export async function state(page) {
  return page.evaluate(() => ({
    state: document.body.dataset.state,
    code: document.getElementById('status').dataset.code || '',
    text: document.getElementById('status').textContent,
    disabled: document.getElementById('buy').disabled,
  }));
}

// Waits until the page has shown its final answer (done, or a retry offered).
export async function settled(page, timeout = 90000) {
  await page.waitForFunction(() => ['done', 'retry'].includes(document.body.dataset.state), null, { timeout });
  return state(page);
}
