//! Bad conf is refused with file, line and field; a reload with bad conf keeps the old one.

use std::process::Command;
use std::time::Duration;

use crate::support::*;

/// Runs `gateway --check` on a conf folder; returns (success, stderr).
fn check(conf: &GatewayConf) -> (bool, String) {
    let dir = std::env::temp_dir().join(fixtures::stack::unique("gw-check-"));
    let file = write_conf(&dir, conf, 1);
    let out = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .arg("--conf")
        .arg(&file)
        .arg("--lua-dir")
        .arg(protocol::scripts::default_dir())
        .arg("--check")
        .output()
        .unwrap();
    remove_unless_failed(&dir);
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn the_sales_trusted_proxies_are_refused_as_the_server_decides_every_client() {
    let dir = std::env::temp_dir().join(fixtures::stack::unique("gw-check-"));
    let good = GatewayConf::new("redis://127.0.0.1:6390", "127.0.0.1:8081", "c1", "");
    let file = write_conf(&dir, &good, 1);
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("[sale]\n", "[sale]\ntrusted_proxies = [\"10.0.0.0/8\"]\n")).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_gateway")).arg("--conf").arg(&file).arg("--check").output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "refused: {stderr}");
    assert!(
        stderr.contains("sale.trusted_proxies") && stderr.contains("[server] trusted_proxies"),
        "{stderr}"
    );
    remove_unless_failed(&dir);
}

#[test]
fn bad_conf_is_refused_with_file_line_and_field() {
    let good = GatewayConf::new("redis://127.0.0.1:6390", "127.0.0.1:8081", "c1", "");
    assert!(check(&good).0, "{}", check(&good).1);

    let with_campaign = |text: String| {
        let mut c = GatewayConf::new("redis://127.0.0.1:6390", "127.0.0.1:8081", "c1", "");
        c.campaigns = vec![("c1".into(), text)];
        c
    };
    let base = campaign_toml("c1", "");
    let cases = [
        (with_campaign(base.replace("sku = ", "skew = ")), "c1.toml:2:", "field `skew`", "unknown field"),
        (
            with_campaign(base.replace("stock = 100", "stock = -1")),
            "c1.toml:3:",
            "field `stock`",
            "between 0 and",
        ),
        (
            with_campaign(window_toml("c1", "-1h", "").replace("ends_at = \"", "ends_at = \"1999")),
            "c1.toml:7:",
            "field `ends_at`",
            "",
        ),
        (
            GatewayConf::new("redis://127.0.0.1:6390", "not-an-address", "c1", ""),
            "server.toml:14:",
            "field `order_writer.upstreams`",
            "HOST:PORT",
        ),
    ];
    for (conf, place, field, words) in cases {
        let (ok, stderr) = check(&conf);
        assert!(!ok, "refused: {stderr}");
        assert!(
            stderr.contains(place) && stderr.contains(field) && stderr.contains(words),
            "{place} {field}: {stderr}"
        );
        assert!(!stderr.contains("panicked") && !stderr.contains("backtrace"), "{stderr}");
    }

    // End before start: a valid time, in the wrong order.
    let swapped = {
        let now = chrono::Utc::now();
        format!(
            "id = \"c1\"\nsku = \"S\"\nstock = 1\nper_user_limit = 1\nprice_cents = 1\nstarts_at = \"{}\"\nends_at = \"{}\"\n",
            now.to_rfc3339(),
            (now - chrono::Duration::hours(1)).to_rfc3339()
        )
    };
    let (ok, stderr) = check(&with_campaign(swapped));
    assert!(
        !ok && stderr.contains("c1.toml:7:")
            && stderr.contains("`ends_at`")
            && stderr.contains("after starts_at"),
        "{stderr}"
    );
}

#[tokio::test]
async fn sighup_reloads_and_a_bad_reload_keeps_the_old_conf() {
    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("gw");
    publish(&redis, &campaign, 100, 1).await;
    let upstream = wiremock::MockServer::start().await;
    let gw = Gateway::on_stack(&upstream, &campaign, "").await;
    let http = reqwest::Client::new();
    assert_eq!(order(&http, &gw, &campaign, "r-1").await.0, 202);

    // A broken file (closed, but with a typo) is refused: the old conf keeps selling.
    gw.write_campaign(&campaign, &campaign_toml(&campaign, "[switches]\nclosed = true\nqueue_onyl = true"));
    gw.hup();
    let refused = eventually(Duration::from_secs(5), || async { gw.log().contains("reload refused") }).await;
    assert!(refused, "{}", gw.log());
    assert!(
        gw.log().contains(&format!("{campaign}.toml:")) && gw.log().contains("queue_onyl"),
        "{}",
        gw.log()
    );
    assert_eq!(order(&http, &gw, &campaign, "r-2").await.0, 202, "the old conf stays");

    // A good file takes effect: closed, then queue-only.
    gw.write_campaign(&campaign, &campaign_toml(&campaign, "[switches]\nclosed = true"));
    gw.hup();
    // Probe with /info, not with orders: an order probed before the reload lands would reserve.
    let closed = eventually(Duration::from_secs(5), || async {
        let info = http.get(gw.url(&format!("/seckill/{campaign}/info"))).send().await.unwrap();
        info.json::<serde_json::Value>().await.unwrap()["switches"]["closed"] == true
    })
    .await;
    assert!(closed, "{}", gw.log());
    let (status, _) = order(&http, &gw, &campaign, "r-3").await;
    assert_eq!(status, 503);

    gw.write_campaign(&campaign, &campaign_toml(&campaign, "[switches]\nqueue_only = true"));
    gw.hup();
    let queued_only = eventually(Duration::from_secs(5), || async {
        let resp = http.post(gw.url(&format!("/seckill/{campaign}/token"))).send().await.unwrap();
        resp.status() == 429 && resp.headers().get("retry-after").is_some()
    })
    .await;
    assert!(queued_only, "{}", gw.log());
    let stock: i64 =
        fred::prelude::KeysInterface::get(&redis, protocol::keys::CampaignKeys::new(&campaign).stock)
            .await
            .unwrap();
    assert_eq!(stock, 98, "only r-1 and r-2 were reserved");
}
