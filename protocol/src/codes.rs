//! Answer codes clients see, and their HTTP statuses.
//!
//! Every JSON answer of the gateway and of the order writer has the shape
//! `{"code": "...", "message": "...", "request_id": "..."}` (plus fields of its own for some
//! codes). The codes are stable: clients and dashboards key on them. The README lists them.

use serde::Serialize;

/// A stable answer code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    /// The reservation is taken; the order is being written. Poll the result URL.
    Queued,
    /// No stock left.
    SoldOut,
    /// This user already holds the campaign's per-user limit.
    LimitReached,
    /// The campaign window has not opened yet (server time).
    NotStarted,
    /// The campaign window has closed.
    Ended,
    /// No campaign with that id is configured.
    CampaignUnknown,
    /// The campaign is configured but its stock has not been published to Redis.
    CampaignNotReady,
    /// The campaign's `closed` kill switch is on.
    CampaignClosed,
    /// The campaign's `queue_only` switch is on, or its concurrency budget is full: try later.
    TryLater,
    /// An IP, device or account sent more requests per second than the campaign allows.
    RateLimited,
    /// The request is malformed; the message names what is wrong.
    BadRequest,
    /// Missing or invalid signature: an order's `X-Signature` (HMAC of its canonical string
    /// under the token's signing key), or a payment callback's.
    BadSignature,
    /// The login JWT (the shop's auth service) is missing, not valid, expired, not yet valid,
    /// or for another issuer or audience.
    BadLogin,
    /// The campaign token is missing, not valid, or for another campaign or device.
    BadToken,
    /// The campaign token has expired: get a new one.
    TokenExpired,
    /// A result query without the result token of its request (missing, forged, for another
    /// user, request or campaign, or expired). Answered at the edge alike whether the request id
    /// exists or not.
    BadResultToken,
    /// The hidden order path does not belong to this token (or the order came without one).
    BadPath,
    /// The order's nonce was used before by another request.
    Replay,
    /// The user may not buy in this campaign (blacklist, eligible set or a campaign rule).
    NotEligible,
    /// The captcha answer is wrong, its challenge expired or was used, or the provider's
    /// token is not valid.
    CaptchaFailed,
    /// A captcha challenge (proof of work) to solve before asking for a token.
    Challenge,
    /// A campaign token, its hidden order path and its signing key.
    TokenIssued,
    /// The campaign's waiting room: not yet your turn. The answer carries the signed queue
    /// ticket (present it again as `X-Queue-Ticket`), the position, the number ahead and the ETA.
    Waiting,
    /// A queue ticket that is not valid here: forged, for another user, device or campaign, or
    /// expired.
    BadTicket,
    /// A dependency (Redis) is down or slow: fail fast, nothing was reserved.
    ServiceDegraded,
    /// No route matches the request.
    RouteNotFound,
    /// The upstream of a shop route could not be reached.
    UpstreamUnavailable,
    /// The order is written; the answer carries the order id, amount and pay-by time.
    Success,
    /// The reservation could not become an order; the answer carries the reason.
    Failed,
    /// Unknown request or order id.
    NotFound,
    /// The order is paid.
    Paid,
    /// The order was closed (unpaid at its pay-by time); it cannot be paid any more.
    Closed,
    /// A signed callback whose timestamp is outside the accepted window (too old or ahead).
    StaleTimestamp,
    /// The payment reference already paid another order: a callback replayed onto this one.
    PaymentRefUsed,
    /// The request body is larger than the route's `client_max_body_size`.
    BodyTooLarge,
    /// The request's header section is larger, or has more fields, than the front door allows.
    HeadersTooLarge,
    /// The client did not send its request header or body in time.
    RequestTimeout,
    /// An unexpected error on our side.
    Internal,
}

impl Code {
    /// The code as it appears in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::Queued => "QUEUED",
            Code::SoldOut => "SOLD_OUT",
            Code::LimitReached => "LIMIT_REACHED",
            Code::NotStarted => "NOT_STARTED",
            Code::Ended => "ENDED",
            Code::CampaignUnknown => "CAMPAIGN_UNKNOWN",
            Code::CampaignNotReady => "CAMPAIGN_NOT_READY",
            Code::CampaignClosed => "CAMPAIGN_CLOSED",
            Code::TryLater => "TRY_LATER",
            Code::RateLimited => "RATE_LIMITED",
            Code::BadRequest => "BAD_REQUEST",
            Code::BadSignature => "BAD_SIGNATURE",
            Code::BadLogin => "BAD_LOGIN",
            Code::BadToken => "BAD_TOKEN",
            Code::TokenExpired => "TOKEN_EXPIRED",
            Code::BadResultToken => "BAD_RESULT_TOKEN",
            Code::BadPath => "BAD_PATH",
            Code::Replay => "REPLAY",
            Code::NotEligible => "NOT_ELIGIBLE",
            Code::CaptchaFailed => "CAPTCHA_FAILED",
            Code::Challenge => "CHALLENGE",
            Code::TokenIssued => "TOKEN_ISSUED",
            Code::Waiting => "WAITING",
            Code::BadTicket => "BAD_TICKET",
            Code::ServiceDegraded => "SERVICE_DEGRADED",
            Code::RouteNotFound => "ROUTE_NOT_FOUND",
            Code::UpstreamUnavailable => "UPSTREAM_UNAVAILABLE",
            Code::Success => "SUCCESS",
            Code::Failed => "FAILED",
            Code::NotFound => "NOT_FOUND",
            Code::Paid => "PAID",
            Code::Closed => "CLOSED",
            Code::StaleTimestamp => "STALE_TIMESTAMP",
            Code::PaymentRefUsed => "PAYMENT_REF_USED",
            Code::BodyTooLarge => "BODY_TOO_LARGE",
            Code::HeadersTooLarge => "HEADERS_TOO_LARGE",
            Code::RequestTimeout => "REQUEST_TIMEOUT",
            Code::Internal => "INTERNAL",
        }
    }

    /// The HTTP status that goes with the code.
    pub fn status(self) -> u16 {
        match self {
            Code::Queued => 202,
            Code::SoldOut | Code::Ended => 410,
            Code::LimitReached | Code::CampaignNotReady | Code::PaymentRefUsed | Code::Replay => 409,
            Code::NotStarted => 425,
            Code::CampaignUnknown | Code::RouteNotFound | Code::NotFound | Code::BadPath => 404,
            Code::CampaignClosed | Code::ServiceDegraded => 503,
            Code::TryLater | Code::RateLimited => 429,
            Code::BadRequest => 400,
            Code::BadSignature
            | Code::StaleTimestamp
            | Code::BadLogin
            | Code::BadToken
            | Code::TokenExpired
            | Code::BadResultToken => 401,
            Code::NotEligible | Code::CaptchaFailed | Code::BadTicket => 403,
            Code::UpstreamUnavailable => 502,
            Code::Success
            | Code::Failed
            | Code::Paid
            | Code::Closed
            | Code::Challenge
            | Code::TokenIssued
            | Code::Waiting => 200,
            Code::BodyTooLarge => 413,
            Code::HeadersTooLarge => 431,
            Code::RequestTimeout => 408,
            Code::Internal => 500,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The common JSON answer body.
#[derive(Debug, Clone, Serialize)]
pub struct Answer<'a> {
    /// Stable code.
    pub code: Code,
    /// Human-readable reason.
    pub message: &'a str,
    /// The request id the gateway gave this request.
    pub request_id: &'a str,
}

impl Answer<'_> {
    /// Serialises the answer.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("answer serialises")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_name_matches_as_str() {
        for code in [
            Code::Queued,
            Code::SoldOut,
            Code::LimitReached,
            Code::ServiceDegraded,
            Code::StaleTimestamp,
            Code::PaymentRefUsed,
            Code::BodyTooLarge,
            Code::HeadersTooLarge,
            Code::RequestTimeout,
            Code::BadLogin,
            Code::BadToken,
            Code::TokenExpired,
            Code::BadResultToken,
            Code::BadPath,
            Code::Replay,
            Code::NotEligible,
            Code::CaptchaFailed,
            Code::Challenge,
            Code::TokenIssued,
            Code::Waiting,
            Code::BadTicket,
        ] {
            let json = serde_json::to_string(&code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn answer_shape() {
        let a = Answer { code: Code::SoldOut, message: "sold out", request_id: "r" };
        let v: serde_json::Value = serde_json::from_slice(&a.to_json()).unwrap();
        assert_eq!(v["code"], "SOLD_OUT");
        assert_eq!(v["request_id"], "r");
        assert_eq!(Code::SoldOut.status(), 410);
        assert_eq!(Code::Queued.status(), 202);
        assert_eq!(Code::StaleTimestamp.status(), 401);
        assert_eq!(Code::PaymentRefUsed.status(), 409);
        assert_eq!(
            (Code::BodyTooLarge.status(), Code::HeadersTooLarge.status(), Code::RequestTimeout.status()),
            (413, 431, 408)
        );
        for (code, status) in [
            (Code::BadLogin, 401),
            (Code::BadToken, 401),
            (Code::TokenExpired, 401),
            (Code::BadResultToken, 401),
            (Code::BadSignature, 401),
            (Code::BadPath, 404),
            (Code::Replay, 409),
            (Code::NotEligible, 403),
            (Code::CaptchaFailed, 403),
            (Code::TokenIssued, 200),
            (Code::Waiting, 200),
            (Code::BadTicket, 403),
        ] {
            assert_eq!(code.status(), status, "{code}");
        }
    }
}
