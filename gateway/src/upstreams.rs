//! Upstream pools: round robin over the healthy addresses of a pool, with active health checks
//! (TCP connect, or `GET health_check_path` expecting a 2xx) and per-pool timeouts.
//!
//! Pools are rebuilt on every reload; one health-check task ([`run_health_checks`]) checks the
//! pools of the conf that is active at each tick, each at its own interval. This module knows
//! nothing of the configuration: whatever holds the pools implements [`PoolSet`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::RequestHeader;
use pingora_load_balancing::health_check::{HttpHealthCheck, TcpHealthCheck};
use pingora_load_balancing::selection::RoundRobin;
use pingora_load_balancing::LoadBalancer;

use crate::conf::PoolConf;

/// One pool of upstream addresses.
pub struct Pool {
    name: String,
    lb: Arc<LoadBalancer<RoundRobin>>,
    conf: PoolConf,
    next_check_ms: AtomicU64,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).field("conf", &self.conf).finish()
    }
}

impl Pool {
    /// Builds a pool; every address starts healthy until a check says otherwise.
    /// A health check waits at most the pool's timeout, and no longer than its interval (at
    /// least a second): a route's 60 s timeouts would hold every pool's next check.
    pub fn new(name: &str, conf: &PoolConf) -> std::io::Result<Self> {
        let bound = conf.health_check_interval.max(Duration::from_secs(1));
        let (connect, read) = (conf.connect_timeout.min(bound), conf.read_timeout.min(bound));
        let mut lb = LoadBalancer::<RoundRobin>::try_from_iter(conf.upstreams.iter().copied())?;
        match &conf.health_check_path {
            Some(path) => {
                let mut hc = HttpHealthCheck::new("localhost", false);
                let mut req = RequestHeader::build("GET", path.as_bytes(), None)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                req.insert_header("host", "localhost").map_err(|e| std::io::Error::other(e.to_string()))?;
                hc.req = req;
                hc.peer_template.options.connection_timeout = Some(connect);
                hc.peer_template.options.read_timeout = Some(read);
                lb.set_health_check(Box::new(hc));
            }
            None => {
                let mut hc = TcpHealthCheck::new();
                hc.peer_template.options.connection_timeout = Some(connect);
                lb.set_health_check(hc);
            }
        }
        Ok(Self {
            name: name.to_string(),
            lb: Arc::new(lb),
            conf: conf.clone(),
            next_check_ms: AtomicU64::new(0),
        })
    }

    /// The pool's name (route name, or `order_writer`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A peer on the next healthy address, with the pool's timeouts; `None` if none is healthy.
    pub fn peer(&self) -> Option<Box<HttpPeer>> {
        let backend = self.lb.select(b"", 256)?;
        let mut peer = HttpPeer::new(backend.addr, false, String::new());
        peer.options.connection_timeout = Some(self.conf.connect_timeout);
        peer.options.read_timeout = Some(self.conf.read_timeout);
        peer.options.write_timeout = Some(self.conf.send_timeout);
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        peer.group_key = crate::threads::upstream_group_key();
        Some(Box::new(peer))
    }

    /// Runs a health check if this pool's interval has passed since the last one.
    pub async fn check_if_due(&self, now_ms: u64) {
        if now_ms < self.next_check_ms.load(Ordering::Acquire) {
            return;
        }
        self.next_check_ms
            .store(now_ms + self.conf.health_check_interval.as_millis() as u64, Ordering::Release);
        self.lb.backends().run_health_check(true).await;
    }
}

/// Whatever holds pools (the active configuration): the health checks need only its pools.
pub trait PoolSet {
    /// Every pool it holds.
    fn pools(&self) -> Vec<&Pool>;
}

/// Checks the pools of `current()` forever, each at its own interval. `current` is called at
/// every tick, so pools of a replaced conf stop being checked at the next tick.
pub async fn run_health_checks<S, F>(current: F)
where
    S: PoolSet,
    F: Fn() -> Arc<S>,
{
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let set = current();
        let now = plugins::checks::now_ms();
        let checks = set.pools().into_iter().map(|p| p.check_if_due(now));
        futures::future::join_all(checks).await;
    }
}
