//! Payment callback: `POST /orders/{id}/pay`, signed by the (simulated) payment provider.
//!
//! Headers `x-payment-timestamp` (unix seconds) and `x-payment-signature` = hex
//! HMAC-SHA256(payment key, `METHOD\nPATH\nTIMESTAMP\nhex(SHA-256(body))`), checked by
//! [`crate::http::pay_auth`]: missing or wrong → 401 BAD_SIGNATURE (a callback replayed onto another
//! order fails here, the path is signed), signed but outside ± `payment_max_skew_secs` → 401
//! STALE_TIMESTAMP. Body `{"payment_ref": "..."}`.
//!
//! `UPDATE ... WHERE status = 'PENDING_PAYMENT'` decides against a racing close. Idempotent: the
//! same `payment_ref` again on the same order gets the same 200 PAID; a CLOSED order → 409
//! CLOSED; an order paid with another reference → 409 PAID; a reference that already paid
//! another order (the unique index on `payment_ref`) → 409 PAYMENT_REF_USED.

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use protocol::codes::Code;
use protocol::signing::{PAYMENT_SIGNATURE_HEADER, PAYMENT_TIMESTAMP_HEADER};
use serde::Deserialize;
use serde_json::json;

use crate::http::pay_auth::{self, Callback};
use crate::http::reply::answer;
use crate::http::state::AppState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    payment_ref: String,
}

/// The handler.
pub async fn handle(
    State(st): State<AppState>,
    Path(id): Path<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (order_id, payment_ref) = match checked(&st, &id, &method, &uri, &headers, &body) {
        Ok(checked) => checked,
        Err(refused) => return *refused,
    };
    let outcome = pay(&st.pool, order_id, &payment_ref).await;
    reply(order_id, payment_ref, outcome)
}

/// The callback's signature and time, the order id and the body's `payment_ref`, checked: the
/// order id and the reference, or the answer that refuses the callback (boxed: it is large).
fn checked(
    st: &AppState,
    id: &str,
    method: &Method,
    uri: &Uri,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<(i64, String), Box<Response>> {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let cb = Callback {
        timestamp: h(PAYMENT_TIMESTAMP_HEADER),
        signature: h(PAYMENT_SIGNATURE_HEADER),
        method: method.as_str(),
        path: uri.path(),
        body,
    };
    let now = chrono::Utc::now().timestamp();
    if let Err(e) = pay_auth::check(&st.payment, &cb, now, st.payment_max_skew_secs) {
        return Err(Box::new(answer(e.code(), None, &e.to_string(), "", json!({}))));
    }
    let Ok(order_id) = id.parse::<i64>() else {
        return Err(Box::new(answer(Code::BadRequest, None, "order id must be an integer", "", json!({}))));
    };
    let b: Body = match serde_json::from_slice(body) {
        Ok(b) => b,
        Err(e) => return Err(Box::new(answer(Code::BadRequest, None, &format!("body: {e}"), "", json!({})))),
    };
    if b.payment_ref.is_empty() || b.payment_ref.len() > 128 {
        return Err(Box::new(answer(
            Code::BadRequest,
            None,
            "payment_ref must be 1 to 128 bytes",
            "",
            json!({}),
        )));
    }
    Ok((order_id, b.payment_ref))
}

/// The answer to a payment of `order_id` with `payment_ref`, from what it decided.
fn reply(order_id: i64, payment_ref: String, outcome: Result<PayOutcome, sqlx::Error>) -> Response {
    match outcome {
        Ok(PayOutcome::Paid { request_id }) => answer(
            Code::Paid,
            None,
            "order paid",
            &request_id,
            json!({"order_id": order_id, "payment_ref": payment_ref}),
        ),
        Ok(PayOutcome::Closed { request_id }) => answer(
            Code::Closed,
            Some(StatusCode::CONFLICT),
            "order was closed unpaid; refund the payment",
            &request_id,
            json!({"order_id": order_id}),
        ),
        Ok(PayOutcome::PaidElsewhere { request_id }) => answer(
            Code::Paid,
            Some(StatusCode::CONFLICT),
            "order already paid with another payment_ref",
            &request_id,
            json!({"order_id": order_id}),
        ),
        Ok(PayOutcome::RefUsed) => answer(
            Code::PaymentRefUsed,
            None,
            "payment_ref already paid another order",
            "",
            json!({"order_id": order_id}),
        ),
        Ok(PayOutcome::NotFound) => answer(Code::NotFound, None, "no such order", "", json!({})),
        Err(e) => {
            tracing::warn!(order_id, error = %e, "payment failed");
            answer(Code::ServiceDegraded, None, "database unavailable; retry the callback", "", json!({}))
        }
    }
}

/// What a payment attempt decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayOutcome {
    /// Paid now, or paid before with the same reference.
    Paid {
        /// The order's request id.
        request_id: String,
    },
    /// The order was closed first.
    Closed {
        /// The order's request id.
        request_id: String,
    },
    /// Paid before with another reference.
    PaidElsewhere {
        /// The order's request id.
        request_id: String,
    },
    /// The payment reference already paid another order.
    RefUsed,
    /// No such order.
    NotFound,
}

/// Marks an order paid if it is still unpaid; idempotent by `payment_ref`.
pub async fn pay(pool: &sqlx::PgPool, order_id: i64, payment_ref: &str) -> Result<PayOutcome, sqlx::Error> {
    let won: Result<Option<String>, sqlx::Error> = sqlx::query_scalar(
        "UPDATE orders SET status = 'PAID', paid_at = now(), payment_ref = $2
          WHERE id = $1 AND status = 'PENDING_PAYMENT'
         RETURNING request_id",
    )
    .bind(order_id)
    .bind(payment_ref)
    .fetch_optional(pool)
    .await;
    let won = match won {
        Err(sqlx::Error::Database(e)) if e.is_unique_violation() => return Ok(PayOutcome::RefUsed),
        other => other?,
    };
    if let Some(request_id) = won {
        return Ok(PayOutcome::Paid { request_id });
    }
    let row: Option<(String, String, Option<String>)> =
        sqlx::query_as("SELECT request_id, status, payment_ref FROM orders WHERE id = $1")
            .bind(order_id)
            .fetch_optional(pool)
            .await?;
    Ok(match row {
        None => PayOutcome::NotFound,
        Some((request_id, status, _)) if status == "CLOSED" => PayOutcome::Closed { request_id },
        Some((request_id, _, r)) if r.as_deref() == Some(payment_ref) => PayOutcome::Paid { request_id },
        Some((request_id, _, _)) => PayOutcome::PaidElsewhere { request_id },
    })
}
