//! The sweeper: every reservation still in a campaign's outbox after T (the gateway's produce
//! failed or timed out, a process was killed, Redis was down when the writer settled) is
//! produced again, signed with the gateway key and keyed by its user like the gateway's own
//! record (see [`crate::producer`]). Duplicates are harmless downstream: the writer's unique
//! keys absorb them.
//!
//! The sweeper claims each entry in Redis before producing it (`lua/claim.lua`), with Redis'
//! own clock: the gateway's undo of a late reservation leaves a claimed entry alone, and an
//! undone entry can no longer be claimed, so the two never both act on one reservation. T is at
//! least [`protocol::timing::SWEEP_AGE_MIN`], so a gateway has always decided its own entries
//! long before the sweeper looks at them.

use std::time::Duration;

use fred::prelude::*;
use protocol::record::Reservation;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::metrics::WriterMetrics;
use crate::producer::Producer;
use crate::redis::RedisScripts;

/// Most entries re-produced per campaign per pass (bounds one pass; the next pass continues).
pub const PASS_LIMIT: i64 = 2000;

/// The Kafka key of a swept record: its user, so it lands on the user's partition like the
/// first produce; an unreadable record is keyed by itself, so the writer dead-letters it with
/// its place instead of the sweeper carrying it forever.
fn key_of(record: &str) -> String {
    Reservation::from_json(record.as_bytes()).map(|r| r.user).unwrap_or_else(|_| record.to_string())
}

/// One pass over every published campaign. Returns how many records were produced again.
pub async fn sweep_once(
    pool: &PgPool,
    redis: &Client,
    scripts: &RedisScripts,
    producer: &Producer,
    age: Duration,
) -> anyhow::Result<usize> {
    let campaigns: Vec<String> =
        sqlx::query_scalar("SELECT id FROM campaigns WHERE state <> 'DRAFT' ORDER BY id")
            .fetch_all(pool)
            .await?;
    let mut produced = 0;
    for campaign in campaigns {
        let records = scripts.claim_for_sweep(redis, &campaign, age, PASS_LIMIT).await?;
        if records.is_empty() {
            continue;
        }
        let sends = records.into_iter().map(|rec| {
            let p = producer.clone();
            async move { p.send(&key_of(&rec), rec.into_bytes()).await }
        });
        for r in futures::future::join_all(sends).await {
            match r {
                Ok(_) => produced += 1,
                // Still claimed and pending: the next pass after another `age` produces it again.
                Err(e) => {
                    tracing::warn!(campaign, error = %e, "sweeper produce failed; a later pass retries")
                }
            }
        }
    }
    Ok(produced)
}

/// Runs [`sweep_once`] every `interval` until shutdown, counting in `metrics`.
#[allow(clippy::too_many_arguments)]
pub async fn run(
    pool: PgPool,
    redis: Client,
    scripts: RedisScripts,
    producer: Producer,
    age: Duration,
    interval: Duration,
    metrics: std::sync::Arc<WriterMetrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        match sweep_once(&pool, &redis, &scripts, &producer, age).await {
            Ok(0) => {}
            Ok(n) => {
                metrics.sweeper_produced.inc_by(n as u64);
                tracing::info!(n, "sweeper produced outbox entries again")
            }
            Err(e) => {
                metrics.sweeper_errors.inc();
                tracing::warn!(error = %format!("{e:#}"), "sweep failed")
            }
        }
        if crate::writer::wait_or_shutdown(&mut shutdown, interval).await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_swept_record_is_keyed_by_its_user_or_by_itself() {
        let rec = r#"{"request_id":"r1","campaign":"c","user":"u7","sku":"s","qty":1,"price_cents":1,"price_version":1,"stock_version":1,"reserved_at_ms":1}"#;
        assert_eq!(key_of(rec), "u7");
        assert_eq!(key_of("not json"), "not json");
    }
}
