//! Upstream pools as Nginx's `upstream` blocks (issue 38, part 2), through the binary on
//! proxy-only files: weights, passive failure marking with the request tried again on another
//! address, least connections, consistent hashing by a header, names resolved, and the health
//! check's `Host`. Each upstream answers its own name, so an answer says where it went.

use std::collections::BTreeMap;
use std::time::Duration;

use wiremock::matchers::{any, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// An upstream answering `name` (after `delay`) to every request.
async fn named(name: &str, delay: Duration) -> MockServer {
    let up = MockServer::start().await;
    Mock::given(any())
        .respond_with(ResponseTemplate::new(200).set_body_string(name).set_delay(delay))
        .mount(&up)
        .await;
    up
}

/// A proxy-only gateway with one route to `upstreams` and `extra` route lines.
async fn gateway(upstreams: &[String], extra: &str) -> Gateway {
    let list: Vec<String> = upstreams.iter().map(|u| format!("{u:?}")).collect();
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n\n[[route]]\nname = \"pool\"\npath = \"/\"\nupstreams = [{}]\n{extra}\n",
        workers(),
        list.join(", ")
    );
    Gateway::start_text(&text).await
}

/// Who answered `n` requests (with `header` on each, when given): name → count; every answer 200.
async fn tally(gw: &Gateway, n: usize, header: Option<(&str, String)>) -> BTreeMap<String, usize> {
    let http = reqwest::Client::new();
    let mut out = BTreeMap::new();
    for _ in 0..n {
        let mut req = http.get(gw.url("/x"));
        if let Some((k, v)) = &header {
            req = req.header(*k, v);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 200);
        *out.entry(resp.text().await.unwrap()).or_insert(0) += 1;
    }
    out
}

#[tokio::test]
async fn weights_share_the_requests_as_nginx() {
    let (a, b) = (named("a", Duration::ZERO).await, named("b", Duration::ZERO).await);
    let gw = gateway(&[format!("{} weight=3", a.address()), b.address().to_string()], "").await;
    let got = tally(&gw, 40 * workers(), None).await;
    let (na, nb) = (got["a"], got["b"]);
    assert_eq!(na + nb, 40 * workers());
    assert!(na >= 2 * nb && na <= 4 * nb, "3:1 by weight, give or take the workers' turns: {got:?}");
}

#[tokio::test]
async fn a_refused_address_is_set_aside_and_its_request_tried_on_another() {
    let a = named("a", Duration::ZERO).await;
    let dead = format!("127.0.0.1:{}", fixtures::stack::free_port());
    // No active check within the test (60 s): only the passive marking sets it aside.
    let gw = gateway(
        &[format!("{dead} max_fails=1 fail_timeout=30s"), a.address().to_string()],
        "health_check_interval_ms = 60000",
    )
    .await;
    let got = tally(&gw, 20, None).await;
    assert_eq!(got, BTreeMap::from([("a".to_string(), 20)]), "no request fails: each is tried again on a");
}

/// An upstream that accepts, reads a request and closes unanswered (a broken answer: a failed
/// attempt), counting the connections it accepted.
async fn closer() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = tokio::time::timeout(Duration::from_secs(1), s.read(&mut buf)).await;
        }
    });
    (addr, accepted)
}

#[tokio::test]
async fn an_address_back_from_aside_is_set_aside_again_by_one_failure_as_nginx() {
    use std::sync::atomic::Ordering::SeqCst;
    let b = named("b", Duration::ZERO).await;
    let (a, accepted) = closer().await;
    let gw = gateway(
        &[format!("{a} max_fails=2 fail_timeout=1s"), b.address().to_string()],
        "health_check_interval_ms = 60000",
    )
    .await;
    let http = reqwest::Client::new();
    let send = |n: usize| {
        let (http, url) = (http.clone(), gw.url("/x"));
        async move {
            for _ in 0..n {
                let _ = http.get(&url).send().await.unwrap().status();
            }
        }
    };
    // The start's health check and probe (which may have failed on a) behind us, past
    // fail_timeout.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let at_start = accepted.load(SeqCst);
    // Two failures within fail_timeout set it aside: then every request goes to b.
    for _ in 0..20 {
        if accepted.load(SeqCst) >= at_start + 2 {
            break;
        }
        send(1).await;
    }
    assert_eq!(accepted.load(SeqCst), at_start + 2, "max_fails=2");
    send(6).await;
    assert_eq!(accepted.load(SeqCst), at_start + 2, "aside for fail_timeout");
    // Back after fail_timeout, but its count kept until an answer succeeds (Nginx's `fails`):
    // its first failure sets it aside again at once, not after two more.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    send(8).await;
    assert_eq!(accepted.load(SeqCst), at_start + 3, "one try, then aside again");
}

#[tokio::test]
async fn least_conn_sends_to_the_address_with_fewest_in_flight() {
    let slow = named("slow", Duration::from_millis(1500)).await;
    let fast = named("fast", Duration::ZERO).await;
    let gw =
        gateway(&[slow.address().to_string(), fast.address().to_string()], "balance = \"least_conn\"").await;
    // Hold the slow one with one request per worker's pool (a request in flight each), then
    // every other request goes to the fast one.
    let http = reqwest::Client::new();
    let mut held = Vec::new();
    for _ in 0..(2 * workers()) {
        held.push(tokio::spawn(http.get(gw.url("/hold")).send()));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = tally(&gw, 10, None).await;
    assert_eq!(got.get("fast"), Some(&10), "{got:?}");
    for h in held {
        assert_eq!(h.await.unwrap().unwrap().status(), 200);
    }
}

#[tokio::test]
async fn hash_by_a_header_keeps_a_user_on_one_address() {
    let ups = [
        named("a", Duration::ZERO).await,
        named("b", Duration::ZERO).await,
        named("c", Duration::ZERO).await,
    ];
    let list: Vec<String> = ups.iter().map(|u| u.address().to_string()).collect();
    let gw = gateway(&list, "balance = \"hash $http_x_user\"").await;
    let mut homes = std::collections::BTreeSet::new();
    for user in 0..12 {
        let got = tally(&gw, 5, Some(("x-user", format!("user-{user}")))).await;
        assert_eq!(got.len(), 1, "user-{user} always on one address: {got:?}");
        homes.extend(got.into_keys());
    }
    assert!(homes.len() >= 2, "12 users spread over the addresses: {homes:?}");
}

#[tokio::test]
async fn a_name_is_resolved_and_the_health_check_says_its_host() {
    let up = MockServer::start().await;
    Mock::given(path("/healthz")).respond_with(ResponseTemplate::new(200)).mount(&up).await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200).set_body_string("up")).mount(&up).await;
    let name = format!("localhost:{}", up.address().port());
    let gw = gateway(
        &[name],
        "health_check_path = \"/healthz\"\nhealth_check_host = \"shop.internal\"\nhealth_check_interval_ms = 200",
    )
    .await;
    assert_eq!(tally(&gw, 5, None).await, BTreeMap::from([("up".to_string(), 5)]));
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let seen = up.received_requests().await.unwrap_or_default();
        let checks: Vec<_> = seen.iter().filter(|r| r.url.path() == "/healthz").collect();
        if let Some(c) = checks.first() {
            assert_eq!(c.headers.get("host").map(|h| h.to_str().unwrap()), Some("shop.internal"));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no health check in 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn bad_upstream_lines_are_refused_at_load_with_their_place() {
    for (line, words) in [
        ("\"127.0.0.1:1 backup\"", "weight=N"),
        ("\"no_such:1\"", "neither"),
        ("\"shop.internal\"", "HOST:PORT"),
        ("\"127.0.0.1:1 weight=0x\"", "0 to 1000"),
    ] {
        let text = format!("[server]\nlisten = \"127.0.0.1:1\"\n[[route]]\nname = \"r\"\npath = \"/\"\nupstreams = [{line}]\n");
        let (ok, err) = crate::proxy_only::check(&text);
        assert!(
            !ok && err.contains(":6:") && err.contains("route[0].upstreams") && err.contains(words),
            "{err}"
        );
    }
    let text = "[server]\nlisten = \"127.0.0.1:1\"\n[[route]]\nname = \"r\"\npath = \"/\"\nupstreams = [\"127.0.0.1:1\"]\nbalance = \"random\"\n";
    let (ok, err) = crate::proxy_only::check(text);
    assert!(!ok && err.contains(":7:") && err.contains("route[0].balance"), "{err}");
}
