//! The order events (`backend::workers::events`): every order's created, paid and closed told once (at
//! least once, by idempotency key) on the events topic, in order per order; a produce that fails
//! loses none; orders committed while no relay ran are produced by the next writer to serve.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use backend::workers::closer;
use backend::workers::events::{EventsConf, Relay, IDEMPOTENCY_HEADER, SCHEMA};
use common::{Env, PAYMENT_KEY};
use protocol::signing::{Signer, PAYMENT_SIGNATURE_HEADER, PAYMENT_TIMESTAMP_HEADER};
use serde_json::Value;

/// One event read back: its partition, key, idempotency header and JSON.
struct Read {
    partition: i32,
    key: String,
    header: String,
    json: Value,
}

/// Every record of `topic` (`partitions` of them), each partition in offset order.
async fn read_all(kafka: &rskafka::client::Client, topic: &str, partitions: i32) -> Vec<Read> {
    let mut out = Vec::new();
    for p in 0..partitions {
        let pc = backend::kafka::partition(kafka, topic, p, Duration::from_secs(10)).await.unwrap();
        let (records, _) = pc.fetch_records(0, 1..1 << 20, 200).await.unwrap();
        for r in records {
            let text = |b: Option<&Vec<u8>>| String::from_utf8(b.cloned().unwrap_or_default()).unwrap();
            out.push(Read {
                partition: p,
                key: text(r.record.key.as_ref()),
                header: text(r.record.headers.get(IDEMPOTENCY_HEADER)),
                json: serde_json::from_slice(r.record.value.as_deref().unwrap()).unwrap(),
            });
        }
    }
    out
}

fn relay(env: &Env, topic: &str, partitions: i32) -> Relay {
    Relay {
        pool: env.pool.clone(),
        kafka: env.kafka.clone(),
        conf: EventsConf { topic: topic.to_string(), partitions },
        produce_timeout: Duration::from_secs(5),
    }
}

async fn pass(relay: &Relay) -> anyhow::Result<usize> {
    let mut conn = relay.pool.acquire().await.unwrap().detach();
    relay.pass(&mut conn, 1000).await
}

async fn orders_of(env: &Env, users: &[&str]) -> Vec<i64> {
    let mut recs = Vec::new();
    for u in users {
        recs.push(env.reserve(u, 1).await);
    }
    env.produce_records(recs).await;
    env.drain(10).await;
    sqlx::query_scalar("SELECT id FROM orders WHERE campaign_id = $1 ORDER BY id")
        .bind(&env.campaign)
        .fetch_all(&env.pool)
        .await
        .unwrap()
}

async fn unproduced(env: &Env) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM order_events WHERE produced_at IS NULL")
        .fetch_one(&env.pool)
        .await
        .unwrap()
}

/// Pays `order` through the writer's callback (as a provider's adapter does).
async fn pay(base: &str, order: i64, payment_ref: &str) {
    let body = serde_json::to_vec(&serde_json::json!({ "payment_ref": payment_ref })).unwrap();
    let ts = chrono::Utc::now().timestamp();
    let sig = Signer::new(PAYMENT_KEY).sign_payment("POST", &format!("/orders/{order}/pay"), ts, &body);
    let reply = reqwest::Client::new()
        .post(format!("{base}/orders/{order}/pay"))
        .header(PAYMENT_TIMESTAMP_HEADER, ts.to_string())
        .header(PAYMENT_SIGNATURE_HEADER, sig)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status().as_u16(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transition_of_a_sales_orders_is_one_event_in_order_per_order() {
    let env = Env::new(10, 1, 2).await;
    let ids = orders_of(&env, &["ann", "bob", "cy", "dee"]).await;
    assert_eq!(ids.len(), 4);
    pay(&env.serve_http().await, ids[0], "pay-ann").await;
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE id = ANY($1)")
        .bind(&ids[1..3])
        .execute(&env.pool)
        .await
        .unwrap();
    assert_eq!(closer::close_due(&env.pool, 10).await.unwrap(), 2);

    let topic = fixtures::cleanup::Topic::create(&env.kafka, "ev-", 3).await.unwrap();
    let relay = relay(&env, &topic.name, 3);
    assert_eq!(pass(&relay).await.unwrap(), 7, "4 created, 1 paid, 2 closed");
    assert_eq!(pass(&relay).await.unwrap(), 0, "each once");

    let events = read_all(&env.kafka, &topic.name, 3).await;
    let mut by_order: BTreeMap<i64, Vec<(i32, String)>> = BTreeMap::new();
    for e in &events {
        let order = e.json["order_id"].as_i64().unwrap();
        let kind = e.json["type"].as_str().unwrap().to_string();
        assert_eq!(e.json["schema"], SCHEMA);
        assert_eq!(e.key, order.to_string(), "keyed by order");
        assert_eq!(e.header, format!("{order}:{}", kind.trim_start_matches("order.")));
        assert_eq!(e.json["idempotency_key"], e.header.as_str());
        assert_eq!(e.json["campaign_id"], env.campaign.as_str());
        by_order.entry(order).or_default().push((e.partition, kind));
    }
    let kinds = |id: i64| by_order[&id].iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>();
    assert_eq!(kinds(ids[0]), ["order.created", "order.paid"]);
    assert_eq!(kinds(ids[1]), ["order.created", "order.closed"]);
    assert_eq!(kinds(ids[2]), ["order.created", "order.closed"]);
    assert_eq!(kinds(ids[3]), ["order.created"]);
    for (order, evs) in &by_order {
        assert!(evs.iter().all(|(p, _)| *p == evs[0].0), "order {order}'s events share a partition");
    }
    let paid = events.iter().find(|e| e.json["type"] == "order.paid").unwrap();
    assert_eq!(
        (paid.json["status"].as_str(), paid.json["payment_ref"].as_str()),
        (Some("PAID"), Some("pay-ann"))
    );
    let created =
        events.iter().find(|e| e.json["order_id"] == ids[0] && e.json["type"] == "order.created").unwrap();
    assert_eq!(created.json["status"], "PENDING_PAYMENT", "the order as that change left it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_produce_loses_no_event_and_a_repeat_carries_the_same_key() {
    let env = Env::new(10, 1, 1).await;
    orders_of(&env, &["ann", "bob"]).await;
    // The broker refuses (no such topic): nothing is marked, the events wait.
    let missing = relay(&env, &fixtures::stack::unique("ev-missing-"), 1);
    assert!(pass(&missing).await.is_err());
    assert_eq!(unproduced(&env).await, 2);

    let topic = fixtures::cleanup::Topic::create(&env.kafka, "ev-", 1).await.unwrap();
    let relay = relay(&env, &topic.name, 1);
    assert_eq!(pass(&relay).await.unwrap(), 2);
    // A relay that died after the broker's acknowledgement and before its mark produces them
    // again: the consumer tells the repeat by its idempotency key.
    sqlx::query("UPDATE order_events SET produced_at = NULL").execute(&env.pool).await.unwrap();
    assert_eq!(pass(&relay).await.unwrap(), 2);
    let events = read_all(&env.kafka, &topic.name, 1).await;
    let keys: BTreeSet<&str> = events.iter().map(|e| e.header.as_str()).collect();
    assert_eq!((events.len(), keys.len()), (4, 2), "twice each, under one key each");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orders_committed_with_no_relay_running_are_produced_by_the_next_writer() {
    let env = Env::new(10, 1, 2).await;
    orders_of(&env, &["ann", "bob", "cy"]).await;
    assert_eq!(unproduced(&env).await, 3, "committed; no relay ran (a writer killed before its produce)");

    let conf = common::bin::write_conf(&env, 100);
    let _writer = common::bin::spawn(&conf, &["serve"]);
    let topic = backend::workers::events::default_topic(&env.topic);
    let mut seen = 0;
    for _ in 0..100 {
        if unproduced(&env).await == 0 {
            seen = read_all(&env.kafka, &topic, env.partitions).await.len();
            if seen == 3 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, 3, "the writer's relay produced the outbox to {topic}");
}

/// Writers started together make the events topic at once: the ones whose create is refused
/// (it exists) wait until the brokers list it, rather than stop on "topic does not exist" (the
/// lease test's third writer never served on a fresh clone's CI).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_started_together_all_serve_on_a_new_events_topic() {
    let env = Env::new(10, 1, 3).await;
    let base = std::fs::read_to_string(common::bin::write_conf(&env, 100)).unwrap();
    let first = base.lines().next().unwrap().to_string();
    let mut writers = Vec::new();
    for p in 0..3 {
        let port = fixtures::stack::free_port();
        let conf = env.dir.join(format!("w{p}.toml"));
        std::fs::write(&conf, base.replacen(&first, &format!("listen = \"127.0.0.1:{port}\""), 1)).unwrap();
        writers.push((port, common::bin::spawn(&conf, &["serve", "--partitions", &p.to_string()])));
    }
    let http = reqwest::Client::new();
    for (port, writer) in &mut writers {
        let mut up = false;
        for _ in 0..200 {
            assert!(writer.try_wait().unwrap().is_none(), "writer on :{port} stopped at start");
            let health = http.get(format!("http://127.0.0.1:{port}/healthz")).send().await;
            if health.is_ok_and(|r| r.status().is_success()) {
                up = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(up, "writer on :{port} serves within 20 s");
    }
}
