//! Wires the gateway into a Pingora server: the sale when the server file turns it on
//! (`plugins::FlashSale`: its Redis pool, reservation batches and Kafka producer on the sale's
//! own I/O thread, `gw-sale-io`, its replenish listener as a Pingora background service, its
//! metrics registered by itself; without it the gateway is a reverse proxy only), the control
//! tasks (reload on `SIGHUP`, health checks) and the proxy service.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use pingora_core::listeners::TcpSocketOptions;
use pingora_core::server::configuration::{Opt, ServerConf as PingoraConf};
use pingora_core::server::{RunArgs, Server};
use pingora_core::services::background::background_service;
use pingora_core::services::listening::Service;
use plugins::checks::TrustedProxies;
use plugins::setup::Registry;
use plugins::{FlashSale, Start};
use protocol::conf::ConfError;
use protocol::scripts::Scripts;

use crate::frontdoor::FrontDoor;
use crate::proxy::Gateway;
use crate::reload::{self, SharedState};
use crate::{observe, tls, upstreams};

/// What the binary was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The server file.
    pub conf: PathBuf,
    /// A folder to read the Lua scripts from instead of the ones compiled in.
    pub lua_dir: Option<PathBuf>,
    /// Take the listening sockets from a running gateway over the upgrade socket (Pingora's
    /// zero-downtime upgrade; the old process is then sent `SIGQUIT`).
    pub upgrade: bool,
}

impl Options {
    fn scripts(&self) -> anyhow::Result<Scripts> {
        Ok(match &self.lua_dir {
            Some(dir) => Scripts::load(dir)?,
            None => Scripts::builtin(),
        })
    }
}

/// Validates the conf (the gateway's own sections, then, when the sale is on, its sections and
/// campaigns) and the scripts; returns a one-line summary that says which mode it is in.
pub fn check(opts: &Options) -> anyhow::Result<String> {
    let (shared, registry) = load(opts)?;
    let active = shared.active();
    let mode = match &registry {
        Some(sale) => {
            opts.scripts()?;
            format!("the sale on: {} campaigns", sale.campaigns.len())
        }
        None => "a proxy only: no sale".to_string(),
    };
    let acme = match active.server.tls.as_ref().map_or(0, |t| t.acme.len()) {
        0 => String::new(),
        n => format!(", [[tls.acme]] entries: {n}"),
    };
    Ok(format!(
        "{}: ok ({mode}, {} routes{acme}, listen {})",
        opts.conf.display(),
        active.shop_pools.len(),
        active.server.listen
    ))
}

/// Reads the server file's own sections, then the sale's when they turn it on; a bad file fails
/// here, before anything connects.
fn load(opts: &Options) -> anyhow::Result<(SharedState, Option<Arc<Registry>>)> {
    let server = crate::conf::load(&opts.conf)?;
    let registry = if server.sells() { Some(FlashSale::check(opts.conf.as_path())?) } else { None };
    if registry.as_ref().is_some_and(|r| r.conf.trusted_proxies != TrustedProxies::default()) {
        // One list decides the client of every route, the sale's and the shop's.
        let why = "sale.trusted_proxies: the gateway decides the client of every route by \
                   [server] trusted_proxies: list the proxies there";
        return Err(ConfError::whole(&opts.conf, why).into());
    }
    let shared = SharedState::new(server, registry.as_deref())?;
    Ok((shared, registry))
}

/// Starts the sale (its I/O on a thread of its own, `gw-sale-io`) when the conf sells.
fn start_sale(opts: &Options, sells: bool) -> anyhow::Result<Option<Arc<FlashSale>>> {
    if !sells {
        return Ok(None);
    }
    let start = Start { scripts: opts.scripts()?, io_thread: "gw-sale-io".to_string() };
    Ok(Some(FlashSale::new(opts.conf.as_path(), start)?))
}

/// Runs the gateway until a shutdown signal. Does not return on success.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    // Checked before anything connects: a bad file fails at once.
    let shared = Arc::new(load(opts)?.0);
    let server_conf = shared.active().server.clone();

    // Control tasks run on their own small runtime, beside Pingora's: SIGHUP, health checks,
    // the access log's SIGUSR1. The sale's I/O runs on one thread of its own: the Redis
    // connections, the reservation batches (written and answered there) and the Kafka lanes
    // (they connect in the background; a broker that is down is logged and retried). One
    // thread, not one each: a reservation then crosses threads only to reach it and come back
    // (measured: `e2e/bench/gateway.sh`, `docs/benchmarks-journal.md`).
    let control = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gw-control")
        .enable_all()
        .build()?;
    let sale = start_sale(opts, server_conf.sells())?;
    control.spawn(reload::watch_sighup(Arc::clone(&shared), sale.clone()));
    let health = Arc::clone(&shared);
    control.spawn(upstreams::run_health_checks(move || health.active()));

    let shutdown = &server_conf.shutdown;
    let opt = Opt { upgrade: opts.upgrade, ..Opt::default() };
    let mut server = Server::new_with_opt_and_conf(Some(opt), pingora_conf(shutdown));
    server.bootstrap();
    if let Some(sale) = &sale {
        server.add_service(sale.replenish_service());
    }
    let observer = observe::install(&mut server, &server_conf, &sale, &shared, control.handle())?;
    add_workers(&mut server, &shared, &sale, &observer, &server_conf)?;
    if let Some(tls) = &server_conf.tls {
        tracing::info!(listen = %tls.listen, http2 = tls.http2, certs = tls.certs.entries.len(), proxy_protocol = tls.proxy_protocol, "TLS listener");
        if let Some(plain) = tls.redirect_listen {
            let app = tls::Redirect { https_port: tls.listen.port(), acme: Arc::clone(&shared.acme) };
            let mut redirect = Service::new("https redirect".to_string(), app);
            redirect.add_tcp(&plain.to_string());
            server.add_service(redirect);
        }
    }
    add_acme(&mut server, &shared, &server_conf);
    tracing::info!(
        listen = %server_conf.listen, workers = server_conf.workers, threads = server_conf.threads,
        sale = server_conf.sells(), conf = %opts.conf.display(), "gateway starting"
    );
    let _control = control;
    let signals = crate::shutdown::Signals { linger: shutdown.linger };
    server.run(RunArgs { shutdown_signal: Box::new(signals) });
    std::process::exit(0)
}

/// Pingora's settings. SIGTERM: keep serving for the linger while saying so
/// (`crate::shutdown`), then stop accepting, let requests in flight finish within the drain
/// bound (Pingora's grace period), exit. SIGQUIT: first hand the listening sockets to a new
/// process started with --upgrade (both accept for Pingora's 5 s hand-over), then the same.
fn pingora_conf(shutdown: &crate::conf::shutdown::ShutdownConf) -> PingoraConf {
    PingoraConf {
        // The admin listener and the HTTPS redirect; each worker sets its own.
        threads: 1,
        grace_period_seconds: Some(shutdown.drain.as_secs()),
        // After the drain, what is left is cancelled; this bounds only blocking threads.
        graceful_shutdown_timeout_seconds: Some(1),
        upgrade_sock: shutdown.upgrade_sock.to_string_lossy().into_owned(),
        max_retries: 2,
        work_stealing: false,
        ..PingoraConf::default()
    }
}

/// Nginx's worker model: `workers` services on the same address, each on a runtime of its own
/// (`threads`, 1 by default) with its own listening socket (SO_REUSEPORT: the kernel spreads
/// connections over them) and its own upstream keepalive pools, so a request is accepted,
/// proxied and answered on one thread. The sale (rate limits, budgets, sold-out flags, Redis
/// and Kafka clients), the conf, metrics and the access log are the process's, shared.
fn add_workers(
    server: &mut Server,
    shared: &Arc<SharedState>,
    sale: &Option<Arc<FlashSale>>,
    observer: &observe::Observer,
    server_conf: &crate::conf::ServerConf,
) -> anyhow::Result<()> {
    for worker in 0..server_conf.workers {
        let gateway = Gateway::new(Arc::clone(shared), sale.clone()).with_observer(observer.clone());
        let proxy = pingora_proxy::http_proxy(&server.configuration, gateway);
        let front_door = FrontDoor::new(proxy, server_conf.limits.clone())
            .with_access_log(observer.access_log())
            .with_proxy_protocol(server_conf.proxy_protocol);
        // The name is its threads' (15 characters at most, as Linux keeps them).
        let mut service = Service::new(format!("gw-worker-{worker}"), front_door);
        service.threads = Some(server_conf.threads);
        service.add_tcp_with_settings(&worker_addr(server_conf.listen, worker), reuse_port());
        if let Some(tls) = &server_conf.tls {
            let settings = tls::settings(Arc::clone(shared), tls.http2)?;
            if tls.proxy_protocol {
                let before =
                    crate::proxy_protocol::BeforeTls { timeout: server_conf.limits.client_header_timeout };
                service.endpoints().set_pre_tls_callback(Arc::new(before));
            }
            service.add_tls_with_settings(&worker_addr(tls.listen, worker), Some(reuse_port()), settings);
        }
        server.add_service(service);
    }
    Ok(())
}

/// The background service that issues and renews the `[[tls.acme]]` certificates, when any.
fn add_acme(server: &mut Server, shared: &Arc<SharedState>, conf: &crate::conf::ServerConf) {
    let Some(entries) = conf.tls.as_ref().map(|t| t.acme.clone()).filter(|a| !a.is_empty()) else {
        return;
    };
    tracing::info!(entries = entries.len(), "ACME: certificates by ACME, HTTP-01 on the plain listeners");
    let service = crate::acme::AcmeService::new(entries, Arc::clone(&shared.acme));
    server.add_service(background_service("acme", service));
}

/// Worker `worker`'s name of the address `addr`: the same socket address, spelled with `worker`
/// leading zeros in its port (`127.0.0.1:8080`, `127.0.0.1:08080`, ...), so that each worker gets
/// a listening socket of its own. Pingora keeps one socket per address *string* in its table of
/// listening sockets (which the upgrade hands over): under one string every worker would wrap
/// the same descriptor, and each would close it at shutdown, the second close hitting whatever
/// socket took the number meanwhile (an in-flight connection). Spelled apart, each worker's
/// socket is its own, bound with `SO_REUSEPORT`, and handed over by its own name on an upgrade
/// (keep `workers` the same across an upgrade: a socket no worker takes over is closed with the
/// connections waiting in it).
pub fn worker_addr(addr: SocketAddr, worker: usize) -> String {
    let ip = match addr.ip() {
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    format!("{ip}:{}{}", "0".repeat(worker), addr.port())
}

/// A worker's listener options: `SO_REUSEPORT`, so that the workers' sockets share the address
/// (and a restarted gateway may bind it while the old one still holds it).
fn reuse_port() -> TcpSocketOptions {
    let mut options = TcpSocketOptions::default();
    options.so_reuseport = Some(true);
    options
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_worker_spells_the_same_address_its_own_way() {
        let v4: SocketAddr = "127.0.0.1:8080".parse().unwrap();
        let v6: SocketAddr = "[::1]:443".parse().unwrap();
        for addr in [v4, v6] {
            let names: Vec<String> = (0..4).map(|w| worker_addr(addr, w)).collect();
            for name in &names {
                assert_eq!(name.parse::<SocketAddr>().unwrap(), addr, "{name}");
            }
            let distinct: std::collections::HashSet<_> = names.iter().collect();
            assert_eq!(distinct.len(), names.len(), "{names:?}");
        }
        assert_eq!(worker_addr(v4, 0), "127.0.0.1:8080", "worker 0 keeps the address as written");
    }
}
