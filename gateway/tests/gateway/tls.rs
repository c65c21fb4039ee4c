//! TLS termination: a CA and certificates made by the test, SNI picking the certificate,
//! HTTP/2 by ALPN (an order and a shop page), HTTP/1.1 kept, `X-Forwarded-Proto: https`,
//! certificates reloaded on SIGHUP, and the plain listener's redirect to HTTPS.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair};
use wiremock::matchers::any;
use wiremock::{Mock, MockServer, ResponseTemplate};

use crate::support::*;

/// A CA made by the test.
struct TestCa {
    key: KeyPair,
    cert: Certificate,
}

impl TestCa {
    fn new() -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, "seckill test CA");
        let cert = params.self_signed(&key).unwrap();
        Self { key, cert }
    }

    /// Issues a certificate for `names`, written as `<stem>.pem` and `<stem>.key` in `dir`;
    /// returns its DER.
    fn issue(&self, dir: &Path, stem: &str, names: &[&str]) -> Vec<u8> {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        std::fs::write(dir.join(format!("{stem}.pem")), cert.pem()).unwrap();
        std::fs::write(dir.join(format!("{stem}.key")), key.serialize_pem()).unwrap();
        cert.der().to_vec()
    }

    /// A client that trusts only this CA, resolving `names` to the gateway's TLS port.
    fn client(&self, port: u16, names: &[&str], http1_only: bool) -> reqwest::Client {
        let mut b = reqwest::Client::builder()
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(self.cert.pem().as_bytes()).unwrap())
            .tls_info(true)
            .redirect(reqwest::redirect::Policy::none());
        for n in names {
            b = b.resolve(n, SocketAddr::from(([127, 0, 0, 1], port)));
        }
        if http1_only {
            b = b.http1_only();
        }
        b.build().unwrap()
    }
}

/// The DER of the certificate the server presented.
fn peer_cert(resp: &reqwest::Response) -> Vec<u8> {
    let info = resp.extensions().get::<reqwest::tls::TlsInfo>().expect("TLS info");
    info.peer_certificate().expect("a peer certificate").to_vec()
}

fn cert_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(fixtures::stack::unique("gw-certs-"));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[tokio::test]
async fn https_with_sni_http2_forwarded_proto_reload_and_redirect() {
    let ca = TestCa::new();
    let dir = cert_dir();
    let shop_der = ca.issue(&dir, "shop", &["shop.test"]);
    let api_der = ca.issue(&dir, "api", &["x.api.test"]);

    let redis = client(&fixtures::stack::redis_url()).await.unwrap();
    let campaign = fixtures::cleanup::Campaign::new("tls");
    publish(&redis, &campaign, 10, 1).await;
    let shop = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200).set_body_string("page")).mount(&shop).await;
    let (tls_port, plain_port) = (free_port(), free_port());
    let mut conf = GatewayConf::new(&fixtures::stack::redis_url(), "127.0.0.1:1", &campaign, "");
    let d = dir.display();
    conf.routes = format!(
        "[[route]]\nname = \"shop\"\npath_prefix = \"/shop/\"\nupstreams = [\"{}\"]\n\n\
         [tls]\nlisten = \"127.0.0.1:{tls_port}\"\nredirect_listen = \"127.0.0.1:{plain_port}\"\n\n\
         [[tls.cert]]\nhosts = [\"shop.test\"]\ncert_file = \"{d}/shop.pem\"\nkey_file = \"{d}/shop.key\"\n\n\
         [[tls.cert]]\nhosts = [\"*.api.test\"]\ncert_file = \"{d}/api.pem\"\nkey_file = \"{d}/api.key\"\n",
        shop.address()
    );
    let gw = Gateway::start(&conf).await;
    let names = ["shop.test", "x.api.test"];
    let https = ca.client(tls_port, &names, false);

    // HTTP/2 by ALPN, and SNI picks each name's certificate.
    let resp = https.get(format!("https://shop.test:{tls_port}/shop/a")).send().await.unwrap();
    assert_eq!((resp.status().as_u16(), resp.version()), (200, http::Version::HTTP_2));
    assert_eq!(peer_cert(&resp), shop_der, "shop.test gets its own certificate");
    assert_eq!(resp.text().await.unwrap(), "page");
    let resp = https.get(format!("https://x.api.test:{tls_port}/shop/b")).send().await.unwrap();
    assert_eq!(peer_cert(&resp), api_der, "a wildcard name gets the wildcard certificate");

    // An order over HTTP/2.
    let (status, body) =
        order_at(&https, &format!("https://shop.test:{tls_port}"), &campaign, "tls-user").await;
    assert_eq!((status, body["code"].as_str()), (202, Some("QUEUED")), "{body}");

    // HTTP/1.1 over TLS still works, through the front door's limits.
    let h1 = ca.client(tls_port, &names, true);
    let resp = h1.get(format!("https://shop.test:{tls_port}/shop/c")).send().await.unwrap();
    assert_eq!((resp.status().as_u16(), resp.version()), (200, http::Version::HTTP_11));
    let resp =
        h1.get(format!("https://shop.test:{tls_port}/shop/c")).header("x-big", "x".repeat(40_000)).send();
    assert_eq!(resp.await.unwrap().status(), 431);

    // The upstream is told the scheme: https from the TLS listener, http from the plain one.
    reqwest::get(gw.url("/shop/plain")).await.unwrap();
    let seen = shop.received_requests().await.unwrap();
    let proto = |path: &str| {
        let r = seen.iter().find(|r| r.url.path() == path).unwrap();
        r.headers.get("x-forwarded-proto").unwrap().to_str().unwrap().to_string()
    };
    assert_eq!((proto("/shop/a").as_str(), proto("/shop/c").as_str()), ("https", "https"));
    assert_eq!(proto("/shop/plain"), "http");

    // The redirecting listener: 308 to the same host and path on HTTPS.
    let plain = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let resp = plain
        .post(format!("http://127.0.0.1:{plain_port}/shop/a?x=1"))
        .header("host", "shop.test")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 308);
    assert_eq!(resp.headers()["location"], format!("https://shop.test:{tls_port}/shop/a?x=1").as_str());

    // SIGHUP reloads the certificates; a broken key file is refused and the old one stays.
    std::fs::write(dir.join("shop.key"), "not a key").unwrap();
    gw.hup();
    let refused =
        eventually(std::time::Duration::from_secs(5), || async { gw.log().contains("reload refused") });
    assert!(refused.await, "{}", gw.log());
    let resp = ca.client(tls_port, &names, false).get(format!("https://shop.test:{tls_port}/shop/a")).send();
    assert_eq!(peer_cert(&resp.await.unwrap()), shop_der, "the old certificate stays");
    let new_der = ca.issue(&dir, "shop", &["shop.test"]);
    gw.hup();
    let renewed = eventually(std::time::Duration::from_secs(5), || async {
        let client = ca.client(tls_port, &names, false);
        match client.get(format!("https://shop.test:{tls_port}/shop/a")).send().await {
            Ok(resp) => peer_cert(&resp) == new_der,
            Err(_) => false,
        }
    });
    assert!(renewed.await, "the renewed certificate is served after SIGHUP");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn https_to_an_upstream_checks_its_certificate_by_the_routes_ca_and_name() {
    let ca = TestCa::new();
    let dir = cert_dir();
    ca.issue(&dir, "inner", &["shop.internal"]);
    std::fs::write(dir.join("ca.pem"), ca.cert.pem()).unwrap();
    // The upstream: a proxy-only gateway serving HTTPS as shop.internal, in front of a mock.
    let shop = MockServer::start().await;
    Mock::given(any()).respond_with(ResponseTemplate::new(200).set_body_string("secure")).mount(&shop).await;
    let inner_tls = free_port();
    let d = dir.display();
    let inner = Gateway::start_text(&format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\n[[route]]\nname = \"shop\"\npath = \"/\"\nupstreams = [\"{}\"]\n\
         [tls]\nlisten = \"127.0.0.1:{inner_tls}\"\n[[tls.cert]]\nhosts = [\"shop.internal\"]\n\
         cert_file = \"{d}/inner.pem\"\nkey_file = \"{d}/inner.key\"\n",
        shop.address()
    ))
    .await;
    // The gateway under test: four routes to it over HTTPS.
    let route = |name: &str, extra: &str| {
        format!(
            "[[route]]\nname = \"{name}\"\npath = \"/{name}/\"\nupstreams = [\"127.0.0.1:{inner_tls}\"]\n\
             upstream_tls = true\nhealth_check_interval_ms = 60000\n{extra}\n"
        )
    };
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\n{}{}{}{}",
        route("trusted", &format!("upstream_sni = \"shop.internal\"\nupstream_ca_file = \"{d}/ca.pem\"")),
        route("wrong-name", &format!("upstream_sni = \"other.internal\"\nupstream_ca_file = \"{d}/ca.pem\"")),
        route("system-roots", "upstream_sni = \"shop.internal\""),
        route("unchecked", "upstream_sni = \"shop.internal\"\nupstream_verify = false"),
    );
    let gw = Gateway::start_text(&text).await;
    let http = reqwest::Client::new();
    for (path, status) in
        [("/trusted/a", 200), ("/wrong-name/a", 502), ("/system-roots/a", 502), ("/unchecked/a", 200)]
    {
        let resp = http.get(gw.url(path)).send().await.unwrap();
        assert_eq!(resp.status().as_u16(), status, "{path}");
        if status == 200 {
            assert_eq!(resp.text().await.unwrap(), "secure");
        }
    }
    drop(inner);
    // A CA file that is not PEM certificates, and TLS keys without upstream_tls, refused at load.
    std::fs::write(dir.join("bad.pem"), "not a certificate").unwrap();
    let bad = format!(
        "[server]\nlisten = \"127.0.0.1:1\"\n{}",
        route("r", &format!("upstream_ca_file = \"{d}/bad.pem\""))
    );
    let (ok, said) = crate::proxy_only::check(&bad);
    assert!(
        !ok && said.contains("route[0].upstream_ca_file") && said.contains("no PEM certificate"),
        "{said}"
    );
    let stray = "[server]\nlisten = \"127.0.0.1:1\"\n[[route]]\nname = \"r\"\npath = \"/\"\nupstreams = [\"127.0.0.1:1\"]\nupstream_sni = \"a\"\n";
    let (ok, said) = crate::proxy_only::check(stray);
    assert!(!ok && said.contains(":7:") && said.contains("needs `upstream_tls = true`"), "{said}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A relay on a port of its own that opens a connection to `to` for each one it accepts, writes
/// `header` there first (what a load balancer's PROXY protocol does), then copies both ways.
async fn proxy_relay(to: u16, header: Vec<u8>) -> u16 {
    use tokio::io::AsyncWriteExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut client, _)) = listener.accept().await {
            let header = header.clone();
            tokio::spawn(async move {
                let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else { return };
                if server.write_all(&header).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                }
            });
        }
    });
    port
}

#[tokio::test]
async fn the_proxy_protocol_on_the_https_listener_names_the_client_before_tls() {
    let ca = TestCa::new();
    let dir = cert_dir();
    ca.issue(&dir, "shop", &["shop.test"]);
    let up = MockServer::start().await;
    Mock::given(any())
        .respond_with(|req: &wiremock::Request| {
            let ip = req.headers.get("x-real-ip").and_then(|v| v.to_str().ok()).unwrap_or("none");
            ResponseTemplate::new(200).set_body_string(format!("ip={ip}"))
        })
        .mount(&up)
        .await;
    let tls_port = free_port();
    let d = dir.display();
    let gw = Gateway::start_text(&format!(
        "[server]\nlisten = \"127.0.0.1:{{port}}\"\nworkers = {}\n[[route]]\nname = \"shop\"\npath = \"/\"\nupstreams = [\"{}\"]\n\
         [tls]\nlisten = \"127.0.0.1:{tls_port}\"\nproxy_protocol = true\n[[tls.cert]]\nhosts = [\"shop.test\"]\n\
         cert_file = \"{d}/shop.pem\"\nkey_file = \"{d}/shop.key\"\n",
        workers(),
        up.address()
    ))
    .await;
    let v1 = proxy_relay(tls_port, b"PROXY TCP4 203.0.113.7 127.0.0.1 5555 443\r\n".to_vec()).await;
    let mut v2 = b"\r\n\r\n\0\r\nQUIT\n".to_vec();
    v2.extend_from_slice(&[0x21, 0x11, 0, 12, 198, 51, 100, 9, 127, 0, 0, 1, 0x15, 0xb3, 1, 0xbb]);
    let v2 = proxy_relay(tls_port, v2).await;
    let unknown = proxy_relay(tls_port, b"PROXY UNKNOWN\r\n".to_vec()).await;
    for (port, http1, want) in [
        (v1, true, "ip=203.0.113.7"),
        (v1, false, "ip=203.0.113.7"),
        (v2, false, "ip=198.51.100.9"),
        (unknown, true, "ip=127.0.0.1"),
    ] {
        let resp = ca.client(port, &["shop.test"], http1).get("https://shop.test/a").send().await.unwrap();
        let version = resp.version();
        assert_eq!(resp.text().await.unwrap(), want, "through port {port}, {version:?}");
    }
    // Straight to the listener, without the header: no TLS at all (the first bytes are the
    // ClientHello, not a PROXY header), as Nginx closes a broken header.
    let direct = ca.client(tls_port, &["shop.test"], true).get("https://shop.test/a").send().await;
    assert!(direct.is_err(), "{direct:?}");
    // The plain listener reads no PROXY header (its own `[server] proxy_protocol` is off).
    assert_eq!(reqwest::get(gw.url("/b")).await.unwrap().text().await.unwrap(), "ip=127.0.0.1");
    let _ = std::fs::remove_dir_all(&dir);
}
