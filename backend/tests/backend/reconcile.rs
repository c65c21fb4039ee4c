//! Reconciliation finds a planted difference of each kind, repairs it, and a second repair
//! changes nothing; it never repairs a reservation that may still be in flight; and a unit it
//! re-took comes back exactly once when its order closes.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use backend::redis::RepairClaim;
use backend::workers::closer;
use backend::workers::reconcile::{reconcile, Kind};
use backend::writer;
use common::Env;
use fred::prelude::*;
use protocol::record::Reservation;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconciliation_finds_and_repairs_each_kind_of_difference() {
    let env = Env::new(10, 1, 1).await;
    let keys = env.keys();
    let rec = |b: &Vec<u8>| Reservation::from_json(b).unwrap();
    let (u1, u2, u3, u4) = (
        env.reserve("u1", 1).await,
        env.reserve("u2", 1).await,
        env.reserve("u3", 1).await,
        env.reserve("u4", 1).await,
    );
    // An order Redis never reserved (e.g. Redis lost the reservation).
    let mut ghost = rec(&u1);
    ghost.request_id = "ghost-request".into();
    ghost.user = "ghost".into();
    env.produce(0, vec![u1.clone(), u2.clone(), u3.clone(), serde_json::to_vec(&ghost).unwrap()]).await;
    env.drain(10).await;

    let age = Duration::from_secs(60);
    let clean = reconcile(env.stores(age), &env.campaign, false).await.unwrap();
    let kinds: Vec<Kind> = clean.differences.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, vec![Kind::OrderWithoutReservation], "{}", clean.text);

    // Plant the other kinds.
    // RESERVED_WITHOUT_ORDER: u4 reserved long ago (by Redis' clock), never produced.
    env.age_reservation(&rec(&u4).request_id, Duration::from_secs(3600)).await;
    // DOUBLE_RELEASE: u1's live order released in Redis.
    env.scripts.shared.release(&env.redis, &env.bucket(), &rec(&u1).request_id, "u1", 1).await.unwrap();
    // CLOSED_NOT_RELEASED: u2's order closed, Redis not told.
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE request_id = $1")
        .bind(rec(&u2).request_id)
        .execute(&env.pool)
        .await
        .unwrap();
    assert_eq!(closer::close_due(&env.pool, 10).await.unwrap(), 1);
    // ORDERED_NOT_ACKED: u3's committed order still in the outbox.
    let _: i64 = env
        .redis
        .hset(&keys.outbox, (rec(&u3).request_id.as_str(), String::from_utf8(u3.clone()).unwrap()))
        .await
        .unwrap();

    let before = reconcile(env.stores(age), &env.campaign, false).await.unwrap();
    let found: BTreeSet<(Kind, String)> =
        before.differences.iter().map(|d| (d.kind, d.request_id.clone())).collect();
    let want: BTreeSet<(Kind, String)> = [
        (Kind::ReservedWithoutOrder, rec(&u4).request_id),
        (Kind::DoubleRelease, rec(&u1).request_id),
        (Kind::ClosedNotReleased, rec(&u2).request_id),
        (Kind::OrderedNotAcked, rec(&u3).request_id),
        (Kind::OrderWithoutReservation, "ghost-request".to_string()),
    ]
    .into_iter()
    .collect();
    assert_eq!(found, want, "{}", before.text);
    // Each store balances on its own (every planted change went through its counters); across
    // them, Redis holds 3 units (4 reserved - 1 released) for 3 live orders + 1 queued.
    assert!(before.redis_balanced && before.pg_balanced, "{}", before.text);
    assert!(!before.across_balanced, "{}", before.text);
    assert!(before.text.contains("initial 10") && before.text.contains("=> DIFFERS"), "{}", before.text);

    let repaired = reconcile(env.stores(age), &env.campaign, true).await.unwrap();
    assert_eq!(repaired.repaired.len(), 5, "{}", repaired.text);
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE campaign_id = $1 AND action LIKE 'REPAIR_%'",
    )
    .bind(&env.campaign)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(audits, 5);

    let after = reconcile(env.stores(age), &env.campaign, true).await.unwrap();
    assert!(after.differences.is_empty(), "{}", after.text);
    assert!(after.repaired.is_empty() && after.skipped.is_empty());
    assert!(after.redis_balanced && after.pg_balanced && after.across_balanced, "{}", after.text);
    assert!(!after.text.contains("DIFFERS"), "{}", after.text);
    // Live orders u1, u3, ghost: 3 sold; Redis holds 10 - 3 = 7.
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 3);
    assert_eq!(env.redis_stock().await, 7);
    assert_eq!(env.outbox_len().await, 0);
    // u4 can never become an order now, even if its record arrives late.
    env.produce(0, vec![u4.clone()]).await;
    env.drain(10).await;
    let r: String = sqlx::query_scalar("SELECT reason FROM reservation_results WHERE request_id = $1")
        .bind(rec(&u4).request_id)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(r, "RECONCILED_NO_ORDER");
    assert_eq!(
        env.count("SELECT count(*) FROM orders WHERE campaign_id = $1 AND status <> 'CLOSED'").await,
        3
    );
    assert_eq!(env.redis_stock().await, 7);
    let end = env.end_offsets().await[0];
    assert_eq!(
        writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(),
        end,
        "the late record was consumed"
    );
}

/// A reservation whose record still waits in Kafka (the writer is behind) is never repaired, however
/// old: the repair says why it skipped, gives the entry back to the sweeper, and the record becomes
/// the order its buyer was promised. A young one is not repaired either.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn repair_never_cancels_a_reservation_that_may_still_be_in_flight() {
    let env = Env::new(10, 1, 1).await;
    let keys = env.keys();
    let rec = |b: &Vec<u8>| Reservation::from_json(b).unwrap();
    let waiting = env.reserve("waiting", 1).await;
    let young = env.reserve("young", 1).await;
    let (w_id, y_id) = (rec(&waiting).request_id, rec(&young).request_id);
    env.age_reservation(&w_id, Duration::from_secs(3600)).await;
    env.age_reservation(&y_id, Duration::from_millis(1500)).await;
    // The writer has not read this yet.
    env.produce(0, vec![waiting.clone()]).await;

    let sweep_age = Duration::from_secs(1);
    let rep = reconcile(env.stores(sweep_age), &env.campaign, true).await.unwrap();
    let stale: Vec<&str> = rep
        .differences
        .iter()
        .filter(|d| d.kind == Kind::ReservedWithoutOrder)
        .map(|d| d.request_id.as_str())
        .collect();
    assert_eq!(stale.len(), 2, "{}", rep.text);
    assert!(rep.repaired.is_empty(), "{}", rep.text);
    let why: std::collections::HashMap<&str, &str> =
        rep.skipped.iter().map(|(_, id, why)| (id.as_str(), why.as_str())).collect();
    assert!(why[w_id.as_str()].contains("may still be waiting in Kafka"), "{}", rep.text);
    assert!(why[y_id.as_str()].contains("3 × the sweep age"), "{}", rep.text);
    assert!(rep.text.contains("skipped RESERVED_WITHOUT_ORDER"), "{}", rep.text);
    // Nothing was refused or released, and the sweeper has both entries back.
    assert_eq!(env.count("SELECT count(*) FROM reservation_results WHERE campaign_id = $1").await, 0);
    assert_eq!(env.stat("released_count").await, 0);
    for id in [&w_id, &y_id] {
        let claim: Option<String> = env.redis.hget(&keys.claims, id.as_str()).await.unwrap();
        assert_eq!(claim.as_deref(), Some("sweep"), "{id}");
        let score: Option<f64> = env.redis.zscore(&keys.pending, id.as_str()).await.unwrap();
        assert!(score.is_some(), "{id} is pending again");
    }

    // The writer catches up: the promised order is made.
    env.drain(10).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 1);
    let after = reconcile(env.stores(sweep_age), &env.campaign, false).await.unwrap();
    assert!(after.across_balanced && after.redis_balanced, "{}", after.text);

    // An entry acked meanwhile cannot be claimed for a repair.
    let claim = env.scripts.claim_for_repair(&env.redis, &env.bucket(), &w_id).await.unwrap();
    assert_eq!(claim, RepairClaim::Gone);
}

/// Repair then close: a DOUBLE_RELEASE repair re-takes the unit; closing the order unpaid later
/// gives it back exactly once (the release ledger forgot the first release).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unit_re_taken_by_repair_returns_once_when_its_order_closes() {
    let env = Env::new(5, 1, 1).await;
    let r = env.reserve("buyer", 1).await;
    let id = Reservation::from_json(&r).unwrap().request_id;
    env.produce(0, vec![r]).await;
    env.drain(10).await;
    assert_eq!(env.redis_stock().await, 4);
    // A wrong release of the live order's unit.
    env.scripts.shared.release(&env.redis, &env.bucket(), &id, "buyer", 1).await.unwrap();
    assert_eq!(env.redis_stock().await, 5);
    let age = Duration::from_secs(60);
    let rep = reconcile(env.stores(age), &env.campaign, true).await.unwrap();
    assert_eq!(rep.repaired.len(), 1, "{}", rep.text);
    assert_eq!(rep.repaired[0].0, Kind::DoubleRelease);
    assert_eq!(env.redis_stock().await, 4);

    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE request_id = $1")
        .bind(&id)
        .execute(&env.pool)
        .await
        .unwrap();
    assert_eq!(closer::close_due(&env.pool, 10).await.unwrap(), 1);
    assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(), 1);
    assert_eq!(env.redis_stock().await, 5, "the closed order's unit is back in the sale");
    assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(), 0);
    assert_eq!(env.redis_stock().await, 5, "and only once");
    let clean = reconcile(env.stores(age), &env.campaign, false).await.unwrap();
    assert!(clean.differences.is_empty(), "{}", clean.text);
    assert!(clean.redis_balanced && clean.pg_balanced && clean.across_balanced, "{}", clean.text);
}

/// The closer closes and releases an order between reconciliation's PostgreSQL read and its
/// Redis read: the snapshot shows a live order whose unit Redis released (DOUBLE_RELEASE). The
/// repair re-checks under the order's row lock, finds it closed, and leaves the unit in the sale.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_repair_re_checks_its_premise_when_the_order_closed_between_the_reads() {
    let env = Env::new(5, 1, 1).await;
    let r = env.reserve("buyer", 1).await;
    let id = Reservation::from_json(&r).unwrap().request_id;
    env.produce(0, vec![r]).await;
    env.drain(10).await;
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE request_id = $1")
        .bind(&id)
        .execute(&env.pool)
        .await
        .unwrap();
    assert_eq!(env.redis_stock().await, 4);

    // The closer runs between the two reads.
    let close = || -> futures::future::BoxFuture<'_, ()> {
        Box::pin(async {
            assert_eq!(closer::close_due(&env.pool, 10).await.unwrap(), 1);
            assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(), 1);
        })
    };
    let age = Duration::from_secs(60);
    let mut stores = env.stores(age);
    stores.between_reads = Some(&close);
    let rep = reconcile(stores, &env.campaign, true).await.unwrap();
    let kinds: Vec<Kind> = rep.differences.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, vec![Kind::DoubleRelease], "the snapshot saw the race: {}", rep.text);
    assert!(rep.repaired.is_empty(), "{}", rep.text);
    assert_eq!(rep.skipped.len(), 1, "{}", rep.text);
    assert_eq!(env.redis_stock().await, 5, "the closed order's unit stays in the sale");

    let clean = reconcile(env.stores(age), &env.campaign, false).await.unwrap();
    assert!(clean.differences.is_empty(), "{}", clean.text);
    assert!(clean.redis_balanced && clean.pg_balanced && clean.across_balanced, "{}", clean.text);
}
