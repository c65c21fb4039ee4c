//! The shop's routes. The sale's paths (`/seckill/...`, `plugins::SaleRoute`) are matched first;
//! every other request is matched against the shop's `[[route]]`s the way Nginx picks a
//! `server`, then a `location` in it.
//!
//! The host (lowercase, without port or trailing dot) picks the routes of one host ("server"):
//! the exact name; else the longest `*.name` / `.name`; else the longest `name.*`; else the first
//! `~regex` in file order; else the default: the routes without `host`, or those of the host
//! marked `default_server`. The path then picks one route among that host's only (no fallback
//! to another host's, as in Nginx): `= /path` when equal; else the longest prefix, and if it is
//! `^~`, that one; else the first `~`/`~*` regex in file order; else the longest prefix. The
//! path is matched normalized as in Nginx (`crate::uri::normalize`: decoded, `//` merged, `.`
//! and `..` resolved).
//!
//! Every regex of a host (and every host regex) is matched in one pass, as a `RegexSet`.

use std::borrow::Cow;
use std::collections::HashMap;

use regex::{RegexSet, RegexSetBuilder};

use crate::conf::{HostName, Location, RouteConf};

/// The routes of one host, ordered for matching.
#[derive(Debug, Clone, Default)]
struct Server {
    /// `= /path` → route.
    exact: HashMap<String, usize>,
    /// (prefix, whether `^~`, route), longest first, then file order.
    prefixes: Vec<(String, bool, usize)>,
    /// The regex locations, in file order, as one set; with their routes.
    regexes: Option<RegexSet>,
    regex_routes: Vec<usize>,
}

/// The shop routes, ordered for matching.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    servers: Vec<Server>,
    exact: HashMap<String, usize>,
    /// (suffix from its dot, whether the bare name matches too, server), longest first.
    leading: Vec<(String, bool, usize)>,
    /// (prefix to its dot, server), longest first.
    trailing: Vec<(String, usize)>,
    host_regexes: Option<RegexSet>,
    regex_servers: Vec<usize>,
    default: Option<usize>,
}

/// The routes of each host (`None`: the routes without host), hosts in order of first
/// appearance; a route with several hosts is in each one's.
fn groups(routes: &[RouteConf]) -> Vec<(Option<HostName>, Vec<usize>)> {
    let mut groups: Vec<(Option<String>, Option<HostName>, Vec<usize>)> = Vec::new();
    for (i, r) in routes.iter().enumerate() {
        let hosts: Vec<Option<&HostName>> = match r.hosts.is_empty() {
            true => vec![None],
            false => r.hosts.iter().map(Some).collect(),
        };
        for host in hosts {
            let key = host.map(HostName::key);
            match groups.iter_mut().find(|(k, _, _)| *k == key) {
                Some((_, _, members)) => members.push(i),
                None => groups.push((key, host.cloned(), vec![i])),
            }
        }
    }
    groups.into_iter().map(|(_, host, members)| (host, members)).collect()
}

/// Compiles the patterns of a set (each compiled alone at load already).
fn set<S: AsRef<str>>(patterns: Vec<S>) -> Result<Option<RegexSet>, regex::Error> {
    if patterns.is_empty() {
        return Ok(None);
    }
    RegexSetBuilder::new(patterns).size_limit(64 << 20).build().map(Some)
}

impl Server {
    fn new(routes: &[RouteConf], members: &[usize]) -> Result<Self, regex::Error> {
        let mut s = Server::default();
        let mut patterns = Vec::new();
        for &i in members {
            match &routes[i].location {
                Location::Exact(p) => {
                    s.exact.insert(p.clone(), i);
                }
                Location::Prefix(p) => s.prefixes.push((p.clone(), false, i)),
                Location::PrefixStop(p) => s.prefixes.push((p.clone(), true, i)),
                Location::Regex(r) => {
                    patterns.push(r.as_str());
                    s.regex_routes.push(i);
                }
            }
        }
        s.prefixes.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.2.cmp(&b.2)));
        s.regexes = set(patterns)?;
        Ok(s)
    }

    fn find(&self, path: &str) -> Option<usize> {
        if let Some(&i) = self.exact.get(path) {
            return Some(i);
        }
        let prefix = self.prefixes.iter().find(|(p, _, _)| path.starts_with(p.as_str()));
        if let Some((_, true, i)) = prefix {
            return Some(*i);
        }
        let regex = self.regexes.as_ref().and_then(|set| set.matches(path).into_iter().next());
        regex.map(|k| self.regex_routes[k]).or(prefix.map(|p| p.2))
    }
}

impl RouteTable {
    /// Builds the table from the conf's routes (their regexes were checked one by one at load;
    /// the error here would be the sets' size).
    pub fn new(routes: &[RouteConf]) -> Result<Self, regex::Error> {
        let mut t = RouteTable::default();
        let mut host_patterns = Vec::new();
        for (s, (host, members)) in groups(routes).into_iter().enumerate() {
            t.servers.push(Server::new(routes, &members)?);
            let default_here = |&i: &usize| {
                routes[i].default_server
                    && routes[i].hosts.first().map(HostName::key) == host.as_ref().map(HostName::key)
            };
            if host.is_none() || members.iter().any(default_here) {
                t.default = Some(s);
            }
            match host {
                None => {}
                Some(HostName::Exact(h)) => {
                    t.exact.insert(h, s);
                }
                Some(HostName::Leading { suffix, bare }) => t.leading.push((suffix, bare, s)),
                Some(HostName::Trailing(p)) => t.trailing.push((p, s)),
                Some(HostName::Regex(r)) => {
                    host_patterns.push(r.as_str().to_string());
                    t.regex_servers.push(s);
                }
            }
        }
        t.leading.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.2.cmp(&b.2)));
        t.trailing.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        t.host_regexes = set(host_patterns)?;
        Ok(t)
    }

    /// The index of the route for `host` (any case, port allowed) and `path`.
    pub fn find(&self, host: Option<&str>, path: &str) -> Option<usize> {
        let server = host.map(normalize).and_then(|h| self.server(&h)).or(self.default)?;
        self.servers[server].find(path)
    }

    /// The server of a lowercase host, by Nginx's order.
    fn server(&self, host: &str) -> Option<usize> {
        if let Some(&s) = self.exact.get(host) {
            return Some(s);
        }
        let leading = self.leading.iter().find(|(suffix, bare, _)| {
            (host.len() > suffix.len() && host.ends_with(suffix.as_str())) || (*bare && host == &suffix[1..])
        });
        if let Some((_, _, s)) = leading {
            return Some(*s);
        }
        let trailing =
            self.trailing.iter().find(|(p, _)| host.len() > p.len() && host.starts_with(p.as_str()));
        if let Some((_, s)) = trailing {
            return Some(*s);
        }
        let set = self.host_regexes.as_ref()?;
        set.matches(host).into_iter().next().map(|k| self.regex_servers[k])
    }
}

/// The host without port or trailing dot, lowercase (borrowed when it already is).
fn normalize(host: &str) -> Cow<'_, str> {
    let name = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(host, |(addr, _)| addr),
        None => host.rsplit_once(':').map_or(host, |(name, _)| name),
    };
    let name = name.strip_suffix('.').unwrap_or(name);
    match name.bytes().any(|b| b.is_ascii_uppercase()) {
        true => Cow::Owned(name.to_ascii_lowercase()),
        false => Cow::Borrowed(name),
    }
}

#[cfg(test)]
mod tests;
