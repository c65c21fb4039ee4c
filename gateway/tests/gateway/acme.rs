//! Certificates by ACME against Pebble (`pebble.rs`), the gateway a proxy only (no Redis,
//! Kafka or PostgreSQL): issued at start with HTTP-01 answered on the gateway's plain listener,
//! kept in the store and served from it after a restart; renewed at two thirds of a short
//! lifetime (HTTP-01 on the redirecting listener) while a client's connection stays open and
//! keeps working; a failing challenge
//! retried with a doubling wait, counted and logged while the stored certificate keeps serving;
//! two gateways on one store ordering once; bad `[[tls.acme]]` entries refused by `--check`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::pebble::{Pebble, PebbleConf};
use crate::support::*;

const HOST: &str = "shop.test";

/// What a served certificate is, as a client sees it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    serial: String,
    not_after: i64,
}

fn seen(der: &[u8]) -> Seen {
    let (_, cert) = x509_parser::parse_x509_certificate(der).expect("an X.509 certificate");
    Seen { serial: cert.raw_serial_as_string(), not_after: cert.validity().not_after.timestamp() }
}

/// A gateway's ports and the folder of its store and account key (shared by two gateways in
/// one test).
struct Setup {
    shop: MockServer,
    port: u16,
    /// `tls.redirect_listen`, the other plain listener that answers HTTP-01.
    redirect: u16,
    tls: u16,
    admin: u16,
    dir: PathBuf,
}

impl Setup {
    async fn new(dir: Option<&PathBuf>) -> Self {
        let shop = MockServer::start().await;
        Mock::given(any())
            .respond_with(ResponseTemplate::new(200).set_body_string("page"))
            .mount(&shop)
            .await;
        let dir = match dir {
            Some(d) => d.clone(),
            None => {
                let d = temp_dir("gw-acme-");
                let key = KeyPair::generate().unwrap(); // ECDSA P-256, PKCS#8 PEM
                std::fs::write(d.join("account.key"), key.serialize_pem()).unwrap();
                d
            }
        };
        Self { shop, port: free_port(), redirect: free_port(), tls: free_port(), admin: free_port(), dir }
    }

    /// The server file: a proxy to the shop, the admin listener, TLS by ACME from `pebble`.
    fn conf(&self, pebble: &Pebble) -> String {
        format!(
            "[server]\nlisten = \"127.0.0.1:{}\"\nworkers = {}\n\n\
             [[route]]\nname = \"shop\"\npath_prefix = \"/\"\nupstreams = [\"{}\"]\n\n\
             [admin]\nlisten = \"127.0.0.1:{}\"\n\n\
             [tls]\nlisten = \"127.0.0.1:{}\"\nredirect_listen = \"127.0.0.1:{}\"\n\n\
             [[tls.acme]]\nhosts = [\"{HOST}\", \"www.{HOST}\"]\ncontact = [\"mailto:ops@{HOST}\"]\n\
             directory = \"{}\"\ndirectory_ca_file = \"{}\"\naccount_key = \"file:{}\"\n\
             store = \"{}\"\nretry_min_secs = 1\nretry_max_secs = 4\n",
            self.port,
            workers(),
            self.shop.address(),
            self.admin,
            self.tls,
            self.redirect,
            pebble.directory(),
            pebble.ca_file().display(),
            self.dir.join("account.key").display(),
            self.dir.join("store").display(),
        )
    }

    async fn start(&self, pebble: &Pebble) -> Gateway {
        Gateway::start_text_at(&self.conf(pebble), self.port).await
    }

    /// A client trusting only `root`, sending `HOST` to this gateway's TLS port.
    fn https(&self, root: &str) -> reqwest::Client {
        reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(root.as_bytes()).unwrap())
            .tls_info(true)
            .resolve(HOST, SocketAddr::from(([127, 0, 0, 1], self.tls)))
            .resolve(&format!("www.{HOST}"), SocketAddr::from(([127, 0, 0, 1], self.tls)))
            .build()
            .unwrap()
    }

    /// The certificate of a request over `client` (200 asserted), `None` when it fails.
    async fn get(&self, client: &reqwest::Client) -> Option<Seen> {
        let resp = client.get(format!("https://{HOST}:{}/", self.tls)).send().await.ok()?;
        let info = resp.extensions().get::<reqwest::tls::TlsInfo>().cloned();
        assert_eq!(resp.status(), 200);
        Some(seen(info?.peer_certificate()?))
    }

    /// Waits (at most `limit`) until a new connection is served a certificate chaining to
    /// `root` that `ok` accepts.
    async fn served(&self, root: &str, limit: Duration, ok: impl Fn(&Seen) -> bool) -> Option<Seen> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(s) = self.get(&self.https(root)).await.filter(|s| ok(s)) {
                return Some(s);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        None
    }

    async fn metric(&self, name: &str) -> f64 {
        let samples =
            scrape(&reqwest::Client::new(), &format!("http://127.0.0.1:{}/metrics", self.admin)).await;
        sample(&samples, name, &[("cert", HOST)])
    }
}

#[tokio::test]
async fn a_certificate_is_issued_at_start_stored_and_served_from_the_store_after_a_restart() {
    let g = Setup::new(None).await;
    let pebble = Pebble::start(&PebbleConf { http_port: g.port, validity_secs: 3600 }).await;
    let started = Instant::now();
    let gw = g.start(&pebble).await;
    let root = pebble.root_pem().await;
    let first = g.served(&root, Duration::from_secs(60), |_| true).await;
    let first =
        first.unwrap_or_else(|| panic!("no certificate; gateway:\n{}\npebble:\n{}", gw.log(), pebble.log()));
    println!("ACME: a Pebble certificate served {:?} after the gateway's start", started.elapsed());
    assert!(first.not_after > chrono::Utc::now().timestamp() + 3000, "{first:?}");
    let www = g.https(&root).get(format!("https://www.{HOST}:{}/", g.tls)).send().await.unwrap();
    let www_cert =
        www.extensions().get::<reqwest::tls::TlsInfo>().and_then(|i| i.peer_certificate().map(seen));
    assert_eq!(www_cert.as_ref(), Some(&first), "the second name is served the same certificate");

    let stored = g.dir.join("store").join(HOST);
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(stored.join("key.pem")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key is the owner's only");
    assert!(stored.join("cert.pem").exists());
    assert_eq!(g.metric("seckill_gateway_acme_issued_total").await, 1.0);
    assert_eq!(g.metric("seckill_gateway_acme_failures_total").await, 0.0);
    assert_eq!(g.metric("seckill_gateway_acme_cert_not_after_seconds").await, first.not_after as f64);

    // Restarted on the same store: the stored certificate, no new order.
    drop(gw);
    let gw = g.start(&pebble).await;
    let again = g.served(&root, Duration::from_secs(20), |_| true).await;
    assert_eq!(again.as_ref(), Some(&first), "{}", gw.log());
    assert_eq!(g.metric("seckill_gateway_acme_attempts_total").await, 0.0, "{}", gw.log());
    assert!(gw.log().contains("serving the stored certificate"), "{}", gw.log());
    remove_unless_failed(&g.dir);
}

#[tokio::test]
async fn a_renewal_at_two_thirds_reaches_new_handshakes_while_an_open_connection_keeps_working() {
    let g = Setup::new(None).await;
    // 30 s certificates: renewed 20 s after their start. HTTP-01 on the redirecting listener.
    let pebble = Pebble::start(&PebbleConf { http_port: g.redirect, validity_secs: 30 }).await;
    let mut gw = g.start(&pebble).await;
    let root = pebble.root_pem().await;
    let first = g.served(&root, Duration::from_secs(60), |_| true).await.expect("issued");
    // One client, one connection (HTTP/2), opened on the first certificate and kept.
    let kept = g.https(&root);
    assert_eq!(g.get(&kept).await.as_ref(), Some(&first));

    let (start, mut renewed) = (Instant::now(), None);
    while start.elapsed() < Duration::from_secs(60) && renewed.is_none() {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let on_kept = g.get(&kept).await;
        assert_eq!(on_kept.as_ref(), Some(&first), "the open connection answers, on its certificate");
        renewed = g.get(&g.https(&root)).await.filter(|s| *s != first);
    }
    let renewed = renewed.unwrap_or_else(|| panic!("not renewed; gateway:\n{}", gw.log()));
    println!("ACME: renewed after {:?}: {first:?} -> {renewed:?}", start.elapsed());
    assert_ne!(renewed.serial, first.serial);
    assert!(renewed.not_after > first.not_after, "{first:?} -> {renewed:?}");
    assert_eq!(g.get(&kept).await.as_ref(), Some(&first), "the connection opened before still works");
    assert!(gw.exited().is_none(), "no restart");
    assert_eq!(g.metric("seckill_gateway_acme_issued_total").await, 2.0);
    assert_eq!(g.metric("seckill_gateway_acme_cert_not_after_seconds").await, renewed.not_after as f64);
    remove_unless_failed(&g.dir);
}

/// A certificate of a CA made by the test for `HOST` and `www.HOST`, valid from `from` to
/// `to` (Unix time), written to the store as if issued before; returns the CA's PEM.
fn seed_store(dir: &std::path::Path, from: i64, to: i64) -> String {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "seeded CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec![HOST.to_string(), format!("www.{HOST}")]).unwrap();
    let at = |t: i64| x509_parser::time::ASN1Time::from_timestamp(t).unwrap().to_datetime();
    leaf.not_before = at(from);
    leaf.not_after = at(to);
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    let stored = dir.join("store").join(HOST);
    std::fs::create_dir_all(&stored).unwrap();
    std::fs::write(stored.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(stored.join("key.pem"), key.serialize_pem()).unwrap();
    ca_cert.pem()
}

/// The waits the log announced after each failed attempt, in order.
fn retry_waits(log: &str) -> Vec<u64> {
    log.lines()
        .filter(|l| l.contains("ACME attempt failed"))
        .filter_map(|l| l.split("retry_in_secs=").nth(1)?.split_whitespace().next()?.parse().ok())
        .collect()
}

#[tokio::test]
async fn a_failing_challenge_is_retried_with_backoff_counted_and_logged_while_the_stored_certificate_serves()
{
    let g = Setup::new(None).await;
    let now = chrono::Utc::now().timestamp();
    // Two thirds of its 300 s are behind it (due now), 100 s are left.
    let seeded_ca = seed_store(&g.dir, now - 200, now + 100);
    // Pebble validates HTTP-01 on a port nobody listens on: every challenge fails.
    let mut pebble = Pebble::start(&PebbleConf { http_port: free_port(), validity_secs: 3600 }).await;
    let gw = g.start(&pebble).await;
    let seeded = g.served(&seeded_ca, Duration::from_secs(20), |_| true).await;
    let seeded = seeded.unwrap_or_else(|| panic!("the stored certificate is served; log:\n{}", gw.log()));

    let three = eventually(Duration::from_secs(60), || async {
        g.metric("seckill_gateway_acme_failures_total").await >= 3.0
    });
    assert!(three.await, "{}", gw.log());
    let log = gw.log();
    assert_eq!(retry_waits(&log)[..3], [1, 2, 4], "the wait doubles; {log}");
    assert!(log.contains("acme-challenge") && log.contains("connection refused"), "the reason: {log}");
    let now_served = g.get(&g.https(&seeded_ca)).await;
    assert_eq!(now_served, Some(seeded.clone()), "the stored certificate still serves new handshakes");
    assert_eq!(g.metric("seckill_gateway_acme_issued_total").await, 0.0);
    // The wait is in the store, for every gateway sharing it: not before when, after how many.
    let marker = g.dir.join("store").join(HOST).join("retry");
    let counted = |text: String| text.split_whitespace().nth(1).and_then(|n| n.parse::<u32>().ok());
    let in_store = eventually(Duration::from_secs(10), || {
        let text = std::fs::read_to_string(&marker).unwrap_or_default();
        async move { counted(text).is_some_and(|n| n >= 3) }
    });
    assert!(in_store.await, "{:?}", std::fs::read_to_string(&marker));

    // Validation reaches the gateway again: the next retry gets the certificate.
    pebble.restart(&PebbleConf { http_port: g.port, validity_secs: 3600 }).await;
    let root = pebble.root_pem().await;
    let issued = g.served(&root, Duration::from_secs(60), |_| true).await;
    let issued = issued.unwrap_or_else(|| panic!("issued after the failures; log:\n{}", gw.log()));
    assert_ne!(issued.serial, seeded.serial);
    assert_eq!(g.metric("seckill_gateway_acme_issued_total").await, 1.0);
    assert!(!marker.exists(), "a success clears the wait");
    remove_unless_failed(&g.dir);
}

#[tokio::test]
async fn two_gateways_on_one_store_order_once_and_serve_the_same_certificate() {
    let a = Setup::new(None).await;
    let b = Setup::new(Some(&a.dir)).await;
    // Pebble reaches only A's plain listener: when B holds the lock, A answers B's challenge
    // from the store.
    let pebble = Pebble::start(&PebbleConf { http_port: a.port, validity_secs: 3600 }).await;
    let (gw_a, gw_b) = tokio::join!(a.start(&pebble), b.start(&pebble));
    let root = pebble.root_pem().await;
    let on_a = a.served(&root, Duration::from_secs(60), |_| true).await;
    let on_b = b.served(&root, Duration::from_secs(60), |_| true).await;
    let logs = || format!("A:\n{}\nB:\n{}", gw_a.log(), gw_b.log());
    assert!(on_a.is_some() && on_a == on_b, "{on_a:?} {on_b:?}; {}", logs());
    let (a, b) = (&a, &b);
    let count = |name: &'static str| async move { a.metric(name).await + b.metric(name).await };
    let attempts = count("seckill_gateway_acme_attempts_total").await;
    let issued = count("seckill_gateway_acme_issued_total").await;
    assert_eq!((attempts, issued), (1.0, 1.0), "{}", logs());
    let by_b = b.metric("seckill_gateway_acme_issued_total").await == 1.0;
    println!(
        "ACME: one order for two gateways, by {}",
        if by_b { "B (A answered from the store)" } else { "A" }
    );
    assert!(a.dir.join("store").join(HOST).join("lock").exists());
    remove_unless_failed(&a.dir);
}

/// `gateway --check` on `text`: (success, what it said).
fn check(text: &str) -> (bool, String) {
    let dir = temp_dir("gw-acme-check-");
    let file = dir.join("server.toml");
    std::fs::write(&file, text).unwrap();
    let out =
        Command::new(env!("CARGO_BIN_EXE_gateway")).arg("--conf").arg(&file).arg("--check").output().unwrap();
    remove_unless_failed(&dir);
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), said)
}

#[tokio::test]
async fn check_refuses_bad_acme_entries_with_file_line_column_and_field() {
    let g = Setup::new(None).await;
    let pebble = Pebble::start(&PebbleConf { http_port: g.port, validity_secs: 3600 }).await;
    let good = g.conf(&pebble);
    let (ok, said) = check(&good);
    assert!(ok && said.contains("[[tls.acme]] entries: 1"), "{said}");
    let line_of = |text: &str, key: &str| text.lines().position(|l| l.starts_with(key)).unwrap() + 1;
    let cases = [
        ("hosts = [", "hosts = [\"*.shop.test\"]", "tls.acme[0].hosts", "DNS-01"),
        (
            "account_key = ",
            "account_key = \"-----BEGIN PRIVATE KEY-----\"",
            "tls.acme[0].account_key",
            "env:NAME or file:PATH",
        ),
        ("directory = ", "directory = \"http://127.0.0.1:1/dir\"", "tls.acme[0].directory", "https://"),
        ("retry_max_secs = ", "retry_max_secs = 0", "tls.acme[0].retry_max_secs", "between 1 and 86400"),
        ("contact = ", "contact = [\"ops@shop.test\"]", "tls.acme[0].contact", "mailto:"),
    ];
    for (key, line, field, words) in cases {
        let bad: Vec<String> =
            good.lines().map(|l| if l.starts_with(key) { line.to_string() } else { l.to_string() }).collect();
        let bad = bad.join("\n");
        let (ok, said) = check(&bad);
        assert!(!ok, "{line}: {said}");
        let at = format!("server.toml:{}:", line_of(&bad, key));
        assert!(said.contains(&at) && said.contains(field) && said.contains(words), "{line}: {said}");
    }
    remove_unless_failed(&g.dir);
}
