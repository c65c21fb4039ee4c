//! The set-up subcommands: `order-writer migrate` (PostgreSQL alone) and `order-writer topic
//! create` (over the connections of [`crate::app`]). Apart from [`crate::db`] and
//! [`crate::kafka`], which the connections are built from, so that those two import nothing of
//! `app`.

use crate::app::{self, Connections, COMMAND_POOL};
use crate::conf::PostgresConf;
use crate::db::schema;
use crate::kafka::ensure_topic;

/// `order-writer migrate`: creates the schema when missing and applies the migrations compiled
/// into the binary (or those of `migrations_dir`). Needs PostgreSQL only.
pub async fn migrate(pg: &PostgresConf) -> anyhow::Result<()> {
    let pool = app::migrated_postgres(pg, COMMAND_POOL).await?;
    let migrations = schema::migrations(pg.migrations_dir.as_deref(), pg.schema.as_ref()).await?;
    let state = schema::read_state(&pool, pg.schema.as_ref(), &migrations).await?;
    pool.close().await;
    let from = match &pg.migrations_dir {
        Some(dir) => format!("read from {}", dir.display()),
        None => "compiled in".to_string(),
    };
    println!("migrations applied in {} ({from}): {state}", schema::shown(pg.schema.as_ref()));
    Ok(())
}

/// `order-writer topic create`: creates the reservations topic (an existing one is fine, with
/// the configured partition count).
pub async fn topic_create(conns: &Connections<'_>) -> anyhow::Result<()> {
    let kafka = &conns.conf().kafka;
    let client = conns.kafka().await?;
    let created = ensure_topic(&client, kafka).await?;
    println!(
        "topic {} {} ({} partitions)",
        kafka.topic,
        if created { "created" } else { "already exists" },
        kafka.partitions
    );
    Ok(())
}
