//! The order writer's connections, built in one place from the validated configuration: the
//! PostgreSQL pool in the conf's schema (with the migrations applied, or checked, when the
//! subcommand writes), Redis and the Lua scripts, the Kafka client and the topic. Every
//! subcommand and `serve` take what they need from [`Connections`]; none connects on its own.

use fred::prelude::Client as RedisClient;
use sqlx::PgPool;

use crate::conf::{Conf, PostgresConf};
use crate::db::{self, schema};
use crate::redis::RedisScripts;
use crate::{kafka, redis};

/// PostgreSQL connections of a one-shot subcommand (migrate, publish, rebalance, reconcile).
pub const COMMAND_POOL: u32 = 2;

/// Builds the connections of `cfg`, each when asked.
#[derive(Debug, Clone, Copy)]
pub struct Connections<'a> {
    cfg: &'a Conf,
}

impl<'a> Connections<'a> {
    /// The connections `cfg` names.
    pub fn new(cfg: &'a Conf) -> Self {
        Self { cfg }
    }

    /// The configuration they are built from.
    pub fn conf(&self) -> &'a Conf {
        self.cfg
    }

    /// A PostgreSQL pool of at most `max` connections, in the conf's schema.
    pub async fn postgres(&self, max: u32) -> anyhow::Result<PgPool> {
        postgres(&self.cfg.postgres, max).await
    }

    /// A PostgreSQL pool of at most `max` connections, with every migration of the binary
    /// applied.
    pub async fn migrated_postgres(&self, max: u32) -> anyhow::Result<PgPool> {
        migrated_postgres(&self.cfg.postgres, max).await
    }

    /// A PostgreSQL pool of at most `max` connections, once its schema is known to be at least
    /// the binary's (`serve --no-migrate`): an older one is refused, saying so.
    pub async fn checked_postgres(&self, max: u32) -> anyhow::Result<PgPool> {
        let pg = &self.cfg.postgres;
        let pool = postgres(pg, max).await?;
        let migrations = schema::migrations(pg.migrations_dir.as_deref(), pg.schema.as_ref()).await?;
        if let schema::State::Newer { version, binary } =
            schema::verify(&pool, pg.schema.as_ref(), &migrations).await?
        {
            tracing::warn!(version, binary, "the schema has migrations this order-writer does not know");
        }
        Ok(pool)
    }

    /// A Redis client (one Redis or a Redis Cluster).
    pub async fn redis(&self) -> anyhow::Result<RedisClient> {
        redis::connect_as(&self.cfg.redis_url, self.cfg.redis_password.as_ref()).await
    }

    /// The Lua scripts, the order writer's own and the shared ones: compiled in, or read from
    /// `lua_dir` when the conf names one.
    pub fn scripts(&self) -> anyhow::Result<RedisScripts> {
        match &self.cfg.lua_dir {
            Some(dir) => RedisScripts::load(dir),
            None => Ok(RedisScripts::builtin()),
        }
    }

    /// A Kafka client whose calls stop after the produce timeout.
    pub async fn kafka(&self) -> anyhow::Result<rskafka::client::Client> {
        kafka::client(&self.cfg.kafka.connection, self.cfg.kafka.produce_timeout).await
    }

    /// A Kafka client, once the reservations topic exists with the configured partitions
    /// (created when missing).
    pub async fn kafka_with_topic(&self) -> anyhow::Result<rskafka::client::Client> {
        let client = self.kafka().await?;
        kafka::ensure_topic(&client, &self.cfg.kafka).await?;
        Ok(client)
    }
}

/// A PostgreSQL pool of at most `max` connections, in `pg`'s schema.
pub async fn postgres(pg: &PostgresConf, max: u32) -> anyhow::Result<PgPool> {
    db::connect_in(&pg.url, pg.password.as_ref(), pg.schema.as_ref(), max).await
}

/// [`postgres`], with every migration of the binary (or of `pg.migrations_dir`) applied in
/// `pg`'s schema, the schema created when missing (`order-writer migrate`, `serve`).
pub async fn migrated_postgres(pg: &PostgresConf, max: u32) -> anyhow::Result<PgPool> {
    let pool = postgres(pg, max).await?;
    let migrations = schema::migrations(pg.migrations_dir.as_deref(), pg.schema.as_ref()).await?;
    schema::migrate(&pool, pg.schema.as_ref(), &migrations).await?;
    Ok(pool)
}
