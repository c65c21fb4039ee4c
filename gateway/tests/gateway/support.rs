//! Starting gateways and private Redis servers for tests, and talking to them.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use fred::prelude::*;
use protocol::scripts::{PublishOutcome, PublishSpec, Scripts};

/// The HMAC key the test gateways and the order writer share (also the gateways' master key).
pub const KEY: &str = "test-signing-key-0123456789";
/// The tests' own key of the shop's auth service (HS256), minting login JWTs.
pub const LOGIN_KEY: &str = "test-login-key-0123456789";

/// The shop's auth service, played by the tests.
pub fn auth() -> fixtures::client::Auth {
    fixtures::client::Auth::hs256(LOGIN_KEY.as_bytes()).unwrap()
}

/// The result token the test gateways (master key [`KEY`]) give with a QUEUED answer of
/// `user`'s `request_id`, for a poll of a request no test ordered.
pub fn result_token(campaign: &str, user: &str, request_id: &str) -> String {
    let keys = plugins::issue::EdgeKeys::derive(KEY.as_bytes()).unwrap();
    keys.result_token(campaign, user, request_id, chrono::Utc::now().timestamp() + 3600)
}

pub use fixtures::stack::free_port;

pub fn temp_dir(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(fixtures::stack::unique(prefix));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Removes a test's folder (or file) once the test is done with it, but keeps it when the test
/// failed (its logs are what tells why).
pub fn remove_unless_failed(path: &Path) {
    if std::thread::panicking() {
        return;
    }
    let _ = if path.is_dir() { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
}

/// Polls `f` every 20 ms for at most `limit`; returns whether it became true.
pub async fn eventually<F, Fut>(limit: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while start.elapsed() < limit {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A private `redis-server` on a free port (the fixtures' own), killed when dropped.
pub use fixtures::stack::PrivateRedis;

/// A connected Redis client (fails within 2 s if Redis is not there).
pub async fn client(url: &str) -> Result<Client, Error> {
    let c = Builder::from_config(Config::from_url(url)?)
        .with_connection_config(|c| c.connection_timeout = Duration::from_secs(1))
        .with_performance_config(|p| p.default_command_timeout = Duration::from_secs(5))
        .build()?;
    tokio::time::timeout(Duration::from_secs(2), c.init())
        .await
        .map_err(|_| Error::new(ErrorKind::Timeout, "connect"))??;
    Ok(c)
}

/// The scripts of the repository.
pub fn scripts() -> Scripts {
    Scripts::load(&protocol::scripts::default_dir()).unwrap()
}

/// Publishes `stock` units with a per-user `limit` for `campaign`.
pub async fn publish(redis: &Client, campaign: &str, stock: i64, limit: i64) -> PublishOutcome {
    let spec = PublishSpec {
        stock_version: 1,
        total: stock,
        limit,
        sku: "SKU".into(),
        price_cents: 999,
        price_version: 1,
    };
    scripts().publish(redis, &protocol::keys::Bucket::single(campaign), &spec).await.unwrap()
}

/// `cmdstat_evalsha` calls so far on the server of `redis`.
pub async fn evalsha_calls(redis: &Client) -> u64 {
    let info: String = redis.info(Some(fred::types::InfoKind::CommandStats)).await.unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// A campaign file whose window is open now, with `extra` appended (switches, limits).
pub fn campaign_toml(id: &str, extra: &str) -> String {
    window_toml(id, "-1h", extra)
}

/// A campaign file whose window is `when`: "-1h" open now, "future" not started, "past" ended.
pub fn window_toml(id: &str, when: &str, extra: &str) -> String {
    let now = chrono::Utc::now();
    let h = chrono::Duration::hours(1);
    let (start, end) = match when {
        "future" => (now + h, now + h * 2),
        "past" => (now - h * 2, now - h),
        _ => (now - h, now + h),
    };
    // A small proof of work keeps the tests quick, unless the test sets its own.
    let defense = if extra.contains("[defense]") { "" } else { "\n[defense]\npow_bits = 4\n" };
    format!(
        "id = \"{id}\"\nsku = \"SKU\"\nstock = 100\nper_user_limit = 1\nprice_cents = 999\n\
         starts_at = \"{}\"\nends_at = \"{}\"\n{extra}\n{defense}",
        start.to_rfc3339(),
        end.to_rfc3339()
    )
}

/// What a test gateway is configured with.
pub struct GatewayConf {
    /// Redis URL.
    pub redis_url: String,
    /// Order-writer addresses.
    pub order_writer: Vec<String>,
    /// Extra `[order_writer]` lines.
    pub order_writer_extra: String,
    /// Campaign files: (id, text).
    pub campaigns: Vec<(String, String)>,
    /// `[[route]]` tables, verbatim.
    pub routes: String,
    /// `server.workers` ([`workers`] by default).
    pub workers: usize,
    /// `sale.sold_out_ttl_ms`.
    pub sold_out_ttl_ms: u64,
    /// `sale.shed_at_lag_ms` (0: the line is not written, so the conf tests' lines stay).
    pub shed_at_lag_ms: u64,
    /// Extra `[server]` lines (one at most keeps the line numbers the conf tests expect).
    pub server_extra: String,
    /// `redis.timeout_ms`.
    pub redis_timeout_ms: u64,
    /// Extra `[redis]` lines (e.g. `batch_max`).
    pub redis_extra: String,
    /// `kafka.brokers`.
    pub kafka_brokers: Vec<String>,
    /// Extra `[kafka]` lines (topic, partitions, batching).
    pub kafka_extra: String,
    /// Tables after everything else (`[admin]`, `[access_log]`), verbatim.
    pub tables: String,
    /// Extra `[defense]` lines (a captcha provider).
    pub defense_extra: String,
    /// `defense.login_alg` and the contents of the `login_key` file (a PEM public key or
    /// the HS256 secret).
    pub login: (String, String),
    /// A JWK set (JSON) in `login_keys.json`, named by `login_keys` in place of `login_key`.
    pub login_keys: Option<String>,
}

impl GatewayConf {
    /// One campaign, open now, the given Redis, one order writer. Kafka is a closed loopback
    /// port: tests that do not follow records to orders sell with Kafka down (the outbox holds
    /// every record), and nothing lands in the stack's broker; `sale.rs` sets a real one.
    pub fn new(redis_url: &str, order_writer: &str, campaign: &str, extra: &str) -> Self {
        Self {
            redis_url: redis_url.into(),
            order_writer: vec![order_writer.into()],
            order_writer_extra: String::new(),
            campaigns: vec![(campaign.into(), campaign_toml(campaign, extra))],
            routes: String::new(),
            workers: workers(),
            sold_out_ttl_ms: 1000,
            shed_at_lag_ms: 0,
            server_extra: String::new(),
            redis_timeout_ms: 200,
            redis_extra: String::new(),
            kafka_brokers: vec![format!("127.0.0.1:{}", free_port())],
            kafka_extra: String::new(),
            tables: String::new(),
            defense_extra: String::new(),
            login: ("HS256".into(), LOGIN_KEY.into()),
            login_keys: None,
        }
    }
}

/// A gateway process, killed (by PID) when dropped.
pub struct Gateway {
    child: Child,
    /// Its port.
    pub port: u16,
    /// Its conf folder (server.toml, campaigns/, gateway.log).
    pub dir: PathBuf,
}

/// The gateways' `[server] workers`: `SECKILL_TEST_WORKERS` (the test command runs the gateway
/// tests with 1 and with 2), 2 by default.
pub fn workers() -> usize {
    std::env::var("SECKILL_TEST_WORKERS").ok().and_then(|w| w.parse().ok()).unwrap_or(2)
}

/// Writes a conf folder for `conf` listening on `port`; returns the server file.
pub fn write_conf(dir: &Path, conf: &GatewayConf, port: u16) -> PathBuf {
    std::fs::create_dir_all(dir.join("campaigns")).unwrap();
    std::fs::write(dir.join("key"), KEY).unwrap();
    std::fs::write(dir.join("login_key"), &conf.login.1).unwrap();
    let login_key = match &conf.login_keys {
        Some(set) => {
            std::fs::write(dir.join("login_keys.json"), set).unwrap();
            "login_keys = \"file:login_keys.json\""
        }
        None => "login_key = \"file:login_key\"",
    };
    for (id, text) in &conf.campaigns {
        std::fs::write(dir.join("campaigns").join(format!("{id}.toml")), text).unwrap();
    }
    let upstreams: Vec<String> = conf.order_writer.iter().map(|a| format!("{a:?}")).collect();
    let brokers: Vec<String> = conf.kafka_brokers.iter().map(|a| format!("{a:?}")).collect();
    let server = format!(
        "[server]\nlisten = \"127.0.0.1:{port}\"\nworkers = {}\n{}\n\
         [sale]\nsigning_key = \"file:key\"\nsold_out_ttl_ms = {}{}\n\
         [redis]\nurl = \"{}\"\ntimeout_ms = {}\npool_size = 4\n{}\n\
         [order_writer]\nupstreams = [{}]\nconnect_timeout_ms = 200\nread_timeout_ms = 1000\n{}\n\n\
         [kafka]\nbrokers = [{}]\n{}\n\n\
         [defense]\nmaster_key = \"file:key\"\nlogin_alg = \"{}\"\n{login_key}\n\
         login_issuer = \"{}\"\nlogin_audience = \"{}\"\n{}\n\n{}\n{}\n",
        conf.workers,
        conf.server_extra,
        conf.sold_out_ttl_ms,
        match conf.shed_at_lag_ms {
            0 => String::new(),
            ms => format!("\nshed_at_lag_ms = {ms}"),
        },
        conf.redis_url,
        conf.redis_timeout_ms,
        conf.redis_extra,
        upstreams.join(", "),
        conf.order_writer_extra,
        brokers.join(", "),
        conf.kafka_extra,
        conf.login.0,
        fixtures::client::ISSUER,
        fixtures::client::AUDIENCE,
        conf.defense_extra,
        conf.routes,
        conf.tables
    );
    let file = dir.join("server.toml");
    std::fs::write(&file, server).unwrap();
    file
}

impl Gateway {
    /// A gateway on the stack's Redis, in front of `upstream` as its order writer, selling
    /// `campaign` (whose file gets `extra` appended).
    pub async fn on_stack(upstream: &wiremock::MockServer, campaign: &str, extra: &str) -> Self {
        Self::start(&GatewayConf::new(
            &fixtures::stack::redis_url(),
            &upstream.address().to_string(),
            campaign,
            extra,
        ))
        .await
    }

    /// Starts the gateway binary and waits (at most 15 s) until it answers HTTP.
    pub async fn start(conf: &GatewayConf) -> Self {
        let dir = temp_dir("gw-");
        let port = free_port();
        let file = write_conf(&dir, conf, port);
        Self::spawn(dir, file, port).await
    }

    /// Starts the gateway on a server file of the test's own: `server` with `{port}` replaced by
    /// a free port's number (nothing else is written: no key, no campaign).
    pub async fn start_text(server: &str) -> Self {
        Self::start_text_at(server, free_port()).await
    }

    /// The same on a port the test chose (one a server it started first must know).
    pub async fn start_text_at(server: &str, port: u16) -> Self {
        let dir = temp_dir("gw-");
        let file = dir.join("server.toml");
        std::fs::write(&file, server.replace("{port}", &port.to_string())).unwrap();
        Self::spawn(dir, file, port).await
    }

    /// Runs the binary on `file` (in `dir`, listening on `port`) and waits for its answers.
    async fn spawn(dir: PathBuf, file: PathBuf, port: u16) -> Self {
        let log = std::fs::File::create(dir.join("gateway.log")).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_gateway"))
            .arg("--conf")
            .arg(&file)
            .arg("--lua-dir")
            .arg(protocol::scripts::default_dir())
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut gw = Self { child, port, dir };
        let http = reqwest::Client::new();
        let probe = gw.url("/seckill/probe/info");
        // A listener that takes PROXY headers answers only behind one (`PROXY UNKNOWN`).
        let proxied = std::fs::read_to_string(&file).unwrap_or_default().contains("proxy_protocol = true");
        let up = eventually(Duration::from_secs(15), || {
            let (http, probe) = (http.clone(), probe.clone());
            async move {
                match proxied {
                    false => http.get(probe).send().await.is_ok(),
                    true => answers_behind_a_proxy_header(port).await,
                }
            }
        })
        .await;
        if !up || gw.child.try_wait().unwrap().is_some() {
            panic!("gateway did not start; its log:\n{}", gw.log());
        }
        gw
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Its log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("gateway.log")).unwrap_or_default()
    }

    /// Rewrites one campaign file.
    pub fn write_campaign(&self, id: &str, text: &str) {
        std::fs::write(self.dir.join("campaigns").join(format!("{id}.toml")), text).unwrap();
    }

    /// Kills it with SIGKILL now (nothing of its memory survives).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Its process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited, and how.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// Sends SIGHUP (reload).
    pub fn hup(&self) {
        self.signal("-HUP");
    }

    /// Sends a signal (`-HUP`, `-USR1`, …) by PID.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill").args([sig, &self.child.id().to_string()]).status().unwrap().success();
        assert!(ok, "kill {sig} failed");
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        remove_unless_failed(&self.dir);
    }
}

/// The campaign token of `user` (device `dev-{user}`), through the captcha and token
/// endpoints; `Err` is the refusal.
pub async fn ticket(
    http: &reqwest::Client,
    gw: &Gateway,
    campaign: &str,
    user: &str,
) -> Result<fixtures::client::Ticket, (u16, serde_json::Value)> {
    let login = auth().login(user, serde_json::json!({}));
    fixtures::client::get_ticket(http, &gw.url(""), campaign, &login, &format!("dev-{user}")).await
}

/// One order of `user`, the whole protocol (login JWT, captcha, token, signed order); returns
/// (status, JSON body). A refusal before the order (say, `NOT_STARTED` at the token endpoint)
/// is returned as it is.
pub async fn order(
    http: &reqwest::Client,
    gw: &Gateway,
    campaign: &str,
    user: &str,
) -> (u16, serde_json::Value) {
    order_at(http, &gw.url(""), campaign, user).await
}

/// The same against another base URL of the gateway (another scheme or host: HTTPS, HTTP/2),
/// e.g. `https://shop.test:8443`.
pub async fn order_at(
    http: &reqwest::Client,
    base: &str,
    campaign: &str,
    user: &str,
) -> (u16, serde_json::Value) {
    let login = auth().login(user, serde_json::json!({}));
    match fixtures::client::get_ticket(http, base, campaign, &login, &format!("dev-{user}")).await {
        Ok(t) => t.order(http, base, 1).await,
        Err(refused) => refused,
    }
}

/// Keeps the Redis at `url` busy with a script for `busy_ms`, and returns once it is busy (a
/// PING no longer answers within 50 ms; at most 5 s), with the script's task to await.
pub async fn stall_redis(url: &str, busy_ms: u64) -> tokio::task::JoinHandle<FredResult<i64>> {
    let (staller, probe) = (client(url).await.unwrap(), client(url).await.unwrap());
    let script = format!(
        "local t = redis.call('TIME') local t0 = t[1] * 1000000 + t[2] \
         repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - t0 > {} return 1",
        busy_ms * 1000
    );
    let stall = tokio::spawn(async move {
        staller.eval::<i64, _, _, _>(script, Vec::<String>::new(), Vec::<String>::new()).await
    });
    let busy =
        eventually(Duration::from_secs(5), || {
            let probe = probe.clone();
            async move {
                tokio::time::timeout(Duration::from_millis(50), probe.ping::<String>(None)).await.is_err()
            }
        })
        .await;
    assert!(busy, "the stalling script did not start");
    stall
}

/// One sample of a Prometheus text exposition: name, labels, value.
#[derive(Debug, Clone)]
pub struct Sample {
    /// Metric name (with `_bucket`, `_sum`, `_count` suffixes as exposed).
    pub name: String,
    /// Labels.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
}

/// Parses a text exposition (`# ` lines skipped; label values without escaped quotes).
pub fn parse_metrics(text: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')) {
        let (head, value) = line.rsplit_once(' ').expect("a sample line ends with its value");
        let (name, labels) = match head.split_once('{') {
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').expect("labels close");
                let labels = body
                    .split("\",")
                    .filter(|kv| !kv.is_empty())
                    .map(|kv| {
                        let (k, v) = kv.split_once("=\"").expect("label=\"value\"");
                        (k.to_string(), v.trim_end_matches('"').to_string())
                    })
                    .collect();
                (name.to_string(), labels)
            }
            None => (head.to_string(), Vec::new()),
        };
        out.push(Sample { name, labels, value: value.parse().expect("a number") });
    }
    out
}

/// The sum of the samples named `name` whose labels include every one of `labels`.
pub fn sample(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v)))
        .map(|s| s.value)
        .sum()
}

/// GETs `url` and parses its exposition.
pub async fn scrape(http: &reqwest::Client, url: &str) -> Vec<Sample> {
    let resp = http.get(url).send().await.expect("the admin listener answers");
    assert_eq!(resp.status().as_u16(), 200, "{url}");
    parse_metrics(&resp.text().await.unwrap())
}

/// Whether the listener on `port` answers a request behind a `PROXY UNKNOWN` header.
async fn answers_behind_a_proxy_header(port: u16) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else { return false };
    let req =
        b"PROXY UNKNOWN\r\nGET /seckill/probe/info HTTP/1.1\r\nHost: probe\r\nConnection: close\r\n\r\n";
    if s.write_all(req).await.is_err() {
        return false;
    }
    let mut buf = [0u8; 12];
    matches!(tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await, Ok(Ok(n)) if n > 0 && buf.starts_with(b"HTTP/1."))
}
