//! Result query: `GET /seckill/{campaign}/result/{request_id}`.
//!
//! PostgreSQL first (an order → SUCCESS, a refusal → SOLD_OUT / FAILED), then the Redis outbox
//! (still there → QUEUED with `Retry-After`), else NOT_FOUND.

use axum::extract::{Path, State};
use axum::response::Response;
use chrono::{DateTime, Utc};
use fred::prelude::*;
use protocol::codes::Code;
use protocol::keys::CampaignKeys;
use serde_json::json;

use crate::reply::{answer, with_retry_after};
use crate::state::AppState;

/// An order as the result query shows it: id, amount, pay-by, status.
type OrderRow = (i64, i64, DateTime<Utc>, String);

/// The handler.
pub async fn handle(
    State(st): State<AppState>,
    Path((campaign, request_id)): Path<(String, String)>,
) -> Response {
    if !protocol::keys::valid_campaign_id(&campaign) || request_id.is_empty() || request_id.len() > 128 {
        return answer(Code::BadRequest, None, "bad campaign or request id", &request_id, json!({}));
    }
    let order: Result<Option<OrderRow>, _> = sqlx::query_as(
        "SELECT id, amount_cents, pay_by, status FROM orders WHERE request_id = $1 AND campaign_id = $2",
    )
    .bind(&request_id)
    .bind(&campaign)
    .fetch_optional(&st.pool)
    .await;
    match order {
        Ok(Some((id, amount, pay_by, status))) => {
            return answer(
                Code::Success,
                None,
                "order created",
                &request_id,
                json!({"order_id": id, "amount_cents": amount, "pay_by": pay_by.to_rfc3339(), "order_status": status}),
            )
        }
        Ok(None) => {}
        Err(e) => return degraded(&request_id, &e.to_string()),
    }
    let refusal: Result<Option<(String, String)>, _> = sqlx::query_as(
        "SELECT status, reason FROM reservation_results WHERE request_id = $1 AND campaign_id = $2",
    )
    .bind(&request_id)
    .bind(&campaign)
    .fetch_optional(&st.pool)
    .await;
    match refusal {
        Ok(Some((status, reason))) => {
            let code = if status == "SOLD_OUT" { Code::SoldOut } else { Code::Failed };
            return answer(
                code,
                Some(axum::http::StatusCode::OK),
                &reason,
                &request_id,
                json!({"reason": reason}),
            );
        }
        Ok(None) => {}
        Err(e) => return degraded(&request_id, &e.to_string()),
    }
    let keys = CampaignKeys::new(&campaign);
    let queued: Result<bool, _> = st.redis.hexists(&keys.outbox, &request_id).await;
    match queued {
        Ok(true) => with_retry_after(
            answer(Code::Queued, None, "still queued; retry later", &request_id, json!({})),
            1,
        ),
        Ok(false) => {
            let released: Result<bool, _> = st.redis.hexists(&keys.released, &request_id).await;
            match released {
                Ok(true) => answer(
                    Code::Failed,
                    Some(axum::http::StatusCode::OK),
                    "reservation released without an order",
                    &request_id,
                    json!({"reason": "RELEASED"}),
                ),
                Ok(false) => answer(Code::NotFound, None, "no such reservation", &request_id, json!({})),
                Err(e) => degraded(&request_id, &e.to_string()),
            }
        }
        Err(e) => degraded(&request_id, &e.to_string()),
    }
}

fn degraded(request_id: &str, detail: &str) -> Response {
    tracing::warn!(request_id, detail, "result query degraded");
    with_retry_after(
        answer(Code::ServiceDegraded, None, "result store unavailable; retry later", request_id, json!({})),
        2,
    )
}
