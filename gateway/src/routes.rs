//! The shop's routes. The sale's paths (`/seckill/...`, `plugins::SaleRoute`) are matched first;
//! every other request is matched against the shop's `[[route]]`s like Nginx
//! `server`/`location`: a route with a host beats one without, then the longest path prefix wins.

use crate::conf::RouteConf;

/// The shop routes, ordered for matching.
#[derive(Debug, Clone, Default)]
pub struct RouteTable {
    /// (host, prefix, index into the conf's routes), most specific first.
    entries: Vec<(Option<String>, String, usize)>,
}

impl RouteTable {
    /// Builds the table from the conf's routes.
    pub fn new(routes: &[RouteConf]) -> Self {
        let mut entries: Vec<_> =
            routes.iter().enumerate().map(|(i, r)| (r.host.clone(), r.path_prefix.clone(), i)).collect();
        // Host-specific first, then longer prefixes first, then file order.
        entries.sort_by(|a, b| {
            b.0.is_some().cmp(&a.0.is_some()).then(b.1.len().cmp(&a.1.len())).then(a.2.cmp(&b.2))
        });
        Self { entries }
    }

    /// The index of the route for `host` (any case, port allowed) and `path`.
    pub fn find(&self, host: Option<&str>, path: &str) -> Option<usize> {
        let host = host.map(|h| h.rsplit_once(':').map_or(h, |(name, _)| name));
        self.entries
            .iter()
            .find(|(h, prefix, _)| {
                h.as_deref().is_none_or(|h| host.is_some_and(|host| host.eq_ignore_ascii_case(h)))
                    && path.starts_with(prefix.as_str())
            })
            .map(|(_, _, i)| *i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::PoolConf;
    use std::time::Duration;

    fn route(host: Option<&str>, prefix: &str) -> RouteConf {
        RouteConf {
            name: prefix.into(),
            host: host.map(str::to_string),
            path_prefix: prefix.into(),
            pool: PoolConf {
                upstreams: vec!["127.0.0.1:1".parse().unwrap()],
                connect_timeout: Duration::from_millis(1),
                read_timeout: Duration::from_millis(1),
                health_check_interval: Duration::from_millis(100),
                health_check_path: None,
            },
            client_max_body_size: None,
            compression_level: 0,
        }
    }

    #[test]
    fn host_then_longest_prefix() {
        let t = RouteTable::new(&[route(None, "/"), route(None, "/api/"), route(Some("admin.shop"), "/")]);
        assert_eq!(t.find(Some("www.shop"), "/index.html"), Some(0));
        assert_eq!(t.find(Some("www.shop"), "/api/cart"), Some(1));
        assert_eq!(t.find(Some("ADMIN.shop:8080"), "/api/cart"), Some(2));
        assert_eq!(t.find(None, "/api/x"), Some(1));
        let only_api = RouteTable::new(&[route(None, "/api/")]);
        assert_eq!(only_api.find(None, "/other"), None);
    }
}
