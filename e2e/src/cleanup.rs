//! What a test (or a run of a script) makes on the stack, owned and deleted again: a database,
//! a topic, a campaign's Redis keys.
//!
//! Each owner deletes what it made when it is dropped, so a test cleans up whether it passes or
//! panics (a panic unwinds through the drop). The drop blocks on a thread of its own with a
//! runtime of its own (a drop cannot `.await`, and inside a test's runtime it may not block on
//! that runtime), bounded by [`CLEANUP_WITHIN`]; a failure is printed, never a panic (a second
//! panic while unwinding would abort the test binary). `SECKILL_KEEP_FAILED=1` keeps what a
//! failing test made, to look at, and prints its names.
//!
//! A campaign's keys all carry its hash tag (`protocol::keys`): `sk:{<id>}:…`, a bucket's
//! `sk:{<id>#<B>.<n>}:…`, a spent challenge's `sk:challenge:{<id>/…}`. They are found with one
//! bounded `SCAN … MATCH` on the campaign's own tag, on every master of a Redis Cluster.

use std::time::Duration;

use anyhow::Context;
use fred::prelude::{ClientLike, KeysInterface};
use fred::types::scan::Scanner;
use futures::StreamExt;

use crate::stack;

/// How long one owner's cleanup may take before it gives up (and says so).
pub const CLEANUP_WITHIN: Duration = Duration::from_secs(30);

/// Keys asked for per `SCAN` call.
const SCAN_COUNT: u32 = 1000;

/// The most `SCAN` pages one search reads, all masters together (with [`SCAN_COUNT`], about ten
/// million keys).
const MAX_SCAN_PAGES: usize = 10_000;

/// Whether what is being dropped stays: the thread is unwinding from a panic (a failed test)
/// and `SECKILL_KEEP_FAILED` is set to 1.
fn keep_failed(what: &str) -> bool {
    let keep = std::thread::panicking() && std::env::var("SECKILL_KEEP_FAILED").is_ok_and(|v| v == "1");
    if keep {
        eprintln!("cleanup: kept {what} (SECKILL_KEEP_FAILED=1)");
    }
    keep
}

/// Runs the future `work` makes on a fresh thread with its own runtime, for at most
/// [`CLEANUP_WITHIN`], and waits for it; a failure is printed with `what`.
fn block_on_own_thread<F, Fut>(what: String, work: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let thread = std::thread::spawn(move || -> anyhow::Result<()> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            tokio::time::timeout(CLEANUP_WITHIN, work())
                .await
                .map_err(|_| anyhow::anyhow!("not done within {CLEANUP_WITHIN:?}"))?
        })
    });
    match thread.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("cleanup: deleting {what} failed: {e:#}"),
        Err(_) => eprintln!("cleanup: deleting {what} panicked"),
    }
}

// --- PostgreSQL ---------------------------------------------------------------------------------

/// A database this test made, dropped (`WITH (FORCE)`: its connections are ended) with it.
pub struct Database {
    /// Its name (`t_` and 12 hex digits).
    pub name: String,
    /// Its URL.
    pub url: String,
    admin_url: String,
}

impl Database {
    /// Creates an empty database with a unique name on the stack's PostgreSQL.
    pub async fn create() -> anyhow::Result<Database> {
        use sqlx::Executor;
        let admin_url = stack::pg_admin_url();
        let mut conn = stack::pg_connect(&admin_url).await?;
        let name = stack::unique("t_");
        // The name is ours (hex digits), not input: safe to format into the statement.
        conn.execute(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}"))).await?;
        let base = admin_url.rsplit_once('/').map(|(b, _)| b).unwrap_or(&admin_url);
        let url = format!("{base}/{name}");
        Ok(Database { name, url, admin_url })
    }
}

/// It reads as its URL.
impl std::ops::Deref for Database {
    type Target = String;
    fn deref(&self) -> &String {
        &self.url
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        if keep_failed(&format!("database {}", self.name)) {
            return;
        }
        let (admin, name) = (self.admin_url.clone(), self.name.clone());
        block_on_own_thread(format!("database {name}"), move || async move {
            drop_database(&admin, &name, true).await.map(|_| ())
        });
    }
}

/// A database name safe to format into a statement: `[a-z0-9_]`, 1 to 63 characters.
fn safe_db_name(name: &str) -> anyhow::Result<&str> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    anyhow::ensure!(ok, "{name:?} is not a database name of the stack's tests or sales");
    Ok(name)
}

/// Drops database `name` through the admin URL `admin`; returns whether it existed. With
/// `force`, its connections are ended first; without, a database something is connected to is
/// an error (PostgreSQL refuses), which is how a run still in progress is left alone.
pub async fn drop_database(admin: &str, name: &str, force: bool) -> anyhow::Result<bool> {
    use sqlx::Executor;
    let name = safe_db_name(name)?;
    let mut conn = stack::pg_connect(admin).await?;
    if !database_exists_on(&mut conn, name).await? {
        return Ok(false);
    }
    let with = if force { " WITH (FORCE)" } else { "" };
    conn.execute(sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}{with}")))
        .await
        .with_context(|| format!("dropping database {name}"))?;
    Ok(true)
}

/// Whether database `name` exists on the PostgreSQL of the admin URL `admin`.
pub async fn database_exists(admin: &str, name: &str) -> anyhow::Result<bool> {
    let mut conn = stack::pg_connect(admin).await?;
    database_exists_on(&mut conn, name).await
}

async fn database_exists_on(conn: &mut sqlx::PgConnection, name: &str) -> anyhow::Result<bool> {
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(conn)
        .await?;
    Ok(n > 0)
}

/// The databases whose names start with `prefix`.
pub async fn databases_like(admin: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let mut conn = stack::pg_connect(admin).await?;
    let all: Vec<String> =
        sqlx::query_scalar("SELECT datname FROM pg_database ORDER BY datname").fetch_all(&mut conn).await?;
    Ok(all.into_iter().filter(|d| d.starts_with(prefix)).collect())
}

// --- Kafka --------------------------------------------------------------------------------------

/// A topic this test made, deleted with it.
pub struct Topic {
    /// Its name (the prefix and 12 hex digits).
    pub name: String,
    broker: String,
}

impl Topic {
    /// Creates a topic named `prefix` and 12 hex digits with `partitions` partitions
    /// (replication 1) through `client`, a client of the stack's broker, as the order writer
    /// does (it returns once every partition has a leader).
    pub async fn create(
        client: &rskafka::client::Client,
        prefix: &str,
        partitions: i32,
    ) -> anyhow::Result<Topic> {
        let name = stack::unique(prefix);
        let within = stack::CONNECT_TIMEOUT * 3;
        let created =
            tokio::time::timeout(within, backend::kafka::create_topic(client, &name, partitions, 1))
                .await
                .with_context(|| format!("creating topic {name}: no answer within {within:?}"))??;
        anyhow::ensure!(created, "topic {name} existed already");
        Ok(Topic::adopt(&name))
    }

    /// Owns `name`, a topic made elsewhere on the stack's broker.
    pub fn adopt(name: &str) -> Topic {
        Topic { name: name.to_string(), broker: stack::kafka_broker() }
    }
}

impl Drop for Topic {
    fn drop(&mut self) {
        if keep_failed(&format!("topic {}", self.name)) {
            return;
        }
        let (broker, name) = (self.broker.clone(), self.name.clone());
        // With the order writer's events topic of it, when a writer made one.
        block_on_own_thread(format!("topic {name}"), move || async move {
            delete_topic(&broker, &name).await?;
            delete_topic(&broker, &backend::workers::events::default_topic(&name)).await.map(|_| ())
        });
    }
}

/// Deletes `topic` on the broker `broker` (`host:port`, plain TCP) through the cluster's
/// controller; returns whether it existed.
pub async fn delete_topic(broker: &str, topic: &str) -> anyhow::Result<bool> {
    let client = stack::kafka_client(broker).await?;
    delete_topic_with(&client, topic).await
}

/// The same through a client of the broker. The controller answers once the deletion is
/// committed; a broker's metadata may list the topic a moment longer, so this also waits (at most
/// [`TOPIC_GONE_WITHIN`]) until the broker's metadata no longer lists it.
pub async fn delete_topic_with(client: &rskafka::client::Client, topic: &str) -> anyhow::Result<bool> {
    use rskafka::client::error::{Error as KafkaError, ProtocolError};
    let controller = client.controller_client().context("no controller")?;
    let existed = match controller.delete_topic(topic, 5_000).await {
        Ok(()) => true,
        Err(KafkaError::ServerError { protocol_error: ProtocolError::UnknownTopicOrPartition, .. }) => false,
        Err(e) => return Err(e).with_context(|| format!("deleting topic {topic}")),
    };
    let deadline = tokio::time::Instant::now() + TOPIC_GONE_WITHIN;
    loop {
        let listed = client.list_topics().await.context("listing topics")?;
        if !listed.iter().any(|t| t.name == topic) {
            return Ok(existed);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "topic {topic} is still listed {TOPIC_GONE_WITHIN:?} after its deletion"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// How long [`delete_topic_with`] waits for the broker's metadata to drop a deleted topic.
pub const TOPIC_GONE_WITHIN: Duration = Duration::from_secs(10);

/// The topics of the broker at `broker` whose names start with `prefix`.
pub async fn topics_like(broker: &str, prefix: &str) -> anyhow::Result<Vec<String>> {
    let client = stack::kafka_client(broker).await?;
    let mut names: Vec<String> = client
        .list_topics()
        .await
        .context("listing topics")?
        .into_iter()
        .map(|t| t.name)
        .filter(|n| n.starts_with(prefix))
        .collect();
    names.sort();
    Ok(names)
}

// --- Redis --------------------------------------------------------------------------------------

/// A campaign id this test uses, whose Redis keys (every bucket's, every spent challenge's)
/// are deleted with it. It reads as the id (`&campaign` is a `&str`, `{campaign}` prints it).
pub struct Campaign {
    id: String,
    redis_url: String,
}

impl Campaign {
    /// A unique campaign id (`prefix` and 12 hex digits) on the stack's Redis.
    pub fn new(prefix: &str) -> Campaign {
        Campaign::on(prefix, &stack::redis_url())
    }

    /// The same on the Redis (or Redis Cluster) at `redis_url`.
    pub fn on(prefix: &str, redis_url: &str) -> Campaign {
        Campaign { id: stack::unique(prefix), redis_url: redis_url.to_string() }
    }

    /// Owns the keys of `id`, a campaign id made elsewhere, on the Redis at `redis_url`.
    pub fn adopt(id: &str, redis_url: &str) -> Campaign {
        Campaign { id: id.to_string(), redis_url: redis_url.to_string() }
    }

    /// Its id.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl std::ops::Deref for Campaign {
    type Target = String;
    fn deref(&self) -> &String {
        &self.id
    }
}

impl std::fmt::Display for Campaign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.id)
    }
}

impl std::fmt::Debug for Campaign {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.id)
    }
}

impl Drop for Campaign {
    fn drop(&mut self) {
        if keep_failed(&format!("the Redis keys of campaign {}", self.id)) {
            return;
        }
        let (url, id) = (self.redis_url.clone(), self.id.clone());
        block_on_own_thread(format!("the Redis keys of campaign {id}"), move || async move {
            delete_campaign_keys(&url, &id).await.map(|_| ())
        });
    }
}

/// The `SCAN` pattern of campaign `id`'s keys: `sk:` then anything, then `{<id>` closed by `}`
/// (the campaign's own keys), `#` (a bucket's) or `/` (a spent challenge's). Glob characters
/// in the id are escaped (a valid campaign id has none).
pub fn campaign_pattern(id: &str) -> String {
    let mut escaped = String::with_capacity(id.len());
    for c in id.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    format!("sk:*{{{escaped}[}}#/]*")
}

/// Every key matching `pattern` on the Redis of `client`: a bounded `SCAN` (on a cluster, on
/// every master).
pub async fn scan_keys(client: &fred::prelude::Client, pattern: &str) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    let mut pages = if client.is_clustered() {
        client.scan_cluster(pattern.to_string(), Some(SCAN_COUNT), None).boxed()
    } else {
        client.scan(pattern.to_string(), Some(SCAN_COUNT), None).boxed()
    };
    let mut read = 0;
    while let Some(page) = pages.next().await {
        let mut page = page.with_context(|| format!("SCAN MATCH {pattern}"))?;
        for key in page.take_results().unwrap_or_default() {
            if let Some(k) = key.as_str() {
                out.push(k.to_string());
            }
        }
        read += 1;
        anyhow::ensure!(
            read < MAX_SCAN_PAGES,
            "SCAN MATCH {pattern}: more than {MAX_SCAN_PAGES} pages, gave up"
        );
        page.next();
    }
    out.sort();
    out.dedup();
    Ok(out)
}

/// Deletes the keys of campaign `id` on the Redis (or Redis Cluster) at `url`; returns how
/// many there were.
pub async fn delete_campaign_keys(url: &str, id: &str) -> anyhow::Result<usize> {
    let client = stack::redis_client(url).await?;
    let keys = scan_keys(&client, &campaign_pattern(id)).await?;
    delete_keys(&client, &keys).await?;
    let _ = client.quit().await;
    Ok(keys.len())
}

/// Deletes `keys` (`UNLINK`), grouped by hash slot so that each call is valid on a cluster.
pub async fn delete_keys(client: &fred::prelude::Client, keys: &[String]) -> anyhow::Result<()> {
    let mut by_slot: std::collections::BTreeMap<u16, Vec<&String>> = Default::default();
    for k in keys {
        by_slot.entry(fred::util::redis_keyslot(k.as_bytes())).or_default().push(k);
    }
    for group in by_slot.values() {
        for chunk in group.chunks(500) {
            let chunk: Vec<String> = chunk.iter().map(|k| k.to_string()).collect();
            let _: i64 = client.unlink(chunk).await.context("UNLINK")?;
        }
    }
    Ok(())
}

/// How many keys of campaign `id` the Redis (or Redis Cluster) at `url` has.
pub async fn campaign_key_count(url: &str, id: &str) -> anyhow::Result<usize> {
    let client = stack::redis_client(url).await?;
    let n = scan_keys(&client, &campaign_pattern(id)).await?.len();
    let _ = client.quit().await;
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_is_the_campaign_tag_closed_three_ways() {
        assert_eq!(campaign_pattern("gwab12"), "sk:*{gwab12[}#/]*");
        assert_eq!(campaign_pattern("a*b"), "sk:*{a\\*b[}#/]*");
    }

    #[test]
    fn only_plain_names_are_dropped() {
        assert!(safe_db_name("t_0123abcd").is_ok());
        assert!(safe_db_name("sale_sale20260101000000").is_ok());
        for bad in ["", "x; DROP DATABASE postgres", "T_UPPER", "a-b"] {
            assert!(safe_db_name(bad).is_err(), "{bad}");
        }
    }
}
