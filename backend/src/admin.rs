//! The order writer's admin listener (`[admin] listen`): Prometheus `/metrics` (see
//! [`crate::admin::metrics`]), `/healthz` (the process answers) and `/readyz` (PostgreSQL answers
//! within a second and every partition of a fixed plan has its writer running; a writer by lease
//! is ready once PostgreSQL answers, its partitions changing as it runs). Keep it off the public
//! interface: those three are not authenticated.
//!
//! With `[admin] token`, the live view of each campaign ([`crate::campaign::live`]): `GET
//! /view/ID` (the page; open it as `/view/ID#token=...`) and `GET /api/campaigns/ID` (its JSON,
//! asking `Authorization: Bearer <token>`; 401 without it, 404 for an unknown campaign).

pub mod metrics;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::{Encoder, TextEncoder};
use serde_json::json;
use sqlx::PgPool;

use crate::admin::metrics::WriterMetrics;

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    /// The writer's metrics.
    pub metrics: Arc<WriterMetrics>,
    /// The order-writing pool (scrape-time counts, readiness).
    pub pool: PgPool,
    /// The partitions of a fixed plan (empty for a writer by lease).
    pub assigned: Vec<i32>,
    /// The Kafka client and topic the scrape reads each assigned partition's end from, so
    /// `seckill_writer_lag` is current even when a writer fetches nothing.
    pub kafka: Option<(Arc<rskafka::client::Client>, String)>,
    /// The live view, when `[admin] token` is set.
    pub live: Option<Arc<LiveView>>,
    /// Redis, for the stock left of each open campaign at scrape.
    pub redis: Option<fred::prelude::Client>,
}

/// What the live view reads, and its token.
pub struct LiveView {
    /// The bearer token.
    pub token: protocol::secret::Password,
    /// Redis.
    pub redis: fred::prelude::Client,
    /// The gateways.
    pub fleet: crate::conf::FleetConf,
    /// The rates' memory.
    pub rates: crate::campaign::live::Rates,
    /// The audit's thresholds (the conf's `[audit]`), for the winners' flagged groups.
    pub thresholds: crate::campaign::audit::Thresholds,
}

/// How long a scrape waits for the partitions' ends before it answers with the last ones seen.
const ENDS_SCRAPE_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads the end of each partition this process writes (a fixed plan's, or those it holds by
/// lease now) from Kafka (bounded) into the lag gauges.
async fn refresh_ends(st: &AdminState) {
    let Some((client, topic)) = &st.kafka else { return };
    let partitions = if st.assigned.is_empty() { st.metrics.partitions_up() } else { st.assigned.clone() };
    let read = async {
        for &p in &partitions {
            let pc = crate::kafka::partition(client, topic, p, ENDS_SCRAPE_TIMEOUT).await?;
            let end = pc.get_offset(rskafka::client::partition::OffsetAt::Latest).await?;
            st.metrics.end_seen(p, end);
        }
        Ok::<_, anyhow::Error>(())
    };
    match tokio::time::timeout(ENDS_SCRAPE_TIMEOUT, read).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::debug!(error = %format!("{e:#}"), "scrape: partition ends not read"),
        Err(_) => tracing::debug!("scrape: partition ends not read within {ENDS_SCRAPE_TIMEOUT:?}"),
    }
}

/// The admin router.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { (StatusCode::OK, axum::Json(json!({"status": "ok"}))) }))
        .route("/readyz", get(readyz))
        .route("/view/{id}", get(view_page))
        .route("/api/campaigns/{id}", get(view_json))
        .with_state(state)
}

async fn metrics(State(st): State<AdminState>) -> Response {
    refresh_ends(&st).await;
    if let Some(redis) = &st.redis {
        st.metrics.stock_left(&st.pool, redis).await;
    }
    let families = st.metrics.gather(&st.pool).await;
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    if let Err(e) = encoder.encode(&families, &mut body) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode metrics: {e}")).into_response();
    }
    ([(header::CONTENT_TYPE, encoder.format_type().to_string())], body).into_response()
}

/// The live view's page (no data in it: its script asks the JSON with the token).
async fn view_page(State(st): State<AdminState>) -> Response {
    if st.live.is_none() {
        return view_off();
    }
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8"), (header::CACHE_CONTROL, "no-store")],
        crate::campaign::live::PAGE,
    )
        .into_response()
}

fn view_off() -> Response {
    let body = json!({"code": "NOT_FOUND", "message": "set [admin] token to open the live view"});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

/// One snapshot of a campaign, as JSON, behind the token.
async fn view_json(
    State(st): State<AdminState>,
    axum::extract::Path(id): axum::extract::Path<String>,
    headers: axum::http::HeaderMap,
) -> Response {
    let Some(live) = &st.live else { return view_off() };
    if !live.token.is_bearer(headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok())) {
        let body = json!({"code": "UNAUTHORIZED", "message": "Authorization: Bearer <[admin] token>"});
        return (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    }
    let lag = st
        .metrics
        .gather(&st.pool)
        .await
        .iter()
        .filter(|f| f.name() == "seckill_writer_lag")
        .flat_map(|f| f.get_metric().iter().map(|m| m.get_gauge().value() as i64))
        .sum();
    let src = crate::campaign::live::Sources {
        pool: &st.pool,
        redis: &live.redis,
        fleet: &live.fleet,
        lag,
        rates: &live.rates,
        thresholds: &live.thresholds,
    };
    match crate::campaign::live::snapshot(&src, &id).await {
        Ok(Some(v)) => ([(header::CACHE_CONTROL, "no-store")], axum::Json(v)).into_response(),
        Ok(None) => {
            let body =
                json!({"code": "CAMPAIGN_UNKNOWN", "message": format!("no published campaign {id:?}")});
            (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
        }
        Err(e) => {
            let body = json!({"code": "UNAVAILABLE", "message": format!("{e:#}")});
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
    }
}

async fn readyz(State(st): State<AdminState>) -> Response {
    let ping = sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(&st.pool);
    let db = matches!(tokio::time::timeout(Duration::from_secs(1), ping).await, Ok(Ok(1)));
    let down: Vec<i32> = st.assigned.iter().copied().filter(|p| !st.metrics.partition_is_up(*p)).collect();
    if db && down.is_empty() {
        return (StatusCode::OK, axum::Json(json!({"status": "ready"}))).into_response();
    }
    let reason = if db { "partition writers not running yet" } else { "PostgreSQL does not answer" };
    let body = json!({"status": "not ready", "reason": reason, "partitions_down": down});
    (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
}
