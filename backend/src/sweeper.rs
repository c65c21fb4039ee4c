//! The sweeper: every reservation still in a campaign's outbox after T seconds (the gateway could
//! not reach us, the produce failed, a process was killed, Redis was down when the writer settled)
//! is produced again. Duplicates are harmless downstream: the writer's unique keys absorb them.

use std::time::Duration;

use fred::prelude::*;
use protocol::keys::CampaignKeys;
use protocol::record::Reservation;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::producer::Producer;

/// Most entries re-produced per campaign per pass (bounds one pass; the next pass continues).
pub const PASS_LIMIT: i64 = 2000;

/// One pass over every published campaign. Returns how many records were produced again.
pub async fn sweep_once(
    pool: &PgPool,
    redis: &Client,
    producer: &Producer,
    age: Duration,
) -> anyhow::Result<usize> {
    let campaigns: Vec<String> =
        sqlx::query_scalar("SELECT id FROM campaigns WHERE state <> 'DRAFT' ORDER BY id")
            .fetch_all(pool)
            .await?;
    let cutoff = chrono::Utc::now().timestamp_millis() - age.as_millis() as i64;
    let mut produced = 0;
    for campaign in campaigns {
        let keys = CampaignKeys::new(&campaign);
        let ids: Vec<String> =
            redis.zrangebyscore(&keys.pending, "-inf", cutoff, false, Some((0, PASS_LIMIT))).await?;
        if ids.is_empty() {
            continue;
        }
        let records: Vec<Option<String>> = redis.hmget(&keys.outbox, ids.clone()).await?;
        let mut sends = Vec::new();
        for (id, rec) in ids.iter().zip(records) {
            let Some(rec) = rec else {
                // Acked or released between the two reads: drop the stale pending entry.
                let _: i64 = redis.zrem(&keys.pending, id.as_str()).await?;
                continue;
            };
            let user = match Reservation::from_json(rec.as_bytes()) {
                Ok(r) => r.user,
                // Unreadable outbox entry: produce it anyway (keyed by its id) so the writer
                // dead-letters it with its place, instead of sweeping it forever here.
                Err(_) => id.clone(),
            };
            let p = producer.clone();
            sends.push(async move { p.send(&user, rec.into_bytes()).await });
        }
        let now = chrono::Utc::now().timestamp_millis();
        for (id, r) in ids.iter().zip(futures::future::join_all(sends).await) {
            match r {
                Ok(_) => {
                    produced += 1;
                    // Wait another T before producing it again (XX: only if still pending), so a
                    // lagging writer is not flooded with copies.
                    let _: Option<i64> = redis
                        .zadd(
                            &keys.pending,
                            Some(SetOptions::XX),
                            None,
                            false,
                            false,
                            (now as f64, id.as_str()),
                        )
                        .await?;
                }
                Err(e) => tracing::warn!(campaign, error = %e, "sweeper produce failed; next pass retries"),
            }
        }
    }
    Ok(produced)
}

/// Runs [`sweep_once`] every `interval` until shutdown.
pub async fn run(
    pool: PgPool,
    redis: Client,
    producer: Producer,
    age: Duration,
    interval: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        match sweep_once(&pool, &redis, &producer, age).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(n, "sweeper produced outbox entries again"),
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "sweep failed"),
        }
        if crate::writer::wait_or_shutdown(&mut shutdown, interval).await {
            return;
        }
    }
}
