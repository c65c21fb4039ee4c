//! The `order-writer` binary's admin listener and its log: after a few reservations are
//! written, `/metrics` shows them, `/readyz` is ready, and the log names each order's request id
//! (the id the gateway gave the request, carried in the record to `orders.request_id`).

use crate::common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::bin::{command, write_conf};
use common::Env;

/// The sum of the samples of `name` in a text exposition (label sets summed).
fn total(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .filter_map(|l| l.rsplit_once(' ').and_then(|(_, v)| v.parse::<f64>().ok()))
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_readiness_and_request_ids_in_the_log() {
    const N: i64 = 12;
    let env = Env::new(N, 1, 2).await;
    let mut ids = HashSet::new();
    for i in 0..N {
        let record = env.reserve(&format!("obs-{i}"), 1).await;
        let r = protocol::record::Reservation::from_json(&record).unwrap();
        ids.insert(r.request_id.clone());
        env.produce(backend::kafka::partition_for(&r.user, env.partitions), vec![record]).await;
    }
    let conf = write_conf(&env, 50);
    let admin = fixtures::stack::free_port();
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str(&format!("\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n"));
    std::fs::write(&conf, text).unwrap();
    let log_file = env.dir.join("order-writer.log");
    let mut child = command(&conf, &["serve"])
        .env("RUST_LOG", "info,backend=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_file).unwrap())
        .spawn()
        .unwrap();
    env.wait_offsets(&env.end_offsets().await).await;

    let http = reqwest::Client::new();
    let url = |path: &str| format!("http://127.0.0.1:{admin}{path}");
    let limit = Instant::now() + Duration::from_secs(20);
    let metrics = loop {
        let text = http.get(url("/metrics")).send().await.unwrap().text().await.unwrap();
        let done = total(&text, "seckill_writer_records_committed_total") == N as f64
            && text.contains("seckill_writer_order_events_pending 0");
        if done || Instant::now() > limit {
            break text;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(total(&metrics, "seckill_writer_records_committed_total"), N as f64, "{metrics}");
    assert_eq!(total(&metrics, "seckill_writer_orders_inserted_total"), N as f64);
    assert_eq!(total(&metrics, "seckill_writer_orders"), N as f64, "orders by status, read from PostgreSQL");
    assert_eq!(total(&metrics, "seckill_writer_lag"), 0.0);
    assert_eq!(total(&metrics, "seckill_writer_partition_up"), 2.0);
    assert!(metrics.contains("seckill_writer_repairs{kind=\"RESERVED_WITHOUT_ORDER\"} 0"), "{metrics}");
    // The relay produced every order's event (created): none left in the outbox.
    assert!(metrics.contains("seckill_writer_order_events_pending 0"), "{metrics}");
    let events: i64 = sqlx::query_scalar("SELECT count(*) FROM order_events WHERE produced_at IS NOT NULL")
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(events, N, "one order.created event an order, produced");
    let ready = http.get(url("/readyz")).send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200);
    assert_eq!(http.get(url("/healthz")).send().await.unwrap().status().as_u16(), 200);

    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
    let log = std::fs::read_to_string(&log_file).unwrap();
    let logged: HashSet<String> = log
        .lines()
        .filter(|l| l.contains("order written"))
        .filter_map(|l| l.split("request_id=").nth(1))
        .map(|rest| rest.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(logged, ids, "one log line names each order's request id:\n{log}");
    let rows: Vec<String> = sqlx::query_scalar("SELECT request_id FROM orders WHERE campaign_id = $1")
        .bind(&env.campaign)
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert_eq!(rows.into_iter().collect::<HashSet<_>>(), ids, "the same ids are the order rows'");
}

/// `seckill_writer_lag` counts the records waiting in Kafka while the writer cannot move on (its
/// batch waits on PostgreSQL, here the campaign's row locked); each scrape also reads the
/// partitions' ends from Kafka.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn lag_counts_what_waits_while_the_writer_is_stuck() {
    const N: i64 = 6;
    let env = Env::new(N + 1, 1, 1).await;
    let conf = write_conf(&env, 50);
    let admin = fixtures::stack::free_port();
    let mut text = std::fs::read_to_string(&conf).unwrap();
    text.push_str(&format!("\n[admin]\nlisten = \"127.0.0.1:{admin}\"\n"));
    std::fs::write(&conf, text).unwrap();
    let mut child = common::bin::spawn(&conf, &["serve"]);
    let http = reqwest::Client::new();
    let scrape = || async {
        let url = format!("http://127.0.0.1:{admin}/metrics");
        match http.get(url).send().await {
            Ok(r) => r.text().await.unwrap_or_default(),
            Err(_) => String::new(),
        }
    };
    let until = |want: &'static str, f: fn(&str) -> bool| {
        let scrape = &scrape;
        async move {
            let limit = Instant::now() + Duration::from_secs(30);
            loop {
                let text = scrape().await;
                if f(&text) {
                    return text;
                }
                assert!(Instant::now() < limit, "{want} within 30 s: {text}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    until("the partition up", |t| total(t, "seckill_writer_partition_up") == 1.0).await;

    let mut lock = env.pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM campaigns WHERE id = $1 FOR UPDATE")
        .bind(&env.campaign)
        .execute(&mut *lock)
        .await
        .unwrap();
    env.produce(0, vec![env.reserve("stuck-0", 1).await]).await;
    until("the first record fetched", |t| total(t, "seckill_writer_records_consumed_total") == 1.0).await;
    let mut later = Vec::new();
    for i in 1..=N {
        later.push(env.reserve(&format!("stuck-{i}"), 1).await);
    }
    env.produce(0, later).await;
    // The writer may fetch ahead of its stuck batch, so this shows the lag while stuck; that a
    // scrape's own look at the end counts records not fetched is metrics' unit test.
    let seen =
        until("the lag of every waiting record", |t| total(t, "seckill_writer_lag") == (N + 1) as f64).await;
    assert_eq!(total(&seen, "seckill_writer_records_committed_total"), 0.0, "stuck: {seen}");

    lock.rollback().await.unwrap();
    until("no lag once written", |t| {
        total(t, "seckill_writer_lag") == 0.0
            && total(t, "seckill_writer_records_committed_total") == (N + 1) as f64
    })
    .await;
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
}
