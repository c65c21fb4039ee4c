//! Reconciliation finds a planted difference of each kind, repairs it, and a second repair
//! changes nothing.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use backend::reconcile::{reconcile, Kind};
use backend::{closer, writer};
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

    let clean = reconcile(&env.pool, &env.redis, &env.scripts, &env.campaign, Duration::from_secs(60), false)
        .await
        .unwrap();
    let kinds: Vec<Kind> = clean.differences.iter().map(|d| d.kind).collect();
    assert_eq!(kinds, vec![Kind::OrderWithoutReservation], "{}", clean.text);

    // Plant the other kinds.
    // RESERVED_WITHOUT_ORDER: u4 reserved long ago, never produced.
    let _: i64 = env
        .redis
        .zadd(&keys.pending, None, None, false, false, (1.0, rec(&u4).request_id.as_str()))
        .await
        .unwrap();
    // DOUBLE_RELEASE: u1's live order released in Redis.
    env.scripts.shared.release(&env.redis, &env.campaign, &rec(&u1).request_id, "u1", 1).await.unwrap();
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

    let before =
        reconcile(&env.pool, &env.redis, &env.scripts, &env.campaign, Duration::from_secs(60), false)
            .await
            .unwrap();
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
    assert!(!before.redis_balanced || before.text.contains("DIFFERS"), "{}", before.text);
    assert!(before.text.contains("initial 10"), "{}", before.text);

    let repaired =
        reconcile(&env.pool, &env.redis, &env.scripts, &env.campaign, Duration::from_secs(60), true)
            .await
            .unwrap();
    assert_eq!(repaired.repaired.len(), 5, "{}", repaired.text);
    let audits: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM audit_log WHERE campaign_id = $1 AND action LIKE 'REPAIR_%'",
    )
    .bind(&env.campaign)
    .fetch_one(&env.pool)
    .await
    .unwrap();
    assert_eq!(audits, 5);

    let after = reconcile(&env.pool, &env.redis, &env.scripts, &env.campaign, Duration::from_secs(60), true)
        .await
        .unwrap();
    assert!(after.differences.is_empty(), "{}", after.text);
    assert!(after.repaired.is_empty());
    assert!(after.redis_balanced && after.pg_balanced, "{}", after.text);
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
    let _ = writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap();
}
