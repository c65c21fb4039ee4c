//! The embedding example (`plugins/examples/embed.rs`): a platform team's own Pingora proxy with
//! the whole sale in its `request_filter` (`plugins::FlashSale`) sells through the whole client
//! protocol on the stack's Redis, refuses a forged signature and a second order, answers
//! `/info` and the buyer's page, passes a result query with its token to the order writer, clears
//! its sold-out flag on a replenish message, reloads its campaigns on `SIGHUP`, serves the
//! sale's metrics (registered by the sale itself) and proxies the rest of the shop.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::client::{self, Auth};
use e2e::stack::{self, free_port};
use fred::prelude::{KeysInterface, PubsubInterface};
use protocol::keys::CampaignKeys;
use protocol::scripts::{self, PublishSpec, Scripts};

/// The example's binary, built here if `cargo test` has not built it yet.
fn example() -> std::path::PathBuf {
    let root = stack::workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    let bin = target.join("debug").join("examples").join("embed");
    if !bin.exists() {
        // `--workspace`, not `-p plugins`: the features `cargo test --workspace` built the rest
        // with, so only the example is compiled (a `-p` build compiled the plugins and their
        // dependencies again: 60 s of the test command's).
        let built = Command::new(env!("CARGO"))
            .args(["build", "-q", "--workspace", "--example", "embed"])
            .current_dir(&root)
            .status()
            .expect("cargo runs");
        assert!(built.success(), "the example builds");
    }
    bin
}

/// A one-answer HTTP upstream on loopback: every request gets `200 {body}`, followed by
/// ` +sale-header` if the request carried one of the sale's own headers and ` +id` if it
/// carried an `X-Request-Id`.
fn upstream(body: &'static str) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let n = s.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
            let saw = |name: &str| request.contains(&format!("\r\n{name}:"));
            let leaked = plugins::pingora::SALE_OWNED.iter().any(|h| saw(h));
            let body = format!(
                "{body}{}{}",
                if leaked { " +sale-header" } else { "" },
                if saw("x-request-id") { " +id" } else { "" }
            );
            let head =
                format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n", body.len());
            let _ = s.write_all(head.as_bytes()).and_then(|()| s.write_all(body.as_bytes()));
        }
    });
    addr
}

struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The example's sale conf: the `[sale]`, `[redis]`, `[kafka]` and `[defense]` sections of a
/// server file, its keys in files beside it.
fn sale_conf(dir: &std::path::Path, login_key: &str) -> std::path::PathBuf {
    std::fs::write(dir.join("key"), "embed-gateway-key-0123456789abcdef").unwrap();
    std::fs::write(dir.join("master"), "embed-master-key-0123456789abcdef").unwrap();
    std::fs::write(dir.join("login"), login_key).unwrap();
    let file = dir.join("sale.toml");
    std::fs::write(
        &file,
        format!(
            "[sale]\nsigning_key = \"file:key\"\nsold_out_ttl_ms = 60000\n\
             [redis]\nurl = \"{}\"\n\
             [kafka]\nbrokers = [\"127.0.0.1:{}\"]\n\
             [defense]\nmaster_key = \"file:master\"\nlogin_alg = \"HS256\"\nlogin_key = \"file:login\"\n\
             login_issuer = \"{}\"\nlogin_audience = \"{}\"\n",
            stack::redis_url(),
            free_port(), // no broker: the outbox keeps the records
            client::ISSUER,
            client::AUDIENCE,
        ),
    )
    .unwrap();
    file
}

fn campaign_file(campaign: &str, closed: bool) -> String {
    let now = chrono::Utc::now();
    format!(
        "id = \"{campaign}\"\nsku = \"SKU\"\nstock = 1\nper_user_limit = 1\nprice_cents = 100\n\
         starts_at = \"{}\"\nends_at = \"{}\"\n[switches]\nclosed = {closed}\n[defense]\npow_bits = 4\n",
        (now - chrono::Duration::hours(1)).to_rfc3339(),
        (now + chrono::Duration::hours(1)).to_rfc3339()
    )
}

#[tokio::test]
async fn a_proxy_of_its_own_sells_through_the_whole_sale() {
    let campaign = e2e::cleanup::Campaign::new("embed");
    let redis = stack::redis_client(&stack::redis_url()).await.expect(stack::STACK_HINT);
    let spec = PublishSpec {
        stock_version: 1,
        total: 1,
        limit: 1,
        sku: "SKU".into(),
        price_cents: 100,
        price_version: 1,
    };
    let scripts = Scripts::load(&scripts::default_dir()).unwrap();
    let bucket = protocol::keys::Bucket::single(&campaign);
    scripts.publish(&redis, &bucket, &spec).await.unwrap();

    let dir = std::env::temp_dir().join(format!("embed-{campaign}"));
    std::fs::create_dir_all(dir.join("campaigns")).unwrap();
    let campaign_path = dir.join("campaigns").join(format!("{campaign}.toml"));
    std::fs::write(&campaign_path, campaign_file(&campaign, false)).unwrap();
    let (login_key, port, metrics_port) = ("embed-login-key-0123456789abcdef", free_port(), free_port());
    let conf = sale_conf(&dir, login_key);
    let child = Command::new(example())
        .args([
            &format!("127.0.0.1:{port}"),
            &upstream("shop"),
            &upstream("writer"),
            conf.to_str().unwrap(),
            &format!("127.0.0.1:{metrics_port}"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let pid = child.id();
    let _proxy = Killed(child);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    while http.get(format!("{base}/")).send().await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "the example did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The rest of the shop is proxied; the sale's own pages are the sale's.
    let shop = http.get(format!("{base}/cart")).send().await.unwrap();
    assert_eq!((shop.status().as_u16(), shop.text().await.unwrap()), (200, "shop".to_string()));
    // The sale's own headers never reach the shop, with only the sale's `request_filter` called.
    let shop = http
        .get(format!("{base}/cart"))
        .header(protocol::signing::SIGNATURE_HEADER, "0".repeat(64))
        .header("x-result-token", "x".repeat(40))
        .send()
        .await
        .unwrap();
    assert_eq!(shop.text().await.unwrap(), "shop", "the shop saw none of the sale's headers");
    let info: serde_json::Value =
        http.get(format!("{base}/seckill/{campaign}/info")).send().await.unwrap().json().await.unwrap();
    assert_eq!((info["campaign"].as_str(), info["state"].as_str()), (Some(campaign.as_str()), Some("OPEN")));
    let page = http.get(format!("{base}/seckill/{campaign}/")).send().await.unwrap();
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.text().await.unwrap().contains("<html"), "the buyer's page");
    let unknown = http.get(format!("{base}/seckill/nope/info")).send().await.unwrap();
    assert_eq!(unknown.status().as_u16(), 404);

    // The whole protocol: login JWT, captcha, token, signed order.
    let auth = Auth::hs256(login_key.as_bytes()).unwrap();
    let now = chrono::Utc::now();
    let t = client::get_ticket(&http, &base, &campaign, &auth.login("alice", serde_json::json!({})), "dev-a")
        .await
        .unwrap();
    let mut forged = t.sign(1, now.timestamp(), &client::nonce());
    forged.signature = "0".repeat(64);
    let refused = t.send(&http, &base, &forged).await;
    assert_eq!((refused.0, refused.1["code"].as_str()), (401, Some("BAD_SIGNATURE")));
    let queued = t.order(&http, &base, 1).await;
    assert_eq!((queued.0, queued.1["code"].as_str()), (202, Some("QUEUED")), "{queued:?}");
    let q = client::Queued::of(&queued.1).expect("QUEUED carries its result token");
    assert_eq!(queued.1["poll_url"], format!("/seckill/{campaign}/result/{}", q.request_id));
    let again = t.order(&http, &base, 1).await;
    assert_eq!((again.0, again.1["code"].as_str()), (409, Some("LIMIT_REACHED")), "{again:?}");

    // A result query goes to the order writer with its result token, and only then.
    let polled = client::poll(&http, &base, &campaign, &q).await.unwrap();
    let polled = (polled.status().as_u16(), polled.text().await.unwrap());
    assert_eq!(polled, (200, "writer +id".to_string()), "the request's id, not its result token");
    let stranger = client::Queued { result_token: "x".repeat(40), ..q };
    let refused = client::poll(&http, &base, &campaign, &stranger).await.unwrap();
    assert_ne!(refused.status().as_u16(), 200, "a result is told only to its token's holder");

    // Sold out: the local flag answers every later token request; a replenish message clears it.
    let bob = auth.login("bob", serde_json::json!({}));
    let t = client::get_ticket(&http, &base, &campaign, &bob, "dev-b").await.unwrap();
    let sold = t.order(&http, &base, 1).await;
    assert_eq!(sold.1["code"].as_str(), Some("SOLD_OUT"), "{sold:?}");
    let flagged = client::get_ticket(&http, &base, &campaign, &bob, "dev-b").await.unwrap_err();
    assert_eq!(flagged.1["code"].as_str(), Some("SOLD_OUT"), "the flag answers: {flagged:?}");
    let _: i64 = redis.incr(bucket.keys.stock.clone()).await.unwrap();
    let _: i64 = redis.publish(protocol::keys::REPLENISH_CHANNEL, campaign.as_str()).await.unwrap();
    let mut ticket = None;
    for _ in 0..50 {
        if let Ok(t) = client::get_ticket(&http, &base, &campaign, &bob, "dev-b").await {
            ticket = Some(t);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let t = ticket.expect("the replenish message cleared the flag (its TTL is 60 s)");
    let bought = t.order(&http, &base, 1).await;
    assert_eq!(bought.1["code"].as_str(), Some("QUEUED"), "{bought:?}");

    // SIGHUP reloads the campaigns: closed now.
    std::fs::write(&campaign_path, campaign_file(&campaign, true)).unwrap();
    assert!(Command::new("kill").args(["-HUP", &pid.to_string()]).status().unwrap().success());
    let mut closed = false;
    for _ in 0..50 {
        let info: serde_json::Value =
            http.get(format!("{base}/seckill/{campaign}/info")).send().await.unwrap().json().await.unwrap();
        if info["switches"]["closed"] == true {
            closed = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(closed, "the reload closed the campaign");

    // The sale's metrics, with the names the gateway's dashboards read.
    let metrics = http.get(format!("http://127.0.0.1:{metrics_port}/metrics")).send().await.unwrap();
    let metrics = metrics.text().await.unwrap();
    let reserve_steps = metrics
        .lines()
        .find_map(|l| l.strip_prefix("seckill_gateway_reserve_duration_seconds_count "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(reserve_steps >= Some(3), "two reserved, one sold out at least:\n{metrics}");
    assert!(metrics.contains(&format!("seckill_gateway_sold_out{{campaign=\"{campaign}\"}}")), "{metrics}");
    assert!(metrics.contains("seckill_gateway_redis_connected "), "{metrics}");

    let stock: i64 = redis.get(CampaignKeys::new(&campaign).stock).await.unwrap();
    assert_eq!(stock, 0, "two units reserved, by the two valid orders");
    // The campaign's keys (its nonces and spent challenges expire on their own).
    let _: i64 = redis.del(bucket.keys.all()).await.unwrap_or(0);
    let _ = std::fs::remove_dir_all(&dir);
}
