//! The flash-sale edge: a Pingora reverse proxy in place of Nginx.
//!
//! The sale itself (its checks, campaigns, reload, Redis and Kafka, the buyer's page and every
//! sale answer) is `plugins::FlashSale`, embedded here as any Pingora proxy may embed it, and
//! only when the server file has the sale's sections (without them the gateway is a reverse
//! proxy alone, [`conf::ServerConf::sells`]); this crate is the proxy around it:
//!
//! - [`conf`]: the server file's own sections, validated with line-precise errors;
//! - [`reload`]: the active conf in an `ArcSwap`, reloaded with the sale's on `SIGHUP`;
//! - [`routes`]: the shop's routes, matched as Nginx's `server_name` and `location`;
//! - [`shop`]: what a shop route does besides proxying: `return`, rewrites, headers, error pages;
//! - [`template`]: values with Nginx's variables (`$host`, `$request_uri`, `$1`);
//! - [`uri`]: the path routes are matched on, normalized as Nginx's;
//! - [`upstreams`]: health-checked pools balanced as Nginx's `upstream` blocks;
//! - [`proxy`]: the hot path, one `ProxyHttp` impl, readable top to bottom;
//! - [`answer`]: the answers the front door and a failed proxy attempt write;
//! - [`frontdoor`]: every HTTP/1 request head read under the front door's limits first;
//!   [`proxy_protocol`]: the PROXY header a load balancer writes before them;
//! - [`limits`]: those limits as pure decisions;
//! - [`route_limits`]: a route's request-rate and connection limits (Nginx's `limit_req`,
//!   `limit_conn`);
//! - [`tls`]: certificates by SNI from the active conf, HTTP/2 by ALPN, the HTTPS redirect;
//!   [`certs`]: the certificate pairs and the table they are picked from; [`acme`]: the
//!   certificates the gateway gets and renews itself (RFC 8555, HTTP-01);
//! - [`metrics`]: the Prometheus metrics of the request path; [`admin`]: the admin listener
//!   (`/metrics`, `/healthz`, `/readyz`) and what is read at scrape time;
//! - [`access_log`]: one line per request, written by a thread of its own, reopened on `SIGUSR1`;
//! - [`observe`]: the logging phase's metrics and access line, turned on by the server file;
//! - [`request_id`]: the id each request is given, in one place;
//! - [`shutdown`]: `SIGTERM`'s linger before Pingora's drain;
//! - [`server`]: wires it all into a Pingora server.

pub mod access_line;
pub mod access_log;
pub mod acme;
pub mod admin;
pub mod answer;
pub mod certs;
pub mod conf;
pub mod files;
pub mod frontdoor;
pub mod limits;
pub mod metrics;
pub mod nginx;
pub mod observe;
pub mod proxy;
pub mod proxy_protocol;
pub mod reload;
pub mod request_id;
pub mod route_limits;
pub mod routes;
pub mod server;
pub mod shop;
pub mod shutdown;
pub mod template;
pub mod threads;
pub mod tls;
pub mod upstreams;
pub mod uri;
