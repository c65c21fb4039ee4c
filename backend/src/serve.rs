//! `order-writer serve`: the HTTP server (result query, payment callback, health check), the
//! sweeper, the partition writers and the close worker in one process, with a graceful shutdown
//! (SIGTERM / ctrl-c): stop taking requests, let each writer commit the batch in flight, exit.

use std::sync::Arc;

use anyhow::Context;
use fred::prelude::Client as RedisClient;
use protocol::signing::Signer;
use rskafka::client::Client as KafkaClient;
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admin::metrics::WriterMetrics;
use crate::admin::{self, AdminState};
use crate::app::Connections;
use crate::conf::{Conf, Plan};
use crate::http::router;
use crate::http::state::{AppState, ResultStore};
use crate::kafka::producer::Producer;
use crate::redis::RedisScripts;
use crate::workers::{closer, events, sweeper};
use crate::writer::WriterCtx;
use crate::writer::{self, leases};

/// What `serve` does with the PostgreSQL schema before it starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtStart {
    /// Applies the migrations not applied yet (the default).
    Migrate,
    /// Applies nothing, and refuses to serve on a schema older than the binary
    /// (`--no-migrate`: the schema is migrated apart, by `order-writer migrate`).
    Verify,
}

/// `order-writer serve [--partitions P,...] [--no-migrate]`: everything, until SIGTERM or
/// ctrl-c. `partitions` (checked against the topic's count) is a fixed plan: it replaces
/// `kafka.assigned`, or the leases.
pub async fn run(mut cfg: Conf, partitions: Option<Vec<i32>>, at_start: AtStart) -> anyhow::Result<()> {
    if let Some(p) = partitions {
        if p.is_empty() || p.iter().any(|x| !(0..cfg.kafka.partitions).contains(x)) {
            anyhow::bail!("--partitions must list partitions between 0 and {}", cfg.kafka.partitions - 1);
        }
        cfg.kafka.plan = Plan::Fixed(p);
    }
    let (tx, _rx) = watch::channel(false);
    serve_as(cfg, tx, true, at_start).await
}

/// Runs everything until `shutdown` turns true (or a signal arrives when `signals`), the
/// migrations applied first.
pub async fn serve(cfg: Conf, shutdown_tx: watch::Sender<bool>, signals: bool) -> anyhow::Result<()> {
    serve_as(cfg, shutdown_tx, signals, AtStart::Migrate).await
}

/// [`serve`], the schema migrated or verified as `at_start` says.
pub async fn serve_as(
    cfg: Conf,
    shutdown_tx: watch::Sender<bool>,
    signals: bool,
    at_start: AtStart,
) -> anyhow::Result<()> {
    let conns = Connections::new(&cfg);
    let shared = Shared::open(&conns, at_start).await?;
    // The gateway key: the writers verify every record with it, the sweeper signs with it.
    let gateway = Arc::new(Signer::new(&cfg.gateway_key));
    let producer = Producer::start(
        shared.kafka.clone(),
        &cfg.kafka.topic,
        cfg.kafka.partitions,
        cfg.kafka.produce_batch,
        cfg.kafka.produce_timeout,
        gateway.clone(),
    );
    let state = app_state(&cfg, &conns, &shared.pool).await?;
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    tracing::info!(listen = %cfg.listen, topic = cfg.kafka.topic, plan = ?cfg.kafka.plan, "order writer serving");
    if signals {
        shut_down_on_signal(shutdown_tx.clone());
    }
    let admin_task = spawn_admin(&cfg, &shared, &shutdown_tx).await?;
    let workers = Workers::spawn(&cfg, &shared, gateway, &producer, &shutdown_tx);

    let mut rx = shutdown_tx.subscribe();
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = rx.wait_for(|v| *v).await;
        })
        .await?;
    workers.join().await?;
    if let Some(t) = admin_task {
        let _ = t.await;
    }
    tracing::info!("order writer stopped");
    Ok(())
}

/// The connections the writers, the workers and the admin listener share, and their metrics.
struct Shared {
    pool: PgPool,
    redis: RedisClient,
    scripts: RedisScripts,
    kafka: Arc<KafkaClient>,
    metrics: Arc<WriterMetrics>,
}

impl Shared {
    /// PostgreSQL (migrated or verified as `at_start` says, a connection for each writer and 16
    /// more), Redis, its scripts, Kafka with its topic, and the events' topic made sure of.
    async fn open(conns: &Connections<'_>, at_start: AtStart) -> anyhow::Result<Self> {
        let cfg = conns.conf();
        let writers = match &cfg.kafka.plan {
            Plan::Fixed(p) => p.len(),
            Plan::Leased => cfg.kafka.partitions as usize,
        };
        let size = 16 + writers as u32;
        let pool = match at_start {
            AtStart::Migrate => conns.migrated_postgres(size).await?,
            AtStart::Verify => conns.checked_postgres(size).await?,
        };
        let redis = conns.redis().await?;
        let scripts = conns.scripts()?;
        let kafka = Arc::new(conns.kafka_with_topic().await?);
        events::ensure_topic(&kafka, &cfg.events, &cfg.kafka).await?;
        let metrics = Arc::new(WriterMetrics::new());
        metrics.pg_connections_max.set(i64::from(size + cfg.result_pool_size));
        Ok(Shared { pool, redis, scripts, kafka, metrics })
    }
}

/// The HTTP server's state. The result query has its own small pool and Redis client: a polling
/// storm queues on these, never on the connections orders are written with.
async fn app_state(cfg: &Conf, conns: &Connections<'_>, pool: &PgPool) -> anyhow::Result<AppState> {
    let results = ResultStore {
        pool: conns.postgres(cfg.result_pool_size).await?,
        redis: conns.redis().await?,
        buckets: Default::default(),
    };
    Ok(AppState {
        pool: pool.clone(),
        payment: Arc::new(Signer::new(&cfg.payment_key)),
        payment_max_skew_secs: cfg.payment_max_skew_secs,
        results,
    })
}

/// Turns `tx` true at SIGTERM or ctrl-c.
fn shut_down_on_signal(tx: watch::Sender<bool>) {
    tokio::spawn(async move {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        tracing::info!("shutdown asked: finishing batches in flight");
        let _ = tx.send(true);
    });
}

/// The admin listener (`/metrics`, `/healthz`, `/readyz`, and the live view when `[admin]` has a
/// token) on `admin_listen`, until shutdown; none without `admin_listen`.
async fn spawn_admin(
    cfg: &Conf,
    shared: &Shared,
    shutdown_tx: &watch::Sender<bool>,
) -> anyhow::Result<Option<JoinHandle<std::io::Result<()>>>> {
    let Some(addr) = cfg.admin_listen else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on {addr} (admin)"))?;
    tracing::info!(listen = %addr, "admin listener: /metrics, /healthz, /readyz");
    let state = AdminState {
        metrics: shared.metrics.clone(),
        pool: shared.pool.clone(),
        assigned: cfg.kafka.plan.fixed().to_vec(),
        kafka: Some((shared.kafka.clone(), cfg.kafka.topic.clone())),
        redis: Some(shared.redis.clone()),
        live: match cfg.admin_token.clone() {
            None => None,
            Some(token) => Some(Arc::new(admin::LiveView {
                token,
                redis: shared.redis.clone(),
                fleet: cfg.fleet.clone(),
                rates: Default::default(),
                thresholds: audit_thresholds(cfg)?,
            })),
        },
    };
    let mut rx = shutdown_tx.subscribe();
    Ok(Some(tokio::spawn(async move {
        let stop = async move {
            let _ = rx.wait_for(|v| *v).await;
        };
        axum::serve(listener, admin::router(state)).with_graceful_shutdown(stop).await
    })))
}

/// The partition writers (or the lease holder), the sweeper, the close worker and the events'
/// relay, each running until shutdown.
struct Workers {
    writers: Vec<JoinHandle<anyhow::Result<()>>>,
    sweeper: JoinHandle<()>,
    closer: JoinHandle<()>,
    events: JoinHandle<()>,
}

/// The partition writers of a fixed plan, or the lease holder that runs them.
fn spawn_writers(
    cfg: &Conf,
    shared: &Shared,
    gateway: Arc<Signer>,
    shutdown_tx: &watch::Sender<bool>,
) -> Vec<JoinHandle<anyhow::Result<()>>> {
    let ctx = WriterCtx {
        pool: shared.pool.clone(),
        redis: shared.redis.clone(),
        scripts: shared.scripts.clone(),
        kafka: shared.kafka.clone(),
        topic: cfg.kafka.topic.clone(),
        signer: gateway,
        cfg: cfg.writer.clone(),
        metrics: shared.metrics.clone(),
    };
    let mut writers = Vec::new();
    match &cfg.kafka.plan {
        Plan::Fixed(assigned) => {
            for &p in assigned {
                writers.push(tokio::spawn(writer::run_partition(ctx.clone(), p, shutdown_tx.subscribe())));
            }
        }
        Plan::Leased => {
            let (leases, n) = (cfg.leases, cfg.kafka.partitions);
            writers.push(tokio::spawn(leases::run(ctx.clone(), leases, n, shutdown_tx.subscribe())));
        }
    }
    writers
}

impl Workers {
    /// Starts them all.
    fn spawn(
        cfg: &Conf,
        shared: &Shared,
        gateway: Arc<Signer>,
        producer: &Producer,
        shutdown_tx: &watch::Sender<bool>,
    ) -> Self {
        let writers = spawn_writers(cfg, shared, gateway, shutdown_tx);
        let sweep = sweeper::Sweeper {
            pool: shared.pool.clone(),
            redis: shared.redis.clone(),
            scripts: shared.scripts.clone(),
            producer: producer.clone(),
            kafka: shared.kafka.clone(),
            topic: cfg.kafka.topic.clone(),
            partitions: cfg.kafka.partitions,
            metrics: shared.metrics.clone(),
        };
        let sweeper =
            tokio::spawn(sweeper::run(sweep, cfg.sweep_age, cfg.sweep_interval, shutdown_tx.subscribe()));
        let closer = tokio::spawn(closer::run(
            shared.pool.clone(),
            shared.redis.clone(),
            shared.scripts.clone(),
            cfg.close_batch,
            cfg.close_interval,
            shared.metrics.clone(),
            shutdown_tx.subscribe(),
        ));
        let relay = events::Relay {
            pool: shared.pool.clone(),
            kafka: shared.kafka.clone(),
            conf: cfg.events.clone(),
            produce_timeout: cfg.kafka.produce_timeout,
        };
        let events = tokio::spawn(events::run(relay, shutdown_tx.subscribe()));
        Workers { writers, sweeper, closer, events }
    }

    /// Waits for them all, logging a writer's error.
    async fn join(self) -> anyhow::Result<()> {
        for t in self.writers {
            if let Err(e) = t.await? {
                tracing::error!(error = %format!("{e:#}"), "writer ended with an error");
            }
        }
        let _ = self.sweeper.await;
        let _ = self.closer.await;
        let _ = self.events.await;
        Ok(())
    }
}

/// The conf's `[audit]` thresholds (the defaults for a conf built in code); a bad table stops
/// the start, naming it.
fn audit_thresholds(cfg: &Conf) -> anyhow::Result<crate::campaign::audit::Thresholds> {
    if cfg.file.as_os_str().is_empty() {
        return Ok(Default::default());
    }
    let t = crate::campaign::audit::source::conf_thresholds(&cfg.file)?;
    crate::campaign::audit::check_thresholds(&t)?;
    Ok(t)
}
