//! The flash-sale edge: a Pingora reverse proxy in place of Nginx.
//!
//! - [`conf`]: the server file and the campaign files, validated with line-precise errors;
//! - [`reload`]: the active conf in an `ArcSwap`, reloaded on `SIGHUP`;
//! - [`routes`]: campaign paths and the shop's host/prefix routes;
//! - [`upstreams`]: health-checked round-robin pools;
//! - [`proxy`]: the hot path, one `ProxyHttp` impl, readable top to bottom;
//! - [`issue`]: the captcha challenge and the campaign token, before an order;
//! - [`replenish`]: the pub/sub listener that clears sold-out flags;
//! - [`server`]: wires it all into a Pingora server.

pub mod conf;
pub mod issue;
pub mod proxy;
pub mod reload;
pub mod replenish;
pub mod routes;
pub mod server;
pub mod upstreams;
