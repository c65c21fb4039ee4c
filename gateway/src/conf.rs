//! The gateway's server file (`conf/server.toml`) and the campaign files it points at.
//!
//! The server file reads like an Nginx `server` block: where to listen, the order-writer pool, and
//! `[[route]]`s (hosts + path, as Nginx's `server_name` and `location` → upstream pool, an answer
//! of its own or files from a folder) for the rest of the shop. The sale's own sections (`[sale]`,
//! `[redis]`, `[kafka]`, `[defense]`: `plugins::conf::SECTIONS`) are in the same file and read by
//! `plugins::conf`; this module reads the proxy's. Every value is checked at load; an error names
//! the file, the line, the column and the field. See `conf/server.toml` for a commented example.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use plugins::checks::client_ip::TrustedProxies;
use protocol::conf::{self, Checker, ConfError};
use serde::de::IgnoredAny;
use serde::Deserialize;
use toml::Spanned;

pub mod acme;
mod action;
pub mod compression;
mod files;
mod headers;
pub mod limits;
mod matching;
mod observe;
pub mod rates;
mod route;
pub mod shutdown;
pub mod tls;
pub mod upstream;

pub use action::{PrefixRewrite, RegexRewrite, Return, RewriteFlag};
pub use files::Files;
pub use headers::Headers;
pub use matching::{HostName, Location, Pattern};
pub use observe::{AccessLogConf, AdminConf, LogFormat, LogOutput};

type S<T> = Spanned<T>;

fn spanned<T>(v: T) -> S<T> {
    Spanned::new(0..0, v)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    server: RawServer,
    #[serde(default)]
    order_writer: Option<RawPool>,
    // The sale's sections (plugins::conf::SECTIONS), read by plugins::conf; here only whether
    // each is there (the sale is on with all of them, off with none).
    #[serde(default)]
    sale: Option<S<IgnoredAny>>,
    #[serde(default)]
    redis: Option<S<IgnoredAny>>,
    #[serde(default)]
    kafka: Option<S<IgnoredAny>>,
    #[serde(default)]
    defense: Option<S<IgnoredAny>>,
    #[serde(default)]
    limits: limits::RawLimits,
    #[serde(default)]
    shutdown: shutdown::RawShutdown,
    #[serde(default)]
    tls: Option<tls::RawTls>,
    #[serde(default, rename = "route")]
    routes: Vec<RawRoute>,
    #[serde(default, rename = "limit_req_zone")]
    limit_req_zones: Vec<rates::RawReqZone>,
    #[serde(default, rename = "limit_conn_zone")]
    limit_conn_zones: Vec<rates::RawConnZone>,
    #[serde(default)]
    admin: Option<observe::RawAdmin>,
    #[serde(default)]
    access_log: Option<observe::RawAccessLog>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: S<String>,
    #[serde(default)]
    workers: Option<S<i64>>,
    #[serde(default = "d_threads")]
    threads: S<i64>,
    #[serde(default)]
    trusted_proxies: Vec<S<String>>,
    #[serde(default)]
    proxy_protocol: bool,
}

fn d_threads() -> S<i64> {
    spanned(1)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPool {
    upstreams: S<Vec<S<String>>>,
    #[serde(default = "d_connect")]
    connect_timeout_ms: S<i64>,
    #[serde(default = "d_read")]
    read_timeout_ms: S<i64>,
    #[serde(default = "d_interval")]
    health_check_interval_ms: S<i64>,
    #[serde(default)]
    health_check_path: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    name: S<String>,
    #[serde(default)]
    host: Option<S<String>>,
    #[serde(default)]
    hosts: Option<S<Vec<S<String>>>>,
    #[serde(default)]
    default_server: Option<S<bool>>,
    #[serde(default)]
    path: Option<S<String>>,
    #[serde(default)]
    path_prefix: Option<S<String>>,
    #[serde(default, rename = "return")]
    answer: Option<S<String>>,
    #[serde(default)]
    rewrite: Option<action::RawRewrites>,
    #[serde(default)]
    replace_prefix: Option<S<String>>,
    #[serde(default)]
    proxy_set_header: headers::Table,
    #[serde(default)]
    add_header: headers::Table,
    #[serde(default)]
    add_header_always: headers::Table,
    #[serde(default)]
    proxy_hide_header: Option<Vec<S<String>>>,
    #[serde(default)]
    error_page: headers::Table,
    #[serde(default)]
    root: Option<S<String>>,
    #[serde(default)]
    alias: Option<S<String>>,
    #[serde(default)]
    index: Option<S<Vec<S<String>>>>,
    #[serde(default)]
    try_files: Option<S<Vec<S<String>>>>,
    #[serde(default)]
    default_type: Option<S<String>>,
    #[serde(default)]
    upstreams: Option<S<Vec<S<String>>>>,
    #[serde(default = "d_route_timeout")]
    connect_timeout_ms: S<i64>,
    #[serde(default = "d_route_timeout")]
    read_timeout_ms: S<i64>,
    #[serde(default = "d_route_timeout")]
    send_timeout_ms: S<i64>,
    #[serde(default = "d_interval")]
    health_check_interval_ms: S<i64>,
    #[serde(default)]
    health_check_path: Option<S<String>>,
    #[serde(default)]
    health_check_host: Option<S<String>>,
    #[serde(default)]
    balance: Option<S<String>>,
    #[serde(default = "d_resolve")]
    resolve_interval_ms: S<i64>,
    #[serde(default)]
    upstream_tls: Option<S<bool>>,
    #[serde(default)]
    upstream_sni: Option<S<String>>,
    #[serde(default)]
    upstream_ca_file: Option<S<String>>,
    #[serde(default)]
    upstream_verify: Option<S<bool>>,
    #[serde(default)]
    client_max_body_size: Option<S<i64>>,
    #[serde(default)]
    compression_level: Option<S<i64>>,
    #[serde(default)]
    compression_types: Option<S<Vec<S<String>>>>,
    #[serde(default)]
    compression_min_length: Option<S<i64>>,
    #[serde(default)]
    compression_algorithms: Option<S<Vec<S<String>>>>,
    #[serde(default)]
    limit_req: Option<rates::RawLimitReq>,
    #[serde(default)]
    limit_req_status: Option<S<i64>>,
    #[serde(default)]
    limit_conn: Option<rates::RawLimitConn>,
    #[serde(default)]
    limit_conn_status: Option<S<i64>>,
}

fn d_connect() -> S<i64> {
    spanned(200)
}
fn d_read() -> S<i64> {
    spanned(2000)
}
/// A route's connect, read and send timeouts: Nginx's `proxy_*_timeout` defaults (60 s).
fn d_route_timeout() -> S<i64> {
    spanned(60_000)
}
fn d_interval() -> S<i64> {
    spanned(1000)
}
/// How often the names in `upstreams` are resolved again (30 s).
fn d_resolve() -> S<i64> {
    spanned(30_000)
}

/// An upstream pool: addresses, balancing, timeouts, health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConf {
    /// Its servers (Nginx's `server` lines: IP or name, weight, passive failure marking).
    pub upstreams: Vec<upstream::Server>,
    /// How a request's address is picked among those in service.
    pub balance: upstream::Balance,
    /// How often names are resolved again.
    pub resolve_interval: Duration,
    /// The `Host` of the HTTP health check (default `localhost`).
    pub health_check_host: Option<String>,
    /// HTTPS to the addresses (a route's `upstream_tls`); `None`: plain HTTP.
    pub tls: Option<upstream::UpstreamTls>,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Timeout of each read from the upstream (Nginx's `proxy_read_timeout`).
    pub read_timeout: Duration,
    /// Timeout of each write to the upstream (Nginx's `proxy_send_timeout`).
    pub send_timeout: Duration,
    /// Time between two health checks of every address.
    pub health_check_interval: Duration,
    /// `GET` this path and expect a 2xx; `None` checks that a TCP connection opens.
    pub health_check_path: Option<String>,
}

/// A shop route: requests whose host and path match (Nginx's `server_name` and `location`,
/// [`crate::routes`]) go to `pool`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConf {
    /// Name, for logs.
    pub name: String,
    /// Hosts to match (Nginx's `server_name`s); none: a request whose host no route names
    /// (unless another host is the `default_server`).
    pub hosts: Vec<HostName>,
    /// Whether this route's host is the one for requests whose host no route names.
    pub default_server: bool,
    /// Path to match.
    pub location: Location,
    /// Its own answer, in place of proxying (Nginx's `return`).
    pub answer: Option<Return>,
    /// Its rewrites, in order (Nginx's `rewrite`s of a location).
    pub rewrites: Vec<RegexRewrite>,
    /// Its prefix replaced on the way upstream (unless a `break` rewrite changed the URI).
    pub replace_prefix: Option<PrefixRewrite>,
    /// Headers set on the request, added to or hidden from the answer.
    pub headers: Headers,
    /// Pages shown in place of the built-in one for a status (502, 504), read at load.
    pub error_pages: Vec<(u16, bytes::Bytes)>,
    /// The folder it serves files from, in place of proxying (Nginx's `root`/`alias`).
    pub files: Option<Files>,
    /// Where matching requests go; `None` for a route with a `return` or files.
    pub pool: Option<PoolConf>,
    /// Largest request body on this route; `None`: `[limits] client_max_body_size`.
    pub client_max_body_size: Option<u64>,
    /// Response compression (Nginx's `gzip` directives); off by default.
    pub compression: compression::Compression,
    /// Its request-rate limit (Nginx's `limit_req`), when it has one.
    pub limit_req: Option<rates::LimitReq>,
    /// Its limit of requests in flight (Nginx's `limit_conn`), when it has one.
    pub limit_conn: Option<rates::LimitConn>,
}

/// The validated server file.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerConf {
    /// The file it was read from.
    pub file: PathBuf,
    /// Listening address (restart to change).
    pub listen: SocketAddr,
    /// Worker services: each its own runtime, listener and upstream pools on the same address,
    /// sharing the sale (restart to change). Default: the cores.
    pub workers: usize,
    /// Threads of each worker (restart to change). Default 1: a request never changes thread.
    pub threads: usize,
    /// Proxies in front of the gateway whose `X-Forwarded-For` names the client.
    pub trusted_proxies: TrustedProxies,
    /// Whether every plain connection starts with a PROXY header (v1 or v2) whose source is the
    /// client (Nginx's `listen ... proxy_protocol` with `real_ip_header proxy_protocol`;
    /// restart to change).
    pub proxy_protocol: bool,
    /// The order writer's pool (result queries); `None` when the sale is off (a proxy only).
    pub order_writer: Option<PoolConf>,
    /// Shop routes, in file order.
    pub routes: Vec<RouteConf>,
    /// The request-rate zones routes name (`[[limit_req_zone]]`).
    pub limit_req_zones: Vec<rates::ReqZoneConf>,
    /// The connection zones routes name (`[[limit_conn_zone]]`).
    pub limit_conn_zones: Vec<rates::ConnZoneConf>,
    /// The front door's limits and timeouts (restart to change).
    pub limits: crate::limits::Limits,
    /// Graceful shutdown and upgrade (restart to change).
    pub shutdown: shutdown::ShutdownConf,
    /// TLS termination, when configured (certificates reload on `SIGHUP`).
    pub tls: Option<tls::TlsConf>,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`); off when `None` (restart to change).
    pub admin: Option<AdminConf>,
    /// The access log; off when `None` (restart to change).
    pub access_log: Option<AccessLogConf>,
}

impl ServerConf {
    /// Whether the sale is on (its sections and `[order_writer]` are in the file); off, the
    /// gateway is a reverse proxy only, and `/seckill/` is routed like any other path.
    pub fn sells(&self) -> bool {
        self.order_writer.is_some()
    }
}

impl std::fmt::Debug for ServerConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConf")
            .field("file", &self.file)
            .field("listen", &self.listen)
            .field("workers", &self.workers)
            .field("threads", &self.threads)
            .field("trusted_proxies", &self.trusted_proxies)
            .field("proxy_protocol", &self.proxy_protocol)
            .field("order_writer", &self.order_writer)
            .field("routes", &self.routes)
            .field("limit_req_zones", &self.limit_req_zones)
            .field("limit_conn_zones", &self.limit_conn_zones)
            .field("limits", &self.limits)
            .field("shutdown", &self.shutdown)
            .field("tls", &self.tls)
            .field("admin", &self.admin)
            .field("access_log", &self.access_log)
            .finish()
    }
}

/// The fields of an upstream pool, as `[order_writer]` and every `[[route]]` write them.
struct RawPoolFields<'a> {
    upstreams: &'a S<Vec<S<String>>>,
    connect: &'a S<i64>,
    read: &'a S<i64>,
    /// A route's `send_timeout_ms`; `None`: the read timeout (`[order_writer]`).
    send: Option<&'a S<i64>>,
    /// The upper bound of read and send, in ms.
    max_io_ms: i64,
    interval: &'a S<i64>,
    path: &'a Option<S<String>>,
    /// A route's `balance`, `health_check_host` and `resolve_interval_ms` (none for
    /// `[order_writer]`: round robin, `localhost`, 30 s).
    route: Option<RouteBalance<'a>>,
}

/// A route's `balance`, `health_check_host` and `resolve_interval_ms`.
type RouteBalance<'a> = (&'a Option<S<String>>, &'a Option<S<String>>, &'a S<i64>);

/// Checks the pool fields under `prefix` (`order_writer`, `route[0]`).
fn pool(c: &Checker<'_>, prefix: &str, raw: RawPoolFields<'_>) -> Result<PoolConf, ConfError> {
    let RawPoolFields { upstreams, connect, read, send, max_io_ms, interval, path, route } = raw;
    let f = |name: &str| format!("{prefix}.{name}");
    let addrs = upstream::servers(c, upstreams, &f("upstreams"))?;
    let default_resolve = spanned(30_000);
    let (balance, host, resolve) = route.unwrap_or((&None, &None, &default_resolve));
    let health_check_host = match host {
        Some(h)
            if h.get_ref().is_empty() || h.get_ref().contains(|ch: char| ch.is_whitespace() || ch == '/') =>
        {
            return Err(c.err(h.span(), &f("health_check_host"), "a host name (no space, no path)"))
        }
        h => h.as_ref().map(|h| h.get_ref().clone()),
    };
    let read_timeout = c.ms(read, &f("read_timeout_ms"), 10, max_io_ms)?;
    if let Some(p) = path {
        if !p.get_ref().starts_with('/') {
            return Err(c.err(p.span(), &f("health_check_path"), "must start with /"));
        }
    }
    Ok(PoolConf {
        upstreams: addrs,
        balance: upstream::balance(c, balance.as_ref(), &f("balance"))?,
        resolve_interval: c.ms(resolve, &f("resolve_interval_ms"), 1000, 3_600_000)?,
        health_check_host,
        tls: None,
        connect_timeout: c.ms(connect, &f("connect_timeout_ms"), 10, 75_000)?,
        read_timeout,
        send_timeout: match send {
            Some(send) => c.ms(send, &f("send_timeout_ms"), 10, max_io_ms)?,
            None => read_timeout,
        },
        health_check_interval: c.ms(interval, &f("health_check_interval_ms"), 100, 60_000)?,
        health_check_path: path.as_ref().map(|p| p.get_ref().clone()),
    })
}

/// Whether a server file sells: with the sale's sections and `[order_writer]`, or none of them.
enum Mode<'a> {
    /// A reverse proxy only: no sale path, no Redis, Kafka or secrets.
    ProxyOnly,
    /// The sale on (its sections are `plugins::conf`'s to check), with the order writer's pool.
    Sale(&'a RawPool),
}

/// The sale is on when any of its sections (`[sale]`, `[redis]`, `[kafka]`, `[defense]`) or
/// `[order_writer]` is in the file, and then needs them all (`plugins::conf` names a missing
/// sale section; this names a missing `[order_writer]`). With none, the gateway is a proxy.
fn sale_mode<'a>(c: &Checker<'_>, raw: &'a Raw) -> Result<Mode<'a>, ConfError> {
    let given =
        [("sale", &raw.sale), ("redis", &raw.redis), ("kafka", &raw.kafka), ("defense", &raw.defense)];
    let first = given.iter().find_map(|(name, s)| s.as_ref().map(|s| (*name, s.span())));
    match (&raw.order_writer, first) {
        (None, None) => Ok(Mode::ProxyOnly),
        (Some(o), _) => Ok(Mode::Sale(o)),
        (None, Some((name, span))) => Err(c.err(
            span,
            "order_writer",
            format!(
                "missing: [{name}] turns the sale on, and the sale needs [order_writer] (its result \
                 queries go there); a proxy without the sale has none of [sale], [redis], [kafka], \
                 [defense] and [order_writer]"
            ),
        )),
    }
}

/// Parses and validates a server file's text. `file` names it in errors and anchors relative
/// paths (campaigns folder, `file:` secrets).
pub fn parse_server(file: &Path, text: &str) -> Result<ServerConf, ConfError> {
    let raw: Raw = conf::parse(file, text)?;
    let c = Checker::new(file, text);
    let base = file.parent().unwrap_or(Path::new("."));

    let s = &raw.server;
    let listen = c.addr(&s.listen, "server.listen")?;
    let workers = match &s.workers {
        Some(w) => c.int(w, "server.workers", 1, 256)?,
        None => std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    let threads = c.int(&s.threads, "server.threads", 1, 256)?;
    let trusted_proxies = plugins::conf::trusted_proxies(&c, &s.trusted_proxies, "server.trusted_proxies")?;

    let order_writer = match sale_mode(&c, &raw)? {
        Mode::ProxyOnly => None,
        Mode::Sale(o) => Some(pool(
            &c,
            "order_writer",
            RawPoolFields {
                upstreams: &o.upstreams,
                connect: &o.connect_timeout_ms,
                read: &o.read_timeout_ms,
                send: None,
                max_io_ms: 120_000,
                interval: &o.health_check_interval_ms,
                path: &o.health_check_path,
                route: None,
            },
        )?),
    };

    let admin = observe::admin(&c, &raw.admin, base)?;
    let access_log = observe::access_log(&c, &raw.access_log, base)?;

    let mut routes = route::routes(&c, &raw.routes)?;
    let limit_req_zones = rates::req_zones(&c, &raw.limit_req_zones)?;
    let limit_conn_zones = rates::conn_zones(&c, &raw.limit_conn_zones)?;
    rates::routes(&c, &raw.routes, &limit_req_zones, &limit_conn_zones, &mut routes)?;

    Ok(ServerConf {
        file: file.to_path_buf(),
        listen,
        workers,
        threads,
        trusted_proxies,
        proxy_protocol: s.proxy_protocol,
        order_writer,
        routes,
        limit_req_zones,
        limit_conn_zones,
        limits: limits::check(&c, &raw.limits)?,
        shutdown: shutdown::check(&c, &raw.shutdown)?,
        tls: raw.tls.as_ref().map(|t| tls::check(&c, t, base)).transpose()?,
        admin,
        access_log,
    })
}

/// Reads and validates the server file's own sections (the sale's are `plugins::conf`'s).
pub fn load(file: &Path) -> Result<ServerConf, ConfError> {
    let text = conf::read(file)?;
    parse_server(file, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const GOOD: &str = r#"
[server]
listen = "127.0.0.1:8080"


[redis]
url = "redis://127.0.0.1:6390"
timeout_ms = 100

[order_writer]
upstreams = ["127.0.0.1:8081"]

[[route]]
name = "shop"
host = "Shop.Example"
path_prefix = "/"
upstreams = ["127.0.0.1:9000", "127.0.0.1:9001"]

[kafka]
brokers = ["127.0.0.1:19092"]

[defense]
master_key = "env:GATEWAY_CONF_TEST_KEY"
login_alg = "HS256"
login_key = "env:GATEWAY_CONF_TEST_KEY"
login_issuer = "shop"
login_audience = "seckill"

[sale]
signing_key = "env:GATEWAY_CONF_TEST_KEY"
"#;

    pub(super) fn parse(text: &str) -> Result<ServerConf, ConfError> {
        // SAFETY of the env var: this test module is the only user of this variable's name.
        std::env::set_var("GATEWAY_CONF_TEST_KEY", "0123456789abcdef0123");
        parse_server(Path::new("conf/server.toml"), text)
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.listen.port(), 8080);
        assert_eq!(c.threads, 1);
        assert_eq!(c.workers, std::thread::available_parallelism().map_or(1, |n| n.get()));
        let two = parse(&GOOD.replace("[redis]", "workers = 2\n[redis]")).unwrap();
        assert_eq!((two.workers, two.threads), (2, 1));
        assert!(c.sells());
        assert_eq!(c.order_writer.unwrap().connect_timeout, Duration::from_millis(200));
        assert_eq!(c.routes[0].hosts, [HostName::Exact("shop.example".into())]);
        assert_eq!(c.routes[0].pool.as_ref().unwrap().upstreams.len(), 2);
        assert_eq!(c.trusted_proxies, TrustedProxies::default(), "nobody's X-Forwarded-For by default");
        let lb =
            parse(&GOOD.replace("[redis]", "trusted_proxies = [\"10.0.0.0/8\", \"192.0.2.7\"]\n[redis]"))
                .unwrap();
        assert!(lb.trusted_proxies.contains(&"10.2.3.4".parse().unwrap()));
        assert!(lb.trusted_proxies.contains(&"192.0.2.7".parse().unwrap()));
        assert!(!lb.trusted_proxies.contains(&"192.0.2.8".parse().unwrap()));
    }

    pub(super) fn expect_err(text: &str, line: usize, field: &str, words: &str) {
        protocol::conf::assert_refused(parse(text), "conf/server.toml", line, field, words);
    }

    #[test]
    fn bad_addresses_are_refused_with_line_and_field() {
        expect_err(&GOOD.replace("127.0.0.1:8080", "localhost:8080"), 3, "server.listen", "IP:port");
        expect_err(
            &GOOD.replace("[redis]", "workers = 0\n[redis]"),
            6,
            "server.workers",
            "between 1 and 256",
        );
        expect_err(
            &GOOD.replace("\"127.0.0.1:8081\"", "\"10.0.0.1\""),
            11,
            "order_writer.upstreams",
            "HOST:PORT",
        );
        expect_err(&GOOD.replace("\"127.0.0.1:9001\"", "\"no_pe:1\""), 17, "route[0].upstreams", "neither");
        expect_err(
            &GOOD.replace("\"127.0.0.1:9001\"", "\"127.0.0.1:9001 backup\""),
            17,
            "route[0].upstreams",
            "weight=N",
        );
        expect_err(
            &GOOD.replace("[redis]", "trusted_proxies = [\"10.0.0.0/8\", \"10.0.0.0/33\"]\n[redis]"),
            6,
            "server.trusted_proxies",
            "CIDR",
        );
    }

    #[test]
    fn unknown_fields_and_bounds_are_refused() {
        expect_err(
            &GOOD.replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:8080\"\nlisen = 1"),
            4,
            "lisen",
            "unknown field",
        );
        let err = parse(&GOOD.replace("[order_writer]", "[ordr_writer]")).unwrap_err();
        assert!(err.to_string().starts_with("conf/server.toml:10:"), "{err}");
        assert!(err.message.contains("unknown field `ordr_writer`"), "{err}");
        expect_err(
            &GOOD.replace("path_prefix = \"/\"", "path_prefix = \"api\""),
            16,
            "route[0].path_prefix",
            "/",
        );
        expect_err(
            &GOOD.replace("upstreams = [\"127.0.0.1:8081\"]", "upstreams = []"),
            11,
            "order_writer.upstreams",
            "at least one",
        );
    }

    /// `[server]` and routes alone: a reverse proxy, no sale, no secrets needed.
    const PROXY_ONLY: &str = r#"
[server]
listen = "127.0.0.1:8080"

[[route]]
name = "shop"
path_prefix = "/"
upstreams = ["127.0.0.1:9000"]
"#;

    #[test]
    fn a_file_without_the_sale_sections_is_a_proxy_only() {
        let c = parse_server(Path::new("conf/server.toml"), PROXY_ONLY).unwrap();
        assert!(!c.sells());
        assert_eq!(c.order_writer, None);
        assert_eq!(c.routes.len(), 1);
        // Any one of the sale's sections turns the sale on, and it then needs [order_writer].
        for section in plugins::conf::SECTIONS {
            let text = format!("{PROXY_ONLY}\n[{section}]\n");
            let line = PROXY_ONLY.lines().count() + 2;
            protocol::conf::assert_refused(
                parse_server(Path::new("conf/server.toml"), &text),
                "conf/server.toml",
                line,
                "order_writer",
                "needs [order_writer]",
            );
        }
        // [order_writer] alone turns it on too (the sale's own check then names its sections).
        let with_writer = format!("{PROXY_ONLY}\n[order_writer]\nupstreams = [\"127.0.0.1:8081\"]\n");
        assert!(parse_server(Path::new("conf/server.toml"), &with_writer).unwrap().sells());
    }

    #[test]
    fn the_sale_sections_are_known_and_left_to_the_sale() {
        // A sale section's content is not read here: plugins::conf checks it.
        let c = parse(&GOOD.replace("timeout_ms = 100", "timeout_ms = 100000"));
        assert!(c.is_ok(), "{c:?}");
        for section in plugins::conf::SECTIONS {
            let without = GOOD.replace(&format!("[{section}]"), "[elsewhere]");
            let err = parse(&without).unwrap_err();
            assert!(err.message.contains("elsewhere") || err.message.contains(section), "{section}: {err}");
        }
    }
}
