//! The `order-writer` binary itself: killed with SIGKILL mid-stream and restarted (no loss, no
//! duplicate), SIGTERM (clean exit after the batch in flight), bad configuration and bad ids.

use crate::common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::bin::{command, spawn, write_conf};
use common::Env;

/// Reserves one unit for each of `n` users named `{prefix}{i}`, and returns the records grouped
/// by partition, as the gateway would produce them.
async fn reserved_by_partition(env: &Env, n: i64, prefix: &str) -> Vec<Vec<Vec<u8>>> {
    let mut per: Vec<Vec<Vec<u8>>> = vec![Vec::new(); env.partitions as usize];
    for i in 0..n {
        let r = env.reserve(&format!("{prefix}{i}"), 1).await;
        let u = protocol::record::Reservation::from_json(&r).unwrap().user;
        per[backend::kafka::partition_for(&u, env.partitions) as usize].push(r);
    }
    per
}

async fn orders(env: &Env) -> i64 {
    env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn killed_mid_stream_and_restarted_loses_nothing_and_duplicates_nothing() {
    const N: i64 = 4000;
    let env = Env::new(N, 1, 2).await;
    // Produce in large requests, by partition.
    let per = reserved_by_partition(&env, N, "k").await;
    for (p, list) in per.into_iter().enumerate() {
        for chunk in list.chunks(500) {
            env.produce(p as i32, chunk.to_vec()).await;
        }
    }
    let conf = write_conf(&env, 20);
    let mut child = spawn(&conf, &["serve"]);
    // Kill it as soon as it has committed something, with most of the stream still to go.
    let limit = Instant::now() + Duration::from_secs(60);
    while orders(&env).await == 0 {
        assert!(Instant::now() < limit, "the writer wrote nothing within 60 s");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();
    let at_kill = orders(&env).await;

    let mut child = spawn(&conf, &["serve"]);
    let ends = env.end_offsets().await;
    env.wait_offsets(&ends).await;
    // Orders committed just before the kill were not acked in Redis: the sweeper redelivers them
    // and the writer acks them. Wait (bounded) for the outbox to empty.
    let limit = Instant::now() + Duration::from_secs(60);
    while env.outbox_len().await > 0 {
        assert!(Instant::now() < limit, "outbox still holds {} entries", env.outbox_len().await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let pid = child.id().to_string();
    assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert!(status.success(), "SIGTERM ends the writer cleanly: {status}");

    assert!(at_kill < N, "the kill happened mid-stream ({at_kill} of {N})");
    assert_eq!(orders(&env).await, N, "no loss, no duplicate");
    assert_eq!(env.count("SELECT count(DISTINCT user_id) FROM orders WHERE campaign_id = $1").await, N);
    assert_eq!(env.count("SELECT count(*) FROM stock_ledger WHERE campaign_id = $1").await, N);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, N);
    assert_eq!(env.stat("acked_count").await, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_configuration_and_unknown_campaign_fail_with_clear_messages() {
    let dir = std::env::temp_dir().join(fixtures::stack::unique("ow-cli-"));
    std::fs::create_dir_all(&dir).unwrap();
    let conf = dir.join("order-writer.toml");
    std::fs::write(
        &conf,
        "listen = \"127.0.0.1:1\"\nredis_url = \"redis://127.0.0.1:6390\"\npostgres_url = \"postgres://x@127.0.0.1:5440/x\"\n\
         gateway_key = \"env:OW_TEST_GATEWAY_KEY\"\npayment_key = \"env:OW_TEST_PAYMENT_KEY\"\n\n[kafka]\nbrokers = [\"127.0.0.1:19092\"]\n\
         topic = \"t\"\npartitions = -2\n",
    )
    .unwrap();
    let out = command(&conf, &["check"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("order-writer.toml:10:") && err.contains("kafka.partitions"), "{err}");
    // The flag's older name, `--config`, reads the same file (backend teams' scripts keep working).
    let out = Command::new(common::bin::BIN)
        .arg("--config")
        .arg(&conf)
        .arg("check")
        .env("OW_TEST_GATEWAY_KEY", String::from_utf8_lossy(common::GATEWAY_KEY).to_string())
        .env("OW_TEST_PAYMENT_KEY", String::from_utf8_lossy(common::PAYMENT_KEY).to_string())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("order-writer.toml:10:") && err.contains("kafka.partitions"), "{err}");

    let env = Env::new(1, 1, 1).await;
    let conf = write_conf(&env, 10);
    let out = command(&conf, &["campaign", "publish", "nope"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("unknown campaign \"nope\""), "{err}");
    // A second publish of the real campaign through the CLI says what happened and succeeds.
    let out = command(&conf, &["campaign", "publish", &env.campaign]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("unchanged"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_instances_split_the_partitions() {
    const N: i64 = 300;
    let env = Env::new(N, 1, 2).await;
    let per = reserved_by_partition(&env, N, "s").await;
    assert_eq!(per.len(), 2);
    assert!(per.iter().all(|p| !p.is_empty()));
    for (p, list) in per.iter().enumerate() {
        env.produce(p as i32, list.clone()).await;
    }
    let conf_a = write_conf(&env, 50);
    let mut a = spawn(&conf_a, &["serve", "--partitions", "0"]);
    let conf_b = env.dir.join("b.toml");
    let port = fixtures::stack::free_port();
    let text = std::fs::read_to_string(&conf_a).unwrap();
    let first_line = text.lines().next().unwrap().to_string();
    std::fs::write(&conf_b, text.replacen(&first_line, &format!("listen = \"127.0.0.1:{port}\""), 1))
        .unwrap();
    let mut b = spawn(&conf_b, &["serve", "--partitions", "1"]);
    env.wait_offsets(&env.end_offsets().await).await;
    for child in [&mut a, &mut b] {
        assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
        assert!(child.wait().unwrap().success());
    }
    assert_eq!(orders(&env).await, N);
    assert_eq!(env.count("SELECT sold FROM campaigns WHERE id = $1").await, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_with_another_partition_count_is_refused_at_start() {
    let env = Env::new(1, 1, 2).await;
    let conf = write_conf(&env, 10);
    let text = std::fs::read_to_string(&conf).unwrap().replace("partitions = 2", "partitions = 3");
    std::fs::write(&conf, text).unwrap();
    for args in [&["topic", "create"][..], &["serve"][..]] {
        let out = command(&conf, args).output().unwrap();
        assert!(!out.status.success(), "{args:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("has 2 partitions but kafka.partitions = 3"), "{args:?}: {err}");
    }
}

/// The ERROR lines of a log.
fn error_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.split_whitespace().any(|w| w == "ERROR")).collect()
}

/// A topic that exists is not an error: `topic create` run twice and `serve` on the topic log no
/// ERROR line (the brokers are asked first; a create is sent only for a missing topic).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_existing_topic_logs_no_error() {
    let env = Env::new(1, 1, 2).await;
    let conf = write_conf(&env, 10);
    for run in ["first", "second"] {
        let out = command(&conf, &["topic", "create"]).env("RUST_LOG", "info").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{run} topic create: {stderr}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("already exists"), "{run}");
        assert_eq!(error_lines(&stderr), Vec::<&str>::new(), "{run} topic create");
    }

    // serve on the existing topic, until it has written an order, then SIGTERM.
    let log_path = env.dir.join("serve.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let mut child = command(&conf, &["serve"])
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap();
    let record = env.reserve("topic-user", 1).await;
    env.produce_records(vec![record]).await;
    let limit = Instant::now() + Duration::from_secs(60);
    while orders(&env).await == 0 {
        if Instant::now() > limit || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let _ = child.wait();
            panic!("serve wrote no order: {}", std::fs::read_to_string(&log_path).unwrap());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    assert!(child.wait().unwrap().success());
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert_eq!(error_lines(&log), Vec::<&str>::new(), "serve on an existing topic");

    if let Ok(controller) = env.kafka.controller_client() {
        let _ = controller.delete_topic(&env.topic, 5_000).await;
    }
}
