//! Configuration errors that name the file, the line, the column and the field.
//!
//! Every TOML file of the project (gateway server file, campaign files, order-writer file) is
//! parsed through [`parse`], so that a platform engineer always reads
//! `conf/campaigns/phone.toml:7:9: field `stock`: invalid value ...`.

use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;

/// A configuration error with its place.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("{}:{line}:{column}: {}{message}", file.display(), field.as_ref().map(|f| format!("field `{f}`: ")).unwrap_or_default())]
pub struct ConfError {
    /// The file.
    pub file: PathBuf,
    /// 1-based line (0 when the error has no place, e.g. the file cannot be read).
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The field, when known.
    pub field: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// The 1-based line and column of byte `offset` in `text`.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..offset];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map(|l| l.chars().count()).unwrap_or(0) + 1;
    (line, column)
}

/// Where `field = ...` is written in a TOML file (the start of its line's key), or the
/// file's start when the field is absent (its default applies).
pub fn field_span(text: &str, field: &str) -> std::ops::Range<usize> {
    let mut at = 0;
    for line in text.split_inclusive('\n') {
        let key = line.trim_start();
        let start = at + (line.len() - key.len());
        if key.strip_prefix(field).is_some_and(|rest| rest.trim_start().starts_with('=')) {
            return start..start + field.len();
        }
        at += line.len();
    }
    0..0
}

/// The key written on the line that holds `offset` (`stock` for `stock = -1`), if any.
fn key_at(text: &str, offset: usize) -> Option<String> {
    let (line, _) = line_col(text, offset);
    let l = text.lines().nth(line - 1)?;
    let (key, _) = l.split_once('=')?;
    let key = key.trim();
    (!key.is_empty() && !key.starts_with('#')).then(|| key.trim_matches('"').to_string())
}

impl ConfError {
    /// An error at a byte span of `text`; the field is taken from the span's line when `field`
    /// is `None`.
    pub fn at(
        file: &Path,
        text: &str,
        span: Range<usize>,
        field: Option<&str>,
        message: impl Into<String>,
    ) -> Self {
        let (line, column) = line_col(text, span.start);
        Self {
            file: file.to_path_buf(),
            line,
            column,
            field: field.map(str::to_string).or_else(|| key_at(text, span.start)),
            message: message.into(),
        }
    }

    /// An error at the line of `field` in `file`, read again from disk: for a check made after
    /// the file was parsed (a reload against the running conf, a publish against the database).
    pub fn at_field(file: &Path, field: &str, message: impl Into<String>) -> Self {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        Self::at(file, &text, field_span(&text, field), Some(field), message)
    }

    /// An error about the file as a whole (cannot read it, a required table is missing).
    pub fn whole(file: &Path, message: impl Into<String>) -> Self {
        Self { file: file.to_path_buf(), line: 0, column: 0, field: None, message: message.into() }
    }
}

/// Parses `text` (the contents of `file`) as TOML into `T`, mapping errors to [`ConfError`].
pub fn parse<T: DeserializeOwned>(file: &Path, text: &str) -> Result<T, ConfError> {
    toml::from_str(text).map_err(|e| match e.span() {
        Some(span) => ConfError::at(file, text, span, None, e.message().trim().to_string()),
        None => ConfError::whole(file, e.message().trim().to_string()),
    })
}

/// Reads and parses `file`.
pub fn load<T: DeserializeOwned>(file: &Path) -> Result<(T, String), ConfError> {
    let text =
        std::fs::read_to_string(file).map_err(|e| ConfError::whole(file, format!("cannot read: {e}")))?;
    let value = parse(file, &text)?;
    Ok((value, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_found_at_its_line_not_in_a_longer_key() {
        let text = "id = \"c\"\nbucket_tries = 1\n  buckets = 4\n";
        let span = field_span(text, "buckets");
        assert_eq!(&text[span.clone()], "buckets");
        assert_eq!(span.start, text.find("  buckets").unwrap() + 2);
        assert_eq!(field_span("id = 1\n", "buckets"), 0..0);
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct T {
        name: String,
        count: u32,
    }

    #[test]
    fn unknown_field_names_line_and_field() {
        let err = parse::<T>(Path::new("x.toml"), "name = \"a\"\ncount = 1\ncolour = 2\n").unwrap_err();
        assert_eq!(err.line, 3, "{err}");
        assert_eq!(err.field.as_deref(), Some("colour"));
        assert!(err.message.contains("unknown field"), "{err}");
        assert!(err.to_string().starts_with("x.toml:3:1: field `colour`"), "{err}");
    }

    #[test]
    fn wrong_type_names_line_and_field() {
        let err = parse::<T>(Path::new("x.toml"), "name = \"a\"\ncount = -1\n").unwrap_err();
        assert_eq!((err.line, err.field.as_deref()), (2, Some("count")), "{err}");
    }

    #[test]
    fn line_col_counts_from_one() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
