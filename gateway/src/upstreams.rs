//! Upstream pools, as Nginx's `upstream` blocks: weighted round robin (or least connections, or
//! consistent hashing of the client's address, a header or a cookie) over the addresses in
//! service; active health checks (TCP connect, or `GET health_check_path` expecting a 2xx);
//! passive failure marking (`max_fails` failed connections within `fail_timeout` set an address
//! aside for `fail_timeout`); names resolved again every `resolve_interval`; per-pool timeouts.
//!
//! Pools are rebuilt on every reload; one task ([`run_health_checks`]) checks and resolves the
//! pools of the conf that is active at each tick, each at its own interval. This module knows
//! nothing of the configuration file: whatever holds the pools implements [`PoolSet`].

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use futures::FutureExt;
use pingora_core::protocols::tls::CaType;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::utils::tls::{parse_x509, WrappedX509};
use pingora_http::RequestHeader;
use pingora_load_balancing::discovery::ServiceDiscovery;
use pingora_load_balancing::health_check::{HttpHealthCheck, TcpHealthCheck};
use pingora_load_balancing::selection::{Consistent, RoundRobin};
use pingora_load_balancing::{Backend, Backends, LoadBalancer};

use crate::conf::upstream::{Balance, HashKey, Server};
use crate::conf::PoolConf;

/// One pool of upstream addresses.
pub struct Pool {
    name: String,
    lb: Lb,
    conf: PoolConf,
    states: Arc<States>,
    /// The pool's CA certificates, as Pingora's connector takes them.
    ca: Option<Arc<CaType>>,
    /// A digest of those certificates (0: none), in the key of the pooled connections.
    ca_key: u64,
    next_check_ms: AtomicU64,
    next_resolve_ms: AtomicU64,
    turn: AtomicUsize,
}

/// The selection: round robin (also least connections' order of ties) or ketama hashing.
enum Lb {
    RoundRobin(LoadBalancer<RoundRobin>),
    Hash(LoadBalancer<Consistent>),
}

impl Lb {
    fn backends(&self) -> &Backends {
        match self {
            Lb::RoundRobin(lb) => lb.backends(),
            Lb::Hash(lb) => lb.backends(),
        }
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("name", &self.name).field("conf", &self.conf).finish()
    }
}

/// Each address's requests in flight and failures (by address, as resolved).
#[derive(Default)]
struct States(RwLock<HashMap<SocketAddr, Arc<AddrState>>>);

struct AddrState {
    max_fails: u32,
    fail_timeout_ms: u64,
    in_flight: AtomicUsize,
    fails: AtomicU32,
    window_start_ms: AtomicU64,
    down_until_ms: AtomicU64,
}

impl AddrState {
    fn new(s: &Server) -> Self {
        AddrState {
            max_fails: s.max_fails,
            fail_timeout_ms: s.fail_timeout.as_millis() as u64,
            in_flight: AtomicUsize::new(0),
            fails: AtomicU32::new(0),
            window_start_ms: AtomicU64::new(0),
            down_until_ms: AtomicU64::new(0),
        }
    }

    fn down(&self, now_ms: u64) -> bool {
        now_ms < self.down_until_ms.load(Ordering::Relaxed)
    }

    /// A failed attempt: the `max_fails`-th within `fail_timeout` sets the address aside. Its
    /// count stays at `max_fails` after that until an attempt succeeds (Nginx's `fails`, reset
    /// only by a success): back from aside, its first failure sets it aside again.
    fn failed(&self, now_ms: u64) {
        if self.max_fails == 0 {
            return;
        }
        if self.fails.load(Ordering::Relaxed) >= self.max_fails {
            self.down_until_ms.store(now_ms + self.fail_timeout_ms, Ordering::Relaxed);
            return;
        }
        let start = self.window_start_ms.load(Ordering::Relaxed);
        if now_ms >= start + self.fail_timeout_ms {
            self.window_start_ms.store(now_ms, Ordering::Relaxed);
            self.fails.store(0, Ordering::Relaxed);
        }
        if self.fails.fetch_add(1, Ordering::Relaxed) + 1 >= self.max_fails {
            self.down_until_ms.store(now_ms + self.fail_timeout_ms, Ordering::Relaxed);
        }
    }

    /// An attempt that did not fail: an address back from aside is trusted again (a success
    /// within the window before it was set aside does not clear its count, as in Nginx).
    fn succeeded(&self, now_ms: u64) {
        if self.fails.load(Ordering::Relaxed) >= self.max_fails && !self.down(now_ms) {
            self.fails.store(0, Ordering::Relaxed);
        }
    }
}

/// A request's place on an address, given back when the request ends (dropped); it marks the
/// address failed when the attempt failed.
pub struct InFlight {
    state: Arc<AddrState>,
    /// Whether failures count: a pool of one address never sets it aside (as Nginx).
    counts: bool,
    /// Whether this attempt failed (else its end is a success).
    failed: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InFlight").field("in_flight", &self.state.in_flight.load(Ordering::Relaxed)).finish()
    }
}

impl InFlight {
    /// The attempt on this address failed (a refused or timed-out connection, a broken or
    /// timed-out answer): counted towards its `max_fails`.
    pub fn failed(&self) {
        self.failed.store(true, Ordering::Relaxed);
        if self.counts {
            self.state.failed(plugins::checks::now_ms());
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.state.in_flight.fetch_sub(1, Ordering::Relaxed);
        if self.counts && self.state.max_fails > 0 && !self.failed.load(Ordering::Relaxed) {
            self.state.succeeded(plugins::checks::now_ms());
        }
    }
}

/// The pool's servers as backends: IPs as they are, names resolved (every address a name has
/// is a backend of its weight). A name that does not resolve keeps its last addresses.
struct Dns {
    servers: Vec<Server>,
    states: Arc<States>,
    last: Mutex<BTreeSet<Backend>>,
    /// The first discovery returns what [`Dns::resolve_now`] found while the pool was built.
    fresh: std::sync::atomic::AtomicBool,
}

impl Dns {
    /// Resolves every server now (blocking: at load, as Nginx resolves an `upstream` block's
    /// names at start); a name that does not resolve refuses the pool.
    fn resolve_now(servers: &[Server]) -> std::io::Result<Vec<(usize, SocketAddr)>> {
        let mut out = Vec::new();
        for (i, s) in servers.iter().enumerate() {
            let found: Vec<SocketAddr> = std::net::ToSocketAddrs::to_socket_addrs(&s.authority())
                .map_err(|e| std::io::Error::other(format!("upstream {}: {e}", s.authority())))?
                .collect();
            out.extend(found.into_iter().map(|a| (i, a)));
        }
        Ok(out)
    }

    fn backends(&self, found: &[(usize, SocketAddr)]) -> BTreeSet<Backend> {
        let mut states = self.states.0.write().unwrap_or_else(|e| e.into_inner());
        let mut set = BTreeSet::new();
        for &(i, addr) in found {
            let s = &self.servers[i];
            states.entry(addr).or_insert_with(|| Arc::new(AddrState::new(s)));
            set.insert(Backend { addr: addr.into(), weight: s.weight, ext: Default::default() });
        }
        set
    }
}

#[async_trait]
impl ServiceDiscovery for Dns {
    async fn discover(&self) -> pingora_core::Result<(BTreeSet<Backend>, HashMap<u64, bool>)> {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if self.fresh.swap(false, Ordering::Relaxed) {
            return Ok((last, HashMap::new()));
        }
        let mut found = Vec::new();
        for (i, s) in self.servers.iter().enumerate() {
            match tokio::net::lookup_host(s.authority()).await {
                Ok(addrs) => found.extend(addrs.map(|a| (i, a))),
                Err(e) => {
                    tracing::warn!(upstream = %s.authority(), error = %e, "an upstream name did not resolve: the pool keeps its last addresses");
                    return Ok((last, HashMap::new()));
                }
            }
        }
        let set = self.backends(&found);
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = set.clone();
        Ok((set, HashMap::new()))
    }
}

impl Pool {
    /// Builds a pool (its names resolved now); every address starts in service until a check
    /// says otherwise. A health check waits at most the pool's timeout, and no longer than its
    /// interval (at least a second): a route's 60 s timeouts would hold every pool's next check.
    pub fn new(name: &str, conf: &PoolConf) -> std::io::Result<Self> {
        let states = Arc::new(States::default());
        let found = Dns::resolve_now(&conf.upstreams)?;
        let dns = Dns {
            servers: conf.upstreams.clone(),
            states: states.clone(),
            last: Mutex::new(BTreeSet::new()),
            fresh: std::sync::atomic::AtomicBool::new(true),
        };
        *dns.last.lock().unwrap_or_else(|e| e.into_inner()) = dns.backends(&found);
        let backends = Backends::new(Box::new(dns));
        let ca: Option<Arc<CaType>> = conf.tls.as_ref().and_then(|t| t.ca.as_ref()).map(|ders| {
            let certs: Vec<WrappedX509> =
                ders.iter().map(|d| WrappedX509::new(d.clone(), parse_x509)).collect();
            Arc::from(certs.into_boxed_slice())
        });
        let lb = match conf.balance {
            Balance::Hash(_) => Lb::Hash(Self::built(LoadBalancer::from_backends(backends), conf, &ca)?),
            _ => Lb::RoundRobin(Self::built(LoadBalancer::from_backends(backends), conf, &ca)?),
        };
        let now = plugins::checks::now_ms();
        Ok(Self {
            name: name.to_string(),
            lb,
            conf: conf.clone(),
            states,
            ca,
            ca_key: conf.tls.as_ref().and_then(|t| t.ca.as_ref()).map_or(0, |ders| {
                let mut h = std::hash::DefaultHasher::new();
                std::hash::Hash::hash(&**ders, &mut h);
                std::hash::Hasher::finish(&h) | 1
            }),
            next_check_ms: AtomicU64::new(0),
            next_resolve_ms: AtomicU64::new(now + conf.resolve_interval.as_millis() as u64),
            turn: AtomicUsize::new(0),
        })
    }

    /// `lb` with its first membership (what the pool's build resolved) and its health check.
    fn built<S>(
        mut lb: LoadBalancer<S>,
        conf: &PoolConf,
        ca: &Option<Arc<CaType>>,
    ) -> std::io::Result<LoadBalancer<S>>
    where
        S: pingora_load_balancing::selection::BackendSelection + 'static,
        S::Iter: pingora_load_balancing::selection::BackendIter,
    {
        let first =
            lb.update().now_or_never().ok_or_else(|| std::io::Error::other("the first discovery waited"))?;
        first.map_err(|e| std::io::Error::other(e.to_string()))?;
        let bound = conf.health_check_interval.max(Duration::from_secs(1));
        let (connect, read) = (conf.connect_timeout.min(bound), conf.read_timeout.min(bound));
        match &conf.health_check_path {
            Some(path) => {
                let host = conf.health_check_host.as_deref().unwrap_or("localhost");
                let mut hc = HttpHealthCheck::new(host, conf.tls.is_some());
                if let Some(tls) = &conf.tls {
                    hc.peer_template.sni = tls.sni.clone();
                    hc.peer_template.options.verify_cert = tls.verify;
                    hc.peer_template.options.verify_hostname = tls.verify && !tls.sni.is_empty();
                    hc.peer_template.options.ca = ca.clone();
                }
                let mut req = RequestHeader::build("GET", path.as_bytes(), None)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                req.insert_header("host", host).map_err(|e| std::io::Error::other(e.to_string()))?;
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
        Ok(lb)
    }

    /// The pool's name (route name, or `order_writer`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many addresses it has now (names resolved).
    pub fn len(&self) -> usize {
        self.lb.backends().get_backend().len()
    }

    /// Whether it has no address (a name that resolved to none).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A peer on the address the pool's balancing picks for `req` from `client` among those in
    /// service (healthy, not set aside), with the pool's timeouts, and the request's place on
    /// it; `None` if none is in service.
    pub fn peer(
        &self,
        req: &RequestHeader,
        client: Option<std::net::IpAddr>,
    ) -> Option<(Box<HttpPeer>, InFlight)> {
        let now = plugins::checks::now_ms();
        let states = self.states.0.read().unwrap_or_else(|e| e.into_inner());
        let in_service = |b: &Backend, healthy: bool| {
            healthy && b.addr.as_inet().and_then(|a| states.get(a)).is_none_or(|s| !s.down(now))
        };
        let backend = match (&self.lb, &self.conf.balance) {
            (Lb::RoundRobin(lb), Balance::LeastConn) => self.least_conn(lb.backends(), &states, &in_service),
            (Lb::RoundRobin(lb), _) => lb.select_with(b"", 256, in_service),
            (Lb::Hash(lb), Balance::Hash(key)) => {
                lb.select_with(&hash_key(key, req, client), 256, in_service)
            }
            (Lb::Hash(lb), _) => lb.select_with(b"", 256, in_service),
        }?;
        let addr = *backend.addr.as_inet()?;
        let state = states.get(&addr)?.clone();
        state.in_flight.fetch_add(1, Ordering::Relaxed);
        drop(states);
        let counts = self.len() > 1;
        let mut peer = match &self.conf.tls {
            Some(tls) => self.tls_peer(addr, tls),
            None => HttpPeer::new(addr, false, String::new()),
        };
        peer.options.connection_timeout = Some(self.conf.connect_timeout);
        peer.options.read_timeout = Some(self.conf.read_timeout);
        peer.options.write_timeout = Some(self.conf.send_timeout);
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        peer.group_key = match self.ca_key {
            // Pingora's connection reuse does not tell CAs apart: a connection one pool's CA
            // checked must not serve a pool that trusts another (or the system's roots).
            0 => crate::threads::upstream_group_key(),
            ca => {
                let mut h = std::hash::DefaultHasher::new();
                std::hash::Hash::hash(&(crate::threads::upstream_group_key(), ca), &mut h);
                std::hash::Hasher::finish(&h)
            }
        };
        Some((Box::new(peer), InFlight { state, counts, failed: false.into() }))
    }

    /// An HTTPS peer: SNI and the certificate's name, the pool's CA when it has one.
    fn tls_peer(&self, addr: SocketAddr, tls: &crate::conf::upstream::UpstreamTls) -> HttpPeer {
        let mut peer = HttpPeer::new(addr, true, tls.sni.clone());
        peer.options.verify_cert = tls.verify;
        peer.options.verify_hostname = tls.verify && !tls.sni.is_empty();
        if let Some(ca) = &self.ca {
            peer.options.ca = Some(ca.clone());
        }
        peer
    }

    /// The address in service with the fewest requests in flight for its weight; ties go round
    /// robin (Nginx's `least_conn`).
    fn least_conn(
        &self,
        backends: &Backends,
        states: &HashMap<SocketAddr, Arc<AddrState>>,
        in_service: &dyn Fn(&Backend, bool) -> bool,
    ) -> Option<Backend> {
        let all = backends.get_backend();
        let n = all.len().max(1);
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % n;
        let load = |b: &Backend| {
            let busy = b
                .addr
                .as_inet()
                .and_then(|a| states.get(a))
                .map_or(0, |s| s.in_flight.load(Ordering::Relaxed));
            (busy as f64) / (b.weight.max(1) as f64)
        };
        let candidates = all.iter().cycle().skip(start).take(all.len());
        let ready = candidates.filter(|b| in_service(b, backends.ready(b)));
        ready.min_by(|a, b| load(a).total_cmp(&load(b))).cloned()
    }

    /// Runs a health check if this pool's interval has passed since the last one, and resolves
    /// its names again when their interval has.
    pub async fn check_if_due(&self, now_ms: u64) {
        if now_ms >= self.next_resolve_ms.load(Ordering::Acquire) {
            self.next_resolve_ms
                .store(now_ms + self.conf.resolve_interval.as_millis() as u64, Ordering::Release);
            let updated = match &self.lb {
                Lb::RoundRobin(lb) => lb.update().await,
                Lb::Hash(lb) => lb.update().await,
            };
            if let Err(e) = updated {
                tracing::warn!(pool = %self.name, error = %e, "resolving the pool's names failed");
            }
        }
        if now_ms < self.next_check_ms.load(Ordering::Acquire) {
            return;
        }
        self.next_check_ms
            .store(now_ms + self.conf.health_check_interval.as_millis() as u64, Ordering::Release);
        self.lb.backends().run_health_check(true).await;
    }
}

/// The bytes a hashing pool hashes for `req` from `client`.
fn hash_key(key: &HashKey, req: &RequestHeader, client: Option<std::net::IpAddr>) -> Vec<u8> {
    match key {
        HashKey::ClientIp => client.map(|ip| ip.to_string().into_bytes()).unwrap_or_default(),
        HashKey::Header(name) => {
            req.headers.get(name.as_str()).map(|v| v.as_bytes().to_vec()).unwrap_or_default()
        }
        HashKey::Cookie(name) => req
            .headers
            .get_all(http::header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|kv| kv.trim().split_once('='))
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_bytes().to_vec())
            .unwrap_or_default(),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn state(max_fails: u32) -> AddrState {
        AddrState {
            max_fails,
            fail_timeout_ms: 1_000,
            in_flight: AtomicUsize::new(0),
            fails: AtomicU32::new(0),
            window_start_ms: AtomicU64::new(0),
            down_until_ms: AtomicU64::new(0),
        }
    }

    #[test]
    fn failures_set_an_address_aside_and_only_a_success_clears_its_count_as_nginx() {
        let s = state(2);
        s.failed(100);
        s.succeeded(105); // within the window: the count stays (Nginx's `accessed < checked`)
        assert!(!s.down(110));
        s.failed(200);
        assert!(s.down(1_199) && !s.down(1_200), "aside for fail_timeout");
        s.failed(1_300);
        assert!(s.down(1_301), "back from aside: one failure sets it aside again");
        s.succeeded(2_400);
        s.failed(2_500);
        assert!(!s.down(2_501), "a success after it came back: max_fails failures again");
        s.failed(3_600); // a new window: one failure of two
        assert!(!s.down(3_601));
        let never = state(0);
        never.failed(1);
        assert!(!never.down(2), "max_fails=0: never aside");
    }
}
