//! The writer when PostgreSQL refuses a record, or drops the connection, on the real servers:
//! a refused batch is written one record per transaction and only the refused record is
//! dead-lettered; a lost connection is retried, never dead-lettered.

use crate::common;

use common::Env;
use protocol::record::Reservation;

/// Makes PostgreSQL refuse (RAISE) every insert into `orders` of a request id listed in the
/// table `poison`, in this test's own database.
async fn install_poison(env: &Env) {
    sqlx::raw_sql(
        "CREATE TABLE poison (request_id TEXT PRIMARY KEY);
         CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF EXISTS (SELECT 1 FROM poison WHERE request_id = NEW.request_id) THEN
                 RAISE EXCEPTION 'poison record %', NEW.request_id;
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER refuse_poison BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION refuse_poison();",
    )
    .execute(&env.pool)
    .await
    .unwrap();
}

/// The dead letters of this test's topic: (partition, offset, payload, error), by offset.
async fn dead_letters(env: &Env) -> Vec<(i32, i64, Vec<u8>, String)> {
    sqlx::query_as(
        "SELECT partition, \"offset\", payload, error FROM dead_letters WHERE topic = $1 ORDER BY \"offset\"",
    )
    .bind(&env.topic)
    .fetch_all(&env.pool)
    .await
    .unwrap()
}

fn request_id(record: &[u8]) -> String {
    Reservation::from_json(record).unwrap().request_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_record_postgresql_refuses_is_dead_lettered_alone_and_the_rest_is_written() {
    let env = Env::new(30, 1, 1).await;
    install_poison(&env).await;
    let mut records = Vec::new();
    for i in 0..20 {
        records.push(env.reserve(&format!("u{i}"), 1).await);
    }
    let poison = request_id(&records[7]);
    sqlx::query("INSERT INTO poison VALUES ($1)").bind(&poison).execute(&env.pool).await.unwrap();
    env.produce(0, records.clone()).await;
    env.drain(100).await;

    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 19);
    let ordered: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE request_id = $1")
        .bind(&poison)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(ordered, 0);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, 19);
    let dead = dead_letters(&env).await;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!((dead[0].0, dead[0].1, &dead[0].2), (0, 7, &records[7]));
    assert!(dead[0].3.contains("poison record"), "{}", dead[0].3);
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 20);
    // Settled after the fallback: the 19 orders acknowledged, the dead letter's unit released.
    assert_eq!(env.stat("acked_count").await, 19);
    assert_eq!(env.stat("released_count").await, 1);
    assert_eq!(env.outbox_len().await, 0);
    assert_eq!(env.redis_stock().await, 30 - 20 + 1);

    // The partition moved on: later records are written, in batches again.
    let mut later = Vec::new();
    for i in 20..25 {
        later.push(env.reserve(&format!("u{i}"), 1).await);
    }
    env.produce(0, later).await;
    env.drain(100).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 24);
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 25);
    assert_eq!(dead_letters(&env).await.len(), 1);
    assert_eq!(env.outbox_len().await, 0);

    // The dead letter's refusal is recorded, so a late copy of it (the sweeper may have produced
    // one before it was released) is refused the same way: even once PostgreSQL would take it,
    // it never becomes an order after Redis gave its unit back.
    let reason: String = sqlx::query_scalar("SELECT reason FROM reservation_results WHERE campaign_id = $1")
        .bind(&env.campaign)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(reason, "DEAD_LETTER");
    sqlx::query("DROP TRIGGER refuse_poison ON orders").execute(&env.pool).await.unwrap();
    env.produce(0, vec![records[7].clone()]).await;
    env.drain(100).await;
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 24);
    assert_eq!(env.stat("released_count").await, 1, "released once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_connection_is_retried_past_batch_retries_and_never_dead_lettered() {
    let env = Env::new(10, 1, 1).await;
    // Inserting the victim's order ends the writer's own connection (as a crashed or restarted
    // server would), the first seven times; a sequence counts the tries (it is not rolled back).
    // Seven is more than a batch's tries plus the victim's own tries (3 + 3) would allow if a lost
    // connection counted as a refusal: the victim would then be dead-lettered.
    sqlx::raw_sql(
        "CREATE TABLE victim (request_id TEXT PRIMARY KEY);
         CREATE SEQUENCE cuts;
         CREATE FUNCTION cut_connection() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
             IF EXISTS (SELECT 1 FROM victim WHERE request_id = NEW.request_id) THEN
                 IF nextval('cuts') <= 7 THEN
                     PERFORM pg_terminate_backend(pg_backend_pid());
                 END IF;
             END IF;
             RETURN NEW;
         END $$;
         CREATE TRIGGER cut_connection BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION cut_connection();",
    )
    .execute(&env.pool)
    .await
    .unwrap();
    let mut records = Vec::new();
    for i in 0..5 {
        records.push(env.reserve(&format!("u{i}"), 1).await);
    }
    sqlx::query("INSERT INTO victim VALUES ($1)")
        .bind(request_id(&records[2]))
        .execute(&env.pool)
        .await
        .unwrap();
    env.produce(0, records).await;
    env.drain(100).await;

    let tries: i64 = sqlx::query_scalar("SELECT last_value FROM cuts").fetch_one(&env.pool).await.unwrap();
    assert_eq!(tries, 8, "seven lost connections, then the commit");
    assert_eq!(env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await, 5);
    assert!(dead_letters(&env).await.is_empty());
    assert_eq!(backend::writer::stored_offset(&env.pool, &env.topic, 0).await.unwrap(), 5);
    assert_eq!(env.stat("acked_count").await, 5);
    assert_eq!(env.outbox_len().await, 0);
}
