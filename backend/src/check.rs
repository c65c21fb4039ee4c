//! `order-writer check`: the conf (read and validated, its secrets resolved, before this runs),
//! then each server the writer uses, one line each: PostgreSQL answers and its schema is at
//! least the binary's, Redis answers, Kafka answers and the topic has the conf's partitions.
//! Nothing is created or changed. Every server is tried, even after one failed; the command
//! fails when any did, naming them.

use std::path::Path;
use std::time::Duration;

use protocol::secret::redact_url;

use crate::app::{self, Connections, COMMAND_POOL};
use crate::conf::Conf;
use crate::db::schema;

/// How long one server's check may take.
const EACH_WITHIN: Duration = Duration::from_secs(15);

/// One line of the report: what was checked, and what was found or why it failed.
#[derive(Debug)]
pub struct Line {
    /// The server: `postgres`, `redis` or `kafka`.
    pub server: &'static str,
    /// Where it is (its URL, password-free, or its brokers).
    pub place: String,
    /// What was found, or the error.
    pub outcome: Result<String, String>,
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.outcome {
            Ok(found) => write!(f, "ok      {} {}: {found}", self.server, self.place),
            Err(why) => write!(f, "FAILED  {} {}: {why}", self.server, self.place),
        }
    }
}

/// Checks every server of `cfg` (read from `file`) and prints a line each.
pub async fn run(cfg: &Conf, file: &Path) -> anyhow::Result<()> {
    println!("ok      conf {}: valid, secrets read", file.display());
    let conns = Connections::new(cfg);
    let lines = [
        line("postgres", redact_url(&cfg.postgres.url), postgres(cfg)).await,
        line("redis", redact_url(&cfg.redis_url), redis(&conns)).await,
        line("kafka", cfg.kafka.connection.brokers().join(","), kafka(&conns)).await,
    ];
    let failed: Vec<&str> =
        lines.iter().inspect(|l| println!("{l}")).filter(|l| l.outcome.is_err()).map(|l| l.server).collect();
    if !failed.is_empty() {
        anyhow::bail!("check failed: {}", failed.join(", "));
    }
    Ok(())
}

async fn line(
    server: &'static str,
    place: String,
    check: impl std::future::Future<Output = anyhow::Result<String>>,
) -> Line {
    let outcome = match tokio::time::timeout(EACH_WITHIN, check).await {
        Ok(Ok(found)) => Ok(found),
        Ok(Err(e)) => Err(format!("{e:#}")),
        Err(_) => Err(format!("no answer within {EACH_WITHIN:?}")),
    };
    Line { server, place, outcome }
}

/// PostgreSQL answers, and its schema is at least the binary's.
async fn postgres(cfg: &Conf) -> anyhow::Result<String> {
    let pg = &cfg.postgres;
    let pool = app::postgres(pg, COMMAND_POOL).await?;
    let migrations = schema::migrations(pg.migrations_dir.as_deref(), pg.schema.as_ref()).await?;
    let server: String = sqlx::query_scalar("SHOW server_version").fetch_one(&pool).await?;
    let state = schema::verify(&pool, pg.schema.as_ref(), &migrations).await;
    pool.close().await;
    Ok(format!("PostgreSQL {server}, {} {}", schema::shown(pg.schema.as_ref()), state?))
}

/// Redis answers a PING.
async fn redis(conns: &Connections<'_>) -> anyhow::Result<String> {
    use fred::prelude::*;
    let client = conns.redis().await?;
    let pong: String = client.ping(None).await?;
    let _ = client.quit().await;
    Ok(format!("answers ({pong})"))
}

/// Kafka answers, and the topic exists with the conf's partition count.
async fn kafka(conns: &Connections<'_>) -> anyhow::Result<String> {
    let k = &conns.conf().kafka;
    let client = conns.kafka().await?;
    let found = protocol::kafka::topic_partitions(&client, &k.topic, k.produce_timeout)
        .await
        .map_err(|e| anyhow::anyhow!("reading the metadata of topic {}: {e}", k.topic))?;
    protocol::kafka::partitions_match(&k.topic, k.partitions, found).map_err(anyhow::Error::msg)?;
    Ok(format!("topic {} has {} partitions", k.topic, k.partitions))
}
