//! The gateway without the sale: a server file with only `[server]`, `[[route]]`s and an
//! `[admin]` listener runs as a reverse proxy with no Redis, Kafka, PostgreSQL or secret named
//! anywhere (the child gets none of the stack's addresses either), routes `/seckill/` like any
//! other path, is ready without Redis, says its mode in `--check`, and refuses a file that turns
//! the sale half on, or a reload that would change the mode.

use std::process::Command;
use std::time::Duration;

use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// `[server]` on `{port}`, one route to `shop` for every path, and the admin listener on `admin`.
fn proxy_only(shop: &MockServer, admin: u16) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n\n\
         [[route]]\nname = \"shop\"\npath_prefix = \"/\"\nupstreams = [\"{}\"]\n\n\
         [admin]\nlisten = \"127.0.0.1:{admin}\"\n",
        workers(),
        shop.address()
    )
}

/// Runs `gateway --check` on `text` written to a file of its own; returns (success, stdout and
/// stderr).
pub(crate) fn check(text: &str) -> (bool, String) {
    let dir = temp_dir("gw-check-");
    let file = dir.join("server.toml");
    std::fs::write(&file, text.replace("{port}", "8080")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gateway"))
        .env_remove("SECKILL_REDIS_URL")
        .arg("--conf")
        .arg(&file)
        .arg("--check")
        .output()
        .unwrap();
    remove_unless_failed(&dir);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

#[tokio::test]
async fn only_server_and_routes_run_a_proxy_with_no_stack() {
    let shop = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/a"))
        .respond_with(ResponseTemplate::new(200).set_body_string("page a"))
        .mount(&shop)
        .await;
    Mock::given(method("POST"))
        .and(path("/seckill/c1/order"))
        .respond_with(ResponseTemplate::new(201).set_body_string("the shop's own"))
        .mount(&shop)
        .await;
    let admin = free_port();
    let text = proxy_only(&shop, admin);

    let (ok, said) = check(&text);
    assert!(ok, "{said}");
    assert!(said.contains("a proxy only: no sale"), "--check says the mode: {said}");

    let gw = Gateway::start_text(&text).await;
    let http = reqwest::Client::new();
    let page = http.get(gw.url("/a")).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.text().await.unwrap(), "page a");
    // No sale path exists: an order URL is the shop's like any other.
    let order = http.post(gw.url("/seckill/c1/order")).body("{}").send().await.unwrap();
    assert_eq!((order.status().as_u16(), order.text().await.unwrap().as_str()), (201, "the shop's own"));
    let seen = shop.received_requests().await.unwrap();
    assert!(seen.iter().any(|r| r.url.path() == "/seckill/c1/order"), "proxied to the shop");

    // Ready without any Redis; the metrics have the proxy's families and none of the sale's.
    let ready = http.get(format!("http://127.0.0.1:{admin}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 200, "{}", gw.log());
    let metrics =
        http.get(format!("http://127.0.0.1:{admin}/metrics")).send().await.unwrap().text().await.unwrap();
    assert!(metrics.contains("seckill_gateway_responses_total"), "{metrics}");
    assert!(!metrics.contains("seckill_gateway_kafka_queue_depth"), "no sale families: {metrics}");
    let log = gw.log();
    assert!(!log.contains("redis") && !log.contains("kafka"), "nothing of the sale started: {log}");
}

#[tokio::test]
async fn a_half_sale_file_and_a_reload_into_the_sale_are_refused() {
    let shop = MockServer::start().await;
    Mock::given(method("GET")).respond_with(ResponseTemplate::new(200)).mount(&shop).await;
    let text = proxy_only(&shop, free_port());

    // [redis] alone turns the sale on, which needs [order_writer]: file:line:column: field.
    let half = format!("{text}\n[redis]\nurl = \"redis://127.0.0.1:6390\"\n");
    let (ok, said) = check(&half);
    assert!(!ok, "{said}");
    let line = text.lines().count() + 2;
    assert!(said.contains(&format!("server.toml:{line}:")), "file:line: {said}");
    assert!(said.contains("order_writer") && said.contains("needs [order_writer]"), "{said}");
    // [order_writer] without the sale's sections: the sale's own check names them.
    let writer_only = format!("{text}\n[order_writer]\nupstreams = [\"127.0.0.1:8081\"]\n");
    let (ok, said) = check(&writer_only);
    assert!(!ok && said.contains("sale"), "{said}");

    // A running proxy is not switched into the sale by a reload, even with a whole and valid
    // sale conf: refused, and it keeps proxying.
    let gw = Gateway::start_text(&text).await;
    let sale =
        GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &fixtures::stack::unique("po"), "");
    write_conf(&gw.dir, &sale, gw.port);
    gw.hup();
    let refused = eventually(Duration::from_secs(5), || {
        let log = gw.log();
        async move { log.contains("takes a restart") }
    })
    .await;
    assert!(refused, "the reload is refused: {}", gw.log());
    let page = reqwest::get(gw.url("/b")).await.unwrap();
    assert_eq!(page.status(), 200);
}
