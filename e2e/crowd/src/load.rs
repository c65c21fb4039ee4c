//! The crowd: every simulated user (and bot) gets a campaign token (its login JWT from the shop's
//! auth service, played with the demo's key; the captcha's proof of work; the token endpoint);
//! early birds knock before the window opens; everyone idles until the gateway's clock says open;
//! then the step burst of signed orders, mixed with hot users and bots; then every queued request
//! is polled (backoff, `Retry-After`) until it settles, and a share of the winners pay.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use hdrhistogram::Histogram;

use crate::client::{get_ticket, Queued, Ticket};
pub use crate::crowd::{Crowd, Mix};
use crate::mix::{attempt, bot_user, Job, Kind, Pace, Sent};
use crate::progress::Progress;

/// What the crowd saw.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Answers by kind of attempt, then by code.
    pub answers: BTreeMap<Kind, BTreeMap<String, u64>>,
    /// Latency of order requests by answer code, microseconds.
    pub latency_us: BTreeMap<String, Histogram<u64>>,
    /// Answers per 250 ms of the burst, by code.
    pub timeline: Vec<BTreeMap<String, u64>>,
    /// Wall time of the token phase (captcha, proof of work, token, for every user and bot).
    pub tokens: Duration,
    /// Accounts refused a token, by code.
    pub token_refusals: BTreeMap<String, u64>,
    /// `WAITING` answers of the campaign's waiting room on the way to the crowd's tokens.
    pub room_waiting: u64,
    /// Time the crowd's accounts spent waiting in the room, summed over accounts.
    pub room_waited: Duration,
    /// Whether the early birds went before the window opened (false: it was open already).
    pub early_before_open: bool,
    /// Wall time of the burst.
    pub burst: Duration,
    /// request id -> (user, kind, result token), for every QUEUED answer.
    pub queued: HashMap<String, (String, Kind, String)>,
    /// Final results of queued requests by code (`UNSETTLED` when still queued at the deadline).
    pub results: BTreeMap<String, u64>,
    /// Wall time until every queued request settled (or the deadline).
    pub settle: Duration,
    /// Payment answers by code.
    pub payments: BTreeMap<String, u64>,
    /// QUEUED answers of the resale wave.
    pub resale_queued: u64,
    /// Final results of the resale wave.
    pub resale_results: BTreeMap<String, u64>,
    /// When the window opened (by the gateway's clock), on this process's clock.
    pub opened: Option<Instant>,
    /// When the burst of orders started.
    pub burst_started: Option<Instant>,
    /// When the burst's first `SOLD_OUT` answer arrived.
    pub first_sold_out: Option<Instant>,
    /// Latency of the burst's order requests per second of the burst, every code, microseconds.
    pub latency_by_sec: Vec<Histogram<u64>>,
    /// Every answer by code, each request counted (a resent order's earlier answers too).
    pub sends: BTreeMap<String, u64>,
    /// Each account that wants the stock (buyers, hot users, scripts): whether every attempt of
    /// theirs ended with a retryable refusal only ([`crate::undersell::retryable`]).
    pub wanting: HashMap<String, bool>,
    /// Units left in Redis at the burst's end, its resends done (every bucket), when read.
    pub left_after_burst: Option<i64>,
    /// When the burst's last `QUEUED` answer came.
    pub last_queued: Option<Instant>,
}

impl Outcome {
    /// Counts an answer; the burst's (not the early birds' token answers, nor the resale wave's)
    /// also in the latency and the timeline.
    pub(crate) fn record(&mut self, s: Sent, burst_start: Instant) {
        let burst = !matches!(s.kind, Kind::Early | Kind::Resale);
        for t in &s.earlier {
            *self.sends.entry(t.code.clone()).or_default() += 1;
            if burst {
                self.in_burst(&t.code, t.took, t.at, burst_start);
            }
        }
        *self.sends.entry(s.code.clone()).or_default() += 1;
        if burst {
            self.in_burst(&s.code, s.took, s.at, burst_start);
        }
        if matches!(s.kind, Kind::Buyer | Kind::Hot | Kind::Script) {
            *self.wanting.entry(s.user.clone()).or_insert(true) &= crate::undersell::retryable(&s.code);
        }
        if burst && s.code == "QUEUED" && self.last_queued.is_none_or(|t| t < s.at) {
            self.last_queued = Some(s.at);
        }
        if let (true, Some(q)) = (s.code.starts_with("QUEUED"), s.queued) {
            self.queued.insert(q.request_id, (s.user, s.kind, q.result_token));
        }
        *self.answers.entry(s.kind).or_default().entry(s.code).or_default() += 1;
    }

    /// One answer of the burst (`code` after `took`, at `at`): its latency and its place on
    /// the timeline.
    fn in_burst(&mut self, code: &str, took: Duration, at: Instant, burst_start: Instant) {
        self.latency_us
            .entry(code.to_string())
            .or_insert_with(|| Histogram::new_with_bounds(1, 120_000_000, 3).expect("static bounds"))
            .saturating_record(took.as_micros() as u64);
        let sec = at.saturating_duration_since(burst_start).as_secs() as usize;
        if self.latency_by_sec.len() <= sec {
            self.latency_by_sec.resize_with(sec + 1, || {
                Histogram::new_with_bounds(1, 120_000_000, 3).expect("static bounds")
            });
        }
        self.latency_by_sec[sec].saturating_record(took.as_micros() as u64);
        if code == "SOLD_OUT" && self.first_sold_out.is_none_or(|t| at < t) {
            self.first_sold_out = Some(at);
        }
        let bucket = (at.saturating_duration_since(burst_start).as_millis() / 250) as usize;
        if self.timeline.len() <= bucket {
            self.timeline.resize(bucket + 1, BTreeMap::new());
        }
        *self.timeline[bucket].entry(code.to_string()).or_default() += 1;
    }

    /// Order attempts sent.
    pub fn attempts(&self) -> u64 {
        self.answers.values().flat_map(|m| m.values()).sum()
    }
}

/// Refuses targets off the loopback range: load goes only to this machine.
pub fn require_loopback(url: &str) -> anyhow::Result<()> {
    let host = url.split("://").nth(1).and_then(|rest| rest.split(['/', ':']).next()).unwrap_or_default();
    if host == "localhost" || host.starts_with("127.") || host == "[::1]" {
        Ok(())
    } else {
        anyhow::bail!("refusing to send load to {url}: only loopback targets are allowed")
    }
}

/// The order in which requests go out: every user's n-th request before anyone's (n+1)-th,
/// users interleaved by a fixed stride so neighbours do not arrive together.
fn schedule(users: u32, per_user: u32) -> Vec<u32> {
    let stride = 7919 % users.max(1);
    let stride = if stride == 0 || gcd(stride, users) != 1 { 1 } else { stride };
    let mut order = Vec::with_capacity((users * per_user) as usize);
    for _ in 0..per_user {
        order.extend((0..users).map(|i| (i as u64 * stride as u64 % users as u64) as u32));
    }
    order
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The burst's jobs: the buyers' schedule with, at its head (while there is stock to take, so
/// the defenses rather than the sold-out flag answer them), each hot user's attempts together
/// (in flight at once) every 10th job and a bot every 2nd, bot kinds in turn.
fn burst_jobs(crowd: &Crowd) -> Vec<Job> {
    let order = schedule(crowd.users, crowd.requests_per_user);
    let m = &crowd.mix;
    let hot = m.hot_users.min(crowd.users);
    let bot_kinds =
        [Kind::BotBadSignature, Kind::BotResend, Kind::BotReplay, Kind::BotStale, Kind::BotDevice];
    let bots = bot_kinds.len() as u32 * m.bots_per_kind;
    let (mut hot_next, mut bot_next) = (0u32, 0u32);
    let mut jobs = Vec::with_capacity(order.len() + (hot * m.hot_attempts + bots) as usize);
    for (i, u) in order.into_iter().enumerate() {
        let gateway = i;
        jobs.push(Job { user: format!("user-{u}"), kind: Kind::Buyer, gateway });
        if i % 10 == 0 && hot_next < hot {
            for _ in 0..m.hot_attempts {
                jobs.push(Job { user: format!("user-{hot_next}"), kind: Kind::Hot, gateway: jobs.len() });
            }
            hot_next += 1;
        }
        if i % 2 == 0 && bot_next < bots {
            let kind = bot_kinds[(bot_next % bot_kinds.len() as u32) as usize];
            let n = bot_next / bot_kinds.len() as u32;
            let user = if matches!(kind, Kind::BotResend | Kind::BotReplay) {
                format!("user-{u}")
            } else {
                bot_user(kind, n)
            };
            jobs.push(Job { user, kind, gateway });
            bot_next += 1;
        }
    }
    jobs
}

/// The accounts that need a token: every user, and the bots with accounts of their own.
fn accounts(crowd: &Crowd) -> Vec<String> {
    let mut all: Vec<String> = (0..crowd.users).map(|u| format!("user-{u}")).collect();
    for kind in Kind::OWN_ACCOUNT_BOTS {
        all.extend((0..crowd.mix.bots_per_kind).map(|i| bot_user(kind, i)));
    }
    all
}

/// The campaign's window start and the gateway's clock offset (server - local), milliseconds.
pub(crate) async fn window(client: &reqwest::Client, crowd: &Crowd) -> anyhow::Result<(i64, i64)> {
    let url = format!("{}/seckill/{}/info", crowd.gateways[0], crowd.campaign);
    let t0 = chrono::Utc::now().timestamp_millis();
    let info: serde_json::Value = client.get(&url).send().await?.json().await?;
    let t1 = chrono::Utc::now().timestamp_millis();
    let server = info["server_time_ms"].as_i64().unwrap_or(t1);
    let starts = info["starts_at"]
        .as_str()
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        .map(|t| t.timestamp_millis())
        .unwrap_or(server);
    Ok((starts, server - (t0 + t1) / 2))
}

/// Runs everything up to the drain: tokens, early birds, the wait, the burst, the drain.
pub async fn run(crowd: &Crowd) -> anyhow::Result<Outcome> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(crowd.concurrency)
        .timeout(Duration::from_secs(10))
        .build()?;
    let mut out = Outcome::default();
    let (starts_ms, offset_ms) = window(&client, crowd).await?;

    // Early birds knock before the window opens: the captcha and token step answers first.
    let server_now = || chrono::Utc::now().timestamp_millis() + offset_ms;
    out.early_before_open = server_now() + 500 < starts_ms;
    if out.early_before_open && crowd.mix.early_birds > 0 {
        let now = Instant::now();
        let early: Vec<String> =
            (0..crowd.mix.early_birds.min(crowd.users)).map(|u| format!("user-{u}")).collect();
        for (user, t, took) in tickets(&client, crowd, early, None).await {
            let code = match t {
                Ok(_) => "TOKEN_ISSUED".to_string(),
                Err(code) => code,
            };
            let at = Instant::now();
            out.record(
                Sent { user, kind: Kind::Early, code, queued: None, took, at, earlier: Vec::new() },
                now,
            );
        }
    }
    let wait = starts_ms - server_now();
    if wait > 0 {
        eprintln!("seckill-load: idle until the window opens by the gateway's clock ({wait} ms)");
        tokio::time::sleep(Duration::from_millis(wait as u64 + 20)).await;
    }
    let late = Duration::from_millis((server_now() - starts_ms).max(0) as u64);
    out.opened = Instant::now().checked_sub(late);

    // The window is open: everyone at once, through captcha and token, then the orders.
    eprintln!("seckill-load: window open: tokens");
    let started = Instant::now();
    let bar = Progress::start("tokens", accounts(crowd).len() as u64);
    let mut tickets_of = HashMap::new();
    for (u, t, _) in tickets(&client, crowd, accounts(crowd), Some(&bar)).await {
        match t {
            Ok(t) => {
                out.room_waiting += u64::from(t.room.waiting);
                out.room_waited += t.room.waited;
                tickets_of.insert(u, t);
            }
            Err(code) => *out.token_refusals.entry(code).or_default() += 1,
        }
    }
    bar.finish();
    out.tokens = started.elapsed();
    let tickets = tickets_of;

    eprintln!("seckill-load: burst started");
    let jobs = burst_jobs(crowd);
    let started = Instant::now();
    out.burst_started = Some(started);
    let bar = Progress::start("burst", jobs.len() as u64);
    for s in send_all(&client, crowd, &tickets, jobs, Some(&bar)).await {
        out.record(s, started);
    }
    bar.finish();
    out.burst = started.elapsed();
    out.left_after_burst = stock_left(crowd).await;
    eprintln!("seckill-load: burst done, draining");

    settle(&client, crowd, &mut out).await;
    eprintln!("seckill-load: drained in {:.1} s", out.settle.as_secs_f64());
    Ok(out)
}

/// Polls every request `out` holds as `QUEUED` to its end and pays as the crowd does
/// ([`crate::drain::drain`]), within `crowd.settle`: its results, payments and the time taken.
pub(crate) async fn settle(client: &reqwest::Client, crowd: &Crowd, out: &mut Outcome) {
    let started = Instant::now();
    let ids: Vec<(Queued, String)> = out
        .queued
        .iter()
        .map(|(id, (u, _, token))| {
            (Queued { request_id: id.clone(), result_token: token.clone() }, u.clone())
        })
        .collect();
    let (results, payments) = crate::drain::drain(client, crowd, ids, started + crowd.settle).await;
    out.results = results;
    out.payments = payments;
    out.settle = started.elapsed();
}

/// When the shop says `user`'s account was created (the login JWT's `registered_at`, carried into
/// the reservation record for the audit), `now` being unix seconds: a bot's account (`bot-...`)
/// an hour ago, a user's between 40 days and about three years ago, spread by its name.
pub fn registered_at(user: &str, now: i64) -> i64 {
    const DAY: i64 = 86_400;
    if user.starts_with("bot-") {
        return now - 3_600;
    }
    let spread = user.bytes().fold(0i64, |h, b| (h * 31 + i64::from(b)) % 1_000);
    now - (40 + spread) * DAY
}

/// Gets each of `users` a campaign token (login, captcha and its proof of work, token), with the
/// crowd's concurrency: the ticket or the refusal's code, and how long it took.
async fn tickets(
    client: &reqwest::Client,
    crowd: &Crowd,
    users: Vec<String>,
    bar: Option<&Progress>,
) -> Vec<(String, Result<Ticket, String>, Duration)> {
    futures::stream::iter(users)
        .map(|user| async move {
            let registered_at = registered_at(&user, chrono::Utc::now().timestamp());
            let login =
                crowd.auth.login(&user, serde_json::json!({"level": 1, "registered_at": registered_at}));
            let device = format!("device-{user}");
            let t0 = Instant::now();
            let t = get_ticket(client, &crowd.gateways[0], &crowd.campaign, &login, &device).await;
            if let Some(b) = bar {
                b.add(1);
            }
            let t = t.map_err(|(status, body)| {
                body["code"].as_str().map_or(format!("HTTP_{status}"), str::to_string)
            });
            (user, t, t0.elapsed())
        })
        .buffer_unordered(crowd.concurrency)
        .collect()
        .await
}

/// Units left in Redis now (every bucket of the campaign), if the crowd knows where its Redis
/// and its database are and they answer within 5 s.
pub(crate) async fn stock_left(crowd: &Crowd) -> Option<i64> {
    let (redis_url, pg_url) = crowd.stock_at.as_ref()?;
    let read = async {
        let keys = crate::sampler::stock_keys(&crowd.campaign, pg_url).await.ok()?;
        let redis = crate::stack::redis_client(redis_url).await.ok()?;
        let left = crate::sampler::stock_left(&redis, &keys, Duration::from_secs(2)).await;
        let _ = fred::prelude::ClientLike::quit(&redis).await;
        left
    };
    tokio::time::timeout(Duration::from_secs(5), read).await.ok().flatten()
}

/// Sends `jobs` in order, at most the crowd's concurrency of requests in flight at once (a
/// buyer waiting to resend holds no place), and returns every answer.
async fn send_all(
    client: &reqwest::Client,
    crowd: &Crowd,
    tickets: &HashMap<String, Ticket>,
    jobs: Vec<Job>,
    bar: Option<&Progress>,
) -> Vec<Sent> {
    let gate = Arc::new(tokio::sync::Semaphore::new(crowd.concurrency.max(1)));
    let gateways: Arc<[String]> = crowd.gateways.clone().into();
    let mut set = tokio::task::JoinSet::new();
    let mut sent = Vec::new();
    let mut keep = |done: Result<Vec<Sent>, tokio::task::JoinError>| {
        sent.extend(done.expect("an attempt does not panic"));
        if let Some(b) = bar {
            b.add(1);
        }
    };
    for job in jobs {
        let Some(ticket) = tickets.get(&job.user).cloned() else { continue };
        let Ok(first) = gate.clone().acquire_owned().await else { break };
        let give_up_percent = crowd.mix.give_up_percent;
        let mut pace = Pace { gate: Some(gate.clone()), first: Some(first), give_up_percent };
        let (client, gateways) = (client.clone(), gateways.clone());
        set.spawn(async move { attempt(&client, &gateways, &job, &ticket, &mut pace).await });
        while let Some(done) = set.try_join_next() {
            keep(done);
        }
    }
    while let Some(done) = set.join_next().await {
        keep(done);
    }
    sent
}

/// The resale wave: after unpaid orders closed and their stock went back on sale, `users`
/// buyers who got nothing in the burst try once more (fresh tokens); their results are polled.
pub async fn resale(crowd: &Crowd, out: &mut Outcome, users: u32) -> anyhow::Result<()> {
    let client = reqwest::Client::builder().timeout(Duration::from_secs(10)).build()?;
    let winners: std::collections::HashSet<&String> = out.queued.values().map(|(u, _, _)| u).collect();
    let losers: Vec<String> = (0..crowd.users)
        .map(|u| format!("user-{u}"))
        .filter(|u| !winners.contains(u))
        .take(users as usize)
        .collect();
    let tickets: HashMap<String, Ticket> = tickets(&client, crowd, losers.clone(), None)
        .await
        .into_iter()
        .filter_map(|(u, t, _)| t.ok().map(|t| (u, t)))
        .collect();
    let jobs = losers
        .into_iter()
        .enumerate()
        .map(|(i, user)| Job { user, kind: Kind::Resale, gateway: i })
        .collect();
    let now = Instant::now();
    let mut ids = Vec::new();
    for s in send_all(&client, crowd, &tickets, jobs, None).await {
        if let (true, Some(q)) = (s.code == "QUEUED", s.queued.clone()) {
            ids.push((q, s.user.clone()));
        }
        out.record(s, now);
    }
    out.resale_queued = ids.len() as u64;
    let no_pay = Crowd { payments: None, ..crowd.clone() };
    let (results, _) = crate::drain::drain(&client, &no_pay, ids, Instant::now() + crowd.settle).await;
    out.resale_results = results;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedule_sends_each_user_the_asked_number_of_times() {
        let s = schedule(10, 3);
        assert_eq!(s.len(), 30);
        for u in 0..10 {
            assert_eq!(s.iter().filter(|&&x| x == u).count(), 3);
        }
        // Users are interleaved, not in id order.
        assert_ne!(&s[..3], &[0, 1, 2]);
    }

    #[test]
    fn accounts_are_old_but_the_bots_are_new() {
        let now = 1_800_000_000;
        assert_eq!(registered_at("bot-sig-3", now), now - 3_600);
        for u in ["user-0", "user-1", "user-49999"] {
            let age_days = (now - registered_at(u, now)) / 86_400;
            assert!((40..1_040).contains(&age_days), "{u}: {age_days} days");
        }
        assert_ne!(registered_at("user-1", now), registered_at("user-2", now), "spread by name");
    }

    #[test]
    fn the_burst_mixes_hot_users_and_every_bot_kind() {
        let crowd = Crowd {
            gateways: vec!["http://127.0.0.1:1".into()],
            campaign: "c".into(),
            users: 100,
            requests_per_user: 2,
            concurrency: 1,
            settle: Duration::ZERO,
            auth: crate::client::Auth::hs256(b"k").unwrap(),
            mix: Mix {
                hot_users: 3,
                hot_attempts: 5,
                bots_per_kind: 2,
                early_birds: 0,
                pay_percent: 0,
                give_up_percent: 0,
            },
            payments: None,
            stock_at: None,
        };
        let jobs = burst_jobs(&crowd);
        let count = |k: Kind| jobs.iter().filter(|j| j.kind == k).count();
        assert_eq!(count(Kind::Buyer), 200);
        assert_eq!(count(Kind::Hot), 15);
        for k in [Kind::BotBadSignature, Kind::BotResend, Kind::BotReplay, Kind::BotStale, Kind::BotDevice] {
            assert_eq!(count(k), 2, "{k:?}");
        }
        assert!(jobs
            .iter()
            .filter(|j| Kind::OWN_ACCOUNT_BOTS.contains(&j.kind))
            .all(|j| j.user.starts_with("bot-")));
    }

    #[test]
    fn only_loopback_targets_are_allowed() {
        assert!(require_loopback("http://127.0.0.1:8080").is_ok());
        assert!(require_loopback("http://localhost:1/x").is_ok());
        assert!(require_loopback("http://10.0.0.1:8080").is_err());
        assert!(require_loopback("http://example.com").is_err());
    }
}
