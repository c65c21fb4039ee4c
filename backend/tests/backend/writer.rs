//! The writer against real Kafka, PostgreSQL and Redis: duplicates, poison records, the stock
//! guard's compensation.

use crate::common;

use common::Env;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_record_delivered_twice_makes_one_order() {
    let env = Env::new(10, 1, 2).await;
    let mut records = Vec::new();
    for i in 0..5 {
        records.push(env.reserve(&format!("u{i}"), 1).await);
    }
    // Twice in the same batch, then again in a later batch after the first commit.
    let twice: Vec<Vec<u8>> = records.iter().flat_map(|r| [r.clone(), r.clone()]).collect();
    env.produce_records(twice).await;
    env.drain(100).await;
    env.produce_records(records.clone()).await;
    env.drain(100).await;

    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 5);
    assert_eq!(
        env.count("SELECT count(*) FROM stock_ledger WHERE campaign_id = $1 AND reason = 'ORDER'").await,
        5
    );
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 5);
    assert_eq!(env.count("SELECT count(*) FROM reservation_results WHERE campaign_id = $1").await, 0);
    assert_eq!(env.outbox_len().await, 0, "every committed reservation leaves the outbox");
    assert_eq!(env.stat("acked_count").await, 5, "redelivery never counts an ack twice");
    assert_eq!(env.redis_stock().await, 5);
    assert_eq!(env.count("SELECT count(*) FROM campaigns WHERE id = $1 AND state = 'LIVE'").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_poison_record_is_dead_lettered_and_the_partition_moves_on() {
    let env = Env::new(10, 1, 1).await;
    let a = env.reserve("alice", 1).await;
    let b = env.reserve("bob", 1).await;
    let bad_campaign = br#"{"request_id":"x","campaign":"a}b","user":"u","sku":"s","qty":1,"price_cents":1,"price_version":1,"stock_version":1,"reserved_at_ms":1}"#.to_vec();
    env.produce(0, vec![a, b"{not json".to_vec(), b, bad_campaign]).await;
    env.drain(100).await;

    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 2);
    let dead: Vec<(i32, i64, Vec<u8>, String)> = sqlx::query_as(
        "SELECT partition, \"offset\", payload, error FROM dead_letters WHERE topic = $1 ORDER BY \"offset\"",
    )
    .bind(&env.topic)
    .fetch_all(&env.pool)
    .await
    .unwrap();
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert_eq!((dead[0].0, dead[0].1, dead[0].2.as_slice()), (0, 1, b"{not json".as_slice()));
    assert!(dead[0].3.contains("not a reservation record"), "{}", dead[0].3);
    assert_eq!(dead[1].1, 3);
    assert!(dead[1].3.contains("campaign"), "{}", dead[1].3);
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 4);
    // Read again from the start: nothing new (no loop, no second dead letter).
    sqlx::query("UPDATE consumer_offsets SET next_offset = 0 WHERE topic = $1")
        .bind(&env.topic)
        .execute(&env.pool)
        .await
        .unwrap();
    env.drain(2).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 2);
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM dead_letters").fetch_one(&env.pool).await.unwrap();
    assert_eq!(n, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_database_stock_guard_refuses_and_compensates_in_redis() {
    // Redis was published with 5 units, but the database only has 2 (the source of truth).
    let env = Env::new(5, 1, 1).await;
    sqlx::query("UPDATE campaigns SET total_stock = 2 WHERE id = $1")
        .bind(&env.campaign)
        .execute(&env.pool)
        .await
        .unwrap();
    let mut records = Vec::new();
    for i in 0..5 {
        records.push(env.reserve(&format!("u{i}"), 1).await);
    }
    assert_eq!(env.redis_stock().await, 0);
    env.produce(0, records).await;
    env.drain(3).await;

    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 2);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 2);
    assert_eq!(
        env.count("SELECT count(*) FROM reservation_results WHERE campaign_id = $1 AND status = 'SOLD_OUT'")
            .await,
        3
    );
    assert_eq!(env.stat("released_count").await, 3, "each refused reservation is released once");
    // Refused for want of stock: set aside, not put back on sale (the database has none).
    assert_eq!(env.redis_stock().await, 0);
    assert_eq!(env.stat("aside_qty").await, 3);
    assert_eq!(env.outbox_len().await, 0);
    // Redelivering the refused ones releases nothing twice.
    sqlx::query("UPDATE consumer_offsets SET next_offset = 0 WHERE topic = $1")
        .bind(&env.topic)
        .execute(&env.pool)
        .await
        .unwrap();
    env.drain(5).await;
    assert_eq!(env.stat("released_count").await, 3);
    assert_eq!(env.redis_stock().await, 0);
    assert_eq!(env.stat("aside_qty").await, 3);
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_unit_the_database_refused_for_want_of_stock_is_not_sold_again() {
    // Redis back from an older disk (the fault `machine`): it lost a reservation whose order the
    // database holds, so it counts one unit more than the sale has. The database has 3 units and
    // 3 orders' worth of reservations arrive; Redis was published with 4. The fourth is refused
    // SOLD_OUT. Released into the stock, that unit would be sold again and refused again, one
    // buyer after another (945 refusals for 139 lost units in the fault's short run); set aside,
    // the sale is sold out in Redis as in the database.
    let env = Env::new(4, 1, 1).await;
    sqlx::query("UPDATE campaigns SET total_stock = 3 WHERE id = $1")
        .bind(&env.campaign)
        .execute(&env.pool)
        .await
        .unwrap();
    let mut records = Vec::new();
    for i in 0..4 {
        records.push(env.reserve(&format!("buyer{i}"), 1).await);
    }
    env.produce(0, records).await;
    env.drain(4).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 3);
    assert_eq!(env.stat("released_count").await, 1, "the refused reservation is released");
    assert_eq!(env.redis_stock().await, 0, "the unit the sale does not have is not on sale again");
    assert_eq!(env.stat("aside_qty").await, 1, "it is set aside, counted for reconcile");
    assert_eq!(env.outbox_len().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_user_gets_one_order_in_a_limit_one_campaign_even_with_two_request_ids() {
    let env = Env::new(10, 1, 1).await;
    let first = env.reserve("carol", 1).await;
    // A second reservation of the same user that Redis should never have made (e.g. Redis lost
    // data): same user, new request id.
    let mut second = protocol::record::Reservation::from_json(&first).unwrap();
    second.request_id = "another-request".into();
    env.produce(0, vec![first, serde_json::to_vec(&second).unwrap()]).await;
    env.drain(10).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 1);
    let reason: String =
        sqlx::query_scalar("SELECT reason FROM reservation_results WHERE request_id = 'another-request'")
            .fetch_one(&env.pool)
            .await
            .unwrap();
    assert_eq!(reason, "LIMIT_REACHED");
    // Redis never reserved "another-request": nothing is given back for it.
    assert_eq!(env.stat("released_count").await, 0);
    assert_eq!(env.redis_stock().await, 9);
    assert_eq!(env.outbox_len().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn partitions_racing_for_the_last_units_never_oversell() {
    // Four partitions write one campaign at once. Each batch decides against the stock it read
    // without a lock; when two read the same units, the later conditional update refuses and the
    // batch is written again with the row locked. Whatever the interleaving: exactly the
    // database's stock becomes orders, the rest is refused once and released once.
    let env = Env::new(40, 1, 4).await;
    sqlx::query("UPDATE campaigns SET total_stock = 10 WHERE id = $1")
        .bind(&env.campaign)
        .execute(&env.pool)
        .await
        .unwrap();
    for p in 0..4 {
        let mut records = Vec::new();
        for i in 0..10 {
            records.push(env.reserve(&format!("p{p}-u{i}"), 1).await);
        }
        env.produce(p, records).await;
    }
    env.drain(5).await;

    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 10);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 10);
    assert_eq!(
        env.count("SELECT count(*) FROM stock_ledger WHERE campaign_id = $1 AND reason = 'ORDER'").await,
        10
    );
    assert_eq!(
        env.count("SELECT count(*) FROM reservation_results WHERE campaign_id = $1 AND status = 'SOLD_OUT'")
            .await,
        30
    );
    assert_eq!(env.stat("released_count").await, 30);
    assert_eq!(env.redis_stock().await, 0, "refused for want of stock: set aside");
    assert_eq!(env.stat("aside_qty").await, 30);
    assert_eq!(env.outbox_len().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limit_above_one_is_enforced_by_the_database_when_redis_forgot_what_a_user_holds() {
    use fred::prelude::*;
    // Limit 2. Each user reserves two units through the real script, then Redis "forgets" what
    // they hold (a failover to a replica that missed the writes) and they reserve again: three
    // signed qty-1 records per user reach Kafka with no Redis check left to stop the third.
    let env = Env::new(20, 2, 1).await;
    let mut records = Vec::new();
    for user in ["dave", "erin"] {
        records.push(env.reserve(user, 1).await);
        records.push(env.reserve(user, 1).await);
        let _: i64 = env.redis.hdel(&env.keys().bought, user).await.unwrap();
        records.push(env.reserve(user, 1).await);
    }
    let third = |i: usize| protocol::record::Reservation::from_json(&records[i]).unwrap().request_id;
    let (dave_third, erin_third) = (third(2), third(5));
    // dave's records land one batch each (the database's count of what he holds decides),
    // erin's in one batch (the batch's own count decides).
    env.produce(0, records[..3].to_vec()).await;
    env.drain(1).await;
    env.produce(0, records[3..].to_vec()).await;
    env.drain(10).await;

    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 4);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 4);
    for (user, rid) in [("dave", &dave_third), ("erin", &erin_third)] {
        let (status, reason): (String, String) =
            sqlx::query_as("SELECT status, reason FROM reservation_results WHERE request_id = $1")
                .bind(rid)
                .fetch_one(&env.pool)
                .await
                .unwrap_or_else(|e| panic!("{user}'s third reservation has no refusal: {e}"));
        assert_eq!((status.as_str(), reason.as_str()), ("FAILED", "LIMIT_REACHED"), "{user}");
        let held: i64 = sqlx::query_scalar(
            "SELECT coalesce(sum(qty), 0)::int8 FROM orders WHERE campaign_id = $1 AND user_id = $2",
        )
        .bind(&env.campaign)
        .bind(user)
        .fetch_one(&env.pool)
        .await
        .unwrap();
        assert_eq!(held, 2, "{user} holds the limit, not more");
    }
    // Each refusal is released as any refusal: the units are back, nothing left in the outbox.
    assert_eq!(env.stat("released_count").await, 2);
    assert_eq!(env.redis_stock().await, 16);
    assert_eq!(env.outbox_len().await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_signed_record_the_writer_cannot_decode_is_released_and_counted_once() {
    use fred::prelude::*;
    let env = Env::new(5, 1, 1).await;
    let record = env.reserve("frank", 1).await;
    let rid = protocol::record::Reservation::from_json(&record).unwrap().request_id;
    // What cjson writes for a price of 1e14 cents: a float, which no i64 field takes. The
    // outbox holds these bytes, so the sweeper would produce them again and again.
    let text = String::from_utf8(record).unwrap();
    let bad = text.replace("\"price_cents\":1999", "\"price_cents\":1e+14");
    assert_ne!(bad, text);
    let _: i64 = env.redis.hset(&env.keys().outbox, (rid.as_str(), bad.as_str())).await.unwrap();
    env.produce(0, vec![bad.clone().into_bytes(), bad.into_bytes()]).await;
    env.drain(10).await;

    let dead = env.dead_letters().await;
    assert_eq!(dead.len(), 2, "{dead:?}");
    assert!(dead[0].3.contains("not a reservation record"), "{}", dead[0].3);
    let (status, reason): (String, String) =
        sqlx::query_as("SELECT status, reason FROM reservation_results WHERE request_id = $1")
            .bind(&rid)
            .fetch_one(&env.pool)
            .await
            .expect("the undecodable reservation has a refusal the result query reads");
    assert_eq!((status.as_str(), reason.as_str()), ("FAILED", "UNDECODABLE"));
    // Released once (nothing left for the sweeper to produce again), its unit back in the sale.
    assert_eq!(env.outbox_len().await, 0);
    assert_eq!(env.stat("released_count").await, 1);
    assert_eq!(env.redis_stock().await, 5);
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 0);
}
