//! The order writer's HTTP surface: the router over the handlers. The handlers share
//! [`crate::http::state::AppState`] and answer through [`crate::http::reply`].

pub mod pay_auth;
pub mod payment;
pub mod reply;
pub mod result;
pub mod state;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::json;

use crate::http::state::AppState;

/// The router: result query, payment callback, and the health check the gateway's load balancer
/// polls. Reservations do not come in over HTTP: the gateway produces them to Kafka itself.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/seckill/{campaign}/result/{request_id}", get(crate::http::result::handle))
        .route("/orders/{id}/pay", post(crate::http::payment::handle))
        .with_state(state)
}

/// `GET /healthz`: 200 while this process serves HTTP. A liveness check, not flapping with a
/// dependency: the result query and the payment callback answer a dependency's outage per
/// request (503).
async fn healthz() -> Response {
    (StatusCode::OK, axum::Json(json!({"status": "ok"}))).into_response()
}
