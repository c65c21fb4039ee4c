//! Every release path goes through `release.lua`: the pause_replenish switch sets released units
//! aside and turning it off returns them; every release into the stock tells the gateways; the
//! gateway's undo and the sweeper's claim exclude each other.

use crate::common;

use std::time::Duration;

use backend::workers::reconcile::reconcile;
use common::{campaign_toml, Env, Replenish};
use fred::prelude::*;
use protocol::record::Reservation;
use protocol::scripts::{ReleaseOutcome, ReserveCall, ReserveOutcome};

/// Publishes the environment's campaign again with `pause_replenish` set as given.
async fn set_pause(env: &Env, paused: bool) {
    let file = env.dir.join("campaigns").join(format!("{}.toml", env.campaign));
    let text =
        format!("{}\n[switches]\npause_replenish = {paused}\n", campaign_toml(&env.campaign, 2, 1, 900));
    std::fs::write(&file, text).unwrap();
    backend::campaign::publish::publish(
        &env.pool,
        &env.redis,
        &env.scripts,
        &env.dir.join("campaigns"),
        &env.campaign,
    )
    .await
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pause_replenish_sets_released_units_aside_until_it_is_turned_off() {
    let env = Env::new(2, 1, 1).await;
    let mut replenish = Replenish::listen().await;
    let (a, b) = (env.reserve("a", 1).await, env.reserve("b", 1).await);
    let a_id = Reservation::from_json(&a).unwrap().request_id;
    env.produce(0, vec![a, b]).await;
    env.drain(10).await;
    assert_eq!(env.redis_stock().await, 0);

    set_pause(&env, true).await;
    let meta: Option<String> = env.redis.hget(&env.keys().meta, "pause_replenish").await.unwrap();
    assert_eq!(meta.as_deref(), Some("1"));
    // a's order closes unpaid: the unit is released, but aside, and the gateways are not told.
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE request_id = $1")
        .bind(&a_id)
        .execute(&env.pool)
        .await
        .unwrap();
    assert_eq!(backend::workers::closer::close_due(&env.pool, 10).await.unwrap(), 1);
    assert_eq!(
        backend::workers::closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(),
        1
    );
    assert_eq!(env.redis_stock().await, 0, "nothing goes back to the sale while paused");
    assert_eq!(env.stat("aside_qty").await, 1);
    assert!(!replenish.heard(&env.campaign, Duration::from_millis(300)).await);
    // So the edge keeps answering sold out.
    let late = env
        .scripts
        .shared
        .reserve(&env.redis, &env.bucket(), &ReserveCall::new("late-1", "c", 1))
        .await
        .unwrap();
    assert_eq!(late, ReserveOutcome::SoldOut { remaining: 0 });
    // Reconcile sees the unit aside, and every equation holds.
    let rep = reconcile(env.stores(Duration::from_secs(60)), &env.campaign, false).await.unwrap();
    assert!(rep.text.contains("set aside 1"), "{}", rep.text);
    assert!(rep.redis_balanced && rep.pg_balanced && rep.across_balanced, "{}", rep.text);
    assert!(rep.differences.is_empty(), "{}", rep.text);

    // Turned off (edit the file, publish again): the unit is back, and the gateways hear it.
    set_pause(&env, false).await;
    assert_eq!(env.redis_stock().await, 1);
    assert_eq!(env.stat("aside_qty").await, 0);
    assert_eq!(env.stat("returned_qty").await, 1);
    assert!(replenish.heard(&env.campaign, Duration::from_secs(5)).await);
    let again = env
        .scripts
        .shared
        .reserve(&env.redis, &env.bucket(), &ReserveCall::new("late-2", "c", 1))
        .await
        .unwrap();
    assert!(matches!(again, ReserveOutcome::Reserved { remaining: 0, .. }), "{again:?}");
    let rep = reconcile(env.stores(Duration::from_secs(60)), &env.campaign, false).await.unwrap();
    assert!(rep.redis_balanced && rep.across_balanced, "{}", rep.text);
    // Publishing again with the switch off changes nothing more.
    set_pause(&env, false).await;
    assert_eq!(env.redis_stock().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_release_into_the_stock_tells_the_gateways() {
    let env = Env::new(3, 1, 1).await;
    let mut replenish = Replenish::listen().await;
    // The gateway's undo of a late reservation.
    let undone = env.reserve("undone", 1).await;
    let id = Reservation::from_json(&undone).unwrap().request_id;
    let out = env.scripts.shared.undo(&env.redis, &env.bucket(), &id, None).await.unwrap();
    assert_eq!(out, ReleaseOutcome::Released { remaining: 3 });
    assert!(replenish.heard(&env.campaign, Duration::from_secs(5)).await, "undo");
    // A release by request id (the writer's refusal, a repair, the closer all call this).
    let r = env.reserve("released", 1).await;
    let id = Reservation::from_json(&r).unwrap().request_id;
    let out = env.scripts.shared.release(&env.redis, &env.bucket(), &id, "released", 1).await.unwrap();
    assert_eq!(out, ReleaseOutcome::Released { remaining: 3 });
    assert!(replenish.heard(&env.campaign, Duration::from_secs(5)).await, "release");
    // A release that changes nothing says nothing.
    let out = env.scripts.shared.release(&env.redis, &env.bucket(), &id, "released", 1).await.unwrap();
    assert_eq!(out, ReleaseOutcome::AlreadyReleased);
    assert!(!replenish.heard(&env.campaign, Duration::from_millis(300)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_undo_and_the_sweepers_claim_exclude_each_other() {
    let env = Env::new(5, 1, 1).await;
    let keys = env.keys();
    // Claimed first: the sweeper has produced the record, so the undo leaves the reservation.
    let swept = env.reserve("swept", 1).await;
    let swept_id = Reservation::from_json(&swept).unwrap().request_id;
    let claimed = env.scripts.claim_for_sweep(&env.redis, &env.bucket(), Duration::ZERO, 100).await.unwrap();
    assert_eq!(claimed, vec![String::from_utf8(swept.clone()).unwrap()]);
    let out = env.scripts.shared.undo(&env.redis, &env.bucket(), &swept_id, None).await.unwrap();
    assert_eq!(out, ReleaseOutcome::Claimed);
    assert_eq!(env.redis_stock().await, 4, "the reservation stands");
    assert_eq!(env.outbox_len().await, 1);
    // It becomes an order, and the ack clears the claim.
    env.produce(0, vec![swept]).await;
    env.drain(10).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 1);
    let claims: i64 = env.redis.hlen(&keys.claims).await.unwrap();
    assert_eq!(claims, 0);

    // Undone first: the sweeper finds nothing to produce.
    let undone = env.reserve("undone", 1).await;
    let undone_id = Reservation::from_json(&undone).unwrap().request_id;
    assert!(matches!(
        env.scripts.shared.undo(&env.redis, &env.bucket(), &undone_id, None).await.unwrap(),
        ReleaseOutcome::Released { .. }
    ));
    let claimed = env.scripts.claim_for_sweep(&env.redis, &env.bucket(), Duration::ZERO, 100).await.unwrap();
    assert!(claimed.is_empty(), "{claimed:?}");
    assert_eq!(
        env.scripts.shared.undo(&env.redis, &env.bucket(), &undone_id, None).await.unwrap(),
        ReleaseOutcome::NothingHeld
    );
    assert_eq!(env.redis_stock().await, 4);

    // The sweeper's age is measured with Redis' clock against the reservation's own time.
    let young = env.reserve("young", 1).await;
    let claimed =
        env.scripts.claim_for_sweep(&env.redis, &env.bucket(), Duration::from_secs(60), 100).await.unwrap();
    assert!(claimed.is_empty());
    let young_id = Reservation::from_json(&young).unwrap().request_id;
    let claim: Option<String> = env.redis.hget(&keys.claims, young_id.as_str()).await.unwrap();
    assert_eq!(claim, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_undo_forgets_the_nonce_its_request_spent_unless_the_reservation_stands() {
    let env = Env::new(5, 2, 1).await;
    let keys = protocol::keys::CampaignKeys::new(&env.campaign);
    let nonce = |n: &str| protocol::scripts::Nonce {
        key: keys.nonce("jti-1", n),
        ttl_secs: 60,
        fingerprint: format!("sig-{n}"),
    };
    let reserve = |id: &'static str, n: protocol::scripts::Nonce| {
        let (scripts, redis, campaign) = (env.scripts.shared.clone(), env.redis.clone(), env.bucket());
        async move {
            scripts
                .reserve(&redis, &campaign, &ReserveCall::new(id, "buyer", 1).with_nonce(Some(n.clone())))
                .await
                .unwrap()
        }
    };

    // Undone (the buyer was told SERVICE_DEGRADED, nothing reserved): the same signed request
    // sent again reserves anew, under its new request id.
    let first = reserve("first", nonce("n1")).await;
    assert!(matches!(first, ReserveOutcome::Reserved { .. }), "{first:?}");
    let out =
        env.scripts.shared.undo(&env.redis, &env.bucket(), "first", Some(&nonce("n1").key)).await.unwrap();
    assert!(matches!(out, ReleaseOutcome::Released { .. }), "{out:?}");
    let again = reserve("again", nonce("n1")).await;
    assert!(matches!(again, ReserveOutcome::Reserved { .. }), "a new attempt, not a retry: {again:?}");
    // ... and that one is now a safe retry's first answer.
    assert_eq!(reserve("third", nonce("n1")).await, ReserveOutcome::Retry { request_id: "again".into() });

    // An undo of another request id never forgets a nonce it did not spend.
    let out =
        env.scripts.shared.undo(&env.redis, &env.bucket(), "nobody", Some(&nonce("n1").key)).await.unwrap();
    assert_eq!(out, ReleaseOutcome::NothingHeld);
    assert_eq!(reserve("fourth", nonce("n1")).await, ReserveOutcome::Retry { request_id: "again".into() });

    // Claimed by the sweeper: the reservation stands, and so does the nonce (a retry is QUEUED
    // with the first id).
    // (the limit is 2: "again" holds 1, this is the second)
    let swept = reserve("swept", nonce("n2")).await;
    assert!(matches!(swept, ReserveOutcome::Reserved { .. }), "{swept:?}");
    env.scripts.claim_for_sweep(&env.redis, &env.bucket(), Duration::ZERO, 100).await.unwrap();
    let out =
        env.scripts.shared.undo(&env.redis, &env.bucket(), "swept", Some(&nonce("n2").key)).await.unwrap();
    assert_eq!(out, ReleaseOutcome::Claimed);
    assert_eq!(reserve("retry", nonce("n2")).await, ReserveOutcome::Retry { request_id: "swept".into() });
}

/// A safe retry answered QUEUED makes the reservation stand: gateway 1's call reserved but its
/// answer was late; the buyer sent the same signed request to gateway 2 and was told QUEUED with
/// the first request id; gateway 1's undo, which Redis runs after that retry, must leave the
/// reservation (and its nonce) alone, or the buyer's QUEUED would end released with no order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_safe_retry_answered_queued_makes_the_reservation_stand() {
    let env = Env::new(5, 1, 1).await;
    let keys = protocol::keys::CampaignKeys::new(&env.campaign);
    let nonce = protocol::scripts::Nonce {
        key: keys.nonce("jti-1", "n1"),
        ttl_secs: 60,
        fingerprint: "sig-n1".into(),
    };
    let scripts = &env.scripts.shared;

    // Gateway 1's call: it runs in Redis, its answer never reaches gateway 1.
    let late = scripts
        .reserve(
            &env.redis,
            &env.bucket(),
            &ReserveCall::new("late", "buyer", 1).with_nonce(Some(nonce.clone())),
        )
        .await
        .unwrap();
    assert!(matches!(late, ReserveOutcome::Reserved { .. }), "{late:?}");
    // Gateway 2: the same signed request, answered from the nonce (QUEUED, the first id).
    let retry = scripts
        .reserve(
            &env.redis,
            &env.bucket(),
            &ReserveCall::new("retry", "buyer", 1).with_nonce(Some(nonce.clone())),
        )
        .await
        .unwrap();
    assert_eq!(retry, ReserveOutcome::Retry { request_id: "late".into() });
    // Gateway 1 times out and undoes its call.
    let out = scripts.undo(&env.redis, &env.bucket(), "late", Some(&nonce.key)).await.unwrap();
    assert_eq!(out, ReleaseOutcome::Claimed, "the retry answered QUEUED, so the reservation stands");

    let released: bool = env.redis.hexists(&keys.released, "late").await.unwrap();
    assert!(!released, "the QUEUED reservation was not released");
    let record: Option<String> = env.redis.hget(&keys.outbox, "late").await.unwrap();
    assert!(record.is_some(), "the record stays in the outbox, on its way to an order");
    let held: Option<i64> = env.redis.hget(&keys.bought, "buyer").await.unwrap();
    assert_eq!(held, Some(1));
    // The nonce stands too: the same request sent again is still the same QUEUED.
    let again = scripts
        .reserve(
            &env.redis,
            &env.bucket(),
            &ReserveCall::new("third", "buyer", 1).with_nonce(Some(nonce.clone())),
        )
        .await
        .unwrap();
    assert_eq!(again, ReserveOutcome::Retry { request_id: "late".into() });
    // The sweeper still produces it (a retry's mark is a claim, not a repair).
    let swept = env.scripts.claim_for_sweep(&env.redis, &env.bucket(), Duration::ZERO, 100).await.unwrap();
    assert_eq!(swept.len(), 1, "{swept:?}");
}
