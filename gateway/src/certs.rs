//! The certificates of a conf: PEM pairs read and checked ([`load_pair`]) and the table that
//! picks one per host name (SNI, [`CertTable`]). Read by the server file's `[tls]` check and
//! used by the TLS listener's resolver (`crate::tls`); it knows nothing of either.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use pingora_rustls::sign::CertifiedKey;
use pingora_rustls::CryptoProvider;

/// The certificates of the conf, by host name.
pub struct CertTable {
    exact: HashMap<String, Arc<CertifiedKey>>,
    /// `*.example.com` is stored as `example.com`.
    wildcard: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl std::fmt::Debug for CertTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertTable")
            .field("exact", &self.exact.keys().collect::<Vec<_>>())
            .field("wildcard", &self.wildcard.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// Reads a PEM certificate chain and its PEM private key, and checks that they belong together.
pub fn load_pair(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, String> {
    pingora_rustls::install_default_crypto_provider();
    for p in [cert, key] {
        std::fs::metadata(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    }
    let (chain, key_der) =
        pingora_rustls::load_certs_and_key_files(&cert.to_string_lossy(), &key.to_string_lossy())
            .map_err(|e| format!("cannot read the PEM files: {e}"))?
            .ok_or_else(|| {
                format!(
                    "{} must hold a PEM certificate chain and {} a PEM private key",
                    cert.display(),
                    key.display()
                )
            })?;
    let provider = CryptoProvider::get_default().ok_or("no TLS crypto provider")?;
    let pair = CertifiedKey::from_der(chain, key_der, provider)
        .map_err(|e| format!("the certificate and the key do not make a pair: {e}"))?;
    Ok(Arc::new(pair))
}

impl CertTable {
    /// A table of `(host names, certificate)` entries; the first entry is the default.
    /// Names are matched without case; `*.example.com` matches one label under it.
    pub fn new(entries: Vec<(Vec<String>, Arc<CertifiedKey>)>) -> Option<Self> {
        let default = Arc::clone(&entries.first()?.1);
        let (mut exact, mut wildcard) = (HashMap::new(), HashMap::new());
        for (hosts, pair) in entries {
            for host in hosts {
                let host = host.to_ascii_lowercase();
                match host.strip_prefix("*.") {
                    Some(parent) => wildcard.entry(parent.to_string()).or_insert_with(|| Arc::clone(&pair)),
                    None => exact.entry(host).or_insert_with(|| Arc::clone(&pair)),
                };
            }
        }
        Some(Self { exact, wildcard, default })
    }

    /// The certificate for a client's SNI name (the default when none matches).
    pub fn pick(&self, sni: Option<&str>) -> Arc<CertifiedKey> {
        let Some(name) = sni.map(|s| s.trim_end_matches('.').to_ascii_lowercase()) else {
            return Arc::clone(&self.default);
        };
        let parent = name.split_once('.').map(|(_, p)| p);
        self.exact
            .get(&name)
            .or_else(|| parent.and_then(|p| self.wildcard.get(p)))
            .map_or_else(|| Arc::clone(&self.default), Arc::clone)
    }
}
