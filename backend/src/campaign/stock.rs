//! `order-writer campaign add-stock ID N [--ref REF]`: more units for a published campaign.
//!
//! An addition is a ledger row (`stock_additions`, once per ref) that grows `total_stock` and
//! `stock_added` in its transaction, then each bucket's stock and share in Redis by its share of
//! N (`lua/restock.lua`, once per ref), with a replenish message that clears the gateways'
//! sold-out flags. Run again with the same ref, it finishes an addition a failure interrupted and
//! adds nothing twice. Stock never shrinks: a campaign sells less by `close` and `end`.

use protocol::campaign::MAX_STOCK;
use protocol::keys::{control_key, Bucket};
use protocol::scripts::bucket_shares;
use sqlx::PgPool;

use crate::app::{Connections, COMMAND_POOL};

/// Adds `qty` units to campaign `id` under `reference` (a new one when `None`).
pub async fn add(
    conns: &Connections<'_>,
    id: &str,
    qty: i64,
    reference: Option<String>,
) -> anyhow::Result<()> {
    if !(1..=MAX_STOCK).contains(&qty) {
        anyhow::bail!("add-stock: {qty} units: give 1 to {MAX_STOCK}");
    }
    let pool = conns.migrated_postgres(COMMAND_POOL).await?;
    let redis = conns.redis().await?;
    let scripts = conns.scripts()?;
    let row = super::operate::published(&pool, id).await?;
    if row.state == "ENDED" {
        anyhow::bail!("campaign {id} is ENDED: no stock is added to it");
    }
    let reference = reference.unwrap_or_else(|| format!("add-{}", uuid::Uuid::new_v4().simple()));
    println!("campaign {id}: addition {reference} of {qty} units (run again with --ref {reference} to finish it after a failure)");
    let new_in_db = record(&pool, id, &reference, qty).await?;
    let buckets = Bucket::all(id, row.buckets.max(1) as u32);
    let mut added_now = 0;
    for (bucket, share) in buckets.iter().zip(bucket_shares(qty, buckets.len() as u32)) {
        if share == 0 {
            continue;
        }
        match scripts.restock(&redis, bucket, &reference, share).await? {
            Some(true) => added_now += share,
            Some(false) => {}
            None => anyhow::bail!(
                "campaign {id} (bucket {}) is not published in Redis: nothing added there",
                bucket.index
            ),
        }
    }
    let total_added: i64 = sqlx::query_scalar(
        "WITH done AS (UPDATE stock_additions SET applied_at = coalesce(applied_at, now())
                        WHERE campaign_id = $1 AND ref = $2)
         SELECT stock_added FROM campaigns WHERE id = $1",
    )
    .bind(id)
    .bind(&reference)
    .fetch_one(&pool)
    .await?;
    use fred::prelude::HashesInterface;
    let _: () = redis.hset(control_key(id), ("added", total_added.to_string())).await?;
    let said = if new_in_db || added_now > 0 { "added" } else { "was added before; nothing changed" };
    println!("  {qty} units {said}: {added_now} now in Redis over {} bucket(s); {total_added} added since the publish", buckets.len());
    Ok(())
}

/// The ledger row and the totals, in one transaction: whether the addition is new. A ref used
/// before with another quantity is refused.
async fn record(pool: &PgPool, id: &str, reference: &str, qty: i64) -> anyhow::Result<bool> {
    let mut tx = pool.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO stock_additions (campaign_id, ref, qty) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
    )
    .bind(id)
    .bind(reference)
    .bind(qty)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if inserted {
        sqlx::query(
            "UPDATE campaigns SET total_stock = total_stock + $2, stock_added = stock_added + $2, updated_at = now()
              WHERE id = $1",
        )
        .bind(id)
        .bind(qty)
        .execute(&mut *tx)
        .await?;
    } else {
        let before: i64 =
            sqlx::query_scalar("SELECT qty FROM stock_additions WHERE campaign_id = $1 AND ref = $2")
                .bind(id)
                .bind(reference)
                .fetch_one(&mut *tx)
                .await?;
        if before != qty {
            anyhow::bail!("addition {reference} was {before} units, not {qty}: a ref is one addition");
        }
    }
    tx.commit().await?;
    Ok(inserted)
}
