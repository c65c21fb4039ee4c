//! The gateway's server file (`conf/server.toml`) and the campaign files it points at.
//!
//! The server file reads like an Nginx `server` block: where to listen, where Redis is, the
//! order-writer pool, where reserved records are produced (`[kafka]`, in [`kafka`]), and `[[route]]`s (host + path prefix → upstream pool) for the rest of the
//! shop. Every value is checked at load; an error names the file, the line and the field.
//! See `conf/server.toml` for a commented example.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use ipnet::IpNet;
use plugins::batch::{BatchConf, BATCH_MAX_LIMIT, BATCH_WAIT_LIMIT_US};
use plugins::client_ip::TrustedProxies;
use plugins::queue::QueueConf;
use protocol::campaign::Campaign;
use protocol::conf::{self, ConfError};
use serde::Deserialize;
use toml::Spanned;

mod defense;
mod kafka;
pub mod limits;
mod observe;
mod route;
pub mod shutdown;
pub mod tls;

pub use observe::{AccessLogConf, AdminConf, LogFormat, LogOutput};

pub use defense::DefenseConf;

type S<T> = Spanned<T>;

fn spanned<T>(v: T) -> S<T> {
    Spanned::new(0..0, v)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    server: RawServer,
    redis: RawRedis,
    order_writer: RawPool,
    kafka: kafka::RawKafka,
    #[serde(default)]
    limits: limits::RawLimits,
    #[serde(default)]
    shutdown: shutdown::RawShutdown,
    #[serde(default)]
    tls: Option<tls::RawTls>,
    defense: defense::RawDefense,
    #[serde(default, rename = "route")]
    routes: Vec<RawRoute>,
    #[serde(default)]
    admin: Option<observe::RawAdmin>,
    #[serde(default)]
    access_log: Option<observe::RawAccessLog>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: S<String>,
    #[serde(default = "d_threads")]
    threads: S<i64>,
    #[serde(default = "d_campaigns_dir")]
    campaigns_dir: S<String>,
    #[serde(default = "d_sold_out_ttl")]
    sold_out_ttl_ms: S<i64>,
    signing_key: S<String>,
    #[serde(default)]
    trusted_proxies: Vec<S<String>>,
}

fn d_threads() -> S<i64> {
    spanned(2)
}
fn d_campaigns_dir() -> S<String> {
    spanned("campaigns".into())
}
fn d_sold_out_ttl() -> S<i64> {
    spanned(1000)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    url: S<String>,
    #[serde(default = "d_redis_timeout")]
    timeout_ms: S<i64>,
    #[serde(default = "d_pool_size")]
    pool_size: S<i64>,
    #[serde(default = "d_batch_max")]
    batch_max: S<i64>,
    #[serde(default = "d_batch_wait_us")]
    batch_wait_us: S<i64>,
}

fn d_redis_timeout() -> S<i64> {
    spanned(100)
}
fn d_pool_size() -> S<i64> {
    spanned(4)
}
fn d_batch_max() -> S<i64> {
    spanned(plugins::batch::DEFAULT_BATCH_MAX as i64)
}
fn d_batch_wait_us() -> S<i64> {
    spanned(plugins::batch::DEFAULT_BATCH_WAIT.as_micros() as i64)
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
    path_prefix: S<String>,
    upstreams: S<Vec<S<String>>>,
    #[serde(default = "d_connect")]
    connect_timeout_ms: S<i64>,
    #[serde(default = "d_read")]
    read_timeout_ms: S<i64>,
    #[serde(default = "d_interval")]
    health_check_interval_ms: S<i64>,
    #[serde(default)]
    health_check_path: Option<S<String>>,
    #[serde(default)]
    client_max_body_size: Option<S<i64>>,
    #[serde(default)]
    compression_level: Option<S<i64>>,
}

fn d_connect() -> S<i64> {
    spanned(200)
}
fn d_read() -> S<i64> {
    spanned(2000)
}
fn d_interval() -> S<i64> {
    spanned(1000)
}

/// Where Redis is and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConf {
    /// `redis://host:port[/db]`, or a Redis Cluster's
    /// `redis-cluster://host:port?node=host:port&node=host:port` (`protocol::cluster::URL_FORMS`).
    pub url: String,
    /// Bound on one reservation round trip; past it the answer is `SERVICE_DEGRADED`.
    pub timeout: Duration,
    /// Connections in the pool.
    pub pool_size: usize,
    /// How the reservations of one bucket are collected into one call (`batch_max`,
    /// `batch_wait_us`; `plugins::batch`).
    pub batch: BatchConf,
}

/// An upstream pool: addresses, timeouts, health check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolConf {
    /// Addresses, round robin over the healthy ones.
    pub upstreams: Vec<SocketAddr>,
    /// TCP connect timeout.
    pub connect_timeout: Duration,
    /// Timeout of each read from the upstream.
    pub read_timeout: Duration,
    /// Time between two health checks of every address.
    pub health_check_interval: Duration,
    /// `GET` this path and expect a 2xx; `None` checks that a TCP connection opens.
    pub health_check_path: Option<String>,
}

/// A shop route: requests whose host (when set) and path prefix match go to `pool` as they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteConf {
    /// Name, for logs.
    pub name: String,
    /// Host to match (lowercase, without port); `None` matches every host.
    pub host: Option<String>,
    /// Path prefix to match, starting with `/`.
    pub path_prefix: String,
    /// Where matching requests go.
    pub pool: PoolConf,
    /// Largest request body on this route; `None`: `[limits] client_max_body_size`.
    pub client_max_body_size: Option<u64>,
    /// Response compression level (gzip, brotli, zstd as the client accepts); 0: off.
    pub compression_level: u32,
}

/// The validated server file.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerConf {
    /// The file it was read from.
    pub file: PathBuf,
    /// Listening address (restart to change).
    pub listen: SocketAddr,
    /// Worker threads (restart to change).
    pub threads: usize,
    /// Folder of the campaign files.
    pub campaigns_dir: PathBuf,
    /// How long a local sold-out flag lives without a replenish message.
    pub sold_out_ttl: Duration,
    /// The gateway↔order-writer HMAC key, resolved from its reference.
    pub signing_key: Vec<u8>,
    /// Proxies in front of the gateway whose `X-Forwarded-For` names the client.
    pub trusted_proxies: TrustedProxies,
    /// Redis (restart to change).
    pub redis: RedisConf,
    /// The order writer's pool (result queries).
    pub order_writer: PoolConf,
    /// Where reserved records are produced (restart to change).
    pub kafka: QueueConf,
    /// Shop routes, in file order.
    pub routes: Vec<RouteConf>,
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
    /// The edge defenses' keys (login JWT, master key, captcha provider).
    pub defense: DefenseConf,
}

impl std::fmt::Debug for ServerConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerConf")
            .field("file", &self.file)
            .field("listen", &self.listen)
            .field("threads", &self.threads)
            .field("campaigns_dir", &self.campaigns_dir)
            .field("sold_out_ttl", &self.sold_out_ttl)
            .field("signing_key", &"<redacted>")
            .field("trusted_proxies", &self.trusted_proxies)
            .field("redis", &self.redis)
            .field("order_writer", &self.order_writer)
            .field("kafka", &self.kafka)
            .field("routes", &self.routes)
            .field("limits", &self.limits)
            .field("shutdown", &self.shutdown)
            .field("tls", &self.tls)
            .field("admin", &self.admin)
            .field("access_log", &self.access_log)
            .field("defense", &self.defense)
            .finish()
    }
}

/// The server file and its campaigns, all valid.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The server file.
    pub server: ServerConf,
    /// Every campaign of the campaigns folder.
    pub campaigns: Vec<Campaign>,
}

struct Checker<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Checker<'_> {
    fn err(&self, span: std::ops::Range<usize>, field: &str, msg: impl Into<String>) -> ConfError {
        ConfError::at(self.file, self.text, span, Some(field), msg)
    }

    fn ms(&self, v: &S<i64>, field: &str, min: i64, max: i64) -> Result<Duration, ConfError> {
        let n = *v.get_ref();
        if !(min..=max).contains(&n) {
            return Err(self.err(
                v.span(),
                field,
                format!("must be between {min} and {max} (ms), found {n}"),
            ));
        }
        Ok(Duration::from_millis(n as u64))
    }

    fn int(&self, v: &S<i64>, field: &str, min: i64, max: i64) -> Result<usize, ConfError> {
        let n = *v.get_ref();
        if !(min..=max).contains(&n) {
            return Err(self.err(v.span(), field, format!("must be between {min} and {max}, found {n}")));
        }
        Ok(n as usize)
    }

    fn addr(&self, v: &S<String>, field: &str) -> Result<SocketAddr, ConfError> {
        v.get_ref().parse().map_err(|_| {
            self.err(
                v.span(),
                field,
                format!("{:?} is not an IP:port address (names are not resolved)", v.get_ref()),
            )
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn pool(
        &self,
        prefix: &str,
        upstreams: &S<Vec<S<String>>>,
        connect: &S<i64>,
        read: &S<i64>,
        interval: &S<i64>,
        path: &Option<S<String>>,
    ) -> Result<PoolConf, ConfError> {
        let f = |name: &str| format!("{prefix}.{name}");
        if upstreams.get_ref().is_empty() {
            return Err(self.err(upstreams.span(), &f("upstreams"), "must list at least one address"));
        }
        let addrs =
            upstreams.get_ref().iter().map(|a| self.addr(a, &f("upstreams"))).collect::<Result<_, _>>()?;
        if let Some(p) = path {
            if !p.get_ref().starts_with('/') {
                return Err(self.err(p.span(), &f("health_check_path"), "must start with /"));
            }
        }
        Ok(PoolConf {
            upstreams: addrs,
            connect_timeout: self.ms(connect, &f("connect_timeout_ms"), 10, 10_000)?,
            read_timeout: self.ms(read, &f("read_timeout_ms"), 10, 120_000)?,
            health_check_interval: self.ms(interval, &f("health_check_interval_ms"), 100, 60_000)?,
            health_check_path: path.as_ref().map(|p| p.get_ref().clone()),
        })
    }
}

/// Parses and validates a server file's text. `file` names it in errors and anchors relative
/// paths (campaigns folder, `file:` secrets).
pub fn parse_server(file: &Path, text: &str) -> Result<ServerConf, ConfError> {
    let raw: Raw = conf::parse(file, text)?;
    let c = Checker { file, text };
    let base = file.parent().unwrap_or(Path::new("."));

    let s = &raw.server;
    let listen = c.addr(&s.listen, "server.listen")?;
    let threads = c.int(&s.threads, "server.threads", 1, 256)?;
    let sold_out_ttl = c.ms(&s.sold_out_ttl_ms, "server.sold_out_ttl_ms", 10, 60_000)?;
    let signing_key = protocol::secret::resolve(s.signing_key.get_ref(), base)
        .map_err(|e| c.err(s.signing_key.span(), "server.signing_key", e.to_string()))?;
    if s.campaigns_dir.get_ref().is_empty() {
        return Err(c.err(s.campaigns_dir.span(), "server.campaigns_dir", "must not be empty"));
    }
    let mut trusted = Vec::with_capacity(s.trusted_proxies.len());
    for net in &s.trusted_proxies {
        let text = net.get_ref().trim();
        let parsed = text.parse::<IpNet>().or_else(|_| text.parse::<IpAddr>().map(IpNet::from));
        trusted.push(parsed.map_err(|_| {
            c.err(
                net.span(),
                "server.trusted_proxies",
                format!("{:?} is not an IP address or a CIDR network (10.0.0.0/8)", net.get_ref()),
            )
        })?);
    }

    let r = &raw.redis;
    if !protocol::cluster::accepted_url(r.url.get_ref()) {
        return Err(c.err(r.url.span(), "redis.url", format!("must be {}", protocol::cluster::URL_FORMS)));
    }
    fred::types::config::Config::from_url(r.url.get_ref())
        .map_err(|e| c.err(r.url.span(), "redis.url", format!("not a Redis URL: {e}")))?;
    let redis = RedisConf {
        url: r.url.get_ref().clone(),
        // The upper bound is the timing rule with the order writer's sweeper (protocol::timing).
        timeout: c.ms(&r.timeout_ms, "redis.timeout_ms", 5, protocol::timing::RESERVE_TIMEOUT_MAX_MS)?,
        pool_size: c.int(&r.pool_size, "redis.pool_size", 1, 64)?,
        batch: BatchConf {
            max: c.int(&r.batch_max, "redis.batch_max", 1, BATCH_MAX_LIMIT as i64)?,
            wait: Duration::from_micros(c.int(
                &r.batch_wait_us,
                "redis.batch_wait_us",
                0,
                BATCH_WAIT_LIMIT_US as i64,
            )? as u64),
        },
    };

    let o = &raw.order_writer;
    let order_writer = c.pool(
        "order_writer",
        &o.upstreams,
        &o.connect_timeout_ms,
        &o.read_timeout_ms,
        &o.health_check_interval_ms,
        &o.health_check_path,
    )?;

    let kafka = kafka::check(&c, &raw.kafka, base)?;
    let admin = observe::admin(&c, &raw.admin)?;
    let access_log = observe::access_log(&c, &raw.access_log, base)?;
    let defense = defense::check(&c, &raw.defense, base)?;

    let mut routes = Vec::with_capacity(raw.routes.len());
    for (i, r) in raw.routes.iter().enumerate() {
        let prefix = format!("route[{i}]");
        if r.name.get_ref().trim().is_empty() {
            return Err(c.err(r.name.span(), &format!("{prefix}.name"), "must not be empty"));
        }
        if !r.path_prefix.get_ref().starts_with('/') {
            return Err(c.err(r.path_prefix.span(), &format!("{prefix}.path_prefix"), "must start with /"));
        }
        let host = match &r.host {
            Some(h) if h.get_ref().is_empty() || h.get_ref().contains(['/', ' ', ':']) => {
                return Err(c.err(h.span(), &format!("{prefix}.host"), "must be a host name without port"));
            }
            Some(h) => Some(h.get_ref().to_ascii_lowercase()),
            None => None,
        };
        let pool = c.pool(
            &prefix,
            &r.upstreams,
            &r.connect_timeout_ms,
            &r.read_timeout_ms,
            &r.health_check_interval_ms,
            &r.health_check_path,
        )?;
        let (client_max_body_size, compression_level) = route::check(&c, &prefix, r)?;
        routes.push(RouteConf {
            name: r.name.get_ref().clone(),
            host,
            path_prefix: r.path_prefix.get_ref().clone(),
            pool,
            client_max_body_size,
            compression_level,
        });
    }

    Ok(ServerConf {
        file: file.to_path_buf(),
        listen,
        threads,
        campaigns_dir: base.join(s.campaigns_dir.get_ref()),
        sold_out_ttl,
        signing_key,
        trusted_proxies: TrustedProxies::new(trusted),
        redis,
        order_writer,
        kafka,
        routes,
        limits: limits::check(&c, &raw.limits)?,
        shutdown: shutdown::check(&c, &raw.shutdown)?,
        tls: raw.tls.as_ref().map(|t| tls::check(&c, t, base)).transpose()?,
        admin,
        access_log,
        defense,
    })
}

/// Reads and validates the server file and every campaign file of its campaigns folder.
pub fn load(file: &Path) -> Result<Loaded, ConfError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| ConfError::whole(file, format!("cannot read: {e}")))?;
    let server = parse_server(file, &text)?;
    let campaigns = Campaign::load_dir(&server.campaigns_dir)?;
    Ok(Loaded { server, campaigns })
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const GOOD: &str = r#"
[server]
listen = "127.0.0.1:8080"
signing_key = "env:GATEWAY_CONF_TEST_KEY"

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
        assert_eq!(c.threads, 2);
        assert_eq!(c.campaigns_dir, Path::new("conf/campaigns"));
        assert_eq!(c.redis.timeout, Duration::from_millis(100));
        assert_eq!(c.redis.batch, BatchConf::default(), "measured defaults");
        let one =
            parse(&GOOD.replace("timeout_ms = 100", "timeout_ms = 100\nbatch_max = 1\nbatch_wait_us = 0"));
        assert_eq!(one.unwrap().redis.batch, BatchConf { max: 1, wait: Duration::ZERO });
        assert_eq!(c.order_writer.connect_timeout, Duration::from_millis(200));
        assert_eq!(c.routes[0].host.as_deref(), Some("shop.example"));
        assert_eq!(c.routes[0].pool.upstreams.len(), 2);
        assert_eq!(c.signing_key, b"0123456789abcdef0123");
        let k = &c.kafka;
        assert_eq!(
            (k.connection.brokers(), k.topic.as_str()),
            (&["127.0.0.1:19092".to_string()][..], "seckill.reservations")
        );
        assert_eq!((k.partitions, k.batch_max, k.capacity), (4, 500, 100_000));
        assert_eq!((k.linger, k.produce_timeout), (Duration::from_millis(5), Duration::from_millis(1000)));
        assert!(!format!("{c:?}").contains("0123456789abcdef"), "the key is not printed");
        assert_eq!(c.trusted_proxies, TrustedProxies::default(), "nobody's X-Forwarded-For by default");
        let lb =
            parse(&GOOD.replace("[redis]", "trusted_proxies = [\"10.0.0.0/8\", \"192.0.2.7\"]\n[redis]"))
                .unwrap();
        assert!(lb.trusted_proxies.contains(&"10.2.3.4".parse().unwrap()));
        assert!(lb.trusted_proxies.contains(&"192.0.2.7".parse().unwrap()));
        assert!(!lb.trusted_proxies.contains(&"192.0.2.8".parse().unwrap()));
    }

    pub(super) fn expect_err(text: &str, line: usize, field: &str, words: &str) {
        let err = parse(text).unwrap_err();
        assert_eq!((err.line, err.field.as_deref()), (line, Some(field)), "{err}");
        assert!(err.to_string().starts_with(&format!("conf/server.toml:{line}:")), "{err}");
        assert!(err.to_string().contains(words), "{err}");
    }

    #[test]
    fn bad_addresses_are_refused_with_line_and_field() {
        expect_err(&GOOD.replace("127.0.0.1:8080", "localhost:8080"), 3, "server.listen", "IP:port");
        expect_err(
            &GOOD.replace("\"127.0.0.1:8081\"", "\"10.0.0.1\""),
            11,
            "order_writer.upstreams",
            "IP:port",
        );
        expect_err(&GOOD.replace("\"127.0.0.1:9001\"", "\"nope:1\""), 17, "route[0].upstreams", "IP:port");
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
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100\ntimeuot = 1"),
            9,
            "timeuot",
            "unknown field",
        );
        expect_err(
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100000"),
            8,
            "redis.timeout_ms",
            "between",
        );
        expect_err(
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100\nbatch_max = 0"),
            9,
            "redis.batch_max",
            "between 1",
        );
        expect_err(
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100\nbatch_wait_us = 20000"),
            9,
            "redis.batch_wait_us",
            "between 0 and 10000",
        );
        expect_err(
            &GOOD.replace("path_prefix = \"/\"", "path_prefix = \"api\""),
            16,
            "route[0].path_prefix",
            "/",
        );
        expect_err(&GOOD.replace("redis://", "http://"), 7, "redis.url", "redis://");
        expect_err(
            &GOOD.replace("upstreams = [\"127.0.0.1:8081\"]", "upstreams = []"),
            11,
            "order_writer.upstreams",
            "at least one",
        );
    }

    #[test]
    fn a_redis_cluster_url_is_accepted_and_other_schemes_are_not() {
        let url = "redis-cluster://127.0.0.1:7390?node=127.0.0.1:7391&node=127.0.0.1:7392";
        let c = parse(&GOOD.replace("redis://127.0.0.1:6390", url)).unwrap();
        assert_eq!(c.redis.url, url);
        expect_err(&GOOD.replace("redis://", "redis-sentinel://"), 7, "redis.url", "redis-cluster://");
    }

    #[test]
    fn secrets_must_be_references() {
        expect_err(
            &GOOD.replace("env:GATEWAY_CONF_TEST_KEY", "hunter2hunter2hunter2"),
            4,
            "server.signing_key",
            "env:NAME or file:PATH",
        );
        expect_err(
            &GOOD.replace("env:GATEWAY_CONF_TEST_KEY", "env:GATEWAY_CONF_SURELY_UNSET"),
            4,
            "server.signing_key",
            "GATEWAY_CONF_SURELY_UNSET",
        );
    }
}
