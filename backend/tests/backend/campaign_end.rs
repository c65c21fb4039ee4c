//! `order-writer campaign end`: only after the pay window of the last orders and with none
//! waiting for payment; then the campaign's Redis keys are gone, its control hash says ENDED, its
//! row and orders stay in PostgreSQL, and nothing publishes, resumes or sells it again.

use std::time::{Duration, Instant};

use fred::prelude::*;

use crate::common::bin::{command, spawn, write_conf};
use crate::common::Env;

fn run(conf: &std::path::Path, args: &[&str]) -> (bool, String) {
    let out = command(conf, args).output().unwrap();
    (
        out.status.success(),
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_campaign_ends_after_its_pay_window_with_its_keys_removed_and_its_orders_kept() {
    let env = Env::new(5, 1, 1).await;
    let records = vec![env.reserve("u1", 1).await, env.reserve("u2", 1).await];
    env.produce(0, records).await;
    let conf = write_conf(&env, 10);
    let writer = spawn(&conf, &["serve"]);
    let start = Instant::now();
    while env.count("SELECT count(*) FROM orders").await < 2 {
        assert!(start.elapsed() < Duration::from_secs(30), "the writer wrote the 2 orders");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let c = env.campaign.as_str();

    let (ok, out) = run(&conf, &["campaign", "end", c]);
    assert!(!ok && out.contains("may be paid until"), "still in its window: {out}");
    sqlx::query(
        "UPDATE campaigns SET starts_at = now() - interval '2 hours', ends_at = now() - interval '1 hour',
                              pay_window_secs = 60 WHERE id = $1",
    )
    .bind(c)
    .execute(&env.pool)
    .await
    .unwrap();
    let (ok, out) = run(&conf, &["campaign", "end", c]);
    assert!(!ok && out.contains("2 order(s) still wait for payment"), "{out}");
    sqlx::query("UPDATE orders SET status = 'PAID', paid_at = now() WHERE campaign_id = $1")
        .bind(c)
        .execute(&env.pool)
        .await
        .unwrap();

    let (ok, out) = run(&conf, &["campaign", "end", c]);
    assert!(ok, "{out}");
    assert!(out.contains("ENDED (control version 1)") && out.contains("Redis key(s) removed"), "{out}");
    let k = env.keys();
    let left: i64 = env
        .redis
        .exists(vec![k.meta.clone(), k.stock.clone(), k.bought.clone(), k.outbox.clone()])
        .await
        .unwrap();
    assert_eq!(left, 0, "the ledger is gone from Redis");
    let state: Option<String> = env.redis.hget(protocol::keys::control_key(c), "state").await.unwrap();
    assert_eq!(state.as_deref(), Some("ENDED"), "the tombstone stays");
    let row: (String, i64) = sqlx::query_as("SELECT state, sold FROM campaigns WHERE id = $1")
        .bind(c)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    assert_eq!(row, ("ENDED".to_string(), 2));
    assert_eq!(env.count("SELECT count(*) FROM orders").await, 2, "the orders stay");

    // Never again: publish, resume and add-stock are refused; end again changes nothing.
    let (ok, out) = run(&conf, &["campaign", "publish", c]);
    assert!(!ok && out.contains("ENDED"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "resume", c]);
    assert!(!ok && out.contains("ENDED"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "add-stock", c, "5"]);
    assert!(!ok && out.contains("ENDED"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "end", c]);
    assert!(ok && out.contains("0 Redis key(s) removed"), "{out}");
    drop(writer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_campaign_commands_say_why_and_change_nothing() {
    let env = Env::new(5, 1, 1).await;
    let conf = write_conf(&env, 10);
    let c = env.campaign.as_str();
    let (ok, out) = run(&conf, &["campaign", "pause", "no-such-campaign"]);
    assert!(!ok && out.contains("unknown campaign \"no-such-campaign\""), "{out}");
    let (ok, out) = run(&conf, &["campaign", "resume", c]);
    assert!(!ok && out.contains("already OPEN"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "extend", c, "--until", "tomorrow"]);
    assert!(!ok && out.contains("not an RFC 3339 time"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "extend", c, "--until", "2020-01-01T00:00:00Z"]);
    assert!(!ok && out.contains("not after the window's end"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "add-stock", c, "0"]);
    assert!(!ok && out.contains("give 1 to"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "apply", c]);
    assert!(!ok && out.contains("[fleet] gateways"), "no gateway to reach: {out}");
    // diff: a staged copy with more stock and another rate: each field said with its effect.
    let current = std::fs::read_to_string(env.dir.join("campaigns").join(format!("{c}.toml"))).unwrap();
    let staged = env.dir.join("staged");
    std::fs::create_dir_all(&staged).unwrap();
    let changed = current.replace("stock = 5\n", "stock = 50\n") + "\n[limits]\nuser_per_sec = 9\n";
    std::fs::write(staged.join(format!("{c}.toml")), changed).unwrap();
    let file = staged.join(format!("{c}.toml"));
    let (ok, out) = run(&conf, &["campaign", "diff", c, "--file", file.to_str().unwrap()]);
    assert!(ok, "{out}");
    assert!(out.contains("stock: 5 → 50: REFUSED after the publish") && out.contains("add-stock"), "{out}");
    assert!(out.contains("[limits]") && out.contains("applies at the gateways' reload"), "{out}");
    // A window field edited after the publish is said, not ignored silently.
    let live = env.dir.join("campaigns").join(format!("{c}.toml"));
    std::fs::write(&live, current.replace("pay_window_secs = 900", "pay_window_secs = 600")).unwrap();
    let (ok, out) = run(&conf, &["campaign", "publish", c]);
    assert!(ok && out.contains("note: pay_window_secs is 900 published, 600 in the file"), "{out}");
    std::fs::write(&live, &current).unwrap();
    let (ok, out) = run(&conf, &["campaign", "pause", c]);
    assert!(ok && out.contains("OPEN → PAUSED") && out.contains("not checked"), "{out}");
    let (ok, out) = run(&conf, &["campaign", "status", c]);
    assert!(ok && out.contains("PAUSED (control version 2)") && out.contains("left in Redis: 5"), "{out}");
}
