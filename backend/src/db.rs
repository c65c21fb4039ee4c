//! PostgreSQL: the connection pool and the migrations under `sql/`.

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// Opens a pool of at most `max` connections, failing within a few seconds when the server is away.
pub async fn connect(url: &str, max: u32) -> anyhow::Result<PgPool> {
    PgPoolOptions::new()
        .max_connections(max)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .with_context(|| format!("cannot connect to PostgreSQL at {}", redact(url)))
}

/// Applies every migration of `dir` (the `sql/` folder) that is not applied yet.
pub async fn migrate(pool: &PgPool, dir: &Path) -> anyhow::Result<()> {
    let migrator = sqlx::migrate::Migrator::new(dir)
        .await
        .with_context(|| format!("cannot read migrations in {}", dir.display()))?;
    migrator.run(pool).await.context("applying migrations")?;
    Ok(())
}

/// The URL without its password, for messages.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_are_hidden() {
        assert_eq!(super::redact("postgres://u:pw@h/db"), "postgres://u:***@h/db");
        assert_eq!(super::redact("postgres://u@h/db"), "postgres://u@h/db");
    }
}
