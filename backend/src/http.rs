//! The order writer's HTTP surface: one router, shared state, JSON answers.

use std::sync::Arc;

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use fred::prelude::Client as RedisClient;
use protocol::codes::Code;
use protocol::signing::Signer;
use serde_json::{json, Value};
use sqlx::PgPool;

use crate::producer::Producer;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// PostgreSQL.
    pub pool: PgPool,
    /// Redis.
    pub redis: RedisClient,
    /// Kafka producer.
    pub producer: Producer,
    /// Verifies the gateway's signature on forwarded reservations.
    pub gateway: Arc<Signer>,
    /// Verifies the payment provider's callbacks.
    pub payment: Arc<Signer>,
}

/// The router: intake, result query, payment callback, and the health check the gateway's
/// load balancer polls.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/internal/reservations", post(crate::intake::handle))
        .route("/seckill/{campaign}/result/{request_id}", get(crate::result::handle))
        .route("/orders/{id}/pay", post(crate::payment::handle))
        .with_state(state)
}

/// `GET /healthz`: 200 while this process serves HTTP. Intake needs only Kafka, and a Kafka
/// outage is answered per request (503, the record waits in the outbox), so this stays a
/// liveness check rather than flapping with a dependency.
async fn healthz() -> Response {
    (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
}

/// A JSON answer `{code, message, request_id, ...extra}` with the code's status (or `status`).
pub fn answer(
    code: Code,
    status: Option<StatusCode>,
    message: &str,
    request_id: &str,
    extra: Value,
) -> Response {
    let mut body = json!({"code": code, "message": message, "request_id": request_id});
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    let status =
        status.unwrap_or(StatusCode::from_u16(code.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR));
    (status, axum::Json(body)).into_response()
}

/// Adds `Retry-After: secs`.
pub fn with_retry_after(mut r: Response, secs: u32) -> Response {
    r.headers_mut().insert("retry-after", HeaderValue::from(secs));
    r
}
