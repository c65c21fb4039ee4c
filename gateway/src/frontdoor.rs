//! The front door: every HTTP/1 connection is read here before Pingora parses it, so the
//! limits answer with their own status and a JSON body instead of a bare close.
//!
//! Pingora 0.9 bounds a request head at 1 MiB and 256 fields (a bare 400 past them), waits 60 s
//! per read of a head, and passes a request carrying both `Content-Length` and
//! `Transfer-Encoding` on after dropping the length. So each HTTP/1 request head is read
//! here, whole, under the conf's deadline and size ([`crate::limits`]), checked, and then
//! handed to Pingora's proxy as the session's first bytes (its pipelined-prefix entry point):
//!
//! - nothing sent within `client_header_timeout` on a new connection, or within
//!   `keepalive_timeout` between two requests: closed silently, as Nginx does;
//! - a head started but not finished within `client_header_timeout`: 408;
//! - a head past `max_header_bytes`, or with more than `max_headers` fields: 431;
//! - control characters, a bad field name, line folding, or `Content-Length` together with
//!   `Transfer-Encoding`: 400;
//! - an absolute-form target (`GET http://admin.shop/ HTTP/1.1`): its authority replaces the
//!   `Host` field (RFC 9112 section 3.2.2), so routing and the upstream see one host;
//! - at most `keepalive_requests` requests per connection;
//! - a request read together with the next one (HTTP/1.1 pipelining) is answered with
//!   `Connection: close` and the connection closed: the next one is never run (RFC 9112
//!   section 9.3.2 allows this in place of answering in order).
//!
//! HTTP/2 connections (ALPN `h2`) go to Pingora directly: the h2 layer bounds the header list
//! (431) and the proxy checks fields and body per request ([`admit`]). After a refusal the
//! connection is closed after a bounded lingering read, so the client reads the answer rather
//! than a reset.
//!
//! On the way upstream, [`forwarded_headers`] says who the client is (`X-Forwarded-For`,
//! `X-Real-IP`, `X-Forwarded-Proto`), as Nginx's `proxy_set_header` lines would, and
//! [`strip_sale_headers`] drops the sale's own headers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::BytesMut;
use pingora_core::apps::{HttpServerApp, ServerApp};
use pingora_core::modules::http::compression::ResponseCompression;
use pingora_core::protocols::http::compression::Algorithm;
use pingora_core::protocols::http::ServerSession;
use pingora_core::protocols::{Stream, ALPN};
use pingora_core::server::ShutdownWatch;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::Session;
use plugins::checks::client_ip::{self, TrustedProxies};
use plugins::checks::X_FORWARDED_FOR;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, timeout_at, Instant};

use crate::access_log::{AccessLog, Entry};
use crate::conf::compression::ALGORITHMS;
use crate::conf::RouteConf;
use crate::limits::{self, BodyCount, Limits, Refusal};
use crate::reload::Active;

/// How long a refused connection is still read (and the bytes dropped) before it is closed.
pub const LINGER: Duration = Duration::from_secs(1);
/// At most this many bytes are read and dropped while lingering.
const LINGER_BYTES: usize = 4 * 1024 * 1024;

/// A Pingora application behind the front door's HTTP/1 head reader.
pub struct FrontDoor<A> {
    app: Arc<A>,
    limits: Limits,
    log: Option<AccessLog>,
    /// Whether plain connections start with a PROXY header ([`crate::proxy_protocol`]).
    proxy_protocol: bool,
}

impl<A> FrontDoor<A> {
    /// Puts `app` (the proxy) behind the front door with these limits (a restart applies a
    /// change of them).
    pub fn new(app: A, limits: Limits) -> Self {
        Self { app: Arc::new(app), limits, log: None, proxy_protocol: false }
    }

    /// The same, writing an access line for each request it refuses before the proxy sees it
    /// (as Nginx logs its 400, 408 and 431).
    pub fn with_access_log(mut self, log: Option<AccessLog>) -> Self {
        self.log = log;
        self
    }

    /// The same, reading a PROXY header first on every plain connection (`[server]
    /// proxy_protocol`); a TLS connection's is read before its handshake, by
    /// `crate::proxy_protocol::BeforeTls` (`[tls] proxy_protocol`).
    pub fn with_proxy_protocol(mut self, on: bool) -> Self {
        self.proxy_protocol = on;
        self
    }
}

/// What reading one request head gave.
enum Head {
    /// A complete, valid head (with whatever followed it).
    Ready(BytesMut),
    /// The client closed, went idle, or the server is shutting down: close silently.
    Closed,
    /// Answer this and close.
    Refused(Refusal),
}

#[async_trait]
impl<A> ServerApp for FrontDoor<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    async fn process_new(self: &Arc<Self>, mut stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        if matches!(stream.selected_alpn_proto(), Some(ALPN::H2)) {
            return self.app.process_new(stream, shutdown).await;
        }
        let tls = stream.get_ssl_digest().is_some();
        if !self.proxy_protocol || tls {
            return self.serve_http1(stream, shutdown).await;
        }
        let header =
            timeout(self.limits.client_header_timeout, crate::proxy_protocol::read(&mut stream)).await;
        match header {
            Ok(Ok(source)) => {
                crate::proxy_protocol::CLIENT.scope(source, self.serve_http1(stream, shutdown)).await
            }
            Ok(Err(why)) => {
                tracing::debug!(why, "a connection without a valid PROXY header closed");
                None
            }
            Err(_) => None,
        }
    }

    async fn cleanup(&self) {
        self.app.http_cleanup().await;
    }
}

impl<A> FrontDoor<A>
where
    A: HttpServerApp + Send + Sync + 'static,
{
    /// Serves the HTTP/1 requests of one connection, each head read and checked here first.
    async fn serve_http1(&self, mut stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        let mut watch = shutdown.clone();
        // One wait on the shutdown signal for the connection's life, polled while it waits
        // between requests: it joins the signal's waiters (shared by every connection of every
        // worker, under one lock) once, not once per request.
        let stop = shutting_down(&mut watch);
        tokio::pin!(stop);
        let mut served: u32 = 0;
        loop {
            let head = match read_head(&mut stream, &self.limits, served == 0, stop.as_mut()).await {
                Head::Ready(head) => head,
                Head::Closed => return None,
                Head::Refused(refusal) => {
                    let request_id = crate::request_id::new();
                    let answer = limits::raw_answer(&refusal, &request_id);
                    if let Some(log) = &self.log {
                        let peer = stream.get_socket_digest().and_then(|d| d.peer_addr().cloned());
                        let client = crate::proxy_protocol::source()
                            .or_else(|| peer.and_then(|a| a.as_inet().map(|a| a.ip())));
                        let scheme = if stream.get_ssl_digest().is_some() { "https" } else { "http" };
                        log.log(&refused_entry(&refusal, &request_id, client, scheme, answer.len()));
                    }
                    let _ = stream.write_all(&answer).await;
                    linger(&mut stream).await;
                    return None;
                }
            };
            // Bytes past this request (a pipelined one) would be lost on reuse: close instead.
            let pipelined = limits::pipelined(&head);
            let mut session = ServerSession::new_http1(stream);
            served += 1;
            let last = served >= self.limits.keepalive_requests
                || *shutdown.borrow()
                || crate::shutdown::draining()
                || pipelined;
            if last {
                // Pingora sets keep-alive again from the request's own header once it reads it;
                // no reuse left holds whatever the request says (the answer says
                // `Connection: close`).
                session.set_keepalive(None);
                session.set_keepalive_reuses_remaining(Some(0));
            } else {
                session.set_keepalive(Some(self.limits.keepalive_timeout.as_secs().max(1)));
                session.set_keepalive_reuses_remaining(Some(self.limits.keepalive_requests - served));
            }
            session.set_read_timeout(Some(self.limits.client_body_timeout));
            session.set_pipelined_prefix(head);
            let reused = self.app.process_new_http(session, shutdown).await?;
            // What Pingora keeps across requests (keep-alive values) is set again above.
            stream = reused.consume().0;
        }
    }
}

/// The access line of a request refused before it was parsed: no method, URI or protocol is
/// known (`-`), the client is the PROXY header's source or the socket's peer (no header field
/// was trusted), the bytes are the whole raw answer.
fn refused_entry<'a>(
    refusal: &Refusal,
    request_id: &'a str,
    client: Option<std::net::IpAddr>,
    scheme: &'a str,
    bytes: usize,
) -> Entry<'a> {
    Entry {
        time: chrono::Utc::now(),
        client,
        method: "-",
        uri: "-",
        protocol: "-",
        status: refusal.code.status(),
        bytes,
        request_time: Duration::ZERO,
        upstream: None,
        upstream_time: None,
        code: Some(refusal.code),
        request_id,
        upstream_response_time: None,
        headers: None,
        host: "",
        scheme,
        server_name: "",
    }
}

/// Resolves once the server is shutting down (not to be polled again after that).
async fn shutting_down(watch: &mut ShutdownWatch) {
    while !*watch.borrow_and_update() {
        if watch.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// Reads one request head under the limits (see the module doc); between two requests (not
/// `first`), `stop` resolving (the server shutting down) closes the idle connection.
async fn read_head<F: Future<Output = ()>>(
    stream: &mut Stream,
    limits: &Limits,
    first: bool,
    stop: Pin<&mut F>,
) -> Head {
    let mut buf = BytesMut::with_capacity(4096);
    let idle = if first { limits.client_header_timeout } else { limits.keepalive_timeout };
    tokio::select! {
        read = timeout(idle, stream.read_buf(&mut buf)) => match read {
            Ok(Ok(n)) if n > 0 => {}
            _ => return Head::Closed,
        },
        _ = stop, if !first => return Head::Closed,
    }
    let deadline = Instant::now() + limits.client_header_timeout;
    loop {
        if let Some(end) = limits::head_end(&buf) {
            if end > limits.max_header_bytes {
                return Head::Refused(limits::HEAD_TOO_LARGE);
            }
            if let Err(refusal) = limits::check_head(&buf[..end], limits.max_headers) {
                return Head::Refused(refusal);
            }
            return match limits::absolute_form_host(&buf[..end]) {
                Ok(None) => Head::Ready(buf),
                Ok(Some(head)) => {
                    let mut rewritten = BytesMut::from(&head[..]);
                    rewritten.extend_from_slice(&buf[end..]);
                    Head::Ready(rewritten)
                }
                Err(refusal) => Head::Refused(refusal),
            };
        }
        if buf.len() > limits.max_header_bytes {
            return Head::Refused(limits::HEAD_TOO_LARGE);
        }
        buf.reserve(4096);
        match timeout_at(deadline, stream.read_buf(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => {}
            Ok(_) => return Head::Closed,
            Err(_) => return Head::Refused(limits::HEAD_TIMEOUT),
        }
    }
}

/// Closes the write side, then reads and drops what the client still sends, for at most
/// [`LINGER`] and [`LINGER_BYTES`], so it reads the answer instead of a reset.
async fn linger(stream: &mut Stream) {
    let _ = stream.flush().await;
    let _ = stream.shutdown().await;
    let mut sink = vec![0u8; 16 * 1024];
    let mut dropped = 0;
    let deadline = Instant::now() + LINGER;
    while dropped < LINGER_BYTES {
        match timeout_at(deadline, stream.read(&mut sink)).await {
            Ok(Ok(n)) if n > 0 => dropped += n,
            _ => break,
        }
    }
}

/// The per-request checks of the proxy: the fields (count, size, smuggling, a second `Host` or
/// `Content-Length`; on the gateway's own paths a second value of a field the sale reads) and
/// the declared body size against the route's `client_max_body_size` (`route`: the shop route's
/// index, `None` for the gateway's own paths). Returns the body counter for a body without a
/// declared length.
pub fn admit(session: &Session, active: &Active, route: Option<usize>) -> Result<BodyCount, Refusal> {
    let limits = &active.server.limits;
    let max = route
        .and_then(|i| active.server.routes.get(i))
        .and_then(|r| r.client_max_body_size)
        .unwrap_or(limits.client_max_body_size);
    let req = session.req_header();
    limits::check_fields(req, limits)?;
    if route.is_none() {
        limits::check_sale_fields(req)?;
    }
    limits::check_content_length(req, max)?;
    Ok(BodyCount { max, seen: 0 })
}

/// After a refusal answered by the proxy: reads and drops what is left of the request body,
/// for at most [`LINGER`], so the client reads the answer rather than a reset.
pub async fn drain(session: &mut Session) {
    let _ = timeout(LINGER, session.as_downstream_mut().drain_request_body()).await;
}

/// `https` when the gateway terminated TLS on this connection, else `http`.
pub fn scheme(session: &Session) -> &'static str {
    let tls = session.as_downstream().digest().and_then(|d| d.ssl_digest.as_ref()).is_some();
    if tls {
        "https"
    } else {
        "http"
    }
}

/// Sets the response compression of a request to `shop` route (its `compression_level` for
/// each of its `compression_algorithms`; off by default) on Pingora's compression module; the
/// gateway's own answers are never compressed.
pub fn compression(session: &mut Session, active: &Active, shop: Option<usize>) {
    let Some(route) = shop.and_then(|i| active.server.routes.get(i)) else { return };
    let conf = &route.compression;
    if conf.level == 0 {
        return;
    }
    let accepted = session.req_header().headers.get(http::header::ACCEPT_ENCODING);
    let chosen = chosen_encoding(accepted.and_then(|v| v.to_str().ok()), &conf.algorithms);
    if let Some(c) = session.downstream_modules_ctx.get_mut::<ResponseCompression>() {
        let Some(token) = chosen else {
            c.adjust_level(0);
            return;
        };
        for (algorithm, on) in ALGORITHMS.iter().zip(conf.algorithms) {
            c.adjust_algorithm_level(Algorithm::from(*algorithm), if on { conf.level } else { 0 });
        }
        // Pingora's module compresses with the first coding it reads (it reads no q-values):
        // read first, the coding chosen here is the one used.
        if let Ok(mut h) = RequestHeader::build("GET", b"/", None) {
            if h.insert_header(http::header::ACCEPT_ENCODING, token).is_ok() {
                c.request_filter(&h);
            }
        }
    }
}

/// The coding of `accept_encoding` a route allowing `allowed` ([`ALGORITHMS`]) uses: the
/// client's first acceptable one (not `q=0`) the route allows; `None`: the answer is sent as
/// it is. Nginx's gzip reads the header the same way for its one coding.
fn chosen_encoding(accept_encoding: Option<&str>, allowed: &[bool; 3]) -> Option<&'static str> {
    let refused = |params: &str| {
        params.split(';').any(|p| {
            let p = p.trim().to_ascii_lowercase();
            p.strip_prefix("q=").is_some_and(|q| q.trim().parse::<f32>().is_ok_and(|q| q <= 0.0))
        })
    };
    accept_encoding.unwrap_or("").split(',').find_map(|item| {
        let (token, params) = item.split_once(';').unwrap_or((item, ""));
        let token = token.trim().to_ascii_lowercase();
        let known = ALGORITHMS.iter().zip(allowed).find(|(a, on)| **on && **a == token);
        known.filter(|_| !refused(params)).map(|(a, _)| *a)
    })
}

/// Turns the compression of this answer off unless Nginx's rule compresses it
/// ([`crate::conf::compression::Compression::applies`]: the status, the length, the type and
/// the request's HTTP version). Before Pingora's module reads the answer's header. A `HEAD`'s
/// answer (no body: the module leaves it) says the coding its `GET` would have, as Nginx's.
pub fn compression_of_answer(session: &mut Session, route: &RouteConf, resp: &mut ResponseHeader) {
    let conf = &route.compression;
    if conf.level == 0 {
        return;
    }
    let req = session.req_header();
    if !conf.applies(req, resp) {
        if let Some(c) = session.downstream_modules_ctx.get_mut::<ResponseCompression>() {
            if c.is_header_phase() {
                c.adjust_level(0);
            }
        }
        return;
    }
    if req.method == http::Method::HEAD {
        let accepted = req.headers.get(http::header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok());
        if let Some(coding) = chosen_encoding(accepted, &conf.algorithms) {
            let _ = resp.insert_header(http::header::CONTENT_ENCODING, coding);
            resp.remove_header(&http::header::CONTENT_LENGTH);
        }
    }
}

/// An upgrade request (WebSocket) to a shop route: the connection may stay idle for
/// `upgrade_idle_timeout` on both sides, in place of the route's read timeout and the body
/// timeout. Other requests keep the pool's peer as it is.
pub fn upgrade_timeouts(session: &mut Session, peer: &mut HttpPeer, active: &Active) {
    if session.as_downstream().is_upgrade_req() {
        let idle = active.server.limits.upgrade_idle_timeout;
        peer.options.read_timeout = Some(idle);
        session.as_downstream_mut().set_read_timeout(Some(idle));
    }
}

/// The client's address: the socket's peer, or what a `trusted` proxy says in its
/// `X-Forwarded-For` lines. Decided once per request (the proxy keeps it in its context).
pub fn client(session: &Session, trusted: &TrustedProxies) -> Option<std::net::IpAddr> {
    client_ip::client_ip(peer_ip(session), client_ip::forwarded_lines(&session.req_header().headers), trusted)
}

/// The peer's address: the PROXY header's source on a listener that reads one, else the
/// socket's (`None` on a Unix socket).
pub fn peer_ip(session: &Session) -> Option<std::net::IpAddr> {
    crate::proxy_protocol::source()
        .or_else(|| session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip()))
}

/// Removes the sale's own headers from a request on its way upstream
/// (`plugins::pingora::strip_sale_headers`); `Authorization` (the shop's login) and everything
/// else go on.
pub fn strip_sale_headers(upstream_request: &mut RequestHeader) {
    plugins::pingora::strip_sale_headers(upstream_request);
}

const X_REAL_IP: &str = "x-real-ip";
const X_FORWARDED_PROTO: &str = "x-forwarded-proto";

/// Who the client is, for the upstream (like Nginx's `proxy_set_header` trio): `X-Forwarded-For`
/// (a client's own lines survive, joined, only behind a `trusted` proxy), `X-Real-IP` (the
/// request's `client`, as decided at its start), and `X-Forwarded-Proto` (a trusted proxy's is
/// kept, it terminated TLS; otherwise the gateway's own scheme).
pub fn forwarded_headers(
    session: &Session,
    upstream_request: &mut RequestHeader,
    trusted: Option<&TrustedProxies>,
    client: Option<std::net::IpAddr>,
) -> pingora_core::Result<()> {
    upstream_request.remove_header(X_FORWARDED_FOR);
    upstream_request.remove_header(X_REAL_IP);
    let mut proxy_says_proto = false;
    let peer = peer_ip(session);
    if let (Some(peer), Some(trusted)) = (peer, trusted) {
        let real = client.unwrap_or(peer);
        let chain = client_ip::forwarded_for(
            peer,
            client_ip::forwarded_lines(&session.req_header().headers),
            trusted,
        );
        upstream_request.insert_header(X_FORWARDED_FOR, chain)?;
        upstream_request.insert_header(X_REAL_IP, real.to_string())?;
        proxy_says_proto =
            trusted.contains(&peer) && upstream_request.headers.contains_key(X_FORWARDED_PROTO);
    }
    if !proxy_says_proto {
        upstream_request.insert_header(X_FORWARDED_PROTO, scheme(session))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_route_of_some_codings_uses_the_clients_first_it_allows() {
        let gzip_only = [true, false, false];
        let chosen = |ae| super::chosen_encoding(ae, &gzip_only);
        assert_eq!(chosen(Some("br, gzip")), Some("gzip"), "br first, not allowed: gzip");
        assert_eq!(chosen(Some("deflate, GZIP;q=0.5")), Some("gzip"));
        assert_eq!(chosen(Some("br, zstd")), None, "none allowed: nothing");
        assert_eq!(chosen(Some("gzip;q=0, br")), None, "q=0 refuses it");
        assert_eq!(chosen(Some("gzip; q=0.0")), None);
        assert_eq!(chosen(None), None, "no Accept-Encoding: identity");
        assert_eq!(super::chosen_encoding(Some("zstd, br"), &[false, true, true]), Some("zstd"));
    }
}
