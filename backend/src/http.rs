//! The order writer's HTTP surface: the router over the handlers. The handlers share
//! [`crate::state::AppState`] and answer through [`crate::reply`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use crate::state::AppState;

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
