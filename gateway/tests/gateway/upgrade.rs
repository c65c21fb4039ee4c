//! Graceful shutdown and the zero-downtime upgrade: SIGTERM lets an in-flight request finish
//! and the process exit within its bound; a new binary started with `--upgrade` takes the
//! listening socket from the old one on SIGQUIT while a load loop runs, and not one request
//! fails or is refused; `[shutdown] linger_secs` keeps a gateway serving, not ready, after
//! SIGTERM.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A shop upstream answering after `delay`.
async fn slow_shop(delay: Duration) -> MockServer {
    let shop = MockServer::start().await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_string("ok").set_delay(delay))
        .mount(&shop)
        .await;
    shop
}

fn conf(shop: &MockServer, shutdown: &str) -> GatewayConf {
    let campaign = fixtures::stack::unique("up");
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    conf.routes = format!(
        "[[route]]\nname = \"shop\"\npath_prefix = \"/shop/\"\nupstreams = [\"{}\"]\nread_timeout_ms = 5000\n\n\
         [shutdown]\n{shutdown}\n",
        shop.address()
    );
    conf
}

fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill").args([sig, &pid.to_string()]).status().unwrap().success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test]
async fn sigterm_finishes_the_request_in_flight_then_exits_within_its_bound() {
    let shop = slow_shop(Duration::from_millis(1500)).await;
    let mut gw = Gateway::start(&conf(&shop, "drain_secs = 3")).await;
    let url = gw.url("/shop/slow");
    let in_flight = tokio::spawn(async move { reqwest::get(url).await.map(|r| r.status().as_u16()) });
    let arrived = eventually(Duration::from_secs(5), || async {
        !shop.received_requests().await.unwrap_or_default().is_empty()
    });
    assert!(arrived.await, "the request reached the shop");
    let sent = Instant::now();
    signal(gw.pid(), "-TERM");
    let answer = in_flight.await.unwrap();
    assert_eq!(answer.as_ref().ok(), Some(&200), "{answer:?}; the log:\n{}", gw.log());
    let exited = eventually(Duration::from_secs(15), || {
        let done = gw.exited().is_some();
        async move { done }
    });
    assert!(exited.await, "the gateway exits after draining; its log:\n{}", gw.log());
    assert!(sent.elapsed() < Duration::from_secs(10), "within the drain bound: {:?}", sent.elapsed());
    let refused = reqwest::get(gw.url("/shop/after")).await;
    assert!(refused.is_err(), "nothing listens after the exit");
}

/// A keep-alive connection idle between two requests is closed as soon as SIGTERM comes (the
/// front door waits on the shutdown signal between requests, one wait for the connection's
/// life), not left open to the end of the drain.
#[tokio::test]
async fn sigterm_closes_a_connection_idle_between_requests_at_once() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let shop = slow_shop(Duration::ZERO).await;
    let gw = Gateway::start(&conf(&shop, "drain_secs = 30")).await;
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", gw.port)).await.unwrap();
    let (mut buf, mut got) = ([0u8; 4096], Vec::new());
    for n in 1..=2 {
        // Two requests on the connection: the second wait for a head is one between requests.
        conn.write_all(b"GET /shop/a HTTP/1.1\r\nHost: shop\r\n\r\n").await.unwrap();
        while got.windows(2).filter(|w| w == b"ok").count() < n {
            let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await;
            let read = read.expect("an answer within 5 s").unwrap();
            assert!(read > 0, "closed before answer {n}: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&buf[..read]);
        }
    }
    let sent = Instant::now();
    signal(gw.pid(), "-TERM");
    let closed = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "closed after SIGTERM: {closed:?}; log:\n{}", gw.log());
    assert!(sent.elapsed() < Duration::from_secs(5), "at once, not at the drain's end: {:?}", sent.elapsed());
}

/// `[shutdown] linger_secs`: after SIGTERM the gateway still accepts and serves new connections
/// for the linger, each answer closing its connection and `/readyz` answering 503 `draining`
/// (a balancer's cue to stop sending); then it closes its listeners and exits within
/// linger + drain.
#[tokio::test]
async fn sigterm_lingers_serving_and_not_ready_then_drains() {
    let shop = slow_shop(Duration::from_millis(0)).await;
    let admin = free_port();
    let mut conf = conf(&shop, "drain_secs = 1\nlinger_secs = 5");
    conf.tables = format!("[admin]\nlisten = \"127.0.0.1:{admin}\"\n");
    let mut gw = Gateway::start(&conf).await;
    let http = reqwest::Client::new();
    let ready = |http: &reqwest::Client| {
        let req = http.get(format!("http://127.0.0.1:{admin}/readyz")).send();
        async move {
            let r = req.await.expect("the admin listener answers");
            (r.status().as_u16(), r.json::<serde_json::Value>().await.unwrap()["status"].clone())
        }
    };
    assert_eq!(ready(&http).await.0, 200, "ready before SIGTERM");
    let before = http.get(gw.url("/shop/before")).send().await.unwrap();
    assert_eq!(before.headers()["connection"], "keep-alive");

    let sent = Instant::now();
    signal(gw.pid(), "-TERM");
    let draining = eventually(Duration::from_secs(2), || {
        let http = http.clone();
        async move { ready(&http).await.0 == 503 }
    });
    assert!(draining.await, "readyz fails within 2 s of SIGTERM; the log:\n{}", gw.log());
    assert_eq!(ready(&http).await.1, "draining");
    // Still serving, on new connections, each answer closing its own.
    for i in 0..3 {
        let fresh = reqwest::Client::new();
        let r = fresh.get(gw.url(&format!("/shop/lingering-{i}"))).send().await;
        let r = r
            .unwrap_or_else(|e| panic!("served {:?} after SIGTERM: {e}; log:\n{}", sent.elapsed(), gw.log()));
        assert_eq!((r.status().as_u16(), r.headers()["connection"].to_str().unwrap()), (200, "close"));
    }
    assert!(sent.elapsed() < Duration::from_secs(5), "the requests above ran within the linger");
    let exited = eventually(Duration::from_secs(15), || {
        let done = gw.exited().is_some();
        async move { done }
    });
    assert!(exited.await, "the gateway exits after linger and drain; its log:\n{}", gw.log());
    let took = sent.elapsed();
    assert!(took >= Duration::from_secs(5), "not before the linger: {took:?}");
    assert!(reqwest::get(gw.url("/shop/after")).await.is_err(), "nothing listens after the exit");
}

/// Starts a second gateway with `--upgrade` on `gw`'s conf; it waits for the sockets.
fn start_upgrade(gw: &Gateway) -> Child {
    let log = std::fs::File::create(gw.dir.join("gateway-new.log")).unwrap();
    Command::new(env!("CARGO_BIN_EXE_gateway"))
        .arg("--conf")
        .arg(gw.dir.join("server.toml"))
        .arg("--lua-dir")
        .arg(protocol::scripts::default_dir())
        .arg("--upgrade")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .stdin(Stdio::null())
        .spawn()
        .unwrap()
}

#[tokio::test]
async fn the_new_binary_takes_the_sockets_under_load_and_no_request_fails() {
    let shop = slow_shop(Duration::from_millis(20)).await;
    let sock = std::env::temp_dir().join(format!("{}.sock", fixtures::stack::unique("gw-up-")));
    let shutdown = format!("drain_secs = 1\nupgrade_sock = \"{}\"", sock.display());
    let mut old = Gateway::start(&conf(&shop, &shutdown)).await;

    // The load: 4 clients, a new connection per request, bounded in count and time.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let errors = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut clients = Vec::new();
    for _ in 0..4 {
        let (stop, ok, failed, errors, url) =
            (stop.clone(), ok.clone(), failed.clone(), errors.clone(), old.url("/shop/load"));
        clients.push(tokio::spawn(async move {
            let http = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
            let started = Instant::now();
            for _ in 0..5000 {
                if stop.load(Ordering::Relaxed) || started.elapsed() > Duration::from_secs(40) {
                    break;
                }
                match http.get(&url).send().await {
                    Ok(r) if r.status() == 200 => ok.fetch_add(1, Ordering::Relaxed),
                    Ok(r) => {
                        errors.lock().unwrap().push(format!("status {}", r.status()));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(e) => {
                        errors.lock().unwrap().push(format!("{e:?}"));
                        failed.fetch_add(1, Ordering::Relaxed)
                    }
                };
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = ok.load(Ordering::Relaxed);
    assert!(before > 0, "the load runs against the old process");

    // The new binary waits on the upgrade socket; SIGQUIT makes the old one hand it over.
    let mut new = start_upgrade(&old);
    let waiting = eventually(Duration::from_secs(20), || {
        let there = sock.exists();
        async move { there }
    });
    assert!(waiting.await, "the new process listens on the upgrade socket");
    signal(old.pid(), "-QUIT");
    let exited = eventually(Duration::from_secs(30), || {
        let done = old.exited().is_some();
        async move { done }
    });
    assert!(exited.await, "the old process drains and exits; its log:\n{}", old.log());
    let at_handover = ok.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await.unwrap();
    }
    let new_log = std::fs::read_to_string(old.dir.join("gateway-new.log")).unwrap_or_default();
    let alive = new.try_wait().unwrap().is_none();
    let _ = new.kill();
    let _ = new.wait();
    let _ = std::fs::remove_file(&sock);
    assert!(alive, "the new process serves; its log:\n{new_log}");
    assert_eq!(failed.load(Ordering::Relaxed), 0, "failed requests: {:?}", errors.lock().unwrap());
    assert!(ok.load(Ordering::Relaxed) > at_handover, "the new process answered after the old one left");
}
