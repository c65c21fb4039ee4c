//! The reservation step's adaptive limit (`plugins::reserve::admission`) answers `TRY_LATER` only when
//! the Redis step is the bottleneck: not for a gateway whose own threads are starved by its
//! crowd while Redis is healthy; still for a Redis too slow for the crowd, before any
//! `SERVICE_DEGRADED`; after a Redis stall the limit is back within a bounded time; and through
//! a stall it adds no `SERVICE_DEGRADED` to what the same sale without it is told.
//!
//! Each test runs a steady crowd of buyers against the real gateway binary: every buyer sends
//! signed orders one after the other (its first is reserved, the next ones answered
//! `LIMIT_REACHED` by `reserve.lua`: every order goes through the step), and every answer is
//! kept with the time it came.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fred::interfaces::LuaInterface;

use crate::support::*;

/// The admission's `TRY_LATER` says this (the lag shedding and the campaign's budget say
/// otherwise).
const REDIS_BEHIND: &str = "too many orders at once";

/// One answer of the crowd.
struct Answer {
    sent: Instant,
    at: Instant,
    took: Duration,
    code: String,
    message: String,
}

/// A gateway (`workers`, `timeout_ms` for Redis) on `redis_url` selling a fresh campaign of
/// 1,000,000 units, one per buyer, with the campaign's in-flight budget out of the way.
async fn gateway(redis_url: &str, workers: usize, timeout_ms: u64) -> (Sale, fixtures::cleanup::Campaign) {
    gateway_batching(redis_url, workers, timeout_ms, "").await
}

/// The same, with extra `[redis]` lines (`batch_max`), and an admin listener (its
/// `/metrics` is [`refused_at_once`]'s).
async fn gateway_batching(
    redis_url: &str,
    workers: usize,
    timeout_ms: u64,
    redis_extra: &str,
) -> (Sale, fixtures::cleanup::Campaign) {
    let redis = client(redis_url).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::on("adm", redis_url);
    publish(&redis, &campaign, 1_000_000, 1).await;
    let mut conf = GatewayConf::new(redis_url, "127.0.0.1:1", &campaign, "[limits]\nmax_inflight = 100000");
    conf.workers = workers;
    conf.redis_timeout_ms = timeout_ms;
    conf.redis_extra = redis_extra.to_string();
    let admin = free_port();
    conf.tables = format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\n");
    (Sale { gw: Gateway::start(&conf).await, admin }, campaign)
}

/// A gateway selling, and its admin listener's port.
struct Sale {
    gw: Gateway,
    admin: u16,
}

impl std::ops::Deref for Sale {
    type Target = Gateway;
    fn deref(&self) -> &Gateway {
        &self.gw
    }
}

impl Sale {
    /// Orders its admission limit refused at once (`seckill_gateway_admission_refused_total`).
    async fn refused_at_once(&self) -> usize {
        let url = format!("http://127.0.0.1:{}/metrics", self.admin);
        let samples = scrape(&reqwest::Client::new(), &url).await;
        sample(&samples, "seckill_gateway_admission_refused_total", &[]) as usize
    }
}

/// `n` buyers' campaign tokens.
async fn tickets(
    http: &reqwest::Client,
    gw: &Gateway,
    campaign: &str,
    n: usize,
) -> Vec<fixtures::client::Ticket> {
    let all =
        futures::future::join_all((0..n).map(|i| async move {
            ticket(http, gw, campaign, &format!("buyer-{i}")).await.expect("a token")
        }));
    all.await
}

/// Every buyer sends orders back to back until `until`; every answer, in the order they came.
async fn crowd(gw: &Gateway, buyers: &[fixtures::client::Ticket], until: Instant) -> Vec<Answer> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(buyers.len())
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let base = gw.url("");
    let each = buyers.iter().map(|t| {
        let (http, base) = (&http, &base);
        async move {
            let mut answers = Vec::new();
            while Instant::now() < until {
                let sent = Instant::now();
                let (_, body) = t.order(http, base, 1).await;
                answers.push(Answer {
                    sent,
                    at: Instant::now(),
                    took: sent.elapsed(),
                    code: body["code"].as_str().unwrap_or("ERROR").to_string(),
                    message: body["message"].as_str().unwrap_or_default().to_string(),
                });
            }
            answers
        }
    });
    let mut all: Vec<Answer> = futures::future::join_all(each).await.into_iter().flatten().collect();
    all.sort_by_key(|a| a.at);
    all
}

fn codes<'a>(answers: impl IntoIterator<Item = &'a Answer>) -> BTreeMap<&'a str, usize> {
    let mut out = BTreeMap::new();
    for a in answers {
        *out.entry(a.code.as_str()).or_default() += 1;
    }
    out
}

/// The median round trip of `answers`.
fn median(answers: &[Answer]) -> Duration {
    let mut took: Vec<Duration> = answers.iter().map(|a| a.took).collect();
    took.sort();
    took.get(took.len() / 2).copied().unwrap_or_default()
}

/// One proxy thread and 400 buyers ordering back to back for 4 s: the thread is the bottleneck
/// (an order's answer waits far longer for the thread than the admission's target, half the
/// 100 ms timeout of the shipped conf), while Redis answers each call in a millisecond or two.
/// The limit is told the Redis step's own time, so no order is refused for Redis.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_starved_by_its_crowd_answers_no_try_later_for_redis() {
    let (gw, campaign) = gateway(&fixtures::stack::redis_url(), 1, 100).await;
    let http = reqwest::Client::new();
    let buyers = tickets(&http, &gw, &campaign, 400).await;
    let answers = crowd(&gw, &buyers, Instant::now() + Duration::from_secs(4)).await;

    let seen = codes(&answers);
    let median = median(&answers);
    eprintln!("starved gateway: {seen:?}, median round trip {median:?}");
    assert!(
        median > Duration::from_millis(50),
        "the gateway's thread was the bottleneck (median {median:?} past the 50 ms target): {seen:?}"
    );
    let for_redis: Vec<&Answer> =
        answers.iter().filter(|a| a.code == "TRY_LATER" && a.message.contains(REDIS_BEHIND)).collect();
    assert!(
        for_redis.is_empty(),
        "{} orders were told TRY_LATER for Redis while Redis kept up (e.g. {:?}): {seen:?}",
        for_redis.len(),
        for_redis.first().map(|a| &a.message)
    );
    assert!(seen.get("QUEUED").copied().unwrap_or(0) >= 300, "the buyers bought: {seen:?}");
    assert_eq!(gw.refused_at_once().await, 0, "the admission limit refused nobody: {seen:?}");
}

/// Keeps the Redis at `url` busy with back-to-back scripts of `busy_ms` each for `total`
/// (bounded), leaving it a moment between them: a Redis that answers, slowly.
fn slow_redis(url: String, busy_ms: u64, total: Duration) -> tokio::task::JoinHandle<u32> {
    tokio::spawn(async move {
        let staller = client(&url).await.unwrap();
        let script = format!(
            "local t = redis.call('TIME') local t0 = t[1] * 1000000 + t[2] \
             repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - t0 > {} return 1",
            busy_ms * 1000
        );
        let (until, mut runs) = (Instant::now() + total, 0);
        while Instant::now() < until && runs < 1000 {
            let _: i64 =
                staller.eval(script.as_str(), Vec::<String>::new(), Vec::<String>::new()).await.unwrap();
            runs += 1;
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        runs
    })
}

/// A private Redis kept busy by 150 ms scripts back to back for 3.5 s: every call is answered
/// within the 300 ms timeout, but Redis serves about two calls per script, and with `batch_max
/// = 4` that is 8 orders per 150 ms (~50/s), far fewer than 400 buyers send even from a crowd
/// slowed by a loaded machine (with 32 a call, ~420/s, a slowed crowd was not behind). Orders
/// wait in their lane past what Redis answers in time: `TRY_LATER` (nothing reserved) first and
/// for nearly all, `SERVICE_DEGRADED` at most rarely.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_redis_gets_try_later_before_service_degraded() {
    let private = PrivateRedis::start(&[]).await;
    let (gw, campaign) = gateway_batching(&private.url(), workers(), 300, "batch_max = 4").await;
    let http = reqwest::Client::new();
    let buyers = tickets(&http, &gw, &campaign, 400).await;
    let slow = slow_redis(private.url(), 150, Duration::from_millis(3500));
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answers = crowd(&gw, &buyers, Instant::now() + Duration::from_secs(3)).await;
    assert!(slow.await.unwrap() > 10, "Redis was kept busy");

    let seen = codes(&answers);
    eprintln!("slow Redis: {seen:?}");
    let behind = answers.iter().filter(|a| a.code == "TRY_LATER" && a.message.contains(REDIS_BEHIND)).count();
    assert!(behind > 0, "Redis behind the crowd is told TRY_LATER: {seen:?}");
    // How many the limit refused at once, for the record only: most waited out their 300 ms
    // unsent in the lane and were told the same then. Calls written in the staller's 2 ms gaps
    // come back at once, so the quickest quarter of the calls the limit follows may stay quick
    // (a fresh clone's run under load: 0 of 1,696; 142 to 226 on a quiet machine).
    let at_once = gw.refused_at_once().await;
    eprintln!("slow Redis: {at_once} of {behind} TRY_LATER at once, by the limit");
    // A call written just as a script starts may wait out two of them: a rare SERVICE_DEGRADED
    // on a loaded machine, never the answer Redis's slowness gets.
    let degraded = seen.get("SERVICE_DEGRADED").copied().unwrap_or(0);
    assert!(degraded * 20 < behind, "TRY_LATER, not SERVICE_DEGRADED, for a Redis that answers: {seen:?}");
    // TRY_LATER from the start: most of the first refusals already (a call written just as the
    // first script began may still be the rare SERVICE_DEGRADED above, even the very first).
    let first: Vec<&str> = answers
        .iter()
        .map(|a| a.code.as_str())
        .filter(|c| matches!(*c, "TRY_LATER" | "SERVICE_DEGRADED"))
        .take(10)
        .collect();
    let try_later = first.iter().filter(|c| **c == "TRY_LATER").count();
    assert!(try_later * 2 > first.len(), "TRY_LATER before SERVICE_DEGRADED: the first refusals {first:?}");
}

/// Redis stalled for 1.5 s under 100 buyers ordering back to back: the limit falls to its floor
/// (orders are told `SERVICE_DEGRADED`, then `TRY_LATER` at once). Once Redis answers again,
/// no order sent 1 s later is told `TRY_LATER` for Redis: the limit is back where the crowd fits.
///
/// The bound is on when a refused order was sent, not when its answer was read: an order in
/// flight through the stall is answered `SERVICE_DEGRADED` after its undo (which Redis answers
/// only once it is back), and on a loaded machine this test's own threads may read that answer
/// seconds late (a fresh clone's CI once read 100 of them 3.7 s after Redis's return, all sent
/// during the stall). A `SERVICE_DEGRADED` later on is a single call past the 100 ms timeout,
/// not the limit: a CI run under load saw 7 of 1,475 orders sent 1.8–2 s after the return, with
/// no `TRY_LATER`; at most 2 % are allowed (the limit at its floor refuses nearly all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_redis_stall_the_limit_is_back_within_a_second() {
    let (answers, resumed) = a_stall_under_a_crowd("", Duration::from_millis(5500)).await;

    let seen = codes(&answers);
    let refused = |a: &&Answer| matches!(a.code.as_str(), "TRY_LATER" | "SERVICE_DEGRADED" | "ERROR");
    let during = answers.iter().filter(|a| a.at < resumed).filter(refused).count();
    assert!(during > 0, "the stall was felt: {seen:?}");
    let sent_after = || answers.iter().filter(|a| a.sent > resumed);
    assert!(sent_after().count() > 100, "orders were sent after the stall: {seen:?}");
    let behind = |a: &&Answer| a.code == "TRY_LATER" && a.message.contains(REDIS_BEHIND);
    let last = sent_after().filter(behind).map(|a| a.sent).max();
    let recovery = last.map(|at| at.duration_since(resumed)).unwrap_or_default();
    let after = codes(sent_after());
    let timeline = timeline(&answers, resumed);
    eprintln!(
        "sent after the stall: {after:?}; last TRY_LATER for Redis {recovery:?} after Redis answered again"
    );
    eprintln!("{timeline}");
    assert!(
        recovery < Duration::from_secs(1),
        "the limit came back within 1 s: an order sent {recovery:?} after Redis's return was told TRY_LATER, \
         {after:?}; by 250 ms from Redis's return (answers read):\n{timeline}"
    );
    let settled = || sent_after().filter(|a| a.sent > resumed + Duration::from_secs(1));
    let late = settled().filter(refused).count();
    assert!(
        late * 50 <= settled().count(),
        "{late} of {} orders sent 1 s after Redis's return refused: {after:?}\n{timeline}",
        settled().count()
    );
}

/// A gateway (100 ms timeout, extra `[redis]` lines `redis_extra`) on a private Redis, 100
/// buyers ordering back to back for `crowd_for`, and Redis stalled for 1.5 s from 0.5 s in: every
/// answer, and when Redis answered again.
async fn a_stall_under_a_crowd(redis_extra: &str, crowd_for: Duration) -> (Vec<Answer>, Instant) {
    let private = PrivateRedis::start(&[]).await;
    let (gw, campaign) = gateway_batching(&private.url(), workers(), 100, redis_extra).await;
    let http = reqwest::Client::new();
    let buyers = tickets(&http, &gw, &campaign, 100).await;
    let until = Instant::now() + crowd_for;
    let stall = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let stall = stall_redis(&private.url(), 1500).await;
        stall.await.unwrap().unwrap();
        Instant::now()
    };
    tokio::join!(crowd(&gw, &buyers, until), stall)
}

/// The same stall under the same crowd, once with the admission limit and once without
/// (`admission = false`, the measurement knob): the limit adds no `SERVICE_DEGRADED`. A buyer
/// whose order is in a call when Redis stalls is told `SERVICE_DEGRADED` after the 100 ms and
/// the order's undo, which Redis answers only when it is back: each buyer gets two or three
/// through the 1.5 s, with the limit or without (measured: 238 and 239, 238 and 238, 236 and
/// 242). With the limit, the orders past its floor are told `TRY_LATER` at once besides. So the
/// counts are equal but for timing, and up to a tenth more is let through; a limit that turned
/// its `TRY_LATER` into `SERVICE_DEGRADED`, or held orders into the stall, would show. The heavy
/// sale's pairs cannot show it: there `SERVICE_DEGRADED` comes in the seconds Redis forks to
/// save or rewrite its append-only file, in one run of a pair and not the other
/// (docs/benchmarks-journal.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_stall_gets_no_more_service_degraded_with_the_limit_than_without() {
    let mut degraded = Vec::new();
    for extra in ["", "admission = false"] {
        let (answers, resumed) = a_stall_under_a_crowd(extra, Duration::from_millis(2500)).await;
        let seen = codes(&answers);
        let during = codes(answers.iter().filter(|a| a.sent < resumed));
        eprintln!("stall, [redis] {extra:?}: {seen:?}; sent before Redis answered again: {during:?}");
        assert!(during.contains_key("SERVICE_DEGRADED"), "the stall was felt: {seen:?}");
        degraded.push(seen.get("SERVICE_DEGRADED").copied().unwrap_or(0));
    }
    let (with, without) = (degraded[0], degraded[1]);
    assert!(
        with <= without + without / 10,
        "SERVICE_DEGRADED: {with} with the admission limit, {without} without it, through the same stall"
    );
}

/// The answers' codes by 250 ms slot from `origin` (negative before it), one line a slot, with
/// the slowest round trip of each: where a late refusal came from.
fn timeline(answers: &[Answer], origin: Instant) -> String {
    let mut slots: BTreeMap<i64, (BTreeMap<&str, usize>, Duration)> = BTreeMap::new();
    for a in answers {
        let ms = if a.at >= origin {
            a.at.duration_since(origin).as_millis() as i64
        } else {
            -(origin.duration_since(a.at).as_millis() as i64) - 1
        };
        let slot = slots.entry(ms.div_euclid(250) * 250).or_default();
        *slot.0.entry(a.code.as_str()).or_default() += 1;
        slot.1 = slot.1.max(a.took);
    }
    slots
        .iter()
        .map(|(ms, (codes, slowest))| format!("{ms:>6} ms: {codes:?}, slowest {slowest:?}\n"))
        .collect()
}
