//! The sale's part of a server file: the sections [`SECTIONS`] (`[sale]`, `[redis]`, `[kafka]`,
//! `[defense]`), checked once into [`SaleConf`] with file:line:column:field errors.
//!
//! A proxy that embeds the sale keeps its own sections in the same file (the gateway's
//! `[server]`, `[[route]]`, ...) or in another one: [`SaleConf::parse`] reads only these four and
//! refuses an unknown field inside them. See `conf/server.toml` for a commented example.
//!
//! - `[sale]`: `campaigns_dir` (one `<id>.toml` per campaign), `sold_out_ttl_ms` (how long a
//!   local sold-out flag lives without a replenish message), `signing_key` (the
//!   gateway↔order-writer HMAC key, a secret reference), `trusted_proxies` (the load balancers
//!   whose `X-Forwarded-For` names the client: addresses or CIDR networks; without it nobody's
//!   is believed and the socket's peer is the client, which the sale logs once at start: a
//!   sale behind a load balancer that forgot it would rate-limit every buyer as one);
//! - `[redis]`: `url` (without a password), `password` (a secret reference, when Redis asks
//!   for one), `timeout_ms` (bound on one reservation), `pool_size`;
//! - `[kafka]` ([`kafka`]): where reserved records are produced;
//! - `[defense]` ([`defense`]): the keys of the edge defenses.

use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::campaign::Campaign;
use protocol::conf::{Checker, ConfError};
use protocol::secret::Password;
use serde::Deserialize;
use toml::Spanned;

pub mod defense;
pub mod kafka;

pub use defense::DefenseConf;

use crate::checks::client_ip::TrustedProxies;
use crate::queue::QueueConf;
use crate::reserve::batch::{BatchConf, BATCH_MAX_LIMIT, BATCH_WAIT_LIMIT_US};

/// The top-level sections the sale reads; a proxy's own file may have others beside them.
pub const SECTIONS: [&str; 4] = ["sale", "redis", "kafka", "defense"];

pub(crate) type S<T> = Spanned<T>;

pub(crate) fn spanned<T>(v: T) -> S<T> {
    Spanned::new(0..0, v)
}

/// The file's sections the sale reads (the others are not looked at).
#[derive(Debug, Deserialize)]
struct Raw {
    sale: RawSale,
    redis: RawRedis,
    kafka: kafka::RawKafka,
    defense: defense::RawDefense,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSale {
    #[serde(default = "d_campaigns_dir")]
    campaigns_dir: S<String>,
    #[serde(default = "d_sold_out_ttl")]
    sold_out_ttl_ms: S<i64>,
    signing_key: S<String>,
    #[serde(default = "d_shed_at_lag")]
    shed_at_lag_ms: S<i64>,
    #[serde(default)]
    trusted_proxies: Vec<S<String>>,
}

fn d_campaigns_dir() -> S<String> {
    spanned("campaigns".into())
}
fn d_sold_out_ttl() -> S<i64> {
    spanned(1000)
}
fn d_shed_at_lag() -> S<i64> {
    spanned(DEFAULT_SHED_AT_LAG_MS)
}

/// `[sale] shed_at_lag_ms` when the file does not say (`crate::checks::pressure`): 0, never shed.
/// Shedding trades the sale's throughput for the shop's latency; the operator decides.
pub const DEFAULT_SHED_AT_LAG_MS: i64 = 0;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRedis {
    url: S<String>,
    #[serde(default)]
    password: Option<S<String>>,
    #[serde(default = "d_redis_timeout")]
    timeout_ms: S<i64>,
    #[serde(default = "d_pool_size")]
    pool_size: S<i64>,
    #[serde(default = "d_batch_max")]
    batch_max: S<i64>,
    #[serde(default = "d_batch_wait_us")]
    batch_wait_us: S<i64>,
    #[serde(default = "d_admission")]
    admission: S<bool>,
}

fn d_redis_timeout() -> S<i64> {
    spanned(100)
}
fn d_pool_size() -> S<i64> {
    spanned(4)
}
fn d_batch_max() -> S<i64> {
    spanned(crate::reserve::batch::DEFAULT_BATCH_MAX as i64)
}
fn d_admission() -> S<bool> {
    spanned(true)
}
fn d_batch_wait_us() -> S<i64> {
    spanned(crate::reserve::batch::DEFAULT_BATCH_WAIT.as_micros() as i64)
}

/// Where Redis is and how long to wait for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisConf {
    /// `redis://host:port[/db]`, or a Redis Cluster's
    /// `redis-cluster://host:port?node=host:port&node=host:port` (`protocol::cluster::URL_FORMS`).
    pub url: String,
    /// Redis' password (`[redis] password`, by reference; never in the URL).
    pub password: Option<Password>,
    /// Bound on one reservation round trip; past it the answer is `SERVICE_DEGRADED`. At most
    /// the timing rule with the order writer's sweeper (`protocol::timing`).
    pub timeout: Duration,
    /// Connections in the pool.
    pub pool_size: usize,
    /// How the reservations of one bucket are collected into one call (`batch_max`,
    /// `batch_wait_us`; `crate::reserve::batch`).
    pub batch: BatchConf,
}

impl RedisConf {
    /// fred's configuration of this Redis: the URL's, with the password.
    pub fn config(&self) -> Result<fred::types::config::Config, fred::prelude::Error> {
        let mut config = fred::types::config::Config::from_url(&self.url)?;
        if let Some(p) = &self.password {
            config.password = Some(p.expose().to_string());
        }
        Ok(config)
    }
}

/// The sale's settings, checked.
#[derive(Clone, PartialEq, Eq)]
pub struct SaleConf {
    /// The file they were read from.
    pub file: PathBuf,
    /// Folder of the campaign files.
    pub campaigns_dir: PathBuf,
    /// How long a local sold-out flag lives without a replenish message.
    pub sold_out_ttl: Duration,
    /// Past this lag of the proxy's threads, the sale's costly endpoints answer `TRY_LATER` so
    /// the rest of the shop keeps its latency (`crate::checks::pressure`); `None` (0 in the file): never.
    pub shed_at_lag: Option<Duration>,
    /// The gateway↔order-writer HMAC key, resolved from its reference.
    pub signing_key: Vec<u8>,
    /// Whose `X-Forwarded-For` names the client (`[sale] trusted_proxies`); empty: nobody's,
    /// the socket's peer is the client (said once in the log at start). A proxy that decides
    /// the client itself gives it to the sale instead (`SaleCtx::set_client`).
    pub trusted_proxies: TrustedProxies,
    /// Redis (restart to change).
    pub redis: RedisConf,
    /// Where reserved records are produced (restart to change).
    pub kafka: QueueConf,
    /// The edge defenses' keys (login JWT, master key, captcha provider).
    pub defense: DefenseConf,
}

impl std::fmt::Debug for SaleConf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaleConf")
            .field("file", &self.file)
            .field("campaigns_dir", &self.campaigns_dir)
            .field("sold_out_ttl", &self.sold_out_ttl)
            .field("shed_at_lag", &self.shed_at_lag)
            .field("signing_key", &"<redacted>")
            .field("trusted_proxies", &self.trusted_proxies)
            .field("redis", &self.redis)
            .field("kafka", &self.kafka)
            .field("defense", &self.defense)
            .finish()
    }
}

/// The sale's settings and every campaign of its campaigns folder, all valid.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The settings.
    pub conf: SaleConf,
    /// The campaigns.
    pub campaigns: Vec<Campaign>,
}

impl SaleConf {
    /// Parses and checks the sale's sections of a file's `text`. `file` names it in errors and
    /// anchors relative paths (the campaigns folder, `file:` secrets, a CA file).
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfError> {
        let raw: Raw = protocol::conf::parse(file, text)?;
        let c = Checker::new(file, text);
        let base = file.parent().unwrap_or(Path::new("."));

        let s = &raw.sale;
        let sold_out_ttl = c.ms(&s.sold_out_ttl_ms, "sale.sold_out_ttl_ms", 10, 60_000)?;
        let signing_key = c.secret(&s.signing_key, "sale.signing_key")?;
        let shed_at_lag =
            Some(c.ms(&s.shed_at_lag_ms, "sale.shed_at_lag_ms", 0, 10_000)?).filter(|d| !d.is_zero());
        if s.campaigns_dir.get_ref().is_empty() {
            return Err(c.err(s.campaigns_dir.span(), "sale.campaigns_dir", "must not be empty"));
        }
        let trusted_proxies = trusted_proxies(&c, &s.trusted_proxies, "sale.trusted_proxies")?;

        let r = &raw.redis;
        protocol::cluster::check_url(r.url.get_ref()).map_err(|m| c.err(r.url.span(), "redis.url", m))?;
        c.url_without_password(&r.url, "redis.url", "password")?;
        fred::types::config::Config::from_url(r.url.get_ref())
            .map_err(|e| c.err(r.url.span(), "redis.url", format!("not a Redis URL: {e}")))?;
        let redis = RedisConf {
            url: r.url.get_ref().clone(),
            password: r.password.as_ref().map(|p| c.password(p, "redis.password")).transpose()?,
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
                admission: *r.admission.get_ref(),
            },
        };

        Ok(SaleConf {
            file: file.to_path_buf(),
            campaigns_dir: base.join(s.campaigns_dir.get_ref()),
            sold_out_ttl,
            shed_at_lag,
            signing_key,
            trusted_proxies,
            redis,
            kafka: kafka::check(&c, &raw.kafka, base)?,
            defense: defense::check(&c, &raw.defense, base)?,
        })
    }

    /// Reads `file` and checks its sale's sections and every campaign file of its campaigns
    /// folder.
    pub fn load(file: &Path) -> Result<Loaded, ConfError> {
        let text = protocol::conf::read(file)?;
        Loaded::with_campaigns(Self::parse(file, &text)?)
    }
}

impl Loaded {
    /// `conf` with every campaign file of its campaigns folder, checked.
    /// A campaign asking a provider's captcha while the server file names no provider is
    /// refused at its `captcha` line: every token request would fail.
    pub fn with_campaigns(conf: SaleConf) -> Result<Self, ConfError> {
        let campaigns = Campaign::load_dir(&conf.campaigns_dir)?;
        let provider_less = |c: &&Campaign| {
            c.defense.captcha == protocol::defense::CaptchaKind::Provider && conf.defense.provider.is_none()
        };
        if let Some(c) = campaigns.iter().find(provider_less) {
            return Err(ConfError::at_field(
                &conf.campaigns_dir.join(format!("{}.toml", c.id)),
                "captcha",
                format!(
                    "campaign {} asks a provider's captcha, and {} names no captcha_provider_alg/_key/\
                     _issuer/_audience in [defense]: every token request would fail",
                    c.id,
                    conf.file.display()
                ),
            ));
        }
        Ok(Loaded { conf, campaigns })
    }
}

/// Checks a list of trusted proxies (`field`): each an IP address or a CIDR network.
pub fn trusted_proxies(c: &Checker, nets: &[S<String>], field: &str) -> Result<TrustedProxies, ConfError> {
    let mut trusted = Vec::with_capacity(nets.len());
    for net in nets {
        let text = net.get_ref().trim();
        let parsed = text
            .parse::<ipnet::IpNet>()
            .or_else(|_| text.parse::<std::net::IpAddr>().map(ipnet::IpNet::from));
        trusted.push(parsed.map_err(|_| {
            let why = format!("{:?} is not an IP address or a CIDR network (10.0.0.0/8)", net.get_ref());
            c.err(net.span(), field, why)
        })?);
    }
    Ok(TrustedProxies::new(trusted))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) const GOOD: &str = r#"
[sale]
signing_key = "env:SALE_CONF_TEST_KEY"

[redis]
url = "redis://127.0.0.1:6390"
timeout_ms = 100

[server]
anything = "a proxy's own section is not the sale's"

[kafka]
brokers = ["127.0.0.1:19092"]

[defense]
master_key = "env:SALE_CONF_TEST_KEY"
login_alg = "HS256"
login_key = "env:SALE_CONF_TEST_KEY"
login_issuer = "shop"
login_audience = "seckill"
"#;

    pub(crate) fn parse(text: &str) -> Result<SaleConf, ConfError> {
        // This test module is the only user of this variable's name.
        std::env::set_var("SALE_CONF_TEST_KEY", "0123456789abcdef0123");
        SaleConf::parse(Path::new("conf/server.toml"), text)
    }

    pub(crate) fn expect_err(text: &str, line: usize, field: &str, words: &str) {
        protocol::conf::assert_refused(parse(text), "conf/server.toml", line, field, words);
    }

    #[test]
    fn a_good_file_parses_with_defaults() {
        let c = parse(GOOD).unwrap();
        assert_eq!(c.campaigns_dir, Path::new("conf/campaigns"));
        assert_eq!(c.sold_out_ttl, Duration::from_secs(1));
        assert_eq!(c.shed_at_lag, None, "off unless the file says");
        let shed = parse(&GOOD.replace("[redis]", "shed_at_lag_ms = 5\n[redis]")).unwrap();
        assert_eq!(shed.shed_at_lag, Some(Duration::from_millis(5)));
        assert_eq!(c.redis.timeout, Duration::from_millis(100));
        assert_eq!(c.redis.pool_size, 4);
        assert_eq!(c.redis.batch, BatchConf::default(), "measured defaults");
        let one =
            parse(&GOOD.replace("timeout_ms = 100", "timeout_ms = 100\nbatch_max = 1\nbatch_wait_us = 0"));
        assert_eq!(one.unwrap().redis.batch, BatchConf { max: 1, wait: Duration::ZERO, admission: true });
        let off = parse(&GOOD.replace("timeout_ms = 100", "timeout_ms = 100\nadmission = false"));
        assert!(!off.unwrap().redis.batch.admission, "admission off, for a measurement");
        assert_eq!(c.signing_key, b"0123456789abcdef0123");
        let k = &c.kafka;
        assert_eq!(
            (k.connection.brokers(), k.topic.as_str()),
            (&["127.0.0.1:19092".to_string()][..], "seckill.reservations")
        );
        assert_eq!((k.partitions, k.batch_max, k.capacity), (4, 500, 100_000));
        assert_eq!((k.linger, k.produce_timeout), (Duration::from_millis(5), Duration::from_millis(1000)));
        assert!(!format!("{c:?}").contains("0123456789abcdef"), "the key is not printed");
    }

    #[test]
    fn trusted_proxies_are_nobody_unless_listed() {
        assert_eq!(parse(GOOD).unwrap().trusted_proxies, TrustedProxies::default(), "nobody's by default");
        let listed = GOOD.replace("[redis]", "trusted_proxies = [\"10.0.0.0/8\", \"192.0.2.7\"]\n[redis]");
        let lb = parse(&listed).unwrap().trusted_proxies;
        assert!(lb.contains(&"10.2.3.4".parse().unwrap()) && lb.contains(&"192.0.2.7".parse().unwrap()));
        assert!(!lb.contains(&"192.0.2.8".parse().unwrap()));
        let bad = GOOD.replace("[redis]", "trusted_proxies = [\"10.0.0.0/33\"]\n[redis]");
        expect_err(&bad, 5, "sale.trusted_proxies", "not an IP address or a CIDR network");
    }

    #[test]
    fn bad_values_are_refused_with_line_and_field() {
        expect_err(
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100\ntimeuot = 1"),
            8,
            "timeuot",
            "unknown field",
        );
        expect_err(
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100000"),
            7,
            "redis.timeout_ms",
            "between",
        );
        expect_err(&GOOD.replace("redis://", "http://"), 6, "redis.url", "redis://");
        expect_err(
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100\nbatch_max = 0"),
            8,
            "redis.batch_max",
            "between 1",
        );
        expect_err(
            &GOOD.replace("timeout_ms = 100", "timeout_ms = 100\nbatch_wait_us = 20000"),
            8,
            "redis.batch_wait_us",
            "between 0 and 10000",
        );
        expect_err(&GOOD.replace("redis://", "redis-sentinel://"), 6, "redis.url", "redis-cluster://");
        expect_err(
            &GOOD.replace("[redis]", "sold_out_ttl_ms = 5\n[redis]"),
            5,
            "sale.sold_out_ttl_ms",
            "between 10 and 60000",
        );
        expect_err(
            &GOOD.replace("[redis]", "shed_at_lag_ms = -1\n[redis]"),
            5,
            "sale.shed_at_lag_ms",
            "between 0 and 10000",
        );
        expect_err(
            &GOOD.replace("[redis]", "campaigns_dir = \"\"\n[redis]"),
            5,
            "sale.campaigns_dir",
            "empty",
        );
        expect_err(&GOOD.replace("[redis]", "listen = \"x\"\n[redis]"), 5, "listen", "unknown field");
        let url = "redis-cluster://127.0.0.1:7390?node=127.0.0.1:7391&node=127.0.0.1:7392";
        assert_eq!(parse(&GOOD.replace("redis://127.0.0.1:6390", url)).unwrap().redis.url, url);
    }

    #[test]
    fn the_login_keys_are_one_key_or_a_jwk_set_never_both_nor_neither() {
        // This test is the only user of this variable's name.
        let set = r#"{"keys":[{"kty":"oct","kid":"2026-12","k":"bmV3LWxvZ2luLXNlY3JldC00NTY3"}]}"#;
        std::env::set_var("SALE_CONF_TEST_JWKS", set);
        let keys = r#"login_keys = "env:SALE_CONF_TEST_JWKS""#;
        let by_set = GOOD.replace(r#"login_key = "env:SALE_CONF_TEST_KEY""#, keys);
        assert!(parse(&by_set).is_ok(), "a JWK set alone");
        let both = GOOD.replace(
            r#"login_key = "env:SALE_CONF_TEST_KEY""#,
            &format!("{keys}\nlogin_key = \"env:SALE_CONF_TEST_KEY\""),
        );
        expect_err(&both, 18, "defense.login_keys", "not both");
        let neither = GOOD.replace("login_key = \"env:SALE_CONF_TEST_KEY\"\n", "");
        expect_err(&neither, 17, "defense.login_key", "login_key (one key) or login_keys");
        std::env::set_var(
            "SALE_CONF_TEST_JWKS",
            r#"{"keys":[{"kty":"RSA","kid":"r","n":"AQAB","e":"AQAB"}]}"#,
        );
        expect_err(&by_set, 18, "defense.login_keys", "is not a HS256 key");
    }

    #[test]
    fn secrets_must_be_references() {
        expect_err(
            &GOOD.replacen("env:SALE_CONF_TEST_KEY", "hunter2hunter2hunter2", 1),
            3,
            "sale.signing_key",
            "env:NAME or file:PATH",
        );
        expect_err(
            &GOOD.replacen("env:SALE_CONF_TEST_KEY", "env:SALE_CONF_SURELY_UNSET", 1),
            3,
            "sale.signing_key",
            "SALE_CONF_SURELY_UNSET",
        );
    }

    #[test]
    fn a_redis_url_with_a_password_is_refused() {
        for url in [
            "redis://:hunter2@127.0.0.1:6390",
            "redis://seckill:hunter2@127.0.0.1:6390/0",
            "redis-cluster://:hunter2@127.0.0.1:7390?node=127.0.0.1:7391",
        ] {
            let text = GOOD.replace("redis://127.0.0.1:6390", url);
            expect_err(&text, 6, "redis.url", "password = \"env:NAME\" or \"file:PATH\"");
            assert!(!parse(&text).unwrap_err().to_string().contains("hunter2"), "{url}: not echoed");
        }
    }

    #[test]
    fn a_redis_password_is_given_by_reference() {
        let with =
            |password: &str| GOOD.replace("timeout_ms = 100", &format!("timeout_ms = 100\n{password}"));
        let c = parse(&with("password = \"env:SALE_CONF_TEST_KEY\"")).unwrap();
        let password = c.redis.password.as_ref().expect("the password, resolved");
        assert_eq!(password.expose(), "0123456789abcdef0123");
        assert_eq!(c.redis.config().unwrap().password.as_deref(), Some("0123456789abcdef0123"));
        assert!(!format!("{c:?}").contains("0123456789abcdef"), "the password is not printed");
        let user = parse(&GOOD.replace("redis://", "redis://seckill@")).unwrap();
        assert_eq!((user.redis.config().unwrap().password, user.redis.password), (None, None));
        expect_err(&with("password = \"hunter2\""), 8, "redis.password", "env:NAME or file:PATH");
        expect_err(&with("password = \"env:SALE_CONF_SURELY_UNSET\""), 8, "redis.password", "unset");
    }

    #[test]
    fn rediss_is_refused_as_the_client_has_no_tls() {
        for url in ["rediss://127.0.0.1:6390", "rediss-cluster://127.0.0.1:7390?node=127.0.0.1:7391"] {
            expect_err(&GOOD.replace("redis://127.0.0.1:6390", url), 6, "redis.url", "no TLS");
        }
    }

    #[test]
    fn every_section_is_required() {
        for section in SECTIONS {
            let without: String = GOOD
                .split("\n\n")
                .filter(|block| !block.trim_start().starts_with(&format!("[{section}]")))
                .collect::<Vec<_>>()
                .join("\n\n");
            let err = parse(&without).unwrap_err();
            assert!(err.message.contains(section), "{section}: {err}");
        }
    }
}
