//! What a `[[route]]` does besides proxying as is: `return` (an answer of its own, Nginx's
//! `return`) and a path change before proxying (`rewrite`, Nginx's `rewrite ... break`, or
//! `replace_prefix`, Nginx's `proxy_pass http://up/new/;` under a prefix location).

use protocol::conf::ConfError;
use serde::Deserialize;
use toml::Spanned;

use super::matching::{self, Location, Pattern};
use super::Checker;
use crate::template::Template;

/// `rewrite = { regex = '^/old/(.*)$', replacement = '/new/$1' }`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRewrite {
    regex: Spanned<String>,
    replacement: Spanned<String>,
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

/// How a route changes the path before proxying.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rewrite {
    /// A regex over the path, replaced (with `$1`..) when it matches; else the path stays.
    Regex {
        /// What is matched against the path.
        regex: Pattern,
        /// The new path (and query, if it has one).
        replacement: Template,
    },
    /// The route's prefix replaced by `to`.
    Prefix {
        /// The route's prefix (its `path`).
        from: String,
        /// What replaces it.
        to: String,
    },
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

/// Reads `rewrite` or `replace_prefix` (not both) of a route whose path is `location`.
pub(super) fn rewrite(
    c: &Checker<'_>,
    prefix: &str,
    raw: (&Option<RawRewrite>, &Option<Spanned<String>>),
    location: &Location,
) -> Result<Option<Rewrite>, ConfError> {
    match raw {
        (Some(_), Some(p)) => Err(c.err(
            p.span(),
            &format!("{prefix}.replace_prefix"),
            "give `rewrite` or `replace_prefix`, not both",
        )),
        (Some(r), None) => regex_rewrite(c, prefix, r).map(Some),
        (None, Some(to)) => {
            let field = format!("{prefix}.replace_prefix");
            let Some(from) = location.prefix() else {
                return Err(c.err(to.span(), &field, "a regex path has no prefix to replace: use `rewrite`"));
            };
            if !to.get_ref().starts_with('/') {
                return Err(c.err(to.span(), &field, "must start with /"));
            }
            Ok(Some(Rewrite::Prefix { from: from.to_string(), to: to.get_ref().clone() }))
        }
        (None, None) => Ok(None),
    }
}

fn regex_rewrite(c: &Checker<'_>, prefix: &str, r: &RawRewrite) -> Result<Rewrite, ConfError> {
    let regex = matching::compile(c, &r.regex, &format!("{prefix}.rewrite.regex"), r.regex.get_ref())?;
    let field = format!("{prefix}.rewrite.replacement");
    let to = r.replacement.get_ref();
    if !to.starts_with('/') {
        return Err(c.err(
            r.replacement.span(),
            &field,
            "must be a path starting with / (a redirect is a `return`, e.g. \"301 https://$host$1\")",
        ));
    }
    let replacement = Template::parse(to).map_err(|e| c.err(r.replacement.span(), &field, e))?;
    Ok(Rewrite::Regex { regex, replacement })
}
