//! `order-writer produce` through the binary: generated reservations (through `reserve.lua`) and
//! a file of them become signed records on the topic that the writer drains into orders; a bad
//! file is refused with its line and nothing of it is produced.

use crate::common;

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use common::bin::{command, write_conf};
use common::Env;

fn run(conf: &Path, args: &[&str]) -> Output {
    command(conf, args).env("RUST_LOG", "warn").output().unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

async fn orders(env: &Env) -> i64 {
    env.count("SELECT count(*) FROM orders WHERE campaign_id = $1").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn generated_reservations_are_reserved_in_redis_produced_signed_and_become_orders() {
    let env = Env::new(30, 2, 2).await;
    let conf = write_conf(&env, 50);
    let out = run(&conf, &["produce", "--generate", "20", "--campaign", &env.campaign, "--users", "10"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains(&format!("reserved 20 of 20 units of campaign {}", env.campaign)), "{stdout}");
    assert!(
        stdout.contains(&format!("produced 20 signed records (seckill-signature header) to {}", env.topic))
    );
    // Reserved like the gateway does: the outbox holds them until the writer commits.
    assert_eq!(env.outbox_len().await, 20);
    assert_eq!(env.redis_stock().await, 10);
    assert_eq!(env.end_offsets().await.iter().sum::<i64>(), 20);

    env.drain(50).await;
    assert_eq!(orders(&env).await, 20);
    assert_eq!(env.count("SELECT count(DISTINCT user_id) FROM orders WHERE campaign_id = $1").await, 10);
    // Each carries its origin, as the gateway's records do, into its order.
    let origins = "SELECT count(*) FROM orders WHERE campaign_id = $1 AND host(client_ip) = '192.0.2.1'
                      AND device_id = 'generated-' || user_id AND registered_at IS NULL";
    assert_eq!(env.count(origins).await, 20);
    assert!(env.dead_letters().await.is_empty());
    assert_eq!(env.outbox_len().await, 0);
    // Each record is keyed by its user, on the user's partition, and signed.
    let signer = protocol::signing::Signer::new(common::GATEWAY_KEY);
    let mut seen = 0;
    for p in 0..env.partitions {
        let pc = backend::kafka::partition(&env.kafka, &env.topic, p, Duration::from_secs(10)).await.unwrap();
        let (records, _) = pc.fetch_records(0, 1..1 << 20, 100).await.unwrap();
        for r in records {
            let value = r.record.value.unwrap();
            let user = protocol::record::Reservation::from_json(&value).unwrap().user;
            assert_eq!(r.record.key.as_deref(), Some(user.as_bytes()));
            assert_eq!(protocol::record::partition_for(&user, env.partitions), p);
            let sig = &r.record.headers[protocol::signing::RECORD_SIGNATURE_HEADER];
            assert!(signer.verify(&value, std::str::from_utf8(sig).unwrap()).is_ok());
            seen += 1;
        }
    }
    assert_eq!(seen, 20, "one fetch per partition reads them all back");

    // Past the per-user limit the script refuses: what was reserved is produced, and it says why.
    let out = run(&conf, &["produce", "--generate", "3", "--campaign", &env.campaign, "--users", "1"]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains("stopped early") && stderr.contains("per-user limit"), "{stderr}");
    assert!(text(&out.stdout).contains("reserved 2 of 3 units"), "{}", text(&out.stdout));
    env.drain(50).await;
    assert_eq!(orders(&env).await, 22);

    // An unpublished campaign: nothing reserved, nothing produced.
    let out = run(&conf, &["produce", "--generate", "1", "--campaign", "never-published-here"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("not published"), "{}", text(&out.stderr));
    assert_eq!(env.end_offsets().await.iter().sum::<i64>(), 22);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_file_of_reservations_is_produced_as_written_and_a_bad_file_not_at_all() {
    let env = Env::new(10, 1, 2).await;
    let conf = write_conf(&env, 50);
    let mut lines = Vec::new();
    for i in 0..4 {
        lines.push(String::from_utf8(env.reserve(&format!("f{i}"), 1).await).unwrap());
    }
    let file = env.dir.join("reservations.jsonl");
    std::fs::write(&file, format!("{}\n\n{}\n", lines[..2].join("\n"), lines[2..].join("\n"))).unwrap();
    let out = run(&conf, &["produce", "--file", file.to_str().unwrap()]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("produced 4 signed records"), "{}", text(&out.stdout));
    env.drain(50).await;
    assert_eq!(orders(&env).await, 4);
    assert!(env.dead_letters().await.is_empty());
    assert_eq!(env.outbox_len().await, 0);

    // Line 3 is not a reservation: the file is refused, naming it and the line, and not one of
    // its records reaches the topic.
    let ends = env.end_offsets().await;
    let good = String::from_utf8(env.reserve("f9", 1).await).unwrap();
    let bad = env.dir.join("bad.jsonl");
    std::fs::write(&bad, format!("{good}\n{good}\n{{\"request_id\": \"x\"}}\n{good}\n")).unwrap();
    let out = run(&conf, &["produce", "--file", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let stderr = text(&out.stderr);
    assert!(stderr.contains(&format!("{}:3: not a reservation record", bad.display())), "{stderr}");
    assert!(stderr.contains("missing field"), "{stderr}");
    // A file that cannot be read is named too.
    let missing = env.dir.join("missing.jsonl");
    let out = run(&conf, &["produce", "--file", missing.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains(&format!("cannot read {}", missing.display())),
        "{}",
        text(&out.stderr)
    );
    // A campaign alone (no --file, no --generate) is refused by the command line.
    let out = run(&conf, &["produce", "--campaign", &env.campaign]);
    assert!(!out.status.success());
    assert_eq!(env.end_offsets().await, ends, "nothing produced from a bad file");
}
