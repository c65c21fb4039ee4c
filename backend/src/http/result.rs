//! Result query: `GET /seckill/{campaign}/result/{request_id}`.
//!
//! Clients poll this while their reservation is being written, so it is built to be cheap and to
//! stay off the order path: it runs on its own small PostgreSQL pool and its own Redis client
//! ([`ResultStore`]), and it asks Redis first. A request id still in the campaign's outbox is
//! QUEUED (with `Retry-After`), answered without touching PostgreSQL. Otherwise one PostgreSQL
//! query (an order → SUCCESS, a refusal → SOLD_OUT / FAILED), then the `released` hash (FAILED
//! with reason RELEASED), else NOT_FOUND.
//!
//! A campaign with hot-stock buckets keeps a reservation in its buyer's home bucket; the query
//! knows only the request id, so the outbox and the `released` ledger of every bucket are asked
//! (concurrently; the bucket count is read from PostgreSQL once per published campaign).
//!
//! Redis first is safe because an outbox entry leaves Redis only after its order or refusal is
//! committed (`ack.lua`, `release.lua`): a request id missing from the outbox is either in
//! PostgreSQL already or released, never in between.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use fred::prelude::*;
use protocol::codes::Code;
use protocol::keys::Bucket;
use serde_json::json;

use crate::http::reply::{answer, with_retry_after};
use crate::http::state::{AppState, ResultStore};

/// What the result query found for a request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Still in the outbox: being written.
    Queued,
    /// An order.
    Order {
        /// Order id.
        id: i64,
        /// Amount due.
        amount_cents: i64,
        /// Pay-by time.
        pay_by: DateTime<Utc>,
        /// `PENDING_PAYMENT`, `PAID` or `CLOSED`.
        status: String,
    },
    /// The database refused it.
    Refused {
        /// `SOLD_OUT` or `FAILED`.
        status: String,
        /// Why.
        reason: String,
    },
    /// Released from Redis without an order.
    Released,
    /// Unknown.
    Nothing,
}

/// A row of the one PostgreSQL query: an order (its id, amount and pay-by set), or a refused
/// reservation's result (those three NULL, its reason set).
#[derive(Debug, sqlx::FromRow)]
struct ResultRow {
    /// The order id.
    id: Option<i64>,
    /// What the order costs.
    amount_cents: Option<i64>,
    /// When it is closed unless paid.
    pay_by: Option<DateTime<Utc>>,
    /// The order's status, or the result's (`SOLD_OUT`, `FAILED`).
    status: String,
    /// Why a reservation was refused.
    reason: Option<String>,
}

/// Looks `request_id` up: the outbox, then PostgreSQL, then the released hash.
pub async fn lookup(store: &ResultStore, campaign: &str, request_id: &str) -> Result<Found, String> {
    // PostgreSQL down before the count is known: the campaign's own keys are asked. A campaign
    // without buckets is still answered QUEUED from Redis alone; one with buckets has nothing
    // there, so the query goes on to PostgreSQL and answers degraded, never wrong.
    let count = store.buckets.get(&store.pool, campaign).await.unwrap_or(1);
    let all = Bucket::all(campaign, count);
    let in_any = |pick: fn(&Bucket) -> &String| {
        // On a Redis Cluster a read refused with MOVED or ASK did not run: sent again, briefly.
        let calls = all.iter().map(move |b| {
            protocol::cluster::retry_tryagain(move || store.redis.hexists::<bool, _, _>(pick(b), request_id))
        });
        async move {
            let found = futures::future::join_all(calls).await;
            found.into_iter().try_fold(false, |any, r| r.map(|f| any || f)).map_err(|e| e.to_string())
        }
    };
    if in_any(|b| &b.keys.outbox).await? {
        return Ok(Found::Queued);
    }
    let row: Option<ResultRow> = sqlx::query_as(
        "SELECT id, amount_cents, pay_by, status, reason FROM (
             SELECT 0 AS k, id, amount_cents, pay_by, status, NULL::text AS reason
               FROM orders WHERE request_id = $1 AND campaign_id = $2
             UNION ALL
             SELECT 1, NULL::int8, NULL::int8, NULL::timestamptz, status, reason
               FROM reservation_results WHERE request_id = $1 AND campaign_id = $2
         ) r ORDER BY k LIMIT 1",
    )
    .bind(request_id)
    .bind(campaign)
    .fetch_optional(&store.pool)
    .await
    .map_err(|e| e.to_string())?;
    match row {
        Some(ResultRow {
            id: Some(id),
            amount_cents: Some(amount_cents),
            pay_by: Some(pay_by),
            status,
            ..
        }) => return Ok(Found::Order { id, amount_cents, pay_by, status }),
        Some(ResultRow { status, reason, .. }) => {
            return Ok(Found::Refused { status, reason: reason.unwrap_or_default() })
        }
        None => {}
    }
    let released = in_any(|b| &b.keys.released).await?;
    Ok(if released { Found::Released } else { Found::Nothing })
}

/// The answer for what was found.
pub fn reply(found: Found, request_id: &str) -> Response {
    match found {
        Found::Queued => with_retry_after(
            answer(Code::Queued, None, "still queued; retry later", request_id, json!({})),
            1,
        ),
        Found::Order { id, amount_cents, pay_by, status } => answer(
            Code::Success,
            None,
            "order created",
            request_id,
            json!({"order_id": id, "amount_cents": amount_cents, "pay_by": pay_by.to_rfc3339(), "order_status": status}),
        ),
        Found::Refused { status, reason } => {
            let code = if status == "SOLD_OUT" { Code::SoldOut } else { Code::Failed };
            answer(code, Some(StatusCode::OK), &reason, request_id, json!({"reason": reason}))
        }
        Found::Released => answer(
            Code::Failed,
            Some(StatusCode::OK),
            "reservation released without an order",
            request_id,
            json!({"reason": "RELEASED"}),
        ),
        Found::Nothing => answer(Code::NotFound, None, "no such reservation", request_id, json!({})),
    }
}

/// The handler.
pub async fn handle(
    State(st): State<AppState>,
    Path((campaign, request_id)): Path<(String, String)>,
) -> Response {
    if !protocol::keys::valid_campaign_id(&campaign) || request_id.is_empty() || request_id.len() > 128 {
        return answer(Code::BadRequest, None, "bad campaign or request id", &request_id, json!({}));
    }
    match lookup(&st.results, &campaign, &request_id).await {
        Ok(found) => reply(found, &request_id),
        Err(detail) => {
            tracing::warn!(request_id, detail, "result query degraded");
            with_retry_after(
                answer(
                    Code::ServiceDegraded,
                    None,
                    "result store unavailable; retry later",
                    &request_id,
                    json!({}),
                ),
                2,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_and_retry(found: Found) -> (u16, Option<String>) {
        let r = reply(found, "r1");
        let retry = r.headers().get("retry-after").map(|v| v.to_str().unwrap().to_string());
        (r.status().as_u16(), retry)
    }

    #[test]
    fn each_finding_has_its_status() {
        assert_eq!(status_and_retry(Found::Queued), (202, Some("1".into())));
        let pay_by = DateTime::from_timestamp(1_700_000_000, 0).unwrap();
        let order = Found::Order { id: 1, amount_cents: 1999, pay_by, status: "PENDING_PAYMENT".into() };
        assert_eq!(status_and_retry(order), (200, None));
        let refused = Found::Refused { status: "SOLD_OUT".into(), reason: "stock".into() };
        assert_eq!(status_and_retry(refused), (200, None));
        assert_eq!(status_and_retry(Found::Released), (200, None));
        assert_eq!(status_and_retry(Found::Nothing), (404, None));
    }
}
