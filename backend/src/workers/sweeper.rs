//! The sweeper: every reservation still in a campaign's outbox after T (the gateway's produce
//! failed or timed out, a process was killed, Redis was down when the writer settled) is
//! produced again, signed with the gateway key and keyed by its user like the gateway's own
//! record (see [`crate::kafka::producer`]). Duplicates are harmless downstream: the writer's unique
//! keys absorb them.
//!
//! The sweeper claims each entry in Redis before producing it (`lua/claim.lua`), with Redis'
//! own clock: the gateway's undo of a late reservation leaves a claimed entry alone, and an
//! undone entry can no longer be claimed, so the two never both act on one reservation. T is at
//! least [`protocol::timing::SWEEP_AGE_MIN`], so a gateway has always decided its own entries
//! long before the sweeper looks at them.
//!
//! While the writer is behind its topic, an old entry may just be a record waiting in Kafka:
//! producing it again would only lengthen the backlog the writer is working through (a slow
//! broker made the sweeper re-produce thousands of records already on their way). So a pass runs
//! only once the writer has read every partition up to the end offsets seen one pass earlier
//! ([`writer_past`]); `protocol::timing::check_sweep_interval` makes that earlier look include
//! every record a gateway produced for the entries the pass takes. When the topic cannot be read
//! (Kafka down), passes run as before: their produces fail and are retried.
//!
//! A campaign with hot-stock buckets is swept bucket by bucket. Each pass also finishes the
//! transfers between buckets left in flight ([`crate::campaign::buckets::finish_transfers`]); that part
//! does not wait for the writer, the topic has nothing to do with it.

use std::time::Duration;

use fred::prelude::*;
use protocol::keys::Bucket;
use protocol::record::Reservation;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::admin::metrics::WriterMetrics;
use crate::kafka::producer::Producer;
use crate::kafka::Topic;
use crate::redis::RedisScripts;

/// Most entries re-produced per campaign per pass (bounds one pass; the next pass continues).
pub const PASS_LIMIT: i64 = 2000;

/// The Kafka key of a swept record: its user, so it lands on the user's partition like the
/// first produce; an unreadable record is keyed by itself, so the writer dead-letters it with
/// its place instead of the sweeper carrying it forever.
fn key_of(record: &str) -> String {
    Reservation::from_json(record.as_bytes()).map(|r| r.user).unwrap_or_else(|_| record.to_string())
}

/// Every published campaign and its bucket count.
async fn published(pool: &PgPool) -> anyhow::Result<Vec<(String, u32)>> {
    let rows: Vec<(String, i32)> =
        sqlx::query_as("SELECT id, buckets FROM campaigns WHERE state <> 'DRAFT' ORDER BY id")
            .fetch_all(pool)
            .await?;
    Ok(rows.into_iter().map(|(id, b)| (id, b.max(1) as u32)).collect())
}

/// One pass over every bucket of every published campaign. Returns how many records were
/// produced again.
pub async fn sweep_once(
    pool: &PgPool,
    redis: &Client,
    scripts: &RedisScripts,
    producer: &Producer,
    age: Duration,
) -> anyhow::Result<usize> {
    let mut produced = 0;
    for (campaign, count) in published(pool).await? {
        for bucket in Bucket::all(&campaign, count) {
            produced += sweep_bucket(redis, scripts, producer, &bucket, age).await?;
        }
    }
    Ok(produced)
}

/// Finishes the transfers between buckets of every published campaign left in flight for
/// longer than `age`. Returns how many were taken now.
pub async fn finish_transfers_once(
    pool: &PgPool,
    redis: &Client,
    scripts: &RedisScripts,
    age: Duration,
) -> anyhow::Result<usize> {
    let mut taken = 0;
    for (campaign, count) in published(pool).await? {
        taken +=
            crate::campaign::buckets::finish_transfers(redis, &scripts.shared, &campaign, count, age).await?;
    }
    Ok(taken)
}

/// Claims and produces again the stale outbox entries of one bucket.
async fn sweep_bucket(
    redis: &Client,
    scripts: &RedisScripts,
    producer: &Producer,
    bucket: &Bucket,
    age: Duration,
) -> anyhow::Result<usize> {
    let campaign = &bucket.campaign;
    let records = scripts.claim_for_sweep(redis, bucket, age, PASS_LIMIT).await?;
    let mut produced = 0;
    let sends = records.into_iter().map(|rec| {
        let p = producer.clone();
        async move { p.send(&key_of(&rec), rec.into_bytes()).await }
    });
    for r in futures::future::join_all(sends).await {
        match r {
            Ok(_) => produced += 1,
            // Still claimed and pending: the next pass after another `age` produces it again.
            Err(e) => {
                tracing::warn!(%campaign, bucket = bucket.index, error = %e, "sweeper produce failed; a later pass retries")
            }
        }
    }
    Ok(produced)
}

/// Whether the writer has read every partition up to `seen_end` (the end offsets one pass
/// earlier): then no entry older than the sweep age can be a record still waiting in the topic.
/// Offsets of another partition count mean the topic changed: not held back.
pub fn writer_past(seen_end: &[i64], committed: &[i64]) -> bool {
    seen_end.len() != committed.len() || seen_end.iter().zip(committed).all(|(end, c)| c >= end)
}

/// The writer's committed offset of every partition, in partition order.
async fn committed_offsets(pool: &PgPool, topic: &str, partitions: i32) -> anyhow::Result<Vec<i64>> {
    let mut out = Vec::with_capacity(partitions as usize);
    for p in 0..partitions {
        out.push(crate::writer::stored_offset(pool, topic, p).await?);
    }
    Ok(out)
}

/// What the sweeper reads and writes.
pub struct Sweeper {
    /// PostgreSQL (campaigns, the writer's offsets).
    pub pool: PgPool,
    /// Redis (the outboxes).
    pub redis: Client,
    /// The order writer's scripts.
    pub scripts: RedisScripts,
    /// Produces swept records, signed.
    pub producer: Producer,
    /// Kafka client, for the topic's end offsets.
    pub kafka: std::sync::Arc<rskafka::client::Client>,
    /// The reservations topic.
    pub topic: String,
    /// Its partition count.
    pub partitions: i32,
    /// The order writer's metrics (re-produces, failed passes).
    pub metrics: std::sync::Arc<WriterMetrics>,
}

/// Runs [`sweep_once`] every `interval` until shutdown, each pass held back while the writer is
/// behind (see the module doc).
pub async fn run(sw: Sweeper, age: Duration, interval: Duration, mut shutdown: watch::Receiver<bool>) {
    let topic = Topic { kafka: &sw.kafka, name: &sw.topic, partitions: sw.partitions };
    let mut seen_end: Option<Vec<i64>> = None;
    let mut holding = false;
    loop {
        let end = topic.end_offsets(Duration::from_secs(2)).await.ok();
        let committed = committed_offsets(&sw.pool, &sw.topic, sw.partitions).await.ok();
        let reference = seen_end.take().or_else(|| end.clone());
        let behind = matches!((&reference, &committed), (Some(r), Some(c)) if !writer_past(r, c));
        seen_end = end;
        if behind != holding {
            holding = behind;
            if behind {
                tracing::info!(committed = ?committed, end = ?reference, "writer behind its topic: sweeps wait");
            } else {
                tracing::info!("writer caught up: sweeps go on");
            }
        }
        if !behind {
            match sweep_once(&sw.pool, &sw.redis, &sw.scripts, &sw.producer, age).await {
                Ok(0) => {}
                Ok(n) => {
                    sw.metrics.sweeper_produced.inc_by(n as u64);
                    tracing::info!(n, "sweeper produced outbox entries again")
                }
                Err(e) => {
                    sw.metrics.sweeper_errors.inc();
                    tracing::warn!(error = %format!("{e:#}"), "sweep failed")
                }
            }
        }
        match finish_transfers_once(&sw.pool, &sw.redis, &sw.scripts, age).await {
            Ok(0) => {}
            Ok(n) => sw.metrics.sweeper_transfers_finished.inc_by(n as u64),
            Err(e) => {
                sw.metrics.sweeper_errors.inc();
                tracing::warn!(error = %format!("{e:#}"), "finishing transfers failed")
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
    fn a_pass_waits_until_the_writer_has_read_what_the_topic_held_a_pass_earlier() {
        assert!(writer_past(&[10, 20], &[10, 25]), "read up to the earlier end everywhere");
        assert!(!writer_past(&[10, 20], &[10, 19]), "one partition behind holds the pass");
        assert!(writer_past(&[], &[]), "no partitions");
        assert!(writer_past(&[10, 20], &[0]), "another partition count: not held");
    }

    #[test]
    fn a_swept_record_is_keyed_by_its_user_or_by_itself() {
        let rec = r#"{"request_id":"r1","campaign":"c","user":"u7","sku":"s","qty":1,"price_cents":1,"price_version":1,"stock_version":1,"reserved_at_ms":1}"#;
        assert_eq!(key_of(rec), "u7");
        assert_eq!(key_of("not json"), "not json");
    }
}
