//! JSON answers of the order writer's HTTP handlers: `{code, message, request_id, ...}`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use protocol::codes::Code;
use serde_json::{json, Value};

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
