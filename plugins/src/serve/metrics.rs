//! The sale's Prometheus metrics, registered by the sale itself in the process's default
//! registry (the one `pingora_prometheus` and Pingora's `Service::prometheus_http_service`
//! gather from) when it starts: a proxy that embeds it serves them by serving that registry.
//!
//! Two kinds, every name starting with `seckill_gateway_` (the names the gateway has always
//! used; dashboards and alerts read them):
//! - **counted on the request path** (as [`FlashSale::handle`](crate::FlashSale::handle) answers
//!   an order, under every hook): the reservation step's latency (`seckill_gateway_reserve_duration_seconds`),
//!   reservations Redis gave no decision for (`seckill_gateway_redis_errors_total`), orders
//!   whose global limits were waited for past their timeout
//!   (`seckill_gateway_global_limits_failed_open_total`);
//! - **read at scrape time** from the sale: every campaign's sold-out flag, the Kafka queue's
//!   depth, capacity and counters, the Redis pool's connected clients, the peak lag of the
//!   threads serving the sale, and the waiting room's queue length, admissions, ETA error and
//!   proof-of-work bits.
//!
//! One sale per process is measured: the latest one started (a second one, in a test, takes
//! the families over).

use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
};

/// Latency buckets (seconds) of the reservation step: 100 µs to 2.5 s.
const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// Buckets of the waiting room's ETA error (seconds past the promised admission): the polling
/// interval plus a request's latency is the normal error; many seconds is a client that came
/// back late, or clocks apart.
const ETA_ERROR_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

/// The sale's metrics of the process.
pub(crate) struct Metrics {
    reserve: Histogram,
    redis_call: Histogram,
    admission_limit: IntGauge,
    admission_refused: IntCounter,
    redis_errors: IntCounter,
    failed_open: IntCounterVec,
    scraped: Scraped,
}

/// The process's sale metrics (created on first use, registered when a sale starts).
pub(crate) fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

/// What a scrape reads of a sale, taken by the sale itself ([`Measured`]): this module knows the
/// figures, not the sale.
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    /// Each campaign's local sold-out flag.
    pub sold_out: Vec<(String, bool)>,
    /// Records waiting for Kafka, and the most the queue holds.
    pub depth: u64,
    /// See `depth`.
    pub capacity: u64,
    /// Records acknowledged, produce requests, records dropped (full, kafka): monotonic.
    pub produced: u64,
    /// See `produced`.
    pub batches: u64,
    /// See `produced`.
    pub dropped_full: u64,
    /// See `produced`.
    pub dropped_kafka: u64,
    /// Connected clients of the Redis pool.
    pub redis_connected: u64,
    /// The largest smoothed lag since the last scrape, microseconds.
    pub lag_peak_us: i64,
    /// Each campaign's waiting room.
    pub rooms: Vec<RoomSnapshot>,
}

/// A campaign's waiting room at a scrape.
#[derive(Debug, Default)]
pub(crate) struct RoomSnapshot {
    /// The campaign.
    pub campaign: String,
    /// Proof-of-work bits asked now.
    pub pow_bits: u32,
    /// When its room is on: the queue's length, admissions and ETA errors (ms) since the last scrape.
    pub queue: Option<(u64, u64, Vec<i64>)>,
}

/// A sale a scrape measures.
pub(crate) trait Measured: Send + Sync {
    /// Its figures now (taking the room's since the last scrape).
    fn snapshot(&self) -> Snapshot;
}

/// Measures `sale` from now on, registering the families in the default registry the first time.
pub(crate) fn serve(sale: Arc<dyn Measured>) {
    let m = metrics();
    *m.scraped.sale.lock().unwrap_or_else(|e| e.into_inner()) = Arc::downgrade(&sale);
    static REGISTERED: OnceLock<()> = OnceLock::new();
    REGISTERED.get_or_init(|| {
        let registry = prometheus::default_registry();
        let collectors: [Box<dyn Collector>; 7] = [
            Box::new(m.reserve.clone()),
            Box::new(m.redis_call.clone()),
            Box::new(m.admission_limit.clone()),
            Box::new(m.admission_refused.clone()),
            Box::new(m.redis_errors.clone()),
            Box::new(m.failed_open.clone()),
            Box::new(ScrapedCollector),
        ];
        for c in collectors {
            if let Err(e) = registry.register(c) {
                tracing::warn!(error = %e, "a sale metric is not registered");
            }
        }
    });
}

impl Metrics {
    fn new() -> Self {
        // The names and labels are constants: creating them cannot fail.
        let reserve = Histogram::with_opts(
            HistogramOpts::new(
                "seckill_gateway_reserve_duration_seconds",
                "The reservation step: reserve.lua in Redis (with its undo on a timeout), signing, enqueue",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .expect("valid metric");
        let redis_call = Histogram::with_opts(
            HistogramOpts::new(
                "seckill_gateway_redis_call_seconds",
                "A reserve.lua call's round trip, from its write to its answer as the I/O thread reads it, \
                 less twice that thread's lag: what the admission limit is told",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
        )
        .expect("valid metric");
        let admission_limit = IntGauge::new(
            "seckill_gateway_admission_limit",
            "The admission limit of the bucket whose call came back last: orders allowed at the reservation step",
        )
        .expect("valid metric");
        let admission_refused = IntCounter::new(
            "seckill_gateway_admission_refused_total",
            "Orders refused at once by the admission limit (TRY_LATER, nothing sent to Redis)",
        )
        .expect("valid metric");
        let redis_errors = IntCounter::new(
            "seckill_gateway_redis_errors_total",
            "Reservations Redis gave no decision for (timeout, connection lost): answered SERVICE_DEGRADED",
        )
        .expect("valid metric");
        let failed_open = IntCounterVec::new(
            Opts::new(
                "seckill_gateway_global_limits_failed_open_total",
                "Orders whose reservation call, which counts the global limits, took longer than global_timeout_ms and was waited for because every rule is on_error = \"open\"",
            ),
            &["campaign"],
        )
        .expect("valid metric");
        Self {
            reserve,
            redis_call,
            admission_limit,
            admission_refused,
            redis_errors,
            failed_open,
            scraped: Scraped::new(),
        }
    }

    /// A bucket's call came back after `round_trip` (Redis's share), its limit now `limit`.
    pub(crate) fn call_answered(&self, round_trip: Duration, limit: usize) {
        self.redis_call.observe(round_trip.as_secs_f64());
        self.admission_limit.set(i64::try_from(limit).unwrap_or(i64::MAX));
    }

    /// An order was refused at once by its bucket's admission limit.
    pub(crate) fn admission_refused(&self) {
        self.admission_refused.inc();
    }

    /// One reservation step took `took`; `redis_failed` when Redis gave no decision.
    pub(crate) fn reserved(&self, took: Duration, redis_failed: bool) {
        self.reserve.observe(took.as_secs_f64());
        if redis_failed {
            self.redis_errors.inc();
        }
    }

    /// An order of `campaign` waited past `global_timeout_ms` for its call, its rules all open
    /// (an error path: the label is looked up here).
    pub(crate) fn global_limits_failed_open(&self, campaign: &str) {
        self.failed_open.with_label_values(&[campaign]).inc();
    }
}

/// The families read from the sale when scraped.
struct Scraped {
    /// The sale measured (none yet, or dropped: the families are left out).
    sale: Mutex<Weak<dyn Measured>>,
    /// One scrape at a time updates the families below.
    lock: Mutex<()>,
    sold_out: IntGaugeVec,
    depth: IntGauge,
    capacity: IntGauge,
    produced: IntCounter,
    batches: IntCounter,
    dropped: IntCounterVec,
    redis_connected: IntGauge,
    lag_peak_us: IntGauge,
    room_queue: IntGaugeVec,
    room_admitted: IntCounterVec,
    room_eta_error: HistogramVec,
    pow_bits: IntGaugeVec,
}

fn gauge(name: &str, help: &str) -> IntGauge {
    IntGauge::new(name, help).expect("valid metric")
}

fn counter(name: &str, help: &str) -> IntCounter {
    IntCounter::new(name, help).expect("valid metric")
}

fn by_campaign(name: &str, help: &str) -> IntGaugeVec {
    IntGaugeVec::new(Opts::new(name, help), &["campaign"]).expect("valid metric")
}

impl Scraped {
    fn new() -> Self {
        Self {
            sale: Mutex::new(Weak::<Unmeasured>::new()),
            lock: Mutex::new(()),
            sold_out: by_campaign("seckill_gateway_sold_out", "1 while the campaign's local sold-out flag is set"),
            depth: gauge("seckill_gateway_kafka_queue_depth", "Reserved records waiting for their Kafka produce"),
            capacity: gauge("seckill_gateway_kafka_queue_capacity", "Most records the Kafka queue holds"),
            produced: counter("seckill_gateway_kafka_produced_total", "Records the brokers acknowledged"),
            batches: counter("seckill_gateway_kafka_batches_total", "Produce requests (batches) sent"),
            dropped: IntCounterVec::new(
                Opts::new(
                    "seckill_gateway_kafka_dropped_total",
                    "Records dropped from memory (left in the outbox for the sweeper), by reason",
                ),
                &["reason"],
            )
            .expect("valid metric"),
            redis_connected: gauge("seckill_gateway_redis_connected", "Connected clients of the Redis pool"),
            lag_peak_us: gauge(
                "seckill_gateway_lag_peak_us",
                "The largest smoothed lag of the threads serving the sale since the last scrape, microseconds (probed only with [sale] shed_at_lag_ms)",
            ),
            room_queue: by_campaign(
                "seckill_gateway_room_queue_length",
                "Waiting room: places issued (as room.lua last counted them) minus positions served",
            ),
            room_admitted: IntCounterVec::new(
                Opts::new(
                    "seckill_gateway_room_admitted_total",
                    "Waiting room: tokens issued on a ticket given while it waited (once per wait)",
                ),
                &["campaign"],
            )
            .expect("valid metric"),
            room_eta_error: HistogramVec::new(
                HistogramOpts::new(
                    "seckill_gateway_room_eta_error_seconds",
                    "Waiting room: actual admission minus the promised one (0 when earlier)",
                )
                .buckets(ETA_ERROR_BUCKETS.to_vec()),
                &["campaign"],
            )
            .expect("valid metric"),
            pow_bits: by_campaign("seckill_gateway_room_pow_bits", "Proof-of-work bits a challenge asks now"),
        }
    }

    /// The families, in the order they are scraped.
    fn families(&self) -> [&dyn Collector; 12] {
        [
            &self.sold_out,
            &self.depth,
            &self.capacity,
            &self.produced,
            &self.batches,
            &self.dropped,
            &self.redis_connected,
            &self.lag_peak_us,
            &self.room_queue,
            &self.room_admitted,
            &self.room_eta_error,
            &self.pow_bits,
        ]
    }

    /// A snapshot into the families.
    fn update(&self, snap: Snapshot) {
        self.sold_out.reset();
        for (id, set) in &snap.sold_out {
            self.sold_out.with_label_values(&[id.as_str()]).set(*set as i64);
        }
        self.depth.set(snap.depth as i64);
        self.capacity.set(snap.capacity as i64);
        catch_up(&self.produced, snap.produced);
        catch_up(&self.batches, snap.batches);
        catch_up(&self.dropped.with_label_values(&["full"]), snap.dropped_full);
        catch_up(&self.dropped.with_label_values(&["kafka"]), snap.dropped_kafka);
        self.redis_connected.set(snap.redis_connected as i64);
        self.lag_peak_us.set(snap.lag_peak_us);
        self.room_queue.reset();
        self.pow_bits.reset();
        for room in snap.rooms {
            let id = room.campaign.as_str();
            self.pow_bits.with_label_values(&[id]).set(i64::from(room.pow_bits));
            let Some((length, admitted, late_ms)) = room.queue else { continue };
            self.room_queue.with_label_values(&[id]).set(length.min(i64::MAX as u64) as i64);
            catch_up(&self.room_admitted.with_label_values(&[id]), admitted);
            let errors = self.room_eta_error.with_label_values(&[id]);
            for late in late_ms {
                errors.observe(late.max(0) as f64 / 1000.0);
            }
        }
    }
}

/// No sale yet (the empty weak reference's type).
struct Unmeasured;

impl Measured for Unmeasured {
    fn snapshot(&self) -> Snapshot {
        Snapshot::default()
    }
}

/// Brings a counter up to `value` (counters only go up; the source is monotonic too).
fn catch_up(counter: &IntCounter, value: u64) {
    let now = counter.get();
    if value > now {
        counter.inc_by(value - now);
    }
}

/// The scrape-time families as the registry's collector.
struct ScrapedCollector;

impl Collector for ScrapedCollector {
    fn desc(&self) -> Vec<&Desc> {
        metrics().scraped.families().into_iter().flat_map(|f| f.desc()).collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let scraped = &metrics().scraped;
        let _one = scraped.lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(sale) = scraped.sale.lock().unwrap_or_else(|e| e.into_inner()).upgrade() else {
            return Vec::new();
        };
        scraped.update(sale.snapshot());
        scraped.families().into_iter().flat_map(|f| f.collect()).collect()
    }
}
