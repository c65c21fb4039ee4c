//! The store of one `[[tls.acme]]` entry: `<store>/<host>/cert.pem` and `key.pem` (the key
//! readable by the owner only), the entry's lock (`<store>/<host>/lock`, `flock(2)`), and the
//! pending challenges every gateway sharing the store answers (`<store>/challenges/<token>`).
//! Files are written beside their place and renamed into it, so a reader sees the old file or
//! the new one; a reader that catches a new key beside the old certificate sees a pair that does
//! not match, treats the entry as not stored, and finds the writer's lock taken.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use pingora_rustls::sign::CertifiedKey;

use crate::certs;

/// A stored certificate that pairs with its key and covers the entry's names.
pub(super) struct Stored {
    pub pair: Arc<CertifiedKey>,
    /// The leaf's serial number, hex.
    pub serial: String,
    pub not_before: i64,
    pub not_after: i64,
}

impl Stored {
    /// When it is due for renewal: two thirds into its lifetime (Unix time).
    pub fn renew_at(&self) -> i64 {
        self.not_before + (self.not_after - self.not_before) * 2 / 3
    }
}

/// The store's retry marker: no attempt before `not_before` (Unix time), after `failures`
/// failed ones in a row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Retry {
    pub not_before: i64,
    pub failures: u32,
}

/// The files of one entry.
pub(super) struct Store {
    dir: PathBuf,
    challenges: PathBuf,
}

/// The lock of an entry, held while the value lives (the kernel releases it with the file).
pub(super) struct Lock(#[allow(dead_code)] File);

/// A token as RFC 8555 writes them (base64url), checked before it names a file.
pub(super) fn token_ok(token: &str) -> bool {
    (1..=128).contains(&token.len())
        && token.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The key authorization another gateway sharing `store` wrote for `token`.
pub(super) fn read_challenge(store: &Path, token: &str) -> Option<String> {
    std::fs::read_to_string(store.join("challenges").join(token)).ok()
}

impl Store {
    pub fn new(store: &Path, name: &str) -> Self {
        Self { dir: store.join(name), challenges: store.join("challenges") }
    }

    pub fn cert_file(&self) -> PathBuf {
        self.dir.join("cert.pem")
    }

    fn key_file(&self) -> PathBuf {
        self.dir.join("key.pem")
    }

    /// The stored certificate, when there is one that pairs with its key and lists every name of
    /// `hosts`; `Err` says why what is there cannot be served (nothing there: `Ok(None)`).
    pub fn read(&self, hosts: &[String]) -> Result<Option<Stored>, String> {
        if !self.cert_file().exists() {
            return Ok(None);
        }
        let pair = certs::load_pair(&self.cert_file(), &self.key_file())?;
        let leaf = pair.cert.first().ok_or("no certificate in the chain")?;
        let (_, x509) = x509_parser::parse_x509_certificate(leaf.as_ref())
            .map_err(|e| format!("bad certificate: {e}"))?;
        let names: Vec<String> = match x509.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_ascii_lowercase()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        if let Some(missing) = hosts.iter().find(|h| !names.contains(h)) {
            return Err(format!("the stored certificate does not name {missing}"));
        }
        let validity = x509.validity();
        Ok(Some(Stored {
            serial: x509.raw_serial_as_string().replace(':', ""),
            not_before: validity.not_before.timestamp(),
            not_after: validity.not_after.timestamp(),
            pair,
        }))
    }

    /// Writes a new key and chain (PEM) in place of the stored ones.
    pub fn write(&self, chain_pem: &str, key_pem: &str) -> std::io::Result<()> {
        std::fs::create_dir_all(&self.dir)?;
        replace(&self.key_file(), key_pem.as_bytes(), 0o600)?;
        replace(&self.cert_file(), chain_pem.as_bytes(), 0o644)
    }

    /// The retry marker, when a failed attempt left one.
    pub fn retry(&self) -> Option<Retry> {
        let text = std::fs::read_to_string(self.dir.join("retry")).ok()?;
        let (at, failures) = text.trim().split_once(' ')?;
        Some(Retry { not_before: at.parse().ok()?, failures: failures.parse().ok()? })
    }

    /// Writes the retry marker (`not_before`, `failures`), or removes it (`None`).
    pub fn set_retry(&self, retry: Option<(i64, u32)>) -> std::io::Result<()> {
        let file = self.dir.join("retry");
        match retry {
            Some((at, failures)) => replace(&file, format!("{at} {failures}\n").as_bytes(), 0o644),
            None => std::fs::remove_file(&file).or_else(not_found_ok),
        }
    }

    /// Takes the entry's lock if no other process holds it.
    pub fn try_lock(&self) -> std::io::Result<Option<Lock>> {
        std::fs::create_dir_all(&self.dir)?;
        let file = OpenOptions::new().create(true).truncate(false).write(true).open(self.dir.join("lock"))?;
        match file.try_lock() {
            Ok(()) => {
                // Who holds it, for a person looking at the store (the lock is the flock).
                let _ = file.set_len(0);
                let _ =
                    writeln!(&file, "pid {} since {}", std::process::id(), chrono::Utc::now().to_rfc3339());
                Ok(Some(Lock(file)))
            }
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    /// Publishes a challenge's key authorization for every gateway of the store (`None`:
    /// removes it).
    pub fn set_challenge(&self, token: &str, key_auth: Option<&str>) -> std::io::Result<()> {
        let file = self.challenges.join(token);
        match key_auth {
            Some(k) => {
                std::fs::create_dir_all(&self.challenges)?;
                replace(&file, k.as_bytes(), 0o644)
            }
            None => std::fs::remove_file(&file).or_else(not_found_ok),
        }
    }
}

fn not_found_ok(e: std::io::Error) -> std::io::Result<()> {
    match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

/// Writes `bytes` to a new file beside `path` (mode `mode`), then renames it into place.
fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", std::process::id()));
    let mut f = OpenOptions::new().create(true).truncate(true).write(true).mode(mode).open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_that_could_name_another_file_are_refused() {
        assert!(token_ok("LoqXcYV8q5ONbJQxbmR7SCTNo3tiAXDfowyjxAjEuX0"));
        for bad in ["", "../key.pem", "a/b", "a.b", &"x".repeat(129)] {
            assert!(!token_ok(bad), "{bad}");
        }
    }

    #[test]
    fn one_lock_holder_at_a_time_the_lock_goes_with_its_holder_and_the_retry_marker_is_shared() {
        let dir = std::env::temp_dir().join(format!("acme-lock-{}", uuid::Uuid::new_v4()));
        let (a, b) = (Store::new(&dir, "shop.test"), Store::new(&dir, "shop.test"));
        let held = a.try_lock().unwrap().expect("the first takes it");
        assert!(b.try_lock().unwrap().is_none(), "a second open file of the same lock is refused");
        drop(held);
        assert!(b.try_lock().unwrap().is_some(), "free again once its holder is gone");
        assert_eq!(a.retry(), None);
        a.set_retry(Some((1_800_000_000, 3))).unwrap();
        assert_eq!(b.retry(), Some(Retry { not_before: 1_800_000_000, failures: 3 }), "shared by the store");
        a.set_retry(None).unwrap();
        a.set_retry(None).unwrap();
        assert_eq!(b.retry(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
