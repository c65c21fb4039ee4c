//! Where the order writer's tables live in PostgreSQL, and which version of them is there.
//!
//! - [`Schema`]: the conf's `[postgres] schema`, a plain lower-case name. Every connection of
//!   the order writer has it as its only `search_path`, so every table and query is in it, the
//!   migrations' own table (`_sqlx_migrations`) included. Without it, nothing is set: the
//!   server's `search_path` applies (normally `public`), as before the setting existed.
//! - [`migrations`]: the migrations of `sql/`, compiled into the binary (or read from a folder,
//!   `migrations_dir`, when a developer asks);
//! - [`state`]: pure, what the applied migrations are against this binary's;
//! - [`migrate`] applies them (creating the schema when missing); [`verify`] refuses a schema
//!   older than the binary (`serve --no-migrate`, `order-writer check`).

use std::fmt;
use std::path::Path;

use anyhow::Context;
use sqlx::migrate::Migrator;
use sqlx::{AssertSqlSafe, PgPool};

/// The migrations' own table, in the schema.
const TABLE: &str = "_sqlx_migrations";

/// A schema name the order writer accepts: 1 to 63 of `a-z`, `0-9` and `_`, not starting with
/// a digit nor with `pg_` (PostgreSQL's own), so it is written the same quoted or not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema(String);

impl Schema {
    /// Checks `name`; the error says what a name may be.
    pub fn new(name: &str) -> Result<Self, String> {
        let plain = name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        let first_ok = name.bytes().next().is_some_and(|b| !b.is_ascii_digit());
        if !(plain && first_ok && name.len() <= 63) || name.starts_with("pg_") || name == "information_schema"
        {
            return Err(format!(
                "{name:?} is not a schema name the order writer uses: 1 to 63 of a-z, 0-9 and _, \
                 not starting with a digit or pg_ (e.g. \"seckill\")"
            ));
        }
        Ok(Self(name.to_string()))
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// How a message names `schema`.
pub fn shown(schema: Option<&Schema>) -> String {
    match schema {
        Some(s) => format!("schema {s}"),
        None => "the default schema (search_path)".to_string(),
    }
}

/// The migrations this binary applies: `sql/` as it was built (compiled in), or the `.sql` files
/// of `dir` (`migrations_dir`, for development). Their bookkeeping table is in `schema`.
pub async fn migrations(dir: Option<&Path>, schema: Option<&Schema>) -> anyhow::Result<Migrator> {
    let mut migrator = match dir {
        None => sqlx::migrate!("../sql"),
        Some(dir) => Migrator::new(dir)
            .await
            .with_context(|| format!("cannot read migrations in {}", dir.display()))?,
    };
    if let Some(s) = schema {
        migrator.dangerous_set_table_name(format!("\"{s}\".{TABLE}"));
    }
    Ok(migrator)
}

/// The newest migration of `migrations` (0 when it has none).
pub fn newest(migrations: &Migrator) -> i64 {
    known(migrations).iter().map(|k| k.version).max().unwrap_or(0)
}

/// One migration of the binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Known {
    /// Its version (the file's number).
    pub version: i64,
    /// Its description (the file's name after the number).
    pub description: String,
    /// SHA-384 of its text.
    pub checksum: Vec<u8>,
}

/// One migration PostgreSQL has a row for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// Its version.
    pub version: i64,
    /// SHA-384 of the text that was applied.
    pub checksum: Vec<u8>,
    /// False when it failed half-way (a migration without a transaction).
    pub success: bool,
}

/// What the schema is against the binary's migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Every migration of the binary is applied, and nothing else.
    Current {
        /// The newest.
        version: i64,
    },
    /// Every migration of the binary is applied, and newer ones it does not know (a newer
    /// order writer migrated): it serves, the newer migrations being additive.
    Newer {
        /// The newest applied.
        version: i64,
        /// The binary's newest.
        binary: i64,
    },
    /// Migrations of the binary are not applied yet.
    Older {
        /// The newest applied (`None`: none at all).
        version: Option<i64>,
        /// The missing ones, version and description.
        missing: Vec<(i64, String)>,
    },
    /// A migration failed half-way: a human looks first.
    Dirty {
        /// Its version.
        version: i64,
    },
    /// A migration was applied from another text than the binary's.
    Changed {
        /// Its version.
        version: i64,
    },
}

impl fmt::Display for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            State::Current { version } => write!(f, "at migration {version}, this binary's newest"),
            State::Newer { version, binary } => {
                write!(f, "at migration {version}, newer than this binary's {binary}")
            }
            State::Older { version: Some(v), missing } => {
                write!(f, "at migration {v}, {} behind this binary", missing.len())
            }
            State::Older { version: None, .. } => write!(f, "not migrated"),
            State::Dirty { version } => write!(f, "migration {version} failed half-way"),
            State::Changed { version } => write!(f, "migration {version} applied from another text"),
        }
    }
}

/// The binary's migrations (up migrations only).
pub fn known(migrations: &Migrator) -> Vec<Known> {
    migrations
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .map(|m| Known {
            version: m.version,
            description: m.description.to_string(),
            checksum: m.checksum.to_vec(),
        })
        .collect()
}

/// Pure: the [`State`] of `applied` against `known`.
pub fn state(known: &[Known], applied: &[Applied]) -> State {
    if let Some(a) = applied.iter().find(|a| !a.success) {
        return State::Dirty { version: a.version };
    }
    let changed =
        applied.iter().find(|a| known.iter().any(|k| k.version == a.version && k.checksum != a.checksum));
    if let Some(a) = changed {
        return State::Changed { version: a.version };
    }
    let version = applied.iter().map(|a| a.version).max();
    let missing: Vec<_> = known
        .iter()
        .filter(|k| !applied.iter().any(|a| a.version == k.version))
        .map(|k| (k.version, k.description.clone()))
        .collect();
    if !missing.is_empty() {
        return State::Older { version, missing };
    }
    let binary = known.iter().map(|k| k.version).max().unwrap_or(0);
    match version {
        Some(v) if v > binary => State::Newer { version: v, binary },
        v => State::Current { version: v.unwrap_or(0) },
    }
}

/// Pure: why `state` refuses to serve, `None` when it serves. `place` names the schema.
pub fn refusal(state: &State, place: &str) -> Option<String> {
    match state {
        State::Current { .. } | State::Newer { .. } => None,
        State::Older { version, missing } => {
            let list: Vec<String> = missing.iter().map(|(v, d)| format!("{v} ({d})")).collect();
            let have = match version {
                Some(v) => format!("has migrations up to {v}"),
                None => "has no migration applied".to_string(),
            };
            Some(format!(
                "{place} is older than this order-writer: it {have}, and lacks {}; run \
                 `order-writer migrate` first (or start `serve` without --no-migrate)",
                list.join(", ")
            ))
        }
        State::Dirty { version } => Some(format!(
            "{place}: migration {version} failed half-way (success = false in {TABLE}); repair it by hand"
        )),
        State::Changed { version } => Some(format!(
            "{place}: migration {version} was applied from another text than this order-writer's \
             (checksum differs)"
        )),
    }
}

/// Reads the applied migrations of `schema` (none when its table does not exist yet).
pub async fn applied(pool: &PgPool, schema: Option<&Schema>) -> anyhow::Result<Vec<Applied>> {
    let table = match schema {
        Some(s) => format!("\"{s}\".{TABLE}"),
        None => TABLE.to_string(),
    };
    let exists: Option<String> = sqlx::query_scalar("SELECT to_regclass($1)::text")
        .bind(&table)
        .fetch_one(pool)
        .await
        .context("looking for the migrations' table")?;
    if exists.is_none() {
        return Ok(Vec::new());
    }
    let rows: Vec<(i64, Vec<u8>, bool)> =
        // `table` is a checked Schema's name (a-z, 0-9, _) and a constant.
        sqlx::query_as(AssertSqlSafe(format!("SELECT version, checksum, success FROM {table} ORDER BY version")))
            .fetch_all(pool)
            .await
            .with_context(|| format!("reading {table}"))?;
    Ok(rows.into_iter().map(|(version, checksum, success)| Applied { version, checksum, success }).collect())
}

/// The [`State`] of `schema` against `migrations`.
pub async fn read_state(
    pool: &PgPool,
    schema: Option<&Schema>,
    migrations: &Migrator,
) -> anyhow::Result<State> {
    Ok(state(&known(migrations), &applied(pool, schema).await?))
}

/// Checks that `pool`'s connections are in `schema`: a pooler that drops the `options` startup
/// parameter would leave them in the server's default schema, and orders would go there.
pub async fn in_schema(pool: &PgPool, schema: Option<&Schema>) -> anyhow::Result<()> {
    let Some(s) = schema else { return Ok(()) };
    let setting: String = sqlx::query_scalar("SELECT current_setting('search_path')").fetch_one(pool).await?;
    if setting != s.name() {
        anyhow::bail!(
            "connections are in schema {setting}, not {s}: the `options` startup parameter \
             (search_path) did not reach the server (a connection pooler dropped it?)"
        );
    }
    Ok(())
}

/// Refuses a schema that is not at least the binary's ([`refusal`]); the [`State`] otherwise.
pub async fn verify(pool: &PgPool, schema: Option<&Schema>, migrations: &Migrator) -> anyhow::Result<State> {
    in_schema(pool, schema).await?;
    let state = read_state(pool, schema, migrations).await?;
    if let Some(why) = refusal(&state, &shown(schema)) {
        anyhow::bail!(why);
    }
    Ok(state)
}

/// Creates `schema` when missing (only then: a schema made beforehand by a DBA needs no CREATE
/// right on the database), then applies every migration not applied yet. `pool`'s connections
/// must have `schema` as their `search_path` ([`crate::db::connect_in`]).
pub async fn migrate(pool: &PgPool, schema: Option<&Schema>, migrations: &Migrator) -> anyhow::Result<()> {
    in_schema(pool, schema).await?;
    if let Some(s) = schema {
        let exists: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                .bind(s.name())
                .fetch_one(pool)
                .await
                .context("looking for the schema")?;
        if !exists {
            sqlx::query(AssertSqlSafe(format!("CREATE SCHEMA IF NOT EXISTS \"{s}\"")))
                .execute(pool)
                .await
                .with_context(|| format!("creating schema {s}"))?;
        }
    }
    migrations.run(pool).await.with_context(|| format!("applying migrations in {}", shown(schema)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_lower_case_identifiers() {
        for good in ["seckill", "public", "_x", "shop_2", &"a".repeat(63)] {
            assert_eq!(Schema::new(good).unwrap().name(), good);
        }
        for bad in
            ["", "Seckill", "2shop", "pg_shop", "information_schema", "a-b", "a b", "x\"y", &"a".repeat(64)]
        {
            let e = Schema::new(bad).unwrap_err();
            assert!(e.contains("a-z, 0-9 and _"), "{bad}: {e}");
        }
    }

    fn k(version: i64, sum: u8) -> Known {
        Known { version, description: format!("m{version}"), checksum: vec![sum] }
    }
    fn a(version: i64, sum: u8, success: bool) -> Applied {
        Applied { version, checksum: vec![sum], success }
    }

    #[test]
    fn the_state_compares_applied_with_the_binary() {
        let known = [k(1, 1), k(2, 2), k(3, 3)];
        let all = [a(1, 1, true), a(2, 2, true), a(3, 3, true)];
        assert_eq!(state(&known, &all), State::Current { version: 3 });
        assert_eq!(
            state(&known, &all[..1]),
            State::Older { version: Some(1), missing: vec![(2, "m2".into()), (3, "m3".into())] }
        );
        assert_eq!(
            state(&known, &[]),
            State::Older {
                version: None,
                missing: known.iter().map(|k| (k.version, k.description.clone())).collect()
            }
        );
        let newer = [all.to_vec(), vec![a(4, 4, true)]].concat();
        assert_eq!(state(&known, &newer), State::Newer { version: 4, binary: 3 });
        assert_eq!(state(&known, &[a(1, 1, true), a(2, 9, true)]), State::Changed { version: 2 });
        assert_eq!(state(&known, &[a(1, 1, true), a(2, 2, false)]), State::Dirty { version: 2 });
    }

    #[test]
    fn only_an_older_dirty_or_changed_schema_is_refused() {
        assert_eq!(refusal(&State::Current { version: 4 }, "schema s"), None);
        assert_eq!(refusal(&State::Newer { version: 5, binary: 4 }, "schema s"), None);
        let older = State::Older { version: Some(3), missing: vec![(4, "held per user".into())] };
        let why = refusal(&older, "schema s").unwrap();
        assert!(
            why.starts_with("schema s is older than this order-writer: it has migrations up to 3"),
            "{why}"
        );
        assert!(why.contains("lacks 4 (held per user)") && why.contains("order-writer migrate"), "{why}");
        assert!(refusal(&State::Dirty { version: 2 }, "s").unwrap().contains("failed half-way"));
        assert!(refusal(&State::Changed { version: 2 }, "s").unwrap().contains("checksum differs"));
    }

    #[test]
    fn the_compiled_in_migrations_are_sql_s() {
        let m = sqlx::migrate!("../sql");
        let files = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../sql")).unwrap().count();
        assert_eq!(known(&m).len(), files, "every file of sql/ is compiled in");
        assert_eq!(newest(&m), files as i64);
    }
}
