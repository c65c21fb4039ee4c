//! The hot path: one `ProxyHttp` impl, readable top to bottom. The sale's checks and the
//! reservation are `plugins::FlashSale`'s (the API any Pingora proxy embeds); this file routes,
//! reads bodies, writes answers and proxies the rest of the shop.
//!
//! `request_filter` decides every request, cheapest check first:
//!
//! 1. route: a campaign path (`/seckill/{c}/{path}/order|captcha|token|info|result/{id}`) or a
//!    shop route; none → 404;
//! 2. for an order: the campaign exists → the sale's checks, in the order written once in
//!    `plugins::checks` (window, switches, sold-out flag, lag, inputs, rates, token, hidden path,
//!    timestamp, then with the body the signature, eligibility, global limits and the budget) →
//!    `reserve.lua` in Redis (bounded timeout). Every order is answered here; the buyer is the
//!    token's user, never a header;
//! 3. `captcha` and `token` (before an order: the login JWT, a solved captcha, a token) are
//!    answered by `crate::issue`;
//! 4. a result query: the campaign exists → the per-address polling limit → the request's
//!    result token (`X-Result-Token`, given with its QUEUED answer; one HMAC, no lookup), then
//!    proxied to the order writer. Anyone else learns nothing, not even whether the id exists.
//! 5. the buyer's page (`GET /seckill/{c}/` and its files) is answered from memory
//!    (`crate::page`): the campaign exists → the bytes, gzipped once at start.
//!
//! A reservation is answered `202 QUEUED` (with its `poll_url`) at once: the record the script
//! wrote to the Redis outbox is the promise. The record, signed, is handed to the background
//! Kafka producer without waiting (`plugins::reserve::sale`, `plugins::queue`); if that queue is full or
//! Kafka is down, the order writer's sweeper produces it from the outbox later. Nothing of the
//! answer waits on Kafka, the order writer or PostgreSQL. Nothing is ever reserved twice: the script
//! runs once per request and is never retried. The sale's own headers (an order's signature,
//! nonce and timestamp, the payment and record signatures) are stripped from every proxied
//! request (result queries and shop routes); `Authorization` goes on.

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};
use plugins::{Denial, FlashSale, Handled, Reply, SaleCtx};
use protocol::codes::{Answer, Code};

use crate::answer;
use crate::frontdoor;
use crate::limits::{BodyCount, BODY_TIMEOUT};
use crate::metrics::metrics;
use crate::observe::{self, Observer, Trace};
use crate::reload::{Active, SharedState};
use crate::route_limits::{self, KeySource, Outcome};
use crate::shop;
use crate::upstreams;
use crate::uri;

const X_REQUEST_ID: &str = "x-request-id";

/// The gateway's proxy logic: the sale's paths answered by the embedded [`FlashSale`], the rest
/// of the shop proxied.
pub struct Gateway {
    shared: Arc<SharedState>,
    /// The sale, when the conf turns it on; without it the gateway is a reverse proxy only and
    /// `/seckill/` is routed like any other path.
    sale: Option<Arc<FlashSale>>,
    observer: Observer,
}

impl Gateway {
    /// A gateway over the shared conf and the sale (if any), with metrics and the access log off.
    pub fn new(shared: Arc<SharedState>, sale: Option<Arc<FlashSale>>) -> Self {
        Self { shared, sale, observer: Observer::default() }
    }

    /// The same, counting metrics and writing access lines as `observer` says.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = observer;
        self
    }
}

/// Writes the key authorization of an ACME HTTP-01 challenge.
async fn answer_challenge(session: &mut Session, key_auth: String) -> Result<bool> {
    let mut header = ResponseHeader::build(200, Some(2))?;
    header.insert_header(http::header::CONTENT_TYPE, "text/plain")?;
    header.insert_header(http::header::CONTENT_LENGTH, key_auth.len())?;
    session.write_response_header(Box::new(header), false).await?;
    session.write_response_body(Some(Bytes::from(key_auth)), true).await?;
    Ok(true)
}

/// Where a request that passed `request_filter` goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Upstream {
    /// Nowhere (answered by the gateway).
    #[default]
    None,
    /// The order writer pool (result queries).
    OrderWriter,
    /// A shop route's pool (index into the conf's routes).
    Shop(usize),
}

/// Per-request state: what is decided once at the start (the conf snapshot, the route) and
/// carried to the end.
#[derive(Debug, Default)]
pub struct Ctx {
    /// The conf snapshot this request runs under, from start to end.
    active: Option<Arc<Active>>,
    /// The sale's part, the same an embedder keeps: the arrival (taken in `new_ctx`: the waiting
    /// room judges its pre-queue and start draw by it), the id the gateway gave this request
    /// (proxied requests carry it upstream, as `X-Request-Id`), the client's address (the peer,
    /// or what a trusted proxy says, decided once by `[server] trusted_proxies`), the sale's
    /// route when it is one, and the campaign's budget place, given back in `logging`.
    pub(crate) sale: SaleCtx,
    /// The shop route of the request, when it is one.
    shop: Option<usize>,
    /// The path the shop route was matched on, when normalizing (`uri::normalize`) or a
    /// rewrite changed it.
    uri: Option<String>,
    /// The URI its route's rewrites left, when they changed it, and where they ended.
    rewritten: Option<shop::rewrite::Rewritten>,
    rewrite_end: Option<shop::rewrite::End>,
    /// Why the path cannot be normalized (answered 400).
    bad_path: Option<&'static str>,
    /// Where it goes.
    upstream: Upstream,
    /// The request body's bytes against its route's limit.
    body: BodyCount,
    /// Its place in its route's `limit_conn` zone, given back when the request ends.
    conn: Option<route_limits::ConnGuard>,
    /// What the logging phase tells about the request (metrics, access line).
    trace: Trace,
    /// The request's place on the upstream address it went to (counts its requests in flight;
    /// marks it failed when the attempt fails), and the attempts so far.
    slot: Option<upstreams::InFlight>,
    attempts: usize,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx { trace: Trace::start(), sale: SaleCtx::default(), ..Ctx::default() }
    }

    async fn early_request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<()> {
        // The conf snapshot and the route, decided once for the request: the sale's paths
        // first, then the shop's routes.
        let active = self.shared.active();
        // Who and which request, before a route's rewrites (`$remote_addr`, `$request_id`).
        ctx.sale.set_client(frontdoor::client(session, &active.server.trusted_proxies));
        ctx.sale.request_id = crate::request_id::new();
        let req = session.req_header();
        if self.sale.is_none() || ctx.sale.decide_route(req.uri.path()).is_none() {
            shop_route(&active, session, ctx);
        }
        // Response compression is set before Pingora's module reads Accept-Encoding.
        frontdoor::compression(session, &active, ctx.shop);
        ctx.active = Some(active);
        Ok(())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let Some(active) = ctx.active.clone() else {
            return Err(Error::explain(ErrorType::InternalError, "no conf"));
        };
        // The front door's limits: header fields, smuggling, declared body size (413).
        match frontdoor::admit(session, &active, ctx.shop) {
            Ok(body) => ctx.body = body,
            Err(r) => return answer::refuse(session, &mut ctx.trace, &ctx.sale.request_id, &r).await,
        }

        // ACME's HTTP-01 challenge, before any route (`crate::acme`).
        if let Some(key_auth) = self.shared.acme.challenge(session.req_header().uri.path()) {
            return answer_challenge(session, key_auth).await;
        }
        if let Some(why) = ctx.bad_path {
            let d = Denial::new(Code::BadRequest, why);
            return self.reply(session, ctx, Reply::denied(&d, &ctx.sale.request_id)).await;
        }
        if let Some(end) = ctx.rewrite_end.take() {
            if let Some(done) = rewrite_answer(session, ctx, &active, end).await {
                return done;
            }
        }
        let (Some(_), Some(sale)) = (ctx.sale.route(), &self.sale) else {
            return match ctx.shop {
                Some(i) if active.server.routes[i].answer.is_some() => {
                    let route = &active.server.routes[i];
                    shop::answer(session, route, ctx.at(), ctx.sale.client(), &ctx.sale.request_id).await
                }
                Some(i) => self.limit_then_proxy(session, ctx, &active, i).await,
                None => {
                    let d = Denial::new(Code::RouteNotFound, "no route for this host and path");
                    self.reply(session, ctx, Reply::denied(&d, &ctx.sale.request_id)).await
                }
            };
        };
        match sale.handle_session(session, &mut ctx.sale).await {
            Some(Handled::Reply(reply)) => {
                if let Some(code) = reply.code {
                    ctx.trace.answered(code);
                }
                sale.respond(session, &mut ctx.sale, reply).await
            }
            Some(Handled::ToOrderWriter) => {
                ctx.upstream = Upstream::OrderWriter;
                Ok(false)
            }
            None => Err(Error::explain(ErrorType::InternalError, "a sale route the sale did not take")),
        }
    }

    async fn request_body_filter(
        &self,
        _session: &mut Session,
        body: &mut Option<Bytes>,
        _end_of_stream: bool,
        ctx: &mut Ctx,
    ) -> Result<()> {
        // A body without a declared length is counted as it arrives (413 past the limit).
        if let Some(chunk) = body {
            ctx.body.add(chunk.len()).map_err(|r| Error::explain(ErrorType::HTTPStatus(413), r.message))?;
        }
        Ok(())
    }

    async fn upstream_peer(&self, session: &mut Session, ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        let active =
            ctx.active.as_ref().ok_or_else(|| Error::explain(ErrorType::InternalError, "no conf"))?;
        let pool = match ctx.upstream {
            Upstream::OrderWriter => active
                .order_writer
                .as_ref()
                .ok_or_else(|| Error::explain(ErrorType::InternalError, "a result query without the sale"))?,
            Upstream::Shop(i) => active.shop_pools[i]
                .as_ref()
                .ok_or_else(|| Error::explain(ErrorType::InternalError, "a route with return has no pool"))?,
            Upstream::None => {
                return Err(Error::explain(ErrorType::InternalError, "request has no upstream"))
            }
        };
        ctx.slot = None;
        let (mut peer, slot) = pool.peer(session.req_header(), ctx.sale.client()).ok_or_else(|| {
            Error::explain(ErrorType::ConnectNoRoute, format!("no healthy upstream in pool {}", pool.name()))
        })?;
        ctx.slot = Some(slot);
        ctx.attempts += 1;
        frontdoor::upgrade_timeouts(session, &mut peer, active);
        ctx.trace.upstream_picked(observe::inet(&peer._address));
        Ok(peer)
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        let trusted = ctx.active.as_ref().map(|a| &a.server.trusted_proxies);
        frontdoor::forwarded_headers(session, upstream_request, trusted, ctx.sale.client())?;
        if let (Upstream::Shop(i), Some(active)) = (ctx.upstream, &ctx.active) {
            let route = &active.server.routes[i];
            let vars = shop::vars(session, route, ctx.at(), ctx.sale.client(), &ctx.sale.request_id);
            shop::upstream_uri(route, &vars, ctx.rewritten.as_ref(), upstream_request)?;
            shop::request_headers(route, &vars, upstream_request)?;
        }
        frontdoor::strip_sale_headers(upstream_request);
        // The id of the access line, for the upstream's own logs (Nginx's $request_id).
        upstream_request.insert_header(X_REQUEST_ID, ctx.sale.request_id.as_str())?;
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        session: &mut Session,
        upstream_response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        ctx.trace.upstream_answered();
        if let (Upstream::Shop(i), Some(active)) = (ctx.upstream, &ctx.active) {
            let route = &active.server.routes[i];
            let vars = shop::vars(session, route, ctx.at(), ctx.sale.client(), &ctx.sale.request_id);
            shop::response_headers(route, &vars, upstream_response)?;
            frontdoor::compression_of_answer(session, route, upstream_response);
        }
        Ok(())
    }

    /// A connection that failed marks its address (`max_fails`) and is tried again on another
    /// address of the pool while one is in service and untried (Nginx's `proxy_next_upstream
    /// error timeout` for a request not sent yet).
    fn fail_to_connect(
        &self,
        _session: &mut Session,
        _peer: &HttpPeer,
        ctx: &mut Ctx,
        mut e: Box<Error>,
    ) -> Box<Error> {
        if let Some(slot) = ctx.slot.take() {
            slot.failed();
        }
        let addresses = match (ctx.upstream, &ctx.active) {
            (Upstream::Shop(i), Some(active)) => active.shop_pools[i].as_ref().map_or(0, |p| p.len()),
            _ => 0,
        };
        if ctx.attempts < addresses {
            e.set_retry(true);
        }
        e
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy
    where
        Ctx: Send + Sync,
    {
        let (code, answer) = match (e.etype(), e.esource()) {
            (ErrorType::HTTPStatus(413), _) => (413, Code::BodyTooLarge),
            (ErrorType::ReadTimedout, ErrorSource::Downstream) => (408, Code::RequestTimeout),
            (ErrorType::HTTPStatus(code), _) => (*code, Code::Internal),
            // A shop route's upstream that did not connect, answer or read in time: 504, as
            // Nginx (the sale's order writer stays 502 UPSTREAM_UNAVAILABLE).
            (
                ErrorType::ConnectTimedout | ErrorType::ReadTimedout | ErrorType::WriteTimedout,
                ErrorSource::Upstream,
            ) if matches!(ctx.upstream, Upstream::Shop(_)) => (504, Code::UpstreamUnavailable),
            // No healthy address in the pool: as unreachable as a refused connect.
            (ErrorType::ConnectNoRoute, _) | (_, ErrorSource::Upstream) => (502, Code::UpstreamUnavailable),
            (
                ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed,
                ErrorSource::Downstream,
            ) => (0, Code::BadRequest),
            (_, ErrorSource::Downstream) => (400, Code::BadRequest),
            _ => (500, Code::Internal),
        };
        if let (Some(slot), ErrorSource::Upstream) = (&ctx.slot, e.esource()) {
            slot.failed();
        }
        if let (true, ErrorSource::Upstream | ErrorSource::Unset) = (self.observer.metrics_on(), e.esource())
        {
            if let Some(pool) = ctx.active.as_ref().and_then(|a| pool_name(a, ctx.upstream)) {
                metrics().upstream_error(pool);
            }
        }
        if code > 0 {
            ctx.trace.answered(answer);
            if let (Upstream::Shop(i), 502 | 504) = (ctx.upstream, code) {
                let _ = shop_page(session, ctx, i, code).await;
                return FailToProxy { error_code: code, can_reuse_downstream: false };
            }
            let message = match answer {
                Code::BodyTooLarge => crate::limits::BODY_TOO_LARGE.message,
                Code::RequestTimeout => BODY_TIMEOUT.message,
                Code::UpstreamUnavailable => "the upstream could not be reached",
                Code::BadRequest => "the request could not be read",
                _ => "unexpected error",
            };
            let body = Answer { code: answer, message, request_id: &ctx.sale.request_id }.to_json();
            let _ = answer::respond_and_close(session, code, body).await;
        }
        FailToProxy { error_code: code, can_reuse_downstream: false }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Ctx) {
        // The answer is written: give the campaign's budget place back.
        ctx.sale.release();
        let shop = matches!(ctx.upstream, Upstream::Shop(_));
        // `$host` of a request without one: its route's server name (rare: built only then).
        let server_name = match host(session.req_header()) {
            Some(_) => String::new(),
            None => {
                let route = ctx.active.as_deref().zip(ctx.shop).and_then(|(a, i)| a.server.routes.get(i));
                route.and_then(|r| r.hosts.first()).map_or(String::new(), |h| h.key())
            }
        };
        let seen = observe::Seen {
            server_name: &server_name,
            active: ctx.active.as_deref(),
            client: ctx.sale.client(),
            request_id: &ctx.sale.request_id,
            sale_route: ctx.sale.route(),
            shop,
        };
        self.observer.done(session, &seen, &ctx.trace);
    }
}

impl Gateway {
    /// A proxied shop route's `limit_req` and `limit_conn` first (Nginx's preaccess phase: a
    /// route with `return` answers before it, unlimited, as Nginx's rewrite phase does); then
    /// the request goes to the route's pool (or its files, `crate::files`), or is answered with
    /// the limit's status.
    async fn limit_then_proxy(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        active: &Active,
        i: usize,
    ) -> Result<bool> {
        let route = &active.server.routes[i];
        if route.limit_req.is_some() || route.limit_conn.is_some() {
            let src = KeySource { client: ctx.sale.client(), req: session.req_header() };
            match route_limits::apply(&active.zones, route, &src).await {
                Outcome::Pass(guard) => ctx.conn = guard,
                Outcome::Rejected { status, limit, zone } => {
                    tracing::debug!(route = %route.name, limit, zone = %zone, status, "request limited");
                    if self.observer.metrics_on() {
                        metrics().limited(limit, &zone);
                    }
                    ctx.trace.answered(Code::RateLimited);
                    return status_page(session, ctx, route, status).await;
                }
            }
        }
        if route.files.is_some() {
            let (at, client) = (ctx.at(), ctx.sale.client());
            return crate::files::serve(session, route, at, client, &ctx.sale.request_id).await;
        }
        if active.shop_pools.get(i).is_none_or(Option::is_none) {
            // A route of rewrites only, none of which took the request away.
            return status_page(session, ctx, route, 404).await;
        }
        ctx.upstream = Upstream::Shop(i);
        Ok(false)
    }

    /// Writes the gateway's own `reply` (a denial before the sale): its answer code goes to
    /// the trace.
    async fn reply(&self, session: &mut Session, ctx: &mut Ctx, reply: Reply) -> Result<bool> {
        if let Some(code) = reply.code {
            ctx.trace.answered(code);
        }
        plugins::pingora::write(session, &reply).await?;
        Ok(true)
    }
}

impl Ctx {
    /// The request's path and query where they differ from those sent.
    fn at(&self) -> shop::At<'_> {
        shop::At { path: self.uri.as_deref(), args: self.rewritten.as_ref().map(|r| r.args.as_str()) }
    }
}

/// The shop route of the request, matched on its normalized path (kept in `ctx.uri` when it
/// differs from the path as sent), then by its rewrites (`shop::rewrite`: the URI they leave in
/// `ctx.uri` and `ctx.rewritten`, a redirect or a cycle in `ctx.rewrite_end`); a path that
/// cannot be normalized is kept in `ctx.bad_path`.
fn shop_route(active: &Active, session: &Session, ctx: &mut Ctx) {
    let req = session.req_header();
    match uri::normalize(req.uri.path()) {
        Ok(path) => {
            ctx.shop = active.routes.find(host(req), &path);
            ctx.uri = matches!(path, Cow::Owned(_)).then(|| path.into_owned());
        }
        Err(why) => ctx.bad_path = Some(why),
    }
    let Some(first) = ctx.shop.filter(|&i| !active.server.routes[i].rewrites.is_empty()) else { return };
    let path = ctx.uri.clone().unwrap_or_else(|| req.uri.path().to_string());
    let sent = shop::rewrite::Rewritten { path, args: req.uri.query().unwrap_or("").into(), broke: false };
    let mut uri = sent.clone();
    let (client, id) = (ctx.sale.client(), ctx.sale.request_id.as_str());
    let vars = |route: &crate::conf::RouteConf| shop::vars(session, route, shop::At::default(), client, id);
    let end = shop::rewrite::search(active, host(req), first, &mut uri, vars);
    ctx.shop = match end {
        shop::rewrite::End::Route(i) => Some(i),
        _ => None,
    };
    if uri != sent {
        ctx.uri = Some(uri.path.clone());
        ctx.rewritten = Some(uri);
    }
    ctx.rewrite_end = Some(end);
}

/// Answers what a route's rewrites ended in, when it is an answer: a redirect, or 500 after
/// too many searches (`None`: the request goes on).
async fn rewrite_answer(
    session: &mut Session,
    ctx: &Ctx,
    active: &Active,
    end: shop::rewrite::End,
) -> Option<Result<bool>> {
    use shop::rewrite::End;
    let (i, status, to) = match end {
        End::Redirect(i, status, to) => (i, status, to),
        End::Cycle(i) => {
            let route = &active.server.routes[i];
            tracing::warn!(route = %route.name, "rewrite cycle: more than {} searches", shop::rewrite::MAX_SEARCHES);
            return Some(status_page(session, ctx, route, 500).await);
        }
        End::Route(_) | End::NotFound => return None,
    };
    let route = &active.server.routes[i];
    let made = {
        let vars = shop::vars(session, route, ctx.at(), ctx.sale.client(), &ctx.sale.request_id);
        shop::redirect(route, &vars, status, &to)
    };
    let written = async {
        let (header, body) = made?;
        session.write_response_header(Box::new(header), false).await?;
        session.write_response_body(Some(Bytes::from(body)), true).await?;
        Ok(true)
    };
    Some(written.await)
}

/// Answers a shop route's visitor with the HTML page of `status`, like Nginx.
async fn shop_page(session: &mut Session, ctx: &Ctx, route: usize, status: u16) -> Result<bool> {
    let active = ctx.active.as_ref().ok_or_else(|| Error::explain(ErrorType::InternalError, "no conf"))?;
    let (header, body) = {
        let route = &active.server.routes[route];
        let vars = shop::vars(session, route, ctx.at(), ctx.sale.client(), &ctx.sale.request_id);
        shop::error_page(route, &vars, status)?
    };
    answer::write_and_close(session, header, body).await
}

/// Answers a request with the HTML page of `status` on its route, like Nginx's (the route's
/// `error_page` for it, its `add_header_always`; a limit's rejection, a route of rewrites only
/// that none took away, a rewrite cycle); the connection stays open.
async fn status_page(
    session: &mut Session,
    ctx: &Ctx,
    route: &crate::conf::RouteConf,
    status: u16,
) -> Result<bool> {
    let (header, body) = {
        let vars = shop::vars(session, route, ctx.at(), ctx.sale.client(), &ctx.sale.request_id);
        shop::error_page(route, &vars, status)?
    };
    session.write_response_header(Box::new(header), false).await?;
    session.write_response_body(Some(Bytes::from(body)), true).await?;
    Ok(true)
}

/// The request's host, without port: the `Host` header, else the URI's authority.
fn host(req: &RequestHeader) -> Option<&str> {
    req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).or_else(|| req.uri.host())
}

/// The name of the pool `upstream` goes to, in `active`.
fn pool_name(active: &Active, upstream: Upstream) -> Option<&str> {
    match upstream {
        Upstream::OrderWriter => active.order_writer.as_ref().map(|p| p.name()),
        Upstream::Shop(i) => active.shop_pools.get(i).and_then(Option::as_ref).map(|p| p.name()),
        Upstream::None => None,
    }
}
