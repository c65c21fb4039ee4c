//! The writer: Kafka partitions into PostgreSQL, one transaction per batch, exactly-once effect.
//!
//! Read top to bottom: [`run_partition`] fetches from the offset stored in `consumer_offsets`;
//! [`write_batch`] turns a batch into a handful of set-based statements (UNNEST arrays) inside
//! one transaction — orders, the conditional stock update, ledger rows, refusals, dead letters and
//! the next offset — so a crash anywhere replays at most one uncommitted batch, which the unique
//! keys absorb; [`settle`] then acknowledges the outbox in Redis (ordered) or releases the stock
//! (refused). If Redis is down at that point nothing is lost: the outbox entry stays, the sweeper
//! produces it again, and the redelivered record settles again (both steps are idempotent).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fred::prelude::{Client as RedisClient, HashesInterface};
use protocol::record::Reservation;
use rskafka::client::Client as KafkaClient;
use sqlx::PgPool;
use tokio::sync::watch;

use crate::config::WriterConfig;
use crate::kafka;
use crate::redis::{publish_replenish, RedisScripts};

/// One fetched Kafka record: its offset and value.
#[derive(Debug, Clone)]
pub struct Incoming {
    /// Offset in the partition.
    pub offset: i64,
    /// Record value (`None` for a tombstone, which is dead-lettered).
    pub value: Option<Vec<u8>>,
}

/// A reservation the database refused, and why.
#[derive(Debug, Clone)]
pub struct Refusal {
    /// The reservation.
    pub record: Reservation,
    /// `SOLD_OUT` or `FAILED`.
    pub status: &'static str,
    /// Reason code (`SOLD_OUT`, `LIMIT_REACHED`, `CAMPAIGN_UNKNOWN`, ...).
    pub reason: String,
}

/// What a committed batch decided; [`settle`] applies it to Redis.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// Request ids that have an order (new, or from an earlier delivery), by campaign.
    pub ordered: BTreeMap<String, Vec<String>>,
    /// Orders inserted by this batch.
    pub inserted: usize,
    /// Reservations refused (now or by an earlier delivery): their stock goes back to Redis.
    pub refused: Vec<Refusal>,
    /// Campaigns whose released stock may be offered again (not paused, stock left in PG).
    pub replenish: HashSet<String>,
    /// Records sent to `dead_letters`.
    pub dead: usize,
}

struct CampaignRow {
    total: i64,
    sold: i64,
    limit: i64,
    pay_window_secs: i64,
    pause_replenish: bool,
}

/// Checks what serde cannot: ids usable as keys, a sane quantity.
fn decode(value: Option<&[u8]>) -> Result<Reservation, String> {
    let bytes = value.ok_or("record has no value")?;
    let r = Reservation::from_json(bytes).map_err(|e| format!("not a reservation record: {e}"))?;
    if r.request_id.is_empty() || r.request_id.len() > 128 {
        return Err("request_id must be 1 to 128 bytes".into());
    }
    if !protocol::keys::valid_campaign_id(&r.campaign) {
        return Err(format!("invalid campaign id {:?}", r.campaign));
    }
    if r.user.is_empty() || r.qty < 1 || r.price_cents < 0 {
        return Err("empty user, qty below 1 or negative price".into());
    }
    Ok(r)
}

/// A late-locked batch met a change made since it read: the conditional stock update refused it
/// (another partition's batch sold the same units first), or a reservation it ordered was
/// refused meanwhile (a reconciliation repair, which locks the campaign row). The batch is
/// rolled back and written again with the rows locked first.
#[derive(Debug, thiserror::Error)]
#[error("late-locked batch conflicted ({0}); rolled back")]
struct LateConflict(&'static str);

/// How a batch treats the campaign rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Locking {
    /// Read the rows without a lock, decide, write, and take the lock only for the final
    /// conditional update just before commit: partitions of one campaign overlap their work.
    Late,
    /// Lock the rows (in id order) before deciding: the guard cannot refuse. Used when a late
    /// batch was refused, i.e. when the campaign is close to selling out.
    First,
}

/// Writes one batch of a partition in ONE transaction and returns what Redis must be told.
/// `records` must be in offset order; the stored next offset becomes `last offset + 1`.
///
/// The batch is first written with the campaign rows locked late (see [`Locking`]); if the
/// conditional stock update refuses it, it is rolled back and written again with the rows locked
/// first. Either way the stock guard runs in the same transaction as the orders.
pub async fn write_batch(
    pool: &PgPool,
    topic: &str,
    partition: i32,
    records: &[Incoming],
) -> anyhow::Result<BatchOutcome> {
    match write_batch_with(pool, topic, partition, records, Locking::Late).await {
        Err(e) if e.downcast_ref::<LateConflict>().is_some() => {
            tracing::debug!(topic, partition, error = %e, "locking first");
            write_batch_with(pool, topic, partition, records, Locking::First).await
        }
        other => other,
    }
}

async fn write_batch_with(
    pool: &PgPool,
    topic: &str,
    partition: i32,
    records: &[Incoming],
    locking: Locking,
) -> anyhow::Result<BatchOutcome> {
    let Some(last) = records.last() else { return Ok(BatchOutcome::default()) };
    let next_offset = last.offset + 1;

    // 1. Decode; a record that cannot be decoded is kept as a dead letter, never retried.
    let mut dead: Vec<(i64, Vec<u8>, String)> = Vec::new();
    let mut valid: Vec<Reservation> = Vec::with_capacity(records.len());
    let mut seen = HashSet::new();
    for rec in records {
        match decode(rec.value.as_deref()) {
            Ok(r) => {
                if seen.insert(r.request_id.clone()) {
                    valid.push(r);
                }
            }
            Err(e) => dead.push((rec.offset, rec.value.clone().unwrap_or_default(), e)),
        }
    }

    let mut tx = pool.begin().await.context("begin")?;
    let mut out = BatchOutcome { dead: dead.len(), ..Default::default() };

    // 2. Read the campaigns touched; with `Locking::First`, lock them (in id order, so writers
    // of other partitions never deadlock).
    let mut campaign_ids: Vec<String> = valid.iter().map(|r| r.campaign.clone()).collect();
    campaign_ids.sort();
    campaign_ids.dedup();
    let mut campaigns: HashMap<String, CampaignRow> = HashMap::new();
    if !campaign_ids.is_empty() {
        let sql = match locking {
            Locking::First => {
                "SELECT id, total_stock, sold, per_user_limit, pay_window_secs, pause_replenish
                   FROM campaigns WHERE id = ANY($1) ORDER BY id FOR UPDATE"
            }
            Locking::Late => {
                "SELECT id, total_stock, sold, per_user_limit, pay_window_secs, pause_replenish
                   FROM campaigns WHERE id = ANY($1) ORDER BY id"
            }
        };
        let rows: Vec<(String, i64, i64, i64, i64, bool)> =
            sqlx::query_as(sql).bind(&campaign_ids).fetch_all(&mut *tx).await.context("locking campaigns")?;
        for (id, total, sold, limit, pay_window_secs, pause_replenish) in rows {
            campaigns.insert(id, CampaignRow { total, sold, limit, pay_window_secs, pause_replenish });
        }
    }

    // 3. What earlier deliveries already decided.
    let ids: Vec<String> = valid.iter().map(|r| r.request_id.clone()).collect();
    let already_ordered: HashSet<String> =
        sqlx::query_scalar::<_, String>("SELECT request_id FROM orders WHERE request_id = ANY($1)")
            .bind(&ids)
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .collect();
    let already_refused: HashMap<String, (String, String)> = sqlx::query_as::<_, (String, String, String)>(
        "SELECT request_id, status, reason FROM reservation_results WHERE request_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .map(|(id, s, r)| (id, (s, r)))
    .collect();

    // Users who already hold their one order (limit 1 campaigns).
    let (mut uc, mut uu, mut us) = (Vec::new(), Vec::new(), Vec::new());
    for r in &valid {
        if campaigns.get(&r.campaign).is_some_and(|c| c.limit == 1)
            && !already_ordered.contains(&r.request_id)
        {
            uc.push(r.campaign.clone());
            uu.push(r.user.clone());
            us.push(r.sku.clone());
        }
    }
    let mut holders: HashSet<(String, String, String)> = HashSet::new();
    if !uc.is_empty() {
        holders = sqlx::query_as::<_, (String, String, String)>(
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
        .fetch_all(&mut *tx)
        .await?
        .into_iter()
        .collect();
    }

    // 4. Decide each new reservation, in offset order, against the stock read in step 2.
    let mut accepted: Vec<&Reservation> = Vec::new();
    let mut refused_now: Vec<Refusal> = Vec::new();
    let mut remaining: HashMap<&str, i64> =
        campaigns.iter().map(|(k, c)| (k.as_str(), c.total - c.sold)).collect();
    for r in &valid {
        if already_ordered.contains(&r.request_id) {
            out.ordered.entry(r.campaign.clone()).or_default().push(r.request_id.clone());
            continue;
        }
        if let Some((status, reason)) = already_refused.get(&r.request_id) {
            let status = if status == "SOLD_OUT" { "SOLD_OUT" } else { "FAILED" };
            out.refused.push(Refusal { record: r.clone(), status, reason: reason.clone() });
            continue;
        }
        let refuse =
            |status: &'static str, reason: &str| Refusal { record: r.clone(), status, reason: reason.into() };
        let Some(c) = campaigns.get(&r.campaign) else {
            refused_now.push(refuse("FAILED", "CAMPAIGN_UNKNOWN"));
            continue;
        };
        if c.limit == 1 && !holders.insert((r.campaign.clone(), r.user.clone(), r.sku.clone())) {
            refused_now.push(refuse("FAILED", "LIMIT_REACHED"));
            continue;
        }
        let left = remaining.get_mut(r.campaign.as_str()).expect("every campaign has a remaining count");
        if *left < r.qty {
            refused_now.push(refuse("SOLD_OUT", "SOLD_OUT"));
            continue;
        }
        *left -= r.qty;
        accepted.push(r);
    }

    // 5. The orders, in one statement.
    if !accepted.is_empty() {
        let mut a = OrderArrays::default();
        for r in &accepted {
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
        }
        let inserted: Vec<String> = sqlx::query_scalar(
            "INSERT INTO orders (request_id, campaign_id, user_id, sku, qty, amount_cents, price_version,
                                 stock_version, one_per_user, reserved_at, pay_by)
             SELECT t.r, t.c, t.u, t.s, t.q, t.a, t.pv, t.sv, t.one, to_timestamp(t.ms / 1000.0),
                    now() + make_interval(secs => t.w)
               FROM UNNEST($1::text[], $2::text[], $3::text[], $4::text[], $5::int8[], $6::int8[],
                           $7::int8[], $8::int8[], $9::bool[], $10::int8[], $11::int8[])
                    AS t(r, c, u, s, q, a, pv, sv, one, ms, w)
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
        .fetch_all(&mut *tx)
        .await
        .context("inserting orders")?;
        if inserted.len() != accepted.len() {
            // A concurrent writer inserted one of these between our checks and the insert (two
            // instances given the same partition). Roll back; the retry sees its rows.
            anyhow::bail!(
                "{} of {} orders conflicted; retrying the batch",
                accepted.len() - inserted.len(),
                accepted.len()
            );
        }
        out.inserted = inserted.len();

        // 6. One ledger row per order.
        sqlx::query(
            "INSERT INTO stock_ledger (campaign_id, request_id, delta, reason)
             SELECT c, r, -q, 'ORDER' FROM UNNEST($1::text[], $2::text[], $3::int8[]) AS t(c, r, q)
             ON CONFLICT DO NOTHING",
        )
        .bind(&a.campaign)
        .bind(&a.request_id)
        .bind(&a.qty)
        .execute(&mut *tx)
        .await?;
        for r in &accepted {
            out.ordered.entry(r.campaign.clone()).or_default().push(r.request_id.clone());
        }
    }

    // 7. Refusals, so the result query can answer and a redelivery is refused the same way.
    if !refused_now.is_empty() {
        let (mut r_id, mut r_c, mut r_u, mut r_q, mut r_s, mut r_r) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for f in &refused_now {
            r_id.push(f.record.request_id.clone());
            r_c.push(f.record.campaign.clone());
            r_u.push(f.record.user.clone());
            r_q.push(f.record.qty);
            r_s.push(f.status.to_string());
            r_r.push(f.reason.clone());
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
        .execute(&mut *tx)
        .await?;
        out.refused.extend(refused_now);
    }

    // 8. Dead letters, with their place.
    if !dead.is_empty() {
        let offsets: Vec<i64> = dead.iter().map(|d| d.0).collect();
        let payloads: Vec<Vec<u8>> = dead.iter().map(|d| d.1.clone()).collect();
        let errors: Vec<String> = dead.iter().map(|d| d.2.clone()).collect();
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
        .execute(&mut *tx)
        .await?;
        for (offset, _, error) in &dead {
            tracing::warn!(topic, partition, offset, error = %error, "dead letter");
        }
    }

    // 9. The next offset, in the same transaction.
    sqlx::query(
        "INSERT INTO consumer_offsets (topic, partition, next_offset) VALUES ($1, $2, $3)
         ON CONFLICT (topic, partition) DO UPDATE SET next_offset = EXCLUDED.next_offset",
    )
    .bind(topic)
    .bind(partition)
    .bind(next_offset)
    .execute(&mut *tx)
    .await?;

    // 10. The last guard, last: the conditional stock update. Under `Locking::Late` the campaign
    // rows are locked here (in id order), so they are held only from here to the commit, and a
    // refusal, or a reservation refused meanwhile, rolls the whole batch back (see
    // `write_batch`). Under `Locking::First` it cannot refuse.
    let mut per: BTreeMap<&str, i64> = BTreeMap::new();
    for r in &accepted {
        *per.entry(r.campaign.as_str()).or_default() += r.qty;
    }
    if !per.is_empty() {
        let (pc, pn): (Vec<String>, Vec<i64>) = per.iter().map(|(c, n)| (c.to_string(), *n)).unzip();
        if locking == Locking::Late {
            // NO KEY UPDATE: the order inserts above hold the rows' KEY SHARE locks (foreign
            // key), which FOR UPDATE would wait on across batches, a deadlock; the sold update
            // itself needs no more than this.
            sqlx::query("SELECT 1 FROM campaigns WHERE id = ANY($1) ORDER BY id FOR NO KEY UPDATE")
                .bind(&pc)
                .execute(&mut *tx)
                .await
                .context("locking campaigns")?;
            // Under the lock, this statement sees every refusal committed before it: one for a
            // reservation this batch ordered means a repair decided it first.
            let accepted_ids: Vec<&str> = accepted.iter().map(|r| r.request_id.as_str()).collect();
            let refused_meanwhile: i64 =
                sqlx::query_scalar("SELECT count(*) FROM reservation_results WHERE request_id = ANY($1)")
                    .bind(&accepted_ids)
                    .fetch_one(&mut *tx)
                    .await?;
            if refused_meanwhile > 0 {
                return Err(LateConflict("a reservation was refused meanwhile").into());
            }
        }
        let updated = sqlx::query(
            "UPDATE campaigns c SET sold = c.sold + d.n, updated_at = now(),
                    state = CASE WHEN c.state = 'READY' THEN 'LIVE' ELSE c.state END
               FROM UNNEST($1::text[], $2::int8[]) AS d(id, n)
              WHERE c.id = d.id AND c.sold + d.n <= c.total_stock",
        )
        .bind(&pc)
        .bind(&pn)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if updated != pc.len() as u64 {
            if locking == Locking::First {
                anyhow::bail!("stock guard refused a locked batch (sold + n > total_stock); rolled back");
            }
            return Err(LateConflict("the stock guard refused it").into());
        }
    }
    tx.commit().await.context("commit")?;

    for f in &out.refused {
        if let Some(left) = remaining.get(f.record.campaign.as_str()) {
            if *left > 0 && !campaigns[&f.record.campaign].pause_replenish {
                out.replenish.insert(f.record.campaign.clone());
            }
        }
    }
    Ok(out)
}

#[derive(Default)]
struct OrderArrays {
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
}

/// Applies a committed batch to Redis: ack the ordered, release the refused (compensation),
/// publish replenish. Errors are logged, not returned: what fails here is retried through the
/// sweeper (the outbox entry stays until this succeeds).
pub async fn settle(redis: &RedisClient, scripts: &RedisScripts, outcome: &BatchOutcome) {
    for (campaign, ids) in &outcome.ordered {
        if let Err(e) = scripts.ack(redis, campaign, ids).await {
            tracing::warn!(campaign, error = %format!("{e:#}"), "outbox ack failed; the sweeper will redeliver");
        }
    }
    for f in &outcome.refused {
        let r = &f.record;
        // Only a reservation still in the outbox holds units in Redis (refused ones are never
        // acked): a record Redis never reserved (lost data, a forged or replayed record) must not
        // give stock back. A reservation released before is no longer there either.
        let keys = protocol::keys::CampaignKeys::new(&r.campaign);
        match redis.hexists::<bool, _, _>(&keys.outbox, &r.request_id).await {
            Ok(true) => {}
            Ok(false) => continue,
            Err(e) => {
                tracing::warn!(request_id = %r.request_id, error = %e, "compensation check failed; the sweeper will redeliver");
                continue;
            }
        }
        if let Err(e) = scripts.shared.release(redis, &r.campaign, &r.request_id, &r.user, r.qty).await {
            tracing::warn!(request_id = %r.request_id, error = %e, "compensation failed; the sweeper will redeliver");
        }
    }
    for campaign in &outcome.replenish {
        if let Err(e) = publish_replenish(redis, campaign).await {
            tracing::warn!(campaign, error = %format!("{e:#}"), "replenish publish failed");
        }
    }
}

/// What a partition consumer needs.
#[derive(Clone)]
pub struct WriterCtx {
    /// PostgreSQL.
    pub pool: PgPool,
    /// Redis.
    pub redis: RedisClient,
    /// Scripts.
    pub scripts: RedisScripts,
    /// Kafka client.
    pub kafka: Arc<KafkaClient>,
    /// Topic.
    pub topic: String,
    /// Batch and fetch settings.
    pub cfg: WriterConfig,
}

/// The stored next offset of a partition (0 when none).
pub async fn stored_offset(pool: &PgPool, topic: &str, partition: i32) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar("SELECT next_offset FROM consumer_offsets WHERE topic = $1 AND partition = $2")
        .bind(topic)
        .bind(partition)
        .fetch_optional(pool)
        .await?
        .unwrap_or(0))
}

/// Consumes one partition until `shutdown` turns true. A batch in flight is finished and
/// committed before returning.
pub async fn run_partition(
    ctx: WriterCtx,
    partition: i32,
    mut shutdown: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let deadline = Duration::from_secs(5);
    let pc = loop {
        match kafka::partition(&ctx.kafka, &ctx.topic, partition, deadline).await {
            Ok(pc) => break pc,
            Err(e) => {
                tracing::warn!(partition, error = %format!("{e:#}"), "partition not reachable; retrying");
                if wait_or_shutdown(&mut shutdown, Duration::from_secs(1)).await {
                    return Ok(());
                }
            }
        }
    };
    let mut offset = loop {
        match stored_offset(&ctx.pool, &ctx.topic, partition).await {
            Ok(o) => break o,
            Err(e) => {
                tracing::warn!(partition, error = %format!("{e:#}"), "cannot read the stored offset; retrying");
                if wait_or_shutdown(&mut shutdown, Duration::from_secs(1)).await {
                    return Ok(());
                }
            }
        }
    };
    tracing::info!(partition, offset, "writer started");
    // The fetch of the next records overlaps the transaction of the current ones: a fetcher task
    // reads ahead (at most two fetches) while this loop writes.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Incoming>>(2);
    let fetcher = tokio::spawn(fetch_ahead(pc, ctx.cfg.clone(), partition, offset, tx, shutdown.clone()));
    'outer: loop {
        let incoming = tokio::select! {
            r = rx.recv() => match r { Some(v) => v, None => break },
            _ = shutdown.changed() => break,
        };
        for chunk in incoming.chunks(ctx.cfg.batch_size) {
            if chunk.first().is_some_and(|r| r.offset < offset) {
                continue;
            }
            let t1 = std::time::Instant::now();
            // Retry a failing batch until it commits (PostgreSQL down) or we are told to stop;
            // the offset only moves with a commit.
            let outcome = loop {
                match write_batch(&ctx.pool, &ctx.topic, partition, chunk).await {
                    Ok(o) => break o,
                    Err(e) => {
                        tracing::warn!(partition, error = %format!("{e:#}"), "batch failed; retrying");
                        if wait_or_shutdown(&mut shutdown, Duration::from_millis(500)).await {
                            break 'outer;
                        }
                    }
                }
            };
            offset = chunk.last().map(|r| r.offset + 1).unwrap_or(offset);
            let t2 = std::time::Instant::now();
            settle(&ctx.redis, &ctx.scripts, &outcome).await;
            tracing::debug!(
                partition,
                n = chunk.len(),
                write_ms = (t2 - t1).as_millis() as u64,
                settle_ms = t2.elapsed().as_millis() as u64,
                "batch committed"
            );
            if *shutdown.borrow() {
                break 'outer;
            }
        }
    }
    fetcher.abort();
    tracing::info!(partition, offset, "writer stopped");
    Ok(())
}

/// Reads a partition ahead of the writer, from `offset` on, into `tx`.
async fn fetch_ahead(
    pc: rskafka::client::partition::PartitionClient,
    cfg: WriterConfig,
    partition: i32,
    mut offset: i64,
    tx: tokio::sync::mpsc::Sender<Vec<Incoming>>,
    mut shutdown: watch::Receiver<bool>,
) {
    let deadline = Duration::from_secs(5);
    // Short waits while records flow; after an empty fetch, the idle wait, so a quiet partition
    // is not polled tens of times a second (each poll costs the broker a storage query).
    let mut wait = cfg.max_wait_ms;
    loop {
        if *shutdown.borrow() {
            return;
        }
        let t0 = std::time::Instant::now();
        let fetch = pc.fetch_records(offset, 1..cfg.fetch_max_bytes, wait);
        let fetched = tokio::select! {
            r = tokio::time::timeout(deadline, fetch) => r,
            _ = shutdown.changed() => return,
        };
        let records = match fetched {
            Ok(Ok((records, _high))) => records,
            Ok(Err(e)) => {
                tracing::warn!(partition, offset, error = %e, "fetch failed");
                if let rskafka::client::error::Error::ServerError {
                    protocol_error: rskafka::client::error::ProtocolError::OffsetOutOfRange,
                    ..
                } = e
                {
                    // Retention removed what we had not read: continue at the earliest kept.
                    if let Ok(earliest) = pc.get_offset(rskafka::client::partition::OffsetAt::Earliest).await
                    {
                        tracing::error!(
                            partition,
                            offset,
                            earliest,
                            "records lost to retention before they were written"
                        );
                        offset = offset.max(earliest);
                    }
                }
                if wait_or_shutdown(&mut shutdown, Duration::from_millis(500)).await {
                    return;
                }
                continue;
            }
            Err(_) => continue,
        };
        let incoming: Vec<Incoming> = records
            .into_iter()
            .filter(|r| r.offset >= offset)
            .map(|r| Incoming { offset: r.offset, value: r.record.value })
            .collect();
        tracing::debug!(
            partition,
            offset,
            n = incoming.len(),
            ms = t0.elapsed().as_millis() as u64,
            "fetched"
        );
        let Some(last) = incoming.last() else {
            wait = cfg.idle_wait_ms;
            continue;
        };
        wait = cfg.max_wait_ms;
        offset = last.offset + 1;
        if tx.send(incoming).await.is_err() {
            return;
        }
    }
}

/// Sleeps `d`; true when shutdown was asked meanwhile.
pub async fn wait_or_shutdown(shutdown: &mut watch::Receiver<bool>, d: Duration) -> bool {
    if *shutdown.borrow() {
        return true;
    }
    tokio::select! {
        _ = tokio::time::sleep(d) => *shutdown.borrow(),
        _ = shutdown.changed() => true,
    }
}
