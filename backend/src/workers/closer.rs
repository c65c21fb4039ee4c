//! The close worker: orders unpaid at their pay-by time are closed, and only a close that wins
//! gives the stock back — in PostgreSQL (sold − qty and a CLOSE ledger row, same transaction) and
//! then in Redis (release.lua, idempotent by request id: back into the stock with a replenish
//! message, or aside while the campaign pauses replenishment). Payment and close both update
//! `WHERE status = 'PENDING_PAYMENT'`, so on one order exactly one of them wins.
//!
//! If Redis is down after the commit, the order stays `redis_released = FALSE` and every pass
//! retries it until Redis takes it.

use std::collections::BTreeMap;
use std::time::Duration;

use fred::prelude::Client as RedisClient;
use protocol::keys::Bucket;
use protocol::scripts::ReleaseCall;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::admin::metrics::WriterMetrics;
use crate::redis::RedisScripts;

/// Closed orders released in one `release.lua` call (one bucket's): one call each gave back about
/// 530 orders a second.
pub const RELEASE_BATCH: usize = 100;

/// Closes at most `limit` overdue orders in one transaction. Returns how many it closed.
pub async fn close_due(pool: &PgPool, limit: i64) -> anyhow::Result<usize> {
    let mut tx = pool.begin().await?;
    let closed: Vec<(String, String, i64)> = sqlx::query_as(
        "WITH due AS (
             SELECT id FROM orders
              WHERE status = 'PENDING_PAYMENT' AND pay_by < now()
              ORDER BY pay_by
              LIMIT $1
              FOR UPDATE SKIP LOCKED)
         UPDATE orders o SET status = 'CLOSED', closed_at = now()
           FROM due
          WHERE o.id = due.id AND o.status = 'PENDING_PAYMENT'
         RETURNING o.campaign_id, o.request_id, o.qty",
    )
    .bind(limit)
    .fetch_all(&mut *tx)
    .await?;
    if closed.is_empty() {
        tx.rollback().await?;
        return Ok(0);
    }
    let mut per: BTreeMap<&str, i64> = BTreeMap::new();
    for (c, _, q) in &closed {
        *per.entry(c.as_str()).or_default() += q;
    }
    let (pc, pn): (Vec<String>, Vec<i64>) = per.iter().map(|(c, n)| (c.to_string(), *n)).unzip();
    // Campaign rows are locked in id order (UPDATE ... FROM sorted input), like the writer.
    sqlx::query(
        "UPDATE campaigns c SET sold = c.sold - d.n, updated_at = now()
           FROM (SELECT * FROM UNNEST($1::text[], $2::int8[]) AS t(id, n) ORDER BY id) d
          WHERE c.id = d.id",
    )
    .bind(&pc)
    .bind(&pn)
    .execute(&mut *tx)
    .await?;
    let cs: Vec<&str> = closed.iter().map(|c| c.0.as_str()).collect();
    let rs: Vec<&str> = closed.iter().map(|c| c.1.as_str()).collect();
    let qs: Vec<i64> = closed.iter().map(|c| c.2).collect();
    sqlx::query(
        "INSERT INTO stock_ledger (campaign_id, request_id, delta, reason)
         SELECT c, r, q, 'CLOSE' FROM UNNEST($1::text[], $2::text[], $3::int8[]) AS t(c, r, q)
         ON CONFLICT DO NOTHING",
    )
    .bind(&cs)
    .bind(&rs)
    .bind(&qs)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(closed.len())
}

/// Gives back to Redis the stock of closed orders not released there yet, each into its
/// buyer's home bucket. Returns how many were released now.
pub async fn release_closed(
    pool: &PgPool,
    redis: &RedisClient,
    scripts: &RedisScripts,
    limit: i64,
) -> anyhow::Result<usize> {
    // The buyer's home bucket holds the reservation: B comes with the order.
    let rows: Vec<(i64, String, String, String, i64, i32)> = sqlx::query_as(
        "SELECT o.id, o.campaign_id, o.request_id, o.user_id, o.qty,
                COALESCE((SELECT c.buckets FROM campaigns c WHERE c.id = o.campaign_id), 1)
           FROM orders o
          WHERE o.status = 'CLOSED' AND NOT o.redis_released
          ORDER BY o.id LIMIT $1",
    )
    .bind(limit)
    .fetch_all(pool)
    .await?;
    // One release.lua call per bucket and RELEASE_BATCH orders (each released at most once, as
    // in a call of its own), in order of the orders' ids within each bucket.
    let mut per_bucket: BTreeMap<(String, u32, u32), Vec<(i64, ReleaseCall)>> = BTreeMap::new();
    for (id, campaign, request_id, user, qty, buckets) in rows {
        let home = Bucket::of_user(&campaign, &user, buckets.max(1) as u32);
        let call = ReleaseCall { request_id, user, qty, ..ReleaseCall::default() };
        per_bucket.entry((campaign, home.index, home.count)).or_default().push((id, call));
    }
    let mut done = Vec::new();
    'buckets: for ((campaign, index, count), orders) in per_bucket {
        let home = Bucket::nth(&campaign, index, count);
        for chunk in orders.chunks(RELEASE_BATCH) {
            let calls: Vec<ReleaseCall> = chunk.iter().map(|(_, c)| c.clone()).collect();
            match scripts.shared.release_batch(redis, &home, &calls).await {
                Ok(_) => done.extend(chunk.iter().map(|(id, _)| *id)),
                Err(e) => {
                    let first = &chunk[0].1.request_id;
                    tracing::warn!(first, n = chunk.len(), error = %e, "release after close failed; will retry");
                    break 'buckets;
                }
            }
        }
    }
    if !done.is_empty() {
        sqlx::query("UPDATE orders SET redis_released = TRUE WHERE id = ANY($1)")
            .bind(&done)
            .execute(pool)
            .await?;
    }
    Ok(done.len())
}

/// Runs the close worker every `interval` until shutdown, counting in `metrics`.
pub async fn run(
    pool: PgPool,
    redis: RedisClient,
    scripts: RedisScripts,
    batch: i64,
    interval: Duration,
    metrics: std::sync::Arc<WriterMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        loop {
            let closed = close_due(&pool, batch).await;
            if let Ok(n) = closed {
                metrics.closer_closed.inc_by(n as u64);
            }
            match closed {
                Ok(n) if n as i64 == batch => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %format!("{e:#}"), "close pass failed");
                    break;
                }
            }
        }
        match release_closed(&pool, &redis, &scripts, batch).await {
            Ok(n) => metrics.closer_released.inc_by(n as u64),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "release pass failed"),
        }
        if crate::writer::wait_or_shutdown(&mut shutdown, interval).await {
            return;
        }
    }
}
