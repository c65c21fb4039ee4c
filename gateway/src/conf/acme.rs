//! `[[tls.acme]]`: certificates the gateway gets and renews itself from an ACME (RFC 8555)
//! server, answering HTTP-01 on its own plain listeners (`crate::acme`). Each entry names its
//! host names, the directory URL, the account key by reference (`env:` or `file:`, a PKCS#8 PEM
//! P-256 key), the folder the certificates are stored in (shared by every gateway that serves
//! the same names), and for a private ACME server its CA file. Checked at load like every
//! other table: the key is read and parsed, the CA file read, the store's place checked.

use std::path::{Path, PathBuf};
use std::time::Duration;

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{Checker, S};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAcme {
    hosts: S<Vec<S<String>>>,
    #[serde(default)]
    contact: Vec<S<String>>,
    directory: S<String>,
    #[serde(default)]
    directory_ca_file: Option<S<String>>,
    account_key: S<String>,
    store: S<String>,
    #[serde(default)]
    profile: Option<S<String>>,
    #[serde(default = "d_retry_min")]
    retry_min_secs: S<i64>,
    #[serde(default = "d_retry_max")]
    retry_max_secs: S<i64>,
}

fn d_retry_min() -> S<i64> {
    super::spanned(60)
}
fn d_retry_max() -> S<i64> {
    super::spanned(6 * 3600)
}

/// The ACME account's private key (PKCS#8 DER); `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct AccountKey(Vec<u8>);

impl AccountKey {
    /// The PKCS#8 DER bytes, for the ACME client.
    pub fn pkcs8_der(&self) -> &[u8] {
        &self.0
    }

    /// A key with no use, for unit tests of what carries the conf.
    #[cfg(test)]
    pub(crate) fn for_tests() -> Self {
        Self(Vec::new())
    }
}

impl std::fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AccountKey(<redacted>)")
    }
}

/// One validated `[[tls.acme]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcmeConf {
    /// Host names of the certificate (lowercase, no wildcard: HTTP-01 cannot prove one); the
    /// first names its folder in the store.
    pub hosts: Vec<String>,
    /// Contact URLs of the account (`mailto:ops@shop.example`).
    pub contact: Vec<String>,
    /// The ACME server's directory URL (`https://`).
    pub directory: String,
    /// The CA certificate (PEM) the directory's own HTTPS certificate chains to, for a private
    /// ACME server such as Pebble; `None`: the system's roots.
    pub directory_ca_file: Option<PathBuf>,
    /// The account key.
    pub account_key: AccountKey,
    /// The folder certificates, keys, the lock and pending challenges are kept in.
    pub store: PathBuf,
    /// The ACME profile to ask for (a server's names, e.g. Let's Encrypt's `shortlived`).
    pub profile: Option<String>,
    /// The first wait after a failed attempt; doubled after each failure up to `retry_max`.
    pub retry_min: Duration,
    /// The longest wait between two attempts.
    pub retry_max: Duration,
}

impl AcmeConf {
    /// The entry's name: its first host (its folder in the store, its metrics' label).
    pub fn name(&self) -> &str {
        &self.hosts[0]
    }
}

/// Checks the `[[tls.acme]]` entries; `static_hosts` are the `[[tls.cert]]` names (a name is
/// served by one entry only).
pub(super) fn check(
    c: &Checker<'_>,
    raw: &[RawAcme],
    base: &Path,
    static_hosts: &[String],
) -> Result<Vec<AcmeConf>, ConfError> {
    let mut seen: Vec<String> = static_hosts.to_vec();
    let mut out = Vec::new();
    for (i, entry) in raw.iter().enumerate() {
        let field = |name: &str| format!("tls.acme[{i}].{name}");
        let hosts = hosts(c, entry, &field("hosts"), &mut seen)?;
        out.push(AcmeConf {
            hosts,
            contact: contacts(c, &entry.contact, &field("contact"))?,
            directory: directory(c, &entry.directory, &field("directory"))?,
            directory_ca_file: ca_file(c, &entry.directory_ca_file, base, &field("directory_ca_file"))?,
            account_key: account_key(c, &entry.account_key, &field("account_key"))?,
            store: store(c, &entry.store, base, &field("store"))?,
            profile: entry.profile.as_ref().map(|p| p.get_ref().clone()),
            retry_min: c.secs(&entry.retry_min_secs, &field("retry_min_secs"), 1, 3600)?,
            retry_max: c.secs(&entry.retry_max_secs, &field("retry_max_secs"), 1, 86_400)?,
        });
        if out[i].retry_max < out[i].retry_min {
            let msg = "must be at least retry_min_secs";
            return Err(c.err(entry.retry_max_secs.span(), &field("retry_max_secs"), msg));
        }
    }
    Ok(out)
}

fn hosts(
    c: &Checker<'_>,
    raw: &RawAcme,
    field: &str,
    seen: &mut Vec<String>,
) -> Result<Vec<String>, ConfError> {
    if raw.hosts.get_ref().is_empty() {
        return Err(c.err(raw.hosts.span(), field, "must list at least one host name"));
    }
    let mut hosts = Vec::new();
    for h in raw.hosts.get_ref() {
        let name = h.get_ref().to_ascii_lowercase();
        let why = if name.starts_with("*.") {
            Some("a wildcard needs DNS-01, which the gateway does not answer".to_string())
        } else if !super::matching::host_ok(&name) {
            Some(format!("{:?} is not a host name", h.get_ref()))
        } else if seen.contains(&name) {
            Some(format!("{name} is already served by another [[tls.cert]] or [[tls.acme]] entry"))
        } else {
            None
        };
        if let Some(why) = why {
            return Err(c.err(h.span(), field, why));
        }
        seen.push(name.clone());
        hosts.push(name);
    }
    Ok(hosts)
}

fn contacts(c: &Checker<'_>, raw: &[S<String>], field: &str) -> Result<Vec<String>, ConfError> {
    raw.iter()
        .map(|v| match v.get_ref().strip_prefix("mailto:") {
            Some(addr) if addr.contains('@') && !addr.contains(char::is_whitespace) => {
                Ok(v.get_ref().clone())
            }
            _ => Err(c.err(v.span(), field, format!("{:?} is not a mailto: URL", v.get_ref()))),
        })
        .collect()
}

fn directory(c: &Checker<'_>, v: &S<String>, field: &str) -> Result<String, ConfError> {
    let url = v.get_ref();
    let rest = url.strip_prefix("https://").unwrap_or("");
    if rest.is_empty() || rest.starts_with('/') || url.contains(char::is_whitespace) {
        return Err(c.err(
            v.span(),
            field,
            format!("{url:?} is not an https:// URL (RFC 8555 asks for HTTPS)"),
        ));
    }
    Ok(url.clone())
}

fn ca_file(
    c: &Checker<'_>,
    v: &Option<S<String>>,
    base: &Path,
    field: &str,
) -> Result<Option<PathBuf>, ConfError> {
    let Some(v) = v else { return Ok(None) };
    let path = base.join(v.get_ref());
    let text = std::fs::read_to_string(&path)
        .map_err(|e| c.err(v.span(), field, format!("cannot read {}: {e}", path.display())))?;
    if !text.contains("-----BEGIN CERTIFICATE-----") {
        return Err(c.err(v.span(), field, format!("{} holds no PEM certificate", path.display())));
    }
    Ok(Some(path))
}

fn account_key(c: &Checker<'_>, v: &S<String>, field: &str) -> Result<AccountKey, ConfError> {
    let pem = c.secret(v, field)?;
    let der = account_key_der(&pem).map_err(|e| c.err(v.span(), field, e))?;
    Ok(AccountKey(der))
}

fn store(c: &Checker<'_>, v: &S<String>, base: &Path, field: &str) -> Result<PathBuf, ConfError> {
    let path = base.join(v.get_ref());
    let parent_ok = path.parent().is_some_and(|p| p.as_os_str().is_empty() || p.is_dir());
    let ok = if path.exists() { path.is_dir() } else { parent_ok };
    if !ok {
        let msg = format!("{} must be a folder, or a new one in a folder that exists", path.display());
        return Err(c.err(v.span(), field, msg));
    }
    Ok(path)
}

/// The PKCS#8 DER of an ACME account key given as PEM (`-----BEGIN PRIVATE KEY-----`, an
/// ECDSA P-256 key: `openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256`).
pub(crate) fn account_key_der(pem: &[u8]) -> Result<Vec<u8>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivatePkcs8KeyDer;
    let der = PrivatePkcs8KeyDer::from_pem_slice(pem)
        .map_err(|e| format!("must be a PKCS#8 PEM private key (BEGIN PRIVATE KEY): {e}"))?;
    instant_acme::Key::from_pkcs8_der(der.clone_key())
        .map_err(|e| format!("must be an ECDSA P-256 key: {e}"))?;
    Ok(der.secret_pkcs8_der().to_vec())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, GOOD};

    /// A P-256 PKCS#8 key (made for these tests only, never used anywhere).
    const KEY: &str = "-----BEGIN PRIVATE KEY-----\nMIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg9UeuHvWPnn4iLgv5\nZCs2dTHziFcrY3RoUdH7z/IwGlmhRANCAAS/MrUVngACcZGEyf6mlUWLqj9QdjRf\nIP1f/2azoKHdYs5QvRHjurYOKEXk2zFREGzJf0IugBuRdX+ZUA3chlLi\n-----END PRIVATE KEY-----\n";

    fn with(entry: &str) -> String {
        format!("{GOOD}\n[tls]\nlisten = \"127.0.0.1:8443\"\n\n[[tls.acme]]\n{entry}\n")
    }

    fn entry(hosts: &str, extra: &str) -> String {
        format!(
            "hosts = {hosts}\ndirectory = \"https://acme.example/dir\"\n\
             account_key = \"env:GATEWAY_ACME_TEST_KEY\"\nstore = \"{}\"\n{extra}",
            std::env::temp_dir().display()
        )
    }

    #[test]
    fn bad_acme_entries_are_refused_with_line_and_field() {
        // SAFETY of the env var: only this test reads this name.
        std::env::set_var("GATEWAY_ACME_TEST_KEY", KEY);
        let line = GOOD.lines().count() + 6;
        let ok = super::super::tests::parse(&with(&entry("[\"Shop.Example\"]", ""))).unwrap();
        let acme = &ok.tls.unwrap().acme[0];
        assert_eq!(
            (acme.hosts.as_slice(), acme.retry_min.as_secs()),
            (["shop.example".to_string()].as_slice(), 60)
        );
        expect_err(&with(&entry("[]", "")), line, "tls.acme[0].hosts", "at least one");
        expect_err(&with(&entry("[\"*.shop.example\"]", "")), line, "tls.acme[0].hosts", "DNS-01");
        expect_err(&with(&entry("[\"a b\"]", "")), line, "tls.acme[0].hosts", "not a host name");
        let twice = with(&entry("[\"shop.example\", \"SHOP.example\"]", ""));
        expect_err(&twice, line, "tls.acme[0].hosts", "already served");
        let bad_url = with(&entry("[\"s.example\"]", "").replace("https://acme.example/dir", "acme.example"));
        expect_err(&bad_url, line + 1, "tls.acme[0].directory", "https://");
        let inline =
            with(&entry("[\"s.example\"]", "").replace("env:GATEWAY_ACME_TEST_KEY", "0123456789abcdef01"));
        expect_err(&inline, line + 2, "tls.acme[0].account_key", "env:NAME or file:PATH");
        let not_a_key =
            with(&entry("[\"s.example\"]", "").replace("GATEWAY_ACME_TEST_KEY", "GATEWAY_CONF_TEST_KEY"));
        expect_err(&not_a_key, line + 2, "tls.acme[0].account_key", "PKCS#8");
        let nowhere = with(
            &entry("[\"s.example\"]", "")
                .replace(&std::env::temp_dir().display().to_string(), "/no/such/dir/acme"),
        );
        expect_err(&nowhere, line + 3, "tls.acme[0].store", "must be a folder");
        let ca = with(&entry("[\"s.example\"]", "directory_ca_file = \"nope.pem\""));
        expect_err(&ca, line + 4, "tls.acme[0].directory_ca_file", "cannot read");
        let mail = with(&entry("[\"s.example\"]", "contact = [\"ops@example\"]"));
        expect_err(&mail, line + 4, "tls.acme[0].contact", "mailto:");
        let retry = with(&entry("[\"s.example\"]", "retry_min_secs = 10\nretry_max_secs = 5"));
        expect_err(&retry, line + 5, "tls.acme[0].retry_max_secs", "at least retry_min_secs");
        let unknown = with(&entry("[\"s.example\"]", "renew_at = 1"));
        let err = super::super::tests::parse(&unknown).unwrap_err();
        assert!(err.message.contains("unknown field `renew_at`"), "{err}");
    }

    #[test]
    fn a_tls_table_needs_a_certificate_of_either_kind() {
        let none = format!("{GOOD}\n[tls]\nlisten = \"127.0.0.1:8443\"\n");
        expect_err(&none, GOOD.lines().count() + 3, "tls.cert", "[[tls.acme]]");
    }
}
