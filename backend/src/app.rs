//! The order writer's connections, built in one place from the validated configuration: the
//! PostgreSQL pool (with the migrations applied, when the subcommand writes), Redis and the
//! Lua scripts, the Kafka client and the topic. Every subcommand and `serve` take what they
//! need from [`Connections`]; none connects on its own.

use fred::prelude::Client as RedisClient;
use sqlx::PgPool;

use crate::conf::Conf;
use crate::redis::RedisScripts;
use crate::{db, kafka, redis};

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

    /// A PostgreSQL pool of at most `max` connections.
    pub async fn postgres(&self, max: u32) -> anyhow::Result<PgPool> {
        db::connect_as(&self.cfg.postgres_url, self.cfg.postgres_password.as_ref(), max).await
    }

    /// A PostgreSQL pool of at most `max` connections, with every migration of
    /// `migrations_dir` applied.
    pub async fn migrated_postgres(&self, max: u32) -> anyhow::Result<PgPool> {
        let pool = self.postgres(max).await?;
        db::migrate(&pool, &self.cfg.migrations_dir).await?;
        Ok(pool)
    }

    /// A Redis client (one Redis or a Redis Cluster).
    pub async fn redis(&self) -> anyhow::Result<RedisClient> {
        redis::connect_as(&self.cfg.redis_url, self.cfg.redis_password.as_ref()).await
    }

    /// The Lua scripts of `lua_dir`: the order writer's own and the shared ones.
    pub fn scripts(&self) -> anyhow::Result<RedisScripts> {
        RedisScripts::load(&self.cfg.lua_dir)
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
