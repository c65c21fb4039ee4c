//! The answers the proxy writes itself, around the sale's (`plugins::Reply`): a front-door
//! refusal and the answer after a failed proxy attempt, JSON with `Connection: close` (HTML
//! for a shop route's unreachable or slow upstream: `shop::page`).

use bytes::Bytes;
use pingora_core::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::Session;
use protocol::codes::Answer;

use crate::frontdoor;
use crate::limits::Refusal;
use crate::observe::Trace;

/// Answers after a failed proxy attempt. The connection is not reused (what is left of the
/// request may be unread), so the answer says `Connection: close`: a client must not send its
/// next request on it.
pub(crate) async fn respond_and_close(session: &mut Session, status: u16, body: Vec<u8>) -> Result<bool> {
    let header = head(status, "application/json", body.len())?;
    write_and_close(session, header, body).await
}

/// The head of an answer of the gateway's own: `status`, its type and length, `no-store`.
pub(crate) fn head(status: u16, content_type: &str, len: usize) -> Result<ResponseHeader> {
    let mut header = ResponseHeader::build(status, Some(4))?;
    header.insert_header(http::header::CONTENT_TYPE, content_type)?;
    header.insert_header(http::header::CONTENT_LENGTH, len)?;
    header.insert_header(http::header::CACHE_CONTROL, "no-store")?;
    Ok(header)
}

/// Writes `header` and `body` with `Connection: close`, and does not reuse the connection.
pub(crate) async fn write_and_close(
    session: &mut Session,
    mut header: ResponseHeader,
    body: Vec<u8>,
) -> Result<bool> {
    session.set_keepalive(None);
    header.insert_header(http::header::CONNECTION, "close")?;
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
