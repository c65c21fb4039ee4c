//! The answers the gateway writes itself: JSON bodies with their status, `Cache-Control`,
//! `Retry-After` and, after a failed proxy attempt or a front-door refusal, `Connection: close`.

use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use pingora_core::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use plugins::Denial;
use protocol::campaign::Window;
use protocol::codes::{Answer, Code};
use serde_json::Value;

use crate::frontdoor;
use crate::limits::Refusal;
use crate::observe::Trace;
use crate::page;
use crate::reload::CampaignEntry;

/// The 202 body of a reservation: where to poll, and the result token to poll with (sent as
/// `X-Result-Token`).
pub(crate) fn queued(campaign: &str, request_id: &str, result_token: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "code": Code::Queued,
        "message": "reserved; your order is being written",
        "request_id": request_id,
        "poll_url": format!("/seckill/{campaign}/result/{request_id}"),
        "result_token": result_token,
    }))
    .unwrap_or_default()
}

/// Writes a complete JSON answer. Always `Ok(true)`: the request is answered.
pub(crate) async fn respond(
    session: &mut Session,
    status: u16,
    body: Vec<u8>,
    retry_after: Option<u32>,
    cache_control: &'static str,
) -> Result<bool> {
    write_json(session, status, body, retry_after, cache_control, false).await
}

/// Answers after a failed proxy attempt. The connection is not reused (what is left of the
/// request may be unread), so the answer says `Connection: close`: a client must not send its
/// next request on it.
pub(crate) async fn respond_and_close(session: &mut Session, status: u16, body: Vec<u8>) -> Result<bool> {
    session.set_keepalive(None);
    write_json(session, status, body, None, "no-store", true).await
}

async fn write_json(
    session: &mut Session,
    status: u16,
    body: Vec<u8>,
    retry_after: Option<u32>,
    cache_control: &'static str,
    close: bool,
) -> Result<bool> {
    let mut header = ResponseHeader::build(status, Some(5))?;
    header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
    header.insert_header(http::header::CONTENT_LENGTH, body.len())?;
    header.insert_header(http::header::CACHE_CONTROL, cache_control)?;
    if let Some(secs) = retry_after {
        header.insert_header(http::header::RETRY_AFTER, secs)?;
    }
    if close {
        header.insert_header(http::header::CONNECTION, "close")?;
    }
    session.write_response_header(Box::new(header), false).await?;
    session.write_response_body(Some(Bytes::from(body)), true).await?;
    Ok(true)
}

/// Answers a front-door refusal and closes the connection, after reading what is left of the
/// body for a bounded time (the client then reads the answer, not a reset).
pub(crate) async fn refuse(
    session: &mut Session,
    trace: &mut Trace,
    request_id: &str,
    r: &Refusal,
) -> Result<bool> {
    trace.answered(r.code);
    let body = Answer { code: r.code, message: r.message, request_id }.to_json();
    respond_and_close(session, r.code.status(), body).await?;
    frontdoor::drain(session).await;
    Ok(true)
}

/// Answers a denial: `{code, message, request_id}` with the code's status.
pub(crate) async fn deny(
    session: &mut Session,
    trace: &mut Trace,
    request_id: &str,
    d: &Denial,
) -> Result<bool> {
    trace.answered(d.code);
    let body = Answer { code: d.code, message: &d.message, request_id }.to_json();
    respond(session, d.code.status(), body, d.retry_after_secs, "no-store").await
}

/// `GET /seckill/{c}/info`: server time, window state, switches; cacheable for a second.
pub(crate) async fn info(session: &mut Session, entry: &CampaignEntry) -> Result<bool> {
    let c = &entry.campaign;
    let now = Utc::now();
    let state = match c.window(now) {
        Window::NotStarted => "NOT_STARTED",
        Window::Open => "OPEN",
        Window::Ended => "ENDED",
    };
    let body = serde_json::to_vec(&serde_json::json!({
        "campaign": c.id,
        "server_time": now.to_rfc3339_opts(SecondsFormat::Millis, true),
        "server_time_ms": now.timestamp_millis(),
        "state": state,
        "switches": {
            "closed": c.switches.closed,
            "queue_only": c.switches.queue_only,
            "pause_replenish": c.switches.pause_replenish,
        },
        "starts_at": c.starts_at.to_rfc3339(),
        "ends_at": c.ends_at.to_rfc3339(),
    }))
    .unwrap_or_default();
    respond(session, 200, body, None, "max-age=1").await
}

/// One file of the buyer's page (`head`: a HEAD request), as [`page::decide`] says.
pub(crate) async fn page(session: &mut Session, asset: &'static page::Asset, head: bool) -> Result<bool> {
    let req = session.req_header();
    let text = |name| req.headers.get(name).and_then(|v: &http::HeaderValue| v.to_str().ok());
    let reply =
        page::decide(asset, head, text(http::header::ACCEPT_ENCODING), text(http::header::IF_NONE_MATCH));
    let mut header = ResponseHeader::build(reply.status, Some(7))?;
    if reply.status == 200 {
        header.insert_header(http::header::CONTENT_TYPE, asset.content_type)?;
        if reply.gzip {
            header.insert_header(http::header::CONTENT_ENCODING, "gzip")?;
        }
    }
    header.insert_header(http::header::CONTENT_LENGTH, reply.length)?;
    header.insert_header(http::header::ETAG, reply.etag)?;
    header.insert_header(http::header::CACHE_CONTROL, page::CACHE_CONTROL)?;
    header.insert_header(http::header::VARY, "Accept-Encoding")?;
    header.insert_header("x-content-type-options", "nosniff")?;
    if reply.body.is_empty() {
        session.write_response_header(Box::new(header), true).await?;
    } else {
        session.write_response_header(Box::new(header), false).await?;
        session.write_response_body(Some(Bytes::from_static(reply.body)), true).await?;
    }
    Ok(true)
}

/// A permanent redirect to `location` (a path of ours).
pub(crate) async fn redirect(session: &mut Session, location: &str) -> Result<bool> {
    let mut header = ResponseHeader::build(308, Some(3))?;
    header.insert_header(http::header::LOCATION, location)?;
    header.insert_header(http::header::CONTENT_LENGTH, 0)?;
    header.insert_header(http::header::CACHE_CONTROL, page::CACHE_CONTROL)?;
    session.write_response_header(Box::new(header), true).await?;
    Ok(true)
}

/// Answers a captcha or token request: 200 with its JSON (plus `request_id`), or the denial.
pub(crate) async fn issued(
    session: &mut Session,
    trace: &mut Trace,
    request_id: &str,
    answer: std::result::Result<Value, Denial>,
) -> Result<bool> {
    match answer {
        Ok(mut body) => {
            body["request_id"] = request_id.into();
            respond(session, 200, serde_json::to_vec(&body).unwrap_or_default(), None, "no-store").await
        }
        Err(d) => deny(session, trace, request_id, &d).await,
    }
}
