//! What the sale answers, as plain data a proxy writes ([`Reply`]): the status, the headers, the
//! body and the answer code, made here once for every endpoint (JSON answers with their
//! `Cache-Control` and `Retry-After`, the buyer's page with its `ETag`, the page's redirect).

use std::time::Duration;

use bytes::Bytes;
use chrono::{SecondsFormat, Utc};
use http::header::{self, HeaderName, HeaderValue};
use protocol::campaign::{Campaign, Window};
use protocol::codes::{Answer, Code};

use crate::checks::budget::Permit;
use crate::denial::Denial;
use crate::edge::Issued;
use crate::serve::page::{self, Asset};
use crate::serve::route::PREFIX;

/// One answer of the sale, ready to write.
#[derive(Debug)]
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// The answer code of a JSON answer (`None` for the page's files and redirect).
    pub code: Option<Code>,
    /// Headers, `Content-Length` included.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The body (empty for a HEAD request or a 304).
    pub body: Bytes,
    /// The id the answer is given under when it is not the request's own: a safe retry's QUEUED
    /// answer carries the first request's id (the proxy logs it as the request's).
    pub answered_as: Option<String>,
    /// The campaign's concurrency budget place: hold it until the answer is written.
    pub permit: Option<Permit>,
    /// How long the reservation step (script and Kafka hand-over) took, for an order that got
    /// that far.
    pub reserve_took: Option<Duration>,
    /// The order went on with its global limits unchecked (Redis did not answer; every rule is
    /// fail-open).
    pub global_limits_failed_open: bool,
}

impl Reply {
    fn new(status: u16, code: Option<Code>, body: Bytes, cache_control: &'static str) -> Self {
        let headers = vec![
            (header::CONTENT_LENGTH, HeaderValue::from(body.len())),
            (header::CACHE_CONTROL, HeaderValue::from_static(cache_control)),
        ];
        Self {
            status,
            code,
            headers,
            body,
            answered_as: None,
            permit: None,
            reserve_took: None,
            global_limits_failed_open: false,
        }
    }

    fn json(status: u16, code: Code, body: Vec<u8>, cache_control: &'static str) -> Self {
        let mut reply = Self::new(status, Some(code), Bytes::from(body), cache_control);
        reply.headers.push((header::CONTENT_TYPE, HeaderValue::from_static("application/json")));
        reply
    }

    /// A denial: `{code, message, request_id}` with the code's status and `Retry-After`.
    pub fn denied(d: &Denial, request_id: &str) -> Self {
        let body = Answer { code: d.code, message: &d.message, request_id }.to_json();
        Self::json(d.code.status(), d.code, body, "no-store").with_retry_after(d.retry_after_secs)
    }

    /// A denial of a request that may hold a reservation ([`Denial::may_hold`]): as
    /// [`Reply::denied`], with where to poll and the result token to poll with, as `QUEUED`.
    pub fn may_hold(d: &Denial, campaign: &str, request_id: &str, result_token: &str) -> Self {
        let body = serde_json::to_vec(&serde_json::json!({
            "code": d.code,
            "message": d.message,
            "request_id": request_id,
            "poll_url": poll_url(campaign, request_id),
            "result_token": result_token,
        }))
        .unwrap_or_default();
        Self::json(d.code.status(), d.code, body, "no-store").with_retry_after(d.retry_after_secs)
    }

    fn with_retry_after(mut self, secs: Option<u32>) -> Self {
        if let Some(secs) = secs {
            self.headers.push((header::RETRY_AFTER, HeaderValue::from(secs)));
        }
        self
    }

    /// `202 QUEUED`: where to poll, and the result token to poll with (sent back as
    /// `X-Result-Token`).
    pub fn queued(campaign: &str, request_id: &str, result_token: &str) -> Self {
        let body = serde_json::to_vec(&serde_json::json!({
            "code": Code::Queued,
            "message": "reserved; your order is being written",
            "request_id": request_id,
            "poll_url": poll_url(campaign, request_id),
            "result_token": result_token,
        }))
        .unwrap_or_default();
        Self::json(202, Code::Queued, body, "no-store")
    }

    /// A captcha challenge, a campaign token or a place in the waiting room: its status with its
    /// JSON and the request's id (and `Retry-After` for a place in the room).
    pub fn issued(issued: Issued, request_id: &str) -> Self {
        let Issued { code, mut body, retry_after_secs } = issued;
        body["request_id"] = request_id.into();
        let mut reply =
            Self::json(code.status(), code, serde_json::to_vec(&body).unwrap_or_default(), "no-store");
        if let Some(secs) = retry_after_secs {
            reply.headers.push((header::RETRY_AFTER, HeaderValue::from(secs)));
        }
        reply
    }

    /// `GET /seckill/{c}/info`: server time, window state, switches, the waiting room (`null` when
    /// off); cacheable for a second.
    pub fn info(c: &Campaign) -> Self {
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
            // The buyer's page asks its token without an answer first when the room is on
            // (it solves the work only when its turn is due), and may join the pre-queue.
            "waiting_room": c.waiting_room.enabled.then(|| serde_json::json!({
                "pre_queue_secs": c.waiting_room.pre_queue_secs,
            })),
        }))
        .unwrap_or_default();
        let mut reply = Self::new(200, None, Bytes::from(body), "max-age=1");
        reply.headers.push((header::CONTENT_TYPE, HeaderValue::from_static("application/json")));
        reply
    }

    /// One file of the buyer's page (`head_only`: a HEAD request), as `page::decide` says
    /// from the request's `Accept-Encoding` and `If-None-Match`.
    pub fn page(
        asset: &'static Asset,
        head_only: bool,
        accept_encoding: Option<&str>,
        if_none_match: Option<&str>,
    ) -> Self {
        let served = page::decide(asset, head_only, accept_encoding, if_none_match);
        let mut reply = Self::new(served.status, None, Bytes::from_static(served.body), page::CACHE_CONTROL);
        reply.headers[0].1 = HeaderValue::from(served.length);
        if served.status == 200 {
            reply.headers.push((header::CONTENT_TYPE, HeaderValue::from_static(asset.content_type)));
            if served.gzip {
                reply.headers.push((header::CONTENT_ENCODING, HeaderValue::from_static("gzip")));
            }
        }
        if let Ok(etag) = HeaderValue::from_str(served.etag) {
            reply.headers.push((header::ETAG, etag));
        }
        reply.headers.push((header::VARY, HeaderValue::from_static("Accept-Encoding")));
        reply
            .headers
            .push((HeaderName::from_static("x-content-type-options"), HeaderValue::from_static("nosniff")));
        reply
    }

    /// A permanent redirect to the campaign's page.
    pub fn to_page(campaign: &str) -> Self {
        let mut reply = Self::new(308, None, Bytes::new(), page::CACHE_CONTROL);
        if let Ok(location) = HeaderValue::from_str(&format!("{PREFIX}{campaign}/")) {
            reply.headers.push((header::LOCATION, location));
        }
        reply
    }

    /// The `Retry-After` seconds of the answer, if it has one.
    pub fn retry_after(&self) -> Option<&HeaderValue> {
        self.headers.iter().find(|(n, _)| n == header::RETRY_AFTER).map(|(_, v)| v)
    }
}

/// Where a request's result is polled.
fn poll_url(campaign: &str, request_id: &str) -> String {
    format!("{PREFIX}{campaign}/result/{request_id}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn header<'a>(r: &'a Reply, name: &HeaderName) -> Option<&'a str> {
        r.headers.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.to_str().ok())
    }

    #[test]
    fn a_denial_has_its_status_code_and_retry_after() {
        let d = Denial::new(Code::TryLater, "busy").retry_after(2);
        let r = Reply::denied(&d, "r-1");
        assert_eq!((r.status, r.code), (Code::TryLater.status(), Some(Code::TryLater)));
        assert_eq!(header(&r, &header::RETRY_AFTER), Some("2"));
        assert_eq!(header(&r, &header::CONTENT_LENGTH), Some(r.body.len().to_string().as_str()));
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!((body["code"].as_str(), body["request_id"].as_str()), (Some("TRY_LATER"), Some("r-1")));
    }

    #[test]
    fn queued_says_where_to_poll() {
        let r = Reply::queued("c1", "r-1", "tok");
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!((r.status, r.code), (202, Some(Code::Queued)));
        assert_eq!(body["poll_url"], "/seckill/c1/result/r-1");
        assert_eq!(body["result_token"], "tok");
        assert_eq!(header(&r, &header::CACHE_CONTROL), Some("no-store"));
    }

    #[test]
    fn a_request_that_may_hold_a_reservation_says_where_to_poll() {
        let d = Denial::new(Code::ServiceDegraded, "may hold").retry_after(1);
        let r = Reply::may_hold(&d, "c1", "r-1", "tok");
        let body: Value = serde_json::from_slice(&r.body).unwrap();
        assert_eq!((r.status, r.code), (503, Some(Code::ServiceDegraded)));
        assert_eq!(
            (body["code"].as_str(), body["message"].as_str()),
            (Some("SERVICE_DEGRADED"), Some("may hold"))
        );
        assert_eq!(
            (body["poll_url"].as_str(), body["result_token"].as_str()),
            (Some("/seckill/c1/result/r-1"), Some("tok"))
        );
        assert_eq!(header(&r, &header::RETRY_AFTER), Some("1"));
    }

    #[test]
    fn a_head_request_for_the_page_has_the_length_of_a_get_and_no_body() {
        let asset = page::find("").unwrap();
        let r = Reply::page(asset, true, None, None);
        assert_eq!((r.status, r.body.len()), (200, 0));
        assert_eq!(header(&r, &header::CONTENT_LENGTH), Some(asset.plain.len().to_string().as_str()));
        let redirect = Reply::to_page("c1");
        assert_eq!((redirect.status, header(&redirect, &header::LOCATION)), (308, Some("/seckill/c1/")));
    }
}
