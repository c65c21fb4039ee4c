//! The order writer's configuration file (`conf/order-writer.toml`), typed and validated at load.
//!
//! Every value is checked by a [`protocol::conf::Checker`], as the gateway's and the campaign
//! files' are: an error names the file, the line, the column and the field. Secrets are
//! references (`env:NAME` or `file:PATH`), resolved at load so that a missing key stops the
//! process at start, not at the first request: a Redis or PostgreSQL URL with a password in it
//! is refused, the password goes in `redis_password` / `postgres_password`.
//!
//! `order-writer migrate` reads only the PostgreSQL part ([`PostgresConf::load`]): a conf whose
//! Redis, Kafka or keys are not there yet (or not in this environment) still migrates.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::conf::{self, Checker, ConfError, Millis};
use protocol::secret::Password;
use serde::Deserialize;
use toml::Spanned;

use crate::db::schema::Schema;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    listen: Spanned<String>,
    redis_url: Spanned<String>,
    #[serde(default)]
    redis_password: Option<Spanned<String>>,
    postgres_url: Spanned<String>,
    #[serde(default)]
    postgres_password: Option<Spanned<String>>,
    #[serde(default = "default_campaigns_dir")]
    campaigns_dir: String,
    #[serde(default)]
    lua_dir: Option<String>,
    #[serde(default)]
    migrations_dir: Option<String>,
    #[serde(default)]
    postgres: Option<RawPostgres>,
    gateway_key: Spanned<String>,
    payment_key: Spanned<String>,
    #[serde(default = "d_payment_skew")]
    payment_max_skew_secs: Spanned<i64>,
    #[serde(default = "d_result_pool")]
    result_pool_size: Spanned<i64>,
    kafka: RawKafka,
    #[serde(default)]
    writer: RawWriter,
    #[serde(default)]
    sweeper: RawSweeper,
    #[serde(default)]
    closer: RawCloser,
    #[serde(default)]
    leases: RawLeases,
    #[serde(default)]
    admin: Option<RawAdmin>,
    #[serde(default)]
    events: RawEvents,
    /// `[audit]`: read by `campaign::audit::source::conf_thresholds`, not here.
    #[serde(default)]
    #[allow(dead_code)]
    audit: Option<toml::Value>,
    #[serde(default)]
    fleet: Option<RawFleet>,
}

/// `[fleet]`: the gateways the campaign commands reach (`order-writer campaign ...`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFleet {
    gateways: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    token: Option<Spanned<String>>,
    #[serde(default = "d_converge")]
    converge_ms: Spanned<i64>,
}

fn d_converge() -> Spanned<i64> {
    Spanned::new(0..0, 2000)
}

/// `[events]`: the order events' topic (`crate::workers::events`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEvents {
    #[serde(default)]
    topic: Option<Spanned<String>>,
    #[serde(default)]
    partitions: Option<Spanned<i64>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    listen: Spanned<String>,
    #[serde(default)]
    token: Option<Spanned<String>>,
}

fn d_payment_skew() -> Spanned<i64> {
    Spanned::new(0..0, 300)
}
fn d_result_pool() -> Spanned<i64> {
    Spanned::new(0..0, 4)
}
fn default_campaigns_dir() -> String {
    "campaigns".into()
}

/// `[postgres]`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPostgres {
    #[serde(default)]
    schema: Option<Spanned<String>>,
}

/// What `migrate` reads of the file: the PostgreSQL keys, every other key ignored (not checked,
/// its secrets not read).
#[derive(Debug, Deserialize)]
struct RawPostgresOnly {
    postgres_url: Spanned<String>,
    #[serde(default)]
    postgres_password: Option<Spanned<String>>,
    #[serde(default)]
    migrations_dir: Option<String>,
    #[serde(default)]
    postgres: Option<RawPostgres>,
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
    produce_timeout_ms: Spanned<i64>,
    #[serde(default = "d_produce_batch")]
    produce_batch: Spanned<i64>,
}
fn d_replication() -> Spanned<i64> {
    Spanned::new(0..0, -1)
}
fn d_produce_timeout() -> Spanned<i64> {
    Spanned::new(0..0, 3000)
}
fn d_produce_batch() -> Spanned<i64> {
    Spanned::new(0..0, 500)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWriter {
    #[serde(default = "d_batch")]
    batch_size: Spanned<i64>,
    #[serde(default = "d_wait")]
    max_wait_ms: Spanned<i64>,
    #[serde(default = "d_fetch_bytes")]
    fetch_max_bytes: Spanned<i64>,
    #[serde(default = "d_idle_wait")]
    idle_wait_ms: Spanned<i64>,
    #[serde(default = "d_batch_retries")]
    batch_retries: Spanned<i64>,
}
fn d_batch() -> Spanned<i64> {
    Spanned::new(0..0, 1000)
}
fn d_wait() -> Spanned<i64> {
    Spanned::new(0..0, 20)
}
fn d_fetch_bytes() -> Spanned<i64> {
    Spanned::new(0..0, 4 << 20)
}
fn d_idle_wait() -> Spanned<i64> {
    Spanned::new(0..0, 100)
}
fn d_batch_retries() -> Spanned<i64> {
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
    age_secs: Spanned<i64>,
    #[serde(default = "d_sweep_interval")]
    interval_ms: Spanned<i64>,
}
fn d_age() -> Spanned<i64> {
    Spanned::new(0..0, 10)
}
fn d_sweep_interval() -> Spanned<i64> {
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
    interval_ms: Spanned<i64>,
    #[serde(default = "d_close_batch")]
    batch_size: Spanned<i64>,
}
fn d_close_interval() -> Spanned<i64> {
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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLeases {
    #[serde(default = "d_lease")]
    lease_ms: Spanned<i64>,
    #[serde(default)]
    renew_ms: Option<Spanned<i64>>,
}
fn d_lease() -> Spanned<i64> {
    Spanned::new(0..0, 10_000)
}
impl Default for RawLeases {
    fn default() -> Self {
        Self { lease_ms: d_lease(), renew_ms: None }
    }
}

/// Which partitions a writer consumes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// These, always (`kafka.assigned` or `serve --partitions`): the operator splits the
    /// partitions between the writers.
    Fixed(Vec<i32>),
    /// Those it holds a lease on in PostgreSQL (the default): writers share the partitions
    /// without a plan, see [`crate::writer::leases`].
    Leased,
}

impl Plan {
    /// The partitions of a fixed plan; empty when leased (they change while it runs).
    pub fn fixed(&self) -> &[i32] {
        match self {
            Plan::Fixed(p) => p,
            Plan::Leased => &[],
        }
    }
}

/// Partition leases (`[leases]`), for writers without a fixed plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseConf {
    /// How long a lease lasts unless renewed: a dead writer's partitions are taken over within
    /// `lease + renew` (plus the new owner's start).
    pub lease: Duration,
    /// How often a writer renews its leases and heartbeat and rebalances its share; at most half
    /// the lease, so one late renewal does not lose it.
    pub renew: Duration,
}

/// Kafka settings.
#[derive(Debug, Clone)]
pub struct KafkaConf {
    /// Brokers, TLS and SASL (checked as the gateway checks its own).
    pub connection: protocol::kafka::KafkaConnection,
    /// Replicas of each partition when `topic create` makes the topic; -1: the cluster's
    /// `default.replication.factor`.
    pub replication_factor: i16,
    /// Topic of reservation records.
    pub topic: String,
    /// Partition count of the topic (the producer hashes users over it).
    pub partitions: i32,
    /// The partitions this instance consumes: leased by default, a fixed list with
    /// `kafka.assigned` (`--partitions` overrides either).
    pub plan: Plan,
    /// Deadline of one produce, retries included.
    pub produce_timeout: Duration,
    /// Most records the sweeper (or `order-writer produce`) puts in one produce request.
    pub produce_batch: usize,
}

/// Writer (consumer) settings.
#[derive(Debug, Clone)]
pub struct WriterConf {
    /// Most records in one PostgreSQL transaction.
    pub batch_size: usize,
    /// Fetch max wait after a fetch that found records (Kafka answers as soon as one arrives).
    pub max_wait: Millis,
    /// Most bytes in one fetch.
    pub fetch_max_bytes: i32,
    /// Fetch max wait after a fetch that found nothing: an idle partition is polled this often
    /// (Kafka answers as soon as a record arrives, so a longer wait adds no latency).
    pub idle_wait: Millis,
    /// Tries PostgreSQL may refuse a batch before it is written one record per transaction, and
    /// a record alone before it is dead-lettered (an unreachable database is waited for, never
    /// counted).
    pub batch_retries: u32,
}

/// PostgreSQL: where the orders are written.
#[derive(Debug, Clone)]
pub struct PostgresConf {
    /// The URL (`postgres_url`).
    pub url: String,
    /// The password (`postgres_password`, by reference; never in the URL).
    pub password: Option<Password>,
    /// The schema every table is in (`[postgres] schema`); `None`: the server's `search_path`,
    /// normally `public` (as before the setting existed).
    pub schema: Option<Schema>,
    /// A folder to read the migrations from instead of the ones compiled in (development).
    pub migrations_dir: Option<PathBuf>,
}

impl PostgresConf {
    /// Reads and validates the PostgreSQL part of `file` alone (`order-writer migrate`).
    pub fn load(file: &Path) -> Result<Self, ConfError> {
        let text = conf::read(file)?;
        Self::parse(file, &text)
    }

    /// Parses the PostgreSQL part of the text of `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfError> {
        let raw: RawPostgresOnly = conf::parse(file, text)?;
        let c = Checker::new(file, text);
        postgres(
            &c,
            &raw.postgres_url,
            raw.postgres_password.as_ref(),
            raw.postgres.as_ref(),
            raw.migrations_dir,
        )
    }
}

/// Checks the PostgreSQL URL (no password in it), reads its password by reference and checks
/// the schema's name.
fn postgres(
    c: &Checker<'_>,
    url: &Spanned<String>,
    password: Option<&Spanned<String>>,
    table: Option<&RawPostgres>,
    migrations_dir: Option<String>,
) -> Result<PostgresConf, ConfError> {
    let pg = url.get_ref();
    if !(pg.starts_with("postgres://") || pg.starts_with("postgresql://")) {
        return Err(c.err(url.span(), "postgres_url", "must start with postgres://"));
    }
    c.url_without_password(url, "postgres_url", "postgres_password")?;
    let schema = match table.and_then(|t| t.schema.as_ref()) {
        Some(s) => Some(Schema::new(s.get_ref()).map_err(|m| c.err(s.span(), "postgres.schema", m))?),
        None => None,
    };
    Ok(PostgresConf {
        url: pg.clone(),
        password: password.map(|p| c.password(p, "postgres_password")).transpose()?,
        schema,
        migrations_dir: migrations_dir.map(|d| c.base().join(d)),
    })
}

/// The validated configuration.
#[derive(Debug, Clone)]
pub struct Conf {
    /// The file it was read from (empty when built in code).
    pub file: PathBuf,
    /// HTTP listen address (result query, payment callback, health check).
    pub listen: SocketAddr,
    /// Redis URL: one Redis or a Redis Cluster (`protocol::cluster::URL_FORMS`).
    pub redis_url: String,
    /// Redis' password (`redis_password`, by reference; never in the URL).
    pub redis_password: Option<Password>,
    /// PostgreSQL: URL, password, schema.
    pub postgres: PostgresConf,
    /// Folder of the campaign files.
    pub campaigns_dir: PathBuf,
    /// A folder to read the Lua scripts from instead of the ones compiled in (development).
    pub lua_dir: Option<PathBuf>,
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
    pub kafka: KafkaConf,
    /// Writer settings.
    pub writer: WriterConf,
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
    /// The bearer token of the admin listener's live view (`/view/ID`, `/api/campaigns/ID`);
    /// without one the view is off.
    pub admin_token: Option<Password>,
    /// The order events' topic.
    pub events: EventsConf,
    /// Partition leases (used when the plan is [`Plan::Leased`]).
    pub leases: LeaseConf,
    /// The gateways the campaign commands reach (`[fleet]`; none when absent).
    pub fleet: FleetConf,
}

impl Conf {
    /// Reads and validates `file`.
    pub fn load(file: &Path) -> Result<Self, ConfError> {
        let text = conf::read(file)?;
        Self::parse(file, &text)
    }

    /// Parses and validates the text of `file`.
    pub fn parse(file: &Path, text: &str) -> Result<Self, ConfError> {
        let raw: Raw = conf::parse(file, text)?;
        let c = Checker::new(file, text);
        let base = c.base().to_path_buf();
        let listen = c.addr(&raw.listen, "listen")?;
        let redis_password = redis(&c, &raw)?;
        let postgres = postgres(
            &c,
            &raw.postgres_url,
            raw.postgres_password.as_ref(),
            raw.postgres.as_ref(),
            raw.migrations_dir.clone(),
        )?;
        let gateway_key = c.secret(&raw.gateway_key, "gateway_key")?;
        let payment_key = c.secret(&raw.payment_key, "payment_key")?;
        let payment_max_skew_secs =
            c.bounded(&raw.payment_max_skew_secs, "payment_max_skew_secs", 1, 3600)?;
        let result_pool_size = c.bounded(&raw.result_pool_size, "result_pool_size", 1, 64)?;

        let kafka = kafka(&c, &raw.kafka, &base)?;
        let writer = writer(&c, &raw.writer)?;
        let (sweep_age, sweep_interval) = sweeper(&c, &raw.sweeper)?;
        let cl = &raw.closer;
        let close_interval = c.ms(&cl.interval_ms, "closer.interval_ms", 10, INTERVAL_MAX_MS)?;
        let close_batch = c.bounded(&cl.batch_size, "closer.batch_size", 1, 10_000)?;
        let admin_listen = raw.admin.as_ref().map(|a| c.addr(&a.listen, "admin.listen")).transpose()?;
        let admin_token = admin_token(&c, raw.admin.as_ref())?;
        let events = events(&c, &raw.events, &kafka.topic, kafka.partitions)?;
        let leases = leases(&c, &raw.leases)?;
        let fleet = fleet(&c, raw.fleet.as_ref())?;
        Ok(Conf {
            file: file.to_path_buf(),
            fleet,
            admin_token,
            events,
            admin_listen,
            leases,
            listen,
            redis_url: raw.redis_url.into_inner(),
            redis_password,
            postgres,
            campaigns_dir: base.join(raw.campaigns_dir),
            lua_dir: raw.lua_dir.map(|d| base.join(d)),
            gateway_key,
            payment_key,
            payment_max_skew_secs,
            result_pool_size,
            kafka,
            writer,
            sweep_age,
            sweep_interval,
            close_interval,
            close_batch,
        })
    }
}

/// Checks `[kafka]`: the connection (brokers, TLS, SASL; files relative to `base`), the topic
/// and its partitions, the replication factor, the assigned partitions (the leases when none)
/// and the producer's timeout and batch.
fn kafka(c: &Checker<'_>, k: &RawKafka, base: &Path) -> Result<KafkaConf, ConfError> {
    let err_at = |span, field: &str, msg: String| c.err(span, field, msg);
    let connection = protocol::kafka::check_connection(
        protocol::kafka::RawConnection { brokers: &k.brokers, tls: k.tls.as_ref(), sasl: k.sasl.as_ref() },
        &err_at,
        base,
    )?;
    let protocol::kafka::Topic { name: topic, partitions } =
        protocol::kafka::check_topic(&k.topic, &k.partitions, &err_at)?;
    let replication_factor = *k.replication_factor.get_ref();
    if !(replication_factor == -1 || (1..=16).contains(&replication_factor)) {
        return Err(c.err(
            k.replication_factor.span(),
            "kafka.replication_factor",
            "must be 1 to 16, or -1 for the cluster's default.replication.factor",
        ));
    }
    let plan = match &k.assigned {
        None => Plan::Leased,
        Some(a) => {
            let list = a.get_ref().clone();
            if list.is_empty() || list.iter().any(|p| !(0..partitions).contains(p)) {
                return Err(c.err(
                    a.span(),
                    "kafka.assigned",
                    format!("must list partitions between 0 and {}", partitions - 1),
                ));
            }
            Plan::Fixed(list)
        }
    };
    let produce_timeout =
        c.ms(&k.produce_timeout_ms, "kafka.produce_timeout_ms", 1, PRODUCE_TIMEOUT_MAX_MS)?;
    let produce_batch = c.int(&k.produce_batch, "kafka.produce_batch", 1, 10_000)?;
    Ok(KafkaConf {
        connection,
        replication_factor: replication_factor as i16,
        topic,
        partitions,
        plan,
        produce_timeout,
        produce_batch,
    })
}

/// Checks `[writer]`: the batch's size and wait, the idle wait (never below the batch's wait),
/// the fetch's bytes and the batch's retries.
fn writer(c: &Checker<'_>, w: &RawWriter) -> Result<WriterConf, ConfError> {
    let max_wait = c.millis(&w.max_wait_ms, "writer.max_wait_ms", 0, 500)?;
    Ok(WriterConf {
        batch_size: c.int(&w.batch_size, "writer.batch_size", 1, 20_000)?,
        max_wait,
        // An idle partition is never polled more often than a busy one.
        idle_wait: c
            .millis(&w.idle_wait_ms, "writer.idle_wait_ms", i64::from(max_wait.as_i32()), 5_000)
            .map_err(|mut e| {
                e.message.push_str(" (never below writer.max_wait_ms)");
                e
            })?,
        fetch_max_bytes: c.bounded(
            &w.fetch_max_bytes,
            "writer.fetch_max_bytes",
            1024,
            i64::from(i32::MAX),
        )?,
        batch_retries: c.bounded(&w.batch_retries, "writer.batch_retries", 1, 100)?,
    })
}

/// Checks `[sweeper]`: its age and its period, as [`protocol::timing`] bounds them.
fn sweeper(c: &Checker<'_>, s: &RawSweeper) -> Result<(Duration, Duration), ConfError> {
    let sweep_age = c.secs(&s.age_secs, "sweeper.age_secs", 0, SWEEP_AGE_MAX_SECS)?;
    protocol::timing::check_sweep_age(sweep_age)
        .map_err(|e| c.err(s.age_secs.span(), "sweeper.age_secs", e))?;
    let sweep_interval = c.ms(&s.interval_ms, "sweeper.interval_ms", 10, INTERVAL_MAX_MS)?;
    protocol::timing::check_sweep_interval(sweep_age, sweep_interval)
        .map_err(|e| c.err(s.interval_ms.span(), "sweeper.interval_ms", e))?;
    Ok((sweep_age, sweep_interval))
}

/// `[events]` of the writer's conf.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventsConf {
    /// The events topic (`[events] topic`, default [`default_topic`]).
    pub topic: String,
    /// Its partition count (`[events] partitions`, default the reservations topic's).
    pub partitions: i32,
}

/// The events topic when the conf names none: the reservations topic's name and
/// `.order-events` (two installs on one Kafka, each with its topic, keep their events apart;
/// the shipped conf names `seckill.order-events`).
pub fn default_topic(reservations: &str) -> String {
    format!("{reservations}.order-events")
}

/// Checks `[events]`: a topic name Kafka takes (default: the reservations `topic`'s, see
/// [`default_topic`]), and 1 to the most partitions (default: its `partitions`).
fn events(c: &Checker<'_>, e: &RawEvents, topic: &str, partitions: i32) -> Result<EventsConf, ConfError> {
    let events_topic = match &e.topic {
        Some(t) if !protocol::kafka::topic_name_ok(t.get_ref()) => {
            return Err(c.err(
                t.span(),
                "events.topic",
                "must be 1 to 249 characters of a-z, A-Z, 0-9, '.', '_', '-'",
            ))
        }
        Some(t) => t.get_ref().clone(),
        None => default_topic(topic),
    };
    let partitions = match &e.partitions {
        Some(p) => c.bounded(p, "events.partitions", 1, protocol::kafka::PARTITIONS_MAX)?,
        None => partitions,
    };
    Ok(EventsConf { topic: events_topic, partitions })
}

/// Checks the Redis URL, without a password in it, and reads its password (`redis_password`)
/// by reference.
fn redis(c: &Checker<'_>, raw: &Raw) -> Result<Option<Password>, ConfError> {
    protocol::cluster::check_url(raw.redis_url.get_ref())
        .map_err(|m| c.err(raw.redis_url.span(), "redis_url", m))?;
    c.url_without_password(&raw.redis_url, "redis_url", "redis_password")?;
    raw.redis_password.as_ref().map(|p| c.password(p, "redis_password")).transpose()
}

/// Checks `[leases]`: a lease of 1 s to 10 min, renewed at least twice per lease (by default
/// four times).
fn leases(c: &Checker<'_>, raw: &RawLeases) -> Result<LeaseConf, ConfError> {
    let lease = c.ms(&raw.lease_ms, "leases.lease_ms", 1_000, LEASE_MAX_MS)?;
    let Some(renew_ms) = &raw.renew_ms else { return Ok(LeaseConf { lease, renew: lease / 4 }) };
    let half = lease.as_millis() as i64 / 2;
    let renew = c.ms(renew_ms, "leases.renew_ms", 100, half).map_err(|mut e| {
        e.message.push_str(" (at most half of leases.lease_ms, so one late renewal does not lose a lease)");
        e
    })?;
    Ok(LeaseConf { lease, renew })
}

/// The longest `leases.lease_ms`: ten minutes.
pub const LEASE_MAX_MS: i64 = 600_000;
/// The longest `kafka.produce_timeout_ms`: a minute.
pub const PRODUCE_TIMEOUT_MAX_MS: i64 = 60_000;
/// The longest `sweeper.age_secs`: a day.
pub const SWEEP_AGE_MAX_SECS: i64 = 86_400;
/// The longest `sweeper.interval_ms` and `closer.interval_ms`: an hour.
pub const INTERVAL_MAX_MS: i64 = 3_600_000;

/// The gateways of the fleet, as the campaign commands reach them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FleetConf {
    /// Each gateway's admin listener, `host:port` (its `[admin] listen`).
    pub gateways: Vec<String>,
    /// The gateways' `[admin] token` (by reference).
    pub token: Option<Password>,
    /// How long a state command waits for every gateway to report the new state.
    pub converge: Duration,
}

fn admin_token(c: &Checker<'_>, raw: Option<&RawAdmin>) -> Result<Option<Password>, ConfError> {
    let Some(t) = raw.and_then(|a| a.token.as_ref()) else { return Ok(None) };
    let token = c.password(t, "admin.token")?;
    if token.expose().len() < 16 {
        return Err(c.err(t.span(), "admin.token", "must be at least 16 characters"));
    }
    Ok(Some(token))
}

fn fleet(c: &Checker<'_>, raw: Option<&RawFleet>) -> Result<FleetConf, ConfError> {
    let Some(f) = raw else { return Ok(FleetConf::default()) };
    let mut gateways = Vec::new();
    for g in f.gateways.get_ref() {
        let ok = g
            .get_ref()
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
        if !ok {
            return Err(c.err(
                g.span(),
                "fleet.gateways",
                format!("{:?} is not host:port (a gateway's [admin] listen)", g.get_ref()),
            ));
        }
        gateways.push(g.get_ref().clone());
    }
    let token = f.token.as_ref().map(|t| c.password(t, "fleet.token")).transpose()?;
    let converge = c.ms(&f.converge_ms, "fleet.converge_ms", 100, 60_000)?;
    Ok(FleetConf { gateways, token, converge })
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

    fn parse(text: &str) -> Result<Conf, ConfError> {
        Conf::parse(Path::new("conf/order-writer.toml"), text)
    }

    #[test]
    fn good_file_parses_with_defaults() {
        let c = parse(&good()).unwrap();
        assert_eq!(c.kafka.plan, Plan::Leased, "no plan: partitions by lease");
        assert_eq!(
            c.leases,
            LeaseConf { lease: Duration::from_secs(10), renew: Duration::from_millis(2500) }
        );
        assert_eq!(c.writer.batch_size, 1000);
        assert_eq!((c.writer.max_wait.as_i32(), c.writer.idle_wait.as_i32()), (20, 100));
        assert_eq!(
            (c.kafka.produce_timeout, c.sweep_age),
            (Duration::from_millis(3000), Duration::from_secs(10))
        );
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
        expect(
            &format!("{}\n[writer]\nbatch_size = 0\n", good()),
            13,
            "writer.batch_size",
            "between 1 and 20000",
        );
        expect(
            &format!("{}\n[writer]\nmax_wait_ms = 50\nidle_wait_ms = 10\n", good()),
            14,
            "writer.idle_wait_ms",
            "between 50 and 5000 (ms), found 10 (never below writer.max_wait_ms)",
        );
        expect(
            &format!("{}\n[writer]\nbatch_retries = 0\n", good()),
            13,
            "writer.batch_retries",
            "between 1 and 100",
        );
        expect(
            &format!("{}\n[writer]\nbatch_size = 10\nbatch_retries = 101\n", good()),
            14,
            "writer.batch_retries",
            "between 1 and 100",
        );
        let c = parse(&format!("{}\n[writer]\nbatch_retries = 100\n", good())).unwrap();
        assert_eq!(c.writer.batch_retries, 100);
        // The timing rule with the gateway (protocol::timing), checked on this side.
        expect(&format!("{}\n[sweeper]\nage_secs = 5\n", good()), 13, "sweeper.age_secs", "6 s or more");
        assert!(parse(&format!("{}\n[sweeper]\nage_secs = 6\n", good())).is_ok());
        let late = format!("{}\n[sweeper]\nage_secs = 6\ninterval_ms = 3500\n", good());
        expect(&late, 14, "sweeper.interval_ms", "3000 ms here");
        let with = |extra: &str| good().replace("\n\n[kafka]", &format!("\n{extra}\n\n[kafka]"));
        expect(&with("payment_max_skew_secs = 0"), 6, "payment_max_skew_secs", "between 1 and 3600");
        expect(&with("payment_max_skew_secs = 86400"), 6, "payment_max_skew_secs", "between 1 and 3600");
        expect(&with("result_pool_size = 0"), 6, "result_pool_size", "between 1 and 64");
        expect(&with("result_pool_size = 65"), 6, "result_pool_size", "between 1 and 64");
        let c = parse(&with("payment_max_skew_secs = 60\nresult_pool_size = 2")).unwrap();
        assert_eq!((c.payment_max_skew_secs, c.result_pool_size), (60, 2));
        assert_eq!(parse(&good()).unwrap().admin_listen, None, "no admin listener unless asked");
        let admin = parse(&format!("{}\n[admin]\nlisten = \"127.0.0.1:9181\"\n", good())).unwrap();
        assert_eq!(admin.admin_listen, Some("127.0.0.1:9181".parse().unwrap()));
        expect(&format!("{}\n[admin]\nlisten = \"localhost\"\n", good()), 13, "admin.listen", "IP:port");
        expect(&format!("{}\n[admin]\nport = 1\n", good()), 13, "port", "unknown field");
    }

    #[test]
    fn the_fleet_and_the_admin_token_are_checked_at_their_lines() {
        std::env::set_var("OW_TEST_SHORT", "short");
        let fleet = |body: &str| format!("{}\n[fleet]\n{body}\n", good());
        let c = parse(&fleet(
            "gateways = [\"10.0.0.11:9180\", \"gw-2.internal:9180\"]\ntoken = \"env:OW_TEST_KEY\"",
        ))
        .unwrap();
        assert_eq!(c.fleet.gateways, vec!["10.0.0.11:9180".to_string(), "gw-2.internal:9180".to_string()]);
        assert_eq!(c.fleet.converge, Duration::from_millis(2000), "the default wait");
        expect(&fleet("gateways = [\"10.0.0.11\"]"), 13, "fleet.gateways", "not host:port");
        expect(&fleet("gateways = [\"10.0.0.11:0\"]"), 13, "fleet.gateways", "not host:port");
        expect(&fleet("gateways = []\nconverge_ms = 5"), 14, "fleet.converge_ms", "between 100 and 60000");
        let admin =
            |token: &str| format!("{}\n[admin]\nlisten = \"127.0.0.1:9181\"\ntoken = \"{token}\"\n", good());
        assert!(parse(&admin("env:OW_TEST_KEY")).unwrap().admin_token.is_some());
        expect(&admin("env:OW_TEST_SHORT"), 14, "admin.token", "at least 16 characters");
        expect(&admin("plain-text-token-0123"), 14, "admin.token", "env:");
    }

    #[test]
    fn the_events_topic_is_the_reservations_ones_by_default_or_named() {
        let c = parse(&good()).unwrap();
        let derived = EventsConf { topic: "seckill.reservations.order-events".into(), partitions: 4 };
        assert_eq!(c.events, derived);
        let named =
            parse(&format!("{}\n[events]\ntopic = \"shop.orders\"\npartitions = 12\n", good())).unwrap();
        assert_eq!(named.events, EventsConf { topic: "shop.orders".into(), partitions: 12 });
        expect(&format!("{}\n[events]\ntopic = \"a b\"\n", good()), 13, "events.topic", "a-z, A-Z");
        expect(&format!("{}\n[events]\npartitions = 0\n", good()), 13, "events.partitions", "0");
        expect(&format!("{}\n[events]\npartition = 2\n", good()), 13, "partition", "unknown field");
    }

    #[test]
    fn leases_are_bounded_and_renewed_at_least_twice_per_lease() {
        let table = |body: &str| format!("{}\n[leases]\n{body}\n", good());
        let c = parse(&table("lease_ms = 3000\nrenew_ms = 500")).unwrap();
        assert_eq!(c.leases, LeaseConf { lease: Duration::from_secs(3), renew: Duration::from_millis(500) });
        assert_eq!(parse(&table("lease_ms = 2000")).unwrap().leases.renew, Duration::from_millis(500));
        expect(&table("lease_ms = 999"), 13, "leases.lease_ms", "between 1000 and 600000 (ms)");
        expect(&table("lease_ms = 600001"), 13, "leases.lease_ms", "between 1000 and 600000 (ms)");
        let e = parse(&table("lease_ms = 3000\nrenew_ms = 1501")).unwrap_err();
        assert_eq!((e.line, e.column, e.field.as_deref()), (14, 12, Some("leases.renew_ms")), "{e}");
        assert!(e.to_string().contains("between 100 and 1500 (ms), found 1501 (at most half"), "{e}");
        expect(&table("renew_ms = 99"), 13, "leases.renew_ms", "between 100 and 5000 (ms)");
        expect(&table("lease = 1"), 13, "lease", "unknown field");
        let fixed = good().replace("partitions = 4", "partitions = 4\nassigned = [2, 0]");
        assert_eq!(parse(&fixed).unwrap().kafka.plan, Plan::Fixed(vec![2, 0]), "a fixed plan: no lease");
    }

    #[test]
    fn a_url_with_a_password_is_refused() {
        for (from, to, line, field, words) in [
            (
                "redis://127.0.0.1",
                "redis://:hunter2@127.0.0.1",
                2,
                "redis_url",
                "redis_password = \"env:NAME\"",
            ),
            ("redis://127.0.0.1", "redis://u:hunter2@127.0.0.1", 2, "redis_url", "redis_password"),
            ("postgres://postgres@", "postgres://postgres:hunter2@", 3, "postgres_url", "postgres_password"),
            (
                "seckill\"",
                "seckill?sslmode=disable&password=hunter2\"",
                3,
                "postgres_url",
                "postgres_password",
            ),
            ("redis://", "rediss://", 2, "redis_url", "no TLS"),
        ] {
            let text = good().replacen(from, to, 1);
            expect(&text, line, field, words);
            assert!(!parse(&text).unwrap_err().to_string().contains("hunter2"), "{to}: not echoed");
        }
    }

    #[test]
    fn the_schema_is_a_plain_name_and_absent_by_default() {
        let c = parse(&good()).unwrap();
        assert_eq!(c.postgres.schema, None, "no schema: the server's search_path, as before");
        assert_eq!((c.lua_dir, c.postgres.migrations_dir), (None, None), "compiled in");
        let with = |t: &str| format!("{}\n[postgres]\n{t}\n", good());
        let c = parse(&with("schema = \"seckill\"")).unwrap();
        assert_eq!(c.postgres.schema.unwrap().name(), "seckill");
        let bad = with("schema = \"Sec-kill\"");
        expect(&bad, 13, "postgres.schema", "a-z, 0-9 and _");
        let e = parse(&bad).unwrap_err();
        assert_eq!(e.column, 10, "{e}");
        assert!(e.to_string().starts_with("conf/order-writer.toml:13:10: field `postgres.schema`"), "{e}");
        expect(&with("schema = \"pg_x\""), 13, "postgres.schema", "not starting with a digit or pg_");
        expect(&with("scheme = \"x\""), 13, "scheme", "unknown field");
        let dirs =
            good().replace("\n\n[kafka]", "\nlua_dir = \"../lua\"\nmigrations_dir = \"../sql\"\n\n[kafka]");
        let c = parse(&dirs).unwrap();
        assert_eq!(
            c.lua_dir.as_deref(),
            Some(Path::new("conf/../lua")),
            "an older conf's folders still read"
        );
        assert_eq!(c.postgres.migrations_dir.as_deref(), Some(Path::new("conf/../sql")));
    }

    #[test]
    fn the_shipped_conf_parses_and_its_schema_line_is_where_the_docs_say() {
        std::env::set_var("SECKILL_GATEWAY_KEY", "0123456789abcdef0123");
        std::env::set_var("SECKILL_PAYMENT_KEY", "0123456789abcdef0123");
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../conf/order-writer.toml");
        let text = std::fs::read_to_string(&file).unwrap();
        let c = Conf::parse(&file, &text).unwrap();
        assert_eq!((c.postgres.schema, c.lua_dir, c.postgres.migrations_dir), (None, None, None));
        let on = text.replace("# schema = \"seckill\"", "schema = \"seckill\"");
        assert_eq!(Conf::parse(&file, &on).unwrap().postgres.schema.unwrap().name(), "seckill");
        let e = Conf::parse(&file, &on.replace("\"seckill\"", "\"Seckill\"")).unwrap_err();
        // docs/operations.md quotes this place.
        assert_eq!((e.line, e.column, e.field.as_deref()), (62, 10, Some("postgres.schema")), "{e}");
    }

    #[test]
    fn migrate_reads_the_postgres_part_alone() {
        // No keys in the environment, no Redis or Kafka checked: only PostgreSQL's.
        let text =
            "postgres_url = \"postgres://u@127.0.0.1/db\"\ngateway_key = \"env:OW_NOT_SET_ANYWHERE\"\n\
                    redis_url = \"nonsense\"\n[postgres]\nschema = \"shop\"\n";
        let file = Path::new("conf/order-writer.toml");
        let c = PostgresConf::parse(file, text).unwrap();
        assert_eq!((c.url.as_str(), c.schema.unwrap().name()), ("postgres://u@127.0.0.1/db", "shop"));
        let e = PostgresConf::parse(file, &text.replace("\"shop\"", "\"1shop\"")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (5, Some("postgres.schema")), "{e}");
        let e = PostgresConf::parse(file, &text.replace("u@", "u:hunter2@")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (1, Some("postgres_url")), "{e}");
        let e = PostgresConf::parse(file, "listen = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("postgres_url"), "{e}");
    }

    #[test]
    fn every_duration_and_number_is_bounded_both_ways() {
        let kafka = |extra: &str| good().replace("partitions = 4", &format!("partitions = 4\n{extra}"));
        expect(&kafka("produce_timeout_ms = 0"), 11, "kafka.produce_timeout_ms", "between 1 and 60000 (ms)");
        expect(
            &kafka("produce_timeout_ms = 60001"),
            11,
            "kafka.produce_timeout_ms",
            "between 1 and 60000 (ms)",
        );
        assert_eq!(parse(&kafka("produce_timeout_ms = 60000")).unwrap().kafka.produce_timeout.as_secs(), 60);
        expect(&kafka("produce_batch = 10001"), 11, "kafka.produce_batch", "between 1 and 10000");
        let table = |t: &str, body: &str| format!("{}\n[{t}]\n{body}\n", good());
        expect(&table("writer", "max_wait_ms = -1"), 13, "writer.max_wait_ms", "between 0 and 500 (ms)");
        expect(&table("writer", "max_wait_ms = 501"), 13, "writer.max_wait_ms", "between 0 and 500 (ms)");
        expect(&table("writer", "fetch_max_bytes = 1023"), 13, "writer.fetch_max_bytes", "between 1024 and");
        expect(&table("sweeper", "age_secs = 86401"), 13, "sweeper.age_secs", "between 0 and 86400 (s)");
        expect(&table("sweeper", "age_secs = -6"), 13, "sweeper.age_secs", "between 0 and 86400 (s)");
        let slow = table("sweeper", "age_secs = 86400\ninterval_ms = 3600001");
        expect(&slow, 14, "sweeper.interval_ms", "between 10 and 3600000 (ms)");
        expect(
            &table("sweeper", "interval_ms = 9"),
            13,
            "sweeper.interval_ms",
            "between 10 and 3600000 (ms)",
        );
        expect(&table("closer", "interval_ms = 9"), 13, "closer.interval_ms", "between 10 and 3600000 (ms)");
        expect(
            &table("closer", "interval_ms = 3600001"),
            13,
            "closer.interval_ms",
            "between 10 and 3600000 (ms)",
        );
        expect(&table("closer", "batch_size = 0"), 13, "closer.batch_size", "between 1 and 10000");
        let with = |extra: &str| good().replace("\n\n[kafka]", &format!("\n{extra}\n\n[kafka]"));
        expect(
            &with("payment_max_skew_secs = -1"),
            6,
            "payment_max_skew_secs",
            "between 1 and 3600, found -1",
        );
        let c = parse(&table("closer", "interval_ms = 3600000\nbatch_size = 10000")).unwrap();
        assert_eq!((c.close_interval.as_secs(), c.close_batch), (3600, 10_000));
        let e = parse(&good().replace("127.0.0.1:8081", "nowhere")).unwrap_err();
        assert_eq!(e.to_string(), "conf/order-writer.toml:1:10: field `listen`: \"nowhere\" is not an IP:port address (names are not resolved)");
    }
}
