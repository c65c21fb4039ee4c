//! Wires the gateway into a Pingora server: the Redis pool, the control tasks (reload on
//! `SIGHUP`, replenish subscription, health checks), the Kafka queue of reserved records and the
//! proxy service.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use fred::prelude::*;
use pingora_core::server::configuration::{Opt, ServerConf as PingoraConf};
use pingora_core::server::Server;
use pingora_core::services::listening::Service;
use plugins::edge::Edge;
use plugins::queue::ReservationQueue;
use plugins::reserve;
use protocol::scripts::Scripts;

use crate::conf::RedisConf;
use crate::frontdoor::FrontDoor;
use crate::proxy::Gateway;
use crate::reload::{self, SharedState};
use crate::{observe, replenish, tls, upstreams};

/// What the binary was asked to run.
#[derive(Debug, Clone)]
pub struct Options {
    /// The server file.
    pub conf: PathBuf,
    /// Folder of the Lua scripts.
    pub lua_dir: PathBuf,
    /// Take the listening sockets from a running gateway over the upgrade socket (Pingora's
    /// zero-downtime upgrade; the old process is then sent `SIGQUIT`).
    pub upgrade: bool,
}

/// Validates the conf and the scripts; returns a one-line summary.
pub fn check(opts: &Options) -> anyhow::Result<String> {
    let shared = SharedState::load(&opts.conf)?;
    Scripts::load(&opts.lua_dir)?;
    let active = shared.active();
    Ok(format!(
        "{}: ok ({} campaigns, {} routes, listen {})",
        opts.conf.display(),
        active.campaigns.len(),
        active.shop_pools.len(),
        active.server.listen
    ))
}

/// Builds the Redis pool: fail fast (one attempt per command, bounded timeouts), reconnect in
/// the background forever.
/// Starting while Redis is down is allowed: orders answer `SERVICE_DEGRADED` until it is back.
/// A `redis-cluster://` URL makes it a cluster client: every command goes to the master of its
/// first key's slot, a script is loaded on every master, and redirections are not followed
/// (`protocol::cluster`: a script refused with one is sent again by the scripts' own retry).
async fn connect_redis(conf: &RedisConf, scripts: &Scripts) -> anyhow::Result<Pool> {
    let config = Config::from_url(&conf.url).context("redis.url")?;
    let clustered = config.server.is_clustered();
    let pool = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_millis(500);
            c.internal_command_timeout = Duration::from_secs(1);
            c.max_command_attempts = 1;
            if clustered {
                c.max_redirections = protocol::cluster::MAX_REDIRECTIONS;
            }
            c.tcp = TcpConfig { nodelay: Some(true), ..Default::default() };
        })
        .with_performance_config(|p| p.default_command_timeout = reserve::command_timeout(conf.timeout))
        .set_policy(ReconnectPolicy::new_constant(0, 200))
        .build_pool(conf.pool_size)?;
    pool.connect();
    match tokio::time::timeout(Duration::from_secs(2), pool.wait_for_connect()).await {
        Ok(Ok(())) => {
            match tokio::time::timeout(Duration::from_secs(2), scripts.preload(pool.next())).await {
                Ok(Ok(())) => tracing::info!(url = %conf.url, "redis connected, scripts loaded"),
                _ => tracing::warn!("could not preload the scripts; they load on first use"),
            }
        }
        _ => {
            tracing::warn!(url = %conf.url, "redis is not reachable yet: orders answer SERVICE_DEGRADED until it is")
        }
    }
    Ok(pool)
}

/// Runs the gateway until a shutdown signal. Does not return on success.
pub fn run(opts: &Options) -> anyhow::Result<()> {
    let shared = Arc::new(SharedState::load(&opts.conf)?);
    // The buyer's page is gzipped now, once, never per request.
    crate::page::warm();
    let scripts = Scripts::load(&opts.lua_dir)?;
    let active = shared.active();
    let server_conf = active.server.clone();
    drop(active);

    // Control tasks run on their own small runtime, beside Pingora's: Redis connections,
    // SIGHUP, replenish messages, health checks.
    let control = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gw-control")
        .enable_all()
        .build()?;
    let pool = control.block_on(connect_redis(&server_conf.redis, &scripts))?;
    control.spawn(reload::watch_sighup(Arc::clone(&shared)));
    control.spawn(replenish::run(server_conf.redis.url.clone(), Arc::clone(&shared)));
    let health = Arc::clone(&shared);
    control.spawn(upstreams::run_health_checks(move || health.active()));
    // Reserved records to Kafka, on their own runtime so a slow broker never delays the control
    // tasks; the lanes connect in the background (a broker that is down is logged and retried).
    let kafka = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gw-kafka")
        .enable_all()
        .build()?;
    match kafka.block_on(plugins::queue::check_topic(&server_conf.kafka)) {
        Ok(plugins::queue::TopicAtStart::Matches) => {}
        Ok(plugins::queue::TopicAtStart::Unknown(why)) => tracing::warn!(
            topic = %server_conf.kafka.topic, why = %why,
            "kafka topic not checked at start; the lanes retry, reservations wait in the outbox"
        ),
        Err(why) => anyhow::bail!("{}: {why}", opts.conf.display()),
    }
    let queue = ReservationQueue::start(server_conf.kafka.clone(), kafka.handle());
    tracing::info!(brokers = ?server_conf.kafka.connection.brokers(), topic = %server_conf.kafka.topic, "kafka producer started");

    // SIGTERM: stop accepting, let requests in flight finish within the drain bound (Pingora's
    // grace period), exit. SIGQUIT: first hand the listening sockets to a new process started
    // with --upgrade (both accept for Pingora's 5 s hand-over), then the same.
    let shutdown = &server_conf.shutdown;
    let pingora_conf = PingoraConf {
        threads: server_conf.threads,
        grace_period_seconds: Some(shutdown.drain.as_secs()),
        // After the drain, what is left is cancelled; this bounds only blocking threads.
        graceful_shutdown_timeout_seconds: Some(1),
        upgrade_sock: shutdown.upgrade_sock.to_string_lossy().into_owned(),
        max_retries: 2,
        work_stealing: false,
        ..PingoraConf::default()
    };
    let opt = Opt { upgrade: opts.upgrade, ..Opt::default() };
    let mut server = Server::new_with_opt_and_conf(Some(opt), pingora_conf);
    server.bootstrap();
    let observer = observe::install(&mut server, &server_conf, &shared, &queue, &pool, control.handle())?;
    // Spending a challenge is one SET, off the order path: it may wait as long as an undo.
    let spend_timeout = protocol::timing::undo_timeout(server_conf.redis.timeout);
    let reserve = (server_conf.redis.timeout, server_conf.redis.batch);
    let edge = Edge::new(pool, scripts, queue, reserve, spend_timeout);
    let access_log = observer.access_log();
    let gateway = Gateway::new(Arc::clone(&shared), edge).with_observer(observer);
    let proxy = pingora_proxy::http_proxy(&server.configuration, gateway);
    let mut service = Service::new(
        "gateway".to_string(),
        FrontDoor::new(proxy, server_conf.limits.clone()).with_access_log(access_log),
    );
    service.add_tcp(&server_conf.listen.to_string());
    if let Some(tls) = &server_conf.tls {
        let settings = tls::settings(Arc::clone(&shared), tls.http2)?;
        service.add_tls_with_settings(&tls.listen.to_string(), None, settings);
        tracing::info!(listen = %tls.listen, http2 = tls.http2, certs = tls.certs.entries.len(), "TLS listener");
        if let Some(plain) = tls.redirect_listen {
            let mut redirect =
                Service::new("https redirect".to_string(), tls::Redirect { https_port: tls.listen.port() });
            redirect.add_tcp(&plain.to_string());
            server.add_service(redirect);
        }
    }
    server.add_service(service);
    tracing::info!(listen = %server_conf.listen, conf = %opts.conf.display(), "gateway starting");
    let (_control, _kafka) = (control, kafka);
    server.run_forever()
}

/// The default Lua folder: `lua/` beside the conf folder's parent (`conf/../lua`), which is
/// where it is in the repository.
pub fn default_lua_dir(conf: &Path) -> PathBuf {
    conf.parent().and_then(Path::parent).unwrap_or(Path::new(".")).join("lua")
}
