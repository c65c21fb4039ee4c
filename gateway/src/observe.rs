//! What the gateway tells about each request once it is answered: its metrics and its access
//! line, both from the proxy's logging phase ([`Observer::done`]), and what they need to know
//! along the way ([`Trace`], kept in the request's context). [`install`] turns both on as the
//! server file says (`[admin]`, `[access_log]`); with both off, [`Observer::done`] does nothing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::Utc;
use pingora_core::server::Server;
use pingora_proxy::Session;
use plugins::FlashSale;
use protocol::codes::Code;

use crate::access_log::{self, AccessLog, Entry};
use crate::admin::{self, Live, SharedLive};
use crate::conf::ServerConf;
use crate::metrics::{metrics, RouteKind};
use crate::reload::Active;
use plugins::{Endpoint, SaleRoute};

/// What the proxy decided of a request, for its logging phase.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    /// The conf snapshot it ran under (`None`: refused before `request_filter`).
    pub active: Option<&'a Active>,
    /// The client's address the proxy decided (`None` when it never got that far).
    pub client: Option<std::net::IpAddr>,
    /// Its id.
    pub request_id: &'a str,
    /// Its sale route, when it was one.
    pub sale_route: Option<&'a SaleRoute>,
    /// Whether it went to a shop route.
    pub shop: bool,
    /// The server name of its shop route when the request names no host (`$host`), else empty.
    pub server_name: &'a str,
}

/// What one request's logging phase needs beyond the session: set along the way by the proxy.
#[derive(Debug, Default)]
pub struct Trace {
    started: Option<Instant>,
    answer: Option<Code>,
    upstream: Option<SocketAddr>,
    upstream_started: Option<Instant>,
    upstream_time: Option<Duration>,
}

impl Trace {
    /// A request whose header was just read.
    pub fn start() -> Self {
        Self { started: Some(Instant::now()), ..Self::default() }
    }

    /// The gateway answered it with `code` (not set for an answer proxied as is).
    pub fn answered(&mut self, code: Code) {
        self.answer = Some(code);
    }

    /// It goes to the upstream at `addr` (a retry replaces the first pick).
    pub fn upstream_picked(&mut self, addr: Option<SocketAddr>) {
        self.upstream = addr;
        self.upstream_started = Some(Instant::now());
    }

    /// The upstream's response header arrived.
    pub fn upstream_answered(&mut self) {
        self.upstream_time = self.upstream_started.map(|t| t.elapsed());
    }
}

/// The metrics switch and the access log of the process; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Observer {
    metrics: bool,
    log: Option<AccessLog>,
}

impl Observer {
    /// The access log, when it is on (the front door logs its own refusals through it).
    pub fn access_log(&self) -> Option<AccessLog> {
        self.log.clone()
    }

    /// Whether request metrics are counted (the admin listener is on).
    pub fn metrics_on(&self) -> bool {
        self.metrics
    }

    /// The request is answered: count it and write its access line.
    pub fn done(&self, session: &Session, seen: &Seen<'_>, trace: &Trace) {
        if !self.metrics && self.log.is_none() {
            return;
        }
        let took = trace.started.map_or(Duration::ZERO, |t| t.elapsed());
        let status = session.response_written().map_or(0, |r| r.status.as_u16());
        let req = session.req_header();
        if self.metrics {
            let kind = match (seen.shop, seen.sale_route.map(|r| &r.endpoint)) {
                (true, _) => RouteKind::Shop,
                (_, Some(Endpoint::Order { .. })) => RouteKind::Order,
                (_, Some(Endpoint::Captcha | Endpoint::Token)) => RouteKind::Token,
                (_, Some(Endpoint::Result { .. })) => RouteKind::Result,
                (_, Some(Endpoint::Info)) => RouteKind::Info,
                (_, Some(Endpoint::Page(_) | Endpoint::PageNoSlash)) => RouteKind::Page,
                _ => RouteKind::None,
            };
            let m = metrics();
            m.request(kind, status, took);
            // A buyer's flow: the captcha, token and order requests of a campaign.
            let flow = seen.sale_route.filter(|r| r.is_flow());
            if let (Some(route), Some(code)) = (flow, trace.answer) {
                match seen.active.and_then(|a| a.answers.get(&route.campaign)) {
                    Some(answers) => answers.count(code),
                    None => m.unknown_campaign().count(code),
                }
            }
        }
        let client = seen.client;
        let request_id = seen.request_id;
        if let Some(log) = &self.log {
            // A request Pingora refused before the proxy decided its client: the socket's peer.
            let client = client.or_else(|| session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
            log.log(&Entry {
                time: Utc::now(),
                client,
                method: req.method.as_str(),
                uri: req.uri.path_and_query().map_or("/", |p| p.as_str()),
                protocol: protocol_name(req.version),
                status,
                bytes: session.body_bytes_sent(),
                request_time: took,
                upstream: trace.upstream,
                upstream_time: trace.upstream_time,
                code: trace.answer,
                request_id,
                upstream_response_time: trace.upstream_started.map(|t| t.elapsed()),
                headers: Some(&req.headers),
                host: req
                    .headers
                    .get(http::header::HOST)
                    .and_then(|v| v.to_str().ok())
                    .or_else(|| req.uri.host())
                    .unwrap_or(""),
                scheme: crate::frontdoor::scheme(session),
                server_name: seen.server_name,
            });
        }
    }
}

fn protocol_name(v: http::Version) -> &'static str {
    match v {
        http::Version::HTTP_09 => "HTTP/0.9",
        http::Version::HTTP_10 => "HTTP/1.0",
        http::Version::HTTP_11 => "HTTP/1.1",
        http::Version::HTTP_2 => "HTTP/2.0",
        http::Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/?",
    }
}

/// The socket address of an upstream pick, when it is an IP one.
pub fn inet(addr: &pingora_core::protocols::l4::socket::SocketAddr) -> Option<SocketAddr> {
    addr.as_inet().copied()
}

/// Turns on what the server file asks: the access log (its writer thread, and `SIGUSR1` on the
/// `control` runtime) and the admin listener (its metrics registered, its service added to
/// `server`). Returns what the proxy's logging phase uses.
pub fn install(
    server: &mut Server,
    conf: &ServerConf,
    sale: &Option<Arc<FlashSale>>,
    shared: &Arc<crate::reload::SharedState>,
    control: &tokio::runtime::Handle,
) -> anyhow::Result<Observer> {
    let log = match &conf.access_log {
        Some(c) => {
            let log = AccessLog::start(c)?;
            control.spawn(access_log::watch_sigusr1(log.clone()));
            tracing::info!(output = ?c.output, "access log on");
            Some(log)
        }
        None => None,
    };
    if let Some(admin) = &conf.admin {
        let stats = log.as_ref().map(AccessLog::stats);
        let fleet = admin.token.clone().map(|t| (t, Arc::clone(shared)));
        let live = Arc::new(Live::new(sale.clone(), stats, fleet));
        crate::metrics::register(Box::new(SharedLive(Arc::clone(&live))))?;
        server.add_service(admin::service(&admin.listen.to_string(), live));
        tracing::info!(listen = %admin.listen, "admin listener: /metrics, /healthz, /readyz");
    }
    Ok(Observer { metrics: conf.admin.is_some(), log })
}
