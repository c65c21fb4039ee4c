//! What one access line is made of ([`Entry`]) and the `log_format`-style templates it is
//! written by ([`LogTemplate`]): below both the conf (which parses a template at load) and the
//! access log's writer (which renders it), so that neither imports the other's upward.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use chrono::{DateTime, Utc};
use protocol::codes::Code;

mod format;

pub use format::{push_bytes, Escape, LogTemplate, TemplateError, COMBINED};

/// One request, as its access line tells it.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// When it was logged.
    pub time: DateTime<Utc>,
    /// The client after trusted proxies.
    pub client: Option<IpAddr>,
    /// Request method.
    pub method: &'a str,
    /// Path and query, as received.
    pub uri: &'a str,
    /// `HTTP/1.1`, `HTTP/2.0`, …
    pub protocol: &'a str,
    /// Status sent (0: none).
    pub status: u16,
    /// Body bytes sent.
    pub bytes: usize,
    /// From the request's header to the log line.
    pub request_time: Duration,
    /// The upstream a proxied request went to.
    pub upstream: Option<SocketAddr>,
    /// From picking the upstream to its response header.
    pub upstream_time: Option<Duration>,
    /// The gateway's answer code.
    pub code: Option<Code>,
    /// The request id.
    pub request_id: &'a str,
    /// From picking the upstream to the logging phase (Nginx's `$upstream_response_time`).
    pub upstream_response_time: Option<Duration>,
    /// The request's header fields (`None`: refused before it was parsed).
    pub headers: Option<&'a http::HeaderMap>,
    /// The host as sent: `Host`, else the URI's (HTTP/2's `:authority`); empty when none.
    pub host: &'a str,
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The route's server name, `$host` of a request without `Host` (empty: none).
    pub server_name: &'a str,
}
