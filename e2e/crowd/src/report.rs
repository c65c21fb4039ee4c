//! The report of a sale: what the crowd saw, and the invariants judged on what the servers hold.

use std::collections::BTreeMap;

use serde::Serialize;

pub use crate::checks::{check, wait_closed, Checks};
use crate::load::{Crowd, Outcome};
use crate::mix::Kind;
use crate::sampler::Sample;
pub use crate::verdict::Verdict;

/// When Redis was published with the database's stock, the edge can only reserve what the
/// database has, so a database refusal means the two disagreed: zero refusals is the invariant.
/// With a different published stock (a test that plants one), refusals are the guard doing its
/// job, and the verdict says so.
fn refusal_verdict(c: &Checks) -> Verdict {
    let name = "the database refused nothing the edge reserved";
    if c.redis_initial == c.total_stock {
        Verdict {
            name,
            ok: c.db_refusals == 0,
            detail: format!(
                "{} refusals; Redis and PostgreSQL both started with {}",
                c.db_refusals, c.total_stock
            ),
        }
    } else {
        Verdict {
            name,
            ok: true,
            detail: format!(
                "{} refusals by the stock guard; Redis started with {}, PostgreSQL with {}",
                c.db_refusals, c.redis_initial, c.total_stock
            ),
        }
    }
}

/// Answers after which the crowd cannot know whether it holds a unit: SERVICE_DEGRADED, no
/// answer at all (ERROR: the request was sent, the connection was lost), and a safe retry's
/// answer after a lost one that was not QUEUED (`UNANSWERED_THEN_<code>`: the lost try may have
/// reserved).
fn ambiguous_answers(codes: &BTreeMap<String, u64>) -> i64 {
    codes
        .iter()
        .filter(|(k, _)| *k == "SERVICE_DEGRADED" || *k == "ERROR" || k.starts_with("UNANSWERED_THEN_"))
        .map(|(_, n)| *n as i64)
        .sum()
}

/// "Oversold = 0", judged on three counts that do not lean on the database's own guard (its
/// `sold <= total_stock` CHECK): the crowd's own tally of QUEUED answers (less the ones that
/// ended: refused, closed, released), what Redis' buyers hold against what Redis was published
/// with, and PostgreSQL's live orders against its `sold` counter and against the crowd's
/// promises. `ambiguous`: the crowd's SERVICE_DEGRADED answers (the gateway could not tell) and
/// its requests that got no answer at all (ERROR: the connection was lost after the request was
/// sent, as when a gateway is killed mid-burst), each of which may hold a unit, so PostgreSQL may
/// hold up to that many live units the crowd was not told QUEUED.
fn oversold_verdict(c: &Checks, ambiguous: i64) -> Verdict {
    let holding = c.crowd_queued - c.crowd_ended;
    let promised_within_stock = holding <= c.total_stock;
    let redis_within_stock = c.held_qty <= c.redis_initial;
    let pg_counter = c.db_sold == c.units_held && c.units_held <= c.total_stock;
    let pg_within_promises = c.units_held <= holding + ambiguous;
    Verdict {
        name: "oversold = 0 (the crowd's QUEUED answers, Redis and PostgreSQL agree)",
        ok: promised_within_stock && redis_within_stock && pg_counter && pg_within_promises,
        detail: format!(
            "crowd: {} QUEUED, {} ended, {holding} still promised (stock {}); Redis: buyers hold {} of {} published; \
             PostgreSQL: {} units in live orders, sold = {} ({ambiguous} SERVICE_DEGRADED or unanswered requests may each hold one)",
            c.crowd_queued, c.crowd_ended, c.total_stock, c.held_qty, c.redis_initial, c.units_held, c.db_sold
        ),
    }
}

/// Latency of one answer code, milliseconds.
#[derive(Debug, Serialize)]
pub struct Latency {
    /// Answers with this code.
    pub count: u64,
    /// Percentiles.
    pub p50: f64,
    /// 90th.
    pub p90: f64,
    /// 99th.
    pub p99: f64,
    /// 99.9th.
    pub p999: f64,
    /// Slowest.
    pub max: f64,
    /// The distribution (quantile, ms), for the page's plot.
    #[serde(skip)]
    pub curve: Vec<(f64, f64)>,
}

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Users in the crowd.
    pub users: u32,
    /// Order attempts sent (every kind).
    pub attempts: u64,
    /// Seconds every account took to get a campaign token (captcha, proof of work, token).
    pub token_secs: f64,
    /// Accounts refused a token, by code.
    pub token_refusals: BTreeMap<String, u64>,
    /// `WAITING` answers of the waiting room on the way to the tokens.
    pub room_waiting: u64,
    /// Seconds the accounts spent waiting in the room, summed.
    pub room_waited_secs: f64,
    /// Answers by kind of attempt, then code.
    pub answers: BTreeMap<String, BTreeMap<String, u64>>,
    /// Answers by code, every kind, each request counted (a resent order's earlier answers too).
    pub codes: BTreeMap<String, u64>,
    /// Order requests sent, every kind, the page's resends included.
    pub requests: u64,
    /// Order requests per second at the gateway during the burst.
    pub requests_per_sec: f64,
    /// Units reserved in the burst (its `QUEUED` answers).
    pub burst_queued: u64,
    /// Units reserved per second during the burst: from its start to its last `QUEUED` answer.
    pub sell_through_per_sec: Option<f64>,
    /// The share of the burst's requests answered `TRY_LATER`.
    pub try_later_share: f64,
    /// Units left unsold at the burst's end (`None`: not read) and buyers turned away with only
    /// retryable refusals ([`crate::undersell`]).
    pub undersell: (Option<i64>, u64),
    /// Whether the early birds went before the window opened.
    pub early_before_open: bool,
    /// Burst wall time, seconds.
    pub burst_secs: f64,
    /// Order attempts per second at the gateway during the burst.
    pub attempts_per_sec: f64,
    /// Latency by answer code.
    pub latency_ms: BTreeMap<String, Latency>,
    /// Answers per 250 ms of the burst, by code.
    pub timeline: Vec<BTreeMap<String, u64>>,
    /// Final results of queued requests.
    pub results: BTreeMap<String, u64>,
    /// Seconds until queued requests settled (the drain).
    pub drain_secs: f64,
    /// Payment answers by code.
    pub payments: BTreeMap<String, u64>,
    /// Resale wave: QUEUED answers, and their final results.
    pub resale_queued: u64,
    /// Final results of the resale wave.
    pub resale_results: BTreeMap<String, u64>,
    /// Peak resident memory of each watched process, MiB (`None`: not readable).
    pub peak_rss_mib: BTreeMap<String, Option<u64>>,
    /// `seckill_*` series scraped from each `/metrics` after the drain.
    pub metrics: BTreeMap<String, Vec<String>>,
    /// Seconds from the window's opening to the burst's start (the crowd's tokens came first).
    pub burst_start_secs: f64,
    /// Seconds from the window's opening to the first `SOLD_OUT` answer.
    pub sold_out_secs: Option<f64>,
    /// p50 and p99 of the burst's order requests in each second of the burst, ms, and the count.
    pub latency_per_sec: Vec<(f64, f64, u64)>,
    /// What the servers said while the sale ran ([`crate::sampler`]), from the window's opening.
    pub samples: Vec<Sample>,
    /// Figures from the servers.
    pub checks: Checks,
    /// Invariants.
    pub verdicts: Vec<Verdict>,
    /// The flood's figures and the room's targets, for a flood (`seckill-load --flood`).
    pub flood: Option<crate::flood::Figures>,
    // -- the rest of the shop during the sale (crate::shop) --
    /// Shop GETs through the gateway during the run, when a shop URL was given.
    pub shop: Option<crate::shop::Shop>,
    // -- end of the shop --
}

/// Seconds from `from` to `to` (negative when `to` came first).
fn since(from: Option<std::time::Instant>, to: Option<std::time::Instant>) -> Option<f64> {
    let (from, to) = (from?, to?);
    Some(match to.checked_duration_since(from) {
        Some(d) => d.as_secs_f64(),
        None => -from.duration_since(to).as_secs_f64(),
    })
}

fn latency(h: &hdrhistogram::Histogram<u64>) -> Latency {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    let curve =
        [0.0, 0.5, 0.75, 0.9, 0.95, 0.99, 0.995, 0.999, 0.9999, 1.0].iter().map(|&q| (q, ms(q))).collect();
    Latency {
        count: h.len(),
        p50: ms(0.5),
        p90: ms(0.9),
        p99: ms(0.99),
        p999: ms(0.999),
        max: h.max() as f64 / 1000.0,
        curve,
    }
}

impl Report {
    /// Builds the report and judges the invariants. `lost_allowed`: how many queued answers may
    /// end without an order or a refusal (0 but for a measured durability window).
    pub fn new(crowd: &Crowd, out: &Outcome, checks: Checks, lost_allowed: u64) -> Self {
        let attempts = out.attempts();
        let codes = out.sends.clone();
        let mut burst = BTreeMap::<&str, u64>::new();
        for (code, n) in out.timeline.iter().flatten() {
            *burst.entry(code).or_default() += n;
        }
        let burst_requests: u64 = burst.values().sum();
        let burst_queued = burst.get("QUEUED").copied().unwrap_or(0);
        let turned_away = crate::undersell::turned_away(out.wanting.values());
        let queued = out.queued.len() as i64;
        let c = &checks;
        let bot_queued: u64 =
            out.answers.iter().filter(|(k, _)| k.is_bot()).filter_map(|(_, m)| m.get("QUEUED")).sum();
        let bot_after: u64 = out
            .answers
            .iter()
            .filter(|(k, _)| k.is_bot())
            .flat_map(|(_, m)| m.iter())
            .filter(|(c, _)| c.starts_with("QUEUED_AFTER_"))
            .map(|(_, n)| n)
            .sum();
        let bot_sent: u64 =
            out.answers.iter().filter(|(k, _)| k.is_bot()).flat_map(|(_, m)| m.values()).sum();
        let early = out.answers.get(&Kind::Early);
        let early_queued = early.and_then(|m| m.get("QUEUED")).copied().unwrap_or(0);
        let lost = c.queued_without_outcome.len() as u64;
        let verdicts = vec![
            oversold_verdict(c, ambiguous_answers(&codes)),
            Verdict {
                name: "over-limit per user = 0",
                ok: c.max_units_per_user <= c.per_user_limit,
                detail: format!("max per user = {}, limit = {}", c.max_units_per_user, c.per_user_limit),
            },
            Verdict {
                name: "lost = 0 (every QUEUED answer became an order or a recorded refusal)",
                ok: lost <= lost_allowed,
                detail: format!(
                    "{} queued answers, {} without an order or a recorded refusal{}{}",
                    queued,
                    lost,
                    c.queued_without_outcome.first().map(|id| format!(" (e.g. {id})")).unwrap_or_default(),
                    match lost_allowed {
                        0 => String::new(),
                        u64::MAX => "; measured, not judged".to_string(),
                        n => format!("; up to {n} allowed"),
                    }
                ),
            },
            Verdict {
                name: "reconcile differences = 0 (Redis and PostgreSQL agree)",
                // initial - held by buyers - aside = remaining, and every unit a buyer holds is an
                // order or still in the outbox.
                ok: c.total_stock - c.held_qty - c.aside_qty == c.redis_stock
                    && c.held_qty == c.units_held + c.outbox,
                detail: format!(
                    "stock {} - held by buyers {} - aside {} = {} (Redis has {}; {} released); held {} = orders {} + outbox {}",
                    c.total_stock,
                    c.held_qty,
                    c.aside_qty,
                    c.total_stock - c.held_qty - c.aside_qty,
                    c.redis_stock,
                    c.released_qty,
                    c.held_qty,
                    c.units_held,
                    c.outbox
                ),
            },
            Verdict {
                name: "no bot request reserved anything",
                ok: bot_queued == 0 && c.bot_orders == 0 && c.bot_held == 0,
                detail: format!(
                    "{bot_sent} bot requests, {bot_queued} answered QUEUED; bot accounts hold {} units in Redis, {} orders; \
                     {bot_after} copies of a buyer's request reserved where the buyer's own had not (QUEUED_AFTER_*)",
                    c.bot_held, c.bot_orders
                ),
            },
            Verdict {
                name: "nothing reserved before the window opened",
                ok: !out.early_before_open || early_queued == 0,
                detail: match early {
                    Some(m) if out.early_before_open => format!("early birds' answers: {m:?}"),
                    _ => "no early birds (the window was open when the crowd was ready)".into(),
                },
            },
            refusal_verdict(c),
            crate::undersell::verdict(out.left_after_burst, turned_away),
        ];
        let requests: u64 = codes.values().sum();
        Report {
            users: crowd.users,
            attempts,
            token_secs: out.tokens.as_secs_f64(),
            token_refusals: out.token_refusals.clone(),
            room_waiting: out.room_waiting,
            room_waited_secs: out.room_waited.as_secs_f64(),
            answers: out.answers.iter().map(|(k, m)| (k.name().to_string(), m.clone())).collect(),
            codes,
            requests,
            requests_per_sec: requests as f64 / out.burst.as_secs_f64().max(1e-9),
            burst_queued,
            sell_through_per_sec: since(out.burst_started, out.last_queued)
                .filter(|&secs| secs > 0.0)
                .map(|secs| burst_queued as f64 / secs),
            try_later_share: burst.get("TRY_LATER").copied().unwrap_or(0) as f64
                / burst_requests.max(1) as f64,
            undersell: (out.left_after_burst, turned_away),
            early_before_open: out.early_before_open,
            burst_secs: out.burst.as_secs_f64(),
            attempts_per_sec: attempts as f64 / out.burst.as_secs_f64().max(1e-9),
            latency_ms: out.latency_us.iter().map(|(c, h)| (c.clone(), latency(h))).collect(),
            timeline: out.timeline.clone(),
            results: out.results.clone(),
            drain_secs: out.settle.as_secs_f64(),
            payments: out.payments.clone(),
            resale_queued: out.resale_queued,
            resale_results: out.resale_results.clone(),
            peak_rss_mib: BTreeMap::new(),
            metrics: BTreeMap::new(),
            burst_start_secs: since(out.opened, out.burst_started).unwrap_or(0.0),
            sold_out_secs: since(out.opened, out.first_sold_out),
            latency_per_sec: out
                .latency_by_sec
                .iter()
                .map(|h| {
                    (
                        h.value_at_quantile(0.5) as f64 / 1000.0,
                        h.value_at_quantile(0.99) as f64 / 1000.0,
                        h.len(),
                    )
                })
                .collect(),
            samples: Vec::new(),
            checks,
            verdicts,
            flood: None,
            shop: None,
        }
    }

    /// Keeps the sampler's `samples`, timed from the window's opening (`opened`).
    pub fn with_samples(mut self, opened: Option<std::time::Instant>, mut samples: Vec<Sample>) -> Self {
        for s in &mut samples {
            s.t = since(opened, s.at).unwrap_or(0.0);
        }
        self.samples = samples;
        self
    }

    /// The sale's selling figures: sell-through, the `TRY_LATER` share, what was left.
    fn selling(&self) -> String {
        let rate = self.sell_through_per_sec.map_or("-".into(), |r| format!("{r:.0}"));
        let left = self.undersell.0.map_or("?".into(), |n| n.to_string());
        format!(
            "selling: {} units reserved in the burst, {rate} per second (sell-through, to its last QUEUED); TRY_LATER {:.1} % of the burst's requests; {left} units left at the burst's end, {} buyers turned away\n",
            self.burst_queued,
            self.try_later_share * 100.0,
            self.undersell.1
        )
    }

    /// Whether every invariant held.
    pub fn passed(&self) -> bool {
        self.verdicts.iter().all(|v| v.ok)
    }

    /// Human-readable text.
    pub fn render(&self) -> String {
        use std::fmt::Write;
        let mut s = String::new();
        let _ = writeln!(s, "== flash sale report ==");
        let _ = writeln!(
            s,
            "tokens: {} accounts through captcha (proof of work) and token in {:.2} s; refused: {:?}",
            self.users, self.token_secs, self.token_refusals
        );
        let _ = writeln!(
            s,
            "waiting room: {} WAITING answers, {:.2} s spent waiting (summed over accounts)",
            self.room_waiting, self.room_waited_secs
        );
        let _ = writeln!(
            s,
            "burst: {} users, {} order attempts, {} requests with the page's resends, in {:.2} s ({:.0} requests/s at the gateway)",
            self.users, self.attempts, self.requests, self.burst_secs, self.requests_per_sec
        );
        if let Some(t) = self.sold_out_secs {
            let _ = writeln!(
                s,
                "sold out {t:.2} s after the window opened (the burst started {:.2} s after it, once the crowd had its tokens)",
                self.burst_start_secs
            );
        }
        s += &self.selling();
        let _ = writeln!(s, "answers by kind:");
        for (kind, m) in &self.answers {
            let list: Vec<String> = m.iter().map(|(c, n)| format!("{c} {n}")).collect();
            let _ = writeln!(s, "  {kind:<22} {}", list.join(", "));
        }
        let _ = writeln!(s, "latency by answer (ms):     count      p50      p90      p99    p99.9      max");
        for (code, l) in &self.latency_ms {
            let _ = writeln!(
                s,
                "  {code:<22} {:>8} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2}",
                l.count, l.p50, l.p90, l.p99, l.p999, l.max
            );
        }
        let _ = writeln!(s, "drain: queued requests settled in {:.2} s: {:?}", self.drain_secs, self.results);
        let _ = writeln!(s, "payments: {:?}", self.payments);
        if self.resale_queued > 0 || !self.resale_results.is_empty() {
            let _ = writeln!(
                s,
                "released stock resold: {} queued in the resale wave, results {:?}",
                self.resale_queued, self.resale_results
            );
        }
        let c = &self.checks;
        let _ = writeln!(s, "orders after the drain: {:?}", c.orders);
        let _ = writeln!(
            s,
            "stock: {} total, {} sold (db), {} left in Redis, {} in the outbox",
            c.total_stock, c.db_sold, c.redis_stock, c.outbox
        );
        if !self.peak_rss_mib.is_empty() {
            let list: Vec<String> = self
                .peak_rss_mib
                .iter()
                .map(|(p, m)| format!("{p} {}", m.map_or("?".into(), |m| format!("{m} MiB"))))
                .collect();
            let _ = writeln!(s, "peak RSS: {}", list.join(", "));
        }
        for (name, lines) in &self.metrics {
            let _ = writeln!(s, "/metrics of {name}: {} seckill_ series (in the JSON report)", lines.len());
        }
        // -- the rest of the shop during the sale (crate::shop) --
        if let Some(shop) = &self.shop {
            s += &shop.render();
        }
        // -- end of the shop --
        if let Some(flood) = &self.flood {
            s += &flood.render();
        }
        let _ = writeln!(s, "invariants:");
        for v in &self.verdicts {
            let _ = writeln!(s, "  [{}] {}: {}", if v.ok { "PASS" } else { "FAIL" }, v.name, v.detail);
        }
        let _ = writeln!(s, "verdict: {}", if self.passed() { "PASS" } else { "FAIL" });
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 10 units, every store and the crowd agreeing: 8 QUEUED answers, 1 ended (refused), so
    /// the crowd holds 7 promises; 7 units in live orders; Redis' buyers hold 7 of 10 published.
    fn agreeing() -> Checks {
        Checks {
            total_stock: 10,
            redis_initial: 10,
            db_sold: 7,
            units_held: 7,
            held_qty: 7,
            crowd_queued: 8,
            crowd_ended: 1,
            ..Default::default()
        }
    }

    #[test]
    fn a_request_left_unanswered_may_hold_a_unit() {
        // A gateway killed mid-burst: 594 QUEUED reached the crowd, 6 reservations were made
        // whose answers never came (ERROR); PostgreSQL rightly holds 600.
        let codes: BTreeMap<String, u64> =
            [("QUEUED".to_string(), 594), ("ERROR".to_string(), 67), ("SOLD_OUT".to_string(), 2365)].into();
        assert_eq!(ambiguous_answers(&codes), 67);
        // A timed-out request that took the last unit, its retry answered SOLD_OUT.
        let retried: BTreeMap<String, u64> =
            [("QUEUED".to_string(), 99), ("UNANSWERED_THEN_SOLD_OUT".to_string(), 1)].into();
        assert_eq!(ambiguous_answers(&retried), 1);
        let c = Checks { crowd_queued: 594, db_sold: 600, units_held: 600, held_qty: 600, ..agreeing() };
        let c = Checks { total_stock: 600, redis_initial: 600, ..c };
        assert!(oversold_verdict(&c, ambiguous_answers(&codes)).ok);
        assert!(!oversold_verdict(&c, 0).ok, "without the unanswered requests it would be a FAIL");
    }

    #[test]
    fn oversold_fails_when_the_crowd_redis_or_postgresql_disagree() {
        let v = oversold_verdict(&agreeing(), 0);
        assert!(v.ok, "{}", v.detail);
        // The crowd was promised more units than the stock (QUEUED beyond it), while the
        // database's sold counter and its CHECK look fine.
        let c = Checks { crowd_queued: 12, ..agreeing() };
        let v = oversold_verdict(&c, 0);
        assert!(!v.ok, "{}", v.detail);
        // Redis' buyers hold more than Redis was published with.
        let c = Checks { held_qty: 11, ..agreeing() };
        assert!(!oversold_verdict(&c, 0).ok);
        // PostgreSQL holds live orders nobody in the crowd was told QUEUED (nor an ambiguous
        // SERVICE_DEGRADED): units sold outside the crowd's promises.
        let c = Checks { db_sold: 9, units_held: 9, held_qty: 9, ..agreeing() };
        assert!(!oversold_verdict(&c, 0).ok);
        assert!(oversold_verdict(&c, 2).ok, "two ambiguous answers may each hold a unit");
        // The database's counter is not its live orders.
        let c = Checks { db_sold: 6, ..agreeing() };
        assert!(!oversold_verdict(&c, 0).ok);
    }

    /// A crowd of `users` buyers; what the judge needs of it.
    fn crowd(users: u32) -> Crowd {
        Crowd {
            gateways: vec!["http://127.0.0.1:1".into()],
            campaign: "c".into(),
            users,
            requests_per_user: 1,
            concurrency: 1,
            settle: std::time::Duration::ZERO,
            auth: crate::client::Auth::hs256(b"k").unwrap(),
            mix: crate::crowd::Mix {
                hot_users: 0,
                hot_attempts: 0,
                bots_per_kind: 0,
                early_birds: 0,
                pay_percent: 0,
                give_up_percent: 0,
            },
            payments: None,
            stock_at: None,
        }
    }

    /// One buyer's attempt: `code` last, after resending the page's way on each of `earlier`.
    fn sent(user: &str, code: &str, earlier: &[&str]) -> crate::mix::Sent {
        let (took, at) = (std::time::Duration::from_millis(5), std::time::Instant::now());
        let earlier = earlier.iter().map(|c| crate::mix::Try { code: c.to_string(), took, at }).collect();
        crate::mix::Sent {
            user: user.into(),
            kind: Kind::Buyer,
            code: code.into(),
            queued: None,
            took,
            at,
            earlier,
        }
    }

    #[test]
    fn the_judge_fails_a_sale_that_left_stock_while_resending_buyers_went_home_empty() {
        let mut out = Outcome::default();
        let start = std::time::Instant::now();
        out.record(sent("user-0", "QUEUED", &["TRY_LATER"]), start);
        for u in 1..4 {
            let tries = ["TRY_LATER", "SERVICE_DEGRADED", "TRY_LATER", "ERROR", "TRY_LATER"];
            out.record(sent(&format!("user-{u}"), "TRY_LATER", &tries), start);
        }
        out.record(sent("user-4", "SOLD_OUT", &[]), start);
        out.left_after_burst = Some(2);
        // One unit held by the one QUEUED buyer, in every store.
        let checks = || Checks {
            total_stock: 3,
            redis_initial: 3,
            db_sold: 1,
            units_held: 1,
            held_qty: 1,
            crowd_queued: 1,
            ..Default::default()
        };
        let report = Report::new(&crowd(5), &out, checks(), 0);
        let v = report.verdicts.last().unwrap();
        assert!(v.name.starts_with("undersold = 0"), "{}", v.name);
        assert!(!v.ok, "2 units left, 3 resending buyers home empty: {}", v.detail);
        assert!(v.detail.starts_with("undersold 2:"), "{}", v.detail);
        assert!(!report.passed());
        // Every request counted: 1 + 3 x 6 + 1 sends, TRY_LATER 1 + 3 x 4 of them.
        assert_eq!(report.requests, 21);
        assert!((report.try_later_share - 13.0 / 21.0).abs() < 1e-9, "{}", report.try_later_share);
        // The same sale sold out by the burst's end: nothing undersold.
        out.left_after_burst = Some(0);
        assert!(Report::new(&crowd(5), &out, checks(), 0).verdicts.last().unwrap().ok);
    }

    #[test]
    fn a_refusal_fails_the_sale_when_both_stores_started_equal() {
        let mut c = Checks { total_stock: 10, redis_initial: 10, ..Default::default() };
        assert!(refusal_verdict(&c).ok);
        c.db_refusals = 1;
        let v = refusal_verdict(&c);
        assert!(!v.ok, "{}", v.detail);
        c.redis_initial = 12;
        assert!(refusal_verdict(&c).ok, "a planted difference: the guard refusing is right");
    }
}
