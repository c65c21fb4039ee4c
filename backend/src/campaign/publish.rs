//! `order-writer campaign publish <id>`: the campaign file → PostgreSQL (the stock's source of
//! truth) → Redis (the published copy the gateway reserves from) → READY.
//!
//! Running it twice is harmless; it never resets a campaign that is LIVE or has reservations
//! (restarting any process never refills stock).
//!
//! A campaign with hot-stock buckets (`buckets = B`) is published bucket by bucket, each with its
//! share of the stock ([`protocol::scripts::bucket_shares`]). B is stored while the campaign is
//! DRAFT only: a file asking another B later is refused (a buyer's home bucket must never move
//! under a live sale).
//!
//! It is also how an operator applies the `pause_replenish` switch of a live campaign: edit the
//! file, publish again. The switch goes to PostgreSQL and to Redis (`lua/pause.lua`), whatever
//! the stock's state; turning it off returns the units released meanwhile (set aside) to the
//! sale at once, with a replenish message to the gateways.

use std::path::{Path, PathBuf};

use anyhow::Context;
use fred::prelude::Client as RedisClient;
use protocol::campaign::Campaign;
use protocol::conf::ConfError;
use protocol::control::{Control, Fleet, State};
use protocol::keys::Bucket;
use protocol::scripts::{PublishOutcome, PublishSpec};
use sqlx::PgPool;

use crate::app::{Connections, COMMAND_POOL};
use crate::redis::RedisScripts;

/// What `publish` did, for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Published {
    /// Stock loaded into Redis; the campaign is READY.
    Ready {
        /// Stock version loaded.
        stock_version: i64,
        /// Units.
        stock: i64,
    },
    /// Already READY with this stock version; nothing changed.
    Unchanged {
        /// Stock version.
        stock_version: i64,
    },
    /// LIVE or has reservations: nothing changed.
    RefusedLive {
        /// Why.
        detail: String,
    },
}

impl std::fmt::Display for Published {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Published::Ready { stock_version, stock } => {
                write!(
                    f,
                    "published: {stock} units loaded into Redis (stock version {stock_version}); state READY"
                )
            }
            Published::Unchanged { stock_version } => {
                write!(f, "unchanged: already READY with stock version {stock_version}")
            }
            Published::RefusedLive { detail } => write!(f, "refused, nothing changed: {detail}"),
        }
    }
}

/// Publishes the campaign of `conf/campaigns/<id>.toml`.
/// `order-writer campaign publish ID` (applies the migrations first).
/// Then writes the campaign's facts and this writer's side of the contract into its control hash
/// ([`protocol::control`]) and, with `[fleet]`, waits for every gateway to read them: a gateway
/// whose files disagree (a frozen field, the signing key, the topic) does not sell the campaign,
/// and the command fails naming it.
pub async fn run(conns: &Connections<'_>, id: &str) -> anyhow::Result<()> {
    let pool = conns.migrated_postgres(COMMAND_POOL).await?;
    let redis = conns.redis().await?;
    let scripts = conns.scripts()?;
    let out = publish(&pool, &redis, &scripts, &conns.conf().campaigns_dir, id).await?;
    println!("campaign {id}: {out}");
    let c = Campaign::load(&conns.conf().campaigns_dir.join(format!("{id}.toml")))?;
    for said in window_not_applied(&pool, &c).await? {
        println!("  note: {said}");
    }
    let version = write_facts(&redis, &c, &super::fleet::of_writer(conns.conf())).await?;
    super::operate::converge(conns, id, version).await?;
    if conns.conf().fleet.gateways.is_empty() {
        return Ok(());
    }
    let seen = super::fleet::Gateways::new(&conns.conf().fleet)?.serving().await;
    let refusing: Vec<String> = seen
        .iter()
        .filter_map(|s| {
            s.campaign(id)
                .filter(|c| !c.selling)
                .map(|c| format!("{}: {}", s.gateway, c.disagreements.join("; ")))
        })
        .collect();
    if !refusing.is_empty() {
        anyhow::bail!(
            "{} gateway(s) do not sell campaign {id}, their files disagree:\n  {}",
            refusing.len(),
            refusing.join("\n  ")
        );
    }
    Ok(())
}

/// The window fields of `c` that differ from what PostgreSQL keeps since the publish (said, never
/// ignored silently): the gateways apply them at their reload, PostgreSQL does not.
async fn window_not_applied(pool: &PgPool, c: &Campaign) -> anyhow::Result<Vec<String>> {
    let row: Option<(String, chrono::DateTime<chrono::Utc>, chrono::DateTime<chrono::Utc>, i64)> =
        sqlx::query_as("SELECT state, starts_at, ends_at, pay_window_secs FROM campaigns WHERE id = $1")
            .bind(&c.id)
            .fetch_optional(pool)
            .await?;
    let Some((state, starts, ends, pay)) = row.filter(|r| r.0 != "DRAFT") else { return Ok(Vec::new()) };
    let mut out = Vec::new();
    let keep = "the gateways apply the file's at their reload, PostgreSQL keeps the published one (orders' pay-by and `end` read it)";
    if c.starts_at.to_utc() != starts {
        out.push(format!(
            "starts_at is {starts} published ({state}), {} in the file: {keep}",
            c.starts_at.to_utc()
        ));
    }
    if c.ends_at.to_utc() != ends {
        out.push(format!(
            "ends_at is {ends} published, {} in the file: {keep}; move the end with campaign extend",
            c.ends_at.to_utc()
        ));
    }
    if c.pay_window_secs != pay {
        out.push(format!("pay_window_secs is {pay} published, {} in the file: {keep}", c.pay_window_secs));
    }
    Ok(out)
}

/// Writes the published facts of `c` and `fleet` into the control hash (its state stays, OPEN
/// when it had none) and bumps its version; returns the version.
pub async fn write_facts(redis: &RedisClient, c: &Campaign, fleet: &Fleet) -> anyhow::Result<u64> {
    use fred::prelude::{HashesInterface, TransactionInterface};
    let key = protocol::keys::control_key(&c.id);
    let fields: Vec<(String, String)> =
        Control::published_fields(c, fleet).into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let tx = redis.multi();
    let _: () = tx.hset(&key, fields).await?;
    let _: () = tx.hsetnx(&key, "state", State::Open.as_str()).await?;
    let _: () = tx.hincrby(&key, "version", 1).await?;
    let (_, _, version): (i64, i64, i64) = tx.exec(true).await.context("writing the control hash")?;
    Ok(version.max(0) as u64)
}

pub async fn publish(
    pool: &PgPool,
    redis: &RedisClient,
    scripts: &RedisScripts,
    campaigns_dir: &Path,
    id: &str,
) -> anyhow::Result<Published> {
    let file = campaign_file(campaigns_dir, id)?;
    let c = Campaign::load(&file)?;
    let row = record(pool, &file, &c, id).await?;
    let buckets = row.buckets.max(1) as u32;
    let pause = c.switches.pause_replenish;
    if row.state == "LIVE" || row.state == "ENDED" || row.sold > 0 {
        apply_pause(redis, scripts, id, buckets, pause).await?;
        let (state, sold) = (&row.state, row.sold);
        return Ok(Published::RefusedLive {
            detail: format!(
                "campaign {id} is {state} in PostgreSQL with {sold} sold; its stock is never reset"
            ),
        });
    }
    let result = load(redis, scripts, id, buckets, pause, row).await?;
    if matches!(result, Published::RefusedLive { .. }) {
        return Ok(result);
    }
    // 3. READY in PostgreSQL (never moves a LIVE row back).
    sqlx::query("UPDATE campaigns SET state = 'READY', updated_at = now() WHERE id = $1 AND state IN ('DRAFT', 'READY')")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(result)
}

/// The file of campaign `id` in `campaigns_dir`; an id that is not one, or has no file, is
/// refused.
fn campaign_file(campaigns_dir: &Path, id: &str) -> anyhow::Result<PathBuf> {
    if !protocol::keys::valid_campaign_id(id) {
        anyhow::bail!("{id:?} is not a campaign id (1 to 64 of A-Z a-z 0-9 _ -)");
    }
    let file = campaigns_dir.join(format!("{id}.toml"));
    if !file.exists() {
        anyhow::bail!("unknown campaign {id:?}: no file {}", file.display());
    }
    Ok(file)
}

/// Publish's first step, PostgreSQL: one upsert in one transaction, and the row as it is then.
/// Nothing is written when the campaign is ENDED, or past DRAFT and `c` (of `file`) changes what
/// is frozen.
async fn record(pool: &PgPool, file: &Path, c: &Campaign, id: &str) -> anyhow::Result<PublishedRow> {
    let mut tx = pool.begin().await?;
    upsert(&mut tx, c, id).await?;
    let row: PublishedRow = sqlx::query_as(
        "SELECT state, stock_version, total_stock, sold, per_user_limit, sku, price_cents, price_version, buckets,
                stock_added
           FROM campaigns WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    if let Err(e) = still_publishable(&row, file, c, id) {
        tx.rollback().await?;
        return Err(e);
    }
    tx.commit().await?;
    Ok(row)
}

/// The upsert: a new row is inserted as DRAFT; a DRAFT row takes the whole file (new stock and
/// price versions when they changed); READY/LIVE/ENDED rows take only the pause_replenish switch
/// (kept for the record; what acts on it is Redis, see apply_pause).
async fn upsert(tx: &mut sqlx::PgConnection, c: &Campaign, id: &str) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO campaigns (id, sku, total_stock, per_user_limit, price_cents, starts_at, ends_at,
                                pay_window_secs, pause_replenish, buckets)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
         ON CONFLICT (id) DO UPDATE SET
             pause_replenish = EXCLUDED.pause_replenish,
             buckets = CASE WHEN campaigns.state = 'DRAFT' THEN EXCLUDED.buckets ELSE campaigns.buckets END,
             updated_at = now(),
             sku = CASE WHEN campaigns.state = 'DRAFT' THEN EXCLUDED.sku ELSE campaigns.sku END,
             per_user_limit = CASE WHEN campaigns.state = 'DRAFT'
                                   THEN EXCLUDED.per_user_limit ELSE campaigns.per_user_limit END,
             price_cents = CASE WHEN campaigns.state = 'DRAFT'
                                THEN EXCLUDED.price_cents ELSE campaigns.price_cents END,
             starts_at = CASE WHEN campaigns.state = 'DRAFT' THEN EXCLUDED.starts_at ELSE campaigns.starts_at END,
             ends_at = CASE WHEN campaigns.state = 'DRAFT' THEN EXCLUDED.ends_at ELSE campaigns.ends_at END,
             pay_window_secs = CASE WHEN campaigns.state = 'DRAFT'
                                    THEN EXCLUDED.pay_window_secs ELSE campaigns.pay_window_secs END,
             stock_version = campaigns.stock_version
                 + (campaigns.state = 'DRAFT' AND campaigns.total_stock <> EXCLUDED.total_stock)::int,
             price_version = campaigns.price_version
                 + (campaigns.state = 'DRAFT' AND campaigns.price_cents <> EXCLUDED.price_cents)::int,
             total_stock = CASE WHEN campaigns.state = 'DRAFT'
                                THEN EXCLUDED.total_stock ELSE campaigns.total_stock END",
    )
    .bind(id)
    .bind(&c.sku)
    .bind(c.stock)
    .bind(c.per_user_limit)
    .bind(c.price_cents)
    .bind(c.starts_at.to_utc())
    .bind(c.ends_at.to_utc())
    .bind(c.pay_window_secs)
    .bind(c.switches.pause_replenish)
    .bind(c.buckets as i32)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// Refuses an ENDED campaign, and a file `c` (at `file`) that changes what is frozen once the
/// campaign is past DRAFT: the file says what the sale no longer is.
fn still_publishable(row: &PublishedRow, file: &Path, c: &Campaign, id: &str) -> anyhow::Result<()> {
    let state = &row.state;
    if state == "ENDED" {
        anyhow::bail!("campaign {id} is ENDED: it is never published again (its orders stay in PostgreSQL)");
    }
    if state == "DRAFT" {
        return Ok(());
    }
    let published = Frozen {
        stock: row.total_stock - row.stock_added,
        price_cents: row.price_cents,
        limit: row.per_user_limit,
        sku: &row.sku,
        buckets: row.buckets.max(1) as u32,
    };
    let Some((field, why)) = published.differs_from(c) else { return Ok(()) };
    Err(ConfError::at_field(
        file,
        field,
        format!(
            "campaign {id} is {state}: {why}; these never change once published (the buyers' \
             answers, the holdings and the ledger were made with them). Put the file back; \
             more stock comes by `order-writer campaign add-stock {id} N`"
        ),
    )
    .into())
}

/// Publish's second step, Redis, bucket by bucket with its share: the script refuses by itself
/// when a bucket is LIVE or has reservations. With several buckets, one already selling stops
/// the publish before any other bucket is loaded, so the shares are never half new, half old
/// (the script's own refusal still covers a reservation that lands between the two). The `pause`
/// switch is applied either way.
async fn load(
    redis: &RedisClient,
    scripts: &RedisScripts,
    id: &str,
    buckets: u32,
    pause: bool,
    row: PublishedRow,
) -> anyhow::Result<Published> {
    let all = Bucket::all(id, buckets);
    if buckets > 1 {
        if let Some((index, state)) = selling(redis, &all).await? {
            apply_pause(redis, scripts, id, buckets, pause).await?;
            return Ok(Published::RefusedLive {
                detail: format!(
                    "campaign {id} (bucket {index} of {buckets}) is {state} in Redis or has reservations; no bucket was loaded"
                ),
            });
        }
    }
    let (stock_version, total) = (row.stock_version, row.total_stock);
    let spec = PublishSpec {
        stock_version,
        total,
        limit: row.per_user_limit,
        sku: row.sku,
        price_cents: row.price_cents,
        price_version: row.price_version,
    };
    let outcomes =
        scripts.shared.publish_buckets(redis, id, buckets, &spec).await.context("publishing to Redis")?;
    apply_pause(redis, scripts, id, buckets, pause).await?;
    Ok(match combine(&outcomes) {
        (PublishOutcome::Published, _) => Published::Ready { stock_version, stock: total },
        (PublishOutcome::Unchanged, _) => Published::Unchanged { stock_version },
        (PublishOutcome::RefusedLive { state, stock_version }, index) => {
            let which = if buckets > 1 { format!(" (bucket {index} of {buckets})") } else { String::new() };
            Published::RefusedLive {
                detail: format!(
                    "campaign {id}{which} is {state} in Redis (stock version {stock_version}) or has reservations"
                ),
            }
        }
    })
}

/// The first bucket that is LIVE or has reservations (what `publish.lua` refuses), with its
/// state.
async fn selling(redis: &RedisClient, all: &[Bucket]) -> anyhow::Result<Option<(u32, String)>> {
    use fred::prelude::{HashesInterface, KeysInterface};
    for b in all {
        let state: Option<String> = redis.hget(&b.keys.meta, "state").await?;
        let reserved: i64 =
            redis.exists(vec![b.keys.bought.clone(), b.keys.outbox.clone(), b.keys.released.clone()]).await?;
        if state.as_deref() == Some("LIVE") || reserved > 0 {
            return Ok(Some((b.index, state.unwrap_or_default())));
        }
    }
    Ok(None)
}

/// A campaign row as publish reads it back (the columns of the `campaigns` table).
#[derive(Debug, sqlx::FromRow)]
struct PublishedRow {
    /// DRAFT, READY, LIVE or ENDED.
    state: String,
    /// Version of the published stock.
    stock_version: i64,
    /// The stock PostgreSQL holds (it wins over the file's once published).
    total_stock: i64,
    /// Units sold.
    sold: i64,
    /// Units one user may hold.
    per_user_limit: i64,
    /// Item sold.
    sku: String,
    /// Unit price in cents.
    price_cents: i64,
    /// Version of the price snapshot.
    price_version: i64,
    /// Hot-stock buckets (fixed once published).
    buckets: i32,
    /// Units added by `add-stock` (the file's stock is total_stock - stock_added).
    stock_added: i64,
}

/// The outcome of a publish of every bucket, from each bucket's (in bucket order): refused when
/// any bucket was refused (with the first such bucket's index), else published when any bucket
/// was loaded now, else unchanged.
pub fn combine(outcomes: &[PublishOutcome]) -> (PublishOutcome, usize) {
    if let Some(i) = outcomes.iter().position(|o| matches!(o, PublishOutcome::RefusedLive { .. })) {
        return (outcomes[i].clone(), i);
    }
    if outcomes.contains(&PublishOutcome::Published) {
        return (PublishOutcome::Published, 0);
    }
    (PublishOutcome::Unchanged, 0)
}

/// Applies the `pause_replenish` switch to every bucket of campaign `id` in Redis; turning it
/// off returns the units set aside. Returns how many went back to the stock, summed (`None`: no
/// bucket of the campaign is in Redis).
pub async fn apply_pause(
    redis: &RedisClient,
    scripts: &RedisScripts,
    id: &str,
    buckets: u32,
    paused: bool,
) -> anyhow::Result<Option<i64>> {
    let mut returned: Option<i64> = None;
    for bucket in Bucket::all(id, buckets) {
        let n = scripts.pause(redis, &bucket, paused).await.context("applying pause_replenish in Redis")?;
        if let Some(n) = n {
            returned = Some(returned.unwrap_or(0) + n);
        }
    }
    match returned {
        Some(n) if n > 0 => {
            tracing::info!(id, returned = n, "pause_replenish off: units set aside are back in the sale")
        }
        Some(_) => tracing::info!(id, paused, "pause_replenish applied"),
        None => tracing::warn!(id, "pause_replenish not applied: the campaign is not published in Redis"),
    }
    Ok(returned)
}

/// What a campaign's file may no longer change once it is published (past DRAFT).
struct Frozen<'a> {
    stock: i64,
    price_cents: i64,
    limit: i64,
    sku: &'a str,
    buckets: u32,
}

impl Frozen<'_> {
    /// The first field of `file` that differs from the published values, with every difference
    /// said (published, then the file's).
    fn differs_from(&self, file: &Campaign) -> Option<(&'static str, String)> {
        let pairs = [
            ("stock", self.stock.to_string(), file.stock.to_string()),
            ("price_cents", self.price_cents.to_string(), file.price_cents.to_string()),
            ("per_user_limit", self.limit.to_string(), file.per_user_limit.to_string()),
            ("sku", format!("{:?}", self.sku), format!("{:?}", file.sku)),
            ("buckets", self.buckets.to_string(), file.buckets.to_string()),
        ];
        let differ: Vec<_> = pairs.iter().filter(|(_, published, now)| published != now).collect();
        let first = differ.first()?.0;
        let said: Vec<String> = differ
            .iter()
            .map(|(f, published, now)| format!("{f} is {published} published, {now} in the file"))
            .collect();
        Some((first, said.join(", ")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(state: &str) -> PublishOutcome {
        PublishOutcome::RefusedLive { state: state.into(), stock_version: "1".into() }
    }

    #[test]
    fn buckets_outcomes_combine_refused_first_then_published() {
        use PublishOutcome::{Published as P, Unchanged as U};
        assert_eq!(combine(&[U, U, U]), (U, 0));
        assert_eq!(combine(&[U, P, U]), (P, 0));
        assert_eq!(combine(&[P, refused("LIVE"), P]), (refused("LIVE"), 1));
        assert_eq!(combine(&[P]), (P, 0));
    }
}
