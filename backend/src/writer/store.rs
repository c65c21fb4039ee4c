//! The writer's SQL, one function per statement. Each runs on the batch's transaction (or, for
//! [`stored_offset`], on the pool); none decides anything.

use std::collections::{HashMap, HashSet};

use anyhow::Context;
use protocol::record::Reservation;
use sqlx::{PgConnection, PgPool};

use super::decide::{CampaignRow, DeadLetter};
use super::retry::Fenced;
use super::{Fence, Rejected};

/// The stored next offset of a partition (0 when none).
pub async fn stored_offset(pool: &PgPool, topic: &str, partition: i32) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND partition = $2")
        .bind(topic)
        .bind(partition)
        .fetch_optional(pool)
        .await?
        .unwrap_or(0))
}

/// Reads the campaign rows `ids` (sorted); with `for_update`, locks them in that order, so
/// writers of other partitions never deadlock.
pub(super) async fn read_campaigns(
    conn: &mut PgConnection,
    ids: &[String],
    for_update: bool,
) -> anyhow::Result<HashMap<String, CampaignRow>> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let sql = if for_update {
        "SELECT id, total_stock, sold, per_user_limit, pay_window_secs
           FROM campaigns WHERE id = ANY($1) ORDER BY id FOR UPDATE"
    } else {
        "SELECT id, total_stock, sold, per_user_limit, pay_window_secs
           FROM campaigns WHERE id = ANY($1) ORDER BY id"
    };
    let rows: Vec<(String, i64, i64, i64, i64)> =
        sqlx::query_as(sql).bind(ids).fetch_all(conn).await.context("locking campaigns")?;
    Ok(rows
        .into_iter()
        .map(|(id, total, sold, limit, pay_window_secs)| {
            (id, CampaignRow { total, sold, limit, pay_window_secs })
        })
        .collect())
}

/// The request ids among `ids` that already have an order.
pub(super) async fn already_ordered(
    conn: &mut PgConnection,
    ids: &[String],
) -> anyhow::Result<HashSet<String>> {
    Ok(sqlx::query_scalar::<_, String>("SELECT request_id FROM orders WHERE request_id = ANY($1)")
        .bind(ids)
        .fetch_all(conn)
        .await?
        .into_iter()
        .collect())
}

/// The request ids among `ids` already refused, with (status, reason).
pub(super) async fn already_refused(
    conn: &mut PgConnection,
    ids: &[String],
) -> anyhow::Result<HashMap<String, (String, String)>> {
    Ok(sqlx::query_as::<_, (String, String, String)>(
        "SELECT request_id, status, reason FROM reservation_results WHERE request_id = ANY($1)",
    )
    .bind(ids)
    .fetch_all(conn)
    .await?
    .into_iter()
    .map(|(id, s, r)| (id, (s, r)))
    .collect())
}

/// The (campaign, user, sku) among `candidates` that already hold an open one-per-user order.
pub(super) async fn holders(
    conn: &mut PgConnection,
    candidates: &[(String, String, String)],
) -> anyhow::Result<HashSet<(String, String, String)>> {
    if candidates.is_empty() {
        return Ok(HashSet::new());
    }
    let (mut uc, mut uu, mut us) = (Vec::new(), Vec::new(), Vec::new());
    for (c, u, s) in candidates {
        uc.push(c.as_str());
        uu.push(u.as_str());
        us.push(s.as_str());
    }
    Ok(sqlx::query_as::<_, (String, String, String)>(
        // LATERAL ... LIMIT 1 keeps this an index probe per row: as a plain join the
        // planner, knowing the array holds 1,000 rows, hashes the whole orders table
        // (100 ms at 100,000 orders, growing with every order).
        "SELECT t.c, t.u, t.s
           FROM UNNEST($1::text[], $2::text[], $3::text[]) AS t(c, u, s)
          CROSS JOIN LATERAL (
                SELECT 1 FROM orders o
                 WHERE o.campaign_id = t.c AND o.user_id = t.u AND o.sku = t.s
                   AND o.one_per_user AND o.status <> 'CLOSED'
                 LIMIT 1) AS held",
    )
    .bind(&uc)
    .bind(&uu)
    .bind(&us)
    .fetch_all(conn)
    .await?
    .into_iter()
    .collect())
}

/// Units each (campaign, user) of `pairs` holds in open (not CLOSED) orders of campaigns with a
/// limit above 1; a pair holding none is absent.
pub(super) async fn held(
    conn: &mut PgConnection,
    pairs: &[(String, String)],
) -> anyhow::Result<HashMap<(String, String), i64>> {
    if pairs.is_empty() {
        return Ok(HashMap::new());
    }
    let (pc, pu): (Vec<&str>, Vec<&str>) = pairs.iter().map(|(c, u)| (c.as_str(), u.as_str())).unzip();
    Ok(sqlx::query_as::<_, (String, String, i64)>(
        // One index probe per pair (orders_held_per_user), as in `holders`.
        "SELECT t.c, t.u, h.n
           FROM UNNEST($1::text[], $2::text[]) AS t(c, u)
          CROSS JOIN LATERAL (
                SELECT sum(o.qty)::int8 AS n FROM orders o
                 WHERE o.campaign_id = t.c AND o.user_id = t.u
                   AND NOT o.one_per_user AND o.status <> 'CLOSED') AS h
          WHERE h.n IS NOT NULL",
    )
    .bind(&pc)
    .bind(&pu)
    .fetch_all(conn)
    .await
    .context("summing what users hold")?
    .into_iter()
    .map(|(c, u, n)| ((c, u), n))
    .collect())
}

/// The accepted orders as column arrays, for the UNNEST inserts.
#[derive(Default)]
pub(super) struct OrderArrays {
    request_id: Vec<String>,
    campaign: Vec<String>,
    user: Vec<String>,
    sku: Vec<String>,
    qty: Vec<i64>,
    amount: Vec<i64>,
    price_version: Vec<i64>,
    stock_version: Vec<i64>,
    one_per_user: Vec<bool>,
    reserved_at_ms: Vec<i64>,
    pay_window: Vec<i64>,
    client_ip: Vec<Option<String>>,
    device: Vec<Option<String>>,
    registered_at: Vec<Option<i64>>,
}

impl OrderArrays {
    /// The arrays of `accepted`, each with its campaign's limit and pay window.
    pub fn new(accepted: &[Reservation], campaigns: &HashMap<String, CampaignRow>) -> Self {
        let mut a = OrderArrays::default();
        for r in accepted {
            let c = &campaigns[&r.campaign];
            a.request_id.push(r.request_id.clone());
            a.campaign.push(r.campaign.clone());
            a.user.push(r.user.clone());
            a.sku.push(r.sku.clone());
            a.qty.push(r.qty);
            a.amount.push(r.price_cents.saturating_mul(r.qty));
            a.price_version.push(r.price_version);
            a.stock_version.push(r.stock_version);
            a.one_per_user.push(c.limit == 1);
            a.reserved_at_ms.push(r.reserved_at_ms);
            a.pay_window.push(c.pay_window_secs);
            a.client_ip.push(r.client_ip.clone());
            a.device.push(r.device.clone());
            a.registered_at.push(r.registered_at);
        }
        a
    }
}

/// Inserts the orders in one statement; returns the request ids actually inserted.
pub(super) async fn insert_orders(conn: &mut PgConnection, a: &OrderArrays) -> anyhow::Result<Vec<String>> {
    sqlx::query_scalar(
        "INSERT INTO orders (request_id, campaign_id, user_id, sku, qty, amount_cents, price_version,
                             stock_version, one_per_user, reserved_at, pay_by, client_ip, device_id,
                             registered_at)
         SELECT t.r, t.c, t.u, t.s, t.q, t.a, t.pv, t.sv, t.one, to_timestamp(t.ms / 1000.0),
                now() + make_interval(secs => t.w), t.ip::inet, t.dev, to_timestamp(t.reg)
           FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[],
                       $7::int8[], $8::int8[], $9::bool[], $10::int8[], $11::int8[], $12::text[],
                       $13::text[], $14::int8[])
                AS t(r, c, u, s, q, a, pv, sv, one, ms, w, ip, dev, reg)
         ON CONFLICT DO NOTHING
         RETURNING request_id",
    )
    .bind(&a.request_id)
    .bind(&a.campaign)
    .bind(&a.user)
    .bind(&a.sku)
    .bind(&a.qty)
    .bind(&a.amount)
    .bind(&a.price_version)
    .bind(&a.stock_version)
    .bind(&a.one_per_user)
    .bind(&a.reserved_at_ms)
    .bind(&a.pay_window)
    .bind(&a.client_ip)
    .bind(&a.device)
    .bind(&a.registered_at)
    .fetch_all(conn)
    .await
    .context("inserting orders")
}

/// One ledger row per order.
pub(super) async fn insert_ledger(conn: &mut PgConnection, a: &OrderArrays) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO stock_ledger (campaign_id, request_id, delta, reason)
         SELECT c, r, -q, 'ORDER' FROM UNNEST($1::text[], $2::text[], $3::int8[]) AS t(c, r, q)
         ON CONFLICT DO NOTHING",
    )
    .bind(&a.campaign)
    .bind(&a.request_id)
    .bind(&a.qty)
    .execute(conn)
    .await?;
    Ok(())
}

/// The rejected reservations' results, so the result query can answer and a redelivery is
/// refused the same way.
pub(super) async fn insert_rejected(conn: &mut PgConnection, refused: &[Rejected]) -> anyhow::Result<()> {
    if refused.is_empty() {
        return Ok(());
    }
    let (mut r_id, mut r_c, mut r_u, mut r_q, mut r_s, mut r_r) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for f in refused {
        r_id.push(f.record.request_id.as_str());
        r_c.push(f.record.campaign.as_str());
        r_u.push(f.record.user.as_str());
        r_q.push(f.record.qty);
        r_s.push(f.status);
        r_r.push(f.reason.as_str());
    }
    sqlx::query(
        "INSERT INTO reservation_results (request_id, campaign_id, user_id, qty, status, reason)
         SELECT * FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::text[])
         ON CONFLICT DO NOTHING",
    )
    .bind(&r_id)
    .bind(&r_c)
    .bind(&r_u)
    .bind(&r_q)
    .bind(&r_s)
    .bind(&r_r)
    .execute(conn)
    .await?;
    Ok(())
}

/// The dead letters, with their place (a second copy of the same place is ignored).
pub(super) async fn insert_dead_letters(
    conn: &mut PgConnection,
    topic: &str,
    partition: i32,
    dead: &[DeadLetter],
) -> anyhow::Result<()> {
    if dead.is_empty() {
        return Ok(());
    }
    let offsets: Vec<i64> = dead.iter().map(|d| d.offset).collect();
    let payloads: Vec<&[u8]> = dead.iter().map(|d| d.payload.as_slice()).collect();
    let errors: Vec<&str> = dead.iter().map(|d| d.error.as_str()).collect();
    sqlx::query(
        "INSERT INTO dead_letters (topic, partition, \"offset\", payload, error)
         SELECT $1, $2, o, p, e FROM UNNEST($3::int8[], $4::bytea[], $5::text[]) AS t(o, p, e)
         ON CONFLICT DO NOTHING",
    )
    .bind(topic)
    .bind(partition)
    .bind(&offsets)
    .bind(&payloads)
    .bind(&errors)
    .execute(conn)
    .await?;
    Ok(())
}

/// Stores the partition's next offset.
pub(super) async fn store_offset(
    conn: &mut PgConnection,
    topic: &str,
    partition: i32,
    next_offset: i64,
) -> anyhow::Result<()> {
    sqlx::query(
        "INSERT INTO consumer_offsets (topic, partition, next_offset) VALUES ($1, $2, $3)
         ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
    )
    .bind(topic)
    .bind(partition)
    .bind(next_offset)
    .execute(conn)
    .await?;
    Ok(())
}

/// Locks the campaign rows `ids` (sorted) just before the stock update. NO KEY UPDATE: the order
/// inserts hold the rows' KEY SHARE locks (foreign key), which FOR UPDATE would wait on across
/// batches, a deadlock; the sold update itself needs no more than this.
pub(super) async fn lock_campaigns_late(conn: &mut PgConnection, ids: &[String]) -> anyhow::Result<()> {
    sqlx::query("SELECT 1 FROM campaigns WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
        .bind(ids)
        .execute(conn)
        .await
        .context("locking campaigns")?;
    Ok(())
}

/// How many of `ids` have a refusal now.
pub(super) async fn count_refused(conn: &mut PgConnection, ids: &[&str]) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT count(*) FROM reservation_results WHERE request_id = ANY($1)")
        .bind(ids)
        .fetch_one(conn)
        .await?)
}

/// The conditional stock update: `sold += n` where it stays within `total_stock`. Returns how
/// many campaign rows took their units.
pub(super) async fn take_stock(
    conn: &mut PgConnection,
    ids: &[String],
    units: &[i64],
) -> anyhow::Result<u64> {
    Ok(sqlx::query(
        "UPDATE campaigns c SET sold = c.sold + d.n, updated_at = now(),
                state = CASE WHEN c.state = 'READY' THEN 'LIVE' ELSE c.state END
           FROM UNNEST($1::text[], $2::int8[]) AS d(id, n)
          WHERE c.id = d.id AND c.sold + d.n <= c.total_stock",
    )
    .bind(ids)
    .bind(units)
    .execute(conn)
    .await?
    .rows_affected())
}

/// For a leased partition, at the start of its transaction: PostgreSQL ends the session if it
/// idles in this transaction longer than [`Fence::idle`]. A writer paused in a transaction
/// would otherwise hold what it locked (the campaign row every writer needs, its lease row) for
/// as long as it is paused, and its other partitions' transactions queued behind the lock would
/// each take it in turn. A live writer never idles that long in a transaction; if it did, the
/// lost connection is retried like any other.
pub(super) async fn bound_idle(conn: &mut PgConnection, fence: &Fence) -> anyhow::Result<()> {
    sqlx::query("SELECT set_config('idle_in_transaction_session_timeout', $1, true)")
        .bind(fence.idle.as_millis().max(1).to_string())
        .execute(conn)
        .await?;
    Ok(())
}

/// The fence, last before the commit: the partition's lease row must still name this writer and
/// epoch and not have expired (PostgreSQL's clock). The row stays locked to the commit, so a
/// claim cannot slip in between; a claim committed before makes this fail ([`Fenced`]) and the
/// transaction is rolled back.
pub(super) async fn check_fence(
    conn: &mut PgConnection,
    topic: &str,
    partition: i32,
    fence: &Fence,
) -> anyhow::Result<()> {
    let held = sqlx::query(
        "UPDATE partition_leases SET epoch = epoch
          WHERE topic = $1 AND partition = $2 AND owner = $3 AND epoch = $4
            AND expires_at > clock_timestamp()",
    )
    .bind(topic)
    .bind(partition)
    .bind(&*fence.owner)
    .bind(fence.epoch)
    .execute(conn)
    .await
    .context("checking the lease")?
    .rows_affected();
    if held == 0 {
        return Err(Fenced.into());
    }
    Ok(())
}
