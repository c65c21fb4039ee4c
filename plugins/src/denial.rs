//! The one refusal type of the sale: every check answers `Ok` or a [`Denial`] (the code, the
//! message and, for "try later" answers, a `Retry-After` hint), which
//! [`crate::Reply::denied`] turns into the JSON answer.

use std::borrow::Cow;

use protocol::codes::Code;

/// Why a request is answered at the edge instead of going on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// The answer code (its HTTP status comes with it).
    pub code: Code,
    /// Human-readable reason.
    pub message: Cow<'static, str>,
    /// Seconds for a `Retry-After` header, when the client should come back.
    pub retry_after_secs: Option<u32>,
    /// The request may hold a reservation (its outcome is unknown at the edge): the answer
    /// carries the request's `poll_url` and `result_token`, as `QUEUED` does, so that its buyer
    /// can learn the outcome.
    pub may_hold: bool,
}

impl Denial {
    /// A denial with `code` and `message`.
    pub fn new(code: Code, message: impl Into<Cow<'static, str>>) -> Self {
        Self { code, message: message.into(), retry_after_secs: None, may_hold: false }
    }

    /// Adds a `Retry-After` hint.
    pub fn retry_after(mut self, secs: u32) -> Self {
        self.retry_after_secs = Some(secs);
        self
    }
}
