//! Values written with Nginx's variables (`$host`, `$request_uri`, `$1`...), as a route's
//! `return`, `rewrite` and headers take them: parsed once at load (an unknown variable is a
//! conf error), rendered per request.

use std::net::IpAddr;

use regex::Captures;

/// A variable a value may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Var {
    Scheme,
    Host,
    HttpHost,
    RequestUri,
    Uri,
    Args,
    IsArgs,
    RemoteAddr,
    RequestId,
}

const VARS: [(&str, Var); 9] = [
    ("scheme", Var::Scheme),
    ("host", Var::Host),
    ("http_host", Var::HttpHost),
    ("request_uri", Var::RequestUri),
    ("uri", Var::Uri),
    ("args", Var::Args),
    ("is_args", Var::IsArgs),
    ("remote_addr", Var::RemoteAddr),
    ("request_id", Var::RequestId),
];

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Var(Var),
    /// `$1`..`$9`: a capture of the regex that matched (the rewrite's, else the route path's).
    Capture(usize),
}

/// A value with variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

/// What the variables are for one request.
#[derive(Debug, Clone, Default)]
pub struct Vars<'a> {
    /// `http` or `https`.
    pub scheme: &'a str,
    /// The host, lowercase, without port (`$host`).
    pub host: String,
    /// The `Host` field as sent (`$http_host`).
    pub http_host: &'a str,
    /// The path and query as sent (`$request_uri`).
    pub request_uri: &'a str,
    /// The path (`$uri`).
    pub uri: &'a str,
    /// The query, without `?` (`$args`).
    pub args: &'a str,
    /// The client (`$remote_addr`).
    pub remote_addr: Option<IpAddr>,
    /// The request's id (`$request_id`).
    pub request_id: &'a str,
}

impl Template {
    /// Parses `text`: `$name` or `${name}` of a known variable, `$1`..`$9`; a `$` before
    /// anything else is itself.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut lit = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('$') {
            lit.push_str(&rest[..at]);
            let after = &rest[at + 1..];
            let (name, len) = match after.strip_prefix('{') {
                Some(braced) => {
                    let end = braced.find('}').ok_or_else(|| format!("unclosed ${{ in {text:?}"))?;
                    (&braced[..end], end + 2)
                }
                None => {
                    let end =
                        after.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(after.len());
                    (&after[..end], end)
                }
            };
            rest = &after[len..];
            if name.is_empty() {
                lit.push('$');
                continue;
            }
            if !lit.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut lit)));
            }
            parts.push(part(name)?);
        }
        lit.push_str(rest);
        if !lit.is_empty() {
            parts.push(Part::Text(lit));
        }
        Ok(Self { parts })
    }

    /// Whether it names `$1`..`$9`.
    pub fn uses_captures(&self) -> bool {
        self.parts.iter().any(|p| matches!(p, Part::Capture(_)))
    }

    /// Its text with every variable's value (a capture the regex did not make is empty).
    pub fn render(&self, v: &Vars<'_>, caps: Option<&Captures<'_>>) -> String {
        let mut out = String::new();
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Capture(n) => out.push_str(caps.and_then(|c| c.get(*n)).map_or("", |m| m.as_str())),
                Part::Var(var) => value(&mut out, *var, v),
            }
        }
        out
    }

    /// Its text when it names no variable.
    pub fn literal(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [] => Some(""),
            [Part::Text(t)] => Some(t),
            _ => None,
        }
    }
}

fn part(name: &str) -> Result<Part, String> {
    if let Ok(n @ 1..=9) = name.parse::<usize>() {
        return Ok(Part::Capture(n));
    }
    match VARS.iter().find(|(known, _)| *known == name) {
        Some((_, var)) => Ok(Part::Var(*var)),
        None => {
            let known: Vec<_> = VARS.iter().map(|(k, _)| format!("${k}")).collect();
            Err(format!("unknown variable ${name} (known: {}, $1..$9)", known.join(", ")))
        }
    }
}

fn value(out: &mut String, var: Var, v: &Vars<'_>) {
    match var {
        Var::Scheme => out.push_str(v.scheme),
        Var::Host => out.push_str(&v.host),
        Var::HttpHost => out.push_str(v.http_host),
        Var::RequestUri => out.push_str(v.request_uri),
        Var::Uri => out.push_str(v.uri),
        Var::Args => out.push_str(v.args),
        Var::IsArgs => out.push_str(if v.args.is_empty() { "" } else { "?" }),
        Var::RemoteAddr => out.push_str(&v.remote_addr.map(|a| a.to_string()).unwrap_or_default()),
        Var::RequestId => out.push_str(v.request_id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_and_captures() {
        let v = Vars {
            scheme: "https",
            host: "shop.example".into(),
            http_host: "Shop.Example:8443",
            request_uri: "/a/b?x=1",
            uri: "/a/b",
            args: "x=1",
            remote_addr: Some("192.0.2.1".parse().unwrap()),
            request_id: "id1",
        };
        let t = Template::parse(
            "$scheme://${host}:1$request_uri|$uri$is_args$args|$http_host|$remote_addr|$request_id",
        )
        .unwrap();
        assert_eq!(
            t.render(&v, None),
            "https://shop.example:1/a/b?x=1|/a/b?x=1|Shop.Example:8443|192.0.2.1|id1"
        );
        let re = regex::Regex::new("^/a/(.*)$").unwrap();
        let caps = re.captures("/a/b");
        let t = Template::parse("/new/$1/$2$").unwrap();
        assert!(t.uses_captures());
        assert_eq!(t.render(&v, caps.as_ref()), "/new/b/$");
        assert_eq!(Template::parse("plain").unwrap().literal(), Some("plain"));
        assert!(Template::parse("$nope").unwrap_err().contains("unknown variable $nope"));
        assert!(Template::parse("${host").unwrap_err().contains("unclosed"));
    }
}
