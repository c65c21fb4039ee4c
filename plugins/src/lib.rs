//! The gateway's edge checks, each its own module, in the order the hot path runs them
//! (cheapest first):
//!
//! 1. [`window`]: is the campaign's sale window open, by server time;
//! 2. [`switches`]: the campaign's kill switches (`closed`, `queue_only`);
//! 3. [`sold_out`]: the per-process sold-out flag (cleared by pub/sub and by a short TTL);
//!    then [`pressure`]: while the proxy's threads run late, the costly endpoints (challenge,
//!    token, order) answer `TRY_LATER` so that the rest of the shop keeps its latency;
//! 4. [`input`]: the device id and the quantity (`?qty=`);
//! 5. [`rate_limit`]: per IP / device (or "no device") / campaign request rates, the IP by
//!    [`client_ip`];
//! 6. [`token`]: the campaign token (bound to user, campaign, device), then the account's rate;
//! 7. [`token`] again: the hidden order path of that token;
//! 8. [`signature`]: the timestamp within the campaign's window, then (the body read) the
//!    request's HMAC under the token's signing key (`ring::hmac::verify`, constant time);
//! 9. [`eligibility`]: blacklist, eligible set, account rules;
//! 10. [`global_limit`]: the campaign's limits across every gateway process, decided here and
//!     counted in the reservation's own call (only when the campaign has `[[global_limit]]`
//!     rules), fail-open or fail-closed per rule;
//! 11. [`budget`]: a place in the campaign's concurrency budget in this process, taken only now
//!     (a slow body holds none), a few at most per account, device and address;
//! 12. [`reserve`]: the one Redis round trip of `lua/reserve.lua` (nonce uniqueness and safe
//!     retry in the same call), with a bounded timeout, the orders of one bucket sent together
//!     while a call of it is in flight ([`batch`]), and no more at once than the bucket's
//!     adaptive limit ([`admission`]: past it `TRY_LATER` at once);
//! 13. [`queue`]: a reserved record handed, without waiting, to the background Kafka producer.
//!
//! [`FlashSale`] is the whole sale behind one entry point for any proxy's request filter
//! ([`flash_sale`]; [`pingora`] adapts it to a Pingora `Session`): built from one checked conf
//! ([`conf`]), it owns the Redis pool with its safety settings ([`redis`]), the Kafka producer
//! ([`queue`]), the campaigns and their reload ([`registry`]), the replenish listener
//! ([`replenish`]), the path grammar ([`route`]), the buyer's page ([`page`]) and answers every
//! sale endpoint with a [`reply::Reply`]. Inside it, [`edge`] runs the chain above
//! ([`edge::Edge::admit`], [`edge::Edge::verify`], [`edge::Edge::reserve`]); before an order, the
//! token endpoint uses [`auth`] (the shop's login JWT), [`captcha`] (proof of work or a
//! provider's token, single use) and [`token`] (issue).
//!
//! Every check answers `Ok` or a [`Denial`]: the code, the message and, for "try later" answers,
//! a `Retry-After` hint, which [`reply::Reply::denied`] turns into the JSON answer.

use std::borrow::Cow;

use protocol::codes::Code;

pub mod admission;
pub mod auth;
pub mod batch;
pub mod budget;
pub mod captcha;
pub mod client_ip;
pub mod conf;
pub mod edge;
pub mod eligibility;
pub mod flash_sale;
pub mod global_limit;
pub mod input;
pub mod page;
#[cfg(feature = "pingora")]
pub mod pingora;
pub mod pressure;
pub mod queue;
pub mod rate_limit;
pub mod redis;
pub mod registry;
pub mod replenish;
pub mod reply;
pub mod reserve;
pub mod route;
pub mod sale;
pub mod signature;
pub mod sold_out;
pub mod switches;
pub mod token;
pub mod waiting_room;
pub mod window;

pub use flash_sale::{FlashSale, Handled, SaleRequest, Start};
pub use reply::Reply;
pub use route::SaleRoute;

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
