//! Addresses of the local stack and fresh per-test resources on it.
//!
//! The addresses come from the environment (`SECKILL_REDIS_URL`, `SECKILL_PG_ADMIN_URL`,
//! `SECKILL_KAFKA_BROKER`); the defaults are the ports `e2e/stack.sh` uses.

use anyhow::Context;

/// Redis URL of the stack.
pub fn redis_url() -> String {
    std::env::var("SECKILL_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6390".into())
}

/// PostgreSQL URL of the stack's admin database (a superuser, database `postgres`).
pub fn pg_admin_url() -> String {
    std::env::var("SECKILL_PG_ADMIN_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5440/postgres".into())
}

/// `host:port` of the stack's Kafka-compatible broker.
pub fn kafka_broker() -> String {
    std::env::var("SECKILL_KAFKA_BROKER").unwrap_or_else(|_| "127.0.0.1:19092".into())
}

/// A name no other test uses: `prefix` followed by 12 hex digits.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

/// Creates an empty database with a unique name and returns its URL. It is left behind on
/// purpose (a failed test can be inspected); the stack's data folder is throwaway.
pub async fn fresh_database() -> anyhow::Result<String> {
    use sqlx::{Connection, Executor};
    let admin = pg_admin_url();
    let mut conn = sqlx::PgConnection::connect(&admin).await.with_context(|| {
        format!("PostgreSQL is not reachable at {admin}: is the stack up? (bash e2e/stack.sh up)")
    })?;
    let name = unique("t_");
    // The name is ours (hex digits), not input: safe to format into the statement.
    let create = format!("CREATE DATABASE {name}");
    conn.execute(sqlx::AssertSqlSafe(create)).await?;
    let base = admin.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin);
    Ok(format!("{base}/{name}"))
}

/// The workspace's root folder (holds `lua/`, `sql/`, `conf/`).
pub fn workspace_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}
