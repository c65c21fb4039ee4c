//! Pebble (v2.10.3), Let's Encrypt's ACME test server, for the ACME tests: each test starts its own on
//! loopback ports of its own, with a config written here (HTTPS certificate made by the test,
//! certificate lifetime, the port it validates HTTP-01 on), a DNS responder of the test's that
//! answers 127.0.0.1 for every name (Pebble's `-dnsserver`), and Pebble's test knobs:
//! `PEBBLE_VA_NOSLEEP=1` (no random validation delay), `PEBBLE_WFE_NONCEREJECT=0` (no nonce
//! refused at random). The binary is the one `e2e/stack.sh up pebble` installs
//! (`.stack/bin/pebble`, or `$SECKILL_STACK_DIR/bin/pebble`; `SECKILL_PEBBLE` names another).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair, SanType};

use crate::support::*;

/// The Pebble binary.
fn binary() -> PathBuf {
    if let Ok(p) = std::env::var("SECKILL_PEBBLE") {
        return p.into();
    }
    let stack = std::env::var("SECKILL_STACK_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| fixtures::stack::workspace_root().join(".stack"));
    let bin = stack.join("bin/pebble");
    assert!(bin.exists(), "{} is missing: install it with `bash e2e/stack.sh up pebble`", bin.display());
    bin
}

/// What a test's Pebble is started with.
pub struct PebbleConf {
    /// The port it validates HTTP-01 challenges on (a gateway's plain listener).
    pub http_port: u16,
    /// Certificate lifetime, seconds.
    pub validity_secs: u64,
}

/// A running Pebble, killed (by PID) when dropped, with its DNS responder.
pub struct Pebble {
    child: Child,
    /// Its folder (config, certificates, log).
    pub dir: PathBuf,
    port: u16,
    mgmt: u16,
    dns_port: u16,
    dns_stop: Arc<AtomicBool>,
}

/// Writes the config for `conf` and runs the binary, its output appended to `pebble.log`.
fn spawn(dir: &std::path::Path, conf: &PebbleConf, port: u16, mgmt: u16, dns_port: u16) -> Child {
    let config = serde_json::json!({"pebble": {
        "listenAddress": format!("127.0.0.1:{port}"),
        "managementListenAddress": format!("127.0.0.1:{mgmt}"),
        "certificate": dir.join("cert.pem"), "privateKey": dir.join("key.pem"),
        "httpPort": conf.http_port, "tlsPort": go_port(),
        "ocspResponderURL": "", "externalAccountBindingRequired": false,
        "retryAfter": {"authz": 1, "order": 1}, "keyAlgorithm": "ecdsa",
        "profiles": {"default": {"description": "test", "validityPeriod": conf.validity_secs}},
    }});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("pebble.log")).unwrap();
    Command::new(binary())
        .arg("-config")
        .arg(dir.join("config.json"))
        .args(["-dnsserver", &format!("127.0.0.1:{dns_port}")])
        .env("PEBBLE_VA_NOSLEEP", "1")
        .env("PEBBLE_WFE_NONCEREJECT", "0")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("pebble starts")
}

impl Pebble {
    /// Starts one and waits (at most 20 s) until its directory answers.
    pub async fn start(conf: &PebbleConf) -> Self {
        let dir = temp_dir("pebble-");
        write_tls(&dir);
        let (dns_port, dns_stop) = dns_responder();
        let (port, mgmt) = (go_port(), go_port());
        let child = spawn(&dir, conf, port, mgmt, dns_port);
        let pebble = Self { child, dir, port, mgmt, dns_port, dns_stop };
        pebble.wait_up().await;
        pebble
    }

    /// Stops it and starts it again on the same ports and HTTPS certificate (its accounts,
    /// orders and CA are new), validating as `conf` says.
    pub async fn restart(&mut self, conf: &PebbleConf) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = spawn(&self.dir, conf, self.port, self.mgmt, self.dns_port);
        self.wait_up().await;
    }

    async fn wait_up(&self) {
        let http = self.client();
        let url = self.directory();
        let up = eventually(Duration::from_secs(20), || {
            let (http, url) = (http.clone(), url.clone());
            async move { http.get(url).send().await.is_ok_and(|r| r.status().is_success()) }
        })
        .await;
        assert!(up, "pebble did not start; its log:\n{}", self.log());
    }

    /// Its directory URL.
    pub fn directory(&self) -> String {
        format!("https://127.0.0.1:{}/dir", self.port)
    }

    /// The CA of its HTTPS listener (`directory_ca_file`).
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// The root its certificates chain to (PEM), from its management interface.
    pub async fn root_pem(&self) -> String {
        let url = format!("https://127.0.0.1:{}/roots/0", self.mgmt);
        self.client().get(url).send().await.unwrap().text().await.unwrap()
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pebble.log")).unwrap_or_default()
    }

    fn client(&self) -> reqwest::Client {
        let ca = std::fs::read(self.ca_file()).unwrap();
        reqwest::Client::builder()
            .user_agent("seckill-gateway-tests") // Pebble refuses a request without one
            .tls_built_in_root_certs(false)
            .add_root_certificate(reqwest::Certificate::from_pem(&ca).unwrap())
            .build()
            .unwrap()
    }
}

impl Drop for Pebble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.dns_stop.store(true, Ordering::Relaxed);
        remove_unless_failed(&self.dir);
    }
}

/// A free loopback port for Pebble to listen on. Not `free_port()`: that one stays bound for
/// the test process's life, and Go's listener (`SO_REUSEADDR` without `SO_REUSEPORT`) beside it
/// is refused connections. Bound and closed here, the usual (small) race.
fn go_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A CA and Pebble's HTTPS certificate for 127.0.0.1 signed by it: `ca.pem`, `cert.pem`, `key.pem`.
fn write_tls(dir: &std::path::Path) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name.push(DnType::CommonName, "pebble test directory CA");
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
    let cert = leaf.signed_by(&key, &ca_cert, &ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    std::fs::write(dir.join("cert.pem"), cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), key.serialize_pem()).unwrap();
}

/// A DNS responder on a loopback TCP port of its own (Pebble's resolver speaks DNS over TCP):
/// every A question is answered 127.0.0.1, every other question with no record. Runs on a
/// thread until the flag is set.
fn dns_responder() -> (u16, Arc<AtomicBool>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    std::thread::spawn(move || {
        while !flag.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((conn, _)) => {
                    let _ = answer_queries(conn);
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    });
    (port, stop)
}

/// Answers the length-prefixed queries of one connection until it closes (or idles 2 s).
fn answer_queries(mut conn: TcpStream) -> std::io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(2)))?;
    loop {
        let mut len = [0u8; 2];
        conn.read_exact(&mut len)?;
        let mut query = vec![0u8; usize::from(u16::from_be_bytes(len))];
        conn.read_exact(&mut query)?;
        let Some(reply) = dns_reply(&query) else { return Ok(()) };
        conn.write_all(&(reply.len() as u16).to_be_bytes())?;
        conn.write_all(&reply)?;
    }
}

/// The answer to one DNS query (one question), `None` for what is not one.
fn dns_reply(query: &[u8]) -> Option<Vec<u8>> {
    let mut end = 12;
    while *query.get(end)? != 0 {
        end += 1 + usize::from(query[end]);
    }
    let question_end = end + 5;
    let qtype = u16::from_be_bytes([*query.get(end + 1)?, *query.get(end + 2)?]);
    let is_a = qtype == 1;
    let mut out = Vec::with_capacity(question_end + 16);
    out.extend_from_slice(&query[..2]);
    out.extend_from_slice(&[0x81, 0x80, 0, 1, 0, u8::from(is_a), 0, 0, 0, 0]);
    out.extend_from_slice(query.get(12..question_end)?);
    if is_a {
        out.extend_from_slice(&[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 127, 0, 0, 1]);
    }
    Some(out)
}
