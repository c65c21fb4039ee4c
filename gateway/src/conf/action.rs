//! What a `[[route]]` does besides proxying as is: `return` (an answer of its own, Nginx's
//! `return`), `rewrite`s (Nginx's, run in order, with its flags) and `replace_prefix`
//! (Nginx's `proxy_pass http://up/new/;` under a prefix location).

use protocol::conf::ConfError;
use serde::Deserialize;
use toml::Spanned;

use super::matching::{self, Location, Pattern};
use super::Checker;
use crate::template::Template;

/// `rewrite = { regex = '^/old/(.*)$', replacement = '/new/$1', flag = "last" }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRewrite {
    regex: Spanned<String>,
    replacement: Spanned<String>,
    flag: Option<Spanned<String>>,
}

/// `rewrite = { ... }` or `rewrite = [{ ... }, { ... }]`: one or several, in order (each
/// read by [`RawRewrite`]'s own rules, so an error keeps its place).
#[derive(Debug)]
pub(super) enum RawRewrites {
    One(RawRewrite),
    Many(Vec<RawRewrite>),
}

impl<'de> Deserialize<'de> for RawRewrites {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Either;
        impl<'de> serde::de::Visitor<'de> for Either {
            type Value = RawRewrites;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a table { regex, replacement, flag } or a list of them")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                RawRewrite::deserialize(serde::de::value::MapAccessDeserializer::new(map))
                    .map(RawRewrites::One)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
                Vec::deserialize(serde::de::value::SeqAccessDeserializer::new(seq)).map(RawRewrites::Many)
            }
        }
        d.deserialize_any(Either)
    }
}

/// Redirect statuses: the rest of a `return` is the `Location`.
const REDIRECTS: [u16; 5] = [301, 302, 303, 307, 308];

/// A route's own answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Return {
    /// Its status.
    pub status: u16,
    /// A redirect's `Location`.
    pub location: Option<Template>,
    /// Another status's body text (`text/plain`).
    pub text: Option<Template>,
}

/// What a rewrite does after it matched (Nginx's flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RewriteFlag {
    /// No flag in Nginx (`flag = "none"`): the route's next rewrites run on the new URI, then
    /// the routes are searched again with it (or the route's `return` answers).
    None,
    /// The routes are searched again with the new URI (at most 10 times, then 500).
    Last,
    /// The route keeps the request, the new URI goes upstream (the default: a route's one
    /// rewrite meant this before flags were read).
    Break,
    /// A 302 to the new URI.
    Redirect,
    /// A 301 to the new URI.
    Permanent,
}

impl RewriteFlag {
    fn parse(word: &str) -> Option<Self> {
        match word {
            "none" => Some(Self::None),
            "last" => Some(Self::Last),
            "break" => Some(Self::Break),
            "redirect" => Some(Self::Redirect),
            "permanent" => Some(Self::Permanent),
            _ => None,
        }
    }
}

/// One `rewrite` of a route: a regex over the URI, replaced (with `$1`..) when it matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegexRewrite {
    /// What is matched against the path.
    pub regex: Pattern,
    /// The new path (and query, if it has one), or a URL to redirect to.
    pub replacement: Template,
    /// What follows a match.
    pub flag: RewriteFlag,
    /// The status of a redirect (`redirect`, `permanent`, or a replacement that is a URL).
    pub redirect: Option<u16>,
}

/// `replace_prefix`: the route's prefix replaced by `to` on the way upstream (Nginx's URI in
/// `proxy_pass`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixRewrite {
    /// The route's prefix (its `path`).
    pub from: String,
    /// What replaces it.
    pub to: String,
}

/// Reads `return`: `"CODE"`, `"CODE text"`, `"CODE URL"` (301, 302, 303, 307, 308) or `"URL"`
/// (302), as Nginx's.
pub(super) fn answer(c: &Checker<'_>, v: &Spanned<String>, field: &str) -> Result<Return, ConfError> {
    let err = |m: String| c.err(v.span(), field, m);
    let text = v.get_ref().trim();
    let (first, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let template = |t: &str| Template::parse(t.trim()).map_err(err);
    if ["http://", "https://", "$scheme"].iter().any(|s| text.starts_with(s)) {
        return Ok(Return { status: 302, location: Some(template(text)?), text: None });
    }
    let status = match first.parse::<u16>() {
        Ok(s @ 200..=599) if s != 444 => s,
        _ => {
            return Err(err(format!(
                "{first:?} is not a status: write \"CODE\", \"CODE text\", \"301 URL\" (or 302, 303, 307, \
                 308) or a URL, CODE between 200 and 599 (Nginx's 444 is not mapped)"
            )))
        }
    };
    if !REDIRECTS.contains(&status) {
        let text = (!rest.trim().is_empty()).then(|| template(rest)).transpose()?;
        return Ok(Return { status, location: None, text });
    }
    if rest.trim().is_empty() {
        return Err(err(format!(
            "a {status} needs the URL to send to: \"{status} https://$host$request_uri\""
        )));
    }
    Ok(Return { status, location: Some(template(rest)?), text: None })
}

/// Statuses a route's `error_page` may replace: those the gateway answers in the upstream's
/// place (the route's own `return` writes its text).
const ERROR_PAGE_STATUSES: [u16; 2] = [502, 504];

/// Largest `error_page` file.
const ERROR_PAGE_MAX: u64 = 1 << 20;

/// Reads `error_page = { 502 = "errors/50x.html" }`: each file once, at load (relative paths
/// from the server file's folder).
pub(super) fn error_pages(
    c: &Checker<'_>,
    prefix: &str,
    raw: &Option<std::collections::BTreeMap<Spanned<String>, Spanned<String>>>,
) -> Result<Vec<(u16, bytes::Bytes)>, ConfError> {
    let mut pages = Vec::new();
    for (k, v) in raw.iter().flatten() {
        let field = format!("{prefix}.error_page.{}", k.get_ref());
        let status = k.get_ref().parse::<u16>().ok().filter(|s| ERROR_PAGE_STATUSES.contains(s));
        let Some(status) = status else {
            return Err(c.err(
                k.span(),
                &field,
                "the status must be 502 or 504 (the answers the gateway writes for a route)",
            ));
        };
        let path = c.base().join(v.get_ref());
        let read = std::fs::metadata(&path).and_then(|m| match m.len() <= ERROR_PAGE_MAX {
            true => std::fs::read(&path),
            false => Err(std::io::Error::other("larger than 1 MiB")),
        });
        let body =
            read.map_err(|e| c.err(v.span(), &field, format!("cannot read {}: {e}", path.display())))?;
        pages.push((status, bytes::Bytes::from(body)));
    }
    Ok(pages)
}

/// Reads a route's `rewrite`s (one table or a list, run in order) and `replace_prefix`.
pub(super) fn rewrites(
    c: &Checker<'_>,
    prefix: &str,
    raw: (&Option<RawRewrites>, &Option<Spanned<String>>),
    location: &Location,
) -> Result<(Vec<RegexRewrite>, Option<PrefixRewrite>), ConfError> {
    let list = match raw.0 {
        None => Vec::new(),
        Some(RawRewrites::One(r)) => vec![regex_rewrite(c, &format!("{prefix}.rewrite"), r)?],
        Some(RawRewrites::Many(all)) => all
            .iter()
            .enumerate()
            .map(|(i, r)| regex_rewrite(c, &format!("{prefix}.rewrite[{i}]"), r))
            .collect::<Result<_, _>>()?,
    };
    let Some(to) = raw.1 else { return Ok((list, None)) };
    let field = format!("{prefix}.replace_prefix");
    let Some(from) = location.prefix() else {
        return Err(c.err(to.span(), &field, "a regex path has no prefix to replace: use `rewrite`"));
    };
    if !to.get_ref().starts_with('/') {
        return Err(c.err(to.span(), &field, "must start with /"));
    }
    Ok((list, Some(PrefixRewrite { from: from.to_string(), to: to.get_ref().clone() })))
}

/// Whether a replacement is a URL (then the rewrite redirects, whatever its flag, as Nginx's).
fn is_url(to: &str) -> bool {
    ["http://", "https://", "$scheme"].iter().any(|s| to.starts_with(s))
}

fn regex_rewrite(c: &Checker<'_>, field: &str, r: &RawRewrite) -> Result<RegexRewrite, ConfError> {
    let regex = matching::compile(c, &r.regex, &format!("{field}.regex"), r.regex.get_ref())?;
    let rfield = format!("{field}.replacement");
    let to = r.replacement.get_ref();
    if !to.starts_with('/') && !is_url(to) {
        return Err(c.err(
            r.replacement.span(),
            &rfield,
            "must be a path starting with / or a URL (http://, https://, $scheme: a redirect)",
        ));
    }
    let replacement = Template::parse(to).map_err(|e| c.err(r.replacement.span(), &rfield, e))?;
    let flag = match &r.flag {
        None => RewriteFlag::Break,
        Some(f) => RewriteFlag::parse(f.get_ref()).ok_or_else(|| {
            c.err(
                f.span(),
                &format!("{field}.flag"),
                format!("must be last, break, redirect, permanent or none, found {:?}", f.get_ref()),
            )
        })?,
    };
    let redirect = match (is_url(to), flag) {
        (_, RewriteFlag::Permanent) => Some(301),
        (true, _) | (_, RewriteFlag::Redirect) => Some(302),
        _ => None,
    };
    Ok(RegexRewrite { regex, replacement, flag, redirect })
}
