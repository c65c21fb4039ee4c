//! Secrets referenced from configuration, never written inline.
//!
//! A secret is written as `env:NAME` (read from the environment variable `NAME`) or
//! `file:PATH` (read from a file; a relative path is taken from the directory of the
//! configuration file that names it; one trailing newline is dropped).

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
    fn missing_env_is_named() {
        let err = resolve("env:SECKILL_TEST_SURELY_UNSET_VAR", Path::new(".")).unwrap_err();
        assert!(err.to_string().contains("SECKILL_TEST_SURELY_UNSET_VAR"));
    }
}
