//! A campaign's life through `order-writer campaign ...` across two gateways and one order
//! writer, on the stack's Redis, Kafka and PostgreSQL: publish → open → pause mid-sale → resume
//! → sold out → add-stock → sold out again → close; each step seen on every gateway (its admin
//! `/campaigns` and its answers), and at the end exactly the QUEUED answers are orders, no more
//! than the stock and its addition. A gateway whose file or key disagrees with the published
//! campaign does not sell it, and its reload is refused.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fred::prelude::{HashesInterface, KeysInterface};

use crate::sale::{Sale, PARTITIONS};
use crate::support::*;

const TOKEN: &str = "fleet-admin-token-0123456789";

/// The `order-writer` binary of this build (built beside the gateway's).
fn order_writer() -> PathBuf {
    let bin = Path::new(env!("CARGO_BIN_EXE_gateway")).with_file_name("order-writer");
    assert!(bin.exists(), "{} is missing: cargo build --workspace --bins", bin.display());
    bin
}

/// The writer's conf for the commands: this sale's stores, `[fleet]` = `admins`.
fn writer_conf(sale: &Sale, admins: &[u16]) -> PathBuf {
    let dir = &sale.dir;
    std::fs::write(dir.join("key"), KEY).unwrap();
    std::fs::write(dir.join("payment_key"), "test-payment-key-0123456789").unwrap();
    std::fs::write(dir.join("admin_token"), TOKEN).unwrap();
    let gateways: Vec<String> = admins.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    let text = format!(
        "listen = \"127.0.0.1:1\"\nredis_url = \"{}\"\npostgres_url = \"{}\"\ncampaigns_dir = \"campaigns\"\n\
         gateway_key = \"file:key\"\npayment_key = \"file:payment_key\"\n\n[kafka]\nbrokers = [\"{}\"]\n\
         topic = \"{}\"\npartitions = {PARTITIONS}\n\n[fleet]\ngateways = [{}]\ntoken = \"file:admin_token\"\n",
        sale.redis_url,
        sale.pg_url,
        fixtures::stack::kafka_broker(),
        sale.topic,
        gateways.join(", ")
    );
    let file = dir.join("order-writer.toml");
    std::fs::write(&file, text).unwrap();
    file
}

/// Runs `order-writer campaign ARGS` with `conf`: (success, stdout and stderr).
fn campaign(conf: &Path, args: &[&str]) -> (bool, String) {
    let out =
        Command::new(order_writer()).arg("--conf").arg(conf).arg("campaign").args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// The admin token's file of `sale` (written).
fn token_file(sale: &Sale) -> PathBuf {
    let token = sale.dir.join("admin_token");
    std::fs::write(&token, TOKEN).unwrap();
    token
}

/// A gateway of `sale` with its admin listener on `admin` (token by file).
async fn gateway(sale: &Sale, admin: u16) -> Gateway {
    let mut conf = sale.gateway_conf(&fixtures::stack::kafka_broker(), "");
    let token = sale.dir.join("admin_token");
    std::fs::write(&token, TOKEN).unwrap();
    conf.tables = format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\ntoken = \"file:{}\"\n", token.display());
    Gateway::start(&conf).await
}

/// What gateway `admin` says of the campaign.
async fn served(http: &reqwest::Client, admin: u16, campaign: &str) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{admin}/campaigns");
    let v: serde_json::Value = http.get(url).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    v["campaigns"].as_array().unwrap().iter().find(|c| c["id"] == campaign).cloned().unwrap()
}

/// One order of a new user on `gw`: (code, request id when QUEUED).
async fn buy(http: &reqwest::Client, gw: &Gateway, campaign: &str, user: &str) -> (String, Option<String>) {
    let (_, body) = order(http, gw, campaign, user).await;
    let code = body["code"].as_str().unwrap_or("?").to_string();
    (code, body["request_id"].as_str().filter(|_| body["code"] == "QUEUED").map(str::to_string))
}

/// Orders of new users on both gateways, alternately, until `n` were QUEUED or one answered
/// SOLD_OUT; returns the QUEUED request ids and the last code.
async fn sell(
    http: &reqwest::Client,
    gws: &[&Gateway],
    campaign: &str,
    tag: &str,
    n: usize,
) -> (Vec<String>, String) {
    let mut queued = Vec::new();
    for i in 0..(n + 20) {
        let (code, id) = buy(http, gws[i % 2], campaign, &format!("{tag}-{i}")).await;
        match id {
            Some(id) => queued.push(id),
            None if code == "SOLD_OUT" => return (queued, code),
            None => panic!("unexpected {code} while selling"),
        }
        if queued.len() == n {
            return (queued, "QUEUED".into());
        }
    }
    panic!("never sold out: {} queued", queued.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_campaign_lives_through_the_command_across_two_gateways() {
    let sale = Sale::new(6).await;
    let (a1, a2, view) = (free_port(), free_port(), free_port());
    let _writer = sale
        .start_writer_as(Duration::from_secs(5), Some(view), free_port(), |c| backend::conf::Conf {
            admin_token: Some(
                protocol::secret::Password::read(
                    &format!("file:{}", token_file(&sale).display()),
                    Path::new("/"),
                )
                .unwrap(),
            ),
            fleet: backend::conf::FleetConf {
                gateways: vec![format!("127.0.0.1:{a1}"), format!("127.0.0.1:{a2}")],
                token: Some(
                    protocol::secret::Password::read(
                        &format!("file:{}", token_file(&sale).display()),
                        Path::new("/"),
                    )
                    .unwrap(),
                ),
                converge: Duration::from_secs(2),
            },
            ..c
        })
        .await;
    let (g1, g2) = (gateway(&sale, a1).await, gateway(&sale, a2).await);
    let conf = writer_conf(&sale, &[a1, a2]);
    let c = sale.campaign.as_str();
    let http = reqwest::Client::new();

    // Check, then publish through the command: the facts reach both gateways, which agree and sell.
    let (ok, out) = campaign(&conf, &["check", c, "--live"]);
    assert!(ok && out.contains("not published through `campaign publish` yet"), "{out}");
    let (ok, out) = campaign(&conf, &["publish", c]);
    assert!(ok, "{out}");
    assert!(out.contains("every gateway (2) shows version 1"), "{out}");
    let (mut all, code) = sell(&http, &[&g1, &g2], c, "open", 2).await;
    assert_eq!((all.len(), code.as_str()), (2, "QUEUED"));

    // Pause mid-sale: both gateways answer CAMPAIGN_CLOSED with Retry-After; resume sells again.
    let (ok, out) = campaign(&conf, &["pause", c]);
    assert!(ok && out.contains("OPEN → PAUSED"), "{out}");
    for (gw, admin) in [(&g1, a1), (&g2, a2)] {
        assert_eq!(served(&http, admin, c).await["state"], "PAUSED");
        let (status, body) = order(&http, gw, c, "paused-buyer").await;
        assert_eq!((status, body["code"].as_str()), (503, Some("CAMPAIGN_CLOSED")), "{body}");
    }
    // Queue only: TRY_LATER with Retry-After on both, nothing reserved; resume sells again.
    let (ok, out) = campaign(&conf, &["queue-only", c]);
    assert!(ok && out.contains("PAUSED → QUEUE_ONLY"), "{out}");
    for gw in [&g1, &g2] {
        let (status, body) = order(&http, gw, c, "queued-buyer").await;
        assert_eq!((status, body["code"].as_str()), (429, Some("TRY_LATER")), "{body}");
    }
    let (ok, out) = campaign(&conf, &["resume", c]);
    assert!(ok && out.contains("QUEUE_ONLY → OPEN"), "{out}");
    let (ok, out) = campaign(&conf, &["extend", c, "--until", "2040-01-01T00:00:00Z"]);
    assert!(ok && out.contains("OPEN → OPEN"), "{out}");
    let (ok, out) = campaign(&conf, &["status", c]);
    assert!(ok && out.contains("window ends 2040-01-01 00:00:00 UTC (extended)"), "{out}");
    let (more, code) = sell(&http, &[&g1, &g2], c, "resumed", 100).await;
    assert_eq!((more.len(), code.as_str()), (4, "SOLD_OUT"), "the rest of the 6");
    all.extend(more);

    // More stock: both gateways' sold-out flags clear (the replenish message), 3 more sell.
    let (ok, out) = campaign(&conf, &["add-stock", c, "3", "--ref", "restock-1"]);
    assert!(ok && out.contains("3 units added"), "{out}");
    let (ok, out) = campaign(&conf, &["add-stock", c, "3", "--ref", "restock-1"]);
    assert!(ok && out.contains("nothing changed"), "the same ref adds nothing twice: {out}");
    let (more, code) = sell(&http, &[&g1, &g2], c, "restocked", 100).await;
    assert_eq!((more.len(), code.as_str()), (3, "SOLD_OUT"), "exactly the 3 added");
    all.extend(more);
    let (ok, out) = campaign(&conf, &["status", c]);
    assert!(ok && out.contains("left in Redis: 0"), "{out}");

    // The live view's JSON says the same, behind the writer's admin token.
    let api = format!("http://127.0.0.1:{view}/api/campaigns/{c}");
    assert_eq!(http.get(&api).send().await.unwrap().status(), 401, "no token, no view");
    let live: serde_json::Value =
        http.get(&api).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!((live["state"].as_str(), live["stock"]["left"].as_i64()), (Some("OPEN"), Some(0)), "{live}");
    assert_eq!(
        (live["stock"]["total"].as_i64(), live["stock"]["added"].as_i64()),
        (Some(9), Some(3)),
        "{live}"
    );
    assert!(live["answers"]["QUEUED"]["total"].as_f64() >= Some(9.0), "{live}");
    // Its audit of the winners: the 9 all came from 127.0.0.1, past the default of 2 an address.
    assert_eq!(live["audit"]["winners"].as_u64(), Some(9), "{live}");
    let flagged = live["audit"]["flagged"].as_array().unwrap();
    assert!(flagged.iter().any(|g| g["kind"] == "ip32" && g["key"] == "127.0.0.1"), "{live}");
    let gws = live["gateways"].as_array().unwrap();
    assert!(gws.len() == 2 && gws.iter().all(|g| g["selling"] == true && g["state"] == "OPEN"), "{live}");
    let page =
        http.get(format!("http://127.0.0.1:{view}/view/{c}")).send().await.unwrap().text().await.unwrap();
    assert!(page.contains("/api/campaigns/"), "the page asks the JSON");

    // Close: ENDED everywhere; `end` waits for the pay window of the last orders.
    let (ok, out) = campaign(&conf, &["close", c]);
    assert!(ok && out.contains("every gateway (2)"), "{out}");
    for gw in [&g1, &g2] {
        let (status, body) = order(&http, gw, c, "late-buyer").await;
        assert_eq!((status, body["code"].as_str()), (410, Some("ENDED")), "{body}");
    }
    let (ok, out) = campaign(&conf, &["end", c]);
    assert!(!ok && out.contains("may be paid until"), "{out}");
    let (ok, out) = campaign(&conf, &["status", c]);
    assert!(ok && out.contains("CLOSED") && out.contains("stock 9 (3 added)"), "{out}");

    // The invariants: exactly the QUEUED answers are orders, 9 = 6 + 3, one per buyer.
    let queued: HashSet<String> = all.into_iter().collect();
    assert_eq!(queued.len(), 9);
    assert_eq!(sale.wait_orders(&queued).await, queued, "every QUEUED answer is an order, nothing else");

    // Time passes (the window, its extension and the pay window over, every order paid: written
    // as they would be), then `end`: ENDED on both gateways, the keys gone, the orders kept.
    sqlx::query("UPDATE campaigns SET starts_at = now() - interval '2 hours', ends_at = now() - interval '1 hour' WHERE id = $1")
        .bind(c)
        .execute(&sale.pool)
        .await
        .unwrap();
    let _: i64 = sale.redis.hdel(protocol::keys::control_key(c), "ends_at_ms").await.unwrap();
    sqlx::query("UPDATE orders SET status = 'PAID', paid_at = now() WHERE campaign_id = $1")
        .bind(c)
        .execute(&sale.pool)
        .await
        .unwrap();
    let (ok, out) = campaign(&conf, &["end", c]);
    assert!(ok && out.contains("every gateway (2)") && out.contains("Redis key(s) removed"), "{out}");
    for (gw, admin) in [(&g1, a1), (&g2, a2)] {
        assert_eq!(served(&http, admin, c).await["state"], "ENDED");
        let (status, body) = order(&http, gw, c, "after-the-end").await;
        assert_eq!((status, body["code"].as_str()), (410, Some("ENDED")), "{body}");
    }
    let stock: Option<i64> = sale.redis.get(protocol::keys::CampaignKeys::new(c).stock).await.unwrap();
    assert_eq!(stock, None, "the stock key is gone");
    assert_eq!(sale.orders().await, queued, "the orders stay");
    let (ok, out) = campaign(&conf, &["resume", c]);
    assert!(!ok && out.contains("ENDED"), "an ended campaign never sells again: {out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gateway_whose_files_disagree_with_the_publish_does_not_sell_and_refuses_the_reload() {
    let sale = Sale::new(5).await;
    let admin = free_port();
    let gw = gateway(&sale, admin).await;
    let conf = writer_conf(&sale, &[admin]);
    let c = sale.campaign.as_str();
    let http = reqwest::Client::new();
    let (ok, out) = campaign(&conf, &["publish", c]);
    assert!(ok, "{out}");
    let (ok, out) = campaign(&conf, &["check", c, "--live"]);
    assert!(ok && out.contains("every fact agrees on every gateway"), "{out}");

    // `check` catches each mismatch before it is tried: a stock edit in the file ...
    let mine = sale.dir.join("campaigns").join(format!("{c}.toml"));
    let original = std::fs::read_to_string(&mine).unwrap();
    std::fs::write(&mine, original.replace("stock = 5", "stock = 50")).unwrap();
    let (ok, out) = campaign(&conf, &["check", c]);
    assert!(!ok && out.contains("stock is 5 published, 50 in the file"), "{out}");
    std::fs::write(&mine, &original).unwrap();
    // ... a writer's key other than the gateways' ...
    let writer_text = std::fs::read_to_string(&conf).unwrap();
    std::fs::write(sale.dir.join("other_key"), "another-signing-key-0123456789").unwrap();
    std::fs::write(
        &conf,
        writer_text.replace("gateway_key = \"file:key\"", "gateway_key = \"file:other_key\""),
    )
    .unwrap();
    let (ok, out) = campaign(&conf, &["check", c, "--live"]);
    assert!(!ok && out.contains("its signing key differs from this writer's"), "{out}");
    // ... and another partition count.
    std::fs::write(&conf, writer_text.replace(&format!("partitions = {PARTITIONS}"), "partitions = 8"))
        .unwrap();
    let (ok, out) = campaign(&conf, &["check", c, "--live"]);
    assert!(!ok && out.contains("this writer reads") && out.contains("with 8"), "{out}");
    std::fs::write(&conf, &writer_text).unwrap();

    // A stock edit after the publish: the reload is refused at the line, the old file stays.
    let file = gw.dir.join("campaigns").join(format!("{c}.toml"));
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("stock = 5", "stock = 50")).unwrap();
    let refused =
        http.post(format!("http://127.0.0.1:{admin}/reload")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(refused.status(), 422);
    let body: serde_json::Value = refused.json().await.unwrap();
    let message = body["message"].as_str().unwrap();
    assert!(
        message.contains(&format!("{c}.toml:")) && message.contains("stock is 5 published, 50 in the file"),
        "{message}"
    );
    assert_eq!(body["field"], "stock");
    std::fs::write(&file, &text).unwrap();

    // A signing key other than the writer's: refused at reload, at the server file's line.
    let key = gw.dir.join("key");
    std::fs::write(&key, "another-signing-key-0123456789").unwrap();
    let refused =
        http.post(format!("http://127.0.0.1:{admin}/reload")).bearer_auth(TOKEN).send().await.unwrap();
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["field"], "signing_key", "{body}");
    assert!(body["message"].as_str().unwrap().contains("dead-lettered"), "{body}");
    std::fs::write(&key, KEY).unwrap();

    // A writer that reads another partition count: its publish makes the gateway stop selling
    // (its answer CAMPAIGN_NOT_READY), and the command fails naming it.
    let other = std::fs::read_to_string(&conf)
        .unwrap()
        .replace(&format!("partitions = {PARTITIONS}"), "partitions = 8");
    std::fs::write(&conf, other).unwrap();
    let (ok, out) = campaign(&conf, &["publish", c]);
    assert!(!ok && out.contains("do not sell") && out.contains("with 8"), "{out}");
    let (status, body) = order(&http, &gw, c, "buyer").await;
    assert_eq!((status, body["code"].as_str()), (409, Some("CAMPAIGN_NOT_READY")), "{body}");
    let wrong = http
        .get(format!("http://127.0.0.1:{admin}/campaigns"))
        .bearer_auth("wrong-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401, "the token is checked");
}
