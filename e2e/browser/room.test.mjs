// The buyer's page through a campaign's waiting room, in Debian's Chromium against the real
// gateway, order writer and database (started by e2e/browser.sh): the room admits one buyer a
// second, three pages click at once; each shows WAITING with its position, the number ahead and
// the ETA, presents its ticket again by itself, solves the work once its turn is due, and gets
// its order; the database agrees. Then two pages join a pre-queue before its start: told their
// places are drawn at the start, no work asked before it, then a place each of 1 and 2, and
// their orders. Then two pages click in a start draw's first seconds: each shows when the places
// are drawn and why arriving earlier in them makes no difference, is asked back at its own time
// (one after the other), asks no work before it, then gets a place of the draw and its order.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { CAMPAIGN, DRAW_AT_MS, PREQ_AT_MS, buyer, launch, settled, shot, sql, zeroBits } from './support.mjs';

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

test('two pages join the pre-queue before the start: no place and no work before the draw, then places 1 and 2 and their orders', { timeout: 240000 }, async () => {
  assert.ok(PREQ_AT_MS - Date.now() > 15000, `the pre-queue campaign opens in ${PREQ_AT_MS - Date.now()} ms: too late to join before it (raise PREQ_IN)`);
  const users = ['preq-1', 'preq-2'];
  const pages = [];
  for (const user of users) pages.push(await buyer(browser, { user, campaign: CAMPAIGN.preq }));
  for (const page of pages) {
    // Before the start, in the pre-queue window: the button joins the queue.
    await page.waitForFunction(() => document.body.dataset.state === 'countdown' && !document.getElementById('buy').disabled);
    assert.equal(await page.textContent('#buy'), 'Join the queue');
  }
  const seen = await Promise.all(pages.map(watch));
  await Promise.all(pages.map((p) => p.evaluate(() => document.getElementById('buy').click())));
  for (const page of pages) {
    await page.waitForFunction(() => document.body.dataset.state === 'waiting');
    assert.equal(await page.textContent('#status [data-field="position"]'), 'Drawn at the start');
    assert.match(await page.textContent('#status'), /at random when the sale opens/);
  }
  await shot(pages[0], 'room-pre-queue-en');
  const results = await Promise.all(pages.map((p) => settled(p, PREQ_AT_MS - Date.now() + 90000)));
  const places = [];
  for (const [i, page] of pages.entries()) {
    const who = users[i];
    assert.equal(results[i].code, 'SUCCESS', `${who}: ${results[i].text}`);
    const { tokens, captchas } = seen[i];
    const pre = tokens.filter((x) => x.answer.pre_queue === true);
    assert.ok(pre.length >= 1, `${who}: a pre-queue answer`);
    assert.ok(pre.every((x) => x.answer.code === 'WAITING' && x.answer.position === null), `${who}: no place before the draw`);
    // No work was asked for in the pre-queue: every challenge came after its last answer.
    assert.ok(captchas.length >= 1 && captchas.every((c) => c.at >= pre[pre.length - 1].at), `${who}: work only after the draw`);
    // After the start: a place from the draw (told while waiting, or read from the ticket the
    // token came with), then the token.
    const drawn = tokens.slice(pre.length);
    assert.ok(drawn.every((x) => x.answer.pre_queue !== true), `${who}: the pre-queue answers all came first`);
    const issued = drawn[drawn.length - 1].answer;
    assert.equal(issued.code, 'TOKEN_ISSUED', JSON.stringify(issued));
    const place = Number(String(issued.ticket).split('.')[0].slice(1));
    assert.match(String(issued.ticket), /^p\d+\./, `${who}: the ticket holds a position`);
    for (const x of drawn.filter((a) => a.answer.code === 'WAITING')) assert.equal(x.answer.position, place);
    places.push(place);
    const orderId = await page.textContent('[data-field="orderId"]');
    assert.equal(sql(`SELECT id FROM orders WHERE user_id = '${who}' AND campaign_id = '${CAMPAIGN.preq}'`), orderId);
    console.log(`FIGURE pre-queue ${who}: ${pre.length} pre-queue answers, drawn place ${place}, token ${tokens[tokens.length - 1].at - PREQ_AT_MS} ms after the start`);
  }
  assert.deepEqual([...places].sort(), [1, 2], 'the pre-queue of two drawn as places 1 and 2');
  await Promise.all(pages.map((p) => p.context().close()));
});

test('two pages click in the start draw: when the places are drawn and why it is fair, no work before it, then a drawn place each and their orders; a third clicks after its window and is placed after them', { timeout: 240000 }, async () => {
  // The campaign opens at DRAW_AT_MS with a start draw of 10 s, at 1 buyer a second; the draw
  // closes 4 s after its end (every arrival in it seen: protocol::timing::ARRIVAL_CLAIM_MAX_MS).
  const drawMs = 10000;
  const closeMs = drawMs + 4000;
  assert.ok(DRAW_AT_MS - Date.now() > 5000, `the start-draw campaign opens in ${DRAW_AT_MS - Date.now()} ms: too late to load its pages before it (raise DRAW_IN)`);
  const users = ['draw-1', 'draw-2'];
  const locales = ['en-GB', 'zh-CN'];
  const pages = [];
  for (const [i, user] of users.entries()) pages.push(await buyer(browser, { user, campaign: CAMPAIGN.draw, locale: locales[i] }));
  const seen = await Promise.all(pages.map(watch));
  // No pre-queue: the button opens with the sale; both click at once then.
  for (const page of pages) await page.waitForFunction(() => document.body.dataset.state === 'open', null, { timeout: DRAW_AT_MS - Date.now() + 30000 });
  await Promise.all(pages.map((p) => p.evaluate(() => document.getElementById('buy').click())));
  for (const page of pages) await page.waitForFunction(() => document.body.dataset.state === 'waiting', null, { timeout: 30000 });
  const clicked = Date.now();
  assert.ok(clicked < DRAW_AT_MS + drawMs, `the pages were told to wait ${clicked - DRAW_AT_MS} ms after the start, past the draw (raise start_draw_ms)`);
  // What each page shows in the draw: when its places are drawn (the start + 10 s, the draw's
  // window, not this buyer's own time to come back), why arriving earlier in it makes no
  // difference, and no number ahead.
  assert.equal(await pages[0].textContent('#status [data-field="position"]'), 'Drawn at the start + 10 s');
  assert.match(await pages[0].textContent('#status'), /first 10 s of the sale is given a place at random/);
  assert.equal(await pages[1].textContent('#status [data-field="position"]'), '开始后 10 秒随机分配');
  assert.match(await pages[1].textContent('#status'), /早到晚到没有区别/);
  for (const page of pages) assert.equal(await page.$('#status [data-field="ahead"]'), null);
  await shot(pages[0], 'room-start-draw-en');
  await shot(pages[1], 'room-start-draw-zh');
  // A third buyer clicks after the draw's window, before its close: told it comes right after
  // the drawn, first come first served, its place known when the draw closes.
  const late = await buyer(browser, { user: 'draw-3', campaign: CAMPAIGN.draw, locale: 'en-GB' });
  const lateSeen = await watch(late);
  await late.waitForFunction(() => document.body.dataset.state === 'open', null, { timeout: 30000 });
  await new Promise((r) => setTimeout(r, Math.max(0, DRAW_AT_MS + drawMs + 300 - Date.now())));
  assert.ok(Date.now() < DRAW_AT_MS + closeMs - 1000, `the third page clicks ${Date.now() - DRAW_AT_MS} ms after the start: too near the draw's close`);
  await late.evaluate(() => document.getElementById('buy').click());
  await late.waitForFunction(() => document.body.dataset.state === 'waiting', null, { timeout: 30000 });
  assert.equal(await late.textContent('#status [data-field="position"]'), 'Right after those drawn at the start');
  assert.match(await late.textContent('#status'), /you came after them/);
  assert.equal(await late.$('#status [data-field="ahead"]'), null);
  await shot(late, 'room-after-draw-en');
  const lateResult = settled(late, DRAW_AT_MS + closeMs - Date.now() + 90000);
  const results = await Promise.all(pages.map((p) => settled(p, DRAW_AT_MS + closeMs - Date.now() + 90000)));
  const places = [];
  const backAt = [];
  for (const [i, page] of pages.entries()) {
    const who = users[i];
    assert.equal(results[i].code, 'SUCCESS', `${who}: ${results[i].text}`);
    const { tokens, captchas } = seen[i];
    const first = tokens[0];
    assert.deepEqual(first.body, {}, `${who}: no work with the first request`);
    const inDraw = tokens.filter((x) => x.answer.start_draw === true);
    assert.ok(inDraw.length >= 1 && inDraw[0] === first, `${who}: told it is in the draw first: ${JSON.stringify(first.answer)}`);
    for (const x of inDraw) {
      const a = x.answer;
      assert.equal(a.code, 'WAITING');
      assert.equal(a.position, null, `${who}: no place before the draw`);
      assert.equal(a.pre_queue, false);
      assert.equal(a.draw_ends_at_ms, DRAW_AT_MS + drawMs, JSON.stringify(a));
      assert.equal(a.eta_at_ms, a.drawn_at_ms);
      assert.ok(a.drawn_at_ms >= a.draw_ends_at_ms + 4000, `${who}: asked back at or after the draw's close: ${JSON.stringify(a)}`);
      assert.equal(x.retryAfter, String(a.retry_after));
      assert.deepEqual(x.body, {}, `${who}: no work while in the draw`);
    }
    backAt.push(inDraw[0].answer.drawn_at_ms);
    // No work was asked for before the draw: every challenge came after the last draw answer.
    assert.ok(captchas.length >= 1 && captchas.every((c) => c.at >= inDraw[inDraw.length - 1].at), `${who}: work only after the draw`);
    const issued = tokens[tokens.length - 1].answer;
    assert.equal(issued.code, 'TOKEN_ISSUED', JSON.stringify(issued));
    assert.match(String(issued.ticket), /^p\d+\./, `${who}: the ticket holds a position`);
    const place = Number(String(issued.ticket).split('.')[0].slice(1));
    for (const x of tokens.filter((a) => a.answer.code === 'WAITING' && a.answer.start_draw !== true)) {
      assert.equal(x.answer.position, place, `${who}: one place once drawn`);
      // No drawn place's turn comes before its buyer was asked back to learn it.
      assert.ok(x.answer.eta_at_ms >= backAt[i], `${who}: ${JSON.stringify(x.answer)}`);
    }
    places.push(place);
    const orderId = await page.textContent('[data-field="orderId"]');
    assert.equal(sql(`SELECT id FROM orders WHERE user_id = '${who}' AND campaign_id = '${CAMPAIGN.draw}'`), orderId);
    console.log(`FIGURE start draw ${who}: ${inDraw.length} draw answers, asked back ${backAt[i] - DRAW_AT_MS} ms after the start, drawn place ${place}, token ${tokens[tokens.length - 1].at - DRAW_AT_MS} ms after the start`);
  }
  // Two drawn places, each once and one after the other; the two asked back from the draw's
  // close one after the other, a tenth of a second apart (10 × admit_per_sec), in the order
  // they arrived.
  assert.equal(Math.abs(places[0] - places[1]), 1, `two places of one draw: ${places}`);
  assert.deepEqual([...backAt].sort((a, b) => a - b), [DRAW_AT_MS + closeMs, DRAW_AT_MS + closeMs + 100], `asked back: ${backAt}`);
  // The third: told after_draw (no place yet, asked back after the close), then a place after
  // both drawn ones, and its order.
  const lateDone = await lateResult;
  assert.equal(lateDone.code, 'SUCCESS', `draw-3: ${lateDone.text}`);
  const lateFirst = lateSeen.tokens[0].answer;
  assert.equal(lateFirst.code, 'WAITING', JSON.stringify(lateFirst));
  assert.equal(lateFirst.after_draw, true, JSON.stringify(lateFirst));
  assert.equal(lateFirst.position, null, JSON.stringify(lateFirst));
  assert.ok(lateFirst.drawn_at_ms >= DRAW_AT_MS + closeMs, `draw-3: asked back at or after the close: ${JSON.stringify(lateFirst)}`);
  assert.deepEqual(lateSeen.tokens[0].body, {}, 'draw-3: no work before its place is known');
  const lateIssued = lateSeen.tokens[lateSeen.tokens.length - 1].answer;
  assert.equal(lateIssued.code, 'TOKEN_ISSUED', JSON.stringify(lateIssued));
  const latePlace = Number(String(lateIssued.ticket).split('.')[0].slice(1));
  assert.ok(latePlace > Math.max(...places), `draw-3: place ${latePlace} after the drawn ${places}`);
  assert.equal(sql(`SELECT id FROM orders WHERE user_id = 'draw-3' AND campaign_id = '${CAMPAIGN.draw}'`), await late.textContent('[data-field="orderId"]'));
  console.log(`FIGURE after the draw draw-3: asked back ${lateFirst.drawn_at_ms - DRAW_AT_MS} ms after the start, place ${latePlace} after the drawn ${places}, token ${lateSeen.tokens[lateSeen.tokens.length - 1].at - DRAW_AT_MS} ms after the start`);
  await Promise.all([...pages, late].map((p) => p.context().close()));
});
