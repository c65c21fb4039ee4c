//! How both binaries reach Kafka: the connection part of their `[kafka]` tables (brokers, topic,
//! partitions, `[kafka.tls]`, `[kafka.sasl]`), checked once into [`KafkaConnection`] and
//! [`Topic`], and the rskafka client built from it.
//!
//! The gateway produces reserved records and the order writer consumes them (and produces the
//! sweeper's), so both read the same fields the same way: brokers as `host:port` (a name is
//! resolved when connecting, as a company's Kafka is named), TLS with the system's roots or a CA
//! file, SASL PLAIN or SCRAM-SHA-256/512 with the password only by `env:`/`file:` reference
//! (PLAIN over TLS only, unless a test stack opts in with `[kafka.sasl] allow_plaintext = true`).
//! rskafka always produces with `acks = -1` (all in-sync replicas), so a record the broker
//! acknowledged is on `min.insync.replicas` brokers.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use rskafka::client::{ClientBuilder, Credentials, SaslConfig};
use serde::Deserialize;
use toml::Spanned;

use crate::conf::ConfError;

/// Makes a [`ConfError`] at a span of the file being checked: (span, field, message).
pub type ErrAt<'a> = &'a dyn Fn(Range<usize>, &str, String) -> ConfError;

/// `[kafka.tls]`: connect with TLS. An empty table trusts the system's roots.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    /// PEM file of the CA(s) that signed the brokers' certificates (relative to the conf file).
    ca_file: Option<Spanned<String>>,
}

/// `[kafka.sasl]`: authenticate each connection.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawSasl {
    /// `PLAIN`, `SCRAM-SHA-256` or `SCRAM-SHA-512`.
    mechanism: Spanned<String>,
    /// The user name.
    username: Spanned<String>,
    /// `env:NAME` or `file:PATH`, never the password itself.
    password: Spanned<String>,
    /// `true` lets PLAIN go without `[kafka.tls]` (its password in the clear): a test stack's
    /// SASL_PLAINTEXT listener only ([`check_plaintext`]).
    #[serde(default)]
    allow_plaintext: Option<Spanned<bool>>,
}

/// The connection fields of a `[kafka]` table, as written.
#[derive(Debug, Clone, Copy)]
pub struct RawConnection<'a> {
    /// `brokers = ["host:port", ...]`.
    pub brokers: &'a Spanned<Vec<Spanned<String>>>,
    /// `[kafka.tls]`, if present.
    pub tls: Option<&'a Spanned<RawTls>>,
    /// `[kafka.sasl]`, if present.
    pub sasl: Option<&'a Spanned<RawSasl>>,
}

/// SASL mechanisms rskafka speaks (OAUTHBEARER needs a token callback: not offered in conf).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    /// RFC 4616; only over TLS outside a test stack.
    Plain,
    /// RFC 7677.
    ScramSha256,
    /// SCRAM with SHA-512.
    ScramSha512,
}

/// Checked SASL settings; the password never appears in `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Sasl {
    /// The mechanism.
    pub mechanism: SaslMechanism,
    /// The user name.
    pub username: String,
    password: String,
}

impl std::fmt::Debug for Sasl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sasl")
            .field("mechanism", &self.mechanism)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Where a binary's Kafka is and how to connect to it, checked.
#[derive(Clone)]
pub struct KafkaConnection {
    brokers: Vec<String>,
    tls: Option<Arc<rustls::ClientConfig>>,
    sasl: Option<Sasl>,
}

impl std::fmt::Debug for KafkaConnection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaConnection")
            .field("brokers", &self.brokers)
            .field("tls", &self.tls.is_some())
            .field("sasl", &self.sasl)
            .finish()
    }
}

impl PartialEq for KafkaConnection {
    fn eq(&self, other: &Self) -> bool {
        self.brokers == other.brokers
            && self.sasl == other.sasl
            && match (&self.tls, &other.tls) {
                (None, None) => true,
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
    }
}
impl Eq for KafkaConnection {}

impl KafkaConnection {
    /// Plain TCP, no authentication: a test stack's broker, or tools given `--broker`.
    pub fn plaintext(brokers: Vec<String>) -> Self {
        Self { brokers, tls: None, sasl: None }
    }

    /// The bootstrap brokers, `host:port`.
    pub fn brokers(&self) -> &[String] {
        &self.brokers
    }

    /// Whether connections use TLS.
    pub fn tls(&self) -> bool {
        self.tls.is_some()
    }

    /// The SASL settings, if any.
    pub fn sasl(&self) -> Option<&Sasl> {
        self.sasl.as_ref()
    }

    /// An rskafka client builder for these brokers, with TLS and SASL set (the caller adds its
    /// backoff and builds).
    pub fn builder(&self) -> ClientBuilder {
        let mut b = ClientBuilder::new(self.brokers.clone());
        if let Some(tls) = &self.tls {
            b = b.tls_config(Arc::clone(tls));
        }
        if let Some(s) = &self.sasl {
            let c = Credentials::new(s.username.clone(), s.password.clone());
            b = b.sasl_config(match s.mechanism {
                SaslMechanism::Plain => SaslConfig::Plain(c),
                SaslMechanism::ScramSha256 => SaslConfig::ScramSha256(c),
                SaslMechanism::ScramSha512 => SaslConfig::ScramSha512(c),
            });
        }
        b
    }
}

/// Whether `b` is `host:port` with a port of 1 to 65535 (an IPv6 host in brackets).
fn host_port_ok(b: &str) -> bool {
    let Some((host, port)) = b.rsplit_once(':') else { return false };
    let port_ok = port.parse::<u16>().is_ok_and(|p| p > 0);
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host.len() <= 253
            && host.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    port_ok && host_ok
}

/// Checks the connection fields. `base_dir` anchors relative `ca_file` and `file:` paths.
pub fn check_connection(
    raw: RawConnection<'_>,
    err: ErrAt<'_>,
    base_dir: &Path,
) -> Result<KafkaConnection, ConfError> {
    let list = raw.brokers.get_ref();
    if list.is_empty() {
        return Err(err(raw.brokers.span(), "kafka.brokers", "must list at least one host:port".into()));
    }
    let mut brokers = Vec::with_capacity(list.len());
    for b in list {
        if !host_port_ok(b.get_ref()) {
            return Err(err(
                b.span(),
                "kafka.brokers",
                format!(
                    "{:?} is not host:port (a name, an IPv4 address or [IPv6], and a port 1 to 65535)",
                    b.get_ref()
                ),
            ));
        }
        brokers.push(b.get_ref().clone());
    }
    let tls = raw.tls.map(|t| tls_config(t.get_ref(), err, base_dir)).transpose()?;
    let sasl = raw.sasl.map(|s| sasl(s.get_ref(), err, base_dir)).transpose()?;
    if let (Some(raw_sasl), Some(checked)) = (raw.sasl, &sasl) {
        check_plaintext(raw_sasl.get_ref(), checked.mechanism, tls.is_some(), err)?;
    }
    Ok(KafkaConnection { brokers, tls, sasl })
}

/// PLAIN sends the password as it is: over TLS only, unless a test stack opts in with
/// `allow_plaintext = true`. The opt-in is refused where it does not apply (SCRAM, or with
/// `[kafka.tls]`), so one left behind cannot let PLAIN go in the clear once TLS is removed.
fn check_plaintext(
    s: &RawSasl,
    mechanism: SaslMechanism,
    tls: bool,
    err: ErrAt<'_>,
) -> Result<(), ConfError> {
    let in_clear = mechanism == SaslMechanism::Plain && !tls;
    match &s.allow_plaintext {
        Some(a) if !in_clear => Err(err(
            a.span(),
            "kafka.sasl.allow_plaintext",
            "applies only to PLAIN without [kafka.tls] (a test stack's SASL_PLAINTEXT listener): remove it"
                .into(),
        )),
        Some(a) if *a.get_ref() => Ok(()),
        _ if in_clear => Err(err(
            s.mechanism.span(),
            "kafka.sasl.mechanism",
            "PLAIN without [kafka.tls] sends the password in the clear: add [kafka.tls] or use \
             SCRAM-SHA-256/512 (a test stack's SASL_PLAINTEXT listener opts in with \
             allow_plaintext = true)"
                .into(),
        )),
        _ => Ok(()),
    }
}

fn tls_config(t: &RawTls, err: ErrAt<'_>, base_dir: &Path) -> Result<Arc<rustls::ClientConfig>, ConfError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    let mut roots = rustls::RootCertStore::empty();
    match &t.ca_file {
        Some(f) => {
            let path = base_dir.join(f.get_ref());
            let certs = CertificateDer::pem_file_iter(&path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| {
                    err(
                        f.span(),
                        "kafka.tls.ca_file",
                        format!("cannot read PEM certificates from {}: {e}", path.display()),
                    )
                })?;
            if certs.is_empty() {
                return Err(err(
                    f.span(),
                    "kafka.tls.ca_file",
                    format!("{} holds no certificate", path.display()),
                ));
            }
            for c in certs {
                roots
                    .add(c)
                    .map_err(|e| err(f.span(), "kafka.tls.ca_file", format!("{}: {e}", path.display())))?;
            }
        }
        None => {
            // Unreadable system certificates are skipped; none at all is an error below.
            for c in rustls_native_certs::load_native_certs().unwrap_or_default() {
                let _ = roots.add(c);
            }
            if roots.is_empty() {
                return Err(err(
                    0..0,
                    "kafka.tls",
                    "no system root certificates found: set kafka.tls.ca_file".into(),
                ));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| err(0..0, "kafka.tls", e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

fn sasl(s: &RawSasl, err: ErrAt<'_>, base_dir: &Path) -> Result<Sasl, ConfError> {
    let mechanism = match s.mechanism.get_ref().as_str() {
        "PLAIN" => SaslMechanism::Plain,
        "SCRAM-SHA-256" => SaslMechanism::ScramSha256,
        "SCRAM-SHA-512" => SaslMechanism::ScramSha512,
        other => {
            return Err(err(
                s.mechanism.span(),
                "kafka.sasl.mechanism",
                format!("{other:?} is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"),
            ))
        }
    };
    let username = s.username.get_ref();
    if username.is_empty() || username.len() > 255 {
        return Err(err(s.username.span(), "kafka.sasl.username", "must be 1 to 255 bytes".into()));
    }
    let password = crate::secret::read(s.password.get_ref(), base_dir)
        .map_err(|e| err(s.password.span(), "kafka.sasl.password", e.to_string()))?;
    let password = String::from_utf8(password)
        .map_err(|_| err(s.password.span(), "kafka.sasl.password", "is not UTF-8".into()))?;
    Ok(Sasl { mechanism, username: username.clone(), password })
}

/// The reservations topic and its partition count, as both binaries must agree on them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    /// The topic's name.
    pub name: String,
    /// Its partition count: users are hashed over it ([`crate::record::partition_for`]).
    pub partitions: i32,
}

/// Most partitions a reservations topic may have.
pub const PARTITIONS_MAX: i64 = 1024;

/// Whether `topic` is a legal Kafka topic name.
pub fn topic_name_ok(topic: &str) -> bool {
    !topic.is_empty()
        && topic.len() <= 249
        && topic != "."
        && topic != ".."
        && topic.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Checks `topic` and `partitions` of a `[kafka]` table.
pub fn check_topic(
    name: &Spanned<String>,
    partitions: &Spanned<i64>,
    err: ErrAt<'_>,
) -> Result<Topic, ConfError> {
    if !topic_name_ok(name.get_ref()) {
        return Err(err(
            name.span(),
            "kafka.topic",
            "must be 1 to 249 characters of a-z, A-Z, 0-9, '.', '_', '-'".into(),
        ));
    }
    let n = *partitions.get_ref();
    if !(1..=PARTITIONS_MAX).contains(&n) {
        return Err(err(
            partitions.span(),
            "kafka.partitions",
            format!("must be between 1 and {PARTITIONS_MAX}, found {n}"),
        ));
    }
    Ok(Topic { name: name.get_ref().clone(), partitions: n as i32 })
}

/// The partition count of `topic` as the brokers see it (`None`: no such topic), within
/// `deadline`.
pub async fn topic_partitions(
    client: &rskafka::client::Client,
    topic: &str,
    deadline: std::time::Duration,
) -> Result<Option<usize>, String> {
    match tokio::time::timeout(deadline, client.list_topics()).await {
        Ok(Ok(topics)) => Ok(topics.iter().find(|t| t.name == topic).map(|t| t.partitions.len())),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no metadata within {deadline:?}")),
    }
}

/// What the brokers say of the topic, against the conf: `Ok` when it has `want` partitions.
/// The error names the field to edit (`kafka.partitions`) and both counts.
pub fn partitions_match(topic: &str, want: i32, found: Option<usize>) -> Result<(), String> {
    match found {
        Some(n) if n == want as usize => Ok(()),
        Some(n) => Err(format!(
            "topic {topic} has {n} partitions but kafka.partitions = {want}: users would be hashed \
             over the wrong partitions; set kafka.partitions = {n} in every gateway and order writer"
        )),
        None => Err(format!("topic {topic} does not exist (order-writer topic create makes it)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[derive(Debug, Deserialize)]
    struct T {
        brokers: Spanned<Vec<Spanned<String>>>,
        tls: Option<Spanned<RawTls>>,
        sasl: Option<Spanned<RawSasl>>,
    }

    fn check(text: &str) -> Result<KafkaConnection, ConfError> {
        let file = PathBuf::from("k.toml");
        let t: T = crate::conf::parse(&file, text)?;
        let err =
            |span: Range<usize>, field: &str, msg: String| ConfError::at(&file, text, span, Some(field), msg);
        check_connection(
            RawConnection { brokers: &t.brokers, tls: t.tls.as_ref(), sasl: t.sasl.as_ref() },
            &err,
            Path::new("."),
        )
    }

    #[test]
    fn brokers_are_host_port() {
        let ok = check("brokers = [\"kafka-1.corp:9093\", \"127.0.0.1:19092\", \"[::1]:9092\"]").unwrap();
        assert_eq!(ok.brokers().len(), 3);
        assert!(!ok.tls() && ok.sasl().is_none());
        for bad in ["kafka", "kafka:0", "kafka:99999", ":9092", "a b:1", "[::g]:1"] {
            let e = check(&format!("brokers = [\"ok:1\", \"{bad}\"]")).unwrap_err();
            assert_eq!((e.line, e.column, e.field.as_deref()), (1, 20, Some("kafka.brokers")), "{bad}: {e}");
            assert!(e.message.contains("host:port"), "{e}");
        }
        let e = check("brokers = []").unwrap_err();
        assert!(e.message.contains("at least one"), "{e}");
    }

    #[test]
    fn sasl_mechanisms_and_passwords_by_reference() {
        std::env::set_var("SECKILL_TEST_KAFKA_PW", "pw");
        let ok = check("brokers = [\"k:1\"]\n[sasl]\nmechanism = \"SCRAM-SHA-512\"\nusername = \"u\"\npassword = \"env:SECKILL_TEST_KAFKA_PW\"\n").unwrap();
        let s = ok.sasl().unwrap();
        assert_eq!((s.mechanism, s.username.as_str()), (SaslMechanism::ScramSha512, "u"));
        assert!(!format!("{ok:?}").contains("\"pw\""), "the password never shows in Debug");
        let e = check(
            "brokers = [\"k:1\"]\n[sasl]\nmechanism = \"GSSAPI\"\nusername = \"u\"\npassword = \"env:X\"\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (3, Some("kafka.sasl.mechanism")), "{e}");
        let e = check(
            "brokers = [\"k:1\"]\n[sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\npassword = \"hunter2\"\n",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (5, Some("kafka.sasl.password")), "{e}");
        assert!(e.message.contains("env:NAME or file:PATH"), "{e}");
        let e = check("brokers = [\"k:1\"]\n[sasl]\nmechanism = \"PLAIN\"\nusername = \"u\"\n").unwrap_err();
        assert!(e.message.contains("password"), "{e}");
    }

    #[test]
    fn plain_without_tls_is_refused_unless_a_test_stack_opts_in() {
        std::env::set_var("SECKILL_TEST_KAFKA_PW", "pw");
        let sasl = |mechanism: &str, extra: &str| {
            format!(
                "brokers = [\"k:1\"]\n[sasl]\nmechanism = \"{mechanism}\"\nusername = \"u\"\n\
                 password = \"env:SECKILL_TEST_KAFKA_PW\"\n{extra}"
            )
        };
        let e = check(&sasl("PLAIN", "")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (3, Some("kafka.sasl.mechanism")), "{e}");
        assert!(e.message.contains("[kafka.tls]") && e.message.contains("allow_plaintext = true"), "{e}");
        let test_stack = check(&sasl("PLAIN", "allow_plaintext = true\n")).unwrap();
        assert_eq!(test_stack.sasl().map(|s| s.mechanism), Some(SaslMechanism::Plain));
        assert!(check(&sasl("SCRAM-SHA-256", "")).is_ok(), "SCRAM sends no password");
        // The opt-in only where it applies: a stale one cannot wait for [kafka.tls] to go.
        let e = check(&sasl("SCRAM-SHA-512", "allow_plaintext = true\n")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (6, Some("kafka.sasl.allow_plaintext")), "{e}");
        let e = check(&sasl("PLAIN", "allow_plaintext = false\n")).unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (3, Some("kafka.sasl.mechanism")), "{e}");
    }

    #[test]
    fn tls_ca_file_must_hold_certificates() {
        let e = check("brokers = [\"k:1\"]\n[tls]\nca_file = \"surely-absent.pem\"\n").unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (3, Some("kafka.tls.ca_file")), "{e}");
        let dir = std::env::temp_dir().join(format!("kafka-tls-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("empty.pem"), "not a certificate\n").unwrap();
        let text = format!("brokers = [\"k:1\"]\n[tls]\nca_file = \"{}\"\n", dir.join("empty.pem").display());
        let e = check(&text).unwrap_err();
        assert!(e.message.contains("no certificate"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn partition_counts_must_match() {
        assert!(partitions_match("t", 4, Some(4)).is_ok());
        let e = partitions_match("t", 4, Some(8)).unwrap_err();
        assert!(e.contains("8 partitions") && e.contains("kafka.partitions = 4"), "{e}");
        assert!(partitions_match("t", 4, None).unwrap_err().contains("does not exist"));
    }
}
