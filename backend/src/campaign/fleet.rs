//! The gateways of the fleet as the campaign commands reach them: each one's admin listener
//! (`[fleet] gateways` of the writer's conf), `GET /campaigns` for what it serves and `POST
//! /reload` to read its files again, both with the `[admin] token` as a bearer token.
//!
//! A command that changes something waits for every gateway to show it ([`Gateways::converge`])
//! and fails, naming each gateway that did not, when one has not within `[fleet] converge_ms`.

use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::conf::FleetConf;

/// What one gateway says it serves (`GET /campaigns`).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Serving {
    /// Its signing key's fingerprint.
    #[serde(default)]
    pub signing: Option<String>,
    /// Its topic.
    #[serde(default)]
    pub topic: Option<String>,
    /// Its partition count.
    #[serde(default)]
    pub partitions: Option<i32>,
    /// The campaigns it serves.
    pub campaigns: Vec<Served>,
}

/// One campaign as one gateway serves it.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
pub struct Served {
    /// Campaign id.
    pub id: String,
    /// Its file's digest (`protocol::campaign::digest`).
    pub digest: String,
    /// Its operated state as last read.
    pub state: String,
    /// The control version last read.
    pub version: u64,
    /// Its local sold-out flag.
    pub sold_out: bool,
    /// Its orders in flight in this gateway now.
    #[serde(default)]
    pub in_flight: u32,
    /// False when its files disagree with the published campaign.
    pub selling: bool,
    /// What disagrees.
    #[serde(default)]
    pub disagreements: Vec<String>,
}

/// One gateway's answer: what it serves, or why it could not say.
#[derive(Debug, Clone)]
pub struct Seen {
    /// The gateway (`host:port`).
    pub gateway: String,
    /// Its answer.
    pub answer: Result<Serving, String>,
}

impl Seen {
    /// The campaign `id` as this gateway serves it, if it answered and serves it.
    pub fn campaign(&self, id: &str) -> Option<&Served> {
        self.answer.as_ref().ok()?.campaigns.iter().find(|c| c.id == id)
    }
}

/// The fleet's gateways.
pub struct Gateways {
    http: reqwest::Client,
    conf: FleetConf,
}

impl Gateways {
    /// The gateways of `conf`; an error when it names none.
    pub fn new(conf: &FleetConf) -> anyhow::Result<Self> {
        if conf.gateways.is_empty() {
            anyhow::bail!("no gateway to reach: list their admin listeners in [fleet] gateways of the conf");
        }
        let http = reqwest::Client::builder().timeout(Duration::from_secs(2)).build()?;
        Ok(Self { http, conf: conf.clone() })
    }

    /// Asks every gateway what it serves, at once.
    pub async fn serving(&self) -> Vec<Seen> {
        self.each("GET", "/campaigns").await
    }

    /// Asks every gateway to read its files again, at once.
    pub async fn reload(&self) -> Vec<Seen> {
        self.each("POST", "/reload").await
    }

    /// Asks until every gateway shows campaign `id` as `done` says, or `[fleet] converge_ms`
    /// passed. Returns the last answers and how long it took (`None`: not every gateway did).
    pub async fn converge(&self, id: &str, done: impl Fn(&Served) -> bool) -> (Vec<Seen>, Option<Duration>) {
        let start = Instant::now();
        loop {
            let seen = self.serving().await;
            if seen.iter().all(|s| s.campaign(id).is_some_and(&done)) {
                return (seen, Some(start.elapsed()));
            }
            if start.elapsed() >= self.conf.converge {
                return (seen, None);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every gateway's Prometheus text (`GET /metrics`), at once.
    pub async fn metrics(&self) -> Vec<(String, Result<String, String>)> {
        let scrape = |g: String| async move {
            let got = async {
                let resp =
                    self.http.get(format!("http://{g}/metrics")).send().await.map_err(|e| e.to_string())?;
                resp.text().await.map_err(|e| e.to_string())
            }
            .await;
            (g, got)
        };
        futures::future::join_all(self.conf.gateways.iter().cloned().map(scrape)).await
    }

    async fn each(&self, method: &str, path: &str) -> Vec<Seen> {
        let asks = self.conf.gateways.iter().map(|g| self.ask(g, method, path));
        futures::future::join_all(asks).await
    }

    async fn ask(&self, gateway: &str, method: &str, path: &str) -> Seen {
        let url = format!("http://{gateway}{path}");
        let mut req = if method == "POST" { self.http.post(&url) } else { self.http.get(&url) };
        if let Some(t) = &self.conf.token {
            req = req.bearer_auth(t.expose());
        }
        let answer = async {
            let resp = req.send().await.map_err(|e| format!("cannot reach: {e}"))?;
            let status = resp.status();
            let body = resp.text().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                let said = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["message"].as_str().map(str::to_string))
                    .unwrap_or(body);
                return Err(format!("{status}: {said}"));
            }
            serde_json::from_str::<Serving>(&body).map_err(|e| format!("unexpected answer: {e}"))
        }
        .await;
        Seen { gateway: gateway.to_string(), answer }
    }
}

/// One line per gateway: its view of campaign `id`.
pub fn table(seen: &[Seen], id: &str) -> String {
    let mut out = format!(
        "  {:<24} {:<11} {:>7} {:<17} {:<8} {}\n",
        "gateway", "state", "version", "file digest", "sold out", "selling"
    );
    for s in seen {
        let line = match (&s.answer, s.campaign(id)) {
            (Err(e), _) => format!("  {:<24} {e}\n", s.gateway),
            (Ok(_), None) => format!("  {:<24} does not serve campaign {id}\n", s.gateway),
            (Ok(_), Some(c)) => {
                let selling =
                    if c.selling { "yes".to_string() } else { format!("NO: {}", c.disagreements.join("; ")) };
                format!(
                    "  {:<24} {:<11} {:>7} {:<17} {:<8} {selling}\n",
                    s.gateway,
                    c.state,
                    c.version,
                    c.digest,
                    if c.sold_out { "yes" } else { "no" }
                )
            }
        };
        out.push_str(&line);
    }
    out
}
