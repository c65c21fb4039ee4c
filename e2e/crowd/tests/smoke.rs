//! Smoke tests of the local stack (`bash e2e/stack.sh up`): each one does real work on a real
//! server and fails unless that server is there. They are the first thing to look at when any
//! other test of the workspace cannot reach Redis, PostgreSQL or Kafka.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use e2e::stack::{self, STACK_HINT};
use fred::prelude::{HashesInterface, KeysInterface, LuaInterface};
use protocol::keys::CampaignKeys;
use protocol::record::Reservation;
use protocol::scripts::{self, PublishOutcome, PublishSpec, ReserveCall, ReserveOutcome, Scripts};
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::record::Record;

/// Bound of a whole Kafka test; rskafka calls have their own deadline besides.
const KAFKA_TEST_BUDGET: Duration = Duration::from_secs(120);

#[tokio::test]
async fn redis_runs_the_reservation_scripts_by_sha() -> anyhow::Result<()> {
    let client = stack::redis_client(&stack::redis_url()).await?;
    let scripts = Scripts::load(&scripts::default_dir())?;
    let campaign = e2e::cleanup::Campaign::new("smoke-");
    let keys = CampaignKeys::new(&campaign);
    let bucket = protocol::keys::Bucket::single(&campaign);
    let spec = PublishSpec {
        stock_version: 1,
        total: 5,
        limit: 2,
        sku: "sku-smoke".into(),
        price_cents: 1999,
        price_version: 3,
    };

    assert_eq!(scripts.publish(&client, &bucket, &spec).await?, PublishOutcome::Published);
    assert_eq!(scripts.publish(&client, &bucket, &spec).await?, PublishOutcome::Unchanged);
    let stock: i64 = client.get(&keys.stock).await?;
    assert_eq!(stock, 5);

    let outcome = scripts.reserve(&client, &bucket, &ReserveCall::new("req-1", "user-1", 2)).await?;
    let ReserveOutcome::Reserved { remaining, record } = outcome else {
        panic!("expected a reservation, got {outcome:?}");
    };
    assert_eq!(remaining, 3);
    let stock: i64 = client.get(&keys.stock).await?;
    assert_eq!(stock, 3, "GET {} after reserving 2 of 5", keys.stock);

    // The record is built by the script from the published metadata, and is in the outbox.
    let parsed = Reservation::from_json(record.as_bytes())?;
    assert_eq!(
        (parsed.request_id.as_str(), parsed.user.as_str(), parsed.qty, parsed.price_cents),
        ("req-1", "user-1", 2, 1999)
    );
    let stored: Option<String> = client.hget(&keys.outbox, "req-1").await?;
    assert_eq!(stored.as_deref(), Some(record.as_str()));

    // The script's own rules, decided inside Redis.
    let again = scripts.reserve(&client, &bucket, &ReserveCall::new("req-2", "user-1", 1)).await?;
    assert_eq!(again, ReserveOutcome::LimitReached { held: 2 });
    let dup = scripts.reserve(&client, &bucket, &ReserveCall::new("req-1", "user-2", 1)).await?;
    assert_eq!(dup, ReserveOutcome::Duplicate);
    let stock: i64 = client.get(&keys.stock).await?;
    assert_eq!(stock, 3, "refused reservations must not touch the stock");

    // Called by SHA: the server holds the script under the SHA the wrappers send.
    let exists: Vec<bool> = client.script_exists(scripts.reserve_sha()).await?;
    assert_eq!(exists, vec![true], "SCRIPT EXISTS {}", scripts.reserve_sha());
    Ok(())
}

#[tokio::test]
async fn postgres_takes_the_migrations_of_sql_through_sqlx() -> anyhow::Result<()> {
    let url = e2e::cleanup::Database::create().await?;
    let mut conn = stack::pg_connect(&url).await?;
    let dir = stack::workspace_root().join("sql");
    let files = std::fs::read_dir(&dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .filter_map(|e| e.ok())
        .filter(|e| e.path().extension().is_some_and(|x| x == "sql"))
        .count();
    assert!(files >= 1, "no migration in {}", dir.display());

    let migrator = sqlx::migrate::Migrator::new(dir.as_path()).await?;
    migrator.run(&mut conn).await?;
    migrator.run(&mut conn).await?; // a second run applies nothing
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut conn)
        .await?;
    assert_eq!(applied, files as i64, "one row per file of sql/");

    let id = stack::unique("smoke-");
    sqlx::query(
        "INSERT INTO campaigns (id, sku, total_stock, per_user_limit, price_cents, starts_at, \
         ends_at, pay_window_secs) \
         VALUES ($1, 'sku-smoke', 10, 1, 1999, now(), now() + interval '1 hour', 900)",
    )
    .bind(&id)
    .execute(&mut conn)
    .await?;
    let (sku, total, sold, state): (String, i64, i64, String) =
        sqlx::query_as("SELECT sku, total_stock, sold, state FROM campaigns WHERE id = $1")
            .bind(&id)
            .fetch_one(&mut conn)
            .await?;
    assert_eq!((sku.as_str(), total, sold, state.as_str()), ("sku-smoke", 10, 0, "DRAFT"));

    // The schema's last guard is live: selling past the stock is refused by the database.
    let err = sqlx::query("UPDATE campaigns SET sold = total_stock + 1 WHERE id = $1")
        .bind(&id)
        .execute(&mut conn)
        .await
        .expect_err("sold > total_stock must violate a CHECK");
    let code = err.as_database_error().and_then(|e| e.code()).map(|c| c.into_owned());
    assert_eq!(code.as_deref(), Some("23514"), "{err}"); // check_violation
    Ok(())
}

/// Record `i` of the Kafka test goes to partition `i % PARTITIONS`.
const PARTITIONS: i32 = 4;
const RECORDS: usize = 10_000;
/// Records per produce request: one request per batch keeps the test quick (rskafka does not
/// set TCP_NODELAY, and small requests stall on loopback).
const BATCH: usize = 500;

fn record(i: usize) -> Record {
    Record {
        key: Some(format!("user-{}", i % 97).into_bytes()),
        value: Some(i.to_string().into_bytes()),
        headers: BTreeMap::new(),
        timestamp: rskafka::chrono::Utc::now(),
    }
}

/// Produces the records of partition `p` in batches; returns their offsets in order.
async fn produce_partition(pc: &PartitionClient, p: i32) -> anyhow::Result<Vec<i64>> {
    let mine: Vec<usize> = (0..RECORDS).filter(|i| (*i as i32) % PARTITIONS == p).collect();
    let mut offsets = Vec::with_capacity(mine.len());
    for chunk in mine.chunks(BATCH) {
        let batch = chunk.iter().map(|&i| record(i)).collect();
        offsets.extend(pc.produce(batch, Compression::NoCompression).await?);
    }
    Ok(offsets)
}

/// Fetches partition `p` from offset 0 to its high watermark; returns (offset, value) pairs.
async fn fetch_partition(pc: &PartitionClient) -> anyhow::Result<Vec<(i64, usize)>> {
    let mut out = Vec::new();
    let mut next = 0;
    // Bounded: each fetch returns at least one record while below the watermark.
    for _ in 0..RECORDS {
        let (records, high_watermark) = pc.fetch_records(next, 1..1_000_000, 50).await?;
        for r in records {
            let value = r.record.value.context("record without value")?;
            out.push((r.offset, std::str::from_utf8(&value)?.parse()?));
            next = r.offset + 1;
        }
        if next >= high_watermark {
            return Ok(out);
        }
    }
    anyhow::bail!("partition {} not drained after {RECORDS} fetches", pc.partition())
}

#[tokio::test]
async fn kafka_gives_back_10000_records_exactly_once_in_order_per_partition() -> anyhow::Result<()> {
    tokio::time::timeout(KAFKA_TEST_BUDGET, kafka_round_trip())
        .await
        .context("the Kafka smoke test did not finish in time")?
}

async fn kafka_round_trip() -> anyhow::Result<()> {
    let client = stack::kafka_client(&stack::kafka_broker()).await?;
    let topic = stack::unique("smoke-");
    stack::create_topic(&client, &topic, PARTITIONS).await?;
    let _owned = e2e::cleanup::Topic::adopt(&topic);
    let listed = client.list_topics().await?;
    let mine = listed.iter().find(|t| t.name == topic).context("new topic not listed")?;
    assert_eq!(mine.partitions.len(), PARTITIONS as usize);

    let mut partitions = Vec::new();
    for p in 0..PARTITIONS {
        partitions.push(client.partition_client(topic.as_str(), p, UnknownTopicHandling::Error).await?);
    }

    let produced =
        futures::future::try_join_all(partitions.iter().zip(0..).map(|(pc, p)| produce_partition(pc, p)))
            .await?;
    let fetched = futures::future::try_join_all(partitions.iter().map(fetch_partition)).await?;

    let mut seen = vec![false; RECORDS];
    for (p, (offsets, records)) in produced.iter().zip(&fetched).enumerate() {
        let expected: Vec<usize> = (0..RECORDS).filter(|i| i % PARTITIONS as usize == p).collect();
        let want_offsets: Vec<i64> = (0..expected.len() as i64).collect();
        assert_eq!(offsets, &want_offsets, "offsets acknowledged by partition {p}");
        let got_offsets: Vec<i64> = records.iter().map(|(o, _)| *o).collect();
        assert_eq!(got_offsets, want_offsets, "offsets fetched from partition {p}");
        let values: Vec<usize> = records.iter().map(|(_, v)| *v).collect();
        assert_eq!(values, expected, "records of partition {p}, in produce order");
        for v in values {
            assert!(!seen[v], "record {v} fetched twice");
            seen[v] = true;
        }
    }
    assert!(seen.iter().all(|s| *s), "every record fetched");
    Ok(())
}

#[tokio::test]
async fn the_stack_answers_on_its_addresses() -> anyhow::Result<()> {
    stack::check_redis(&stack::redis_url()).await?;
    stack::check_postgres(&stack::pg_admin_url()).await?;
    stack::check_kafka(&stack::kafka_broker()).await?;
    Ok(())
}

/// A loopback port where nothing listens: bound, then released.
fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local address").port()
}

fn assert_clear(err: anyhow::Error, addr: &str) {
    let text = format!("{err:#}");
    assert!(text.contains(addr), "the error should name {addr}: {text}");
    assert!(text.contains(STACK_HINT), "the error should say how to start the stack: {text}");
}

#[tokio::test]
async fn a_stopped_redis_fails_with_a_clear_message() {
    let addr = format!("127.0.0.1:{}", dead_port());
    let err = stack::check_redis(&format!("redis://{addr}")).await.expect_err("nothing listens there");
    assert_clear(err, &addr);
}

#[tokio::test]
async fn a_stopped_postgres_fails_with_a_clear_message() {
    let addr = format!("127.0.0.1:{}", dead_port());
    let err = stack::check_postgres(&format!("postgres://postgres@{addr}/postgres"))
        .await
        .expect_err("nothing listens there");
    assert_clear(err, &addr);
}

#[tokio::test]
async fn a_stopped_kafka_fails_with_a_clear_message() {
    let addr = format!("127.0.0.1:{}", dead_port());
    let err = stack::check_kafka(&addr).await.expect_err("nothing listens there");
    assert_clear(err, &addr);
}
