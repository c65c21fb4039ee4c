//! The life of one `[[tls.acme]]` entry: serve what the store holds, order a certificate when
//! none is there or the one there is two thirds through its lifetime (under the store's lock,
//! looking again once it is held), and retry a failure with a doubling wait.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use pingora_core::server::ShutdownWatch;

use super::store::{Store, Stored};
use super::{issue, metrics, Live};
use crate::conf::acme::AcmeConf;

/// How often a gateway looks again while another holds the entry's lock.
const LOCK_POLL: Duration = Duration::from_secs(1);
/// The longest sleep between two looks at the store (a certificate another gateway stored
/// early, or one put there by hand, is served within it).
const LOOK_AGAIN: Duration = Duration::from_secs(600);
/// One attempt's bound (account, order, validation, signature).
const ATTEMPT: Duration = Duration::from_secs(300);

/// An entry and its place in the conf.
pub(super) struct Entry {
    pub index: usize,
    pub conf: AcmeConf,
}

/// Keeps the entry's certificate served and renewed until shutdown.
pub(super) async fn run(entry: Entry, live: Arc<Live>, mut shutdown: ShutdownWatch) {
    let store = Store::new(&entry.conf.store, entry.conf.name());
    let name = entry.conf.name().to_string();
    let mut failures = 0u32;
    loop {
        let wait = match step(&entry, &store, &live).await {
            Ok(next) => {
                failures = 0;
                next
            }
            Err(e) => {
                failures += 1;
                metrics::get().failures.with_label_values(&[name.as_str()]).inc();
                let wait = backoff(&entry.conf, failures);
                tracing::error!(
                    cert = %name, error = format!("{e:#}"), failures, retry_in_secs = wait.as_secs(),
                    "ACME attempt failed; the certificate served now (if any) stays"
                );
                wait
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// `retry_min` doubled per failure after the first, at most `retry_max`.
fn backoff(conf: &AcmeConf, failures: u32) -> Duration {
    let factor = 2u32.saturating_pow(failures.saturating_sub(1).min(20));
    conf.retry_min.saturating_mul(factor).min(conf.retry_max)
}

/// One look: serves what is stored; orders when it is due and this gateway gets the lock.
/// Returns how long to sleep before the next look.
async fn step(entry: &Entry, store: &Store, live: &Live) -> anyhow::Result<Duration> {
    if let Some(s) = stored(entry, store, live) {
        if !due(&s) {
            return Ok(until_due(&s));
        }
    }
    let Some(_lock) = store.try_lock().context("the store's lock")? else {
        tracing::debug!(cert = %entry.conf.name(), "another gateway is ordering; looking again soon");
        return Ok(LOCK_POLL);
    };
    // Held: another gateway may have stored a new certificate since the look above.
    if let Some(s) = stored(entry, store, live) {
        if !due(&s) {
            return Ok(until_due(&s));
        }
    }
    let name = entry.conf.name();
    metrics::get().attempts.with_label_values(&[name]).inc();
    tracing::info!(cert = %name, hosts = ?entry.conf.hosts, directory = %entry.conf.directory, "ACME: ordering a certificate");
    let started = std::time::Instant::now();
    let (chain, key) = tokio::time::timeout(ATTEMPT, issue::order(&entry.conf, store, live))
        .await
        .context("the attempt timed out")??;
    store.write(&chain, &key).context("writing the certificate to the store")?;
    let s = stored(entry, store, live).context("the certificate just stored cannot be read back")?;
    metrics::get().issued.with_label_values(&[name]).inc();
    tracing::info!(
        cert = %name, serial = %s.serial, not_after = s.not_after, took_ms = started.elapsed().as_millis() as u64,
        "ACME: certificate issued and served"
    );
    Ok(until_due(&s))
}

/// What the store holds, served when it is new to this gateway; `None` when nothing usable is
/// there (why is logged).
fn stored(entry: &Entry, store: &Store, live: &Live) -> Option<Stored> {
    let name = entry.conf.name();
    match store.read(&entry.conf.hosts) {
        Ok(Some(s)) if s.not_after > now() => {
            if live.serve(entry.index, &entry.conf.hosts, &s) {
                metrics::get().not_after.with_label_values(&[name]).set(s.not_after);
                tracing::info!(cert = %name, serial = %s.serial, not_after = s.not_after, renew_at = s.renew_at(), "ACME: serving the stored certificate");
            }
            Some(s)
        }
        Ok(Some(_)) | Ok(None) => None,
        Err(e) => {
            tracing::warn!(cert = %name, file = %store.cert_file().display(), error = %e, "ACME: the stored certificate is not usable");
            None
        }
    }
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn due(s: &Stored) -> bool {
    now() >= s.renew_at()
}

fn until_due(s: &Stored) -> Duration {
    let secs = (s.renew_at() - now()).max(1) as u64;
    Duration::from_secs(secs).min(LOOK_AGAIN)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_the_minimum_to_the_maximum() {
        let conf = crate::acme::tests::conf(Duration::from_secs(2), Duration::from_secs(20));
        let waits: Vec<u64> = (1..=6).map(|f| backoff(&conf, f).as_secs()).collect();
        assert_eq!(waits, [2, 4, 8, 16, 20, 20]);
        assert_eq!(backoff(&conf, u32::MAX), Duration::from_secs(20));
    }
}
