//! What the report reads back from PostgreSQL and Redis after the sale.

use std::collections::BTreeMap;

use fred::prelude::*;
use serde::Serialize;
use sqlx::Row;

use crate::load::Outcome;
use protocol::keys::Bucket;

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
    /// The crowd's own count of QUEUED answers (distinct request ids, one unit each).
    pub crowd_queued: i64,
    /// Of those, the ones that ended without a unit: refused in PostgreSQL, their order closed,
    /// or released in Redis without an order.
    pub crowd_ended: i64,
    /// Orders of bot accounts (`bot-...`) in PostgreSQL.
    pub bot_orders: i64,
    /// Units bot accounts hold in Redis.
    pub bot_held: i64,
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
    // The crowd's QUEUED answers that ended without a unit in PostgreSQL (a refusal, a closed
    // order); the ones released in Redis without an order are added below.
    let ended: Vec<String> = sqlx::query_scalar(
        "SELECT request_id FROM reservation_results WHERE request_id = ANY($1)
         UNION SELECT request_id FROM orders WHERE request_id = ANY($1) AND status = 'CLOSED'",
    )
    .bind(&ids)
    .fetch_all(&pool)
    .await?;
    let mut ended: std::collections::HashSet<String> = ended.into_iter().collect();
    let live: std::collections::HashSet<String> =
        sqlx::query_scalar("SELECT request_id FROM orders WHERE request_id = ANY($1) AND status <> 'CLOSED'")
            .bind(&ids)
            .fetch_all(&pool)
            .await?
            .into_iter()
            .collect();
    c.db_refusals = sqlx::query_scalar(
        "SELECT count(*) FROM reservation_results WHERE campaign_id = $1 AND reason <> 'RECONCILED_NO_ORDER'",
    )
    .bind(campaign)
    .fetch_one(&pool)
    .await?;

    // A campaign with hot-stock buckets keeps its sale in several key sets: every figure is the
    // sum over them (a buyer's records are in one bucket only, their home bucket).
    let buckets: i32 = sqlx::query_scalar("SELECT buckets FROM campaigns WHERE id = $1")
        .bind(campaign)
        .fetch_optional(&pool)
        .await?
        .unwrap_or(1);
    let redis = Client::new(Config::from_url(redis_url)?, None, None, None);
    redis.init().await?;
    let mut released = std::collections::HashSet::new();
    let mut bought = std::collections::HashMap::<String, i64>::new();
    let (mut sent, mut received) = (0i64, 0i64);
    for bucket in Bucket::all(campaign, buckets.max(1) as u32) {
        let keys = &bucket.keys;
        released.extend(redis.hkeys::<Vec<String>, _>(&keys.released).await?);
        c.redis_stock += redis.get::<Option<i64>, _>(&keys.stock).await?.unwrap_or(0);
        c.outbox += redis.hlen::<i64, _>(&keys.outbox).await?;
        if bucket.index == 0 {
            c.per_user_limit = redis.hget::<Option<i64>, _, _>(&keys.meta, "limit").await?.unwrap_or(0);
        }
        bought.extend(redis.hgetall::<std::collections::HashMap<String, i64>, _>(&keys.bought).await?);
        c.released_qty += redis.hget::<Option<i64>, _, _>(&keys.stats, "released_qty").await?.unwrap_or(0);
        c.aside_qty += redis.hget::<Option<i64>, _, _>(&keys.stats, "aside_qty").await?.unwrap_or(0);
        c.redis_initial += redis.hget::<Option<i64>, _, _>(&keys.meta, "total").await?.unwrap_or(0);
        let s: std::collections::HashMap<String, String> = redis.hgetall(&keys.sent).await?;
        sent += backend::campaign::buckets::parse_sent(&s).iter().map(|t| t.qty).sum::<i64>();
        received += redis.hvals::<Vec<i64>, _>(&keys.received).await?.iter().sum::<i64>();
    }
    // Units in flight between two buckets (sent, not yet received) are stock not yet sold.
    c.redis_stock += sent - received;
    ended.extend(ids.iter().filter(|id| released.contains(*id) && !live.contains(*id)).cloned());
    c.crowd_queued = ids.len() as i64;
    c.crowd_ended = ended.len() as i64;
    c.queued_without_outcome =
        ids.into_iter().filter(|id| !settled.contains(id) && !released.contains(id)).collect();
    c.held_qty = bought.values().sum();
    c.bot_held = bought.iter().filter(|(u, _)| u.starts_with("bot-")).map(|(_, n)| n).sum();
    c.bot_orders =
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE campaign_id = $1 AND user_id LIKE 'bot-%'")
            .bind(campaign)
            .fetch_one(&pool)
            .await?;
    redis.quit().await?;
    Ok(c)
}

/// Waits (at most `bound`) until the closer is done with the campaign: no order waits for
/// payment (the payers paid, the closer closed the rest) and every closed order's stock is back
/// in Redis (`redis_released`; the closer releases after the close commits, at its own pace, so
/// judging in between would count units in neither). Past `bound` the error says which is left:
/// orders waiting for payment, or "closed, release pending".
pub async fn wait_closed(campaign: &str, pg_url: &str, bound: std::time::Duration) -> anyhow::Result<()> {
    let pool = sqlx::postgres::PgPoolOptions::new().max_connections(1).connect(pg_url).await?;
    let deadline = std::time::Instant::now() + bound;
    loop {
        let (pending, unreleased): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'PENDING_PAYMENT'),
                    count(*) FILTER (WHERE status = 'CLOSED' AND NOT redis_released)
               FROM orders WHERE campaign_id = $1",
        )
        .bind(campaign)
        .fetch_one(&pool)
        .await?;
        let left = match (pending, unreleased) {
            (0, 0) => return Ok(()),
            (0, n) => format!("{n} orders closed, release pending (their stock is not back in Redis yet)"),
            (n, _) => format!("{n} orders still wait for payment"),
        };
        anyhow::ensure!(std::time::Instant::now() < deadline, "{left} after {bound:?}");
        eprintln!("seckill-load: {left}");
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    }
}
