//! Secrets referenced from configuration, never written inline.
//!
//! A secret is written as `env:NAME` (read from the environment variable `NAME`) or
//! `file:PATH` (read from a file; a relative path is taken from the directory of the
//! configuration file that names it; one trailing newline is dropped). A server's URL holds no
//! password ([`url_has_password`]): Redis' and PostgreSQL's come by reference too, as a
//! [`Password`], and a URL in a message or a log is [`redact_url`]'s.

use std::ops::Range;
use std::path::Path;

/// Why a secret reference could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    /// Neither `env:` nor `file:`.
    #[error("secret reference {0:?} must be env:NAME or file:PATH (secrets are never written inline)")]
    BadReference(String),
    /// The environment variable is unset or empty.
    #[error("environment variable {0} is unset or empty")]
    MissingEnv(String),
    /// The file could not be read.
    #[error("cannot read secret file {path}: {source}")]
    File {
        /// Path tried.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
    /// The secret is shorter than 16 bytes.
    #[error("secret from {0} is shorter than 16 bytes")]
    TooShort(String),
    /// A password that is not UTF-8 (a client sends it as text).
    #[error("secret from {0} is not UTF-8")]
    NotUtf8(String),
}

/// A password another system chose (Redis', PostgreSQL's), read from its reference; `Debug`
/// never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    /// Reads `reference` (`env:NAME` or `file:PATH`, relative to `base_dir`): any length, UTF-8.
    pub fn read(reference: &str, base_dir: &Path) -> Result<Self, SecretError> {
        let bytes = read(reference, base_dir)?;
        String::from_utf8(bytes).map(Self).map_err(|_| SecretError::NotUtf8(reference.to_string()))
    }

    /// The password, for the client that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl Password {
    /// Whether an `Authorization` header's value is `Bearer <this password>`, compared by
    /// digest (the time taken says nothing of the password): the admin listeners' token check.
    pub fn is_bearer(&self, authorization: Option<&str>) -> bool {
        let digest = |s: &[u8]| ring::digest::digest(&ring::digest::SHA256, s);
        let expected = format!("Bearer {}", self.0);
        authorization.is_some_and(|a| digest(a.as_bytes()).as_ref() == digest(expected.as_bytes()).as_ref())
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

/// Where `url` writes a password: its user info's after the first `:`
/// (`scheme://user:PASSWORD@host`) and the value of a `password=` query parameter (PostgreSQL
/// reads one), as byte ranges.
fn password_spans(url: &str) -> Vec<Range<usize>> {
    let mut spans = Vec::new();
    let Some(scheme_end) = url.find("://") else { return spans };
    let start = scheme_end + 3;
    let authority_end = url[start..].find(['/', '?', '#']).map_or(url.len(), |i| start + i);
    if let Some(at) = url[start..authority_end].rfind('@') {
        if let Some(colon) = url[start..start + at].find(':') {
            spans.push(start + colon + 1..start + at);
        }
    }
    if let Some(q) = url[authority_end..].find('?').map(|i| authority_end + i + 1) {
        let query_end = url[q..].find('#').map_or(url.len(), |i| q + i);
        let mut at = q;
        for param in url[q..query_end].split('&') {
            if let Some((key, _)) = param.split_once('=') {
                if key.eq_ignore_ascii_case("password") {
                    spans.push(at + key.len() + 1..at + param.len());
                }
            }
            at += param.len() + 1;
        }
    }
    spans
}

/// Whether `url` holds a password (in its user info or a `password=` parameter).
pub fn url_has_password(url: &str) -> bool {
    !password_spans(url).is_empty()
}

/// `url` with each password it holds shown as `***`, for messages and logs.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_string();
    for span in password_spans(url).into_iter().rev() {
        out.replace_range(span, "***");
    }
    out
}

/// Resolves a reference to a key: the secret bytes, at least 16 of them. `base_dir` anchors
/// relative `file:` paths.
pub fn resolve(reference: &str, base_dir: &Path) -> Result<Vec<u8>, SecretError> {
    let value = read(reference, base_dir)?;
    if value.len() < 16 {
        return Err(SecretError::TooShort(reference.to_string()));
    }
    Ok(value)
}

/// Resolves a reference to a secret of any length (a password another system chose, such as
/// Kafka's SASL password). `base_dir` anchors relative `file:` paths.
pub fn read(reference: &str, base_dir: &Path) -> Result<Vec<u8>, SecretError> {
    let value = if let Some(name) = reference.strip_prefix("env:") {
        match std::env::var(name) {
            Ok(v) if !v.is_empty() => v.into_bytes(),
            _ => return Err(SecretError::MissingEnv(name.to_string())),
        }
    } else if let Some(path) = reference.strip_prefix("file:") {
        let full = base_dir.join(path);
        let mut bytes = std::fs::read(&full)
            .map_err(|source| SecretError::File { path: full.display().to_string(), source })?;
        if bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        bytes
    } else {
        return Err(SecretError::BadReference(reference.to_string()));
    };
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bearer_token_matches_only_itself() {
        let p = Password("a-token-of-16-chars".into());
        assert!(p.is_bearer(Some("Bearer a-token-of-16-chars")));
        assert!(!p.is_bearer(Some("Bearer a-token-of-16-charz")));
        assert!(!p.is_bearer(Some("a-token-of-16-chars")));
        assert!(!p.is_bearer(None));
    }

    #[test]
    fn inline_secrets_are_refused() {
        let err = resolve("hunter2hunter2hunter2", Path::new(".")).unwrap_err();
        assert!(err.to_string().contains("env:NAME or file:PATH"), "{err}");
    }

    #[test]
    fn file_secret_is_read_relative_and_trimmed() {
        let dir = std::env::temp_dir().join(format!("secret-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("k"), "0123456789abcdef\n").unwrap();
        assert_eq!(resolve("file:k", &dir).unwrap(), b"0123456789abcdef");
        std::fs::write(dir.join("short"), "abc").unwrap();
        assert!(matches!(resolve("file:short", &dir), Err(SecretError::TooShort(_))));
        assert!(matches!(resolve("file:absent", &dir), Err(SecretError::File { .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn redact_hides_every_password_of_a_url() {
        for (url, shown) in [
            ("postgres://u:p%40ss@h/db?application_name=a@b", "postgres://u:***@h/db?application_name=a@b"),
            (
                "postgres://u@h/db?password=pw&sslmode=disable",
                "postgres://u@h/db?password=***&sslmode=disable",
            ),
            ("postgres://u:pw@h/db?PASSWORD=pw2#x", "postgres://u:***@h/db?PASSWORD=***#x"),
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            ("redis://:pw@127.0.0.1:6390", "redis://:***@127.0.0.1:6390"),
            ("redis-cluster://:pw@h:1?node=h:2&node=h:3", "redis-cluster://:***@h:1?node=h:2&node=h:3"),
        ] {
            assert_eq!(redact_url(url), shown, "{url}");
            assert!(url_has_password(url), "{url}");
        }
        for plain in [
            "postgres://u@h/db",
            "redis://127.0.0.1:6390/0",
            "redis://u@h:1",
            "h:1",
            "postgres://h/db?x=a:b@c",
        ] {
            assert_eq!(redact_url(plain), plain);
            assert!(!url_has_password(plain), "{plain}");
        }
    }

    #[test]
    fn a_password_is_read_by_reference_and_never_printed() {
        std::env::set_var("SECKILL_TEST_PASSWORD_PW", "pw");
        let p = Password::read("env:SECKILL_TEST_PASSWORD_PW", Path::new(".")).unwrap();
        assert_eq!((p.expose(), format!("{p:?}")), ("pw", "Password(<redacted>)".to_string()));
        assert!(matches!(Password::read("pw", Path::new(".")), Err(SecretError::BadReference(_))));
    }

    #[test]
    fn missing_env_is_named() {
        let err = resolve("env:SECKILL_TEST_SURELY_UNSET_VAR", Path::new(".")).unwrap_err();
        assert!(err.to_string().contains("SECKILL_TEST_SURELY_UNSET_VAR"));
    }
}
