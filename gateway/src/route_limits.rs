//! Per-route request-rate and connection limits with the meaning of Nginx's `limit_req` and
//! `limit_conn` (`[[limit_req_zone]]`, `[[limit_conn_zone]]` and a route's `limit_req`,
//! `limit_conn`).
//!
//! A request zone is Nginx's leaky bucket, with its integer arithmetic, per key: the rate in
//! milli-requests per second (`5r/s` → 5000, `1r/m` → 16, as Nginx truncates it); each key
//! keeps its `excess` (milli-requests) and the time of its last request. A request finds
//! `excess = max(excess - rate * ms / 1000 + 1000, 0)` with `ms` the milliseconds since the
//! key's last request; past `burst * 1000` it is rejected and the key is left as it was;
//! otherwise the excess is kept (and the time, when `ms` > 0: a leak rounded to 0 is lost, as in
//! Nginx) and the request waits `(excess - delay * 1000) / rate` seconds when its excess is past
//! the route's `delay` (0 by default; `nodelay`: never waits). A key's first request passes with
//! an excess of 0. A connection zone counts the requests in flight per key; a guard gives the
//! place back when the request ends, however it ends.
//!
//! Memory is bounded per zone by `max_keys`: a request zone forgets its least recently seen key
//! to make room (Nginx's zone forgets its oldest states when full too); a connection zone holds
//! only keys with requests in flight, and refuses a new key when full (Nginx's answer when its
//! zone has no room). Each zone is 16 shards, each an LRU map behind its own lock: a request
//! takes one lock for one lookup.

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lru::LruCache;
use pingora_http::RequestHeader;

use crate::conf::rates::{ConnZoneConf, LimitKey, ReqZoneConf};
use crate::conf::{RouteConf, ServerConf};

/// Shards of a zone (each its own lock).
const SHARDS: usize = 16;

/// A zone's key: the client's address as bytes, a header's value, a host name.
pub type Key = Box<[u8]>;

/// One key's bucket: its excess (milli-requests) and when it was last updated (ms).
#[derive(Debug, Clone, Copy)]
struct Bucket {
    excess: u64,
    last: u64,
}

/// What a request zone says of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// It passes now.
    Pass,
    /// It passes after this wait.
    Delay(Duration),
    /// It is rejected; its excess (milli-requests) was this.
    Reject(u64),
}

/// A `[[limit_req_zone]]`'s state: a leaky bucket per key.
pub struct ReqZone {
    rate: u64,
    epoch: Instant,
    hasher: RandomState,
    shards: Box<[Mutex<LruCache<Key, Bucket>>]>,
}

impl std::fmt::Debug for ReqZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReqZone").field("rate", &self.rate).finish_non_exhaustive()
    }
}

/// The capacity of each of a zone's shards for `max_keys` in all (at least 1).
fn per_shard(max_keys: usize) -> NonZeroUsize {
    NonZeroUsize::new(max_keys.div_ceil(SHARDS)).unwrap_or(NonZeroUsize::MIN)
}

impl ReqZone {
    /// A zone of `rate` milli-requests per second (Nginx's `rate`) keeping `max_keys` keys.
    pub fn new(rate: u64, max_keys: usize) -> Self {
        let cap = per_shard(max_keys);
        Self {
            rate: rate.max(1),
            epoch: Instant::now(),
            hasher: RandomState::new(),
            shards: (0..SHARDS).map(|_| Mutex::new(LruCache::new(cap))).collect(),
        }
    }

    /// Milliseconds since the zone was made.
    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A request of `key` at `now` (ms, [`ReqZone::now_ms`]) against `burst` and `delay`
    /// (milli-requests; `u64::MAX`: nodelay).
    pub fn check(&self, key: &[u8], now: u64, burst: u64, delay: u64) -> Verdict {
        let shard = &self.shards[self.hasher.hash_one(key) as usize % SHARDS];
        let mut map = shard.lock().unwrap_or_else(|e| e.into_inner());
        let excess = match map.get_mut(key) {
            Some(b) => {
                let ms = now.saturating_sub(b.last);
                let leaked = self.rate.saturating_mul(ms) / 1000;
                let excess = (b.excess + 1000).saturating_sub(leaked);
                if excess > burst {
                    return Verdict::Reject(excess);
                }
                b.excess = excess;
                if ms > 0 {
                    b.last = now;
                }
                excess
            }
            None => {
                map.push(key.into(), Bucket { excess: 0, last: now });
                0
            }
        };
        match excess.checked_sub(delay) {
            Some(over) if over > 0 => Verdict::Delay(Duration::from_millis(over * 1000 / self.rate)),
            _ => Verdict::Pass,
        }
    }

    /// Keys kept (for tests and the bound).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(|e| e.into_inner()).len()).sum()
    }

    /// Whether no key is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A `[[limit_conn_zone]]`'s state: the requests in flight per key.
pub struct ConnZone {
    cap: usize,
    hasher: RandomState,
    shards: Box<[Mutex<HashMap<Key, u32>>]>,
}

impl std::fmt::Debug for ConnZone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnZone").field("cap", &self.cap).finish_non_exhaustive()
    }
}

/// A request's place in a connection zone, given back when dropped.
pub struct ConnGuard {
    zone: Arc<ConnZone>,
    key: Key,
}

impl std::fmt::Debug for ConnGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnGuard(..)")
    }
}

impl ConnZone {
    /// A zone holding at most `max_keys` keys with requests in flight.
    pub fn new(max_keys: usize) -> Self {
        let cap = per_shard(max_keys).get();
        Self { cap, hasher: RandomState::new(), shards: (0..SHARDS).map(|_| Mutex::default()).collect() }
    }

    fn shard(&self, key: &[u8]) -> &Mutex<HashMap<Key, u32>> {
        &self.shards[self.hasher.hash_one(key) as usize % SHARDS]
    }

    /// A place for a request of `key` when fewer than `max` are in flight (and the zone has
    /// room for the key); `None`: rejected.
    pub fn acquire(self: &Arc<Self>, key: &[u8], max: u32) -> Option<ConnGuard> {
        let mut map = self.shard(key).lock().unwrap_or_else(|e| e.into_inner());
        let full = map.len() >= self.cap;
        match map.get_mut(key) {
            Some(n) if *n >= max => return None,
            Some(n) => *n += 1,
            None if full => return None,
            None => {
                map.insert(key.into(), 1);
            }
        }
        Some(ConnGuard { zone: Arc::clone(self), key: key.into() })
    }

    /// Requests of `key` in flight.
    pub fn in_flight(&self, key: &[u8]) -> u32 {
        self.shard(key).lock().unwrap_or_else(|e| e.into_inner()).get(key).copied().unwrap_or(0)
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let mut map = self.zone.shard(&self.key).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = map.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.key);
            }
        }
    }
}

/// The zones of one conf. A reload keeps the state of every zone whose name and settings are
/// unchanged (as Nginx keeps a shared zone of the same name and size across a reload).
#[derive(Debug, Default)]
pub struct Zones {
    req: Vec<(ReqZoneConf, Arc<ReqZone>)>,
    conn: Vec<(ConnZoneConf, Arc<ConnZone>)>,
}

impl Zones {
    /// The zones `server` names, the unchanged ones taken from `old`.
    pub fn new(server: &ServerConf, old: Option<&Zones>) -> Self {
        let req = server.limit_req_zones.iter().map(|z| {
            let kept = old.and_then(|o| o.req.iter().find(|(c, _)| c == z)).map(|(_, s)| Arc::clone(s));
            (z.clone(), kept.unwrap_or_else(|| Arc::new(ReqZone::new(z.rate, z.max_keys))))
        });
        let conn = server.limit_conn_zones.iter().map(|z| {
            let kept = old.and_then(|o| o.conn.iter().find(|(c, _)| c == z)).map(|(_, s)| Arc::clone(s));
            (z.clone(), kept.unwrap_or_else(|| Arc::new(ConnZone::new(z.max_keys))))
        });
        Self { req: req.collect(), conn: conn.collect() }
    }
}

/// What a request's zone keys are made of.
#[derive(Debug, Clone, Copy)]
pub struct KeySource<'a> {
    /// The client's address (`[server] trusted_proxies` applied).
    pub client: Option<IpAddr>,
    /// The request.
    pub req: &'a RequestHeader,
}

/// The key of `req` in a zone keyed by `k` on `route`; `None` (an empty value) is not limited,
/// as in Nginx.
fn key(k: &LimitKey, src: &KeySource<'_>, route: &RouteConf) -> Option<Vec<u8>> {
    let bytes = match k {
        LimitKey::RemoteAddr => match src.client? {
            IpAddr::V4(a) => a.octets().to_vec(),
            IpAddr::V6(a) => a.octets().to_vec(),
        },
        LimitKey::Header(name) => src.req.headers.get(name)?.as_bytes().to_vec(),
        LimitKey::ServerName => route.hosts.first()?.key().into_bytes(),
    };
    // Nginx does not count an empty key, and refuses to count one past 65535 bytes.
    (!bytes.is_empty() && bytes.len() <= 65_535).then_some(bytes)
}

/// What the route's limits decided.
#[derive(Debug)]
pub enum Outcome {
    /// The request goes on, holding its place in the route's connection zone (if any).
    Pass(Option<ConnGuard>),
    /// The request is answered with `status`: `limit` (`limit_req`, `limit_conn`) of `zone`.
    Rejected {
        /// The answer's status.
        status: u16,
        /// Which limit.
        limit: &'static str,
        /// The zone's name.
        zone: String,
    },
}

/// Applies `route`'s `limit_req` (waiting out its delay) and then its `limit_conn`, in
/// Nginx's order.
pub async fn apply(zones: &Zones, route: &RouteConf, src: &KeySource<'_>) -> Outcome {
    if let Some(l) = &route.limit_req {
        if let Some((conf, zone)) = zones.req.get(l.zone) {
            if let Some(k) = key(&conf.key, src, route) {
                match zone.check(&k, zone.now_ms(), l.burst, l.delay) {
                    Verdict::Pass => {}
                    Verdict::Delay(d) => tokio::time::sleep(d).await,
                    Verdict::Reject(_) => {
                        return Outcome::Rejected {
                            status: l.status,
                            limit: "limit_req",
                            zone: conf.name.clone(),
                        }
                    }
                }
            }
        }
    }
    let Some(l) = &route.limit_conn else { return Outcome::Pass(None) };
    let Some((conf, zone)) = zones.conn.get(l.zone) else { return Outcome::Pass(None) };
    let Some(k) = key(&conf.key, src, route) else { return Outcome::Pass(None) };
    match zone.acquire(&k, l.max) {
        Some(guard) => Outcome::Pass(Some(guard)),
        None => Outcome::Rejected { status: l.status, limit: "limit_conn", zone: conf.name.clone() },
    }
}

#[cfg(test)]
mod tests;
