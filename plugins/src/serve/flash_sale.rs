//! The whole sale behind one entry point, for any proxy's request filter ([`FlashSale`]).
//!
//! ```text
//! let sale = FlashSale::from_file("sale.toml")?;       // or from_toml(name, text), from_conf(conf)
//! // in a Pingora proxy: server.add_services(sale.services(Some(metrics_listen))); then per request
//! // sale.request_filter(session, &mut sale_ctx) (`plugins::pingora`). Without Pingora:
//! let Some(route) = SaleRoute::of(path) else { /* not the sale's: proxy it */ };
//! match sale.handle(&route, &mut request, &request_id).await {
//!     Handled::Reply(reply) => /* write reply.status, reply.headers, reply.body */,
//!     Handled::ToOrderWriter => /* a checked result query: proxy it to the order writer */,
//! }
//! ```
//!
//! Starting reads the sale's sections ([`crate::setup::conf`]: from a file, a file's text or
//! checked settings, [`SaleSource`]) and its campaigns, connects Redis with the pool's safety
//! settings ([`crate::setup::redis`]) on the sale's own I/O thread, checks the Kafka topic,
//! starts the producer ([`crate::queue`]) and registers the sale's metrics
//! ([`crate::serve::metrics`]). The replenish listener ([`FlashSale::replenish`]) and the
//! reload on `SIGHUP` ([`FlashSale::watch_sighup`]) are futures the proxy runs (with Pingora:
//! background services); the campaigns reload with [`FlashSale::reload`] too. A request
//! reaches the sale as [`SaleRequest`] (its head, then its body, read only by the endpoints
//! that have one, at most [`MAX_BODY`] bytes within [`BODY_TIMEOUT`]); every answer is a
//! [`Reply`] the proxy writes as it is. `plugins::pingora` is that adapter for a Pingora
//! `Session`, with the hooks a `ProxyHttp` calls.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fred::clients::Pool;
use http::Method;
use protocol::codes::Code;
use protocol::conf::ConfError;
use protocol::scripts::Scripts;

use crate::denial::Denial;
use crate::edge::{Edge, Head, Issued};
use crate::queue::{self, ReservationQueue, TopicAtStart};
use crate::reserve::sale::Queued;
use crate::serve::metrics::metrics;
use crate::serve::page::Asset;
use crate::serve::reply::Reply;
use crate::serve::route::{Endpoint, SaleRoute};
use crate::setup::conf::SaleConf;
use crate::setup::registry::{CampaignEntry, Registrar, Registry, SaleSource};

/// Longest order or token request body read.
pub const MAX_BODY: usize = 4096;

/// Longest wait for an order's or a token request's body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(2);

/// A request as the sale reads it: its head at any time, its body once.
pub trait SaleRequest: Send {
    /// The request line and headers, with the client's address the proxy decided.
    fn head(&self) -> Head<'_>;
    /// The body's next chunk; `None` at its end; `Err` when it cannot be read.
    fn body_chunk(&mut self) -> impl Future<Output = Result<Option<Bytes>, ()>> + Send;
}

/// What the sale made of a request.
#[derive(Debug)]
pub enum Handled {
    /// Answer this.
    Reply(Reply),
    /// A result query whose result token is the request's: proxy it to the order writer.
    ToOrderWriter,
}

/// How the sale starts, besides its conf: the scripts it runs and the name of its I/O thread.
#[derive(Debug, Clone)]
pub struct Start {
    /// The Lua scripts (compiled in unless a folder is given).
    pub scripts: Scripts,
    /// The name of the sale's I/O thread (`sale-io` unless said; 15 characters at most, as
    /// Linux keeps them). That thread runs the sale's I/O: the Redis connections, the
    /// reservation batches' sends and answers (`crate::reserve::batch`) and the Kafka
    /// producer's lanes, apart from the proxy's request threads (a batch's answer then never
    /// waits behind their requests). On one thread a reservation's batch is written, answered
    /// and its record produced with no hand-over between threads but the order's own.
    pub io_thread: String,
}

impl Default for Start {
    /// The scripts compiled in, the I/O thread `sale-io`.
    fn default() -> Self {
        Self { scripts: Scripts::builtin(), io_thread: "sale-io".to_string() }
    }
}

/// Why the sale did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A file is invalid (file:line:column: field).
    #[error(transparent)]
    Conf(#[from] ConfError),
    /// The sale's I/O runtime could not be built.
    #[error("the sale's I/O runtime: {0}")]
    Runtime(#[from] std::io::Error),
    /// The Redis client could not be built.
    #[error("{file}: redis: {error}")]
    Redis {
        /// The sale's conf file.
        file: String,
        /// What went wrong.
        error: String,
    },
    /// The topic answered and does not match the conf (partition count).
    #[error("{file}: {error}")]
    Topic {
        /// The sale's conf file.
        file: String,
        /// What went wrong.
        error: String,
    },
}

/// The sale of one process: its campaigns, its Redis and Kafka clients, its checks, and the
/// runtime of its I/O (its own: the embedder keeps none).
#[derive(Debug)]
pub struct FlashSale {
    pub(crate) registrar: Arc<Registrar>,
    edge: Edge,
    redis: Pool,
    queue: ReservationQueue,
    _io: IoRuntime,
}

impl FlashSale {
    /// Checks the sale's sections and its campaigns without connecting anything.
    pub fn check(source: impl Into<SaleSource>) -> Result<Arc<Registry>, ConfError> {
        Ok(Registrar::load(source)?.active())
    }

    /// The sale of a server file's sale sections ([`crate::conf::SECTIONS`]), with the scripts
    /// compiled in: [`FlashSale::new`] with [`Start::default`].
    pub fn from_file(file: impl AsRef<Path>) -> Result<Arc<Self>, StartError> {
        Self::new(file.as_ref(), Start::default())
    }

    /// The sale of a file's text: `name` names it in errors (name:line:column: field) and
    /// anchors its relative paths (the campaigns folder, `file:` secrets); reloads parse the
    /// same text and read the campaigns folder again.
    pub fn from_toml(name: impl AsRef<Path>, text: &str) -> Result<Arc<Self>, StartError> {
        let source = SaleSource::Text { name: name.as_ref().to_path_buf(), text: text.to_string() };
        Self::new(source, Start::default())
    }

    /// The sale of settings already checked (a reload reads only the campaigns folder again).
    pub fn from_conf(conf: SaleConf) -> Result<Arc<Self>, StartError> {
        Self::new(conf, Start::default())
    }

    /// Starts the sale of `source`, blocking until it is ready: call it before the proxy's
    /// server runs, outside any async runtime (from one, use [`FlashSale::start`]). See
    /// [`FlashSale::start`] for what it does.
    pub fn new(source: impl Into<SaleSource>, start: Start) -> Result<Arc<Self>, StartError> {
        let io = IoRuntime::new(&start.io_thread)?;
        let handle = io.handle();
        handle.block_on(Self::start_on(source.into(), start, io))
    }

    /// Starts the sale of `source` from an async context. It builds its own I/O runtime (one
    /// thread, [`Start::io_thread`]) and connects Redis there with the pool's safety settings
    /// (its connections live on that runtime, which the sale keeps: Pingora's services start
    /// only when its server runs, too late for a build that should fail on a bad conf before
    /// the proxy listens), checks the Kafka topic and starts the producer there too, and
    /// registers the sale's metrics ([`crate::serve::metrics`]). Redis being down is not an
    /// error (orders answer `SERVICE_DEGRADED` until it is back); a topic that answers with
    /// another partition count is. The replenish listener and the reload on `SIGHUP` are
    /// Pingora background services ([`FlashSale::replenish_service`],
    /// [`FlashSale::sighup_service`]).
    pub async fn start(source: impl Into<SaleSource>, start: Start) -> Result<Arc<Self>, StartError> {
        let io = IoRuntime::new(&start.io_thread)?;
        Self::start_on(source.into(), start, io).await
    }

    async fn start_on(source: SaleSource, start: Start, io: IoRuntime) -> Result<Arc<Self>, StartError> {
        crate::serve::page::warm();
        let shown = source.name();
        let registrar = Arc::new(Registrar::load(source)?);
        let conf = registrar.active().conf.clone();
        say_trusted_proxies(&conf);
        // Connected from `io`, so that the pool's connection tasks run there.
        let (redis_conf, scripts) = (conf.redis.clone(), start.scripts.clone());
        let connected =
            io.handle().spawn(async move { crate::setup::redis::connect(&redis_conf, &scripts).await });
        let redis = match connected.await {
            Ok(connected) => connected.map_err(|e| e.to_string()),
            Err(e) => Err(format!("the connecting task ended: {e}")),
        }
        .map_err(|error| StartError::Redis { file: shown.clone(), error })?;
        match queue::check_topic(&conf.kafka).await {
            Ok(TopicAtStart::Matches) => {}
            Ok(TopicAtStart::Unknown(why)) => tracing::warn!(
                topic = %conf.kafka.topic, why = %why,
                "kafka topic not checked at start; the lanes retry, reservations wait in the outbox"
            ),
            Err(error) => return Err(StartError::Topic { file: shown, error }),
        }
        let queue = ReservationQueue::start(conf.kafka.clone(), &io.handle());
        tracing::info!(brokers = ?conf.kafka.connection.brokers(), topic = %conf.kafka.topic, "kafka producer started");
        let edge = Edge::new(redis.clone(), start.scripts, queue.clone(), &conf.redis, io.handle());
        let sale = Arc::new(Self { registrar, edge, redis, queue, _io: io });
        crate::serve::metrics::serve(sale.clone());
        Ok(sale)
    }

    /// The replenish listener and the control reader, forever: a message on the replenish
    /// channel clears the campaign's sold-out flag at once (reconnecting after errors), and each
    /// campaign's operated state is read from Redis every [`protocol::control::POLL`]
    /// (`crate::setup::control`). [`FlashSale::replenish_service`] runs it as a Pingora background
    /// service; a proxy without Pingora runs this future.
    pub fn replenish(&self) -> impl Future<Output = ()> + Send + 'static {
        let listen =
            crate::setup::replenish::run(self.registry().conf.redis.clone(), Arc::clone(&self.registrar));
        let control = crate::setup::control::run(self.redis.clone(), Arc::clone(&self.registrar));
        async move {
            tokio::join!(listen, control);
        }
    }

    /// What this process serves, for the fleet's convergence checks (the admin listener's
    /// `/campaigns`): each campaign's file digest, its operated state and control version as last
    /// read, its sold-out flag, and what disagrees with the published campaign.
    pub fn campaigns_status(&self) -> serde_json::Value {
        let registry = self.registrar.active();
        let now = crate::checks::sold_out::now_ms();
        let mut ids: Vec<&String> = registry.campaigns.keys().collect();
        ids.sort();
        let campaigns: Vec<serde_json::Value> = ids
            .into_iter()
            .map(|id| {
                let e = &registry.campaigns[id];
                let disagreements = e.control.last().map(|(_, found)| found).unwrap_or_default();
                serde_json::json!({
                    "id": id,
                    "digest": e.campaign.digest,
                    "state": e.control.state().as_str(),
                    "version": e.control.version(),
                    "ends_at_ms": e.control.ends_at_ms(),
                    "sold_out": e.sold_out.is_set(now),
                    "in_flight": e.budget.inflight(),
                    "selling": !e.control.conflicted(),
                    "disagreements": disagreements,
                })
            })
            .collect();
        serde_json::json!({ "signing": registry.fleet.signing, "topic": registry.fleet.topic,
                            "partitions": registry.fleet.partitions, "campaigns": campaigns })
    }

    /// The active campaigns and settings (a snapshot).
    pub fn registry(&self) -> Arc<Registry> {
        self.registrar.active()
    }

    /// Reads the files again; on error the old campaigns stay (file:line:column: field).
    pub fn reload(&self) -> Result<Arc<Registry>, ConfError> {
        self.registrar.reload()
    }

    /// Reloads on every `SIGHUP`, forever (for a proxy that has no reload of its own):
    /// [`FlashSale::sighup_service`] runs it as a Pingora background service.
    pub fn watch_sighup(&self) -> impl Future<Output = ()> + Send + 'static {
        let registrar = Arc::clone(&self.registrar);
        async move {
            use tokio::signal::unix::{signal, SignalKind};
            let Ok(mut hup) = signal(SignalKind::hangup()) else {
                tracing::error!("cannot listen for SIGHUP: reload is off");
                return;
            };
            while hup.recv().await.is_some() {
                let _ = registrar.reload();
            }
        }
    }

    /// The Kafka producer (its depth and counters, for metrics).
    pub fn queue(&self) -> &ReservationQueue {
        &self.queue
    }

    /// The Redis pool (its connections, for metrics and readiness).
    pub fn redis(&self) -> &Pool {
        &self.redis
    }

    /// The largest smoothed lag of the threads serving the sale since the last call
    /// (`crate::checks::pressure`; zero while `[sale] shed_at_lag_ms` is off, since nothing probes
    /// then): for a scrape.
    pub fn take_peak_lag(&self) -> std::time::Duration {
        self.edge.pressure().take_peak()
    }

    /// The waiting room (its stats and the proof of work's bits, for metrics).
    pub fn waiting_room(&self) -> &crate::room::WaitingRoom {
        self.edge.room()
    }

    /// The per-process rate estimators (a proxy's own limits may use them too).
    pub fn limiter(&self) -> &crate::checks::rate_limit::RateLimiter {
        self.edge.limiter()
    }

    /// Answers a request on a sale `route`, under the id the proxy gave it.
    pub async fn handle<R: SaleRequest>(&self, route: &SaleRoute, req: &mut R, request_id: &str) -> Handled {
        let registry = self.registrar.active();
        let entry = match (&route.endpoint, registry.campaign(&route.campaign)) {
            (Endpoint::Unknown, _) => {
                let d = Denial::new(Code::RouteNotFound, "no route for this host and path");
                return Handled::Reply(Reply::denied(&d, request_id));
            }
            (_, None) => return Handled::Reply(Reply::denied(&unknown_campaign(), request_id)),
            (_, Some(entry)) => entry,
        };
        let denied = |d: Denial| Handled::Reply(Reply::denied(&d, request_id));
        // The lag is probed only where it can shed: a proxy without the knob runs no probe.
        if route.endpoint.costly() && registry.conf.shed_at_lag.is_some() {
            self.edge.pressure().watch_this_thread();
        }
        match &route.endpoint {
            Endpoint::Unknown => unreachable!("answered above"),
            Endpoint::Info => Handled::Reply(Reply::info(&entry.campaign)),
            Endpoint::Page(asset) => match page(asset, &req.head()) {
                Ok(reply) => Handled::Reply(reply),
                Err(d) => denied(d),
            },
            Endpoint::PageNoSlash => match reads(&req.head()) {
                Ok(_) => Handled::Reply(Reply::to_page(&route.campaign)),
                Err(d) => denied(d),
            },
            Endpoint::Captcha => {
                match self.edge.challenge(&registry.edge_conf(), &entry.as_ref(), &req.head()) {
                    Ok(issued) => Handled::Reply(Reply::issued(issued, request_id)),
                    Err(d) => denied(d),
                }
            }
            Endpoint::Token => match self.token(&registry, entry, req).await {
                Ok(issued) => Handled::Reply(Reply::issued(issued, request_id)),
                Err(d) => denied(d),
            },
            Endpoint::Result { request_id: asked } => {
                match self.result(&registry, entry, &route.campaign, &req.head(), asked) {
                    Ok(()) => Handled::ToOrderWriter,
                    Err(d) => denied(d),
                }
            }
            Endpoint::Order { hidden_path } => Handled::Reply(
                self.order_reply(&registry, entry, &route.campaign, hidden_path, req, request_id).await,
            ),
        }
    }

    /// `GET /seckill/{c}/result/{id}`'s checks before the order writer answers it. Polling has
    /// its own per-address limit, so a storm of polls stops here; then the result is the buyer's
    /// alone: the request's result token, one HMAC, no lookup.
    fn result(
        &self,
        registry: &Registry,
        entry: &CampaignEntry,
        campaign: &str,
        head: &Head<'_>,
        asked: &str,
    ) -> Result<(), Denial> {
        self.edge
            .limiter()
            .check_result(campaign, &entry.campaign.limits, head.client)
            .and_then(|()| self.edge.check_result(&registry.edge_conf(), campaign, head, asked))
            .map(|_| ())
    }

    /// `POST /seckill/{c}/{path}/order`'s reply: queued with its result token, or denied
    /// (with the result token when the buyer may hold a reservation already), with the order's
    /// notes, counted.
    async fn order_reply<R: SaleRequest>(
        &self,
        registry: &Registry,
        entry: &CampaignEntry,
        campaign: &str,
        hidden_path: &str,
        req: &mut R,
        request_id: &str,
    ) -> Reply {
        let mut notes = OrderNotes::default();
        let answer = self.order(registry, entry, hidden_path, req, request_id, &mut notes).await;
        let mut reply = match answer {
            Ok(token) => {
                let id = notes.answered_as.as_deref().unwrap_or(request_id);
                Reply::queued(campaign, id, &token)
            }
            Err(d) => match notes.result_token.take() {
                Some(token) => Reply::may_hold(&d, campaign, request_id, &token),
                None => Reply::denied(&d, request_id),
            },
        };
        reply.answered_as = notes.answered_as;
        reply.permit = notes.permit;
        reply.reserve_took = notes.reserve_took;
        reply.global_limits_failed_open = notes.global_limits_failed_open;
        count(&reply, campaign);
        reply
    }

    /// `POST /seckill/{c}/token`: the headers' checks, the body, the captcha and the token.
    async fn token<R: SaleRequest>(
        &self,
        registry: &Registry,
        entry: &CampaignEntry,
        req: &mut R,
    ) -> Result<Issued, Denial> {
        let (conf, c) = (registry.edge_conf(), entry.as_ref());
        let asked = self.edge.admit_token(&conf, &c, &req.head())?;
        let body = read_body(req).await?;
        self.edge.token(&conf, &c, asked, &body).await
    }

    /// An order, every check in the order of `crate::edge`'s list; `Ok` is QUEUED with its
    /// result token. What the answer carries besides (a safe retry's first id, the budget place,
    /// timings, the result token of a request that may hold a reservation) goes into `notes`.
    async fn order<R: SaleRequest>(
        &self,
        registry: &Registry,
        entry: &CampaignEntry,
        hidden_path: &str,
        req: &mut R,
        request_id: &str,
        notes: &mut OrderNotes,
    ) -> Result<String, Denial> {
        let (conf, c) = (registry.edge_conf(), entry.as_ref());
        let admitted = self.edge.admit(&conf, &c, &req.head(), hidden_path)?;
        let body = read_body(req).await?;
        let order = self.edge.verify(&conf, &c, admitted, &req.head(), &body).await?;
        // Held until the answer is written (the proxy drops the reply's permit then).
        notes.permit = Some(self.edge.hold(&c, &order)?);
        let asked = Instant::now();
        let queued = self.edge.reserve(&conf, &c, &order, request_id).await;
        let took = asked.elapsed();
        notes.reserve_took = Some(took);
        notes.global_limits_failed_open = order.global.waited_open(took);
        let first = match queued {
            Ok(Queued::New) => None,
            Ok(Queued::Retry(first)) => Some(first),
            Err(d) => {
                if d.may_hold {
                    notes.result_token = Some(self.edge.result_token(&conf, &c, &order, request_id));
                }
                return Err(d);
            }
        };
        let token = self.edge.result_token(&conf, &c, &order, first.as_deref().unwrap_or(request_id));
        notes.answered_as = first;
        Ok(token)
    }
}

/// Counts an order's reservation step in the sale's metrics (`crate::serve::metrics`).
fn count(reply: &Reply, campaign: &str) {
    if let Some(took) = reply.reserve_took {
        metrics().reserved(took, reply.code == Some(Code::ServiceDegraded));
    }
    if reply.global_limits_failed_open {
        metrics().global_limits_failed_open(campaign);
    }
}

/// Says once, at start, whose `X-Forwarded-For` the sale believes: nobody's is the default, and
/// a sale behind a load balancer that forgot `[sale] trusted_proxies` would take the balancer
/// for every buyer.
fn say_trusted_proxies(conf: &SaleConf) {
    if conf.trusted_proxies == crate::checks::TrustedProxies::default() {
        tracing::info!(
            "[sale] trusted_proxies is empty: X-Forwarded-For is believed from nobody, the socket's \
             peer is the client (unless the proxy gives the sale the client: SaleCtx::set_client)"
        );
    } else {
        tracing::info!(trusted = ?conf.trusted_proxies, "X-Forwarded-For believed from [sale] trusted_proxies");
    }
}

/// The sale's I/O runtime: one thread, kept as long as the sale. Shut down without blocking
/// when the sale is dropped (maybe from within another runtime, where blocking is refused).
#[derive(Debug)]
struct IoRuntime(Option<tokio::runtime::Runtime>);

impl IoRuntime {
    fn new(thread: &str) -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(thread)
            .enable_all()
            .build()?;
        Ok(Self(Some(runtime)))
    }

    fn handle(&self) -> tokio::runtime::Handle {
        self.0.as_ref().expect("kept until dropped").handle().clone()
    }
}

impl Drop for IoRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

/// What an order's answer carries besides its code.
#[derive(Debug, Default)]
struct OrderNotes {
    answered_as: Option<String>,
    permit: Option<crate::checks::budget::Permit>,
    reserve_took: Option<Duration>,
    global_limits_failed_open: bool,
    /// The request's result token when its denial says it may hold a reservation.
    result_token: Option<String>,
}

/// A page's reply: GET or HEAD, compressed as the request accepts, or not modified when its tag
/// matches.
fn page(asset: &'static Asset, head: &Head<'_>) -> Result<Reply, Denial> {
    let head_only = reads(head)?;
    let text = |name| head.headers.get(name).and_then(|v: &http::HeaderValue| v.to_str().ok());
    let (encoding, tag) = (text(http::header::ACCEPT_ENCODING), text(http::header::IF_NONE_MATCH));
    Ok(Reply::page(asset, head_only, encoding, tag))
}

/// A request for the buyer's page: GET or HEAD (`Ok(true)` for HEAD).
fn reads(head: &Head<'_>) -> Result<bool, Denial> {
    match *head.method {
        Method::GET => Ok(false),
        Method::HEAD => Ok(true),
        _ => Err(Denial::new(Code::BadRequest, "the page is read with GET")),
    }
}

/// The campaign a path names is not one this process sells.
pub fn unknown_campaign() -> Denial {
    Denial::new(Code::CampaignUnknown, "no such campaign")
}

/// Reads the request body, at most [`MAX_BODY`] bytes within [`BODY_TIMEOUT`]: past it
/// `BODY_TOO_LARGE` (413, declared or counted), unreadable or late `BAD_REQUEST`.
async fn read_body<R: SaleRequest>(req: &mut R) -> Result<Vec<u8>, Denial> {
    let too_large = || Denial::new(Code::BodyTooLarge, format!("the body is larger than {MAX_BODY} bytes"));
    let declared = req
        .head()
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok().map(str::to_string));
    if declared.and_then(|v| v.parse::<usize>().ok()).is_some_and(|n| n > MAX_BODY) {
        return Err(too_large());
    }
    let read = async {
        let mut body = Vec::new();
        while let Some(chunk) = req.body_chunk().await? {
            body.extend_from_slice(&chunk);
            if body.len() > MAX_BODY {
                return Ok(Err(too_large()));
            }
        }
        Ok(Ok(body))
    };
    match tokio::time::timeout(BODY_TIMEOUT, read).await {
        Ok(Ok(result)) => result,
        Ok(Err(())) | Err(_) => Err(Denial::new(Code::BadRequest, "the body could not be read")),
    }
}
