// The buyer's page through a campaign's waiting room, in Debian's Chromium against the real
// gateway, order writer and database (started by e2e/browser.sh): the room admits one buyer a
// second, three pages click at once; each shows WAITING with its position, the number ahead and
// the ETA, presents its ticket again by itself, solves the work once its turn is due, and gets
// its order; the database agrees.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CAMPAIGN, buyer, launch, settled, shot, sql, zeroBits } from './support.mjs';

let browser;
before(async () => {
  browser = await launch();
});
after(async () => {
  await browser?.close();
});

// Records on `page` every token and captcha exchange (request headers and body, answer) and
// every WAITING the status region showed (its text and fields), before the click.
async function watch(page) {
  const seen = { tokens: [], captchas: [] };
  page.on('response', async (r) => {
    const url = r.url();
    if (!url.endsWith('/token') && !url.endsWith('/captcha')) return;
    const req = r.request();
    const entry = {
      at: Date.now(), headers: req.headers(), body: req.postData() ? JSON.parse(req.postData()) : null,
      answer: await r.json().catch(() => ({})), retryAfter: r.headers()['retry-after'],
    };
    (url.endsWith('/token') ? seen.tokens : seen.captchas).push(entry);
  });
  await page.evaluate(() => {
    window.shown = [];
    const box = document.getElementById('status');
    new MutationObserver(() => {
      if (box.dataset.code !== 'WAITING') return;
      const field = (k) => box.querySelector(`[data-field="${k}"]`)?.textContent;
      window.shown.push({ text: box.textContent, position: field('position'), ahead: field('ahead'), eta: field('eta') });
    }).observe(box, { childList: true, subtree: true, characterData: true });
  });
  return seen;
}

test('three pages in a room admitting 1/s: each waits with its position, then is admitted and gets its order', { timeout: 120000 }, async () => {
  const users = ['room-1', 'room-2', 'room-3'];
  const pages = [];
  for (const [i, user] of users.entries()) {
    pages.push(await buyer(browser, { user, campaign: CAMPAIGN.room, locale: i === 1 ? 'zh-CN' : 'en-GB' }));
  }
  await Promise.all(pages.map((p) => p.waitForFunction(() => document.body.dataset.state === 'open')));
  const seen = await Promise.all(pages.map(watch));
  // The first two pages' first presentation of their ticket is held until their waiting state
  // is on the screen (it is admitted later for it: its session lasts).
  let release;
  const held = new Promise((resolve) => {
    release = resolve;
  });
  for (const page of pages.slice(0, 2)) {
    await page.route('**/token', async (route) => {
      if (route.request().headers()['x-queue-ticket']) await held;
      await route.continue();
    });
  }
  await Promise.all(pages.map((p) => p.evaluate(() => document.getElementById('buy').click())));
  for (const [i, name] of [[0, 'room-waiting-en'], [1, 'room-waiting-zh']]) {
    await pages[i].waitForFunction(() => document.body.dataset.state === 'waiting', null, { timeout: 30000 });
    await shot(pages[i], name);
  }
  release();
  const results = await Promise.all(pages.map((p) => settled(p, 90000)));
  const positions = [];
  for (const [i, page] of pages.entries()) {
    const s = results[i];
    const who = users[i];
    assert.equal(s.code, 'SUCCESS', `${who}: ${s.text}`);
    const { tokens, captchas } = seen[i];
    // The first token request had no work (the page knew the room was on) and was told to wait.
    const first = tokens[0];
    assert.deepEqual(first.body, {}, `${who}: no work before its turn`);
    assert.equal(first.headers['x-queue-ticket'], undefined);
    assert.equal(first.answer.code, 'WAITING', `${who}: ${JSON.stringify(first.answer)}`);
    assert.ok(first.answer.position >= 1 && first.answer.ahead >= 0 && first.answer.eta_ms > 0, JSON.stringify(first.answer));
    assert.equal(first.retryAfter, String(first.answer.retry_after));
    positions.push(first.answer.position);
    // Every later one presented the ticket the answer before it gave, and the last one brought
    // the solved work.
    for (let n = 1; n < tokens.length; n++) {
      const before = tokens[n - 1].answer;
      assert.equal(tokens[n].headers['x-queue-ticket'], before.ticket, `${who}: presentation ${n} carries the ticket`);
    }
    const issued = tokens[tokens.length - 1];
    assert.equal(issued.answer.code, 'TOKEN_ISSUED', JSON.stringify(issued.answer));
    const challenge = captchas[captchas.length - 1].answer;
    assert.equal(issued.body.challenge, challenge.challenge);
    assert.ok(zeroBits(challenge.challenge, issued.body.answer) >= challenge.bits, `${who}: the answer solves ${challenge.bits} bits`);
    // The work was asked for only once the turn was due: after the last WAITING's ETA.
    const lastWaiting = tokens.filter((x) => x.answer.code === 'WAITING').pop();
    assert.ok(captchas[0].at >= lastWaiting.at, `${who}: the challenge came after the last WAITING`);
    // What the page showed while it waited: the position and the number ahead as told, an ETA.
    const shown = await page.evaluate(() => window.shown);
    assert.ok(shown.length >= 1, `${who}: showed WAITING`);
    assert.equal(shown[0].position, first.answer.position.toLocaleString(i === 1 ? 'zh' : 'en'));
    assert.equal(shown[0].ahead, first.answer.ahead.toLocaleString(i === 1 ? 'zh' : 'en'));
    assert.ok(shown[0].eta, `${who}: an ETA shown`);
    assert.match(shown[0].text, i === 1 ? /排队/ : /waiting room/);
    const orderId = await page.textContent('[data-field="orderId"]');
    assert.equal(sql(`SELECT id FROM orders WHERE user_id = '${who}' AND campaign_id = '${CAMPAIGN.room}'`), orderId);
    console.log(`FIGURE room ${who}: position ${first.answer.position}, ahead ${first.answer.ahead}, eta ${first.answer.eta_ms} ms, ${tokens.length} token requests (${tokens.length - 1} presentations), waited ${issued.at - first.at} ms`);
  }
  assert.equal(new Set(positions).size, 3, `three places: ${positions}`);
  assert.equal(sql(`SELECT count(*) FROM orders WHERE campaign_id = '${CAMPAIGN.room}'`), '3');
  await shot(pages[2], 'room-success');
  await Promise.all(pages.map((p) => p.context().close()));
});
