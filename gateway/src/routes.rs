//! Which handler a request goes to.
//!
//! Campaign paths (`/seckill/{campaign}/...`) are the gateway's own and are matched first; every
//! other request is matched against the shop's `[[route]]`s like Nginx `server`/`location`:
//! a route with a host beats one without, then the longest path prefix wins.

use crate::conf::RouteConf;

/// Prefix of every campaign path.
pub const CAMPAIGN_PREFIX: &str = "/seckill/";

/// A campaign path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CampaignPath<'a> {
    /// `POST /seckill/{campaign}/{path}/order`: reserve, answered by the gateway. `path` is the
    /// token's hidden segment (empty for `/seckill/{campaign}/order`, which is `BAD_PATH`).
    Order(&'a str, &'a str),
    /// `POST /seckill/{campaign}/captcha`: a proof-of-work challenge.
    Captcha(&'a str),
    /// `POST /seckill/{campaign}/token`: a campaign token for a login JWT and a solved captcha.
    Token(&'a str),
    /// `GET /seckill/{campaign}/info`: answered by the gateway.
    Info(&'a str),
    /// `GET /seckill/{campaign}/result/{request_id}`: proxied to the order writer once the
    /// request's result token is checked.
    Result(&'a str, &'a str),
    /// `GET /seckill/{campaign}/` and its files (`app.js`, ...): the buyer's page
    /// ([`crate::page`]); the file's name, `""` for the page itself.
    Page(&'a str, &'a str),
    /// `GET /seckill/{campaign}`: redirected to the page (its files' addresses are relative).
    PageNoSlash(&'a str),
    /// Under `/seckill/` but nothing we serve.
    Unknown,
}

/// Classifies `path`; `None` when it is not a campaign path.
pub fn campaign_path(path: &str) -> Option<CampaignPath<'_>> {
    let rest = path.strip_prefix(CAMPAIGN_PREFIX)?;
    let mut parts = rest.split('/');
    let campaign = parts.next().unwrap_or("");
    if campaign.is_empty() {
        return Some(CampaignPath::Unknown);
    }
    Some(match (parts.next(), parts.next(), parts.next()) {
        (None, None, None) => CampaignPath::PageNoSlash(campaign),
        (Some(name), None, None) if crate::page::is_asset(name) => CampaignPath::Page(campaign, name),
        (Some("order"), None, None) => CampaignPath::Order(campaign, ""),
        (Some("info"), None, None) => CampaignPath::Info(campaign),
        (Some("captcha"), None, None) => CampaignPath::Captcha(campaign),
        (Some("token"), None, None) => CampaignPath::Token(campaign),
        (Some("result"), Some(id), None) if !id.is_empty() => CampaignPath::Result(campaign, id),
        (Some(path), Some("order"), None) => CampaignPath::Order(campaign, path),
        _ => CampaignPath::Unknown,
    })
}

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

    #[test]
    fn campaign_paths() {
        assert_eq!(campaign_path("/seckill/c1/order"), Some(CampaignPath::Order("c1", "")));
        assert_eq!(campaign_path("/seckill/c1/ab12/order"), Some(CampaignPath::Order("c1", "ab12")));
        assert_eq!(campaign_path("/seckill/c1/captcha"), Some(CampaignPath::Captcha("c1")));
        assert_eq!(campaign_path("/seckill/c1/token"), Some(CampaignPath::Token("c1")));
        assert_eq!(campaign_path("/seckill/c1/result/order"), Some(CampaignPath::Result("c1", "order")));
        assert_eq!(campaign_path("/seckill/c1/info"), Some(CampaignPath::Info("c1")));
        assert_eq!(campaign_path("/seckill/c1/result/r-1"), Some(CampaignPath::Result("c1", "r-1")));
        assert_eq!(campaign_path("/seckill/c1/result/"), Some(CampaignPath::Unknown));
        assert_eq!(campaign_path("/seckill/c1/order/x"), Some(CampaignPath::Unknown));
        assert_eq!(campaign_path("/seckill/c1/a/b/order"), Some(CampaignPath::Unknown));
        assert_eq!(campaign_path("/seckill//order"), Some(CampaignPath::Unknown));
        assert_eq!(campaign_path("/shop/seckill/c1/order"), None);
        assert_eq!(campaign_path("/seckill/c1/"), Some(CampaignPath::Page("c1", "")));
        assert_eq!(campaign_path("/seckill/c1/app.js"), Some(CampaignPath::Page("c1", "app.js")));
        assert_eq!(campaign_path("/seckill/c1"), Some(CampaignPath::PageNoSlash("c1")));
        assert_eq!(campaign_path("/seckill/c1/nope.js"), Some(CampaignPath::Unknown));
        assert_eq!(campaign_path("/seckill/c1/app.js/x"), Some(CampaignPath::Unknown));
    }

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
