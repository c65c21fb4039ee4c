//! Certificates by ACME (RFC 8555, [`instant_acme`]): for each `[[tls.acme]]` entry the gateway
//! takes the certificate from its store when a valid one is there, or orders one, answering the
//! HTTP-01 challenge on its own plain listeners (`/.well-known/acme-challenge/<token>` on
//! `server.listen` and `tls.redirect_listen`), and renews it at two thirds of its lifetime.
//!
//! - **Served without a restart:** a certificate enters [`Live`], which the SNI resolver
//!   (`crate::tls`) reads at every handshake; connections already open keep theirs.
//! - **Several gateways, one store:** the store (a folder, shared by the gateways that serve
//!   the same names: the same disk, or NFS) holds each certificate and key, an exclusive lock
//!   per entry (`flock(2)` on `<store>/<host>/lock`: released by the kernel when its holder
//!   exits or dies, so a lock is never stale) and the pending challenges
//!   (`<store>/challenges/<token>`, so whichever gateway the ACME server reaches answers).
//!   Only the lock's holder orders; the others read the certificate it stored.
//! - **Failures:** an attempt that fails is logged and counted
//!   (`seckill_gateway_acme_failures_total`), then retried after `retry_min_secs`, doubled up
//!   to `retry_max_secs`; the certificate served until then stays.
//!
//! The work runs as a Pingora background service ([`AcmeService`]), one task per entry.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use async_trait::async_trait;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::BackgroundService;
use pingora_rustls::sign::CertifiedKey;

use crate::conf::acme::AcmeConf;

mod issue;
mod metrics;
mod renew;
mod store;

/// Where the ACME server asks for an HTTP-01 key authorization.
pub const CHALLENGE_PREFIX: &str = "/.well-known/acme-challenge/";

/// The ACME certificates being served, and the challenges being answered.
#[derive(Debug, Default)]
pub struct Live {
    table: ArcSwap<Table>,
    /// Each entry's certificate, by entry index (the table is rebuilt from it).
    entries: Mutex<Vec<Option<Served>>>,
    challenges: Mutex<HashMap<String, String>>,
    /// The stores whose `challenges/` folder other gateways write to.
    stores: Vec<PathBuf>,
}

#[derive(Debug, Clone)]
struct Served {
    hosts: Vec<String>,
    pair: Arc<CertifiedKey>,
    serial: String,
}

#[derive(Debug, Default)]
struct Table {
    by_host: HashMap<String, Arc<CertifiedKey>>,
    first: Option<Arc<CertifiedKey>>,
}

impl Live {
    /// The live table of the `[[tls.acme]]` entries (empty until certificates arrive).
    pub fn new(entries: &[AcmeConf]) -> Self {
        let mut stores: Vec<PathBuf> = entries.iter().map(|e| e.store.clone()).collect();
        stores.dedup();
        Self { entries: Mutex::new(vec![None; entries.len()]), stores, ..Self::default() }
    }

    /// The certificate for an SNI name one entry lists.
    pub fn pick(&self, sni: Option<&str>) -> Option<Arc<CertifiedKey>> {
        let name = sni?.trim_end_matches('.').to_ascii_lowercase();
        self.table.load().by_host.get(&name).cloned()
    }

    /// The first entry's certificate that is there: the default when no `[[tls.cert]]` is.
    pub fn default_cert(&self) -> Option<Arc<CertifiedKey>> {
        self.table.load().first.clone()
    }

    /// Serves `stored` for entry `index`'s `hosts` from the next handshake on; `false` when it
    /// is served already.
    fn serve(&self, index: usize, hosts: &[String], stored: &store::Stored) -> bool {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = entries.get_mut(index) else { return false };
        if slot.as_ref().is_some_and(|s| s.serial == stored.serial) {
            return false;
        }
        let pair = Arc::clone(&stored.pair);
        *slot = Some(Served { hosts: hosts.to_vec(), pair, serial: stored.serial.clone() });
        let mut table = Table::default();
        for served in entries.iter().flatten() {
            table.first.get_or_insert_with(|| Arc::clone(&served.pair));
            for h in &served.hosts {
                table.by_host.insert(h.clone(), Arc::clone(&served.pair));
            }
        }
        self.table.store(Arc::new(table));
        true
    }

    /// The key authorization to answer a request for `path`, when it asks for a challenge this
    /// gateway, or another sharing its store, is answering.
    pub fn challenge(&self, path: &str) -> Option<String> {
        if self.stores.is_empty() {
            return None;
        }
        let token = path.strip_prefix(CHALLENGE_PREFIX)?;
        if !store::token_ok(token) {
            return None;
        }
        let mine = self.challenges.lock().unwrap_or_else(|p| p.into_inner()).get(token).cloned();
        mine.or_else(|| self.stores.iter().find_map(|s| store::read_challenge(s, token)))
    }

    fn set_challenge(&self, token: &str, key_auth: Option<&str>) {
        let mut all = self.challenges.lock().unwrap_or_else(|p| p.into_inner());
        match key_auth {
            Some(k) => all.insert(token.to_string(), k.to_string()),
            None => all.remove(token),
        };
    }
}

/// The background service that keeps every `[[tls.acme]]` certificate issued and renewed.
pub struct AcmeService {
    entries: Vec<AcmeConf>,
    live: Arc<Live>,
}

impl AcmeService {
    /// The service for `entries`, serving through `live`.
    pub fn new(entries: Vec<AcmeConf>, live: Arc<Live>) -> Self {
        metrics::register();
        Self { entries, live }
    }
}

#[async_trait]
impl BackgroundService for AcmeService {
    async fn start(&self, shutdown: ShutdownWatch) {
        pingora_rustls::install_default_crypto_provider();
        let tasks = self.entries.iter().enumerate().map(|(index, entry)| {
            renew::run(renew::Entry { index, conf: entry.clone() }, Arc::clone(&self.live), shutdown.clone())
        });
        futures::future::join_all(tasks).await;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::conf::acme::AccountKey;

    /// An entry for unit tests (nothing is ordered with it).
    pub(crate) fn conf(retry_min: Duration, retry_max: Duration) -> AcmeConf {
        AcmeConf {
            hosts: vec!["shop.test".into()],
            contact: Vec::new(),
            directory: "https://127.0.0.1:14000/dir".into(),
            directory_ca_file: None,
            account_key: AccountKey::for_tests(),
            store: std::env::temp_dir(),
            profile: None,
            retry_min,
            retry_max,
        }
    }

    #[test]
    fn a_challenge_is_answered_for_its_token_only() {
        let live = Live::new(&[conf(Duration::from_secs(1), Duration::from_secs(2))]);
        live.set_challenge("tok-1", Some("tok-1.thumb"));
        assert_eq!(live.challenge("/.well-known/acme-challenge/tok-1").as_deref(), Some("tok-1.thumb"));
        assert_eq!(live.challenge("/.well-known/acme-challenge/tok-2"), None);
        assert_eq!(live.challenge("/.well-known/acme-challenge/../etc"), None);
        assert_eq!(live.challenge("/tok-1"), None);
        live.set_challenge("tok-1", None);
        assert_eq!(live.challenge("/.well-known/acme-challenge/tok-1"), None);
        assert_eq!(Live::new(&[]).challenge("/.well-known/acme-challenge/tok-1"), None, "no ACME, no lookup");
    }
}
