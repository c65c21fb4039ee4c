//! What a test makes on the stack is gone once its owner is dropped (`e2e::cleanup`): the
//! database, the topic and every Redis key of the campaign (its own, its buckets', its spent
//! challenges'), checked on the real servers, on the Redis Cluster too when it is up, and when
//! the test panics. A neighbour campaign whose id only starts with the same characters keeps
//! its keys.

use e2e::cleanup::{self, Campaign, Topic};
use e2e::stack;
use fred::prelude::{Client, KeysInterface};
use protocol::keys::{Bucket, CampaignKeys};

/// Writes one key of every kind campaign `id` has on the Redis of `client`: the ledger of a
/// campaign without buckets, two buckets' of three, a nonce, a global limit's counter, the
/// waiting room, a spent challenge. Returns them.
async fn write_campaign_keys(client: &Client, id: &str) -> Vec<String> {
    let keys = CampaignKeys::new(id);
    let mut all = vec![
        keys.meta.clone(),
        keys.stock.clone(),
        keys.nonce("jti-1", "n-1"),
        keys.global_limit("user", "u1", 7),
        keys.room(),
        keys.challenge("ch-1"),
    ];
    for b in [Bucket::nth(id, 0, 3), Bucket::nth(id, 2, 3)] {
        all.push(b.keys.stock.clone());
        all.push(b.keys.outbox.clone());
    }
    for k in &all {
        let _: () = client.set(k.as_str(), "1", None, None, false).await.unwrap();
    }
    all
}

/// Keys left of `keys` on the Redis of `client`.
async fn left(client: &Client, keys: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for k in keys {
        let n: i64 = client.exists(k.as_str()).await.unwrap();
        if n > 0 {
            out.push(k.clone());
        }
    }
    out
}

/// Campaign keys, made and dropped on the Redis at `url`; a neighbour's stay.
async fn campaign_keys_go_with_their_owner(url: &str) {
    let client = stack::redis_client(url).await.expect("Redis of the stack");
    let campaign = Campaign::on("cl", url);
    let neighbour = format!("{campaign}x");
    let mine = write_campaign_keys(&client, &campaign).await;
    let theirs = write_campaign_keys(&client, &neighbour).await;
    assert_eq!(cleanup::campaign_key_count(url, &campaign).await.unwrap(), mine.len());

    drop(campaign);
    assert_eq!(left(&client, &mine).await, Vec::<String>::new(), "the dropped campaign's keys");
    assert_eq!(left(&client, &theirs).await, theirs, "the neighbour's keys");
    assert_eq!(cleanup::delete_campaign_keys(url, &neighbour).await.unwrap(), theirs.len());
    assert_eq!(left(&client, &theirs).await, Vec::<String>::new());
}

#[tokio::test]
async fn a_campaigns_keys_are_deleted_with_it() {
    campaign_keys_go_with_their_owner(&stack::redis_url()).await;
}

#[tokio::test]
async fn a_campaigns_keys_are_deleted_on_every_master_of_the_cluster() {
    let Ok(url) = std::env::var("SECKILL_REDIS_CLUSTER_URL") else {
        eprintln!("SECKILL_REDIS_CLUSTER_URL is not set (e2e/stack.sh up cluster): nothing to check");
        return;
    };
    // The buckets' tags fall on different masters (protocol::keys): the scan reads them all.
    campaign_keys_go_with_their_owner(&url).await;
}

#[tokio::test]
async fn a_database_is_dropped_with_it() {
    let admin = stack::pg_admin_url();
    let db = e2e::cleanup::Database::create().await.expect("PostgreSQL of the stack");
    let name = db.name.clone();
    // A connection still open does not keep it (WITH (FORCE)).
    let open = stack::pg_connect(&db.url).await.unwrap();
    assert!(cleanup::database_exists(&admin, &name).await.unwrap());
    drop(db);
    assert!(!cleanup::database_exists(&admin, &name).await.unwrap(), "database {name} is still there");
    drop(open);
}

#[tokio::test]
async fn a_topic_is_deleted_with_it() {
    let broker = stack::kafka_broker();
    let client = stack::kafka_client(&broker).await.expect("Kafka of the stack");
    let topic = Topic::create(&client, "cl-", 2).await.unwrap();
    let name = topic.name.clone();
    assert_eq!(cleanup::topics_like(&broker, &name).await.unwrap(), vec![name.clone()]);
    drop(topic);
    assert_eq!(cleanup::topics_like(&broker, &name).await.unwrap(), Vec::<String>::new());
}

/// A test body that makes a database, a topic and a campaign's keys, then panics, on a thread
/// and a runtime of its own, as `#[tokio::test]` runs one: the names it made, and whether it
/// panicked.
fn panicking_test() -> (String, String, String, bool) {
    let (tx, rx) = std::sync::mpsc::channel();
    let outcome = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let db = e2e::cleanup::Database::create().await.unwrap();
            let client = stack::kafka_client(&stack::kafka_broker()).await.unwrap();
            let topic = Topic::create(&client, "cl-", 1).await.unwrap();
            let campaign = Campaign::new("cl");
            let redis = stack::redis_client(&stack::redis_url()).await.unwrap();
            write_campaign_keys(&redis, &campaign).await;
            tx.send((db.name.clone(), topic.name.clone(), campaign.to_string())).unwrap();
            panic!("the test fails here");
        })
    })
    .join();
    let (db, topic, campaign) = rx.recv().unwrap();
    (db, topic, campaign, outcome.is_err())
}

#[tokio::test]
async fn a_failing_test_cleans_up_too() {
    let (db, topic, campaign, panicked) = tokio::task::spawn_blocking(panicking_test).await.unwrap();
    assert!(panicked, "the test body panicked");
    assert!(!cleanup::database_exists(&stack::pg_admin_url(), &db).await.unwrap(), "database {db}");
    assert_eq!(cleanup::topics_like(&stack::kafka_broker(), &topic).await.unwrap(), Vec::<String>::new());
    assert_eq!(cleanup::campaign_key_count(&stack::redis_url(), &campaign).await.unwrap(), 0);
}

/// `sale-cleanup --prefix ""` would match every sale of the stack: it is refused with a clear
/// error and a non-zero exit before anything is connected to (the servers given are closed
/// ports, so a run that went on would fail with a connection error instead).
#[test]
fn sale_cleanup_refuses_an_empty_prefix() {
    for prefix in ["", " ", "sale%"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_sale-cleanup"))
            .args(["--prefix", prefix, "--pg-admin-url", "postgres://postgres@127.0.0.1:1/postgres"])
            .args(["--broker", "127.0.0.1:1", "--redis", "redis://127.0.0.1:1"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{prefix:?}: {err}");
        assert!(err.contains("--prefix") && err.contains("a-z0-9_"), "{prefix:?}: {err}");
        assert!(out.stdout.is_empty(), "{prefix:?}: nothing deleted, nothing printed");
    }
}
