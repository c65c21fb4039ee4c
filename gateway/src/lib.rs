//! The flash-sale edge: a Pingora reverse proxy in place of Nginx.
//!
//! - [`conf`]: the server file and the campaign files, validated with line-precise errors;
//! - [`reload`]: the active conf in an `ArcSwap`, reloaded on `SIGHUP`;
//! - [`routes`]: campaign paths and the shop's host/prefix routes;
//! - [`upstreams`]: health-checked round-robin pools;
//! - [`proxy`]: the hot path, one `ProxyHttp` impl, readable top to bottom;
//! - [`issue`]: the captcha challenge and the campaign token, before an order;
//! - [`answer`]: the JSON answers the gateway writes itself;
//! - [`page`]: the buyer's page (`web/`), compiled in, gzipped once at start;
//! - [`replenish`]: the pub/sub listener that clears sold-out flags;
//! - [`frontdoor`]: every HTTP/1 request head read under the front door's limits first;
//! - [`limits`]: those limits as pure decisions;
//! - [`tls`]: certificates by SNI from the active conf, HTTP/2 by ALPN, the HTTPS redirect;
//!   [`certs`]: the certificate pairs and the table they are picked from;
//! - [`metrics`]: the Prometheus metrics of the request path; [`admin`]: the admin listener
//!   (`/metrics`, `/healthz`, `/readyz`) and what is read at scrape time;
//! - [`access_log`]: one line per request, written by a thread of its own, reopened on `SIGUSR1`;
//! - [`observe`]: the logging phase's metrics and access line, turned on by the server file;
//! - [`server`]: wires it all into a Pingora server.

pub mod access_log;
pub mod admin;
pub mod answer;
pub mod certs;
pub mod conf;
pub mod frontdoor;
pub mod issue;
pub mod limits;
pub mod metrics;
pub mod observe;
pub mod page;
pub mod proxy;
pub mod reload;
pub mod replenish;
pub mod routes;
pub mod server;
pub mod threads;
pub mod tls;
pub mod upstreams;
