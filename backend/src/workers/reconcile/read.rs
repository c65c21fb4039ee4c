//! Reading both stores into a [`Snapshot`]: PostgreSQL first, then every bucket in Redis.

use std::collections::HashMap;

use fred::prelude::*;
use protocol::keys::Bucket;
use protocol::record::Reservation;
use sqlx::PgPool;

use super::find::{PgOrder, Snapshot};
use super::ledger::BucketSnap;
use super::BetweenReads;
use crate::campaign::buckets::{parse_sent, redis_now_ms};

/// Reads both stores for `campaign`: PostgreSQL first, then Redis, so that a reservation made
/// between the two reads shows in Redis with its outbox entry (balanced), never as an order
/// without a reservation. Every bucket of the campaign is read (one read per key; under traffic
/// the buckets are not one atomic snapshot either).
pub(super) async fn snapshot(
    pool: &PgPool,
    redis: &Client,
    campaign: &str,
    between_reads: Option<&BetweenReads<'_>>,
) -> anyhow::Result<Snapshot> {
    let mut s = read_postgres(pool, campaign).await?;
    if let Some(hook) = between_reads {
        hook().await;
    }
    for bucket in Bucket::all(campaign, s.count) {
        read_bucket(redis, &bucket, &mut s).await?;
    }
    s.redis_now_ms = redis_now_ms(redis).await?;
    Ok(s)
}

/// PostgreSQL's side of `campaign`: its row (total, sold, bucket count), its orders and its
/// refusals.
async fn read_postgres(pool: &PgPool, campaign: &str) -> anyhow::Result<Snapshot> {
    let camp: Option<(i64, i64, i32)> =
        sqlx::query_as("SELECT total_stock, sold, buckets FROM campaigns WHERE id = $1")
            .bind(campaign)
            .fetch_optional(pool)
            .await?;
    let Some((total, sold, count)) = camp else {
        anyhow::bail!("campaign {campaign:?} is not in PostgreSQL")
    };
    let count = count.max(1) as u32;
    let orders = sqlx::query_as::<_, (String, String, i64, String, bool)>(
        "SELECT request_id, user_id, qty, status, redis_released FROM orders WHERE campaign_id = $1",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await?
    .into_iter()
    .map(|(r, user, qty, status, redis_released)| (r, PgOrder { user, qty, status, redis_released }))
    .collect();
    let refused = sqlx::query_as::<_, (String, i64)>(
        "SELECT request_id, qty FROM reservation_results WHERE campaign_id = $1",
    )
    .bind(campaign)
    .fetch_all(pool)
    .await?
    .into_iter()
    .collect();
    Ok(Snapshot { total, sold, orders, refused, count, ..Default::default() })
}

/// One bucket's side in Redis, added to `s`: its meta, stock, stats, outbox, releases, holdings
/// and transfers.
async fn read_bucket(redis: &Client, bucket: &Bucket, s: &mut Snapshot) -> anyhow::Result<()> {
    let keys = &bucket.keys;
    let meta: HashMap<String, String> = redis.hgetall(&keys.meta).await?;
    let stock: Option<i64> = redis.get(&keys.stock).await?;
    let stats: HashMap<String, String> = redis.hgetall(&keys.stats).await?;
    let outbox: HashMap<String, String> = redis.hgetall(&keys.outbox).await?;
    let released: HashMap<String, String> = redis.hgetall(&keys.released).await?;
    let bought: HashMap<String, i64> = redis.hgetall(&keys.bought).await?;
    let sent: HashMap<String, String> = redis.hgetall(&keys.sent).await?;
    let received: HashMap<String, i64> = redis.hgetall(&keys.received).await?;
    s.buckets.push(BucketSnap {
        index: bucket.index,
        tag: keys.meta.strip_suffix(":meta").unwrap_or(&keys.meta).to_string(),
        slot: bucket.slot(),
        share: meta.get("total").and_then(|v| v.parse().ok()).unwrap_or(0),
        stock: stock.unwrap_or(0),
        held: bought.values().sum(),
        stats,
        sent: parse_sent(&sent),
        received,
    });
    s.outbox.extend(
        outbox
            .iter()
            .filter_map(|(id, rec)| Reservation::from_json(rec.as_bytes()).ok().map(|r| (id.clone(), r))),
    );
    s.released.extend(released.into_keys());
    for (user, n) in bought {
        *s.bought.entry(user).or_default() += n;
    }
    Ok(())
}
