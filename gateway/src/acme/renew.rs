//! The life of one `[[tls.acme]]` entry: serve what the store holds, order a certificate when
//! none is there or the one there is two thirds through its lifetime (under the store's lock,
//! looking again once it is held), and retry a failure with a doubling wait. The wait is
//! written in the store (`retry`: not before when, after how many failures), so the gateways
//! sharing it wait it together and the count doubles across them: the ACME server sees one
//! attempt per wait, however many gateways there are.

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
    let mut failures = 0u32;
    loop {
        let wait = match step(&entry, &store, &live).await {
            Ok(next) => {
                failures = 0;
                next
            }
            Err(e) => {
                // The store itself failed (no marker can be written): this gateway's own count.
                failures += 1;
                failed(&entry.conf, &e, failures)
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

/// Counts and logs failure number `failures`; returns the wait before the next attempt.
fn failed(conf: &AcmeConf, e: &anyhow::Error, failures: u32) -> Duration {
    let name = conf.name();
    metrics::get().failures.with_label_values(&[name]).inc();
    let wait = backoff(conf, failures);
    tracing::error!(
        cert = %name, error = format!("{e:#}"), failures, retry_in_secs = wait.as_secs(),
        "ACME attempt failed; the certificate served now (if any) stays"
    );
    wait
}

/// One look: serves what is stored; orders when it is due, no failure asks to wait (the
/// store's retry marker, shared by its gateways) and this gateway gets the lock. Returns how
/// long to sleep before the next look.
async fn step(entry: &Entry, store: &Store, live: &Live) -> anyhow::Result<Duration> {
    if let Some(wait) = wait_for(entry, store, live) {
        return Ok(wait);
    }
    let Some(_lock) = store.try_lock().context("the store's lock")? else {
        tracing::debug!(cert = %entry.conf.name(), "another gateway is ordering; looking again soon");
        return Ok(LOCK_POLL);
    };
    // Held: another gateway may have stored a certificate, or failed, since the look above.
    if let Some(wait) = wait_for(entry, store, live) {
        return Ok(wait);
    }
    match attempt(entry, store, live).await {
        Ok(s) => {
            keep_retry(entry, store, None);
            Ok(until_due(&s))
        }
        Err(e) => {
            // Recent failures of any gateway of the store count: the wait doubles across them.
            // A marker older than the longest wait plus an attempt is from an earlier streak.
            let window = (entry.conf.retry_max + ATTEMPT).as_secs() as i64;
            let recent = store.retry().filter(|r| now() < r.not_before + window);
            let failures = recent.map_or(0, |r| r.failures) + 1;
            let wait = failed(&entry.conf, &e, failures);
            keep_retry(entry, store, Some((now() + wait.as_secs() as i64, failures)));
            Ok(wait)
        }
    }
}

/// Writes (or removes) the store's retry marker; a store that refuses is logged, not counted
/// as an ACME failure (the wait is then this gateway's alone).
fn keep_retry(entry: &Entry, store: &Store, retry: Option<(i64, u32)>) {
    if let Err(e) = store.set_retry(retry) {
        tracing::warn!(cert = %entry.conf.name(), error = %e, "ACME: cannot write the store's retry marker");
    }
}

/// How long to wait before ordering: until the stored certificate is due, or until the store's
/// retry marker allows; `None`: order now.
fn wait_for(entry: &Entry, store: &Store, live: &Live) -> Option<Duration> {
    if let Some(s) = stored(entry, store, live) {
        if !due(&s) {
            return Some(until_due(&s));
        }
    }
    let retry = store.retry().filter(|r| r.not_before > now())?;
    Some(Duration::from_secs((retry.not_before - now()) as u64).min(LOOK_AGAIN))
}

/// One order, stored and served.
async fn attempt(entry: &Entry, store: &Store, live: &Live) -> anyhow::Result<Stored> {
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
    Ok(s)
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
