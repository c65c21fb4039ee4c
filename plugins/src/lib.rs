//! The whole flash sale, embeddable in any Pingora proxy. Its folders are the stages of a
//! request: [`serve`] (the face a proxy calls) → `edge` (the chain) → [`checks`] → [`issue`]
//! (before an order) → [`room`] (the waiting room) → [`reserve`] → [`queue`]; [`setup`] builds
//! and keeps what they use. The checks, in the order the hot path runs them (cheapest first):
//!
//! 1. [`window`](checks): is the campaign's sale window open, by server time;
//! 2. [`switches`](checks): the campaign's kill switches (`closed`, `queue_only`);
//! 3. [`sold_out`](checks): the per-process sold-out flag (cleared by pub/sub and by a short TTL);
//!    then [`pressure`](checks): while the proxy's threads run late, the costly endpoints (challenge,
//!    token, order) answer `TRY_LATER` so that the rest of the shop keeps its latency;
//! 4. [`checks::input`]: the device id and the quantity (`?qty=`);
//! 5. [`rate_limit`](checks): per IP / device (or "no device") / campaign request rates, the IP by
//!    [`checks::client_ip`];
//! 6. [`token`](issue): the campaign token (bound to user, campaign, device), then the account's rate;
//! 7. [`token`](issue) again: the hidden order path of that token;
//! 8. [`checks::signature`]: the timestamp within the campaign's window, then (the body read) the
//!    request's HMAC under the token's signing key (`ring::hmac::verify`, constant time);
//! 9. [`eligibility`](checks): blacklist, eligible set, account rules;
//! 10. [`global_limit`](checks): the campaign's limits across every gateway process, decided here and
//!     counted in the reservation's own call (only when the campaign has `[[global_limit]]`
//!     rules), fail-open or fail-closed per rule;
//! 11. [`budget`](checks): a place in the campaign's concurrency budget in this process, taken only now
//!     (a slow body holds none), a few at most per account, device and address;
//! 12. [`reserve`]: the one Redis round trip of `lua/reserve.lua` (nonce uniqueness and safe
//!     retry in the same call), with a bounded timeout, the orders of one bucket sent together
//!     while a call of it is in flight ([`batch`](reserve)), and no more at once than the bucket's
//!     adaptive limit ([`admission`](reserve): past it `TRY_LATER` at once);
//! 13. [`queue`]: a reserved record handed, without waiting, to the background Kafka producer.
//!
//! [`FlashSale`] is the whole sale behind one entry point for any proxy's request filter
//! ([`serve`]; [`pingora`](serve) adapts it to a Pingora `Session`): built from one checked conf
//! ([`setup::conf`]), it owns the Redis pool with its safety settings ([`redis`](setup)), the Kafka producer
//! ([`queue`]), the campaigns and their reload ([`registry`](setup)), the replenish listener
//! ([`replenish`](setup)), the path grammar ([`route`](serve)), the buyer's page ([`page`](serve)) and answers every
//! sale endpoint with a [`Reply`]. Inside it, `edge` runs the chain above
//! (`Edge::admit`, `Edge::verify`, `Edge::reserve`); before an order, the
//! token endpoint uses [`issue::auth`] (the shop's login JWT), [`issue::captcha`] (proof of work or a
//! provider's token, single use) and [`token`](issue) (issue).
//!
//! Every check answers `Ok` or a [`Denial`]: the code, the message and, for "try later" answers,
//! a `Retry-After` hint, which [`Reply::denied`] turns into the JSON answer.

pub mod checks;
mod denial;
pub(crate) mod edge;
pub mod issue;
pub mod queue;
pub mod reserve;
pub mod room;
pub mod serve;
pub mod setup;

pub use denial::Denial;
#[cfg(feature = "pingora")]
pub use serve::pingora;
pub use serve::{Endpoint, FlashSale, Handled, Reply, SaleRequest, SaleRoute, Start};
pub use setup::conf;
