//! The hot path: one `ProxyHttp` impl, readable top to bottom. The sale's checks and the
//! reservation are `plugins::edge`'s (the API any Pingora proxy embeds); this file routes,
//! reads bodies, writes answers and proxies the rest of the shop.
//!
//! `request_filter` decides every request, cheapest check first:
//!
//! 1. route: a campaign path (`/seckill/{c}/{path}/order|captcha|token|info|result/{id}`) or a
//!    shop route; none → 404;
//! 2. for an order: the campaign exists → its window is open (server time) → its switches →
//!    its concurrency budget → the local sold-out flag → the inputs (device, qty) → the rate
//!    limits per IP, device and campaign → the campaign token (bound to user, campaign and
//!    device) → the account's rate → the hidden path → the timestamp → the request signature
//!    (body read here) → eligibility → the campaign's global limits (`limit.lua` in Redis, only
//!    when it has `[[global_limit]]` rules) → `reserve.lua` in Redis, which spends the nonce in
//!    the same call (bounded timeout). Every order is answered here; the buyer is the token's user,
//!    never a header;
//! 3. `captcha` and `token` (before an order: the login JWT, a solved captcha, a token) are
//!    answered by [`crate::issue`];
//! 4. a result query: the campaign exists → the per-address polling limit → the request's
//!    result token (`X-Result-Token`, given with its QUEUED answer; one HMAC, no lookup), then
//!    proxied to the order writer. Anyone else learns nothing, not even whether the id exists.
//! 5. the buyer's page (`GET /seckill/{c}/` and its files) is answered from memory
//!    ([`crate::page`]): the campaign exists → the bytes, gzipped once at start.
//!
//! A reservation is answered `202 QUEUED` (with its `poll_url`) at once: the record the script
//! wrote to the Redis outbox is the promise. The record, signed, is handed to the background
//! Kafka producer without waiting (`plugins::sale`, `plugins::queue`); if that queue is full or
//! Kafka is down, the order writer's sweeper produces it from the outbox later. Nothing of the
//! answer waits on Kafka, the order writer or PostgreSQL. Nothing is ever reserved twice: the script
//! runs once per request and is never retried. The sale's own headers (an order's signature,
//! nonce and timestamp, the payment and record signatures) are stripped from every proxied
//! request (result queries and shop routes); `Authorization` goes on.

use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorSource, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::{FailToProxy, ProxyHttp, Session};
use plugins::budget::Permit;
use plugins::edge::{Edge, Head};
use plugins::global_limit::Checked;
use plugins::sale::Queued;
use plugins::Denial;
use protocol::codes::{Answer, Code};

use crate::answer;
use crate::frontdoor;
use crate::limits::{BodyCount, BODY_TIMEOUT};
use crate::metrics::metrics;
use crate::observe::{self, Observer, Trace};
use crate::page;
use crate::reload::{Active, SharedState};
use crate::routes::{self, CampaignPath};

const X_REQUEST_ID: &str = "x-request-id";

/// Longest order or token request body read.
pub(crate) const MAX_BODY: usize = 4096;

/// The gateway's proxy logic.
pub struct Gateway {
    shared: Arc<SharedState>,
    pub(crate) edge: Edge,
    observer: Observer,
}

impl Gateway {
    /// A gateway over the shared conf and the edge (its checks, Redis scripts and Kafka
    /// queue), with metrics and the access log off.
    pub fn new(shared: Arc<SharedState>, edge: Edge) -> Self {
        Self { shared, edge, observer: Observer::default() }
    }

    /// The same, counting metrics and writing access lines as `observer` says.
    pub fn with_observer(mut self, observer: Observer) -> Self {
        self.observer = observer;
        self
    }
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

/// Per-request state.
#[derive(Debug, Default)]
pub struct Ctx {
    /// The conf snapshot this request runs under, from start to end.
    active: Option<Arc<Active>>,
    /// The id the gateway gave this request (campaign paths; proxied requests get one on their
    /// way upstream, as `X-Request-Id`).
    pub(crate) request_id: String,
    /// The client's address (the peer, or what a trusted proxy says), decided once at the start.
    pub(crate) client: Option<IpAddr>,
    /// Where it goes.
    upstream: Upstream,
    /// The campaign's concurrency budget place, given back in `logging`.
    permit: Option<Permit>,
    /// The request body's bytes against its route's limit.
    body: BodyCount,
    /// What the logging phase tells about the request (metrics, access line).
    trace: Trace,
}

/// What `request_filter` decided from the request line and headers.
enum Route {
    Order(String, String),
    Captcha(String),
    Token(String),
    Info(String),
    Result(String, String),
    Page(String, &'static page::Asset),
    PageNoSlash(String),
    Shop(usize),
    NotFound,
}

#[async_trait]
impl ProxyHttp for Gateway {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx { trace: Trace::start(), ..Ctx::default() }
    }

    async fn early_request_filter(&self, session: &mut Session, _ctx: &mut Ctx) -> Result<()> {
        // Response compression is set before Pingora's module reads Accept-Encoding.
        frontdoor::compression(session, &self.shared.active());
        Ok(())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let active = self.shared.active();
        ctx.active = Some(Arc::clone(&active));
        ctx.client = frontdoor::client(session, &active.server.trusted_proxies);

        let route = {
            let req = session.req_header();
            match routes::campaign_path(req.uri.path()) {
                Some(CampaignPath::Order(c, p)) => Route::Order(c.to_string(), p.to_string()),
                Some(CampaignPath::Captcha(c)) => Route::Captcha(c.to_string()),
                Some(CampaignPath::Token(c)) => Route::Token(c.to_string()),
                Some(CampaignPath::Info(c)) => Route::Info(c.to_string()),
                Some(CampaignPath::Result(c, id)) => Route::Result(c.to_string(), id.to_string()),
                Some(CampaignPath::Page(c, name)) => {
                    page::find(name).map_or(Route::NotFound, |a| Route::Page(c.to_string(), a))
                }
                Some(CampaignPath::PageNoSlash(c)) => Route::PageNoSlash(c.to_string()),
                Some(CampaignPath::Unknown) => Route::NotFound,
                None => active.routes.find(host(req), req.uri.path()).map_or(Route::NotFound, Route::Shop),
            }
        };

        // The front door's limits: header fields, smuggling, declared body size (413).
        let shop = if let Route::Shop(i) = route { Some(i) } else { None };
        match frontdoor::admit(session, &active, shop) {
            Ok(body) => ctx.body = body,
            Err(r) => {
                ctx.request_id = new_request_id();
                return answer::refuse(session, &mut ctx.trace, &ctx.request_id, &r).await;
            }
        }

        match route {
            Route::Shop(i) => {
                ctx.upstream = Upstream::Shop(i);
                Ok(false)
            }
            Route::Result(campaign, id) => {
                // Polling has its own per-address limit, so a storm of polls stops here and never
                // reaches the order writer; a campaign this gateway does not sell is answered
                // here too (a made-up id must not reach the writer unlimited). Then the result
                // is the buyer's alone: the request's result token, checked here with no lookup.
                let checked = match active.campaigns.get(&campaign) {
                    Some(entry) => self
                        .edge
                        .limiter()
                        .check_result(&campaign, &entry.campaign.limits, ctx.client)
                        .and_then(|()| {
                            let head = head(session, ctx.client);
                            self.edge.check_result(&active.edge(), &campaign, &head, &id).map(drop)
                        }),
                    None => Err(unknown_campaign()),
                };
                if let Err(d) = checked {
                    ctx.request_id = new_request_id();
                    return answer::deny(session, &mut ctx.trace, &ctx.request_id, &d).await;
                }
                ctx.upstream = Upstream::OrderWriter;
                Ok(false)
            }
            Route::NotFound => {
                ctx.request_id = new_request_id();
                let d = Denial::new(Code::RouteNotFound, "no route for this host and path");
                answer::deny(session, &mut ctx.trace, &ctx.request_id, &d).await
            }
            Route::Info(campaign) => {
                ctx.request_id = new_request_id();
                match active.campaigns.get(&campaign) {
                    Some(entry) => answer::info(session, entry).await,
                    None => answer::deny(session, &mut ctx.trace, &ctx.request_id, &unknown_campaign()).await,
                }
            }
            Route::Page(campaign, asset) => {
                ctx.request_id = new_request_id();
                match page_request(session, &active, &campaign) {
                    Ok(head) => answer::page(session, asset, head).await,
                    Err(d) => answer::deny(session, &mut ctx.trace, &ctx.request_id, &d).await,
                }
            }
            Route::PageNoSlash(campaign) => {
                ctx.request_id = new_request_id();
                match page_request(session, &active, &campaign) {
                    Ok(_) => {
                        answer::redirect(session, &format!("{}{campaign}/", routes::CAMPAIGN_PREFIX)).await
                    }
                    Err(d) => answer::deny(session, &mut ctx.trace, &ctx.request_id, &d).await,
                }
            }
            Route::Order(campaign, path) => {
                ctx.request_id = new_request_id();
                match self.order(session, ctx, &active, &campaign, &path).await {
                    Ok(result_token) => {
                        ctx.trace.answered(Code::Queued);
                        answer::respond(
                            session,
                            202,
                            answer::queued(&campaign, &ctx.request_id, &result_token),
                            None,
                            "no-store",
                        )
                        .await
                    }
                    Err(d) => answer::deny(session, &mut ctx.trace, &ctx.request_id, &d).await,
                }
            }
            Route::Captcha(campaign) => {
                ctx.request_id = new_request_id();
                let answer = self.captcha(session, &active, &campaign, ctx.client);
                answer::issued(session, &mut ctx.trace, &ctx.request_id, answer).await
            }
            Route::Token(campaign) => {
                ctx.request_id = new_request_id();
                let answer = self.token(session, &active, &campaign, ctx.client).await;
                answer::issued(session, &mut ctx.trace, &ctx.request_id, answer).await
            }
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
            Upstream::OrderWriter => &active.order_writer,
            Upstream::Shop(i) => &active.shop_pools[i],
            Upstream::None => {
                return Err(Error::explain(ErrorType::InternalError, "request has no upstream"))
            }
        };
        let mut peer = pool.peer().ok_or_else(|| {
            Error::explain(ErrorType::ConnectNoRoute, format!("no healthy upstream in pool {}", pool.name()))
        })?;
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
        frontdoor::forwarded_headers(session, upstream_request, trusted, ctx.client)?;
        frontdoor::strip_sale_headers(upstream_request);
        // The id of the access line, for the upstream's own logs (Nginx's $request_id).
        if ctx.request_id.is_empty() {
            ctx.request_id = new_request_id();
        }
        upstream_request.insert_header(X_REQUEST_ID, ctx.request_id.as_str())?;
        Ok(())
    }

    async fn upstream_response_filter(
        &self,
        _session: &mut Session,
        _upstream_response: &mut ResponseHeader,
        ctx: &mut Ctx,
    ) -> Result<()> {
        ctx.trace.upstream_answered();
        Ok(())
    }

    async fn fail_to_proxy(&self, session: &mut Session, e: &Error, ctx: &mut Ctx) -> FailToProxy
    where
        Ctx: Send + Sync,
    {
        let (code, answer) = match (e.etype(), e.esource()) {
            (ErrorType::HTTPStatus(413), _) => (413, Code::BodyTooLarge),
            (ErrorType::ReadTimedout, ErrorSource::Downstream) => (408, Code::RequestTimeout),
            (ErrorType::HTTPStatus(code), _) => (*code, Code::Internal),
            // No healthy address in the pool: as unreachable as a refused connect.
            (ErrorType::ConnectNoRoute, _) | (_, ErrorSource::Upstream) => (502, Code::UpstreamUnavailable),
            (
                ErrorType::WriteError | ErrorType::ReadError | ErrorType::ConnectionClosed,
                ErrorSource::Downstream,
            ) => (0, Code::BadRequest),
            (_, ErrorSource::Downstream) => (400, Code::BadRequest),
            _ => (500, Code::Internal),
        };
        if let (true, ErrorSource::Upstream | ErrorSource::Unset) = (self.observer.metrics_on(), e.esource())
        {
            if let Some(pool) = ctx.active.as_ref().and_then(|a| pool_name(a, ctx.upstream)) {
                metrics().upstream_error(pool);
            }
        }
        if code > 0 {
            ctx.trace.answered(answer);
            let message = match answer {
                Code::BodyTooLarge => crate::limits::BODY_TOO_LARGE.message,
                Code::RequestTimeout => BODY_TIMEOUT.message,
                Code::UpstreamUnavailable => "the upstream could not be reached",
                Code::BadRequest => "the request could not be read",
                _ => "unexpected error",
            };
            let body = Answer { code: answer, message, request_id: &ctx.request_id }.to_json();
            let _ = answer::respond_and_close(session, code, body).await;
        }
        FailToProxy { error_code: code, can_reuse_downstream: false }
    }

    async fn logging(&self, session: &mut Session, _e: Option<&Error>, ctx: &mut Ctx) {
        // The answer is written: give the campaign's budget place back.
        ctx.permit.take();
        let shop = matches!(ctx.upstream, Upstream::Shop(_));
        self.observer.done(session, ctx.active.as_deref(), ctx.client, &ctx.request_id, shop, &ctx.trace);
    }
}

impl Gateway {
    /// An order, every check in the order of the module's list (`plugins::edge`); `Ok` means
    /// answer QUEUED, under `ctx.request_id` (a safe retry's is the first request's), with the
    /// result token it carries.
    async fn order(
        &self,
        session: &mut Session,
        ctx: &mut Ctx,
        active: &Active,
        campaign: &str,
        path: &str,
    ) -> std::result::Result<String, Denial> {
        let entry = active.campaigns.get(campaign).ok_or_else(unknown_campaign)?;
        let (conf, c) = (active.edge(), entry.edge());
        let mut admitted = self.edge.admit(&conf, &c, &head(session, ctx.client), path)?;
        // The budget place is given back once the answer is written (`logging`).
        ctx.permit = admitted.permit.take();
        let body = read_body(session).await?;
        let order = self.edge.verify(&conf, &c, admitted, &head(session, ctx.client), &body).await?;
        if order.global == Checked::FailedOpen {
            self.observer.global_limits_failed_open(campaign);
        }
        let queued = self.observer.reserve(self.edge.reserve(&conf, &c, &order, &ctx.request_id)).await?;
        if let Queued::Retry(first) = queued {
            ctx.request_id = first;
        }
        Ok(self.edge.result_token(&conf, &c, &order, &ctx.request_id))
    }
}

/// The request line and headers as the edge's checks read them, with the `client` decided at
/// the start of the request.
pub(crate) fn head(session: &Session, client: Option<IpAddr>) -> Head<'_> {
    let req = session.req_header();
    Head { method: &req.method, uri: &req.uri, headers: &req.headers, client }
}

/// Reads the request body, at most [`MAX_BODY`] bytes within 2 s: past it `BODY_TOO_LARGE`
/// (413, declared or counted, as the front door's own limit answers), unreadable or late
/// `BAD_REQUEST`.
pub(crate) async fn read_body(session: &mut Session) -> std::result::Result<Vec<u8>, Denial> {
    let too_large = || Denial::new(Code::BodyTooLarge, format!("the body is larger than {MAX_BODY} bytes"));
    let declared = session.req_header().headers.get(http::header::CONTENT_LENGTH);
    if declared
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|n| n > MAX_BODY)
    {
        return Err(too_large());
    }
    let read = async {
        let mut body = Vec::new();
        while let Some(chunk) = session.read_request_body().await.map_err(|_| ())? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_BODY {
                return Ok(Err(too_large()));
            }
        }
        Ok(Ok(body))
    };
    match tokio::time::timeout(std::time::Duration::from_secs(2), read).await {
        Ok(Ok(result)) => result,
        Ok(Err(())) | Err(_) => Err(Denial::new(Code::BadRequest, "the body could not be read")),
    }
}

/// A request for the buyer's page: the campaign exists and the method reads (GET or HEAD;
/// `Ok(true)` for HEAD).
fn page_request(session: &Session, active: &Active, campaign: &str) -> std::result::Result<bool, Denial> {
    active.campaigns.get(campaign).ok_or_else(unknown_campaign)?;
    match session.req_header().method {
        http::Method::GET => Ok(false),
        http::Method::HEAD => Ok(true),
        _ => Err(Denial::new(Code::BadRequest, "the page is read with GET")),
    }
}

pub(crate) fn new_request_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

pub(crate) fn unknown_campaign() -> Denial {
    Denial::new(Code::CampaignUnknown, "no such campaign")
}

/// The request's host, without port: the `Host` header, else the URI's authority.
fn host(req: &RequestHeader) -> Option<&str> {
    req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).or_else(|| req.uri.host())
}

/// The name of the pool `upstream` goes to, in `active`.
fn pool_name(active: &Active, upstream: Upstream) -> Option<&str> {
    match upstream {
        Upstream::OrderWriter => Some(active.order_writer.name()),
        Upstream::Shop(i) => active.shop_pools.get(i).map(|p| p.name()),
        Upstream::None => None,
    }
}
