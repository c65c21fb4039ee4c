//! The order writer's configuration file (`conf/order-writer.toml`), typed and validated at load.
//!
//! Every error names the file, the line and the field (through [`protocol::conf`]). Secrets are
//! references (`env:NAME` or `file:PATH`), resolved at load so that a missing key stops the
//! process at start, not at the first request.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::conf::{self, ConfError};
use serde::Deserialize;
use toml::Spanned;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    listen: Spanned<String>,
    redis_url: Spanned<String>,
    postgres_url: Spanned<String>,
    #[serde(default = "default_campaigns_dir")]
    campaigns_dir: String,
    #[serde(default = "default_lua_dir")]
    lua_dir: String,
    #[serde(default = "default_migrations_dir")]
    migrations_dir: String,
    gateway_key: Spanned<String>,
    payment_key: Spanned<String>,
    #[serde(default = "d_payment_skew")]
    payment_max_skew_secs: Spanned<u64>,
    #[serde(default = "d_result_pool")]
    result_pool_size: Spanned<u32>,
    kafka: RawKafka,
    #[serde(default)]
    writer: RawWriter,
    #[serde(default)]
    sweeper: RawSweeper,
    #[serde(default)]
    closer: RawCloser,
    #[serde(default)]
    admin: Option<RawAdmin>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: Spanned<String>,
}

fn d_payment_skew() -> Spanned<u64> {
    Spanned::new(0..0, 300)
}
fn d_result_pool() -> Spanned<u32> {
    Spanned::new(0..0, 4)
}
fn default_campaigns_dir() -> String {
    "campaigns".into()
}
fn default_lua_dir() -> String {
    "../lua".into()
}
fn default_migrations_dir() -> String {
    "../sql".into()
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKafka {
    brokers: Spanned<Vec<Spanned<String>>>,
    topic: Spanned<String>,
    partitions: Spanned<i64>,
    #[serde(default = "d_replication")]
    replication_factor: Spanned<i64>,
    tls: Option<Spanned<protocol::kafka::RawTls>>,
    sasl: Option<Spanned<protocol::kafka::RawSasl>>,
    #[serde(default)]
    assigned: Option<Spanned<Vec<i32>>>,
    #[serde(default = "d_produce_timeout")]
    produce_timeout_ms: Spanned<u64>,
    #[serde(default = "d_produce_batch")]
    produce_batch: Spanned<usize>,
}
fn d_replication() -> Spanned<i64> {
    Spanned::new(0..0, -1)
}
fn d_produce_timeout() -> Spanned<u64> {
    Spanned::new(0..0, 3000)
}
fn d_produce_batch() -> Spanned<usize> {
    Spanned::new(0..0, 500)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWriter {
    #[serde(default = "d_batch")]
    batch_size: Spanned<usize>,
    #[serde(default = "d_wait")]
    max_wait_ms: Spanned<i32>,
    #[serde(default = "d_fetch_bytes")]
    fetch_max_bytes: Spanned<i32>,
    #[serde(default = "d_idle_wait")]
    idle_wait_ms: Spanned<i32>,
    #[serde(default = "d_batch_retries")]
    batch_retries: Spanned<u32>,
}
fn d_batch() -> Spanned<usize> {
    Spanned::new(0..0, 1000)
}
fn d_wait() -> Spanned<i32> {
    Spanned::new(0..0, 20)
}
fn d_fetch_bytes() -> Spanned<i32> {
    Spanned::new(0..0, 4 << 20)
}
fn d_idle_wait() -> Spanned<i32> {
    Spanned::new(0..0, 100)
}
fn d_batch_retries() -> Spanned<u32> {
    Spanned::new(0..0, 3)
}
impl Default for RawWriter {
    fn default() -> Self {
        Self {
            batch_size: d_batch(),
            max_wait_ms: d_wait(),
            fetch_max_bytes: d_fetch_bytes(),
            idle_wait_ms: d_idle_wait(),
            batch_retries: d_batch_retries(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSweeper {
    #[serde(default = "d_age")]
    age_secs: Spanned<u64>,
    #[serde(default = "d_sweep_interval")]
    interval_ms: Spanned<u64>,
}
fn d_age() -> Spanned<u64> {
    Spanned::new(0..0, 10)
}
fn d_sweep_interval() -> Spanned<u64> {
    Spanned::new(0..0, 2000)
}
impl Default for RawSweeper {
    fn default() -> Self {
        Self { age_secs: d_age(), interval_ms: d_sweep_interval() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCloser {
    #[serde(default = "d_close_interval")]
    interval_ms: Spanned<u64>,
    #[serde(default = "d_close_batch")]
    batch_size: Spanned<i64>,
}
fn d_close_interval() -> Spanned<u64> {
    Spanned::new(0..0, 1000)
}
fn d_close_batch() -> Spanned<i64> {
    Spanned::new(0..0, 500)
}
impl Default for RawCloser {
    fn default() -> Self {
        Self { interval_ms: d_close_interval(), batch_size: d_close_batch() }
    }
}

/// Kafka settings.
#[derive(Debug, Clone)]
pub struct KafkaConfig {
    /// Brokers, TLS and SASL (checked as the gateway checks its own).
    pub connection: protocol::kafka::KafkaConnection,
    /// Replicas of each partition when `topic create` makes the topic; -1: the cluster's
    /// `default.replication.factor`.
    pub replication_factor: i16,
    /// Topic of reservation records.
    pub topic: String,
    /// Partition count of the topic (the producer hashes users over it).
    pub partitions: i32,
    /// Partitions this instance consumes (all by default; `--partitions` overrides).
    pub assigned: Vec<i32>,
    /// Deadline of one produce, retries included.
    pub produce_timeout: Duration,
    /// Most records the sweeper (or `order-writer produce`) puts in one produce request.
    pub produce_batch: usize,
}

/// Writer (consumer) settings.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    /// Most records in one PostgreSQL transaction.
    pub batch_size: usize,
    /// Fetch max wait after a fetch that found records (Kafka answers as soon as one arrives).
    pub max_wait_ms: i32,
    /// Most bytes in one fetch.
    pub fetch_max_bytes: i32,
    /// Fetch max wait after a fetch that found nothing: an idle partition is polled this often
    /// (Kafka answers as soon as a record arrives, so a longer wait adds no latency).
    pub idle_wait_ms: i32,
    /// Tries PostgreSQL may refuse a batch before it is written one record per transaction, and
    /// a record alone before it is dead-lettered (an unreachable database is waited for, never
    /// counted).
    pub batch_retries: u32,
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// HTTP listen address (result query, payment callback, health check).
    pub listen: SocketAddr,
    /// Redis URL: one Redis or a Redis Cluster (`protocol::cluster::URL_FORMS`).
    pub redis_url: String,
    /// PostgreSQL URL.
    pub postgres_url: String,
    /// Folder of the campaign files.
    pub campaigns_dir: PathBuf,
    /// Folder of the Lua scripts.
    pub lua_dir: PathBuf,
    /// Folder of the SQL migrations.
    pub migrations_dir: PathBuf,
    /// The gateway's HMAC key: every record on the topic carries its signature (checked by the
    /// writer, made by the gateway, the sweeper and `order-writer produce`).
    pub gateway_key: Vec<u8>,
    /// Payment provider callback HMAC key.
    pub payment_key: Vec<u8>,
    /// How far (seconds, either way) a payment callback's signed timestamp may be from now.
    pub payment_max_skew_secs: u64,
    /// Connections of the result query's own PostgreSQL pool (apart from the writer's).
    pub result_pool_size: u32,
    /// Kafka settings.
    pub kafka: KafkaConfig,
    /// Writer settings.
    pub writer: WriterConfig,
    /// Age after which an outbox entry without an order is produced again.
    pub sweep_age: Duration,
    /// Sweeper period.
    pub sweep_interval: Duration,
    /// Close worker period.
    pub close_interval: Duration,
    /// Orders closed per close transaction.
    pub close_batch: i64,
    /// The admin listener (`/metrics`, `/healthz`, `/readyz`); off when `None`.
    pub admin_listen: Option<SocketAddr>,
}

impl Config {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<Self, ConfError> {
        let text =
            std::fs::read_to_string(file).map_err(|e| ConfError::whole(file, format!("cannot read: {e}")))?;
        Self::parse(file, &text)
    }

    /// Parses and validates the text of `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfError> {
        let raw: Raw = conf::parse(file, text)?;
        let base = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let err = |span: std::ops::Range<usize>, field: &str, msg: String| {
            ConfError::at(file, text, span, Some(field), msg)
        };
        let listen: SocketAddr = raw
            .listen
            .get_ref()
            .parse()
            .map_err(|e| err(raw.listen.span(), "listen", format!("not an address host:port: {e}")))?;
        if !protocol::cluster::accepted_url(raw.redis_url.get_ref()) {
            return Err(err(
                raw.redis_url.span(),
                "redis_url",
                format!("must be {}", protocol::cluster::URL_FORMS),
            ));
        }
        let pg = raw.postgres_url.get_ref();
        if !(pg.starts_with("postgres://") || pg.starts_with("postgresql://")) {
            return Err(err(raw.postgres_url.span(), "postgres_url", "must start with postgres://".into()));
        }
        let secret = |v: &Spanned<String>, field: &str| {
            protocol::secret::resolve(v.get_ref(), &base).map_err(|e| err(v.span(), field, e.to_string()))
        };
        let gateway_key = secret(&raw.gateway_key, "gateway_key")?;
        let payment_key = secret(&raw.payment_key, "payment_key")?;
        if !(1..=3600).contains(raw.payment_max_skew_secs.get_ref()) {
            return Err(err(
                raw.payment_max_skew_secs.span(),
                "payment_max_skew_secs",
                "must be 1 to 3600".into(),
            ));
        }
        if !(1..=64).contains(raw.result_pool_size.get_ref()) {
            return Err(err(raw.result_pool_size.span(), "result_pool_size", "must be 1 to 64".into()));
        }

        let k = &raw.kafka;
        let err_at = |span, field: &str, msg: String| err(span, field, msg);
        let connection = protocol::kafka::check_connection(
            protocol::kafka::RawConnection {
                brokers: &k.brokers,
                tls: k.tls.as_ref(),
                sasl: k.sasl.as_ref(),
            },
            &err_at,
            &base,
        )?;
        let protocol::kafka::Topic { name: topic, partitions } =
            protocol::kafka::check_topic(&k.topic, &k.partitions, &err_at)?;
        let replication_factor = *k.replication_factor.get_ref();
        if !(replication_factor == -1 || (1..=16).contains(&replication_factor)) {
            return Err(err(
                k.replication_factor.span(),
                "kafka.replication_factor",
                "must be 1 to 16, or -1 for the cluster's default.replication.factor".into(),
            ));
        }
        let assigned = match &k.assigned {
            None => (0..partitions).collect(),
            Some(a) => {
                let list = a.get_ref().clone();
                if list.is_empty() || list.iter().any(|p| !(0..partitions).contains(p)) {
                    return Err(err(
                        a.span(),
                        "kafka.assigned",
                        format!("must list partitions between 0 and {}", partitions - 1),
                    ));
                }
                list
            }
        };
        if *k.produce_timeout_ms.get_ref() == 0 {
            return Err(err(
                k.produce_timeout_ms.span(),
                "kafka.produce_timeout_ms",
                "must be 1 or more".into(),
            ));
        }
        if !(1..=10_000).contains(k.produce_batch.get_ref()) {
            return Err(err(k.produce_batch.span(), "kafka.produce_batch", "must be 1 to 10000".into()));
        }
        let w = &raw.writer;
        if !(1..=20_000).contains(w.batch_size.get_ref()) {
            return Err(err(w.batch_size.span(), "writer.batch_size", "must be 1 to 20000".into()));
        }
        if !(0..=500).contains(w.max_wait_ms.get_ref()) {
            return Err(err(
                w.max_wait_ms.span(),
                "writer.max_wait_ms",
                "must be 0 to 500 (keep it ≤ 50)".into(),
            ));
        }
        if !(*w.max_wait_ms.get_ref()..=5_000).contains(w.idle_wait_ms.get_ref()) {
            return Err(err(
                w.idle_wait_ms.span(),
                "writer.idle_wait_ms",
                "must be writer.max_wait_ms to 5000".into(),
            ));
        }
        if *w.fetch_max_bytes.get_ref() < 1024 {
            return Err(err(
                w.fetch_max_bytes.span(),
                "writer.fetch_max_bytes",
                "must be 1024 or more".into(),
            ));
        }
        if !(1..=100).contains(w.batch_retries.get_ref()) {
            return Err(err(w.batch_retries.span(), "writer.batch_retries", "must be 1 to 100".into()));
        }
        let s = &raw.sweeper;
        protocol::timing::check_sweep_age(Duration::from_secs(*s.age_secs.get_ref()))
            .map_err(|e| err(s.age_secs.span(), "sweeper.age_secs", e))?;
        if *s.interval_ms.get_ref() < 10 {
            return Err(err(s.interval_ms.span(), "sweeper.interval_ms", "must be 10 or more".into()));
        }
        protocol::timing::check_sweep_interval(
            Duration::from_secs(*s.age_secs.get_ref()),
            Duration::from_millis(*s.interval_ms.get_ref()),
        )
        .map_err(|e| err(s.interval_ms.span(), "sweeper.interval_ms", e))?;
        let c = &raw.closer;
        if *c.interval_ms.get_ref() < 10 {
            return Err(err(c.interval_ms.span(), "closer.interval_ms", "must be 10 or more".into()));
        }
        if !(1..=10_000).contains(c.batch_size.get_ref()) {
            return Err(err(c.batch_size.span(), "closer.batch_size", "must be 1 to 10000".into()));
        }
        let admin_listen =
            match &raw.admin {
                None => None,
                Some(a) => Some(a.listen.get_ref().parse().map_err(|e| {
                    err(a.listen.span(), "admin.listen", format!("not an address IP:port: {e}"))
                })?),
            };
        Ok(Config {
            admin_listen,
            listen,
            redis_url: raw.redis_url.into_inner(),
            postgres_url: raw.postgres_url.into_inner(),
            campaigns_dir: base.join(raw.campaigns_dir),
            lua_dir: base.join(raw.lua_dir),
            migrations_dir: base.join(raw.migrations_dir),
            gateway_key,
            payment_key,
            payment_max_skew_secs: *raw.payment_max_skew_secs.get_ref(),
            result_pool_size: *raw.result_pool_size.get_ref(),
            kafka: KafkaConfig {
                connection,
                replication_factor: replication_factor as i16,
                topic,
                partitions,
                assigned,
                produce_timeout: Duration::from_millis(*k.produce_timeout_ms.get_ref()),
                produce_batch: *k.produce_batch.get_ref(),
            },
            writer: WriterConfig {
                batch_size: *w.batch_size.get_ref(),
                max_wait_ms: *w.max_wait_ms.get_ref(),
                fetch_max_bytes: *w.fetch_max_bytes.get_ref(),
                idle_wait_ms: *w.idle_wait_ms.get_ref(),
                batch_retries: *w.batch_retries.get_ref(),
            },
            sweep_age: Duration::from_secs(*s.age_secs.get_ref()),
            sweep_interval: Duration::from_millis(*s.interval_ms.get_ref()),
            close_interval: Duration::from_millis(*c.interval_ms.get_ref()),
            close_batch: *c.batch_size.get_ref(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> String {
        std::env::set_var("OW_TEST_KEY", "0123456789abcdef0123");
        r#"listen = "127.0.0.1:8081"
redis_url = "redis://127.0.0.1:6390"
postgres_url = "postgres://postgres@127.0.0.1:5440/seckill"
gateway_key = "env:OW_TEST_KEY"
payment_key = "env:OW_TEST_KEY"

[kafka]
brokers = ["127.0.0.1:19092"]
topic = "seckill.reservations"
partitions = 4
"#
        .to_string()
    }

    fn parse(text: &str) -> Result<Config, ConfError> {
        Config::parse(Path::new("conf/order-writer.toml"), text)
    }

    #[test]
    fn good_file_parses_with_defaults() {
        let c = parse(&good()).unwrap();
        assert_eq!(c.kafka.assigned, vec![0, 1, 2, 3]);
        assert_eq!(c.writer.batch_size, 1000);
        assert_eq!((c.writer.max_wait_ms, c.writer.idle_wait_ms), (20, 100));
        assert_eq!(c.writer.batch_retries, 3);
        assert_eq!(c.campaigns_dir, Path::new("conf/campaigns"));
        assert_eq!(c.gateway_key, b"0123456789abcdef0123");
        assert_eq!((c.payment_max_skew_secs, c.result_pool_size), (300, 4));
    }

    fn expect(text: &str, line: usize, field: &str, words: &str) {
        let e = parse(text).unwrap_err();
        assert_eq!(e.line, line, "{e}");
        assert_eq!(e.field.as_deref(), Some(field), "{e}");
        assert!(e.to_string().contains(words), "{e}");
        assert!(e.to_string().starts_with("conf/order-writer.toml:"), "{e}");
    }

    #[test]
    fn bad_values_name_file_line_and_field() {
        expect(&good().replace("127.0.0.1:8081", "nowhere"), 1, "listen", "address");
        expect(
            &good().replace("partitions = 4", "partitions = 0"),
            10,
            "kafka.partitions",
            "between 1 and 1024",
        );
        expect(
            &good().replace("env:OW_TEST_KEY\"\npay", "hunter2hunter2hunter2\"\npay"),
            4,
            "gateway_key",
            "env:NAME",
        );
        expect(
            &good().replace("partitions = 4", "partitions = 4\nassigned = [7]"),
            11,
            "kafka.assigned",
            "between 0 and 3",
        );
        expect(&good().replace("topic = ", "topik = "), 9, "topik", "unknown field");
        expect(&format!("{}\n[writer]\nbatch_size = 0\n", good()), 13, "writer.batch_size", "1 to 20000");
        expect(
            &format!("{}\n[writer]\nmax_wait_ms = 50\nidle_wait_ms = 10\n", good()),
            14,
            "writer.idle_wait_ms",
            "writer.max_wait_ms to 5000",
        );
        expect(&format!("{}\n[writer]\nbatch_retries = 0\n", good()), 13, "writer.batch_retries", "1 to 100");
        expect(
            &format!("{}\n[writer]\nbatch_size = 10\nbatch_retries = 101\n", good()),
            14,
            "writer.batch_retries",
            "1 to 100",
        );
        let c = parse(&format!("{}\n[writer]\nbatch_retries = 100\n", good())).unwrap();
        assert_eq!(c.writer.batch_retries, 100);
        // The timing rule with the gateway (protocol::timing), checked on this side.
        expect(&format!("{}\n[sweeper]\nage_secs = 5\n", good()), 13, "sweeper.age_secs", "6 s or more");
        assert!(parse(&format!("{}\n[sweeper]\nage_secs = 6\n", good())).is_ok());
        let late = format!("{}\n[sweeper]\nage_secs = 6\ninterval_ms = 3500\n", good());
        expect(&late, 14, "sweeper.interval_ms", "3000 ms here");
        let with = |extra: &str| good().replace("\n\n[kafka]", &format!("\n{extra}\n\n[kafka]"));
        expect(&with("payment_max_skew_secs = 0"), 6, "payment_max_skew_secs", "1 to 3600");
        expect(&with("payment_max_skew_secs = 86400"), 6, "payment_max_skew_secs", "1 to 3600");
        expect(&with("result_pool_size = 0"), 6, "result_pool_size", "1 to 64");
        expect(&with("result_pool_size = 65"), 6, "result_pool_size", "1 to 64");
        let c = parse(&with("payment_max_skew_secs = 60\nresult_pool_size = 2")).unwrap();
        assert_eq!((c.payment_max_skew_secs, c.result_pool_size), (60, 2));
        assert_eq!(parse(&good()).unwrap().admin_listen, None, "no admin listener unless asked");
        let admin = parse(&format!("{}\n[admin]\nlisten = \"127.0.0.1:9181\"\n", good())).unwrap();
        assert_eq!(admin.admin_listen, Some("127.0.0.1:9181".parse().unwrap()));
        expect(&format!("{}\n[admin]\nlisten = \"localhost\"\n", good()), 13, "admin.listen", "IP:port");
        expect(&format!("{}\n[admin]\nport = 1\n", good()), 13, "port", "unknown field");
    }
}
