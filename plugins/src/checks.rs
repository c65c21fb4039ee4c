//! The checks of a request before its reservation, one file each, cheapest first (the order is
//! `crate::edge`'s, which runs them): `window`, `switches`, `sold_out` and `pressure`
//! before anything is parsed; [`input`] (device, quantity); `rate_limit` per IP (found by
//! [`client_ip`]), device and campaign; then, with the token known, [`signature`],
//! `eligibility`, `global_limit` and a place in the `budget`.
//!
//! Each answers `Ok` or a [`crate::Denial`]. The modules whose functions a proxy or a tool calls
//! are public ([`client_ip`], [`input`], [`signature`]); of the rest only the types named below
//! are.

pub(crate) mod budget;
pub mod client_ip;
pub(crate) mod eligibility;
pub(crate) mod global_limit;
pub mod input;
pub(crate) mod pressure;
pub(crate) mod rate_limit;
pub mod signature;
pub(crate) mod sold_out;
pub(crate) mod switches;
pub(crate) mod window;

pub use budget::Permit;
pub use client_ip::{TrustedProxies, X_FORWARDED_FOR};
pub use global_limit::{limit_rules, Subject};
pub use rate_limit::RateLimiter;
pub use sold_out::now_ms;
