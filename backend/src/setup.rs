//! The set-up subcommands over the connections of [`crate::app`]: `order-writer migrate` and
//! `order-writer topic create`. Apart from [`crate::db`] and [`crate::kafka`], which the
//! connections are built from, so that those two import nothing of `app`.

use crate::app::{Connections, COMMAND_POOL};
use crate::kafka::ensure_topic;

/// `order-writer migrate`: applies the migrations of `migrations_dir`.
pub async fn migrate(conns: &Connections<'_>) -> anyhow::Result<()> {
    conns.migrated_postgres(COMMAND_POOL).await?;
    println!("migrations applied from {}", conns.conf().migrations_dir.display());
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
