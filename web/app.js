// The buyer's page: the countdown on the server's clock, one click = one attempt (proof of work
// in a Web Worker, the campaign token, the order signed with WebCrypto HMAC as the README's
// client protocol says), safe resends of the same signed request, and the result polled with
// backoff. Every answer code is put in words, in Chinese and English. A campaign's waiting room
// (`WAITING`): the position, the number ahead and a countdown to the ETA; the ticket presented
// again at the ETA (never later than `retry_after`, a floor that doubles when it came back at
// its ETA and still waited, jitter, a bounded count and time: the rules of the e2e client's
// `next_presentation`); the proof of work solved only when the turn is due. A place in a
// lottery not drawn yet (the pre-queue's, drawn at the start; the start draw's, drawn a moment
// after it) shows when it is drawn, and asks for no work before.
//
// Login: the shop's login JWT is read from the cookie `seckill_login` (the gateway serves this
// page on the shop's own host, where the shop's login sets it; see the README).
'use strict';

const CAMPAIGN = decodeURIComponent(location.pathname.split('/')[2] || '');
const BASE = `/seckill/${encodeURIComponent(CAMPAIGN)}`;
const LOGIN_COOKIE = 'seckill_login';
// Re-take the server's time this long before the start.
const RESYNC_BEFORE_MS = 10000;
// The resend rule of one signed order (sendOrder): the same signed bytes are sent again after a
// network error, an answer of a status in RESEND_STATUSES or NOT_STARTED, MAX_SENDS times in all
// at most, each after the answer's Retry-After, else a backoff of RESEND_BACKOFF_MS doubling per
// send up to RESEND_BACKOFF_CAP_MS, times a jitter of 0.5 to 1; never past RESEND_WITHIN_MS of
// its X-Timestamp, well inside any campaign's timestamp window of the demo's 30 s. The e2e crowd
// reads these five constants from this file (e2e/crowd/src/resend.rs): one rule for both.
const RESEND_WITHIN_MS = 20000;
const MAX_SENDS = 6;
const RESEND_STATUSES = [429, 503];
const RESEND_BACKOFF_MS = 250;
const RESEND_BACKOFF_CAP_MS = 4000;
// Result polling: first wait, cap of one wait, and the whole polling's bound.
const POLL_FIRST_MS = 500;
const POLL_CAP_MS = 8000;
const POLL_MAX_TOTAL_MS = 120000;
// The waiting room (as fixtures::client's Patience and next_presentation): presentations of the
// ticket at most, time waited at most, the first floor (doubling when late, capped), how far
// past the ETA to come back.
const ROOM_PRESENTATIONS = 200;
const ROOM_MAX_TOTAL_MS = 600000;
const ROOM_FLOOR_MS = 50;
const ROOM_MAX_FLOOR_MS = 5000;
const ROOM_PAST_ETA_MS = 20;
// A challenge or token request answered TRY_LATER (or NOT_STARTED) is sent again this many times
// at most, after its Retry-After.
const SHED_TRIES = 5;
// Fresh challenges a token request refused CAPTCHA_FAILED (the work's level rose) is solved on
// and sent again, at most.
const FRESH_WORK_TRIES = 2;
const TICKET_HEADER = 'X-Queue-Ticket';

// Words for every answer code of the README's table, and the page's own states.
// kind: ok | bad | wait; retry: the buyer may try again (the button comes back).
const WORDS = {
  QUEUED: { kind: 'wait', en: 'Queued: you have a reservation, your order is being written…', zh: '排队中：已为您保留，订单正在生成…' },
  SUCCESS: { kind: 'ok', en: 'Success! Your order is placed.', zh: '抢购成功！订单已生成。' },
  SOLD_OUT: { kind: 'bad', en: 'Sold out: no stock left.', zh: '库存不足：商品已抢光。' },
  ENDED: { kind: 'bad', en: 'The sale has ended.', zh: '活动已结束。' },
  NOT_STARTED: { kind: 'wait', retry: true, en: 'The sale has not opened yet (by the server’s clock). Please wait for the countdown.', zh: '活动尚未开始（以服务器时间为准），请等待倒计时结束。' },
  LIMIT_REACHED: { kind: 'bad', en: 'You already hold the most this sale allows per buyer.', zh: '您已达到每人限购数量。' },
  CAMPAIGN_NOT_READY: { kind: 'wait', retry: true, en: 'The sale is not ready yet. Please try again shortly.', zh: '活动尚未准备好，请稍后再试。' },
  CAMPAIGN_UNKNOWN: { kind: 'bad', en: 'There is no such sale.', zh: '没有这个活动。' },
  ROUTE_NOT_FOUND: { kind: 'bad', retry: true, en: 'The page asked for something that does not exist.', zh: '请求的地址不存在。' },
  NOT_FOUND: { kind: 'bad', retry: true, en: 'Your reservation could not be found.', zh: '未找到您的预订记录。' },
  CAMPAIGN_CLOSED: { kind: 'bad', retry: true, en: 'The sale is paused by the shop. Please try again later.', zh: '活动已被商家暂停，请稍后再试。' },
  SERVICE_DEGRADED: { kind: 'bad', retry: true, en: 'Our system is busy and nothing was reserved. You may try again.', zh: '系统繁忙，未为您保留商品，可以重试。' },
  TRY_LATER: { kind: 'wait', retry: true, en: 'Too many buyers right now. Please try again in a moment.', zh: '当前人数过多，请稍后重试。' },
  RATE_LIMITED: { kind: 'wait', retry: true, en: 'Too many requests. Please wait a moment and try again.', zh: '请求过于频繁，请稍候再试。' },
  BAD_REQUEST: { kind: 'bad', retry: true, en: 'The request was not understood. Please try again.', zh: '请求有误，请重试。' },
  BAD_SIGNATURE: { kind: 'bad', retry: true, en: 'The order’s signature did not match. Please try again.', zh: '订单签名校验失败，请重试。' },
  STALE_TIMESTAMP: { kind: 'bad', retry: true, en: 'The order took too long to arrive. Please try again.', zh: '订单请求已超时，请重试。' },
  BAD_LOGIN: { kind: 'bad', login: true, en: 'Your sign-in is missing or has expired. Please sign in again.', zh: '您尚未登录或登录已过期，请重新登录。' },
  BAD_TOKEN: { kind: 'bad', retry: true, en: 'Your sale pass is not valid. Please try again.', zh: '抢购凭证无效，请重试。' },
  BAD_RESULT_TOKEN: { kind: 'bad', retry: true, en: 'The result of this order could not be checked. Please try again: the same order is answered with its result.', zh: '无法查询本次订单结果，请重试：同一订单会返回其结果。' },
  TOKEN_EXPIRED: { kind: 'bad', retry: true, en: 'Your sale pass has expired. Please try again.', zh: '抢购凭证已过期，请重试。' },
  BAD_PATH: { kind: 'bad', retry: true, en: 'The order address was not valid. Please try again.', zh: '下单地址无效，请重试。' },
  REPLAY: { kind: 'bad', retry: true, en: 'This order was already sent once. Please try again.', zh: '该请求已提交过，请重试。' },
  NOT_ELIGIBLE: { kind: 'bad', en: 'Sorry, your account is not eligible for this sale.', zh: '抱歉，您的账户不符合本次活动的参与资格。' },
  CAPTCHA_FAILED: { kind: 'bad', retry: true, en: 'The robot check failed or expired. Please try again.', zh: '人机验证失败或已过期，请重试。' },
  CHALLENGE: { kind: 'wait', en: 'Robot check received.', zh: '已收到人机验证。' },
  TOKEN_ISSUED: { kind: 'wait', en: 'Sale pass received.', zh: '已获得抢购凭证。' },
  PAYMENT_REF_USED: { kind: 'bad', en: 'This payment was already used for another order.', zh: '该支付凭证已用于其他订单。' },
  UPSTREAM_UNAVAILABLE: { kind: 'bad', retry: true, en: 'A part of the shop cannot be reached. Please try again.', zh: '商城服务暂时无法访问，请重试。' },
  BODY_TOO_LARGE: { kind: 'bad', retry: true, en: 'The request was too large.', zh: '请求内容过大。' },
  HEADERS_TOO_LARGE: { kind: 'bad', retry: true, en: 'The request was too large (too many cookies?).', zh: '请求头过大（Cookie 过多？）。' },
  REQUEST_TIMEOUT: { kind: 'bad', retry: true, en: 'The request arrived too slowly. Please try again.', zh: '请求传输超时，请重试。' },
  FAILED: { kind: 'bad', retry: true, en: 'Your reservation did not become an order.', zh: '您的预订未能生成订单。' },
  PAID: { kind: 'ok', en: 'The order is paid.', zh: '订单已支付。' },
  CLOSED: { kind: 'bad', en: 'The order was closed because it was not paid in time.', zh: '订单因超时未支付已关闭。' },
  WAITING: { kind: 'wait', en: 'You are in the waiting room: please keep this page open, it goes on by itself when your turn comes.', zh: '您正在排队：请保持本页面打开，轮到您时会自动继续。' },
  BAD_TICKET: { kind: 'bad', retry: true, en: 'Your place in the queue is no longer valid. Please try again to queue anew.', zh: '您的排队凭证已失效，请重试以重新排队。' },
  INTERNAL: { kind: 'bad', retry: true, en: 'Something went wrong on our side. You may try again.', zh: '系统内部错误，可以重试。' },
  // The page's own.
  NETWORK: { kind: 'bad', retry: true, en: 'The connection failed. You may try again.', zh: '网络连接失败，可以重试。' },
  MAY_HOLD: { kind: 'wait', en: 'Our system is busy: checking whether your order went through…', zh: '系统繁忙：正在确认您的订单是否成功…' },
  POLL_TIMEOUT: { kind: 'wait', en: 'Your order is still being written. Check “My orders” in a few minutes; your reservation is kept.', zh: '订单仍在生成中，请几分钟后在“我的订单”中查看，您的预订不会丢失。' },
  UNKNOWN: { kind: 'bad', retry: true, en: 'Unexpected answer. You may try again.', zh: '未知的响应，可以重试。' },
  ROOM_TIMEOUT: { kind: 'bad', retry: true, en: 'You waited in the queue longer than this page waits. You may try again.', zh: '排队时间过长，本页面已停止等待，可以重试。' },
};

const TEXT = {
  title: { en: 'Flash sale', zh: '限时秒杀' },
  opensIn: { en: 'Opens in', zh: '距开始' },
  open: { en: 'The sale is open', zh: '抢购进行中' },
  ended: { en: 'The sale has ended', zh: '活动已结束' },
  buy: { en: 'Buy now', zh: '立即抢购' },
  soon: { en: 'Not open yet', zh: '即将开始' },
  working: { en: 'Working…', zh: '处理中…' },
  again: { en: 'Try again', zh: '重试' },
  bought: { en: 'Bought', zh: '已抢到' },
  unavailable: { en: 'Not available', zh: '无法购买' },
  pow: { en: 'Checking you are not a robot', zh: '正在进行人机验证' },
  hashes: { en: (n, bits) => `${n.toLocaleString('en')} hashes tried (about ${(2 ** bits).toLocaleString('en')} expected at ${bits} bits)`, zh: (n, bits) => `已计算 ${n.toLocaleString('zh')} 次（难度 ${bits} 位，预计约 ${(2 ** bits).toLocaleString('zh')} 次）` },
  position: { en: 'Your place', zh: '您的位置' },
  ahead: { en: 'Ahead of you', zh: '前方人数' },
  eta: { en: 'Your turn in', zh: '预计轮到您' },
  etaNow: { en: 'any moment now', zh: '即将轮到' },
  preQueue: { en: 'Drawn at the start', zh: '开始时随机分配' },
  preQueueNote: { en: 'Everyone who arrived before the start is given a place at random when the sale opens: arriving earlier or later in this window makes no difference.', zh: '开始前到达的所有人将在开始时随机分配位置：在此期间早到晚到没有区别。' },
  startDraw: { en: (s) => `Drawn at the start + ${s} s`, zh: (s) => `开始后 ${s} 秒随机分配` },
  afterDraw: { en: 'Right after those drawn at the start', zh: '排在开始抽签者之后' },
  afterDrawNote: { en: (s) => `Those who arrived in the first ${s} s of the sale are drawn at random; you came after them: your place is right after theirs, first come first served, and is known once the draw closes.`, zh: (s) => `活动开始后 ${s} 秒内到达的人随机分配位置；您在他们之后到达，按先来后到排在他们之后，抽签结束后即可知道位置。` },
  startDrawNote: { en: (s) => `Everyone who arrived in the first ${s} s of the sale is given a place at random (after those who queued before the start): arriving earlier or later in these seconds makes no difference.`, zh: (s) => `活动开始后 ${s} 秒内到达的所有人将随机分配位置（排在开始前排队的人之后）：在此期间早到晚到没有区别。` },
  shed: { en: (s) => `Too many buyers right now; asking again in ${s} s…`, zh: (s) => `当前人数过多，${s} 秒后自动重试…` },
  join: { en: 'Join the queue', zh: '排队' },
  starts: { en: (t) => `Starts at ${t} (server time)`, zh: (t) => `开始时间 ${t}（以服务器时间为准）` },
  ends: { en: (t) => `Ends at ${t} (server time)`, zh: (t) => `结束时间 ${t}（以服务器时间为准）` },
  campaign: { en: (c) => `Sale “${c}”`, zh: (c) => `活动“${c}”` },
  signedIn: { en: (u) => `Signed in as ${u}.`, zh: (u) => `当前账户：${u}。` },
  signIn: { en: 'Sign in to the shop to buy', zh: '请先登录商城再抢购' },
  gettingPass: { en: 'Getting your sale pass…', zh: '正在获取抢购凭证…' },
  sending: { en: 'Sending your order…', zh: '正在提交订单…' },
  resending: { en: (n) => `Connection trouble; sending the same order again (${n})…`, zh: (n) => `网络异常，正在重新提交同一订单（第 ${n} 次）…` },
  checking: { en: (n) => `Checking your order (${n})…`, zh: (n) => `正在查询订单结果（第 ${n} 次）…` },
  orderId: { en: 'Order', zh: '订单号' },
  amount: { en: 'Amount', zh: '金额' },
  payBy: { en: 'Pay by', zh: '请在此前付款' },
  requestId: { en: 'Request', zh: '请求编号' },
  days: { en: 'd', zh: '天' },
};

const $ = (id) => document.getElementById(id);
let lang = pickLang();
// The server's clock: server time (ms) at `at` (performance.now()); the device's own clock is
// never read for the sale.
let clock = null;
let info = null;
let resynced = false;
let busy = false;
let last = null; // the status shown: {code, extra}
let timer = 0;
let buyLabel = 'soon'; // the button's words (a TEXT key)

function pickLang() {
  const saved = localStorage.getItem('seckill_lang');
  if (saved === 'zh' || saved === 'en') return saved;
  // navigator.languages is what the browser sends as Accept-Language.
  const first = (navigator.languages && navigator.languages[0]) || navigator.language || 'en';
  return first.toLowerCase().startsWith('zh') ? 'zh' : 'en';
}

function t(key, ...args) {
  const v = TEXT[key][lang];
  return typeof v === 'function' ? v(...args) : v;
}

function words(code) {
  return WORDS[code] || WORDS.UNKNOWN;
}

function serverNow() {
  return clock.server + (performance.now() - clock.at);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// One /info round trip: the server's time, corrected by half the round trip.
async function sample() {
  const t0 = performance.now();
  const r = await fetch(`${BASE}/info`, { cache: 'no-store' });
  const t1 = performance.now();
  const body = await r.json();
  if (!r.ok) throw Object.assign(new Error(body.code), { code: body.code });
  return { info: body, rtt: t1 - t0, clock: { server: body.server_time_ms + (t1 - t0) / 2, at: t1 } };
}

// Takes the server's time `n` times and keeps the sample with the shortest round trip.
async function sync(n) {
  let best = null;
  for (let i = 0; i < n; i++) {
    const s = await sample();
    if (!best || s.rtt < best.rtt) best = s;
  }
  clock = best.clock;
  info = best.info;
}

function loginJwt() {
  const c = document.cookie.split(';').map((s) => s.trim()).find((s) => s.startsWith(`${LOGIN_COOKIE}=`));
  return c ? decodeURIComponent(c.slice(LOGIN_COOKIE.length + 1)) : '';
}

// The login JWT's `sub`, for display only (the gateway verifies the JWT itself).
function loginUser(jwt) {
  try {
    const part = jwt.split('.')[1].replace(/-/g, '+').replace(/_/g, '/');
    return JSON.parse(atob(part)).sub || '';
  } catch {
    return '';
  }
}

function deviceId() {
  let id = localStorage.getItem('seckill_device');
  if (!id) {
    id = `web-${randomHex(12)}`;
    localStorage.setItem('seckill_device', id);
  }
  return id;
}

function randomHex(bytes) {
  return hex(crypto.getRandomValues(new Uint8Array(bytes)));
}

function hex(buf) {
  return Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, '0')).join('');
}

function setState(state) {
  document.body.dataset.state = state;
}

function fmtTime(ms) {
  return new Intl.DateTimeFormat(lang === 'zh' ? 'zh-CN' : 'en-GB', {
    dateStyle: 'medium', timeStyle: 'medium',
  }).format(new Date(ms));
}

// Shows `code` in words in the live region; `extra`: {order, amount, payBy, requestId, note}.
function show(code, extra = {}) {
  last = { code, extra };
  const w = words(code);
  const box = $('status');
  box.dataset.kind = w.kind;
  box.dataset.code = code;
  box.textContent = '';
  const strong = document.createElement('strong');
  strong.textContent = w[lang];
  box.append(strong);
  if (extra.note) {
    const p = document.createElement('p');
    p.className = 'small';
    p.textContent = extra.note;
    box.append(p);
  }
  const room = extra.room;
  const rows = [
    ['position', room && (room.preQueue ? t('preQueue') : room.afterDraw ? t('afterDraw') : room.drawSecs !== null ? t('startDraw', room.drawSecs) : room.position.toLocaleString(lang))],
    ['ahead', room && !room.preQueue && room.drawSecs === null ? room.ahead.toLocaleString(lang) : undefined],
    ['eta', room && etaText(room.etaAtMs)],
    ['orderId', extra.order], ['amount', extra.amount], ['payBy', extra.payBy], ['requestId', extra.requestId],
  ].filter(([, v]) => v !== undefined && v !== '');
  if (rows.length) {
    const dl = document.createElement('dl');
    for (const [k, v] of rows) {
      const dt = document.createElement('dt');
      dt.textContent = t(k);
      const dd = document.createElement('dd');
      dd.textContent = v;
      dd.dataset.field = k;
      // The ETA runs down every second without being read out each time (role timer); the
      // rest of the answer is announced when a new WAITING answer comes.
      if (k === 'eta') {
        dd.setAttribute('role', 'timer');
        dd.setAttribute('aria-live', 'off');
      }
      dl.append(dt, dd);
    }
    box.append(dl);
  }
  if (room && (room.preQueue || room.drawSecs !== null)) {
    const p = document.createElement('p');
    p.className = 'small';
    p.textContent = room.preQueue ? t('preQueueNote') : room.afterDraw ? t('afterDrawNote', room.drawSecs) : t('startDrawNote', room.drawSecs);
    box.append(p);
  }
  if (w.login) box.append(signInLink());
}

// The time left to the ETA, on the server's clock: m:ss, or "any moment" once it is due.
function etaText(atMs) {
  const left = Math.ceil((atMs - serverNow()) / 1000);
  if (left <= 0) return t('etaNow');
  return `${Math.floor(left / 60)}:${two(left % 60)}`;
}

// Runs the shown ETA down once a second while a WAITING answer is on the screen.
let etaTimer = 0;
function runEta() {
  clearInterval(etaTimer);
  etaTimer = setInterval(() => {
    const dd = document.querySelector('#status [data-field="eta"]');
    if (!last || !last.extra || !last.extra.room || !dd) {
      clearInterval(etaTimer);
      return;
    }
    dd.textContent = etaText(last.extra.room.etaAtMs);
  }, 1000);
}

// A progress line in the live region (not an answer code).
function note(text) {
  last = { text };
  const box = $('status');
  box.dataset.kind = 'wait';
  box.dataset.code = '';
  box.textContent = text;
}

function signInLink() {
  const a = document.createElement('a');
  a.href = `/login?next=${encodeURIComponent(location.pathname)}`;
  a.textContent = t('signIn');
  return a;
}

function renderTexts() {
  document.documentElement.lang = lang === 'zh' ? 'zh-CN' : 'en';
  document.title = `${t('title')} · ${CAMPAIGN}`;
  for (const el of document.querySelectorAll('[data-t]')) el.textContent = t(el.dataset.t);
  for (const b of document.querySelectorAll('[data-lang]')) b.setAttribute('aria-pressed', String(b.dataset.lang === lang));
  $('buy').textContent = t(buyLabel);
  $('campaign').textContent = t('campaign', CAMPAIGN);
  if (info) $('starts').textContent = t('starts', fmtTime(Date.parse(info.starts_at)));
  const jwt = loginJwt();
  const login = $('login');
  login.textContent = '';
  if (jwt) login.textContent = t('signedIn', loginUser(jwt));
  else login.append(signInLink());
  if (last && last.code) show(last.code, last.extra);
  else if (last && last.text) note(last.text);
  tick();
}

function label(key) {
  buyLabel = key;
  $('buy').textContent = t(key);
}

function two(n) {
  return String(n).padStart(2, '0');
}

// The countdown and the button, from the server's clock; schedules itself.
function tick() {
  clearTimeout(timer);
  if (!info || !clock) return;
  const now = serverNow();
  const starts = Date.parse(info.starts_at);
  const ends = Date.parse(info.ends_at);
  const left = starts - now;
  const heading = $('when');
  const buy = $('buy');
  if (left > 0) {
    const s = Math.ceil(left / 1000);
    const d = Math.floor(s / 86400);
    $('countdown').textContent = `${d ? `${d}${t('days')} ` : ''}${two(Math.floor(s / 3600) % 24)}:${two(Math.floor(s / 60) % 60)}:${two(s % 60)}`;
    heading.textContent = t('opensIn');
    // A waiting room's pre-queue is open before the start: the buyer may join it now.
    const room = info.waiting_room;
    const preQueue = Boolean(room && left <= room.pre_queue_secs * 1000 && loginJwt() && !info.switches.closed);
    if (!busy) {
      buy.disabled = !preQueue;
      label(preQueue ? 'join' : 'soon');
      setState('countdown');
    }
    if (left < RESYNC_BEFORE_MS && !resynced) {
      resynced = true;
      sync(3).then(tick, () => {});
    }
    // Wake at the next whole second of the countdown, or at the start itself.
    timer = setTimeout(tick, Math.max(10, Math.min(left - (s - 1) * 1000, 1000)));
    return;
  }
  $('countdown').textContent = '00:00:00';
  if (now >= ends || info.state === 'ENDED') {
    heading.textContent = t('ended');
    if (!busy) {
      buy.disabled = true;
      setState('ended');
    }
    return;
  }
  heading.textContent = t('open');
  $('starts').textContent = t('ends', fmtTime(ends));
  const state = document.body.dataset.state;
  if (!busy && state !== 'done' && state !== 'retry') {
    const wasClosed = buy.disabled;
    buy.disabled = !loginJwt() || info.switches.closed;
    label('buy');
    setState('open');
    if (wasClosed && !buy.disabled && !last) note(t('open'));
  }
  timer = setTimeout(tick, Math.min(ends - now, 60000));
}

async function post(path, headers, body) {
  const r = await fetch(path, { method: 'POST', headers, body, cache: 'no-store' });
  let json = {};
  try {
    json = await r.json();
  } catch {
    json = { code: 'UNKNOWN' };
  }
  return { status: r.status, body: json, retryAfter: Number(r.headers.get('Retry-After')) || 0 };
}

// The captcha's proof of work in a Web Worker, with progress.
function solve(challenge, bits) {
  return new Promise((resolve, reject) => {
    const worker = new Worker('pow.js');
    const progress = $('progress');
    const text = $('work-text');
    $('work').hidden = false;
    progress.value = 0;
    worker.onmessage = (e) => {
      const { tried, answer, ms } = e.data;
      // The chance the work is done by now: 1 - e^(-tried / 2^bits).
      progress.value = answer === undefined ? 1 - Math.exp(-tried / 2 ** bits) : 1;
      text.textContent = t('hashes', tried, bits);
      if (answer !== undefined) {
        worker.terminate();
        resolve({ answer, tried, ms });
      }
    };
    worker.onerror = (e) => {
      worker.terminate();
      reject(e);
    };
    worker.postMessage({ challenge, bits });
  });
}

class Refused extends Error {
  constructor(body, retryAfter) {
    super(body.code);
    this.body = body;
    this.retryAfter = retryAfter;
  }
}

// A request to the captcha or token endpoint, sent again when it is shed (`TRY_LATER`: after its
// Retry-After, never sooner, plus a little jitter) or early (`NOT_STARTED`: the device started
// early, never the buyer's fault: within the server's Retry-After, at most 5 s), SHED_TRIES
// times at most; then its answer is the answer.
async function ask(path, headers, body) {
  for (let n = 0; ; n++) {
    const r = await post(path, headers, body);
    const code = r.body.code;
    if ((code !== 'TRY_LATER' && code !== 'NOT_STARTED') || n >= SHED_TRIES) return r;
    const after = Math.min(30, Math.max(1, r.retryAfter || Number(r.body.retry_after) || 1)) * 1000;
    if (code === 'TRY_LATER') {
      note(t('shed', Math.ceil(after / 1000)));
      await sleep(after * (1 + Math.random() / 4));
    } else {
      await sleep(Math.min(5000, after) * (0.5 + Math.random() / 2));
    }
  }
}

// A challenge, solved in the worker (its bits and the work's progress shown): the body of the
// token request, and until when (performance.now()) it is good.
async function challengeSolved(device) {
  const ch = await ask(`${BASE}/captcha`, { 'X-Device-Id': device });
  if (ch.status !== 200) throw new Refused(ch.body, ch.retryAfter);
  return solvedFrom(ch.body);
}

// The challenge of an answer (`challenge`, `bits`, `expires_in`), solved.
async function solvedFrom(ch) {
  const asked = performance.now();
  const solved = await solve(ch.challenge, ch.bits);
  return {
    body: { challenge: ch.challenge, answer: solved.answer },
    until: asked + (Number(ch.expires_in) || 0) * 1000,
  };
}

// The token asked with `solved` work. The work is judged at the level in force when it arrives:
// a CAPTCHA_FAILED answer brings a fresh challenge at that level (the crowd grew while this
// page solved, or the challenge expired); it is solved and the token asked again, at most
// FRESH_WORK_TRIES times. Returns the last answer and the work it was asked with.
async function askTokenWithWork(jwt, device, solved, ticket) {
  let answer = await askToken(jwt, device, solved.body, ticket);
  for (let n = 0; n < FRESH_WORK_TRIES && answer.body.code === 'CAPTCHA_FAILED' && answer.body.challenge; n++) {
    solved = await solvedFrom(answer.body);
    answer = await askToken(jwt, device, solved.body, ticket);
  }
  return { answer, solved };
}

const fresh = (solved) => solved !== null && performance.now() + 1000 < solved.until;

function askToken(jwt, device, body, ticket) {
  const headers = { Authorization: `Bearer ${jwt}`, 'X-Device-Id': device, 'Content-Type': 'application/json' };
  if (ticket) headers[TICKET_HEADER] = ticket;
  return ask(`${BASE}/token`, headers, JSON.stringify(body));
}

// After the WAITING answer `body`, the `soFar`-th, `waitedMs` into the wait, of which `late`
// came back at or past their ETA (fixtures::client::next_presentation's rules, but past the ETA, not
// before it: the work is solved here only once the turn is due): come back at the ETA
// (a little past it, with jitter), never later than retry_after and never sooner than a floor
// that doubles with `late`; a wait as long as retry_after is spread over its last fifth. `solve`:
// the turn is due by then (never before a lottery's draw: the pre-queue's at the start, the
// start draw's at its close). `null`:
// the next presentation would pass the count or the time this page waits.
function nextPresentation(body, soFar, late, waitedMs) {
  const retry = Math.min(30, Math.max(1, Number(body.retry_after) || 1)) * 1000;
  const eta = Number.isFinite(body.eta_ms) ? Math.max(0, body.eta_ms) : retry;
  const floor = Math.min(ROOM_FLOOR_MS * 2 ** Math.min(late, 16), ROOM_MAX_FLOOR_MS);
  let pause = Math.min(Math.max(eta + ROOM_PAST_ETA_MS, floor), retry);
  if (pause >= retry) pause = retry * (0.8 + Math.random() / 5);
  else pause = Math.min(retry, pause + Math.random() * Math.min(200, pause / 10));
  if (soFar > ROOM_PRESENTATIONS || waitedMs + pause > ROOM_MAX_TOTAL_MS) return null;
  return { pause, solve: !undrawn(body) && pause >= eta };
}

// Whether a WAITING answer's place is a lottery's not drawn yet (fixtures::client::undrawn).
function undrawn(body) {
  return body.pre_queue === true || body.start_draw === true || body.after_draw === true;
}

// Shows a WAITING answer: the position (or when its lottery is drawn), the number ahead, the ETA.
function showWaiting(body) {
  setState('waiting');
  $('work').hidden = true;
  const preQueue = body.pre_queue === true;
  // The start draw's seconds after the start, from the answer (the draw's end) and /info (the
  // start); drawn_at_ms is when this buyer is asked back, a little after the end.
  const drawEnd = Number(body.draw_ends_at_ms ?? body.drawn_at_ms);
  const drawSecs = (body.start_draw === true || body.after_draw === true) && info
    ? Math.max(0, Math.round((drawEnd - Date.parse(info.starts_at)) / 100) / 10)
    : null;
  // From the answer's eta_ms as it arrives (the server's own clock, not this page's copy of it).
  const etaAtMs = serverNow() + (Number(body.eta_ms) || 0);
  const afterDraw = body.after_draw === true;
  show('WAITING', { room: { preQueue, afterDraw, drawSecs, position: Number(body.position) || 0, ahead: Number(body.ahead) || 0, etaAtMs } });
  runEta();
}

// The token through the waiting room: asked without the work first; each WAITING answer's
// ticket presented again as nextPresentation says, with a solved challenge once the turn is due.
async function throughRoom(jwt, device) {
  let answer = await askToken(jwt, device, {}, null);
  let solved = null;
  let soFar = 0;
  let late = 0;
  let waited = 0;
  while (answer.status === 200 && answer.body.code === 'WAITING') {
    soFar += 1;
    const body = answer.body;
    const next = nextPresentation(body, soFar, late, waited);
    if (next === null) throw new Refused({ code: 'ROOM_TIMEOUT' }, 0);
    // No ticket: the turn has passed (a session over); ask again without it.
    const ticket = body.ticket || null;
    if (ticket) showWaiting(body);
    await sleep(next.pause);
    waited += next.pause;
    if (Number.isFinite(body.eta_ms) && next.pause >= body.eta_ms) late += 1;
    if (next.solve && ticket) {
      if (!fresh(solved)) solved = await challengeSolved(device);
      ({ answer, solved } = await askTokenWithWork(jwt, device, solved, ticket));
    } else {
      answer = await askToken(jwt, device, {}, ticket);
      if (answer.body.code === 'CAPTCHA_FAILED' && ticket) {
        // Let in sooner than its ETA said (another gateway's clock): now with the work, on the
        // fresh challenge the answer brings.
        solved = answer.body.challenge ? await solvedFrom(answer.body) : await challengeSolved(device);
        ({ answer, solved } = await askTokenWithWork(jwt, device, solved, ticket));
      }
    }
  }
  if (answer.status !== 200) throw new Refused(answer.body, answer.retryAfter);
  return answer.body;
}

// Captcha → proof of work → campaign token; through the waiting room when the campaign has one.
async function ticket(jwt, device) {
  if (info && info.waiting_room) return throughRoom(jwt, device);
  const solved = await challengeSolved(device);
  const { answer: tok } = await askTokenWithWork(jwt, device, solved, null);
  if (tok.body.code === 'WAITING') {
    // The room was turned on since /info was read: queue as it says.
    return throughRoom(jwt, device);
  }
  if (tok.status !== 200) throw new Refused(tok.body, tok.retryAfter);
  return tok.body;
}

// The signed order, built once: every resend sends these same bytes.
async function signOrder(tok, device) {
  const path = tok.order_url;
  const query = 'qty=1';
  const timestamp = String(Math.floor(serverNow() / 1000));
  const nonce = randomHex(16);
  const body = new Uint8Array(0);
  const bodyHash = hex(await crypto.subtle.digest('SHA-256', body));
  const canonical = ['POST', path, query, timestamp, nonce, bodyHash].join('\n');
  const key = await crypto.subtle.importKey(
    'raw', hexBytes(tok.signing_key), { name: 'HMAC', hash: 'SHA-256' }, false, ['sign'],
  );
  const signature = hex(await crypto.subtle.sign('HMAC', key, new TextEncoder().encode(canonical)));
  return {
    url: `${path}?${query}`,
    sentAt: serverNow(),
    headers: {
      Authorization: `Bearer ${tok.token}`, 'X-Device-Id': device, 'X-Timestamp': timestamp,
      'X-Nonce': nonce, 'X-Signature': signature,
    },
  };
}

function hexBytes(s) {
  const out = new Uint8Array(s.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(s.substr(i * 2, 2), 16);
  return out;
}

// Sends the signed order; on a network error, a 429 or a 503 sends the SAME request again (a
// safe retry: the gateway answers a resent request with its first answer, never a second
// reservation), after the server's Retry-After or a backoff with jitter (the resend rule above).
async function sendOrder(signed) {
  for (let n = 1; ; n++) {
    let r = null;
    try {
      r = await post(signed.url, signed.headers, '');
    } catch {
      r = null;
    }
    const again = r === null || RESEND_STATUSES.includes(r.status) || r.body.code === 'NOT_STARTED';
    const wait = Math.max((r && r.retryAfter) || 0, 0) * 1000
      || Math.min(RESEND_BACKOFF_MS * 2 ** n, RESEND_BACKOFF_CAP_MS);
    const late = serverNow() + wait - signed.sentAt > RESEND_WITHIN_MS;
    if (!again || n >= MAX_SENDS || late) {
      if (r === null) throw new Refused({ code: 'NETWORK' }, 0);
      return r;
    }
    note(t('resending', n));
    await sleep(wait * (0.5 + Math.random() / 2));
  }
}

// Polls the result: exponential backoff with full jitter, never sooner than the server's
// Retry-After, for at most POLL_MAX_TOTAL_MS in all, showing `waiting` meanwhile. Each poll
// carries the request's result token (given with its QUEUED answer, or a SERVICE_DEGRADED one
// that may hold a reservation): only the buyer whose reservation it is reads its result.
async function poll(pollUrl, requestId, resultToken, waiting) {
  const started = performance.now();
  let delay = POLL_FIRST_MS;
  for (let n = 1; ; n++) {
    let r = null;
    try {
      const res = await fetch(pollUrl, { cache: 'no-store', headers: { 'X-Result-Token': resultToken } });
      r = { status: res.status, body: await res.json(), retryAfter: Number(res.headers.get('Retry-After')) || 0 };
    } catch {
      r = null;
    }
    const code = r && r.body.code;
    if (code && !['QUEUED', 'RATE_LIMITED', 'SERVICE_DEGRADED', 'TRY_LATER', 'NOT_FOUND', 'INTERNAL', 'UPSTREAM_UNAVAILABLE'].includes(code)) {
      return r.body;
    }
    const wait = Math.max(delay / 2 + (Math.random() * delay) / 2, ((r && r.retryAfter) || 0) * 1000);
    if (performance.now() - started + wait > POLL_MAX_TOTAL_MS) return { code: 'POLL_TIMEOUT', request_id: requestId };
    show(waiting, { requestId, note: t('checking', n) });
    await sleep(wait);
    delay = Math.min(delay * 2, POLL_CAP_MS);
  }
}

function money(cents) {
  return new Intl.NumberFormat(lang === 'zh' ? 'zh-CN' : 'en-GB', { style: 'currency', currency: 'CNY' }).format(cents / 100);
}

// Shows a final answer; the button comes back only when the buyer may try again.
function finish(body) {
  const code = body.code || 'UNKNOWN';
  const extra = { requestId: body.request_id };
  if (code === 'SUCCESS') {
    extra.order = String(body.order_id);
    extra.amount = money(body.amount_cents);
    extra.payBy = fmtTime(Date.parse(body.pay_by));
  }
  if (code === 'FAILED' && body.reason) extra.note = body.reason;
  show(code, extra);
  busy = false;
  $('work').hidden = true;
  const buy = $('buy');
  buy.removeAttribute('aria-busy');
  if (words(code).retry) {
    label('again');
    buy.disabled = false;
    setState('retry');
  } else {
    label(words(code).kind === 'ok' ? 'bought' : 'unavailable');
    setState('done');
  }
}

async function attempt() {
  const buy = $('buy');
  if (busy || buy.disabled) return;
  // One click, one attempt: grey at once, before any await.
  busy = true;
  buy.disabled = true;
  buy.setAttribute('aria-busy', 'true');
  label('working');
  setState('working');
  last = null;
  const jwt = loginJwt();
  const device = deviceId();
  try {
    note(t('gettingPass'));
    const tok = await ticket(jwt, device);
    $('work').hidden = true;
    const signed = await signOrder(tok, device);
    note(t('sending'));
    const r = await sendOrder(signed);
    // QUEUED, or SERVICE_DEGRADED for a request that may hold a reservation: both say where
    // to poll and with which result token.
    if (r.body.code !== 'QUEUED' && !r.body.result_token) return finish(r.body);
    const waiting = r.body.code === 'QUEUED' ? 'QUEUED' : 'MAY_HOLD';
    setState('queued');
    show(waiting, { requestId: r.body.request_id });
    finish(await poll(r.body.poll_url, r.body.request_id, r.body.result_token, waiting));
  } catch (e) {
    finish(e instanceof Refused ? e.body : { code: 'NETWORK' });
  }
}

async function start() {
  for (const b of document.querySelectorAll('[data-lang]')) {
    b.addEventListener('click', () => {
      lang = b.dataset.lang;
      localStorage.setItem('seckill_lang', lang);
      renderTexts();
    });
  }
  $('buy').addEventListener('click', attempt);
  renderTexts();
  for (let n = 0; ; n++) {
    try {
      await sync(1);
      break;
    } catch (e) {
      if (e.code === 'CAMPAIGN_UNKNOWN') return show('CAMPAIGN_UNKNOWN');
      show('NETWORK');
      await sleep(Math.min(1000 * 2 ** n, 10000) * (0.5 + Math.random() / 2));
    }
  }
  last = null;
  $('status').textContent = '';
  if (!loginJwt()) show('BAD_LOGIN');
  renderTexts();
}

start();
