//! The whole flash sale, embeddable in any Pingora proxy. Its folders are the stages of a
//! request: [`serve`] (the face a proxy calls) → `edge` (the chain) → [`checks`] → [`issue`]
//! (before an order) → [`room`] (the waiting room) → [`reserve`] → [`queue`]; [`setup`] builds
//! and keeps what they use.
//!
//! The order of an order's checks is written once, in [`checks`].
//!
//! [`FlashSale`] is the whole sale behind one entry point for any proxy ([`serve`]), shaped for
//! Pingora ([`pingora`](serve)): a [`SaleCtx`] in the proxy's `CTX`, `FlashSale::request_filter`
//! in its `request_filter` (true: the sale answered), its background work as Pingora background
//! services (`FlashSale::services`), its metrics registered by itself ([`serve::metrics`]).
//! Built from one checked conf ([`setup::conf`]: a file, a string or a struct, [`SaleSource`]),
//! it owns the Redis pool with its safety settings and the I/O thread it runs on
//! ([`redis`](setup)), the Kafka producer ([`queue`]), the campaigns and their reload
//! ([`registry`](setup)), the replenish listener ([`replenish`](setup)), the path grammar
//! ([`route`](serve)), the buyer's page ([`page`](serve)) and answers every sale endpoint with
//! a [`Reply`]. Inside it, `edge` runs the chain of [`checks`] (`Edge::admit`, `Edge::verify`,
//! `Edge::reserve`); before an order, the token endpoint uses [`issue::auth`] (the shop's login
//! JWT), [`issue::captcha`] (proof of work or a provider's token, single use) and
//! [`token`](issue) (issue).
//!
//! `examples/embed.rs` is a whole proxy with every feature; the README shows it, compiled here
//! as a doctest.
//!
//! Every check answers `Ok` or a [`Denial`]: the code, the message and, for "try later" answers,
//! a `Retry-After` hint, which [`Reply::denied`] turns into the JSON answer.

#![warn(missing_docs)]

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
pub use serve::{Endpoint, FlashSale, Handled, Reply, SaleCtx, SaleRequest, SaleRoute, Start, StartError};
pub use setup::conf;

/// The README, whose embedding section (`plugins/examples/embed.rs`, the whole proxy) is
/// compiled here as a doctest: the README's example cannot stop compiling unnoticed.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
pub struct ReadmeDoctests;
pub use setup::SaleSource;
