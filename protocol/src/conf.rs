//! Configuration errors that name the file, the line, the column and the field, and the one
//! way every file's values are checked.
//!
//! Every TOML file of the project (gateway server file, campaign files, order-writer file) is
//! parsed through [`parse`] into raw values kept with their place ([`toml::Spanned`]), then
//! turned into checked, typed values by a [`Checker`] of that file: bounded durations
//! ([`Checker::ms`], [`Checker::millis`], [`Checker::secs`]), bounded numbers ([`Checker::int`],
//! [`Checker::bounded`]), addresses ([`Checker::addr`]), secrets ([`Checker::secret`], [`Checker::password`]) and
//! servers' URLs without a password in them ([`Checker::url_without_password`]).
//! A platform engineer always reads
//! `conf/campaigns/phone.toml:7:9: field `stock`: must be between 0 and 1000000000, found -5`.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::de::DeserializeOwned;
use toml::Spanned;

use crate::secret::Password;

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

/// For the conf tests of every crate: `got` is refused at `file:line:` on `field`, with
/// `words` in its message; panics with the error (or the value) otherwise.
pub fn assert_refused<T: std::fmt::Debug>(
    got: Result<T, ConfError>,
    file: &str,
    line: usize,
    field: &str,
    words: &str,
) {
    let err = got.expect_err("the file is refused");
    assert_eq!((err.line, err.field.as_deref()), (line, Some(field)), "{err}");
    let text = err.to_string();
    assert!(text.starts_with(&format!("{file}:{line}:")), "{err}");
    assert!(text.contains(words), "{err}");
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

/// Reads `file`'s text; an unreadable file is a [`ConfError`] naming it.
pub fn read(file: &Path) -> Result<String, ConfError> {
    std::fs::read_to_string(file).map_err(|e| ConfError::whole(file, format!("cannot read: {e}")))
}

/// Reads and parses `file`.
pub fn load<T: DeserializeOwned>(file: &Path) -> Result<(T, String), ConfError> {
    let text = read(file)?;
    let value = parse(file, &text)?;
    Ok((value, text))
}

/// A wait in whole milliseconds, checked by [`Checker::millis`] against its field's bounds; it
/// fits the `i32` Kafka's protocol carries a wait in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Millis(i32);

impl Millis {
    /// `ms` milliseconds, when not negative.
    pub const fn new(ms: i32) -> Option<Self> {
        if ms < 0 {
            None
        } else {
            Some(Self(ms))
        }
    }

    /// The milliseconds, as Kafka's fetch takes them.
    pub const fn as_i32(self) -> i32 {
        self.0
    }

    /// The wait as a [`Duration`].
    pub const fn duration(self) -> Duration {
        Duration::from_millis(self.0 as u64)
    }
}

impl From<Millis> for Duration {
    fn from(m: Millis) -> Self {
        m.duration()
    }
}

impl std::fmt::Display for Millis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ms", self.0)
    }
}

/// Checks the raw values of one file (`file`, whose text is `text`): each method turns a
/// spanned value into a checked one, or into a [`ConfError`] at the value's
/// file:line:column, naming `field` (its dotted path, `kafka.produce_timeout_ms`).
#[derive(Debug, Clone, Copy)]
pub struct Checker<'a> {
    file: &'a Path,
    text: &'a str,
}

impl<'a> Checker<'a> {
    /// A checker of `file`, whose text is `text`.
    pub fn new(file: &'a Path, text: &'a str) -> Self {
        Self { file, text }
    }

    /// The file.
    pub fn file(&self) -> &'a Path {
        self.file
    }

    /// Its text.
    pub fn text(&self) -> &'a str {
        self.text
    }

    /// The folder relative paths of the file are taken from (`file:` secrets, folders).
    pub fn base(&self) -> &'a Path {
        self.file.parent().unwrap_or(Path::new("."))
    }

    /// An error at `span` of the file, naming `field`.
    pub fn err(&self, span: Range<usize>, field: &str, msg: impl Into<String>) -> ConfError {
        ConfError::at(self.file, self.text, span, Some(field), msg)
    }

    /// An error at the line where `key = ...` is written (the file's start when it is not:
    /// its default applies), naming `field`: for a value serde keeps without its place.
    pub fn err_at_key(&self, key: &str, field: &str, msg: impl Into<String>) -> ConfError {
        self.err(field_span(self.text, key), field, msg)
    }

    /// `v` within `min..=max`, converted to `T`.
    pub fn bounded<T: TryFrom<i64>>(
        &self,
        v: &Spanned<i64>,
        field: &str,
        min: i64,
        max: i64,
    ) -> Result<T, ConfError> {
        let n = *v.get_ref();
        within(n, min, max)
            .and_then(|()| T::try_from(n).map_err(|_| format!("{n} is out of range")))
            .map_err(|m| self.err(v.span(), field, m))
    }

    /// A count or size within `min..=max`.
    pub fn int(&self, v: &Spanned<i64>, field: &str, min: i64, max: i64) -> Result<usize, ConfError> {
        self.bounded(v, field, min, max)
    }

    /// A duration written in milliseconds, within `min..=max` ms.
    pub fn ms(&self, v: &Spanned<i64>, field: &str, min: i64, max: i64) -> Result<Duration, ConfError> {
        let n = *v.get_ref();
        if !(min..=max).contains(&n) || n < 0 {
            return Err(self.err(
                v.span(),
                field,
                format!("must be between {min} and {max} (ms), found {n}"),
            ));
        }
        Ok(Duration::from_millis(n as u64))
    }

    /// A wait written in milliseconds, within `min..=max` ms (`max` at most `i32::MAX`), kept as
    /// [`Millis`].
    pub fn millis(&self, v: &Spanned<i64>, field: &str, min: i64, max: i64) -> Result<Millis, ConfError> {
        let d = self.ms(v, field, min, max.min(i64::from(i32::MAX)))?;
        Ok(Millis(d.as_millis() as i32))
    }

    /// A duration written in seconds, within `min..=max` s.
    pub fn secs(&self, v: &Spanned<i64>, field: &str, min: i64, max: i64) -> Result<Duration, ConfError> {
        let n = *v.get_ref();
        if !(min..=max).contains(&n) || n < 0 {
            return Err(self.err(v.span(), field, format!("must be between {min} and {max} (s), found {n}")));
        }
        Ok(Duration::from_secs(n as u64))
    }

    /// An `IP:port` address (names are not resolved: a listener binds an address).
    pub fn addr(&self, v: &Spanned<String>, field: &str) -> Result<SocketAddr, ConfError> {
        v.get_ref().parse().map_err(|_| {
            self.err(
                v.span(),
                field,
                format!("{:?} is not an IP:port address (names are not resolved)", v.get_ref()),
            )
        })
    }

    /// A secret referenced as `env:NAME` or `file:PATH` (relative to [`Checker::base`]),
    /// resolved now ([`crate::secret`]), so a missing key stops the process at start.
    pub fn secret(&self, v: &Spanned<String>, field: &str) -> Result<Vec<u8>, ConfError> {
        crate::secret::resolve(v.get_ref(), self.base()).map_err(|e| self.err(v.span(), field, e.to_string()))
    }

    /// A password another system chose (Redis', PostgreSQL's), referenced as `env:NAME` or
    /// `file:PATH`: any length, UTF-8, resolved now.
    pub fn password(&self, v: &Spanned<String>, field: &str) -> Result<Password, ConfError> {
        Password::read(v.get_ref(), self.base()).map_err(|e| self.err(v.span(), field, e.to_string()))
    }

    /// A server's URL that holds no password: one written in it would be a secret inline (and in
    /// every message that shows the URL), so it is refused, the error naming `password_key`,
    /// the field that takes it by reference. The URL in the error is redacted.
    pub fn url_without_password(
        &self,
        v: &Spanned<String>,
        field: &str,
        password_key: &str,
    ) -> Result<(), ConfError> {
        if !crate::secret::url_has_password(v.get_ref()) {
            return Ok(());
        }
        Err(self.err(
            v.span(),
            field,
            format!(
                "{} holds a password: give it by reference in its own field, {password_key} = \
                 \"env:NAME\" or \"file:PATH\" (secrets are never written inline)",
                crate::secret::redact_url(v.get_ref())
            ),
        ))
    }
}

/// `n` within `min..=max`, or the words naming the bounds.
pub fn within<T: PartialOrd + std::fmt::Display>(n: T, min: T, max: T) -> Result<(), String> {
    if n < min || n > max {
        return Err(format!("must be between {min} and {max}, found {n}"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "x.toml";
    const TEXT: &str = "wait_ms = 501
n = -3
listen = \"localhost:80\"
key = \"hunter2\"
age = 7
";

    #[derive(serde::Deserialize)]
    struct Raw {
        wait_ms: Spanned<i64>,
        n: Spanned<i64>,
        listen: Spanned<String>,
        key: Spanned<String>,
        age: Spanned<i64>,
    }

    fn raw() -> Raw {
        parse(Path::new(FILE), TEXT).unwrap()
    }

    #[test]
    fn each_check_names_file_line_column_and_field() {
        let r = raw();
        let c = Checker::new(Path::new(FILE), TEXT);
        let e = c.ms(&r.wait_ms, "writer.wait_ms", 0, 500).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x.toml:1:11: field `writer.wait_ms`: must be between 0 and 500 (ms), found 501"
        );
        let e = c.millis(&r.wait_ms, "wait_ms", 0, 500).unwrap_err();
        assert_eq!((e.line, e.column), (1, 11));
        let e = c.int(&r.n, "n", 0, 10).unwrap_err();
        assert_eq!(e.to_string(), "x.toml:2:5: field `n`: must be between 0 and 10, found -3");
        let e = c.bounded::<u32>(&r.n, "n", -5, 10).unwrap_err();
        assert_eq!((e.line, e.message.as_str()), (2, "-3 is out of range"), "in bounds, but not a u32");
        let e = c.secs(&r.age, "age", 8, 60).unwrap_err();
        assert_eq!(e.to_string(), "x.toml:5:7: field `age`: must be between 8 and 60 (s), found 7");
        let e = c.addr(&r.listen, "server.listen").unwrap_err();
        assert_eq!((e.line, e.column, e.field.as_deref()), (3, 10, Some("server.listen")));
        assert!(e.message.contains("not an IP:port address"), "{e}");
        let e = c.secret(&r.key, "signing_key").unwrap_err();
        assert_eq!((e.line, e.field.as_deref()), (4, Some("signing_key")));
        assert!(e.message.contains("env:NAME"), "{e}");
        let e = c.err_at_key("age", "limits.age", "too old");
        assert_eq!(e.to_string(), "x.toml:5:1: field `limits.age`: too old");
        assert_eq!(c.err_at_key("absent", "absent", "x").line, 1, "an absent key: the file's start");
    }

    #[test]
    fn values_within_their_bounds_are_typed() {
        let r = raw();
        let c = Checker::new(Path::new("dir/x.toml"), TEXT);
        assert_eq!(c.ms(&r.wait_ms, "w", 0, 501).unwrap(), Duration::from_millis(501));
        let m = c.millis(&r.wait_ms, "w", 501, i64::MAX).unwrap();
        assert_eq!(
            (m.as_i32(), m.duration(), m.to_string()),
            (501, Duration::from_millis(501), "501 ms".into())
        );
        assert_eq!(c.bounded::<i32>(&r.n, "n", -3, 0).unwrap(), -3);
        assert_eq!(c.secs(&r.age, "age", 7, 7).unwrap(), Duration::from_secs(7));
        assert_eq!(c.base(), Path::new("dir"));
        assert_eq!(Checker::new(Path::new("x.toml"), "").base(), Path::new(""));
        let big = Spanned::new(0..0, i64::from(i32::MAX) + 1);
        assert!(c.millis(&big, "w", 0, i64::MAX).is_err(), "a Millis fits an i32");
        assert_eq!(Millis::new(-1), None);
    }

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
