//! The order writer's Prometheus metrics, in a registry of its own per `serve` (so several
//! writers in one test process do not mix), served by [`crate::admin`].
//!
//! Counted as the work happens: records consumed and committed, lag, dead letters per partition
//! ([`PartitionMetrics`], one set of handles per partition resolved at start); batch size and
//! transaction latency; orders inserted and refusals by reason; sweeper re-produces; closer
//! closes and releases. Read from PostgreSQL at scrape time ([`WriterMetrics::gather`]): orders
//! by status and reconcile's repairs (`order-writer reconcile --repair` is another process; its
//! `audit_log` rows are the count).
//!
//! Names: every metric starts with `seckill_writer_`; the README lists them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus::proto::MetricFamily;
use prometheus::{
    Histogram, HistogramOpts, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
};
use sqlx::PgPool;

/// Transaction latency buckets (seconds): 1 ms to 10 s.
const TX_BUCKETS: &[f64] = &[0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];
/// Batch size buckets (records).
const SIZE_BUCKETS: &[f64] = &[1.0, 5.0, 10.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 2500.0, 5000.0, 10000.0];
/// How long a scrape waits for PostgreSQL before it answers without the database's families.
const DB_SCRAPE_TIMEOUT: Duration = Duration::from_secs(1);

/// The metrics of one order writer.
pub struct WriterMetrics {
    registry: Registry,
    /// Each partition's offsets (its writer's handles and the scrape share them).
    offsets: Mutex<HashMap<i32, Arc<Offsets>>>,
    partitions: PartitionFamilies,
    /// Records per committed chunk.
    pub batch_size: Histogram,
    /// One write transaction (a batch, or one record of a split batch), committed.
    pub transaction: Histogram,
    /// Write transactions that failed (retried, split or dead-lettered after).
    pub transaction_failures: IntCounter,
    /// Orders inserted.
    pub orders_inserted: IntCounter,
    refusals: IntCounterVec,
    /// Records the sweeper produced again.
    pub sweeper_produced: IntCounter,
    /// Sweeper produces that failed (a later pass retries).
    pub sweeper_errors: IntCounter,
    /// Transfers between hot-stock buckets the sweeper finished (their "take" never ran).
    pub sweeper_transfers_finished: IntCounter,
    /// Unpaid orders closed past their pay-by time.
    pub closer_closed: IntCounter,
    /// Closed orders whose units went back to Redis.
    pub closer_released: IntCounter,
    /// Partitions this process holds a lease on now (0 with a fixed plan).
    pub leases_held: IntGauge,
    /// Partitions this process claimed from a writer whose lease had expired.
    pub lease_takeovers: IntCounter,
    /// Leases this process lost (found expired or taken at a renewal, or refused by a fence).
    pub leases_lost: IntCounter,
    /// Batches the lease fence refused (their writer no longer held the partition): rolled back.
    pub fenced_batches: IntCounter,
    /// The most PostgreSQL connections this process's pools open (the order path's and the
    /// result query's), set at start.
    pub pg_connections_max: IntGauge,
    scrape: ScrapeFamilies,
}

/// The families counted by partition, resolved into a [`PartitionMetrics`] per partition.
struct PartitionFamilies {
    consumed: IntCounterVec,
    committed: IntCounterVec,
    lag: IntGaugeVec,
    dead_letters: IntCounterVec,
    up: IntGaugeVec,
}

impl PartitionFamilies {
    fn new(r: &Register<'_>) -> Self {
        Self {
            consumed: r.counter_vec(
                "seckill_writer_records_consumed_total",
                "Records fetched from Kafka, by partition",
                &["partition"],
            ),
            committed: r.counter_vec(
                "seckill_writer_records_committed_total",
                "Records whose transaction committed (orders, refusals, dead letters), by partition",
                &["partition"],
            ),
            lag: r.gauge_vec(
                "seckill_writer_lag",
                "Records on the partition not committed yet (high watermark - next offset)",
                &["partition"],
            ),
            dead_letters: r.counter_vec(
                "seckill_writer_dead_letters_total",
                "Records sent to dead_letters (unsigned, undecodable, or refused by PostgreSQL too often)",
                &["partition"],
            ),
            up: r.gauge_vec(
                "seckill_writer_partition_up",
                "1 once the partition's writer has its Kafka client and stored offset",
                &["partition"],
            ),
        }
    }
}

/// The families read at scrape time ([`WriterMetrics::gather`], [`WriterMetrics::stock_left`]).
struct ScrapeFamilies {
    orders: IntGaugeVec,
    repairs: IntGaugeVec,
    /// Units left in Redis per open campaign (read at scrape: [`WriterMetrics::stock_left`]).
    stock_left: IntGaugeVec,
    events_pending: IntGauge,
    db_up: IntGauge,
}

impl ScrapeFamilies {
    fn new(r: &Register<'_>) -> Self {
        Self {
            orders: r.gauge_vec(
                "seckill_writer_orders",
                "Orders in PostgreSQL by status (read at scrape)",
                &["status"],
            ),
            repairs: r.gauge_vec(
                "seckill_writer_repairs",
                "Reconcile repairs recorded in audit_log, by kind (read at scrape)",
                &["kind"],
            ),
            stock_left: r.gauge_vec(
                "seckill_writer_stock_left",
                "Units left in Redis (every bucket) per READY or LIVE campaign (read at scrape)",
                &["campaign"],
            ),
            events_pending: r.gauge(
                "seckill_writer_order_events_pending",
                "Order events in the outbox not produced yet (read at scrape; backend::events)",
            ),
            db_up: r.gauge("seckill_writer_scrape_db_up", "1 when this scrape could read PostgreSQL"),
        }
    }
}

impl std::fmt::Debug for WriterMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriterMetrics").finish_non_exhaustive()
    }
}

/// Makes each metric and registers it in one step. The names and labels are constants: this
/// cannot fail.
struct Register<'a>(&'a Registry);

impl Register<'_> {
    fn add<C: prometheus::core::Collector + Clone + 'static>(&self, c: C) -> C {
        self.0.register(Box::new(c.clone())).expect("unique names");
        c
    }
    fn counter_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
        self.add(IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    fn gauge_vec(&self, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
        self.add(IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric"))
    }
    fn counter(&self, name: &str, help: &str) -> IntCounter {
        self.add(IntCounter::new(name, help).expect("valid metric"))
    }
    fn gauge(&self, name: &str, help: &str) -> IntGauge {
        self.add(IntGauge::new(name, help).expect("valid metric"))
    }
    fn histogram(&self, name: &str, help: &str, buckets: &[f64]) -> Histogram {
        self.add(
            Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))
                .expect("valid metric"),
        )
    }
}

impl Default for WriterMetrics {
    fn default() -> Self {
        Self::new()
    }
}

impl WriterMetrics {
    /// A fresh set, registered in its own registry. The names and labels are constants: this
    /// cannot fail.
    pub fn new() -> Self {
        let registry = Registry::new();
        let r = Register(&registry);
        let m = Self {
            offsets: Mutex::default(),
            partitions: PartitionFamilies::new(&r),
            batch_size: r.histogram("seckill_writer_batch_size", "Records per committed batch", SIZE_BUCKETS),
            transaction: r.histogram(
                "seckill_writer_transaction_seconds",
                "Duration of one committed write transaction",
                TX_BUCKETS,
            ),
            transaction_failures: r.counter(
                "seckill_writer_transaction_failures_total",
                "Write transactions that failed and were retried, split or dead-lettered",
            ),
            orders_inserted: r
                .counter("seckill_writer_orders_inserted_total", "Orders inserted by this process"),
            refusals: r.counter_vec(
                "seckill_writer_refusals_total",
                "Reservations the database refused, by reason",
                &["reason"],
            ),
            sweeper_produced: r.counter(
                "seckill_writer_sweeper_produced_total",
                "Outbox entries the sweeper produced to Kafka again",
            ),
            sweeper_errors: r.counter("seckill_writer_sweeper_errors_total", "Sweeper produces that failed"),
            sweeper_transfers_finished: r.counter(
                "seckill_writer_sweeper_transfers_finished_total",
                "Transfers between buckets whose take the sweeper ran (the caller stopped after the give)",
            ),
            closer_closed: r
                .counter("seckill_writer_closer_closed_total", "Unpaid orders closed at their pay-by time"),
            closer_released: r.counter(
                "seckill_writer_closer_released_total",
                "Closed orders whose units went back to Redis",
            ),
            leases_held: r.gauge(
                "seckill_writer_leases_held",
                "Partitions this process holds a lease on (partitions by lease)",
            ),
            lease_takeovers: r.counter(
                "seckill_writer_lease_takeovers_total",
                "Partitions claimed from a writer whose lease had expired",
            ),
            leases_lost: r.counter(
                "seckill_writer_leases_lost_total",
                "Leases lost: expired or taken when renewed, or refused by a batch's fence",
            ),
            pg_connections_max: r.gauge(
                "seckill_writer_pg_connections_max",
                "The most PostgreSQL connections this process's pools open (order path and result query)",
            ),
            fenced_batches: r.counter(
                "seckill_writer_fenced_batches_total",
                "Batches refused by the lease fence (the partition had another owner or epoch): rolled back",
            ),
            scrape: ScrapeFamilies::new(&r),
            registry,
        };
        // The reasons the writer refuses with (writer::decide, writer::retry) have a series from
        // the start, so a dashboard reads 0 rather than nothing.
        for reason in ["SOLD_OUT", "LIMIT_REACHED", "CAMPAIGN_UNKNOWN", "DEAD_LETTER", "UNDECODABLE"] {
            m.refusals.with_label_values(&[reason]);
        }
        m
    }

    /// The handles of `partition`.
    pub fn partition(&self, partition: i32) -> PartitionMetrics {
        let p = partition.to_string();
        PartitionMetrics {
            consumed: self.partitions.consumed.with_label_values(&[&p]),
            committed: self.partitions.committed.with_label_values(&[&p]),
            lag: self.partitions.lag.with_label_values(&[&p]),
            dead: self.partitions.dead_letters.with_label_values(&[&p]),
            up: self.partitions.up.with_label_values(&[&p]),
            offsets: self
                .offsets
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(partition)
                .or_default()
                .clone(),
        }
    }

    /// The end of `partition` read at a scrape (the admin listener asks Kafka): its lag counts
    /// the records waiting even while its writer fetches nothing (PostgreSQL down, a batch
    /// retried). Ignored until the partition's writer has started (its next offset unknown).
    pub fn end_seen(&self, partition: i32, end: i64) {
        if self.partition_is_up(partition) {
            let p = self.partition(partition);
            p.offsets.high.fetch_max(end, Ordering::Relaxed);
            p.update_lag();
        }
    }

    /// The partitions whose writer runs in this process now, in order (a writer by lease's
    /// change as it runs).
    pub fn partitions_up(&self) -> Vec<i32> {
        let seen: Vec<i32> = self.offsets.lock().unwrap_or_else(|e| e.into_inner()).keys().copied().collect();
        let mut up: Vec<i32> = seen.into_iter().filter(|p| self.partition_is_up(*p)).collect();
        up.sort_unstable();
        up
    }

    /// Whether `partition`'s writer is running (see [`PartitionMetrics::started`]).
    pub fn partition_is_up(&self, partition: i32) -> bool {
        self.partitions.up.with_label_values(&[&partition.to_string()]).get() == 1
    }

    /// Counts a refusal with `reason` (a handful of codes: looked up per refusal).
    pub fn refused(&self, reason: &str) {
        self.refusals.with_label_values(&[reason]).inc();
    }

    /// Reads the stock left in Redis of every READY or LIVE campaign into
    /// `seckill_writer_stock_left` (bounded like the database's read; the last values stay when
    /// it does not answer in time).
    pub async fn stock_left(&self, pool: &PgPool, redis: &fred::prelude::Client) {
        use fred::prelude::KeysInterface;
        let read = async {
            let open: Vec<(String, i32)> =
                sqlx::query_as("SELECT id, buckets FROM campaigns WHERE state IN ('READY', 'LIVE')")
                    .fetch_all(pool)
                    .await?;
            let mut out = Vec::new();
            for (id, buckets) in open {
                let mut left = 0;
                for b in protocol::keys::Bucket::all(&id, buckets.max(1) as u32) {
                    let n: Option<i64> = redis.get(&b.keys.stock).await?;
                    left += n.unwrap_or(0);
                }
                out.push((id, left));
            }
            Ok::<_, anyhow::Error>(out)
        };
        match tokio::time::timeout(DB_SCRAPE_TIMEOUT, read).await {
            Ok(Ok(left)) => {
                self.scrape.stock_left.reset();
                for (id, n) in left {
                    self.scrape.stock_left.with_label_values(&[id.as_str()]).set(n);
                }
            }
            Ok(Err(e)) => tracing::debug!(error = %format!("{e:#}"), "scrape: stock left not read"),
            Err(_) => tracing::debug!("scrape: stock left not read within {DB_SCRAPE_TIMEOUT:?}"),
        }
    }

    /// Every family, with the database's read now (bounded; without them, and
    /// `seckill_writer_scrape_db_up 0`, when PostgreSQL does not answer in time).
    pub async fn gather(&self, pool: &PgPool) -> Vec<MetricFamily> {
        let read = async {
            let orders: Vec<(String, i64)> =
                sqlx::query_as("SELECT status, count(*) FROM orders GROUP BY status").fetch_all(pool).await?;
            let repairs: Vec<(String, i64)> = sqlx::query_as(
                "SELECT substr(action, 8), count(*) FROM audit_log WHERE action LIKE 'REPAIR\\_%' GROUP BY 1",
            )
            .fetch_all(pool)
            .await?;
            let pending: i64 =
                sqlx::query_scalar("SELECT count(*) FROM order_events WHERE produced_at IS NULL")
                    .fetch_one(pool)
                    .await?;
            Ok::<_, sqlx::Error>((orders, repairs, pending))
        };
        match tokio::time::timeout(DB_SCRAPE_TIMEOUT, read).await {
            Ok(Ok((orders, repairs, pending))) => {
                self.scrape.events_pending.set(pending);
                self.scrape.orders.reset();
                // Every status has a series, at 0 until an order has it.
                for status in ["PENDING_PAYMENT", "PAID", "CLOSED"] {
                    self.scrape.orders.with_label_values(&[status]).set(0);
                }
                for (status, n) in orders {
                    self.scrape.orders.with_label_values(&[status.as_str()]).set(n);
                }
                self.scrape.repairs.reset();
                for kind in crate::workers::reconcile::find::Kind::ALL {
                    self.scrape.repairs.with_label_values(&[kind.as_str()]).set(0);
                }
                for (kind, n) in repairs {
                    self.scrape.repairs.with_label_values(&[kind.as_str()]).set(n);
                }
                self.scrape.db_up.set(1);
            }
            _ => {
                self.scrape.orders.reset();
                self.scrape.repairs.reset();
                self.scrape.events_pending.set(0);
                self.scrape.db_up.set(0);
            }
        }
        self.registry.gather()
    }
}

/// One partition's handles; cheap to clone.
#[derive(Clone)]
pub struct PartitionMetrics {
    consumed: IntCounter,
    committed: IntCounter,
    lag: IntGauge,
    dead: IntCounter,
    up: IntGauge,
    offsets: Arc<Offsets>,
}

/// A partition's end as last seen and its next offset to write, shared by its writer's handles
/// and the scrape.
#[derive(Debug, Default)]
struct Offsets {
    high: AtomicI64,
    next: AtomicI64,
    /// Writers of the partition running in this process: two for a moment when its lease was
    /// lost and claimed again while the old writer still finishes the batch the fence refuses.
    running: AtomicU32,
}

impl PartitionMetrics {
    /// The writer runs from `next_offset` (its stored offset).
    pub fn started(&self, next_offset: i64) {
        self.offsets.next.store(next_offset, Ordering::Relaxed);
        self.offsets.running.fetch_add(1, Ordering::Relaxed);
        self.up.set(1);
        self.update_lag();
    }

    /// The partition's writer ended (shutdown, or its lease released or lost). A writer of the
    /// partition started since in this process keeps it up.
    pub fn stopped(&self) {
        let running = &self.offsets.running;
        let before =
            running.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(1)));
        if before.unwrap_or(0) <= 1 {
            self.up.set(0);
        }
    }

    /// A fetch brought `n` records; the partition's end is `high_watermark`.
    pub fn fetched(&self, n: usize, high_watermark: i64) {
        self.consumed.inc_by(n as u64);
        self.offsets.high.fetch_max(high_watermark, Ordering::Relaxed);
        self.update_lag();
    }

    /// `n` records committed, `dead` of them as dead letters; the next offset is `next_offset`.
    pub fn committed(&self, n: usize, dead: usize, next_offset: i64) {
        self.committed.inc_by(n as u64);
        self.dead.inc_by(dead as u64);
        self.offsets.next.store(next_offset, Ordering::Relaxed);
        self.update_lag();
    }

    fn update_lag(&self) {
        let lag = self.offsets.high.load(Ordering::Relaxed) - self.offsets.next.load(Ordering::Relaxed);
        self.lag.set(lag.max(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_the_end_less_the_next_offset_and_never_negative() {
        let m = WriterMetrics::new();
        let p = m.partition(3);
        p.started(10);
        p.fetched(5, 15);
        assert_eq!((p.lag.get(), p.consumed.get()), (5, 5));
        p.committed(5, 1, 15);
        assert_eq!((p.lag.get(), p.committed.get(), p.dead.get()), (0, 5, 1));
        p.started(20);
        assert_eq!(p.lag.get(), 0, "a stored offset past the last fetched end is no negative lag");
        // A scrape's look at the end counts records the writer has not fetched yet.
        m.end_seen(3, 30);
        assert_eq!(p.lag.get(), 10);
        m.end_seen(4, 30);
        assert_eq!(m.partition(4).lag.get(), 0, "no lag before the partition's writer started");
        let names: Vec<String> = m.registry.gather().iter().map(|f| f.name().to_string()).collect();
        assert!(names.contains(&"seckill_writer_lag".to_string()), "{names:?}");
    }

    #[test]
    fn the_partitions_up_are_those_started_and_not_stopped() {
        let m = WriterMetrics::new();
        m.partition(3).started(0);
        m.partition(1).started(0);
        let _not_started = m.partition(2);
        assert_eq!(m.partitions_up(), [1, 3]);
        m.partition(3).stopped();
        assert_eq!(m.partitions_up(), [1], "a lease released or lost");
        let names: Vec<String> = m.registry.gather().iter().map(|f| f.name().to_string()).collect();
        for name in ["seckill_writer_leases_held", "seckill_writer_fenced_batches_total"] {
            assert!(names.contains(&name.to_string()), "{name}: {names:?}");
        }
    }
    #[test]
    fn a_writer_stopping_after_its_successor_started_leaves_the_partition_up() {
        let m = WriterMetrics::new();
        let old = m.partition(2);
        old.started(0);
        // Its lease lost (PostgreSQL black-holed past the lease) and claimed again by this
        // process: the new writer starts while the old one still retries the batch the fence
        // then refuses, and stops after it.
        let new = m.partition(2);
        new.started(0);
        old.stopped();
        assert_eq!(m.partitions_up(), [2], "the new writer runs");
        assert_eq!(new.up.get(), 1);
        new.stopped();
        assert!(m.partitions_up().is_empty());
    }
}
