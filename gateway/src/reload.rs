//! The gateway's active configuration (its own sections: shop routes and pools, TLS, limits),
//! and reloading it together with the sale's campaigns without dropping a request.
//!
//! The active conf lives in an [`ArcSwap`]: each request loads one snapshot at its start and
//! keeps it to its end, so a reload never changes the rules under a request in flight (and an
//! old pool lives until its last request is done). [`reload`] reloads the sale first
//! (`plugins::FlashSale::reload`: the campaigns and the sale's sections), then the gateway's own
//! sections; an invalid file is refused, the old conf stays, and the error says
//! file:line:column:field. `SIGHUP` calls it ([`watch_sighup`]); tests call it directly.
//!
//! The listening address, the thread count, the limits, shutdown, the admin listener and the
//! access log are read once at start: changing them needs a restart, and a reload that changes
//! them says so in the log.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use plugins::setup::Registry;
use plugins::FlashSale;
use protocol::conf::ConfError;

use crate::conf::{self, ServerConf};
use crate::metrics::{metrics, Answers};
use crate::routes::RouteTable;
use crate::upstreams::{Pool, PoolSet};

/// One validated configuration of the gateway's own sections, ready to serve.
#[derive(Debug)]
pub struct Active {
    /// The server file.
    pub server: ServerConf,
    /// Shop routes.
    pub routes: RouteTable,
    /// One pool per shop route, same index as `server.routes` (`None`: a route with `return`).
    pub shop_pools: Vec<Option<Pool>>,
    /// The order writer's pool (`None` when the sale is off).
    pub order_writer: Option<Pool>,
    /// Each sold campaign's order-answer counters, resolved here so a request only adds.
    pub answers: HashMap<String, Answers>,
    /// The state of the routes' `limit_req` and `limit_conn` zones.
    pub zones: crate::route_limits::Zones,
}

impl PoolSet for Active {
    /// The order writer's pool, then the shop pools.
    fn pools(&self) -> Vec<&Pool> {
        self.order_writer.iter().chain(self.shop_pools.iter().flatten()).collect()
    }
}

/// The gateway's active conf, shared by every request and background task of the process.
#[derive(Debug)]
pub struct SharedState {
    conf_file: PathBuf,
    active: ArcSwap<Active>,
    /// The certificates by ACME and their challenges, for the life of the process (the
    /// `[[tls.acme]]` entries of the conf it started with).
    pub acme: Arc<crate::acme::Live>,
}

/// `sale`: the sale's campaigns when it is on (`server.sells()`); `old`: the conf it replaces
/// (its unchanged limit zones are kept).
fn build(server: ServerConf, sale: Option<&Registry>, old: Option<&Active>) -> Result<Active, ConfError> {
    let pool_err =
        |e: std::io::Error| ConfError::whole(&server.file, format!("cannot build an upstream pool: {e}"));
    let order_writer =
        server.order_writer.as_ref().map(|o| Pool::new("order_writer", o)).transpose().map_err(pool_err)?;
    let shop_pools = server
        .routes
        .iter()
        .map(|r| r.pool.as_ref().map(|p| Pool::new(&r.name, p)).transpose())
        .collect::<Result<Vec<_>, _>>()
        .map_err(pool_err)?;
    for pool in order_writer.iter().chain(shop_pools.iter().flatten()) {
        metrics().pool_loaded(pool.name());
    }
    let campaigns = sale.into_iter().flat_map(|s| s.campaigns.keys());
    let answers = campaigns.map(|id| (id.clone(), metrics().answers_for(id))).collect();
    let routes = RouteTable::new(&server.routes)
        .map_err(|e| ConfError::whole(&server.file, format!("cannot build the routes' regex sets: {e}")))?;
    let zones = crate::route_limits::Zones::new(&server, old.map(|o| &o.zones));
    Ok(Active { routes, server, shop_pools, order_writer, answers, zones })
}

impl SharedState {
    /// The state of a validated server file, next to the sale's campaigns when it is on.
    pub fn new(server: ServerConf, sale: Option<&Registry>) -> Result<Self, ConfError> {
        let conf_file = server.file.clone();
        let acme = Arc::new(crate::acme::Live::new(server.tls.as_ref().map_or(&[], |t| t.acme.as_slice())));
        Ok(Self { conf_file, active: ArcSwap::from_pointee(build(server, sale, None)?), acme })
    }

    /// The active conf (a snapshot: keep it for the whole request).
    pub fn active(&self) -> Arc<Active> {
        self.active.load_full()
    }
}

/// Reads the files again, the sale's first, and makes them active if they are all valid. On
/// error the old conf stays active and the error (file:line:column: field) is returned and
/// logged.
pub fn reload(shared: &SharedState, sale: Option<&FlashSale>) -> Result<Arc<Active>, ConfError> {
    let refused = |e: ConfError| {
        tracing::error!(error = %e, "reload refused; the previous configuration stays active");
        e
    };
    // The gateway's sections are checked before the sale's are made active: a bad server file
    // changes nothing.
    let server = conf::load(&shared.conf_file).map_err(refused)?;
    if server.sells() != sale.is_some() {
        let now = if sale.is_some() { "off" } else { "on" };
        let e = ConfError::whole(
            &shared.conf_file,
            format!("the file turns the sale {now}: that takes a restart (a reload keeps the mode)"),
        );
        return Err(refused(e));
    }
    let registry = sale.map(FlashSale::reload).transpose()?;
    let old = shared.active();
    let new = Arc::new(build(server, registry.as_deref(), Some(&old)).map_err(refused)?);
    let (o, n) = (&old.server, &new.server);
    let tls_listeners = |t: &Option<crate::conf::tls::TlsConf>| {
        t.as_ref().map(|t| (t.listen, t.http2, t.redirect_listen, t.proxy_protocol))
    };
    if o.listen != n.listen
        || o.threads != n.threads
        || o.limits != n.limits
        || o.shutdown != n.shutdown
        || tls_listeners(&o.tls) != tls_listeners(&n.tls)
    {
        tracing::warn!(
            "server.listen, server.threads, [limits], [shutdown] and the [tls] listeners take effect only \
             after a restart (certificates are reloaded now)"
        );
    }
    if o.admin != n.admin || o.access_log != n.access_log {
        tracing::warn!("[admin] and [access_log] take effect only after a restart");
    }
    let acme = |t: &Option<crate::conf::tls::TlsConf>| t.as_ref().map(|t| t.acme.clone()).unwrap_or_default();
    if acme(&o.tls) != acme(&n.tls) {
        tracing::warn!("[[tls.acme]] changes take effect only after a restart");
    }
    shared.active.store(Arc::clone(&new));
    tracing::info!(
        campaigns = registry.map_or(0, |r| r.campaigns.len()),
        routes = new.shop_pools.len(),
        "configuration reloaded"
    );
    Ok(new)
}

/// Reloads on every `SIGHUP`, forever.
pub async fn watch_sighup(shared: Arc<SharedState>, sale: Option<Arc<FlashSale>>) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = match signal(SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGHUP: reload is off");
            return;
        }
    };
    while hup.recv().await.is_some() {
        tracing::info!("SIGHUP: reloading the configuration");
        let _ = reload(&shared, sale.as_deref());
    }
}
