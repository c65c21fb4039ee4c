// The order writer's live view of a campaign (/view/ID on its admin listener, the token in the
// URL's fragment) in Chromium: an open campaign, a sold-out one and one paused by
// `order-writer campaign pause` mid-test, each screenshotted (live-open, live-sold, live-paused)
// once the page shows the state; the page refreshes itself, no reload. Run by e2e/browser.sh.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { launch } from './launch.mjs';

const { WRITER_ADMIN, ORDER_WRITER, WRITER_CONF, RUN_ID, SHOTS, SECKILL_ADMIN_TOKEN } = process.env;

const campaign = (...args) =>
  execFileSync(ORDER_WRITER, ['--conf', WRITER_CONF, 'campaign', ...args], { encoding: 'utf8' });

async function shows(page, id, state, shot) {
  await page.goto(`${WRITER_ADMIN}/view/${id}#token=${SECKILL_ADMIN_TOKEN}`);
  await page.waitForFunction((s) => document.body.dataset.state === s, state, { timeout: 10000 });
  await page.screenshot({ path: join(SHOTS, `${shot}.png`), fullPage: true });
  return page.evaluate(() => ({ left: document.getElementById('left').textContent, error: document.getElementById('error').textContent }));
}

test('the live view shows an open, a sold-out and a paused campaign, and refuses without the token', async () => {
  const browser = await launch();
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 860 } });
    const open = await shows(page, `${RUN_ID}live`, 'OPEN', 'live-open');
    assert.equal(open.left, '10');
    assert.equal(open.error, '');
    const sold = await shows(page, `${RUN_ID}sold`, 'SOLD OUT', 'live-sold');
    assert.equal(sold.left, '0');
    // The open page turns PAUSED by itself (it asks every second; no reload).
    await page.goto(`${WRITER_ADMIN}/view/${RUN_ID}live#token=${SECKILL_ADMIN_TOKEN}`);
    await page.waitForFunction(() => document.body.dataset.state === 'OPEN', null, { timeout: 10000 });
    const out = campaign('pause', `${RUN_ID}live`);
    assert.match(out, /OPEN → PAUSED/);
    assert.match(out, /every gateway \(1\) shows version/);
    await page.waitForFunction(() => document.body.dataset.state === 'PAUSED', null, { timeout: 5000 });
    await page.screenshot({ path: join(SHOTS, 'live-paused.png'), fullPage: true });
    const rows = await page.locator('#gateways tr').count();
    assert.equal(rows, 2, 'one gateway in the table, under its header');
    const other = await browser.newPage();
    await other.goto(`${WRITER_ADMIN}/view/${RUN_ID}live#token=wrong-token-0123456789`);
    await other.waitForFunction(() => document.getElementById('error').textContent.includes('401'), null, { timeout: 5000 });
  } finally {
    await browser.close();
  }
});
