//! The sale's part of a request's context ([`SaleCtx`]): what the sale decides once per
//! request and keeps to its end.

use std::net::IpAddr;

use chrono::{DateTime, Utc};
use protocol::codes::Code;

use crate::checks::budget::Permit;
use crate::serve::route::SaleRoute;

/// The sale's per-request state: a proxy makes one in `ProxyHttp::new_ctx` (as its `CTX`, or a
/// field of its own) and hands it to the sale's hooks (`FlashSale::request_filter`,
/// `FlashSale::logging`). It holds the request's arrival, id, client and route, whether it goes
/// to the order writer, and the campaign's concurrency-budget place until the answer is
/// written (given back by `FlashSale::logging`, or when the context is dropped).
#[derive(Debug)]
pub struct SaleCtx {
    /// When the request reached the proxy (its head read): taken when the context is made, so
    /// make it in `new_ctx`. The waiting room judges its pre-queue and start draw by it,
    /// however long the request then waited for this process.
    pub arrived: DateTime<Utc>,
    /// The request's id. Empty until the sale's `request_filter` gives it one (a UUIDv7),
    /// unless the proxy set its own first; a safe retry answered under its first request's id
    /// takes that one.
    pub request_id: String,
    client: Option<Option<IpAddr>>,
    route: Option<Option<SaleRoute>>,
    to_order_writer: bool,
    code: Option<Code>,
    pub(crate) permit: Option<Permit>,
}

impl Default for SaleCtx {
    /// A request whose head was just read.
    fn default() -> Self {
        Self {
            arrived: Utc::now(),
            request_id: String::new(),
            client: None,
            route: None,
            to_order_writer: false,
            code: None,
            permit: None,
        }
    }
}

/// A new request id: a UUIDv7 (time-ordered, so ids sort by arrival in logs), hyphenated, in
/// one allocation of its exact length (the sale's and the gateway's one way of minting it).
pub fn new_request_id() -> String {
    let mut buf = uuid::Uuid::encode_buffer();
    uuid::Uuid::now_v7().hyphenated().encode_lower(&mut buf).to_owned()
}

impl SaleCtx {
    /// The request's sale route, decided from its `path` the first time (later calls keep the
    /// first answer); `None`: the path is not the sale's.
    pub fn decide_route(&mut self, path: &str) -> Option<&SaleRoute> {
        self.route.get_or_insert_with(|| SaleRoute::of(path)).as_ref()
    }

    /// The request's sale route, once decided (`None` before, or when it is not the sale's).
    pub fn route(&self) -> Option<&SaleRoute> {
        self.route.as_ref().and_then(Option::as_ref)
    }

    /// The proxy decided the client's address itself (by its own trusted proxies): the sale
    /// takes it as is, and its `[sale] trusted_proxies` is not used for this request.
    pub fn set_client(&mut self, client: Option<IpAddr>) {
        self.client = Some(client);
    }

    /// The client's address, once decided (`None` before, or when the peer has none: a Unix
    /// socket).
    pub fn client(&self) -> Option<IpAddr> {
        self.client.flatten()
    }

    /// Whether the client's address is decided (by the proxy, or by the sale).
    pub fn client_decided(&self) -> bool {
        self.client.is_some()
    }

    /// A result query whose result token is the request's: the proxy sends it to the order
    /// writer (its `upstream_peer`).
    pub fn to_order_writer(&self) -> bool {
        self.to_order_writer
    }

    /// The answer code the sale gave the request (`None`: not answered by the sale).
    pub fn code(&self) -> Option<Code> {
        self.code
    }

    /// Marks a checked result query for the order writer.
    #[cfg_attr(not(feature = "pingora"), allow(dead_code))]
    pub(crate) fn send_to_order_writer(&mut self) {
        self.to_order_writer = true;
    }

    /// Records the code of the sale's answer.
    #[cfg_attr(not(feature = "pingora"), allow(dead_code))]
    pub(crate) fn answered(&mut self, code: Option<Code>) {
        self.code = code;
    }

    /// Gives the campaign's budget place back (the answer is written).
    pub fn release(&mut self) {
        self.permit.take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_id_is_a_hyphenated_uuid_v7_of_its_exact_length() {
        let (a, b) = (new_request_id(), new_request_id());
        let parsed = uuid::Uuid::parse_str(&a).unwrap();
        assert_eq!((a.len(), a.capacity(), parsed.get_version_num()), (36, 36, 7));
        assert_eq!(parsed.hyphenated().to_string(), a, "lower case, hyphenated");
        assert!(a < b, "time-ordered: {a} then {b}");
    }
}
