//! The sale in a Pingora proxy: a `Session` as a [`SaleRequest`] ([`PingoraRequest`]) and a
//! [`Reply`] written on it ([`write()`]). A proxy's `request_filter` then needs a few lines:
//!
//! ```text
//! let Some(route) = SaleRoute::of(session.req_header().uri.path()) else { return Ok(false) };
//! // `arrived`: taken once when the request's head was read (the proxy's `new_ctx`).
//! let mut req = PingoraRequest { session, client, arrived: ctx.arrived };
//! match sale.handle(&route, &mut req, &request_id).await {
//!     Handled::Reply(reply) => { write(session, &reply).await?; Ok(true) }
//!     Handled::ToOrderWriter => Ok(false), // upstream_peer: the order writer
//! }
//! ```

use std::net::IpAddr;

use bytes::Bytes;
use chrono::{DateTime, Utc};
use pingora_http::ResponseHeader;
use pingora_proxy::Session;

use crate::edge::Head;
use crate::serve::flash_sale::SaleRequest;
use crate::serve::reply::Reply;

/// A Pingora request as the sale reads it, with the client's address the proxy decided.
pub struct PingoraRequest<'a> {
    /// The request.
    pub session: &'a mut Session,
    /// The client's address (the socket's peer, or what a trusted proxy says:
    /// [`crate::checks::client_ip::client_ip`]).
    pub client: Option<IpAddr>,
    /// When the request reached the proxy: taken once per request, when its head was read (in
    /// `ProxyHttp::new_ctx`, kept in the request's context), never again later.
    pub arrived: DateTime<Utc>,
}

impl SaleRequest for PingoraRequest<'_> {
    fn head(&self) -> Head<'_> {
        let req = self.session.req_header();
        Head {
            method: &req.method,
            uri: &req.uri,
            headers: &req.headers,
            client: self.client,
            arrived: self.arrived,
        }
    }

    async fn body_chunk(&mut self) -> Result<Option<Bytes>, ()> {
        self.session.read_request_body().await.map_err(drop)
    }
}

/// The client's address of a Pingora request: the socket's peer, or what `trusted` proxies say
/// in `X-Forwarded-For`.
pub fn client(session: &Session, trusted: &crate::checks::client_ip::TrustedProxies) -> Option<IpAddr> {
    let peer = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip());
    crate::checks::client_ip::client_ip(
        peer,
        crate::checks::client_ip::forwarded_lines(&session.req_header().headers),
        trusted,
    )
}

/// Writes `reply` as the whole answer.
pub async fn write(session: &mut Session, reply: &Reply) -> pingora_core::Result<()> {
    let mut header = ResponseHeader::build(reply.status, Some(reply.headers.len()))?;
    for (name, value) in &reply.headers {
        header.insert_header(name.clone(), value.clone())?;
    }
    if reply.body.is_empty() {
        session.write_response_header(Box::new(header), true).await?;
    } else {
        session.write_response_header(Box::new(header), false).await?;
        session.write_response_body(Some(reply.body.clone()), true).await?;
    }
    Ok(())
}
