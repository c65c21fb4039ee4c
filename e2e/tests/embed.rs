//! The embedding example (`plugins/examples/embed.rs`): a platform team's own Pingora proxy with
//! the sale in its `request_filter` sells through the whole client protocol on the stack's
//! Redis, refuses a forged signature and a second order, and proxies the rest of the shop.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::client::{self, Auth};
use e2e::stack;
use fred::prelude::KeysInterface;
use protocol::keys::CampaignKeys;
use protocol::scripts::{self, PublishSpec, Scripts};

/// The example's binary, built here if `cargo test` has not built it yet.
fn example() -> std::path::PathBuf {
    let root = stack::workspace_root();
    let target = std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), Into::into);
    let bin = target.join("debug").join("examples").join("embed");
    if !bin.exists() {
        let built = Command::new(env!("CARGO"))
            .args(["build", "-q", "-p", "plugins", "--example", "embed"])
            .current_dir(&root)
            .status()
            .expect("cargo runs");
        assert!(built.success(), "the example builds");
    }
    bin
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A one-answer HTTP upstream on loopback: every request gets `200 shop`.
fn shop_upstream() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(16) {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 4096];
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\nconnection: close\r\n\r\nshop");
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

#[tokio::test]
async fn a_proxy_of_its_own_sells_through_the_edge_api() {
    let campaign = stack::unique("embed");
    let redis = stack::redis_client(&stack::redis_url()).await.expect(stack::STACK_HINT);
    let spec = PublishSpec {
        stock_version: 1,
        total: 5,
        limit: 1,
        sku: "SKU".into(),
        price_cents: 100,
        price_version: 1,
    };
    Scripts::load(&scripts::default_dir())
        .unwrap()
        .publish(&redis, &protocol::keys::Bucket::single(&campaign), &spec)
        .await
        .unwrap();

    let dir = std::env::temp_dir().join(format!("embed-{campaign}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(format!("{campaign}.toml"));
    let now = chrono::Utc::now();
    std::fs::write(
        &file,
        format!(
            "id = \"{campaign}\"\nsku = \"SKU\"\nstock = 5\nper_user_limit = 1\nprice_cents = 100\n\
             starts_at = \"{}\"\nends_at = \"{}\"\n[defense]\npow_bits = 4\n",
            (now - chrono::Duration::hours(1)).to_rfc3339(),
            (now + chrono::Duration::hours(1)).to_rfc3339()
        ),
    )
    .unwrap();
    let (login_key, port) = ("embed-login-key-0123456789abcdef", free_port());
    let child = Command::new(example())
        .args([&format!("127.0.0.1:{port}"), &shop_upstream(), file.to_str().unwrap()])
        .env("SECKILL_REDIS_URL", stack::redis_url())
        .env("SECKILL_KAFKA_BROKER", format!("127.0.0.1:{}", free_port())) // no broker: the outbox keeps the records
        .env("SECKILL_EDGE_KEY", "embed-master-key-0123456789abcdef")
        .env("SECKILL_LOGIN_KEY", login_key)
        .env("SECKILL_GATEWAY_KEY", "embed-gateway-key-0123456789abcdef")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("the example starts");
    let _proxy = Killed(child);
    let base = format!("http://127.0.0.1:{port}");
    let http = reqwest::Client::new();
    let started = Instant::now();
    while http.get(format!("{base}/")).send().await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(20), "the example did not listen");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The rest of the shop is proxied.
    let shop = http.get(format!("{base}/cart")).send().await.unwrap();
    assert_eq!((shop.status().as_u16(), shop.text().await.unwrap()), (200, "shop".to_string()));

    // The whole protocol: login JWT, captcha, token, signed order.
    let auth = Auth::hs256(login_key.as_bytes()).unwrap();
    let login = auth.login("alice", serde_json::json!({}));
    let t = client::get_ticket(&http, &base, &campaign, &login, "dev-alice").await.unwrap();
    let mut forged = t.sign(1, now.timestamp(), &client::nonce());
    forged.signature = "0".repeat(64);
    let refused = t.send(&http, &base, &forged).await;
    assert_eq!((refused.0, refused.1["code"].as_str()), (401, Some("BAD_SIGNATURE")));
    let queued = t.order(&http, &base, 1).await;
    assert_eq!((queued.0, queued.1["code"].as_str()), (202, Some("QUEUED")), "{queued:?}");
    assert!(client::Queued::of(&queued.1).is_some(), "QUEUED carries its result token: {queued:?}");
    let again = t.order(&http, &base, 1).await;
    assert_eq!((again.0, again.1["code"].as_str()), (409, Some("LIMIT_REACHED")), "{again:?}");

    let stock: i64 = redis.get(CampaignKeys::new(&campaign).stock).await.unwrap();
    assert_eq!(stock, 4, "one unit reserved, by the one valid order");
    let _ = std::fs::remove_dir_all(&dir);
}
