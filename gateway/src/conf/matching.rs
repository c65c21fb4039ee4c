//! What a `[[route]]` matches, in Nginx's words: its `host` (a `server_name`: exact, `*.a.b`,
//! `.a.b`, `www.a.*` or `~regex`) and its `path` (a `location`: `/prefix`, `= /exact`,
//! `^~ /prefix`, `~ regex`, `~* regex`). Regexes are compiled here, once, at load.

use protocol::conf::ConfError;
use regex::{Regex, RegexBuilder};
use toml::Spanned;

use super::Checker;

/// Bound on one compiled regex (the `regex` crate's own default is 10 MiB); a route's regex is
/// a short pattern, and many of them are matched as one set.
const REGEX_SIZE_LIMIT: usize = 1 << 20;

/// A compiled regex of the conf, equal to another when written the same.
#[derive(Debug, Clone)]
pub struct Pattern(Regex);

impl Pattern {
    /// The compiled regex.
    pub fn regex(&self) -> &Regex {
        &self.0
    }

    /// Its text as compiled (`(?i)` in front for `~*`).
    pub fn as_str(&self) -> &str {
        self.0.as_str()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl Eq for Pattern {}

/// Compiles `text` (field `field`, value `v`), or the regex crate's error at its place.
pub(super) fn compile(
    c: &Checker<'_>,
    v: &Spanned<String>,
    field: &str,
    text: &str,
) -> Result<Pattern, ConfError> {
    RegexBuilder::new(text)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map(Pattern)
        .map_err(|e| c.err(v.span(), field, format!("not a valid regex {text:?}: {e}")))
}

/// A host name to match, as Nginx's `server_name`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostName {
    /// `shop.example.com` (lowercase).
    Exact(String),
    /// `*.example.com` (suffix `.example.com`), or `.example.com` (`bare`: the name itself too).
    Leading {
        /// The suffix, from its dot.
        suffix: String,
        /// Whether `example.com` itself matches (`.example.com`).
        bare: bool,
    },
    /// `www.example.*`: the prefix, to its dot (`www.example.`).
    Trailing(String),
    /// `~^(www\.)?shop\.(com|net)$`, matched against the lowercase host.
    Regex(Pattern),
}

impl HostName {
    /// The name as written (lowercase), which groups routes into one Nginx `server`.
    pub fn key(&self) -> String {
        match self {
            Self::Exact(h) => h.clone(),
            Self::Leading { suffix, bare: true } => suffix.clone(),
            Self::Leading { suffix, bare: false } => format!("*{suffix}"),
            Self::Trailing(p) => format!("{p}*"),
            Self::Regex(p) => format!("~{}", p.as_str()),
        }
    }
}

/// Reads a `host`.
pub(super) fn host(c: &Checker<'_>, v: &Spanned<String>, field: &str) -> Result<HostName, ConfError> {
    let raw = v.get_ref().trim();
    if let Some(re) = raw.strip_prefix('~') {
        return Ok(HostName::Regex(compile(c, v, field, re.trim_start())?));
    }
    let h = raw.to_ascii_lowercase();
    let name_ok = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && !s.ends_with('.')
            && s.chars().all(|ch| ch.is_ascii_alphanumeric() || matches!(ch, '-' | '.' | '_'))
    };
    let parsed = if let Some(rest) = h.strip_prefix("*.") {
        name_ok(rest).then(|| HostName::Leading { suffix: format!(".{rest}"), bare: false })
    } else if let Some(rest) = h.strip_suffix(".*") {
        name_ok(rest).then(|| HostName::Trailing(format!("{rest}.")))
    } else if let Some(rest) = h.strip_prefix('.') {
        name_ok(rest).then(|| HostName::Leading { suffix: format!(".{rest}"), bare: true })
    } else {
        name_ok(&h).then(|| HostName::Exact(h.clone()))
    };
    parsed.ok_or_else(|| {
        c.err(
            v.span(),
            field,
            format!(
                "{raw:?} is not a host name without port: write `shop.example.com`, `*.example.com`, \
                 `.example.com`, `www.example.*` or `~regex`"
            ),
        )
    })
}

/// A path to match, as Nginx's `location`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// `= /path`: this path only; wins at once.
    Exact(String),
    /// `/prefix`: the longest prefix wins, unless a regex matches.
    Prefix(String),
    /// `^~ /prefix`: a prefix that, when it is the longest, stops the regex search.
    PrefixStop(String),
    /// `~ regex` (`~*`: case-insensitive), tried in file order after the prefixes.
    Regex(Pattern),
}

impl Location {
    /// How it is written, normalized: two routes of one host with the same key are one place
    /// (`/a` and `^~ /a` are, as Nginx says "duplicate location").
    pub fn key(&self) -> String {
        match self {
            Self::Exact(p) => format!("= {p}"),
            Self::Prefix(p) | Self::PrefixStop(p) => p.clone(),
            Self::Regex(p) => format!("~ {}", p.as_str()),
        }
    }

    /// The prefix of a prefix or exact location.
    pub fn prefix(&self) -> Option<&str> {
        match self {
            Self::Exact(p) | Self::Prefix(p) | Self::PrefixStop(p) => Some(p),
            Self::Regex(_) => None,
        }
    }
}

/// Reads a `path` (or the older `path_prefix`, always a prefix).
pub(super) fn location(
    c: &Checker<'_>,
    v: &Spanned<String>,
    field: &str,
    nginx: bool,
) -> Result<Location, ConfError> {
    let text = v.get_ref().trim();
    let path = |p: &str| -> Result<String, ConfError> {
        match p.starts_with('/') && !p.contains(char::is_whitespace) {
            true => Ok(p.to_string()),
            false => Err(c.err(v.span(), field, format!("{p:?} must start with / (and hold no space)"))),
        }
    };
    if !nginx || text.starts_with('/') {
        return Ok(Location::Prefix(path(text)?));
    }
    let (kind, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let rest = rest.trim();
    if rest.is_empty() && matches!(kind, "=" | "^~" | "~" | "~*") {
        return Err(c.err(
            v.span(),
            field,
            format!("{kind:?} must be followed by a space and a path or regex"),
        ));
    }
    match kind {
        "=" => Ok(Location::Exact(path(rest)?)),
        "^~" => Ok(Location::PrefixStop(path(rest)?)),
        "~" => Ok(Location::Regex(compile(c, v, field, rest)?)),
        "~*" => Ok(Location::Regex(compile(c, v, field, &format!("(?i){rest}"))?)),
        _ => Err(c.err(
            v.span(),
            field,
            format!(
                "unknown match kind {kind:?}: write `/prefix`, `= /exact`, `^~ /prefix` (no regex after \
                 it), `~ regex` or `~* regex` (case-insensitive)"
            ),
        )),
    }
}

/// A host name (letters, digits, `-`, dot-separated labels), or `*.` and one.
pub(super) fn host_ok(h: &str) -> bool {
    let name = h.strip_prefix("*.").unwrap_or(h);
    !name.is_empty()
        && name.split('.').all(|l| !l.is_empty() && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
}
