//! The leases' SQL, one function per statement, each on the pool (each its own transaction).
//! Times are PostgreSQL's (`now()`), never a writer's: writers' clocks need not agree.

use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

/// A claimed partition: its epoch, and the writer whose expired lease it took (`None`: it was
/// free).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Claimed {
    pub partition: i32,
    pub epoch: i64,
    pub from: Option<String>,
}

/// One lease row per partition of `topic` (free), for those that have none yet.
pub(super) async fn ensure_rows(pool: &PgPool, topic: &str, partitions: i32) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO partition_leases (topic, partition)
         SELECT $1, p FROM generate_series(0, $2 - 1) AS p
         ON CONFLICT DO NOTHING",
    )
    .bind(topic)
    .bind(partitions)
    .execute(pool)
    .await
    .context("creating the lease rows")?;
    Ok(())
}

/// Renews this writer's heartbeat for `lease`, forgets the expired ones, and returns the live
/// writers of `topic` (this one included), by id.
pub(super) async fn heartbeat(
    pool: &PgPool,
    topic: &str,
    owner: &str,
    lease: Duration,
) -> anyhow::Result<Vec<String>> {
    sqlx::query(
        "INSERT INTO writer_heartbeats (topic, owner, expires_at)
         VALUES ($1, $2, now() + make_interval(secs => $3))
         ON CONFLICT (topic, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at",
    )
    .bind(topic)
    .bind(owner)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await
    .context("heartbeat")?;
    sqlx::query("DELETE FROM writer_heartbeats WHERE topic = $1 AND expires_at <= now()")
        .bind(topic)
        .execute(pool)
        .await
        .context("forgetting expired heartbeats")?;
    sqlx::query_scalar(
        "SELECT owner FROM writer_heartbeats WHERE topic = $1 AND expires_at > now() ORDER BY owner",
    )
    .bind(topic)
    .fetch_all(pool)
    .await
    .context("reading the live writers")
}

/// Extends every unexpired lease of `owner` by `lease`; returns the (partition, epoch) renewed.
/// An expired lease is not renewed, even if nobody took it yet: its writer stops, and may claim
/// it again under a new epoch.
pub(super) async fn renew(
    pool: &PgPool,
    topic: &str,
    owner: &str,
    lease: Duration,
) -> anyhow::Result<Vec<(i32, i64)>> {
    sqlx::query_as(
        "UPDATE partition_leases SET expires_at = now() + make_interval(secs => $3)
          WHERE topic = $1 AND owner = $2 AND expires_at > now()
         RETURNING partition, epoch",
    )
    .bind(topic)
    .bind(owner)
    .bind(lease.as_secs_f64())
    .fetch_all(pool)
    .await
    .context("renewing leases")
}

/// Claims at most `n` partitions that are free or whose lease expired, lowest first, each under
/// a new epoch. A row locked by a batch's fence (its owner is committing) is skipped this round.
pub(super) async fn claim(
    pool: &PgPool,
    topic: &str,
    owner: &str,
    n: usize,
    lease: Duration,
) -> anyhow::Result<Vec<Claimed>> {
    let rows: Vec<(i32, i64, Option<String>)> = sqlx::query_as(
        "WITH free AS (
             SELECT topic, partition, owner AS before FROM partition_leases
              WHERE topic = $1 AND (owner IS NULL OR expires_at <= now())
              ORDER BY partition LIMIT $3
              FOR UPDATE SKIP LOCKED)
         UPDATE partition_leases l
            SET owner = $2, epoch = l.epoch + 1, expires_at = now() + make_interval(secs => $4)
           FROM free
          WHERE l.topic = free.topic AND l.partition = free.partition
         RETURNING l.partition, l.epoch, free.before",
    )
    .bind(topic)
    .bind(owner)
    .bind(n as i64)
    .bind(lease.as_secs_f64())
    .fetch_all(pool)
    .await
    .context("claiming partitions")?;
    Ok(rows.into_iter().map(|(partition, epoch, from)| Claimed { partition, epoch, from }).collect())
}

/// Frees `partition` if `owner` still holds it under `epoch` (another writer may claim it at
/// once).
pub(super) async fn release(
    pool: &PgPool,
    topic: &str,
    owner: &str,
    (partition, epoch): (i32, i64),
) -> anyhow::Result<()> {
    sqlx::query(
        "UPDATE partition_leases SET owner = NULL, expires_at = '-infinity'
          WHERE topic = $1 AND partition = $2 AND owner = $3 AND epoch = $4",
    )
    .bind(topic)
    .bind(partition)
    .bind(owner)
    .bind(epoch)
    .execute(pool)
    .await
    .context("releasing a lease")?;
    Ok(())
}

/// Removes `owner`'s heartbeat (a clean stop: the others' shares grow at their next round).
pub(super) async fn forget(pool: &PgPool, topic: &str, owner: &str) -> anyhow::Result<()> {
    sqlx::query("DELETE FROM writer_heartbeats WHERE topic = $1 AND owner = $2")
        .bind(topic)
        .bind(owner)
        .execute(pool)
        .await
        .context("removing the heartbeat")?;
    Ok(())
}
