//! The order writer's admin listener (`[admin] listen`): Prometheus `/metrics` (see
//! [`crate::admin::metrics`]), `/healthz` (the process answers) and `/readyz` (PostgreSQL answers
//! within a second and every partition of a fixed plan has its writer running; a writer by lease
//! is ready once PostgreSQL answers, its partitions changing as it runs). Keep it off the public
//! interface: it is not authenticated.

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
        .with_state(state)
}

async fn metrics(State(st): State<AdminState>) -> Response {
    refresh_ends(&st).await;
    let families = st.metrics.gather(&st.pool).await;
    let encoder = TextEncoder::new();
    let mut body = Vec::new();
    if let Err(e) = encoder.encode(&families, &mut body) {
        return (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot encode metrics: {e}")).into_response();
    }
    ([(header::CONTENT_TYPE, encoder.format_type().to_string())], body).into_response()
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
