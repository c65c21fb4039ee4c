//! The admin listener (`[admin] listen` of the server file): Prometheus `/metrics` (Pingora's
//! Prometheus app over the default registry), `/healthz` (the process answers) and `/readyz`
//! (it can sell: at least one Redis connection is up; Kafka being down does not make the gateway
//! unready, the outbox holds the records). Keep it off the public interface.
//!
//! [`Live`] holds the families read at scrape time (see [`crate::metrics`]).

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use fred::interfaces::ClientLike;
use http::Response;
use pingora_core::apps::http_app::{HttpServer, ServeHttp};
use pingora_core::protocols::http::ServerSession;
use pingora_core::services::listening::Service;
use pingora_prometheus::PrometheusHttpApp;
use plugins::FlashSale;
use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;
use prometheus::{HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts};

use crate::access_log::LogStats;

/// The admin app: `/metrics`, `/healthz`, `/readyz`; 404 otherwise.
pub struct AdminApp {
    live: Arc<Live>,
}

fn json(status: u16, body: serde_json::Value) -> Response<Vec<u8>> {
    let body = body.to_string().into_bytes();
    Response::builder()
        .status(status)
        .header(http::header::CONTENT_TYPE, "application/json")
        .header(http::header::CONTENT_LENGTH, body.len())
        .header(http::header::CACHE_CONTROL, "no-store")
        .body(body)
        .unwrap_or_default()
}

#[async_trait]
impl ServeHttp for AdminApp {
    async fn response(&self, session: &mut ServerSession) -> Response<Vec<u8>> {
        match session.req_header().uri.path() {
            "/metrics" => PrometheusHttpApp.response(session).await,
            "/healthz" => json(200, serde_json::json!({"status": "ok"})),
            "/readyz" if self.live.redis_ready() => json(200, serde_json::json!({"status": "ready"})),
            "/readyz" => json(
                503,
                serde_json::json!({"status": "not ready", "reason": "no Redis connection: orders answer SERVICE_DEGRADED"}),
            ),
            _ => json(
                404,
                serde_json::json!({"code": "NOT_FOUND", "message": "GET /metrics, /healthz or /readyz"}),
            ),
        }
    }
}

/// The admin service on `listen`.
pub fn service(listen: &str, live: Arc<Live>) -> Service<HttpServer<AdminApp>> {
    let mut service =
        Service::new("admin (metrics, health)".to_string(), HttpServer::new_app(AdminApp { live }));
    service.add_tcp(listen);
    service
}

/// What is read at scrape time.
pub struct Live {
    /// The sale, when it is on (its families are left out without it).
    sale: Option<Arc<FlashSale>>,
    log: Option<Arc<LogStats>>,
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
    log_lines: IntCounter,
    log_dropped: IntCounter,
    room_queue: IntGaugeVec,
    room_admitted: IntCounterVec,
    room_eta_error: HistogramVec,
    pow_bits: IntGaugeVec,
}

/// Buckets of the waiting room's ETA error (seconds past the promised admission): the polling
/// interval plus a request's latency is the normal error; many seconds is a client that came
/// back late, or clocks apart.
const ETA_ERROR_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0];

impl Live {
    /// The scrape-time families over the process's state.
    pub fn new(sale: Option<Arc<FlashSale>>, log: Option<Arc<LogStats>>) -> Self {
        let gauge = |name: &str, help: &str| IntGauge::new(name, help).expect("valid metric");
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("valid metric");
        Self {
            sale,
            log,
            lock: Mutex::new(()),
            sold_out: IntGaugeVec::new(
                Opts::new("seckill_gateway_sold_out", "1 while the campaign's local sold-out flag is set"),
                &["campaign"],
            )
            .expect("valid metric"),
            depth: gauge(
                "seckill_gateway_kafka_queue_depth",
                "Reserved records waiting for their Kafka produce",
            ),
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
            log_lines: counter("seckill_gateway_access_log_lines_total", "Access lines written"),
            log_dropped: counter(
                "seckill_gateway_access_log_dropped_total",
                "Access lines dropped because the writer's queue was full",
            ),
            room_queue: IntGaugeVec::new(
                Opts::new(
                    "seckill_gateway_room_queue_length",
                    "Waiting room: places issued (as room.lua last counted them) minus positions served",
                ),
                &["campaign"],
            )
            .expect("valid metric"),
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
            pow_bits: IntGaugeVec::new(
                Opts::new("seckill_gateway_room_pow_bits", "Proof-of-work bits a challenge asks now"),
                &["campaign"],
            )
            .expect("valid metric"),
        }
    }

    /// Whether at least one client of the sale's Redis pool is connected (the readiness check;
    /// a proxy without the sale needs no Redis and is ready).
    pub fn redis_ready(&self) -> bool {
        self.sale.as_ref().is_none_or(|sale| sale.redis().clients().iter().any(|c| c.is_connected()))
    }
}

/// Brings a counter up to `value` (counters only go up; the source is monotonic too).
fn catch_up(counter: &IntCounter, value: u64) {
    let now = counter.get();
    if value > now {
        counter.inc_by(value - now);
    }
}

impl Collector for Live {
    fn desc(&self) -> Vec<&Desc> {
        let mut d = Vec::new();
        if self.sale.is_some() {
            d.extend(self.sale_families().into_iter().flat_map(|f| f.desc()));
        }
        if self.log.is_some() {
            d.extend(self.log_lines.desc());
            d.extend(self.log_dropped.desc());
        }
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        if let Some(sale) = &self.sale {
            self.update_sale(sale);
            out.extend(self.sale_families().into_iter().flat_map(|f| f.collect()));
        }
        if let Some(log) = &self.log {
            catch_up(&self.log_lines, log.written.load(Ordering::Relaxed));
            catch_up(&self.log_dropped, log.dropped.load(Ordering::Relaxed));
            out.extend(self.log_lines.collect());
            out.extend(self.log_dropped.collect());
        }
        out
    }
}

impl Live {
    /// The sale's families, in the order they are scraped.
    fn sale_families(&self) -> [&dyn Collector; 12] {
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

    /// Reads the sale's state into its families.
    fn update_sale(&self, sale: &FlashSale) {
        let now = plugins::checks::now_ms();
        self.sold_out.reset();
        for (id, entry) in &sale.registry().campaigns {
            self.sold_out.with_label_values(&[id.as_str()]).set(entry.sold_out.is_set(now) as i64);
        }
        let stats = sale.queue().stats();
        self.depth.set(sale.queue().depth() as i64);
        self.capacity.set(sale.queue().capacity() as i64);
        catch_up(&self.produced, stats.produced.load(Ordering::Relaxed));
        catch_up(&self.batches, stats.batches.load(Ordering::Relaxed));
        catch_up(&self.dropped.with_label_values(&["full"]), stats.dropped_full.load(Ordering::Relaxed));
        catch_up(&self.dropped.with_label_values(&["kafka"]), stats.dropped_kafka.load(Ordering::Relaxed));
        self.collect_room(sale);
        let connected = sale.redis().clients().iter().filter(|c| c.is_connected()).count();
        self.redis_connected.set(connected as i64);
        self.lag_peak_us.set(i64::try_from(sale.take_peak_lag().as_micros()).unwrap_or(i64::MAX));
    }
}

impl Live {
    /// The waiting room's families: every campaign's bits in force; for a campaign whose room is
    /// on, its queue's length, its admissions and the ETA errors since the last scrape.
    fn collect_room(&self, sale: &FlashSale) {
        let room = sale.waiting_room();
        let now = chrono::Utc::now();
        self.room_queue.reset();
        self.pow_bits.reset();
        for (id, entry) in &sale.registry().campaigns {
            let c = &entry.campaign;
            let bits = room.rates().bits(c, now.timestamp());
            self.pow_bits.with_label_values(&[id.as_str()]).set(i64::from(bits));
            if !c.waiting_room.enabled {
                continue;
            }
            let stats = room.stats().take(id);
            let length = plugins::room::queue_length(c, &stats, now);
            self.room_queue.with_label_values(&[id.as_str()]).set(length.min(i64::MAX as u64) as i64);
            catch_up(&self.room_admitted.with_label_values(&[id.as_str()]), stats.admitted);
            let errors = self.room_eta_error.with_label_values(&[id.as_str()]);
            for late in stats.late_ms {
                errors.observe(late.max(0) as f64 / 1000.0);
            }
        }
    }
}

/// [`Live`] shared with the admin app, as the registry's collector.
pub struct SharedLive(pub Arc<Live>);

impl Collector for SharedLive {
    fn desc(&self) -> Vec<&Desc> {
        self.0.desc()
    }
    fn collect(&self) -> Vec<MetricFamily> {
        self.0.collect()
    }
}
