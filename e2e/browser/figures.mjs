// The buyer's page's figures in Chromium, against the gateway at BASE_URL and an open campaign
// CAMPAIGN: the time from navigation to an enabled button (a new browser context each time, so
// nothing cached; signed in with a login JWT from SECKILL_LOGIN_KEY), and the proof of work's
// time in the page's own Web Worker (pow.js) over ROUNDS challenges at 8, 12 and 16 bits, the
// worker's start included (what a buyer waits). Run by e2e/bench/page.sh.
import { createHmac } from 'node:crypto';
import { launch } from './launch.mjs';

// A login JWT as the shop's auth service would sign it (HS256, the demo's claims).
function loginJwt(user) {
  const b64 = (o) => Buffer.from(JSON.stringify(o)).toString('base64url');
  const now = Math.floor(Date.now() / 1000);
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub: user, iss: 'shop-auth', aud: 'seckill', iat: now, exp: now + 600, level: 1 })}`;
  return `${body}.${createHmac('sha256', process.env.SECKILL_LOGIN_KEY || '').update(body).digest('base64url')}`;
}

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

const base = process.env.BASE_URL;
const campaign = process.env.CAMPAIGN;
const rounds = Number(process.env.ROUNDS || 30);
if (!base || !campaign) throw new Error('BASE_URL and CAMPAIGN must be set (e2e/bench/page.sh)');

const browser = await launch();
try {
  const loads = [];
  for (let i = 0; i < 10; i++) {
    const context = await browser.newContext();
    await context.addCookies([{ name: 'seckill_login', value: loginJwt(`figures-${i}`), url: `${base}/seckill/` }]);
    const p = await context.newPage();
    await p.goto(`${base}/seckill/${campaign}/`);
    await p.waitForFunction(() => !document.getElementById('buy').disabled, null, { timeout: 10000 });
    loads.push(await p.evaluate(() => performance.now()));
    await context.close();
  }
  console.log(`chromium load to an enabled button: median ${median(loads).toFixed(0)} ms, max ${Math.max(...loads).toFixed(0)} ms (10 cold loads, loopback)`);
  const page = await browser.newPage();
  await page.goto(`${base}/seckill/${campaign}/`);
  for (const bits of [8, 12, 16]) {
    const ms = await page.evaluate(async ({ bits, rounds }) => {
      const out = [];
      for (let i = 0; i < rounds; i++) {
        // A challenge as long as the gateway's.
        const challenge = `c${String(i).padStart(4, '0')}.${crypto.randomUUID().replace(/-/g, '')}.${crypto.randomUUID().replace(/-/g, '')}`;
        const t0 = performance.now();
        const hashing = await new Promise((resolve) => {
          const w = new Worker('pow.js');
          w.onmessage = (e) => {
            if (e.data.answer !== undefined) {
              w.terminate();
              resolve(e.data.ms);
            }
          };
          w.postMessage({ challenge, bits });
        });
        out.push([performance.now() - t0, hashing]);
      }
      return out;
    }, { bits, rounds });
    const wall = ms.map((m) => m[0]);
    const hashing = ms.map((m) => m[1]);
    const mean = wall.reduce((a, b) => a + b, 0) / wall.length;
    console.log(`chromium ${bits} bits: median ${median(wall).toFixed(2)} ms, mean ${mean.toFixed(2)} ms (${rounds} challenges; hashing alone, the worker's start left out: median ${median(hashing).toFixed(2)} ms)`);
  }
} finally {
  await browser.close();
}
