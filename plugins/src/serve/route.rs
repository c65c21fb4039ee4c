//! The sale's paths, decided once per request ([`SaleRoute::of`]) and carried in the proxy's
//! context to the end of it (answer, metrics, access line).
//!
//! Every path under `/seckill/` is the sale's; nothing else is ("not mine": the proxy routes it
//! to the rest of the shop).

use crate::serve::page::{self, Asset};

/// Prefix of every sale path.
pub const PREFIX: &str = "/seckill/";

/// What a sale path asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /seckill/{campaign}/{path}/order`: an order. `hidden_path` is the token's hidden
    /// segment (empty for `/seckill/{campaign}/order`, which is `BAD_PATH`).
    Order {
        /// The hidden segment of the path.
        hidden_path: String,
    },
    /// `POST /seckill/{campaign}/captcha`: a proof-of-work challenge.
    Captcha,
    /// `POST /seckill/{campaign}/token`: a campaign token for a login JWT and a solved captcha.
    Token,
    /// `GET /seckill/{campaign}/info`: the campaign's window and switches, by server time.
    Info,
    /// `GET /seckill/{campaign}/result/{request_id}`: passed to the order writer once the
    /// request's result token is checked.
    Result {
        /// The id the order was answered under.
        request_id: String,
    },
    /// `GET /seckill/{campaign}/` and its files: the buyer's page (`crate::serve::page`).
    Page(&'static Asset),
    /// `GET /seckill/{campaign}`: redirected to the page (its files' addresses are relative).
    PageNoSlash,
    /// Under `/seckill/` but nothing the sale serves.
    Unknown,
}

impl Endpoint {
    /// The endpoints that cost more than a shop request (a JWT, HMACs, a Redis call), shed
    /// first when the proxy runs late (`crate::checks::pressure`).
    pub fn costly(&self) -> bool {
        matches!(self, Endpoint::Order { .. } | Endpoint::Captcha | Endpoint::Token)
    }
}

/// A request's sale path: the campaign and what is asked of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SaleRoute {
    /// The campaign id as the path names it (empty for [`Endpoint::Unknown`]).
    pub campaign: String,
    /// What is asked.
    pub endpoint: Endpoint,
}

impl SaleRoute {
    /// The sale route of `path`; `None` when the path is not the sale's.
    pub fn of(path: &str) -> Option<Self> {
        let rest = path.strip_prefix(PREFIX)?;
        let mut parts = rest.split('/');
        let campaign = parts.next().unwrap_or("");
        let unknown = Some(Self { campaign: String::new(), endpoint: Endpoint::Unknown });
        if campaign.is_empty() {
            return unknown;
        }
        let endpoint = match (parts.next(), parts.next(), parts.next()) {
            (None, None, None) => Endpoint::PageNoSlash,
            (Some(name), None, None) if page::is_asset(name) => match page::find(name) {
                Some(asset) => Endpoint::Page(asset),
                None => return unknown,
            },
            (Some("order"), None, None) => Endpoint::Order { hidden_path: String::new() },
            (Some("info"), None, None) => Endpoint::Info,
            (Some("captcha"), None, None) => Endpoint::Captcha,
            (Some("token"), None, None) => Endpoint::Token,
            (Some("result"), Some(id), None) if !id.is_empty() => Endpoint::Result { request_id: id.into() },
            (Some(path), Some("order"), None) => Endpoint::Order { hidden_path: path.into() },
            _ => return unknown,
        };
        Some(Self { campaign: campaign.to_string(), endpoint })
    }

    /// Whether a buyer's flow counts it (captcha, token and order requests of a campaign).
    pub fn is_flow(&self) -> bool {
        matches!(self.endpoint, Endpoint::Order { .. } | Endpoint::Captcha | Endpoint::Token)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(path: &str) -> Option<(String, Endpoint)> {
        SaleRoute::of(path).map(|r| (r.campaign, r.endpoint))
    }

    fn at(campaign: &str, endpoint: Endpoint) -> Option<(String, Endpoint)> {
        Some((campaign.to_string(), endpoint))
    }

    #[test]
    fn sale_paths() {
        let order = |p: &str| Endpoint::Order { hidden_path: p.into() };
        let result = |id: &str| Endpoint::Result { request_id: id.into() };
        assert_eq!(of("/seckill/c1/order"), at("c1", order("")));
        assert_eq!(of("/seckill/c1/ab12/order"), at("c1", order("ab12")));
        assert_eq!(of("/seckill/c1/captcha"), at("c1", Endpoint::Captcha));
        assert_eq!(of("/seckill/c1/token"), at("c1", Endpoint::Token));
        assert_eq!(of("/seckill/c1/result/order"), at("c1", result("order")));
        assert_eq!(of("/seckill/c1/info"), at("c1", Endpoint::Info));
        assert_eq!(of("/seckill/c1/result/r-1"), at("c1", result("r-1")));
        assert_eq!(of("/seckill/c1/result/"), at("", Endpoint::Unknown));
        assert_eq!(of("/seckill/c1/order/x"), at("", Endpoint::Unknown));
        assert_eq!(of("/seckill/c1/a/b/order"), at("", Endpoint::Unknown));
        assert_eq!(of("/seckill//order"), at("", Endpoint::Unknown));
        assert_eq!(of("/shop/seckill/c1/order"), None);
        assert_eq!(of("/seckill/c1/"), at("c1", Endpoint::Page(page::find("").unwrap())));
        assert_eq!(of("/seckill/c1/app.js"), at("c1", Endpoint::Page(page::find("app.js").unwrap())));
        assert_eq!(of("/seckill/c1"), at("c1", Endpoint::PageNoSlash));
        assert_eq!(of("/seckill/c1/nope.js"), at("", Endpoint::Unknown));
        assert_eq!(of("/seckill/c1/app.js/x"), at("", Endpoint::Unknown));
    }
}
