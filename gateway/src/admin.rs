//! The admin listener (`[admin] listen` of the server file): Prometheus `/metrics` (Pingora's
//! Prometheus app over the default registry), `/healthz` (the process answers) and `/readyz`
//! (it can sell: at least one Redis connection is up; Kafka being down does not make the gateway
//! unready, the outbox holds the records; 503 `draining` once `SIGTERM` was received). Keep it
//! off the public interface.
//!
//! With `[admin] token`, two more for the fleet's commands (`order-writer campaign ...`), each
//! asking `Authorization: Bearer <token>` (401 otherwise; 404 without a token configured):
//! `GET /campaigns`, what this process serves (each campaign's file digest, operated state and
//! control version, sold-out flag, disagreements with the published campaign), and `POST
//! /reload`, the reload `SIGHUP` does, answering the same JSON after it or 422 with the refusal
//! (file:line:column: field).
//!
//! [`Live`] holds the gateway's families read at scrape time (see [`crate::metrics`]); the
//! sale's are registered by the sale itself, in the same registry.

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
use prometheus::IntCounter;

use crate::access_log::LogStats;
use crate::reload::SharedState;
use pingora_http::RequestHeader;
use protocol::secret::Password;

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
        let path = session.req_header().uri.path();
        if path == "/campaigns" || path == "/reload" {
            return self.live.fleet(session.req_header());
        }
        match path {
            "/metrics" => PrometheusHttpApp.response(session).await,
            "/healthz" => json(200, serde_json::json!({"status": "ok"})),
            "/readyz" if crate::shutdown::draining() => json(
                503,
                serde_json::json!({"status": "draining", "reason": "SIGTERM: leaving after [shutdown] linger_secs"}),
            ),
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

/// What is read at scrape time, and what the fleet's endpoints act on.
pub struct Live {
    /// The sale, when it is on (its readiness is its Redis pool's).
    sale: Option<Arc<FlashSale>>,
    /// The bearer token of `/campaigns` and `/reload`, and the state a reload replaces.
    fleet: Option<(Password, Arc<SharedState>)>,
    log: Option<Arc<LogStats>>,
    /// One scrape at a time updates the families below.
    lock: Mutex<()>,
    log_lines: IntCounter,
    log_dropped: IntCounter,
}

impl Live {
    /// The scrape-time families over the process's state.
    pub fn new(
        sale: Option<Arc<FlashSale>>,
        log: Option<Arc<LogStats>>,
        fleet: Option<(Password, Arc<SharedState>)>,
    ) -> Self {
        let counter = |name: &str, help: &str| IntCounter::new(name, help).expect("valid metric");
        Self {
            sale,
            fleet,
            log,
            lock: Mutex::new(()),
            log_lines: counter("seckill_gateway_access_log_lines_total", "Access lines written"),
            log_dropped: counter(
                "seckill_gateway_access_log_dropped_total",
                "Access lines dropped because the writer's queue was full",
            ),
        }
    }

    /// `GET /campaigns` and `POST /reload`, behind the token.
    fn fleet(&self, req: &RequestHeader) -> Response<Vec<u8>> {
        let Some((token, shared)) = &self.fleet else {
            return json(
                404,
                serde_json::json!({"code": "NOT_FOUND", "message": "set [admin] token to use the fleet's endpoints"}),
            );
        };
        if !token.is_bearer(req.headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok())) {
            return json(
                401,
                serde_json::json!({"code": "UNAUTHORIZED", "message": "Authorization: Bearer <[admin] token>"}),
            );
        }
        match (req.method.as_str(), req.uri.path()) {
            ("GET", "/campaigns") => json(200, self.campaigns()),
            ("POST", "/reload") => match crate::reload::reload(shared, self.sale.as_deref()) {
                Ok(_) => json(200, self.campaigns()),
                Err(e) => json(
                    422,
                    serde_json::json!({"code": "RELOAD_REFUSED", "message": e.to_string(), "field": e.field}),
                ),
            },
            (_, path) => json(
                405,
                serde_json::json!({"code": "METHOD_NOT_ALLOWED", "message": format!("GET /campaigns or POST /reload, not {path} with {}", req.method)}),
            ),
        }
    }

    /// What this process serves (no sale: no campaigns).
    fn campaigns(&self) -> serde_json::Value {
        match &self.sale {
            Some(sale) => sale.campaigns_status(),
            None => serde_json::json!({"campaigns": []}),
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
        if self.log.is_some() {
            d.extend(self.log_lines.desc());
            d.extend(self.log_dropped.desc());
        }
        d
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let _one = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::new();
        if let Some(log) = &self.log {
            catch_up(&self.log_lines, log.written.load(Ordering::Relaxed));
            catch_up(&self.log_dropped, log.dropped.load(Ordering::Relaxed));
            out.extend(self.log_lines.collect());
            out.extend(self.log_dropped.collect());
        }
        out
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
