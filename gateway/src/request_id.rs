//! The id the gateway gives a request, minted in one place (the sale's,
//! [`plugins::serve::new_request_id`]): a UUIDv7 (time-ordered, so ids sort by arrival in logs),
//! sent upstream as `X-Request-Id` and written in the access line.

/// A new request id.
pub fn new() -> String {
    plugins::serve::new_request_id()
}
