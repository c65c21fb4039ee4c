//! `order-writer campaign publish <id>`: the campaign file → PostgreSQL (the stock's source of
//! truth) → Redis (the published copy the gateway reserves from) → READY.
//!
//! Running it twice is harmless; it never resets a campaign that is LIVE or has reservations
//! (restarting any process never refills stock).
//!
//! It is also how an operator applies the `pause_replenish` switch of a live campaign: edit the
//! file, publish again. The switch goes to PostgreSQL and to Redis (`lua/pause.lua`), whatever
//! the stock's state; turning it off returns the units released meanwhile (set aside) to the
//! sale at once, with a replenish message to the gateways.

use std::path::Path;

use anyhow::Context;
use fred::prelude::Client as RedisClient;
use protocol::campaign::Campaign;
use protocol::scripts::{PublishOutcome, PublishSpec};
use sqlx::PgPool;

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
pub async fn publish(
    pool: &PgPool,
    redis: &RedisClient,
    scripts: &RedisScripts,
    campaigns_dir: &Path,
    id: &str,
) -> anyhow::Result<Published> {
    if !protocol::keys::valid_campaign_id(id) {
        anyhow::bail!("{id:?} is not a campaign id (1 to 64 of A-Z a-z 0-9 _ -)");
    }
    let file = campaigns_dir.join(format!("{id}.toml"));
    if !file.exists() {
        anyhow::bail!("unknown campaign {id:?}: no file {}", file.display());
    }
    let c = Campaign::load(&file)?;

    // 1. PostgreSQL, one upsert: a new row is inserted as DRAFT; a DRAFT row takes the whole
    // file (new stock and price versions when they changed); READY/LIVE/ENDED rows take only the
    // pause_replenish switch (kept for the record; what acts on it is Redis, see apply_pause).
    let mut tx = pool.begin().await?;
    sqlx::query(
        "INSERT INTO campaigns (id, sku, total_stock, per_user_limit, price_cents, starts_at, ends_at,
                                pay_window_secs, pause_replenish)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
         ON CONFLICT (id) DO UPDATE SET
             pause_replenish = EXCLUDED.pause_replenish,
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
    .execute(&mut *tx)
    .await?;
    let (state, stock_version, total, sold, limit, sku, price_cents, price_version): (
        String,
        i64,
        i64,
        i64,
        i64,
        String,
        i64,
        i64,
    ) = sqlx::query_as(
        "SELECT state, stock_version, total_stock, sold, per_user_limit, sku, price_cents, price_version
           FROM campaigns WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&mut *tx)
    .await?;
    tx.commit().await?;

    if state == "LIVE" || state == "ENDED" || sold > 0 {
        apply_pause(redis, scripts, id, c.switches.pause_replenish).await?;
        return Ok(Published::RefusedLive {
            detail: format!(
                "campaign {id} is {state} in PostgreSQL with {sold} sold; its stock is never reset"
            ),
        });
    }
    if c.stock != total {
        tracing::warn!(
            id,
            file = c.stock,
            db = total,
            "file stock differs from the published stock; the database wins"
        );
    }

    // 2. Redis: the script refuses by itself when the campaign is LIVE or has reservations.
    let spec = PublishSpec { stock_version, total, limit, sku, price_cents, price_version };
    let outcome = scripts
        .shared
        .publish(redis, &protocol::keys::Bucket::single(id), &spec)
        .await
        .context("publishing to Redis")?;
    apply_pause(redis, scripts, id, c.switches.pause_replenish).await?;
    let result = match outcome {
        PublishOutcome::Published => Published::Ready { stock_version, stock: total },
        PublishOutcome::Unchanged => Published::Unchanged { stock_version },
        PublishOutcome::RefusedLive { state, stock_version } => {
            return Ok(Published::RefusedLive {
                detail: format!(
                    "campaign {id} is {state} in Redis (stock version {stock_version}) or has reservations"
                ),
            })
        }
    };
    // 3. READY in PostgreSQL (never moves a LIVE row back).
    sqlx::query("UPDATE campaigns SET state = 'READY', updated_at = now() WHERE id = $1 AND state IN ('DRAFT', 'READY')")
        .bind(id)
        .execute(pool)
        .await?;
    Ok(result)
}

/// Applies the `pause_replenish` switch to Redis; turning it off returns the units set aside.
/// Returns how many went back to the stock (`None`: the campaign is not in Redis).
pub async fn apply_pause(
    redis: &RedisClient,
    scripts: &RedisScripts,
    id: &str,
    paused: bool,
) -> anyhow::Result<Option<i64>> {
    let returned = scripts.pause(redis, id, paused).await.context("applying pause_replenish in Redis")?;
    match returned {
        Some(n) if n > 0 => {
            tracing::info!(id, returned = n, "pause_replenish off: units set aside are back in the sale")
        }
        Some(_) => tracing::info!(id, paused, "pause_replenish applied"),
        None => tracing::warn!(id, "pause_replenish not applied: the campaign is not published in Redis"),
    }
    Ok(returned)
}
