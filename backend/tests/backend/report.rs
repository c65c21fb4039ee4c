//! `order-writer campaign report`, the binary on a fresh database: a small sale made through the
//! real paths (reservations with their origin, the writer, the payment callback, the timeout
//! close and its release into Redis), then the report: its figures are the database's and
//! Redis' (units ordered, paid, closed, sold, left), the reconciliation holds, the page shows
//! them; a campaign without orders gives an empty but valid report; an unknown one an error.

use crate::audit::reserve_from;
use crate::common::{bin, Env, PAYMENT_KEY};

use backend::workers::closer;
use protocol::signing::{Signer, PAYMENT_SIGNATURE_HEADER, PAYMENT_TIMESTAMP_HEADER};
use serde_json::Value;

/// Pays order `order` through the writer's callback at `base`.
async fn pay(base: &str, order: i64) {
    let body = serde_json::to_vec(&serde_json::json!({ "payment_ref": format!("ref-{order}") })).unwrap();
    let ts = chrono::Utc::now().timestamp();
    let sig = Signer::new(PAYMENT_KEY).sign_payment("POST", &format!("/orders/{order}/pay"), ts, &body);
    let resp = reqwest::Client::new()
        .post(format!("{base}/orders/{order}/pay"))
        .header(PAYMENT_TIMESTAMP_HEADER, ts.to_string())
        .header(PAYMENT_SIGNATURE_HEADER, sig)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.text().await);
}

/// Runs `campaign report <id> --out <dir>/<name>.html --json <dir>/<name>.json`; its exit,
/// stdout, stderr, and the page and the JSON when it succeeded.
fn report(env: &Env, id: &str, name: &str) -> (bool, String, String, Option<(String, Value)>) {
    let conf = bin::write_conf(env, 100);
    let (html, json) = (env.dir.join(format!("{name}.html")), env.dir.join(format!("{name}.json")));
    let out = bin::command(&conf, &["campaign", "report", id, "--out"])
        .arg(&html)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let files = out.status.success().then(|| {
        let page = std::fs::read_to_string(&html).unwrap();
        (page, serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap())
    });
    let text = |b: &[u8]| String::from_utf8_lossy(b).to_string();
    (out.status.success(), text(&out.stdout), text(&out.stderr), files)
}

/// A headline card of the page: `<div class=card>{name}<b>{value}</b></div>`.
fn card(name: &str, value: impl std::fmt::Display) -> String {
    format!("<div class=card>{name}<b>{value}</b></div>")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_report_shows_what_the_database_and_redis_hold() {
    let env = Env::new(20, 1, 2).await;
    let mut records = Vec::new();
    for i in 0..6 {
        records.push(
            reserve_from(&env, &format!("u{i}"), &format!("198.51.{i}.1"), &format!("d{i}"), 500).await,
        );
    }
    env.produce_records(records).await;
    env.drain(50).await;
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM orders WHERE campaign_id = $1 ORDER BY id")
        .bind(&env.campaign)
        .fetch_all(&env.pool)
        .await
        .unwrap();
    assert_eq!(ids.len(), 6);
    // Two paid through the callback, one closed unpaid and its unit given back to Redis.
    let base = env.serve_http().await;
    pay(&base, ids[0]).await;
    pay(&base, ids[1]).await;
    sqlx::query("UPDATE orders SET pay_by = now() - interval '1 second' WHERE id = $1")
        .bind(ids[2])
        .execute(&env.pool)
        .await
        .unwrap();
    assert_eq!(closer::close_due(&env.pool, 10).await.unwrap(), 1);
    assert_eq!(closer::release_closed(&env.pool, &env.redis, &env.scripts, 10).await.unwrap(), 1);

    let (ok, out, err, files) = report(&env, &env.campaign, "sale");
    assert!(ok, "{err}");
    let (page, v) = files.unwrap();
    // The figures are the stores' own.
    let sold: i64 = sqlx::query_scalar("SELECT sold FROM campaigns WHERE id = $1")
        .bind(&env.campaign)
        .fetch_one(&env.pool)
        .await
        .unwrap();
    let left = env.redis_stock().await;
    assert_eq!((sold, left), (5, 15), "6 ordered, 1 closed and released");
    assert_eq!(v["campaign"]["sold"].as_i64(), Some(sold));
    assert_eq!(v["stock"]["left"], serde_json::json!([left]));
    assert_eq!(v["orders"]["units"].as_i64(), Some(6));
    assert_eq!(v["orders"]["paid"], serde_json::json!([2, 2]));
    assert_eq!(v["orders"]["closed"], serde_json::json!([1, 1]));
    assert_eq!(v["orders"]["pending"], serde_json::json!([3, 3]));
    assert_eq!(v["orders"]["paid_cents"].as_i64(), Some(2 * 1999));
    assert_eq!(v["stock"]["held"].as_i64(), Some(5));
    assert_eq!(v["reconcile"]["redis"], true, "{}", v["reconcile"]["text"]);
    assert_eq!(
        (v["reconcile"]["postgres"].as_bool(), v["reconcile"]["across"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(v["reconcile"]["differences"], serde_json::json!({}));
    let ordered: i64 = v["timeline"].as_array().unwrap().iter().map(|s| s["ordered"].as_i64().unwrap()).sum();
    assert_eq!(ordered, 6, "every order is on the timeline");
    assert_eq!(v["audit"]["crowd"]["winners"].as_u64(), Some(6));
    assert!(v["answers"].is_null(), "no gateway metrics were asked for");
    // The page shows them.
    for (name, value) in [
        ("stock", 20),
        ("ordered (units)", 6),
        ("paid (units)", 2),
        ("closed unpaid (units)", 1),
        ("sold (database)", sold),
        ("left in Redis", left),
        ("buyers", 6),
    ] {
        assert!(page.contains(&card(name, value)), "{name} {value}");
    }
    assert!(
        page.contains(&card("reconcile", "holds"))
            && page.contains("<h2>Reconciliation: <span class=ok>holds")
    );
    assert!(page.contains("<polyline") && page.contains("No group is flagged."));
    assert!(page.starts_with("<!doctype html>") && page.trim_end().ends_with("</html>"));
    assert!(
        out.contains("ordered 6 units, paid 2, closed 1, sold 5, left in Redis 15; reconcile holds"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_campaign_without_orders_gives_an_empty_report_and_an_unknown_one_an_error() {
    let env = Env::new(7, 1, 1).await;
    let (ok, _, err, files) = report(&env, &env.campaign, "empty");
    assert!(ok, "{err}");
    let (page, v) = files.unwrap();
    assert_eq!((v["orders"]["units"].as_i64(), v["campaign"]["total_stock"].as_i64()), (Some(0), Some(7)));
    assert_eq!(v["stock"]["left"], serde_json::json!([7]));
    assert_eq!(v["timeline"], serde_json::json!([]));
    assert!(page.contains("No order was written") && page.contains(&card("left in Redis", 7)), "{page}");
    assert!(page.trim_end().ends_with("</html>"));

    let (ok, out, err, files) = report(&env, "no-such-campaign", "none");
    assert!(!ok && files.is_none() && out.is_empty(), "{out}");
    assert!(err.contains("no campaign \"no-such-campaign\"") && !err.contains("panicked"), "{err}");
    assert!(!env.dir.join("none.html").exists(), "nothing written for an unknown campaign");
}
