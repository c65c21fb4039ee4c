//! The report of a sale: what the crowd saw, and the invariants checked against the servers.

use std::collections::BTreeMap;

use fred::prelude::*;
use serde::Serialize;
use sqlx::Row;

use crate::load::{Crowd, Outcome};
use protocol::keys::CampaignKeys;

/// Figures read back from PostgreSQL and Redis after the sale.
#[derive(Debug, Default, Serialize)]
pub struct Checks {
    /// Stock of the campaign in PostgreSQL.
    pub total_stock: i64,
    /// Units the database counts as sold.
    pub db_sold: i64,
    /// Orders by status.
    pub orders: BTreeMap<String, i64>,
    /// Units held by orders that are not closed.
    pub units_held: i64,
    /// The most units any one user holds.
    pub max_units_per_user: i64,
    /// Per-user limit (from Redis).
    pub per_user_limit: i64,
    /// Remaining stock in Redis.
    pub redis_stock: i64,
    /// Reservations still in the outbox (no order, no release yet).
    pub outbox: i64,
    /// Units buyers hold in Redis (Σ `bought`: reserved, less released, plus re-taken).
    pub held_qty: i64,
    /// Units Redis gave back (into the stock, or aside while replenishment is paused).
    pub released_qty: i64,
    /// Units released while replenishment is paused, not yet back in the stock.
    pub aside_qty: i64,
    /// The stock Redis was published with (meta `total`).
    pub redis_initial: i64,
    /// Reservations the database refused (sold out or over the limit in PostgreSQL).
    pub db_refusals: i64,
    /// Queued request ids with neither an order nor a recorded refusal.
    pub queued_without_outcome: Vec<String>,
}

/// Reads the figures.
pub async fn check(
    campaign: &str,
    pg_url: &str,
    redis_url: &str,
    outcome: &Outcome,
) -> anyhow::Result<Checks> {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(2).connect(pg_url).await?;
    let mut c = Checks::default();
    let row = sqlx::query("SELECT total_stock, sold FROM campaigns WHERE id = $1")
        .bind(campaign)
        .fetch_one(&pool)
        .await?;
    c.total_stock = row.get(0);
    c.db_sold = row.get(1);
    for row in sqlx::query("SELECT status, count(*) FROM orders WHERE campaign_id = $1 GROUP BY status")
        .bind(campaign)
        .fetch_all(&pool)
        .await?
    {
        c.orders.insert(row.get(0), row.get(1));
    }
    let row = sqlx::query(
        "SELECT coalesce(sum(qty), 0)::BIGINT, coalesce(max(qty), 0)::BIGINT FROM (
             SELECT user_id, sum(qty) AS qty FROM orders
             WHERE campaign_id = $1 AND status <> 'CLOSED' GROUP BY user_id) u",
    )
    .bind(campaign)
    .fetch_one(&pool)
    .await?;
    c.units_held = row.get(0);
    c.max_units_per_user = row.get(1);

    let ids: Vec<String> = outcome.queued.keys().cloned().collect();
    let settled: Vec<String> = sqlx::query_scalar(
        "SELECT request_id FROM orders WHERE request_id = ANY($1)
         UNION SELECT request_id FROM reservation_results WHERE request_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await?;
    let settled: std::collections::HashSet<String> = settled.into_iter().collect();
    c.db_refusals = sqlx::query_scalar(
        "SELECT count(*) FROM reservation_results WHERE campaign_id = $1 AND reason <> 'RECONCILED_NO_ORDER'",
    )
    .bind(campaign)
    .fetch_one(&pool)
    .await?;

    let redis = Client::new(Config::from_url(redis_url)?, None, None, None);
    redis.init().await?;
    let keys = CampaignKeys::new(campaign);
    let released: std::collections::HashSet<String> =
        redis.hkeys::<Vec<String>, _>(&keys.released).await?.into_iter().collect();
    c.queued_without_outcome =
        ids.into_iter().filter(|id| !settled.contains(id) && !released.contains(id)).collect();
    c.redis_stock = redis.get::<Option<i64>, _>(&keys.stock).await?.unwrap_or(0);
    c.outbox = redis.hlen(&keys.outbox).await?;
    c.per_user_limit = redis.hget::<Option<i64>, _, _>(&keys.meta, "limit").await?.unwrap_or(0);
    let bought: std::collections::HashMap<String, i64> = redis.hgetall(&keys.bought).await?;
    c.held_qty = bought.values().sum();
    c.released_qty = redis.hget::<Option<i64>, _, _>(&keys.stats, "released_qty").await?.unwrap_or(0);
    c.aside_qty = redis.hget::<Option<i64>, _, _>(&keys.stats, "aside_qty").await?.unwrap_or(0);
    c.redis_initial = redis.hget::<Option<i64>, _, _>(&keys.meta, "total").await?.unwrap_or(0);
    redis.quit().await?;
    Ok(c)
}

/// One invariant and whether it held.
#[derive(Debug, Serialize)]
pub struct Verdict {
    /// What was checked.
    pub name: &'static str,
    /// Whether it held.
    pub ok: bool,
    /// The figures behind it.
    pub detail: String,
}

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

/// The whole report.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Users in the crowd.
    pub users: u32,
    /// Requests sent.
    pub requests: u64,
    /// Seconds every user took to get a campaign token (captcha, proof of work, token).
    pub token_secs: f64,
    /// Users refused a token, by code.
    pub token_refusals: BTreeMap<String, u64>,
    /// Order answers by code.
    pub answers: BTreeMap<String, u64>,
    /// Burst wall time, seconds.
    pub burst_secs: f64,
    /// Order requests per second during the burst.
    pub requests_per_sec: f64,
    /// Latency percentiles of order requests, milliseconds: p50, p90, p99, max.
    pub latency_ms: [f64; 4],
    /// Final results of queued requests.
    pub results: BTreeMap<String, u64>,
    /// Seconds until queued requests settled.
    pub settle_secs: f64,
    /// Figures from the servers.
    pub checks: Checks,
    /// Invariants.
    pub verdicts: Vec<Verdict>,
}

impl Report {
    /// Builds the report and judges the invariants.
    pub fn new(crowd: &Crowd, out: &Outcome, checks: Checks) -> Self {
        let requests: u64 = out.answers.values().sum();
        let pct =
            |q: f64| out.latency_us.as_ref().map(|h| h.value_at_quantile(q) as f64 / 1000.0).unwrap_or(0.0);
        let max = out.latency_us.as_ref().map(|h| h.max() as f64 / 1000.0).unwrap_or(0.0);
        let queued = out.queued.len() as i64;
        let c = &checks;
        let verdicts = vec![
            Verdict {
                name: "never oversold",
                ok: c.units_held <= c.total_stock && c.db_sold == c.units_held,
                detail: format!(
                    "{} units held by orders, database sold = {}, stock = {}",
                    c.units_held, c.db_sold, c.total_stock
                ),
            },
            Verdict {
                name: "never more than the limit per user",
                ok: c.max_units_per_user <= c.per_user_limit,
                detail: format!("max per user = {}, limit = {}", c.max_units_per_user, c.per_user_limit),
            },
            Verdict {
                name: "no accepted reservation lost",
                ok: c.queued_without_outcome.is_empty(),
                detail: format!(
                    "{} queued answers, {} without an order or a recorded refusal{}",
                    queued,
                    c.queued_without_outcome.len(),
                    c.queued_without_outcome.first().map(|id| format!(" (e.g. {id})")).unwrap_or_default()
                ),
            },
            Verdict {
                name: "Redis and PostgreSQL agree",
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
            refusal_verdict(c),
        ];
        Report {
            users: crowd.users,
            requests,
            token_secs: out.tokens.as_secs_f64(),
            token_refusals: out.token_refusals.clone(),
            answers: out.answers.clone(),
            burst_secs: out.burst.as_secs_f64(),
            requests_per_sec: requests as f64 / out.burst.as_secs_f64().max(1e-9),
            latency_ms: [pct(0.5), pct(0.9), pct(0.99), max],
            results: out.results.clone(),
            settle_secs: out.settle.as_secs_f64(),
            checks,
            verdicts,
        }
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
            "tokens: {} users through captcha (proof of work) and token in {:.2} s; refused: {:?}",
            self.users, self.token_secs, self.token_refusals
        );
        let _ = writeln!(
            s,
            "crowd: {} users, {} order requests in {:.2} s ({:.0} req/s)",
            self.users, self.requests, self.burst_secs, self.requests_per_sec
        );
        let [p50, p90, p99, max] = self.latency_ms;
        let _ = writeln!(s, "latency: p50 {p50:.2} ms, p90 {p90:.2} ms, p99 {p99:.2} ms, max {max:.2} ms");
        let _ = writeln!(s, "answers:");
        for (code, n) in &self.answers {
            let _ = writeln!(s, "  {code:<20} {n:>8}");
        }
        let _ = writeln!(s, "results of queued requests (settled in {:.2} s):", self.settle_secs);
        for (code, n) in &self.results {
            let _ = writeln!(s, "  {code:<20} {n:>8}");
        }
        let c = &self.checks;
        let _ = writeln!(s, "orders in PostgreSQL: {:?}", c.orders);
        let _ = writeln!(
            s,
            "stock: {} total, {} sold (db), {} left in Redis, {} in the outbox",
            c.total_stock, c.db_sold, c.redis_stock, c.outbox
        );
        let _ = writeln!(s, "invariants:");
        for v in &self.verdicts {
            let _ = writeln!(s, "  [{}] {}: {}", if v.ok { "ok" } else { "FAILED" }, v.name, v.detail);
        }
        let _ = writeln!(s, "verdict: {}", if self.passed() { "PASS" } else { "FAIL" });
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
