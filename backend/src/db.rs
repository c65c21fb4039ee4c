//! PostgreSQL: the connection pool (in the conf's schema, [`crate::db::schema`]) and the migrations
//! of a folder (tests and benchmarks that read `sql/`; the binary's own are compiled in).

pub mod schema;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use protocol::secret::{redact_url, Password};
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};

use crate::db::schema::Schema;

/// Opens a pool of at most `max` connections, failing within a few seconds when the server is away.
pub async fn connect(url: &str, max: u32) -> anyhow::Result<PgPool> {
    connect_as(url, None, max).await
}

/// [`connect`] with `password` (the conf's `postgres_password`; the URL holds none). Messages
/// show the URL redacted.
pub async fn connect_as(url: &str, password: Option<&Password>, max: u32) -> anyhow::Result<PgPool> {
    connect_in(url, password, None, max).await
}

/// [`connect_as`], each connection's `search_path` being `schema` alone (set at connection
/// start), so every table and query of the order writer is in it. `None` sets nothing: the
/// server's `search_path` applies.
pub async fn connect_in(
    url: &str,
    password: Option<&Password>,
    schema: Option<&Schema>,
    max: u32,
) -> anyhow::Result<PgPool> {
    let shown = redact_url(url);
    let mut options: PgConnectOptions = url.parse().with_context(|| format!("bad PostgreSQL URL {shown}"))?;
    if let Some(p) = password {
        options = options.password(p.expose());
    }
    if let Some(s) = schema {
        options = options.options([("search_path", s.name())]);
    }
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(5))
        .connect_with(options)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {shown}"))
}

/// Applies every migration of `dir` (the `sql/` folder) that is not applied yet, in the server's
/// `search_path` (tests and benchmarks; the binary applies its own with [`crate::db::schema::migrate`]).
pub async fn migrate(pool: &PgPool, dir: &Path) -> anyhow::Result<()> {
    let migrator = sqlx::migrate::Migrator::new(dir)
        .await
        .with_context(|| format!("cannot read migrations in {}", dir.display()))?;
    migrator.run(pool).await.context("applying migrations")?;
    Ok(())
}
