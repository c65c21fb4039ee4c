//! `sale-cleanup`: deletes what the demo's and the fault runs' sales left on a long-lived stack.
//!
//! A sale `<id>` (`e2e/lib.sh` `sale_create`) has the database `sale_<id>`, the topic
//! `reservations.<id>` and the Redis keys of campaign `<id>` (all its buckets', on every master of
//! a cluster). With `--prefix P`, every sale whose id starts with P (found by its database or
//! its topic) is deleted, but `--keep`'s, one begun less than `--min-age-secs` ago
//! (an id of P and a UTC `YYYYMMDDHHMMSS` stamp, as the demo's), and one whose database something
//! is still connected to (PostgreSQL refuses to drop it: a run in progress, on this stack from
//! another checkout). An empty prefix (or one with a character no id has) is refused, exit 2,
//! nothing deleted. With `--only ID`, that sale alone, its connections ended. Prints one line
//! per sale; exits non-zero when one could not be deleted for another reason than its use.

use std::collections::BTreeSet;

use clap::Parser;
use e2e::cleanup;

#[derive(Parser)]
#[command(about = "Deletes earlier sales (database, topic, Redis keys) of the demo or the fault runs")]
struct Args {
    /// Delete the sales whose id starts with this (1 or more of `a-z0-9_`).
    #[arg(long, conflicts_with = "only", required_unless_present = "only", value_parser = sale_prefix)]
    prefix: Option<String>,
    /// This sale alone (its database's connections are ended).
    #[arg(long)]
    only: Option<String>,
    /// A sale that stays (the run's own).
    #[arg(long)]
    keep: Option<String>,
    /// A sale whose id carries a stamp younger than this stays (it may be starting).
    #[arg(long, default_value_t = 300)]
    min_age_secs: i64,
    /// The stack's PostgreSQL, its admin database.
    #[arg(long, env = "SECKILL_PG_ADMIN_URL")]
    pg_admin_url: String,
    /// The stack's Kafka broker (`host:port`, plain TCP).
    #[arg(long, env = "SECKILL_KAFKA_BROKER")]
    broker: String,
    /// A Redis (or Redis Cluster) the sales may have keys on; repeat for several.
    #[arg(long)]
    redis: Vec<String>,
}

/// A `--prefix`: at least one character, all of them ones a sale's id has (`[a-z0-9_]`). An
/// empty prefix would match every sale on the stack (and `%`, a `LIKE` pattern's wildcard,
/// matches nothing an id has): refused before anything is connected to.
fn sale_prefix(p: &str) -> Result<String, String> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') {
        return Err(format!(
            "{p:?}: a prefix is 1 or more of a-z0-9_ (an empty one would delete every idle sale; \
             --only ID deletes one)"
        ));
    }
    Ok(p.to_string())
}

/// The database of sale `id`.
fn database_of(id: &str) -> String {
    format!("sale_{id}")
}

/// The topic of sale `id`.
fn topic_of(id: &str) -> String {
    format!("reservations.{id}")
}

/// When sale `id` began, from the UTC `YYYYMMDDHHMMSS` stamp that follows `prefix` in it.
fn begun_at(id: &str, prefix: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let stamp = id.strip_prefix(prefix)?;
    if stamp.len() != 14 || !stamp.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let t = chrono::NaiveDateTime::parse_from_str(stamp, "%Y%m%d%H%M%S").ok()?;
    Some(t.and_utc())
}

/// The sales of `found` to delete: those of `prefix`, but `keep` and those begun less than
/// `min_age_secs` before `now`; only ids of `[a-z0-9_]` (a database name formatted into a
/// statement).
fn to_delete(
    found: &BTreeSet<String>,
    prefix: &str,
    keep: Option<&str>,
    min_age_secs: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> Vec<String> {
    found
        .iter()
        .filter(|id| id.starts_with(prefix) && Some(id.as_str()) != keep)
        .filter(|id| id.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'))
        .filter(|id| begun_at(id, prefix).is_none_or(|t| (now - t).num_seconds() >= min_age_secs))
        .cloned()
        .collect()
}

/// What became of one sale.
enum Outcome {
    Deleted { keys: usize },
    InUse,
}

/// Deletes sale `id`: its database first (without `force`, refused while in use: then nothing
/// else is touched), then its topic and its keys on every Redis of `args`.
async fn delete_sale(args: &Args, id: &str, force: bool) -> anyhow::Result<Outcome> {
    let db = database_of(id);
    if let Err(e) = cleanup::drop_database(&args.pg_admin_url, &db, force).await {
        if format!("{e:#}").contains("is being accessed by other users") {
            return Ok(Outcome::InUse);
        }
        return Err(e);
    }
    cleanup::delete_topic(&args.broker, &topic_of(id)).await?;
    cleanup::delete_topic(&args.broker, &backend::workers::events::default_topic(&topic_of(id))).await?;
    let mut keys = 0;
    for url in &args.redis {
        keys += cleanup::delete_campaign_keys(url, id).await?;
    }
    Ok(Outcome::Deleted { keys })
}

/// The ids of the sales of `prefix` on the stack, from their databases and topics (names only
/// `sale_create` gives; a campaign id alone could be any test's).
async fn sales_of(args: &Args, prefix: &str) -> anyhow::Result<BTreeSet<String>> {
    let mut found = BTreeSet::new();
    for db in cleanup::databases_like(&args.pg_admin_url, &database_of(prefix)).await? {
        found.insert(db["sale_".len()..].to_string());
    }
    for topic in cleanup::topics_like(&args.broker, &topic_of(prefix)).await? {
        // A sale's events topic (`backend::workers::events::default_topic`) names the same sale.
        let id = &topic["reservations.".len()..];
        found.insert(id.strip_suffix(".order-events").unwrap_or(id).to_string());
    }
    Ok(found)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = Args::parse();
    let (ids, force) = match (&args.only, &args.prefix) {
        (Some(id), _) => (vec![id.clone()], true),
        (None, Some(prefix)) => {
            let found = sales_of(&args, prefix).await?;
            (to_delete(&found, prefix, args.keep.as_deref(), args.min_age_secs, chrono::Utc::now()), false)
        }
        (None, None) => anyhow::bail!("--prefix or --only"),
    };
    // A Redis that does not answer is skipped, not a failure of every sale.
    let mut reachable = Vec::new();
    for url in std::mem::take(&mut args.redis) {
        if e2e::stack::check_redis(&url).await.is_ok() {
            reachable.push(url);
        }
    }
    args.redis = reachable;
    let mut failed = 0;
    for id in &ids {
        match delete_sale(&args, id, force).await {
            Ok(Outcome::Deleted { keys }) => {
                println!("sale-cleanup: deleted sale {id} (database, topic, {keys} Redis keys)")
            }
            Ok(Outcome::InUse) => println!("sale-cleanup: kept sale {id}: its database is in use"),
            Err(e) => {
                failed += 1;
                eprintln!("sale-cleanup: sale {id}: {e:#}");
            }
        }
    }
    anyhow::ensure!(failed == 0, "{failed} of {} sales not deleted", ids.len());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_the_young_and_the_others_stay() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z").unwrap().to_utc();
        let found: BTreeSet<String> = [
            "sale20261202100000", // two hours old: deleted
            "sale20261202115900", // a minute old: may be starting, stays
            "sale20261202090000", // the run's own: stays
            "salex",              // no stamp: old
            "other20261202000000",
            "sale_Upper", // not a name this tool formats into a statement
        ]
        .into_iter()
        .map(String::from)
        .collect();
        let out = to_delete(&found, "sale", Some("sale20261202090000"), 300, now);
        assert_eq!(out, vec!["sale20261202100000".to_string(), "salex".to_string()]);
        // With no age bound (the fault runs' own stack), the young go too.
        let out = to_delete(&found, "sale", None, 0, now);
        assert_eq!(out.len(), 4, "{out:?}");
    }
}
