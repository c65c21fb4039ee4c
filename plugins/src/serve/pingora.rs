//! The sale in a Pingora proxy, shaped like Pingora's own: [`SaleCtx`] in the proxy's `CTX`,
//! hooks named and typed as `ProxyHttp`'s ([`FlashSale::request_filter`], returning whether it
//! answered, [`FlashSale::upstream_request_filter`], [`FlashSale::logging`]), its background
//! work as Pingora background services ([`FlashSale::services`]), and
//! [`FlashSale::metrics_service`] to serve the metrics the sale registers:
//!
//! ```text
//! type CTX = SaleCtx;                     // or a field of the proxy's own CTX
//! fn new_ctx(&self) -> SaleCtx { SaleCtx::default() }
//! async fn request_filter(&self, session: &mut Session, ctx: &mut SaleCtx) -> Result<bool> {
//!     self.sale.request_filter(session, ctx).await   // true: answered; false: proxy it
//! }
//! async fn upstream_peer(&self, _: &mut Session, ctx: &mut SaleCtx) -> Result<Box<HttpPeer>> {
//!     Ok(ctx.peer(&self.shop, &self.order_writer))   // the order writer for a result query
//! }
//! ```
//!
//! Below the hooks, for a proxy that does its own bookkeeping between the sale's decision and
//! the answer (the gateway counts answer codes and keeps the access line):
//! [`FlashSale::handle_session`] decides without writing, [`FlashSale::respond`] writes; the
//! building blocks under them are a `Session` as a [`SaleRequest`] ([`PingoraRequest`]), the
//! client's address ([`client`]) and a [`Reply`] written on a session ([`write()`]).

use std::future::Future;
use std::net::IpAddr;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use chrono::{DateTime, Utc};
use pingora_core::server::ShutdownWatch;
use pingora_core::services::background::{background_service, BackgroundService, GenBackgroundService};
use pingora_core::services::listening::Service;
use pingora_core::services::ServiceWithDependents;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_prometheus::PrometheusServer;
use pingora_proxy::Session;

use crate::edge::Head;
use crate::serve::ctx::SaleCtx;
use crate::serve::flash_sale::{FlashSale, Handled, SaleRequest};
use crate::serve::reply::Reply;
use crate::setup::registry::Registrar;

impl SaleCtx {
    /// The peer of a request the sale passed on, for the proxy's `upstream_peer`: `order_writer`
    /// for a checked result query ([`SaleCtx::to_order_writer`]), else `shop`, each an
    /// `IP:port` over plain HTTP (a proxy with TLS, pools or health checks picks its own, by
    /// [`SaleCtx::to_order_writer`]). As Pingora's `HttpPeer::new` underneath: a host name is
    /// resolved on every call, and an address that does not resolve panics, so check both
    /// addresses when the proxy starts.
    pub fn peer(&self, shop: &str, order_writer: &str) -> Box<HttpPeer> {
        let to = if self.to_order_writer() { order_writer } else { shop };
        Box::new(HttpPeer::new(to, false, String::new()))
    }
}

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

/// The sale's own headers: an order's signature, a payment callback's, a record's, a result
/// query's token (checked at the edge). No upstream reads them through the proxy (the shop has
/// its own login, result queries need none of them), and a shop should never learn a buyer's
/// order signature.
pub const SALE_OWNED: [&str; 7] = [
    protocol::signing::SIGNATURE_HEADER,
    protocol::signing::NONCE_HEADER,
    protocol::signing::TIMESTAMP_HEADER,
    protocol::signing::PAYMENT_SIGNATURE_HEADER,
    protocol::signing::PAYMENT_TIMESTAMP_HEADER,
    protocol::signing::RECORD_SIGNATURE_HEADER,
    crate::issue::RESULT_TOKEN_HEADER,
];

/// Removes the sale's own headers ([`SALE_OWNED`]) from a request on its way upstream;
/// `Authorization` (the shop's login) and everything else go on.
pub fn strip_sale_headers(upstream_request: &mut RequestHeader) {
    for name in SALE_OWNED {
        upstream_request.remove_header(name);
    }
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

impl FlashSale {
    /// The sale's `request_filter`: a request on one of the sale's paths is answered here
    /// (`Ok(true)`), or, a result query whose result token is the request's, marked for the
    /// order writer (`Ok(false)`, [`SaleCtx::to_order_writer`]); any other path is left to the
    /// proxy (`Ok(false)`). A request passed on has already lost the sale's own headers and
    /// carries the sale's id, as [`FlashSale::upstream_request_filter`] would do (Pingora builds
    /// the upstream request from the session's), so a proxy that calls only this hook leaks
    /// none of them. Call it from the proxy's own `request_filter`.
    pub async fn request_filter(
        &self,
        session: &mut Session,
        ctx: &mut SaleCtx,
    ) -> pingora_core::Result<bool> {
        match self.handle_session(session, ctx).await {
            Some(Handled::Reply(reply)) => self.respond(session, ctx, reply).await,
            Some(Handled::ToOrderWriter) | None => {
                self.pass_on(session.req_header_mut(), ctx)?;
                Ok(false)
            }
        }
    }

    /// Decides a request without writing anything: its route (from its path, unless decided),
    /// then, on a sale path, its id (a UUIDv7 unless the proxy set one) and its client (by
    /// `[sale] trusted_proxies`, unless the proxy set it: [`SaleCtx::set_client`]) and the
    /// sale's answer. `None`: not the sale's path. A result query for the order writer is
    /// marked in `ctx` as well.
    pub async fn handle_session(&self, session: &mut Session, ctx: &mut SaleCtx) -> Option<Handled> {
        ctx.decide_route(session.req_header().uri.path())?;
        if ctx.request_id.is_empty() {
            ctx.request_id = crate::serve::new_request_id();
        }
        if !ctx.client_decided() {
            ctx.set_client(client(session, &self.registry().conf.trusted_proxies));
        }
        let route = ctx.route()?;
        let mut req = PingoraRequest { session, client: ctx.client(), arrived: ctx.arrived };
        let handled = self.handle(route, &mut req, &ctx.request_id).await;
        if let Handled::ToOrderWriter = handled {
            ctx.send_to_order_writer();
        }
        Some(handled)
    }

    /// Writes the sale's `reply` as the whole answer (`Ok(true)`, as `request_filter` answers):
    /// its budget place is kept in `ctx` until [`FlashSale::logging`], a safe retry's first id
    /// becomes the request's and its code is kept ([`SaleCtx::code`]).
    pub async fn respond(
        &self,
        session: &mut Session,
        ctx: &mut SaleCtx,
        mut reply: Reply,
    ) -> pingora_core::Result<bool> {
        ctx.answered(reply.code);
        ctx.permit = reply.permit.take();
        if let Some(first) = reply.answered_as.take() {
            ctx.request_id = first;
        }
        write(session, &reply).await?;
        Ok(true)
    }

    /// The sale's `upstream_request_filter`, for a proxy that decides with
    /// [`FlashSale::handle_session`] ([`FlashSale::request_filter`] does this itself): every
    /// proxied request (the shop's and a result query alike) loses the sale's own headers
    /// ([`strip_sale_headers`]), and one the sale gave an id carries it as `X-Request-Id`, for
    /// the order writer's log.
    pub async fn upstream_request_filter(
        &self,
        _session: &mut Session,
        upstream_request: &mut RequestHeader,
        ctx: &mut SaleCtx,
    ) -> pingora_core::Result<()> {
        self.pass_on(upstream_request, ctx)
    }

    /// A request on its way upstream: without the sale's own headers, with the sale's id.
    fn pass_on(&self, upstream_request: &mut RequestHeader, ctx: &SaleCtx) -> pingora_core::Result<()> {
        strip_sale_headers(upstream_request);
        if !ctx.request_id.is_empty() {
            upstream_request.insert_header("x-request-id", ctx.request_id.as_str())?;
        }
        Ok(())
    }

    /// The sale's `logging`: the answer is written, the campaign's budget place goes back (it
    /// would when `ctx` is dropped too; this says when).
    pub async fn logging(&self, _session: &mut Session, _e: Option<&pingora_core::Error>, ctx: &mut SaleCtx) {
        ctx.release();
    }

    /// The replenish listener and the control reader as a Pingora background service
    /// (`server.add_service(...)`): a message on the replenish channel clears the campaign's
    /// sold-out flag at once, and each campaign's operated state is read from Redis
    /// ([`FlashSale::replenish`]).
    pub fn replenish_service(&self) -> GenBackgroundService<Replenish> {
        background_service(
            "sale replenish and control",
            Replenish(std::sync::Mutex::new(Some(Box::pin(self.replenish())))),
        )
    }

    /// Every background service of the sale, for `server.add_services(...)`: the replenish
    /// listener, the reload on `SIGHUP` and, given `metrics` (a listen address), Pingora's
    /// Prometheus listener on it ([`FlashSale::metrics_service`]; `None` for a proxy that serves
    /// its metrics already). A proxy with a reload of its own adds
    /// [`FlashSale::replenish_service`] alone and calls [`FlashSale::reload`] from its reload.
    pub fn services(&self, metrics: Option<&str>) -> Vec<Box<dyn ServiceWithDependents>> {
        let mut services: Vec<Box<dyn ServiceWithDependents>> =
            vec![Box::new(self.replenish_service()), Box::new(self.sighup_service())];
        services.extend(metrics.map(|listen| Box::new(Self::metrics_service(listen)) as _));
        services
    }

    /// Pingora's Prometheus listener on `listen`, for a proxy that serves no metrics yet: it
    /// answers every path with the process's default registry, where the sale registers its
    /// metrics ([`crate::serve::metrics`]) beside Pingora's and the proxy's own. Keep it off
    /// the public interface.
    pub fn metrics_service(listen: &str) -> Service<PrometheusServer> {
        let mut service = pingora_prometheus::prometheus_http_service();
        service.add_tcp(listen);
        service
    }

    /// Reloading the campaigns and the sale's sections on `SIGHUP`, as a Pingora background
    /// service, for a proxy that has no reload of its own (one that has calls
    /// [`FlashSale::reload`] from it instead).
    pub fn sighup_service(&self) -> GenBackgroundService<SighupReload> {
        background_service("sale reload on SIGHUP", SighupReload(Arc::clone(&self.registrar)))
    }
}

/// The replenish listener and the control reader ([`FlashSale::replenish_service`]).
pub struct Replenish(std::sync::Mutex<Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>>);

impl std::fmt::Debug for Replenish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Replenish")
    }
}

#[async_trait]
impl BackgroundService for Replenish {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        let Some(work) = self.0.lock().unwrap_or_else(|e| e.into_inner()).take() else { return };
        tokio::select! {
            () = work => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// The reload on `SIGHUP` ([`FlashSale::sighup_service`]).
#[derive(Debug)]
pub struct SighupReload(Arc<Registrar>);

#[async_trait]
impl BackgroundService for SighupReload {
    async fn start(&self, mut shutdown: ShutdownWatch) {
        use tokio::signal::unix::{signal, SignalKind};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::error!("cannot listen for SIGHUP: reload is off");
            return;
        };
        loop {
            tokio::select! {
                got = hup.recv() => match got {
                    Some(()) => { let _ = self.0.reload(); }
                    None => return,
                },
                _ = shutdown.changed() => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use pingora_core::upstreams::peer::Peer;

    use super::*;

    #[test]
    fn a_passed_on_request_goes_to_the_shop_and_a_checked_result_query_to_the_order_writer() {
        let (shop, order_writer) = ("127.0.0.1:8001", "127.0.0.1:8002");
        let mut ctx = SaleCtx::default();
        assert_eq!(ctx.peer(shop, order_writer).address().to_string(), shop);
        ctx.send_to_order_writer();
        assert_eq!(ctx.peer(shop, order_writer).address().to_string(), order_writer);
    }
}
