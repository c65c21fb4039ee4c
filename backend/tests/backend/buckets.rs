//! Hot-stock buckets in the order writer: publish splits the stock; a reservation lives, is
//! acked, swept, closed and released in its buyer's home bucket; the sweeper finishes a transfer
//! whose take never ran; reconciliation balances a bucketed sale and names a planted difference
//! with its bucket; rebalance evens the buckets and keeps the sum.

use crate::common;

use std::collections::HashMap;
use std::time::Duration;

use backend::campaign::publish::{publish, Published};
use backend::campaign::rebalance;
use backend::workers::reconcile::{reconcile, Kind};
use backend::workers::{closer, sweeper};
use common::Env;
use fred::prelude::*;
use protocol::record::Reservation;
use protocol::scripts::{bucket_shares, ReserveCall, ReserveOutcome};

/// A user whose home bucket is `index`.
fn user_in(env: &Env, index: u32, prefix: &str) -> String {
    (0..10_000)
        .map(|i| format!("{prefix}{i}"))
        .find(|u| env.home(u).index == index)
        .expect("a user for every bucket")
}

async fn hlen(env: &Env, key: &str) -> i64 {
    env.redis.hlen(key).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn publish_splits_the_stock_and_never_changes_the_count_of_a_published_campaign() {
    let env = Env::with_buckets(10, 1, 1, 3).await;
    assert_eq!(env.bucket_stocks().await, bucket_shares(10, 3));
    for b in env.all_buckets() {
        let meta: HashMap<String, String> = env.redis.hgetall(&b.keys.meta).await.unwrap();
        assert_eq!(meta.get("buckets").map(String::as_str), Some("3"), "{meta:?}");
        assert_eq!(meta.get("bucket"), Some(&b.index.to_string()));
        assert_eq!(meta.get("total"), Some(&bucket_shares(10, 3)[b.index as usize].to_string()));
        assert_eq!(meta.get("pause_replenish").map(String::as_str), Some("0"), "every bucket paused or not");
    }
    assert_eq!(env.count("SELECT buckets::int8 FROM campaigns WHERE id = $1").await, 3);
    // Nothing of the campaign is under its own (unbucketed) keys.
    assert_eq!(hlen(&env, &env.keys().meta).await, 0);

    let dir = env.dir.join("campaigns");
    let again = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap();
    assert_eq!(again, Published::Unchanged { stock_version: 1 });
    // A reservation in bucket 1: publishing again is refused, naming it; no bucket is reloaded.
    env.reserve_home(&user_in(&env, 1, "p"), 1).await;
    let out = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap();
    let text = out.to_string();
    assert!(text.contains("bucket 1 of 3") && text.contains("no bucket was loaded"), "{text}");
    let mut expect = bucket_shares(10, 3);
    expect[1] -= 1;
    assert_eq!(env.bucket_stocks().await, expect);

    // READY: another count is refused, naming the file and the field; nothing changes.
    let file = dir.join(format!("{}.toml", env.campaign));
    std::fs::write(&file, common::campaign_toml_buckets(&env.campaign, 10, 1, 2)).unwrap();
    let err = publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains(&format!("{}.toml", env.campaign)) && msg.contains("buckets"), "{msg}");
    assert!(msg.contains("buckets is 3 published, 2 in the file"), "{msg}");
    assert_eq!(env.count("SELECT buckets::int8 FROM campaigns WHERE id = $1").await, 3);
    assert_eq!(env.bucket_stocks().await, expect);

    // pause_replenish reaches every bucket.
    let paused = format!(
        "{}[switches]\npause_replenish = true\n",
        common::campaign_toml_buckets(&env.campaign, 10, 1, 3)
    );
    std::fs::write(&file, paused).unwrap();
    publish(&env.pool, &env.redis, &env.scripts, &dir, &env.campaign).await.unwrap();
    for b in env.all_buckets() {
        let p: Option<String> = env.redis.hget(&b.keys.meta, "pause_replenish").await.unwrap();
        assert_eq!(p.as_deref(), Some("1"), "bucket {}", b.index);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reservation_is_acked_swept_closed_and_released_in_its_home_bucket() {
    let env = Env::with_buckets(9, 1, 1, 3).await;
    let (a, b) = (user_in(&env, 2, "a"), user_in(&env, 1, "b"));
    let (home_a, home_b) = (env.home(&a), env.home(&b));

    // a: reserved in bucket 2, written and acked there.
    let rec_a = env.reserve_home(&a, 1).await;
    let id_a = Reservation::from_json(&rec_a).unwrap().request_id;
    assert_eq!(env.bucket_stocks().await, vec![3, 3, 2]);
    env.produce(0, vec![rec_a]).await;
    env.drain(10).await;
    assert_eq!(hlen(&env, &home_a.keys.outbox).await, 0, "acked in the home bucket");
    let acked: Option<i64> = env.redis.hget(&home_a.keys.stats, "acked_count").await.unwrap();
    assert_eq!(acked, Some(1));

    // b: reserved in bucket 1, never produced: the sweeper finds it there and produces it.
    env.reserve_home(&b, 1).await;
    let producer = env.producer();
    let n =
        sweeper::sweep_once(&env.pool, &env.redis, &env.scripts, &producer, Duration::ZERO).await.unwrap();
    assert_eq!(n, 1);
    env.drain(10).await;
    assert_eq!(hlen(&env, &home_b.keys.outbox).await, 0);
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 2);

    // a's order closes unpaid: its unit goes back to bucket 2, the ledger there names it.
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE request_id = $1")
        .bind(&id_a)
        .execute(&env.pool)
        .await
        .unwrap();
    assert_eq!(closer::close_due(&env.pool, 10).await.unwrap(), 1);
    assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(), 1);
    assert_eq!(env.bucket_stocks().await, vec![3, 2, 3]);
    let released: bool = env.redis.hexists(&home_a.keys.released, &id_a).await.unwrap();
    assert!(released);
    let held: Option<i64> = env.redis.hget(&home_a.keys.bought, &a).await.unwrap();
    assert_eq!(held, None, "a holds nothing any more");
    let rep = reconcile(env.stores(Duration::from_secs(60)), &env.campaign, false).await.unwrap();
    assert!(rep.redis_balanced && rep.pg_balanced && rep.across_balanced, "{}", rep.text);
    assert!(rep.differences.is_empty(), "{}", rep.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweeper_finishes_a_transfer_whose_take_never_ran_once() {
    let env = Env::with_buckets(10, 1, 1, 2).await;
    let all = env.all_buckets();
    let (given, _) = env.scripts.shared.give(&env.redis, &all[0], "t-stuck", 1, 2, false).await.unwrap();
    assert_eq!(given, 2);
    assert_eq!(env.bucket_stocks().await, vec![3, 5], "in flight: in neither stock");
    // Not older than the sweep age yet: left to the caller that gave it.
    let young =
        sweeper::finish_transfers_once(&env.pool, &env.redis, &env.scripts, Duration::from_secs(3600))
            .await
            .unwrap();
    assert_eq!(young, 0);
    assert_eq!(env.bucket_stocks().await, vec![3, 5]);

    tokio::time::sleep(Duration::from_millis(5)).await;
    let n =
        sweeper::finish_transfers_once(&env.pool, &env.redis, &env.scripts, Duration::ZERO).await.unwrap();
    assert_eq!(n, 1);
    assert_eq!(env.bucket_stocks().await, vec![3, 7]);
    let again =
        sweeper::finish_transfers_once(&env.pool, &env.redis, &env.scripts, Duration::ZERO).await.unwrap();
    assert_eq!(again, 0, "a second pass adds nothing");
    assert_eq!(env.bucket_stocks().await, vec![3, 7]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_balances_a_bucketed_sale_and_names_each_difference_with_its_bucket() {
    let env = Env::with_buckets(12, 2, 1, 3).await;
    let all = env.all_buckets();
    // Buyers in every bucket; bucket 0 takes 3 units from bucket 1 (a whole transfer) first.
    let (given, _) = env.scripts.shared.give(&env.redis, &all[1], "t-done", 0, 3, false).await.unwrap();
    env.scripts.shared.take(&env.redis, &all[0], "t-done", given).await.unwrap();
    let mut records = Vec::new();
    for (i, n) in [(0, 2), (1, 1), (2, 2)] {
        records.push(env.reserve_home(&user_in(&env, i, "r"), n).await);
    }
    env.produce(0, records).await;
    env.drain(10).await;
    let age = Duration::from_secs(60);
    let rep = reconcile(env.stores(age), &env.campaign, false).await.unwrap();
    assert!(rep.redis_balanced && rep.pg_balanced && rep.across_balanced, "{}", rep.text);
    assert!(rep.differences.is_empty(), "{}", rep.text);
    for b in &all {
        let line = format!("bucket {} ({}", b.index, b.keys.meta.strip_suffix(":meta").unwrap());
        assert!(rep.text.contains(&line), "{line} in {}", rep.text);
    }
    assert!(rep.text.contains("in flight 0"), "{}", rep.text);

    // A unit removed from bucket 2's stock: Redis differs, in bucket 2 only.
    let _: i64 = env.redis.decr(&all[2].keys.stock).await.unwrap();
    let rep = reconcile(env.stores(age), &env.campaign, false).await.unwrap();
    assert!(!rep.redis_balanced && rep.across_balanced, "{}", rep.text);
    let differs: Vec<&str> =
        rep.text.lines().filter(|l| l.contains("DIFFERS") && l.contains("  bucket ")).collect();
    assert_eq!(differs.len(), 1, "{}", rep.text);
    assert!(differs[0].trim_start().starts_with("bucket 2 "), "{}", rep.text);
    let _: i64 = env.redis.incr(&all[2].keys.stock).await.unwrap();

    // A transfer whose take never ran, and an order not acked in its buyer's home bucket.
    env.scripts.shared.give(&env.redis, &all[2], "t-stuck", 1, 1, false).await.unwrap();
    let late = env.reserve_home(&user_in(&env, 0, "late"), 1).await;
    env.produce(0, vec![late.clone()]).await;
    env.drain(10).await;
    let late = Reservation::from_json(&late).unwrap();
    let _: i64 = env
        .redis
        .hset(&env.home(&late.user).keys.outbox, (&late.request_id, serde_json::to_string(&late).unwrap()))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let rep = reconcile(env.stores(Duration::ZERO), &env.campaign, true).await.unwrap();
    let found: Vec<(Kind, String, u32)> =
        rep.differences.iter().map(|d| (d.kind, d.request_id.clone(), d.bucket)).collect();
    assert_eq!(
        found,
        vec![
            (Kind::OrderedNotAcked, late.request_id.clone(), 0),
            (Kind::TransferInFlight, "t-stuck".into(), 1)
        ],
        "{}",
        rep.text
    );
    assert!(rep.text.contains("TRANSFER_IN_FLIGHT t-stuck bucket=1"), "{}", rep.text);
    assert_eq!(rep.repaired.len(), 2, "{}", rep.text);
    let rep = reconcile(env.stores(Duration::ZERO), &env.campaign, false).await.unwrap();
    assert!(rep.redis_balanced && rep.across_balanced && rep.differences.is_empty(), "{}", rep.text);
    assert_eq!(env.bucket_stocks().await.iter().sum::<i64>(), 12 - 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rebalance_evens_the_buckets_and_keeps_the_sum() {
    let env = Env::with_buckets(10, 1, 1, 3).await;
    let all = env.all_buckets();
    // Everything moved into bucket 0.
    for (i, qty) in [(1u32, 3i64), (2, 3)] {
        let id = format!("pile-{i}");
        env.scripts.shared.give(&env.redis, &all[i as usize], &id, 0, qty, false).await.unwrap();
        env.scripts.shared.take(&env.redis, &all[0], &id, qty).await.unwrap();
    }
    assert_eq!(env.bucket_stocks().await, vec![10, 0, 0]);
    let out = rebalance::rebalance(&env.pool, &env.redis, &env.scripts.shared, &env.campaign).await.unwrap();
    assert_eq!(out.before, vec![10, 0, 0]);
    assert_eq!(out.after, vec![4, 3, 3]);
    assert_eq!(env.bucket_stocks().await, vec![4, 3, 3]);
    assert!(out.to_string().contains("after: [4, 3, 3] (sum 10)"), "{out}");

    // Already even: nothing moves; the ledgers still balance.
    let again =
        rebalance::rebalance(&env.pool, &env.redis, &env.scripts.shared, &env.campaign).await.unwrap();
    assert!(again.moved.is_empty() && again.after == vec![4, 3, 3], "{again}");
    let rep = reconcile(env.stores(Duration::ZERO), &env.campaign, false).await.unwrap();
    assert!(rep.redis_balanced && rep.differences.is_empty(), "{}", rep.text);

    // A campaign without buckets is refused, clearly.
    let single = Env::new(5, 1, 1).await;
    let err = rebalance::rebalance(&single.pool, &single.redis, &single.scripts.shared, &single.campaign)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("no hot-stock buckets"), "{err}");
    assert_eq!(single.redis_stock().await, 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn generated_reservations_move_stock_to_short_home_buckets_until_every_bucket_is_empty() {
    let env = Env::with_buckets(7, 1, 1, 3).await;
    let scripts = &env.scripts.shared;
    // 7 units, 10 users: every unit is sold wherever its buyer's home is, then sold out.
    let g = backend::kafka::produce::generate::generate(&env.redis, scripts, &env.campaign, 3, 10, 10)
        .await
        .unwrap();
    assert_eq!(g.records.len(), 7, "{:?}", g.stopped);
    assert!(g.stopped.unwrap_or_default().contains("sold out"));
    assert_eq!(env.bucket_stocks().await, vec![0, 0, 0]);
    for r in &g.records {
        let rec = Reservation::from_json(&r.value).unwrap();
        let held: Option<i64> = env.redis.hget(&env.home(&rec.user).keys.bought, &rec.user).await.unwrap();
        assert_eq!(held, Some(1), "{} holds in its home bucket", rec.user);
    }
    // Every transfer was taken: the Redis equation holds in every bucket.
    let rep = reconcile(env.stores(Duration::from_secs(60)), &env.campaign, false).await.unwrap();
    assert!(rep.redis_balanced, "{}", rep.text);

    // Buyers all at home in bucket 0 get the units of buckets 1 and 2 moved to them.
    let env = Env::with_buckets(3, 1, 1, 3).await;
    for prefix in ["x", "y", "z"] {
        let user = user_in(&env, 0, prefix);
        let rid = format!("rid-{prefix}");
        let out = backend::kafka::produce::generate::reserve_home(
            &env.redis,
            scripts,
            &env.campaign,
            3,
            &rid,
            &user,
        )
        .await
        .unwrap();
        assert!(matches!(out, ReserveOutcome::Reserved { .. }), "{user}: {out:?}");
    }
    let sent: i64 =
        hlen(&env, &env.all_buckets()[1].keys.sent).await + hlen(&env, &env.all_buckets()[2].keys.sent).await;
    assert_eq!((sent, hlen(&env, &env.all_buckets()[0].keys.received).await), (2, 2));
    let last = user_in(&env, 0, "w");
    let out = backend::kafka::produce::generate::reserve_home(
        &env.redis,
        scripts,
        &env.campaign,
        3,
        "rid-w",
        &last,
    )
    .await
    .unwrap();
    assert_eq!(out, ReserveOutcome::SoldOut { remaining: 0 });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_command_line_rebalances_and_generates_on_a_bucketed_campaign() {
    let env = Env::with_buckets(9, 1, 2, 3).await;
    let conf = common::bin::write_conf(&env, 50);
    let run = |args: &[&str]| {
        let out = common::bin::command(&conf, args).env("RUST_LOG", "warn").output().unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let all = env.all_buckets();
    env.scripts.shared.give(&env.redis, &all[2], "cli-pile", 0, 3, false).await.unwrap();
    env.scripts.shared.take(&env.redis, &all[0], "cli-pile", 3).await.unwrap();
    let (ok, out, err) = run(&["campaign", "rebalance", &env.campaign]);
    assert!(ok, "{err}");
    assert!(out.contains("before: [6, 3, 0] (sum 9)") && out.contains("after: [3, 3, 3] (sum 9)"), "{out}");
    let (ok, out, err) = run(&["campaign", "rebalance", &env.campaign]);
    assert!(ok && out.contains("already even: nothing moved"), "{out}{err}");

    let (ok, out, err) = run(&["produce", "--generate", "9", "--campaign", &env.campaign, "--users", "9"]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("reserved 9 of 9 units"), "{out}");
    assert_eq!(env.bucket_stocks().await, vec![0, 0, 0]);
    env.drain(50).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 9);
    for b in &all {
        assert_eq!(hlen(&env, &b.keys.outbox).await, 0, "bucket {} acked", b.index);
    }

    let single = Env::new(5, 1, 1).await;
    let conf = common::bin::write_conf(&single, 50);
    let out = common::bin::command(&conf, &["campaign", "rebalance", &single.campaign]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no hot-stock buckets"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_order_redis_never_held_is_adopted_in_its_home_bucket_with_stock_moved_there() {
    let env = Env::with_buckets(6, 2, 1, 2).await;
    let all = env.all_buckets();
    let real = env.reserve_home(&user_in(&env, 1, "r"), 1).await;
    // An order Redis never reserved, for a buyer at home in bucket 0.
    let mut ghost = Reservation::from_json(&real).unwrap();
    ghost.request_id = "ghost-in-bucket-0".into();
    ghost.user = user_in(&env, 0, "g");
    env.produce(0, vec![real, serde_json::to_vec(&ghost).unwrap()]).await;
    env.drain(10).await;
    // Bucket 0 is empty: its stock went to bucket 1.
    env.scripts.shared.give(&env.redis, &all[0], "empty-0", 1, 3, false).await.unwrap();
    env.scripts.shared.take(&env.redis, &all[1], "empty-0", 3).await.unwrap();
    assert_eq!(env.bucket_stocks().await, vec![0, 5]);

    let rep = reconcile(env.stores(Duration::from_secs(60)), &env.campaign, true).await.unwrap();
    let found: Vec<(Kind, u32)> = rep.differences.iter().map(|d| (d.kind, d.bucket)).collect();
    assert_eq!(found, vec![(Kind::OrderWithoutReservation, 0)], "{}", rep.text);
    assert!(rep.repaired[0].2.starts_with("re-took 1 unit(s)"), "{}", rep.text);
    assert_eq!(env.bucket_stocks().await, vec![0, 4]);
    let held: Option<i64> = env.redis.hget(&all[0].keys.bought, &ghost.user).await.unwrap();
    assert_eq!(held, Some(1));
    let rep = reconcile(env.stores(Duration::from_secs(60)), &env.campaign, true).await.unwrap();
    assert!(rep.redis_balanced && rep.across_balanced && rep.differences.is_empty(), "{}", rep.text);
    assert_eq!(env.bucket_stocks().await, vec![0, 4], "a second repair moves nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reserve_refuses_a_caller_whose_bucket_count_is_not_the_published_one() {
    use protocol::scripts::ReserveOutcome;
    let env = Env::with_buckets(30, 1, 1, 3).await;
    let user = user_in(&env, 0, "other-count");
    // The keys of the published bucket, asked by a caller that believes the campaign has 2.
    let mistaken = protocol::keys::Bucket { count: 2, ..env.home(&user) };
    let out =
        env.scripts.shared.reserve(&env.redis, &mistaken, &ReserveCall::new("r-other-count", &user, 1)).await;
    assert_eq!(out.unwrap(), ReserveOutcome::OtherBuckets { published: 3 });
    assert_eq!(env.bucket_stocks().await.iter().sum::<i64>(), 30, "nothing was reserved");
    assert_eq!(hlen(&env, &env.home(&user).keys.bought).await, 0);
    // The caller with the published count reserves.
    let out = env
        .scripts
        .shared
        .reserve(&env.redis, &env.home(&user), &ReserveCall::new("r-right-count", &user, 1))
        .await;
    assert!(matches!(out.unwrap(), ReserveOutcome::Reserved { .. }));
}
