//! `order-writer campaign end ID`: the campaign is over for good.
//!
//! Only after the pay window of the last possible order ([`ready`], a pure check): no order
//! still waits for payment or for its release, and every reservation has its order (the outbox
//! drained, waited for a while). The final reconciliation must balance (else: `reconcile
//! --repair`, then `end` again). Then the state goes to ENDED on every gateway (they stop
//! selling before anything is removed), the campaign's keys are removed from Redis (each key
//! on its own master; nonces, counters and challenges expire by their TTLs), its control hash is
//! kept as the tombstone that stops an old file from selling it again, and PostgreSQL's row is
//! marked ENDED, its orders kept. Ending an ended campaign removes what is left and changes
//! nothing else.

use std::time::Duration;

use chrono::{DateTime, Utc};
use fred::prelude::{Client as RedisClient, HashesInterface, KeysInterface};
use protocol::control::State;
use protocol::keys::{Bucket, CampaignKeys};

use super::operate::{self, Row};
use crate::app::{Connections, COMMAND_POOL};
use crate::workers::reconcile::{self, Stores};

/// How long `end` waits for the outbox to drain.
const DRAIN_WAIT: Duration = Duration::from_secs(15);

/// Whether campaign `row` may end at `now`, whose window ends at `ends_at` (the end in force),
/// with `pending` orders waiting for payment and `unreleased` closed orders not yet released.
pub fn ready(
    row: &Row,
    ends_at: DateTime<Utc>,
    now: DateTime<Utc>,
    pending: i64,
    unreleased: i64,
) -> Result<(), String> {
    let paid_by = ends_at + chrono::Duration::seconds(row.pay_window_secs);
    if now < paid_by {
        return Err(format!("the last orders may be paid until {paid_by} (the window's end plus the pay window); close it now and end it then"));
    }
    if pending > 0 {
        return Err(format!("{pending} order(s) still wait for payment: the closer closes them (is the order writer running?)"));
    }
    if unreleased > 0 {
        return Err(format!(
            "{unreleased} closed order(s) not yet released in Redis (is the order writer running?)"
        ));
    }
    Ok(())
}

/// Ends campaign `id`.
pub async fn run(conns: &Connections<'_>, id: &str) -> anyhow::Result<()> {
    let pool = conns.migrated_postgres(COMMAND_POOL).await?;
    let redis = conns.redis().await?;
    let row = operate::published(&pool, id).await?;
    let control = operate::read_control(&redis, id).await?;
    if control.state != State::Ended {
        let ends_at = control.ends_at_after(row.ends_at);
        let (pending, unreleased): (i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE status = 'PENDING_PAYMENT'),
                    count(*) FILTER (WHERE status = 'CLOSED' AND NOT redis_released)
               FROM orders WHERE campaign_id = $1",
        )
        .bind(id)
        .fetch_one(&pool)
        .await?;
        ready(&row, ends_at, Utc::now(), pending, unreleased)
            .map_err(|why| anyhow::anyhow!("end {id} refused: {why}"))?;
        drain(&redis, id, row.buckets).await?;
        let scripts = conns.scripts()?;
        let stores = Stores {
            pool: &pool,
            redis: &redis,
            scripts: &scripts,
            topic: None,
            sweep_age: conns.conf().sweep_age,
            between_reads: None,
        };
        let report = reconcile::reconcile(stores, id, false).await?;
        print!("{}", report.text);
        if !(report.redis_balanced && report.pg_balanced && report.across_balanced) {
            anyhow::bail!("end {id} refused: the final reconciliation does not balance (order-writer reconcile {id} --repair, then end again)");
        }
        let version = operate::write_state(&redis, id, State::Ended, None).await?;
        println!("campaign {id}: ENDED (control version {version})");
        operate::converge(conns, id, version).await?;
    }
    let removed = remove_keys(&redis, id, row.buckets).await?;
    sqlx::query("UPDATE campaigns SET state = 'ENDED', updated_at = now() WHERE id = $1")
        .bind(id)
        .execute(&pool)
        .await?;
    println!(
        "  {removed} Redis key(s) removed; PostgreSQL keeps the campaign ({} sold) and its orders",
        row.sold
    );
    Ok(())
}

/// Waits up to [`DRAIN_WAIT`] for every bucket's outbox to be empty (each reservation written).
async fn drain(redis: &RedisClient, id: &str, buckets: i32) -> anyhow::Result<()> {
    let start = std::time::Instant::now();
    loop {
        let mut waiting = 0;
        for b in Bucket::all(id, buckets.max(1) as u32) {
            let n: i64 = redis.hlen(&b.keys.outbox).await?;
            waiting += n;
        }
        if waiting == 0 {
            return Ok(());
        }
        if start.elapsed() >= DRAIN_WAIT {
            anyhow::bail!("end {id} refused: {waiting} reservation(s) still wait for their order after {} s (is the order writer running?)", DRAIN_WAIT.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes the ledger and the waiting room of every bucket; returns how many keys existed.
async fn remove_keys(redis: &RedisClient, id: &str, buckets: i32) -> anyhow::Result<i64> {
    let mut removed = 0;
    let mut sets: Vec<CampaignKeys> =
        Bucket::all(id, buckets.max(1) as u32).into_iter().map(|b| b.keys).collect();
    if buckets > 1 {
        sets.push(CampaignKeys::new(id));
    }
    for k in sets {
        let mut keys = k.all();
        keys.extend([k.sent.clone(), k.received.clone(), k.room(), k.room_users(), k.room_admitted()]);
        for key in keys {
            let n: i64 = redis.del(&key).await?;
            removed += n;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        Row {
            state: "LIVE".into(),
            ends_at: DateTime::from_timestamp(1_800_000_000, 0).unwrap(),
            pay_window_secs: 900,
            buckets: 1,
            total_stock: 10,
            sold: 3,
            stock_added: 0,
        }
    }

    #[test]
    fn not_before_the_pay_window_nor_with_orders_in_flight() {
        let r = row();
        let end = r.ends_at;
        let early = end + chrono::Duration::seconds(899);
        assert!(ready(&r, end, early, 0, 0).unwrap_err().contains("may be paid until"));
        let after = end + chrono::Duration::seconds(900);
        assert_eq!(ready(&r, end, after, 0, 0), Ok(()));
        assert!(ready(&r, end, after, 2, 0).unwrap_err().contains("2 order(s) still wait"));
        assert!(ready(&r, end, after, 0, 1).unwrap_err().contains("not yet released"));
    }
}
