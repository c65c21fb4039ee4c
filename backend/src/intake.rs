//! Intake: `POST /internal/reservations`, the gateway's forward of a successful reservation.
//!
//! Verify the gateway's signature → decode the record → produce it to Kafka (key = user) and wait
//! for the broker's ack → 202 QUEUED with the poll URL. Kafka down → 503; nothing is lost, the
//! record is still in the Redis outbox and the sweeper produces it later.

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use protocol::codes::Code;
use protocol::record::Reservation;
use protocol::signing::{RESERVATION_HEADER, SIGNATURE_HEADER};
use serde_json::json;

use crate::reply::answer;
use crate::state::AppState;

/// The handler.
pub async fn handle(State(st): State<AppState>, headers: HeaderMap) -> Response {
    let h = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    let bytes = match st.gateway.open(h(RESERVATION_HEADER), h(SIGNATURE_HEADER)) {
        Ok(b) => b,
        Err(e) => return answer(Code::BadSignature, None, &e.to_string(), "", json!({})),
    };
    let record = match Reservation::from_json(&bytes) {
        Ok(r) if protocol::keys::valid_campaign_id(&r.campaign) && !r.request_id.is_empty() && r.qty >= 1 => {
            r
        }
        Ok(_) => {
            return answer(
                Code::BadRequest,
                None,
                "record has a bad campaign id, request id or qty",
                "",
                json!({}),
            )
        }
        Err(e) => {
            return answer(Code::BadRequest, None, &format!("not a reservation record: {e}"), "", json!({}))
        }
    };
    let rid = record.request_id.as_str();
    match st.producer.send(&record.user, bytes.clone()).await {
        Ok(_) => answer(
            Code::Queued,
            None,
            "reservation queued; poll the result",
            rid,
            json!({"poll_url": format!("/seckill/{}/result/{}", record.campaign, rid)}),
        ),
        Err(e) => {
            tracing::warn!(request_id = rid, error = %e, "intake produce failed; left to the sweeper");
            answer(
                Code::ServiceDegraded,
                None,
                "queue unavailable; the reservation is kept and will be processed",
                rid,
                json!({}),
            )
        }
    }
}
