//! The flood: the whole crowd sends its token requests in the first second of the sale, each
//! account then its orders at once (no token phase before a burst: an account orders as soon as
//! it holds a token, so a waiting room's pace is the pace of the orders), a share of the
//! accounts firing at the very start instant as a script would ([`crate::mix::fires_at_t0`]).
//! The sale's Redis is sampled every [`SAMPLE_EVERY`] (`INFO commandstats`, the stock) beside the
//! gateways' reservation calls, and the report gets the figures of [`Figures`]: peak `EVALSHA`
//! and reservations per second, the p99 of the `QUEUED` answers, every admitted buyer's ETA
//! error, the scripts' share of the winners against their share of the crowd, and the room's
//! targets as PASS/MISS lines ([`Figures::targets`]). The pure parts (the peak from samples, the
//! ETA error, the share) are apart from the run.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::client::{get_ticket, get_ticket_room_first, RoomWait, Ticket};
use crate::crowd::Crowd;
use crate::load::Outcome;
use crate::mix::{arrival_ms, attempt, fires_at_t0, Job, Kind, Pace, Sent};

/// How often the sale's Redis is sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

/// The flood's shape, and the room it is judged against.
#[derive(Debug, Clone)]
pub struct Flood {
    /// Percentage of the crowd's accounts that fire at the start instant (scripts).
    pub script_percent: u32,
    /// The rest of the crowd arrives over this many ms ...
    pub spread_ms: u64,
    /// ... from this many ms before the start (0: all in the first `spread_ms` after it).
    pub lead_ms: u64,
    /// The campaign's `[waiting_room] admit_per_sec`, when the room is on (the targets).
    pub admit_per_sec: Option<u64>,
    /// Each account's first token request without the work, as the buyer's page sends it when
    /// the room is on ([`get_ticket_room_first`]): its arrival at the gateway is then its first
    /// request, not one after a captcha's round trip.
    pub room_first: bool,
}

// ---------------------------------------------------------------------------------------------
// The figures (pure).

/// The highest rate of a counter over any `window` seconds: `points` are (seconds, counter value)
/// in time order; each rate is the counter's rise from a sample to the first sample at least
/// `window` later, over the time between them. A counter that falls (a restarted server) gives
/// no rate across the fall. `None` with no pair of samples `window` apart.
pub fn peak_rate(points: &[(f64, f64)], window: f64) -> Option<f64> {
    let mut peak: Option<f64> = None;
    let mut j = 0;
    for (i, &(t0, c0)) in points.iter().enumerate() {
        j = j.max(i + 1);
        while j < points.len() && points[j].0 - t0 < window {
            j += 1;
        }
        let Some(&(t1, c1)) = points.get(j) else { break };
        let fell = points[i..=j].windows(2).any(|w| w[1].1 < w[0].1);
        if !fell && t1 > t0 {
            let r = (c1 - c0) / (t1 - t0);
            peak = Some(peak.map_or(r, |p| p.max(r)));
        }
    }
    peak
}

/// One admitted buyer's wait: what it was promised and when it was let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Admission {
    /// The wait its first drawn place promised, ms.
    pub eta_ms: i64,
    /// When that wait ends, unix ms (the gateway's clock).
    pub eta_at_ms: i64,
    /// When it was let through, unix ms (the gateway's clock).
    pub admitted_at_ms: i64,
}

impl Admission {
    /// Admitted at, minus the ETA first promised, over the promised wait: 0.1 is 10 % late,
    /// -0.1 10 % early. A promised wait under 1 ms counts as 1 ms.
    pub fn error(&self) -> f64 {
        (self.admitted_at_ms - self.eta_at_ms) as f64 / self.eta_ms.max(1) as f64
    }
}

/// The ETA errors of every admitted buyer ([`Admission::error`]).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct EtaErrors {
    /// Admitted buyers that had been promised an ETA.
    pub admitted: usize,
    /// Median error (fraction of the promised wait).
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
    /// The latest (largest) error.
    pub max: f64,
    /// The earliest (smallest) error.
    pub min: f64,
    /// Share of the admitted beyond ±20 %.
    pub beyond_20: f64,
    /// The latest admission past its ETA, ms.
    pub max_late_ms: i64,
    /// The shortest promised wait, ms.
    pub shortest_wait_ms: i64,
}

/// The `q`-quantile of sorted `v` (nearest rank).
fn quantile(v: &[f64], q: f64) -> f64 {
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

impl EtaErrors {
    /// Of `admitted`; `None` when nobody waited.
    pub fn of(admitted: &[Admission]) -> Option<Self> {
        if admitted.is_empty() {
            return None;
        }
        let mut e: Vec<f64> = admitted.iter().map(Admission::error).collect();
        e.sort_by(f64::total_cmp);
        Some(Self {
            admitted: e.len(),
            p50: quantile(&e, 0.5),
            p99: quantile(&e, 0.99),
            max: e[e.len() - 1],
            min: e[0],
            beyond_20: e.iter().filter(|x| x.abs() > 0.2).count() as f64 / e.len() as f64,
            max_late_ms: admitted.iter().map(|a| a.admitted_at_ms - a.eta_at_ms).max().unwrap_or(0),
            shortest_wait_ms: admitted.iter().map(|a| a.eta_ms).min().unwrap_or(0),
        })
    }
}

/// The scripts' share of the winners against their share of the crowd.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct ScriptShare {
    /// Accounts in the crowd.
    pub accounts: u64,
    /// Of which scripts (fired at T−0).
    pub scripts: u64,
    /// Accounts that reserved a unit.
    pub winners: u64,
    /// Of which scripts.
    pub script_winners: u64,
}

impl ScriptShare {
    /// Counts `winners` (users) among `accounts`, `script` telling the scripts apart.
    pub fn of<'a>(
        accounts: impl Iterator<Item = &'a str>,
        winners: &HashSet<&str>,
        script: impl Fn(&str) -> bool,
    ) -> Self {
        let mut s = Self { accounts: 0, scripts: 0, winners: 0, script_winners: 0 };
        for a in accounts {
            let (is_script, won) = (script(a), winners.contains(a));
            s.accounts += 1;
            s.scripts += u64::from(is_script);
            s.winners += u64::from(won);
            s.script_winners += u64::from(is_script && won);
        }
        s
    }

    /// The scripts' share of the crowd.
    pub fn of_crowd(&self) -> f64 {
        self.scripts as f64 / self.accounts.max(1) as f64
    }

    /// The scripts' share of the winners.
    pub fn of_winners(&self) -> f64 {
        self.script_winners as f64 / self.winners.max(1) as f64
    }

    /// Whether the scripts won no more than their share: their share of the winners within
    /// three standard deviations of a fair draw above their share of the crowd (winners drawn
    /// at random from the crowd would pass 99.9 % of the time).
    pub fn within_share(&self) -> bool {
        let p = self.of_crowd();
        let sigma = (p * (1.0 - p) / self.winners.max(1) as f64).sqrt();
        self.of_winners() <= p + 3.0 * sigma
    }
}

/// A target of the room and whether it was met (a miss is reported, not a failed sale).
#[derive(Debug, Clone, Serialize)]
pub struct Target {
    /// What is promised.
    pub name: String,
    /// Met.
    pub met: bool,
    /// The figures.
    pub detail: String,
}

/// One sample of the sale's Redis and the gateways.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Sample {
    /// Seconds from the start instant.
    pub t: f64,
    /// `EVALSHA` calls so far (every script, every client of that Redis).
    pub evalsha: Option<u64>,
    /// Units left (every bucket).
    pub stock_left: Option<i64>,
    /// The gateways' reservation script calls so far (`reserve.lua`, one per batch).
    pub reserve_calls: Option<f64>,
}

/// The flood's figures.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    /// The room's `admit_per_sec` (none: the room was off).
    pub admit_per_sec: Option<u64>,
    /// Accounts, scripts and how the flood arrived.
    pub accounts: u64,
    /// Percentage of scripts.
    pub script_percent: u32,
    /// The spread of the crowd's arrivals, ms, and how long before the start it began.
    pub spread_ms: u64,
    /// See [`Flood::lead_ms`].
    pub lead_ms: u64,
    /// Peak `EVALSHA` per second on the sale's Redis (every script).
    pub evalsha_peak: Option<f64>,
    /// `EVALSHA` per second on that Redis before the flood (other clients of it: the floor).
    pub evalsha_before: Option<f64>,
    /// Peak reservation script calls per second (the gateways' count).
    pub reserve_calls_peak: Option<f64>,
    /// Peak units reserved per second, as the sale's Redis' stock fell.
    pub reservations_peak: Option<f64>,
    /// p99 of the `QUEUED` answers (order request to answer), ms.
    pub queued_p99_ms: Option<f64>,
    /// Seconds from the start to the last token issued.
    pub last_token_secs: f64,
    /// Every admitted buyer's ETA error.
    pub eta: Option<EtaErrors>,
    /// Buyers let through after a wait without a drawn ETA (the pre-queue's draw came with their admission).
    pub admitted_unpromised: u64,
    /// Buyers whose token request the gateway held until a turn under 100 ms away (admitted in
    /// place, `held_ms`), after a wait or not.
    pub held_in_place: u64,
    /// The scripts against the crowd.
    pub share: ScriptShare,
    /// The room's targets (judged only with the room on).
    pub targets: Vec<Target>,
    /// The samples.
    pub samples: Vec<Sample>,
}

impl Figures {
    /// The figures of a flood, its `out`come and `accounts`' room waits, the `samples` taken.
    pub fn of(
        flood: &Flood,
        out: &Outcome,
        accounts: &[(String, Option<RoomWait>)],
        samples: Vec<Sample>,
        offset_ms: i64,
    ) -> Self {
        let series = |f: &dyn Fn(&Sample) -> Option<f64>| -> Vec<(f64, f64)> {
            samples.iter().filter_map(|s| f(s).map(|v| (s.t, v))).collect()
        };
        let evalsha = series(&|s| s.evalsha.map(|v| v as f64));
        let first = -(flood.lead_ms as f64) / 1000.0;
        let before: Vec<(f64, f64)> = evalsha.iter().copied().filter(|&(t, _)| t < first - 0.05).collect();
        let taken = series(&|s| s.stock_left.map(|v| -(v as f64)));
        let mut promised = Vec::new();
        let (mut unpromised, mut held) = (0, 0);
        for room in accounts.iter().filter_map(|(_, r)| r.as_ref()) {
            held += u64::from(room.held_ms.is_some());
            match (room.promised, room.admitted_at_ms) {
                (Some(p), Some(at)) => promised.push(Admission {
                    eta_ms: p.eta_ms,
                    eta_at_ms: p.eta_at_ms,
                    admitted_at_ms: at + offset_ms,
                }),
                (None, Some(_)) => unpromised += 1,
                _ => {}
            }
        }
        let winners: HashSet<&str> = out.queued.values().map(|(u, _, _)| u.as_str()).collect();
        let scripts: HashSet<&str> = accounts
            .iter()
            .enumerate()
            .filter(|(i, _)| fires_at_t0(*i as u32, flood.script_percent))
            .map(|(_, (u, _))| u.as_str())
            .collect();
        let share =
            ScriptShare::of(accounts.iter().map(|(u, _)| u.as_str()), &winners, |u| scripts.contains(u));
        let mut f = Self {
            admit_per_sec: flood.admit_per_sec,
            accounts: accounts.len() as u64,
            script_percent: flood.script_percent,
            spread_ms: flood.spread_ms,
            lead_ms: flood.lead_ms,
            evalsha_peak: peak_rate(&evalsha, 1.0),
            evalsha_before: peak_rate(&before, 0.5).map(|r| r.max(0.0)),
            reserve_calls_peak: peak_rate(&series(&|s| s.reserve_calls), 1.0),
            reservations_peak: peak_rate(&taken, 1.0),
            queued_p99_ms: out.latency_us.get("QUEUED").map(|h| h.value_at_quantile(0.99) as f64 / 1000.0),
            last_token_secs: out.tokens.as_secs_f64(),
            eta: EtaErrors::of(&promised),
            admitted_unpromised: unpromised,
            held_in_place: held,
            share,
            targets: Vec::new(),
            samples,
        };
        f.targets = f.judge();
        f
    }

    /// The room's targets: the sale's Redis sees at most `admit_per_sec` × 1.1 reservations a
    /// second, no buyer is let through later than its ETA by more than 20 % of its wait, the
    /// scripts win no more than their share. Without a room: none.
    pub fn judge(&self) -> Vec<Target> {
        let Some(rate) = self.admit_per_sec else { return Vec::new() };
        let bound = rate as f64 * 1.1;
        let mut t = vec![Target {
            name: format!("reservations/s at the sale's Redis <= admit_per_sec x 1.1 = {bound:.0}"),
            met: self.reservations_peak.is_some_and(|p| p <= bound),
            detail: match self.reservations_peak {
                Some(p) => format!("peak {p:.0}/s over any second (stock sampled every 100 ms)"),
                None => "no stock samples".into(),
            },
        }];
        t.push(Target {
            name: "no buyer let through past its ETA by more than 20 % of its wait".into(),
            met: self.eta.as_ref().is_none_or(|e| e.max <= 0.2),
            detail: match &self.eta {
                Some(e) => format!(
                    "{} admitted after a promised wait: error p50 {:+.1} %, p99 {:+.1} %, max {:+.1} % ({} ms past), min {:+.1} %; {:.1} % beyond ±20 %; shortest wait {} ms",
                    e.admitted,
                    e.p50 * 100.0,
                    e.p99 * 100.0,
                    e.max * 100.0,
                    e.max_late_ms,
                    e.min * 100.0,
                    e.beyond_20 * 100.0,
                    e.shortest_wait_ms
                ),
                None => "nobody was promised a wait".into(),
            },
        });
        let s = &self.share;
        t.push(Target {
            name: "the scripts at T-0 win no more than their share".into(),
            met: s.within_share(),
            detail: share_detail(s),
        });
        t
    }

    /// Human-readable lines.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let room = match self.admit_per_sec {
            Some(r) => format!("waiting room ON, admit_per_sec {r}"),
            None => "waiting room OFF".into(),
        };
        let arrive = if self.lead_ms == 0 {
            format!("in the first {} ms", self.spread_ms)
        } else {
            format!("over {} ms from {} ms before the start", self.spread_ms, self.lead_ms)
        };
        let _ = writeln!(
            s,
            "flood ({room}): {} accounts {arrive}, {} % of them scripts at T-0; last token {:.2} s after the start",
            self.accounts, self.script_percent, self.last_token_secs
        );
        let rate = |r: Option<f64>| r.map_or("?".into(), |r| format!("{r:.0}"));
        let _ = writeln!(
            s,
            "  peak EVALSHA/s at the sale's Redis {} (every script; {} before the flood), reserve.lua calls/s {}, reservations/s {}",
            rate(self.evalsha_peak),
            rate(self.evalsha_before),
            rate(self.reserve_calls_peak),
            rate(self.reservations_peak)
        );
        let _ = writeln!(
            s,
            "  p99 of the QUEUED answers: {} ms",
            self.queued_p99_ms.map_or("?".into(), |p| format!("{p:.1}"))
        );
        match &self.eta {
            Some(e) => {
                let _ = writeln!(
                    s,
                    "  ETA error of {} admitted buyers: p50 {:+.1} %, p99 {:+.1} %, max {:+.1} %, min {:+.1} %, {:.1} % beyond ±20 % (latest {} ms past its ETA; {} admitted without a drawn ETA; {} held in place until a turn or a promise under 100 ms away)",
                    e.admitted,
                    e.p50 * 100.0,
                    e.p99 * 100.0,
                    e.max * 100.0,
                    e.min * 100.0,
                    e.beyond_20 * 100.0,
                    e.max_late_ms,
                    self.admitted_unpromised,
                    self.held_in_place
                );
            }
            None => {
                let _ = writeln!(s, "  ETA error: nobody waited");
            }
        }
        let _ = writeln!(s, "  {}", share_detail(&self.share));
        if !self.targets.is_empty() {
            let _ = writeln!(s, "targets (a miss is reported, not a failed sale):");
            for t in &self.targets {
                let _ = writeln!(s, "  [{}] {}: {}", if t.met { "PASS" } else { "MISS" }, t.name, t.detail);
            }
        }
        s
    }
}

fn share_detail(s: &ScriptShare) -> String {
    format!(
        "scripts at T-0: {} of {} accounts ({:.1} %), {} of {} winners ({:.1} %)",
        s.scripts,
        s.accounts,
        s.of_crowd() * 100.0,
        s.script_winners,
        s.winners,
        s.of_winners() * 100.0
    )
}

// ---------------------------------------------------------------------------------------------
// The run.

/// Samples the sale's Redis (and the gateways' reservation calls) every [`SAMPLE_EVERY`]: the
/// report's sampler ([`crate::sampler::Sampler`]) at the flood's cadence, its samples read as the
/// flood's.
pub struct Sampler(crate::sampler::Sampler);

impl Sampler {
    /// The flood's cadence: every [`SAMPLE_EVERY`], ten minutes at most, `INFO commandstats` too.
    pub const CADENCE: crate::sampler::Cadence = crate::sampler::Cadence {
        every: SAMPLE_EVERY,
        max: 6_000,
        scrape_timeout: Duration::from_millis(500),
        evalsha: true,
    };

    /// Starts on `redis_url` (`INFO commandstats` only on a single Redis: a cluster's is per
    /// node), the stock keys of `campaign`'s buckets (read from `pg_url`) and the `/metrics` URLs.
    pub async fn start(
        campaign: &str,
        pg_url: &str,
        redis_url: &str,
        metrics: Vec<String>,
    ) -> anyhow::Result<Self> {
        crate::sampler::Sampler::start_with(campaign, pg_url, redis_url, metrics, Self::CADENCE)
            .await
            .map(Self)
    }

    /// Stops; the samples timed from `start`.
    pub async fn stop(self, start: Instant) -> Vec<Sample> {
        self.0
            .stop()
            .await
            .into_iter()
            .map(|s| {
                let at = s.at.unwrap_or(start);
                let t = match at.checked_duration_since(start) {
                    Some(d) => d.as_secs_f64(),
                    None => -start.duration_since(at).as_secs_f64(),
                };
                Sample {
                    t,
                    evalsha: s.evalsha,
                    stock_left: s.stock_left,
                    reserve_calls: s.series.get("reserve_calls").copied(),
                }
            })
            .collect()
    }
}

/// What one account of the flood did.
struct Account {
    user: String,
    room: Option<RoomWait>,
    refused: Option<String>,
    sent: Vec<Sent>,
    token_at: Option<Instant>,
}

/// One account: at `at`, its token (through the room), then its orders at once. An arrival
/// before the start that the sale refuses `NOT_STARTED` (no room, so no pre-queue) asks again at
/// the start, as a buyer's countdown would.
async fn account(
    http: reqwest::Client,
    crowd: Arc<Crowd>,
    i: u32,
    kind: Kind,
    at: Instant,
    start: Instant,
    room_first: bool,
) -> Account {
    tokio::time::sleep_until(at.into()).await;
    let user = format!("user-{i}");
    let login = crowd.auth.login(&user, serde_json::json!({"level": 1}));
    let device = format!("device-{user}");
    let base = &crowd.gateways[i as usize % crowd.gateways.len()];
    let mut t = if room_first {
        get_ticket_room_first(&http, base, &crowd.campaign, &login, &device).await
    } else {
        get_ticket(&http, base, &crowd.campaign, &login, &device).await
    };
    if matches!(&t, Err((_, b)) if b["code"] == "NOT_STARTED") {
        tokio::time::sleep_until((start + Duration::from_millis(20)).into()).await;
        t = get_ticket(&http, base, &crowd.campaign, &login, &device).await;
    }
    let ticket: Ticket = match t {
        Ok(t) => t,
        Err((status, body)) => {
            let code = body["code"].as_str().map_or(format!("HTTP_{status}"), str::to_string);
            return Account { user, room: None, refused: Some(code), sent: Vec::new(), token_at: None };
        }
    };
    let token_at = Some(Instant::now());
    let mut sent = Vec::new();
    for n in 0..crowd.requests_per_user {
        let job = Job { user: user.clone(), kind, gateway: (i + n) as usize };
        let mut pace = Pace { give_up_percent: crowd.mix.give_up_percent, ..Pace::default() };
        sent.extend(attempt(&http, &crowd.gateways, &job, &ticket, &mut pace).await);
    }
    Account { user, room: Some(ticket.room), refused: None, sent, token_at }
}

/// What the flood gives the report: the outcome, each account's room wait (`None`: refused a
/// token), the start instant and the gateway's clock offset (server − local, ms).
pub struct Run {
    /// As the ordinary crowd's.
    pub outcome: Outcome,
    /// `user-<i>` in order, and its wait.
    pub accounts: Vec<(String, Option<RoomWait>)>,
    /// The start instant, on this process' clock.
    pub start: Instant,
    /// Server − local, ms.
    pub offset_ms: i64,
}

/// Runs the flood up to the drain: every account at its arrival ([`arrival_ms`]), its token,
/// its orders; then every queued request polled until it settles, a share of the winners paying.
pub async fn run(crowd: &Crowd, flood: &Flood) -> anyhow::Result<Run> {
    // A buyer in a flood waits longer for an answer than the ordinary crowd's 10 s: a request
    // given up on may still reserve, and its retry cannot tell (`UNANSWERED_THEN_*`).
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(crowd.concurrency)
        .timeout(Duration::from_secs(30))
        .build()?;
    let (starts_ms, offset_ms) = crate::load::window(&http, crowd).await?;
    let server_now = chrono::Utc::now().timestamp_millis() + offset_ms;
    let to_start = starts_ms - server_now;
    let now = Instant::now();
    let start = if to_start >= 0 {
        now + Duration::from_millis(to_start as u64)
    } else {
        now.checked_sub(Duration::from_millis(-to_start as u64)).unwrap_or(now)
    };
    let first = start.checked_sub(Duration::from_millis(flood.lead_ms)).unwrap_or(start);
    anyhow::ensure!(
        first > now + Duration::from_millis(200),
        "the flood must start before the window opens: give it more time"
    );
    eprintln!("seckill-load: the flood: {} accounts from {} ms before the start", crowd.users, flood.lead_ms);
    let shared = Arc::new(crowd.clone());
    let mut set = tokio::task::JoinSet::new();
    for i in 0..crowd.users {
        let ms = arrival_ms(i, crowd.users, flood.script_percent, flood.lead_ms, flood.spread_ms);
        let at = if ms >= 0 {
            start + Duration::from_millis(ms as u64)
        } else {
            start.checked_sub(Duration::from_millis(-ms as u64)).unwrap_or(start)
        };
        let kind = if fires_at_t0(i, flood.script_percent) { Kind::Script } else { Kind::Buyer };
        set.spawn(account(http.clone(), shared.clone(), i, kind, at, start, flood.room_first));
    }
    let mut done: Vec<Account> = Vec::with_capacity(crowd.users as usize);
    while let Some(a) = set.join_next().await {
        done.push(a?);
    }
    let mut out = Outcome { opened: Some(start), burst_started: Some(start), ..Default::default() };
    let mut last_token = start;
    let mut last_answer = start;
    let mut rooms = BTreeMap::new();
    for a in done {
        if let Some(code) = a.refused {
            *out.token_refusals.entry(code).or_default() += 1;
        }
        if let Some(t) = a.token_at {
            last_token = last_token.max(t);
        }
        if let Some(r) = &a.room {
            out.room_waiting += u64::from(r.waiting);
            out.room_waited += r.waited;
        }
        for s in a.sent {
            last_answer = last_answer.max(s.at);
            out.record(s, start);
        }
        let i: u32 = a.user.trim_start_matches("user-").parse().unwrap_or(0);
        rooms.insert(i, (a.user, a.room));
    }
    out.tokens = last_token.saturating_duration_since(start);
    out.burst = last_answer.saturating_duration_since(start);
    out.left_after_burst = crate::load::stock_left(crowd).await;
    eprintln!("seckill-load: the flood is through, draining");
    crate::load::settle(&http, crowd, &mut out).await;
    Ok(Run { outcome: out, accounts: rooms.into_values().collect(), start, offset_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_peak_is_the_steepest_second_not_the_mean_nor_one_sample() {
        // 100 ms samples: 10/s for two seconds, then 100 in one 100 ms step, then flat.
        let mut pts: Vec<(f64, f64)> = (0..=20).map(|i| (i as f64 / 10.0, i as f64)).collect();
        pts.extend((21..=40).map(|i| (i as f64 / 10.0, 120.0)));
        let peak = peak_rate(&pts, 1.0).unwrap();
        // The window holding the jump: 100 + at most 9 more units over 1.0 s.
        assert!((peak - 109.0).abs() < 1e-6, "{peak}");
        assert!(peak < 1000.0, "not the single 100 ms step scaled up");
        // Too short to hold a window.
        assert_eq!(peak_rate(&pts[..5], 1.0), None);
        // A counter that fell (a server restarted) gives no rate across the fall.
        let reset = [(0.0, 500.0), (1.0, 10.0), (2.0, 20.0)];
        assert_eq!(peak_rate(&reset, 1.0), Some(10.0));
        // Uneven sampling: the rate is over the real time between the samples.
        let uneven = [(0.0, 0.0), (0.5, 10.0), (2.0, 40.0)];
        assert_eq!(peak_rate(&uneven, 1.0), Some(20.0));
    }

    fn adm(eta_ms: i64, late_ms: i64) -> Admission {
        Admission { eta_ms, eta_at_ms: 10_000 + eta_ms, admitted_at_ms: 10_000 + eta_ms + late_ms }
    }

    #[test]
    fn the_eta_error_is_the_lateness_over_the_promised_wait() {
        assert_eq!(adm(1000, 100).error(), 0.1);
        assert_eq!(adm(1000, -250).error(), -0.25);
        assert_eq!(adm(0, 3).error(), 3.0, "an instant promise counts as a 1 ms wait");
        let e = EtaErrors::of(&[adm(1000, 50), adm(1000, 100), adm(500, 150), adm(2000, -600)]).unwrap();
        assert_eq!(e.admitted, 4);
        assert_eq!((e.max, e.min), (0.3, -0.3));
        assert_eq!(e.beyond_20, 0.5, "one late and one early beyond 20 %");
        assert_eq!(e.max_late_ms, 150);
        assert_eq!(e.shortest_wait_ms, 500);
        assert_eq!(e.p50, 0.05);
        assert_eq!(EtaErrors::of(&[]), None);
    }

    fn figures(reservations: f64, late: i64, share: ScriptShare) -> Figures {
        Figures {
            admit_per_sec: Some(100),
            accounts: share.accounts,
            script_percent: 10,
            spread_ms: 1000,
            lead_ms: 0,
            evalsha_peak: None,
            evalsha_before: None,
            reserve_calls_peak: None,
            reservations_peak: Some(reservations),
            queued_p99_ms: None,
            last_token_secs: 0.0,
            eta: EtaErrors::of(&[adm(1000, 10), adm(1000, late)]),
            admitted_unpromised: 0,
            held_in_place: 0,
            share,
            targets: Vec::new(),
            samples: Vec::new(),
        }
    }

    #[test]
    fn each_target_misses_on_its_own_figure() {
        let fair = ScriptShare { accounts: 1000, scripts: 100, winners: 100, script_winners: 10 };
        let all = |f: &Figures| f.judge().iter().map(|t| t.met).collect::<Vec<_>>();
        assert_eq!(all(&figures(110.0, 200, fair)), [true, true, true]);
        assert_eq!(all(&figures(111.0, 200, fair)), [false, true, true], "over admit_per_sec x 1.1");
        assert_eq!(all(&figures(100.0, 201, fair)), [true, false, true], "one buyer 20.1 % late");
        let greedy = ScriptShare { script_winners: 40, ..fair };
        assert_eq!(
            all(&figures(100.0, 0, greedy)),
            [true, true, false],
            "scripts took 40 % with 10 % of the crowd"
        );
        let mut off = figures(10_000.0, 10_000, greedy);
        off.admit_per_sec = None;
        assert!(off.judge().is_empty(), "no room, no targets");
    }

    #[test]
    fn the_share_counts_scripts_among_winners_and_allows_a_fair_draw_its_noise() {
        let accounts = ["a", "b", "c", "d", "e", "f", "g", "h", "i", "j"];
        let winners: HashSet<&str> = ["a", "b", "c"].into();
        let s = ScriptShare::of(accounts.iter().copied(), &winners, |u| u == "a" || u == "j");
        assert_eq!(s, ScriptShare { accounts: 10, scripts: 2, winners: 3, script_winners: 1 });
        assert!((s.of_crowd() - 0.2).abs() < 1e-9 && (s.of_winners() - 1.0 / 3.0).abs() < 1e-9);
        // 10 % of the crowd, 1,000 winners: 11 % is a fair draw's noise (3 sigma = 2.8 %), 14 % is not.
        let big = ScriptShare { accounts: 10_000, scripts: 1_000, winners: 1_000, script_winners: 110 };
        assert!(big.within_share());
        assert!(!ScriptShare { script_winners: 140, ..big }.within_share());
        assert!(ScriptShare { script_winners: 0, ..big }.within_share(), "fewer is within");
    }
}
