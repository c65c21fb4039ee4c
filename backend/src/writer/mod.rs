//! The writer: Kafka partitions into PostgreSQL, one transaction per batch, exactly-once effect.
//!
//! Read top to bottom: [`run_partition`] fetches from the offset stored in `consumer_offsets`;
//! [`write_batch`] turns a batch into a handful of set-based statements (UNNEST arrays) inside
//! one transaction — orders, the conditional stock update, ledger rows, refusals, dead letters and
//! the next offset — so a crash anywhere replays at most one uncommitted batch, which the unique
//! keys absorb; [`settle`] then acknowledges the outbox in Redis (ordered) or releases the stock
//! (refused). If Redis is down at that point nothing is lost: the outbox entry stays, the sweeper
//! produces it again, and the redelivered record settles again (both steps are idempotent).
//!
//! Every record must carry the gateway key's signature of its value (Kafka header
//! [`protocol::signing::RECORD_SIGNATURE_HEADER`], see [`crate::kafka::produce`] for the record format): one without it,
//! or with one that does not match, is dead-lettered with its offset and never becomes an order,
//! so only what the gateway, the sweeper or `order-writer produce` signed can take stock.
//!
//! Inside: `decide` (pure: verifying and decoding records, and the decision for each), `store` (the SQL),
//! `batch` (one batch's transaction), `fetch` (the read-ahead task), `retry` (pure: what
//! to do after a failed write) and `fallback` (applying it); this module holds the partition
//! loop and the Redis settlement.
//!
//! A batch PostgreSQL keeps refusing does not block its partition: after `writer.batch_retries`
//! tries it is written one record per transaction, and a record refused that often alone is
//! dead-lettered alone. An unreachable PostgreSQL is waited for; nothing is dead-lettered then.
//!
//! A partition held by lease ([`crate::writer::leases`]) is written under a [`Fence`]: each transaction
//! commits only if the lease still names this writer and epoch, checked in that transaction; a
//! refused one is rolled back and the partition dropped (its new owner reads it from the stored
//! offset).

mod batch;
mod decide;
mod fallback;
mod fetch;
mod retry;
mod store;

pub mod leases;

use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

pub use batch::{write_batch, write_batch_fenced};
pub use retry::Fenced;
pub use store::stored_offset;

use fred::prelude::{Client as RedisClient, HashesInterface};
use protocol::keys::Bucket;
use protocol::record::Reservation;
use protocol::signing::Signer;
use rskafka::client::Client as KafkaClient;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::admin::metrics::WriterMetrics;
use crate::conf::WriterConf;
use crate::kafka;
use crate::redis::RedisScripts;

/// One fetched Kafka record: its offset, value and signature header.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// Offset in the partition.
    pub offset: i64,
    /// Record value (`None` for a tombstone, which is dead-lettered).
    pub value: Option<Vec<u8>>,
    /// The record's [`protocol::signing::RECORD_SIGNATURE_HEADER`] value, if it has one: the hex HMAC-SHA256 of the
    /// value under the gateway key. A record without a valid one is dead-lettered, never
    /// ordered.
    pub signature: Option<Vec<u8>>,
}

impl Incoming {
    /// A record as the gateway, the sweeper or `order-writer produce` write it: `value` with its
    /// signature by `signer`.
    pub fn signed(offset: i64, value: Vec<u8>, signer: &Signer) -> Self {
        let signature = Some(signer.sign(&value).into_bytes());
        Self { offset, value: Some(value), signature }
    }
}

/// A reservation the database rejected (it gets a `reservation_results` row, no order), and
/// why.
#[derive(Debug, Clone)]
pub struct Rejected {
    /// The reservation.
    pub record: Reservation,
    /// `SOLD_OUT` or `FAILED`.
    pub status: &'static str,
    /// Reason code (`SOLD_OUT`, `LIMIT_REACHED`, `CAMPAIGN_UNKNOWN`, ...).
    pub reason: String,
}

/// What a committed batch decided; [`settle`] applies it to Redis.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Request ids that have an order (new, or from an earlier delivery), by the bucket whose
    /// outbox holds them (the buyer's home bucket, [`Reservation::bucket`]).
    pub ordered: BTreeMap<HomeBucket, Vec<String>>,
    /// Orders inserted by this batch.
    pub inserted: usize,
    /// Reservations refused (now or by an earlier delivery): their stock goes back to Redis.
    pub refused: Vec<Rejected>,
    /// Records sent to `dead_letters`.
    pub dead: usize,
}

/// The bucket whose outbox an ordered request id is acked in: the buyer's home bucket
/// ([`Bucket::nth`]'s arguments).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HomeBucket {
    /// Campaign id.
    pub campaign: String,
    /// The bucket, from 0.
    pub index: u32,
    /// How many buckets the campaign has.
    pub count: u32,
}

impl HomeBucket {
    /// The bucket of `r`: the buyer's home bucket ([`Reservation::bucket`]).
    pub fn of(r: &Reservation) -> Self {
        let b = r.bucket();
        Self { campaign: b.campaign, index: b.index, count: b.count }
    }

    /// Its keys.
    pub fn bucket(&self) -> Bucket {
        Bucket::nth(&self.campaign, self.index, self.count)
    }
}

impl BatchOutcome {
    /// Counts `r` as ordered, under its home bucket.
    pub fn add_ordered(&mut self, r: &Reservation) {
        self.ordered.entry(HomeBucket::of(r)).or_default().push(r.request_id.clone());
    }

    /// Adds what a later transaction of the same chunk decided.
    fn absorb(&mut self, other: BatchOutcome) {
        for (home, ids) in other.ordered {
            self.ordered.entry(home).or_default().extend(ids);
        }
        self.inserted += other.inserted;
        self.refused.extend(other.refused);
        self.dead += other.dead;
    }
}

/// Applies a committed batch to Redis: ack the ordered, release the refused (compensation;
/// `release.lua` tells the gateways when units go back to the sale). Errors are logged, not
/// returned: what fails here is retried through the sweeper (the outbox entry stays until this
/// succeeds).
pub async fn settle(redis: &RedisClient, scripts: &RedisScripts, outcome: &BatchOutcome) {
    for (home, ids) in &outcome.ordered {
        if let Err(e) = scripts.ack(redis, &home.bucket(), ids).await {
            tracing::warn!(campaign = home.campaign, bucket = home.index, error = %format!("{e:#}"), "outbox ack failed; the sweeper will redeliver");
        }
    }
    for f in &outcome.refused {
        let r = &f.record;
        // Only a reservation still in the outbox holds units in Redis (refused ones are never
        // acked): a record Redis never reserved (lost data, a forged or replayed record) must not
        // give stock back. A reservation released before is no longer there either.
        let bucket = r.bucket();
        match redis.hexists::<bool, _, _>(&bucket.keys.outbox, &r.request_id).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(request_id = %r.request_id, error = %e, "compensation check failed; the sweeper will redeliver");
                continue;
            }
        }
        // Refused for want of stock: the database had no unit left, so Redis reserved one the
        // sale does not have (it came back from an older disk, say). Set aside, not given back:
        // back in the stock it would be sold and refused again, buyer after buyer, until
        // reconcile adopts the orders Redis lost (from the units set aside first).
        let released = if f.status == "SOLD_OUT" {
            scripts.shared.set_aside(redis, &bucket, &r.request_id, &r.user, r.qty).await
        } else {
            scripts.shared.release(redis, &bucket, &r.request_id, &r.user, r.qty).await
        };
        if let Err(e) = released {
            tracing::warn!(request_id = %r.request_id, error = %e, "compensation failed; the sweeper will redeliver");
        }
    }
}

/// The lease a partition is written under: every transaction checks that the partition's lease
/// row still names `owner` and `epoch` and has not expired.
#[derive(Debug, Clone)]
pub struct Fence {
    /// This writer's id in `partition_leases.owner`.
    pub owner: Arc<str>,
    /// The epoch of the claim.
    pub epoch: i64,
    /// The longest a transaction of the partition may idle before PostgreSQL ends its session
    /// (the lease's renewal interval: short, so a paused writer's locks are freed well within
    /// a lease).
    pub idle: Duration,
}

/// What a partition consumer needs.
#[derive(Clone)]
pub struct WriterCtx {
    /// PostgreSQL.
    pub pool: PgPool,
    /// Redis.
    pub redis: RedisClient,
    /// Scripts.
    pub scripts: RedisScripts,
    /// Kafka client.
    pub kafka: Arc<KafkaClient>,
    /// Topic.
    pub topic: String,
    /// Verifies each record's signature (the config's `gateway_key`).
    pub signer: Arc<Signer>,
    /// Batch and fetch settings.
    pub cfg: WriterConf,
    /// Where the writers count their work.
    pub metrics: Arc<WriterMetrics>,
}

/// Consumes one partition until `shutdown` turns true. A batch in flight is finished and
/// committed before returning.
pub async fn run_partition(
    ctx: WriterCtx,
    partition: i32,
    shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    run_partition_under(ctx, partition, None, shutdown).await.map(|_| ())
}

/// [`run_partition`], under `fence` when the partition is leased. Returns whether the fence
/// refused a batch (the lease is lost: nothing more was written).
pub async fn run_partition_under(
    ctx: WriterCtx,
    partition: i32,
    fence: Option<Fence>,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<bool> {
    let Some((pc, mut offset)) = reach(&ctx, partition, &mut shutdown).await else { return Ok(false) };
    tracing::info!(partition, offset, epoch = fence.as_ref().map(|f| f.epoch), "writer started");
    let pm = ctx.metrics.partition(partition);
    pm.started(offset);
    // The fetch of the next records overlaps the transaction of the current ones: a fetcher task
    // reads ahead (at most two fetches) while this loop writes.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Incoming>>(2);
    let fetcher = tokio::spawn(fetch::fetch_ahead(
        pc,
        ctx.cfg.clone(),
        partition,
        offset,
        tx,
        pm.clone(),
        shutdown.clone(),
    ));
    let under = fallback::Under { partition, fence: fence.as_ref() };
    let mut fenced = false;
    'outer: loop {
        let incoming = tokio::select! {
            r = rx.recv() => match r { Some(v) => v, None => break },
            _ = shutdown.changed() => break,
        };
        for chunk in incoming.chunks(ctx.cfg.batch_size) {
            if let ControlFlow::Break(f) = write(&ctx, under, &pm, chunk, &mut offset, &mut shutdown).await {
                fenced = f;
                break 'outer;
            }
        }
    }
    fetcher.abort();
    pm.stopped();
    if fenced {
        ctx.metrics.fenced_batches.inc();
        tracing::warn!(
            partition,
            offset,
            "lease lost: the fence refused the batch (rolled back); partition dropped"
        );
    } else {
        tracing::info!(partition, offset, "writer stopped");
    }
    Ok(fenced)
}

/// The partition's Kafka client and its stored offset, each retried every second until it
/// answers; `None` when shutdown comes first.
async fn reach(
    ctx: &WriterCtx,
    partition: i32,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<(rskafka::client::partition::PartitionClient, i64)> {
    let deadline = Duration::from_secs(5);
    let pc = loop {
        match kafka::partition(&ctx.kafka, &ctx.topic, partition, deadline).await {
            Ok(pc) => break pc,
            Err(e) => {
                tracing::warn!(partition, error = %format!("{e:#}"), "partition not reachable; retrying");
                if wait_or_shutdown(shutdown, Duration::from_secs(1)).await {
                    return None;
                }
            }
        }
    };
    let offset = loop {
        match stored_offset(&ctx.pool, &ctx.topic, partition).await {
            Ok(o) => break o,
            Err(e) => {
                tracing::warn!(partition, error = %format!("{e:#}"), "cannot read the stored offset; retrying");
                if wait_or_shutdown(shutdown, Duration::from_secs(1)).await {
                    return None;
                }
            }
        }
    };
    Some((pc, offset))
}

/// Writes one `chunk` from `offset` (skipped when it is behind it) and settles it in Redis;
/// moves `offset` past it. Breaks when the writer must stop (told to, or fenced: `true`).
async fn write(
    ctx: &WriterCtx,
    under: fallback::Under<'_>,
    pm: &crate::admin::metrics::PartitionMetrics,
    chunk: &[Incoming],
    offset: &mut i64,
    shutdown: &mut watch::Receiver<bool>,
) -> ControlFlow<bool> {
    if chunk.first().is_some_and(|r| r.offset < *offset) {
        return ControlFlow::Continue(());
    }
    let t1 = std::time::Instant::now();
    // Retried, split or dead-lettered until every record is committed (see `fallback`), or we
    // are told to stop; the offset only moves with a commit. What committed is settled either
    // way.
    let (outcome, halt) = fallback::write_chunk(ctx, under, chunk, shutdown).await;
    let t2 = std::time::Instant::now();
    log_outcome(under.partition, &outcome);
    settle(&ctx.redis, &ctx.scripts, &outcome).await;
    if halt.is_some() {
        return ControlFlow::Break(halt == Some(fallback::Halt::Fenced));
    }
    *offset = chunk.last().map(|r| r.offset + 1).unwrap_or(*offset);
    count_outcome(&ctx.metrics, pm, chunk.len(), &outcome, *offset);
    tracing::debug!(
        partition = under.partition,
        n = chunk.len(),
        write_ms = (t2 - t1).as_millis() as u64,
        settle_ms = t2.elapsed().as_millis() as u64,
        "batch committed"
    );
    if *shutdown.borrow() {
        return ControlFlow::Break(false);
    }
    ControlFlow::Continue(())
}

/// The request id of every reservation a committed batch decided, in the log: the id the
/// gateway gave the request (its access line, its answer, the record, `orders.request_id`).
/// Orders at `debug` (one line each), refusals at `info`.
fn log_outcome(partition: i32, outcome: &BatchOutcome) {
    if tracing::enabled!(tracing::Level::DEBUG) {
        for (home, ids) in &outcome.ordered {
            for request_id in ids {
                tracing::debug!(partition, campaign = %home.campaign, %request_id, "order written");
            }
        }
    }
    for f in &outcome.refused {
        let r = &f.record;
        tracing::info!(
            partition,
            campaign = %r.campaign,
            request_id = %r.request_id,
            status = f.status,
            reason = %f.reason,
            "reservation refused"
        );
    }
}

/// Counts a committed chunk of `n` records, whose next offset is `next_offset`.
fn count_outcome(
    metrics: &WriterMetrics,
    pm: &crate::admin::metrics::PartitionMetrics,
    n: usize,
    outcome: &BatchOutcome,
    next_offset: i64,
) {
    pm.committed(n, outcome.dead, next_offset);
    metrics.batch_size.observe(n as f64);
    metrics.orders_inserted.inc_by(outcome.inserted as u64);
    for f in &outcome.refused {
        metrics.refused(&f.reason);
    }
}

/// Sleeps `d`; true when shutdown was asked meanwhile.
pub async fn wait_or_shutdown(shutdown: &mut watch::Receiver<bool>, d: Duration) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}
