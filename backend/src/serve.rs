//! `order-writer serve`: the HTTP server (result query, payment callback, health check), the
//! sweeper, the partition writers and the close worker in one process, with a graceful shutdown
//! (SIGTERM / ctrl-c): stop taking requests, let each writer commit the batch in flight, exit.

use std::sync::Arc;

use anyhow::Context;
use protocol::signing::Signer;
use tokio::sync::watch;

use crate::admin::metrics::WriterMetrics;
use crate::admin::{self, AdminState};
use crate::app::Connections;
use crate::conf::{Conf, Plan};
use crate::http::router;
use crate::http::state::{AppState, ResultStore};
use crate::kafka::producer::Producer;
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
    let kc = Arc::new(conns.kafka_with_topic().await?);
    events::ensure_topic(&kc, &cfg.events, &cfg.kafka).await?;
    // The gateway key: the writers verify every record with it, the sweeper signs with it.
    let gateway = Arc::new(Signer::new(&cfg.gateway_key));
    let producer = Producer::start(
        kc.clone(),
        &cfg.kafka.topic,
        cfg.kafka.partitions,
        cfg.kafka.produce_batch,
        cfg.kafka.produce_timeout,
        gateway.clone(),
    );

    // The result query's own small pool and Redis client: a polling storm queues on these,
    // never on the connections orders are written with.
    let results = ResultStore {
        pool: conns.postgres(cfg.result_pool_size).await?,
        redis: conns.redis().await?,
        buckets: Default::default(),
    };
    let state = AppState {
        pool: pool.clone(),
        payment: Arc::new(Signer::new(&cfg.payment_key)),
        payment_max_skew_secs: cfg.payment_max_skew_secs,
        results,
    };
    let listener = tokio::net::TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("cannot listen on {}", cfg.listen))?;
    tracing::info!(listen = %cfg.listen, topic = cfg.kafka.topic, plan = ?cfg.kafka.plan, "order writer serving");

    if signals {
        let tx = shutdown_tx.clone();
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

    let metrics = Arc::new(WriterMetrics::new());
    let admin_task = match cfg.admin_listen {
        Some(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr} (admin)"))?;
            tracing::info!(listen = %addr, "admin listener: /metrics, /healthz, /readyz");
            let state = AdminState {
                metrics: metrics.clone(),
                pool: pool.clone(),
                assigned: cfg.kafka.plan.fixed().to_vec(),
                kafka: Some((kc.clone(), cfg.kafka.topic.clone())),
                redis: Some(redis.clone()),
                live: match cfg.admin_token.clone() {
                    None => None,
                    Some(token) => Some(Arc::new(admin::LiveView {
                        token,
                        redis: redis.clone(),
                        fleet: cfg.fleet.clone(),
                        rates: Default::default(),
                        thresholds: audit_thresholds(&cfg)?,
                    })),
                },
            };
            let mut rx = shutdown_tx.subscribe();
            Some(tokio::spawn(async move {
                let stop = async move {
                    let _ = rx.wait_for(|v| *v).await;
                };
                axum::serve(listener, admin::router(state)).with_graceful_shutdown(stop).await
            }))
        }
        None => None,
    };

    let mut tasks = Vec::new();
    let ctx = WriterCtx {
        pool: pool.clone(),
        redis: redis.clone(),
        scripts: scripts.clone(),
        kafka: kc.clone(),
        topic: cfg.kafka.topic.clone(),
        signer: gateway,
        cfg: cfg.writer.clone(),
        metrics: metrics.clone(),
    };
    match &cfg.kafka.plan {
        Plan::Fixed(assigned) => {
            for &p in assigned {
                tasks.push(tokio::spawn(writer::run_partition(ctx.clone(), p, shutdown_tx.subscribe())));
            }
        }
        Plan::Leased => {
            let (leases, n) = (cfg.leases, cfg.kafka.partitions);
            tasks.push(tokio::spawn(leases::run(ctx.clone(), leases, n, shutdown_tx.subscribe())));
        }
    }
    let sweep = sweeper::Sweeper {
        pool: pool.clone(),
        redis: redis.clone(),
        scripts: scripts.clone(),
        producer: producer.clone(),
        kafka: kc.clone(),
        topic: cfg.kafka.topic.clone(),
        partitions: cfg.kafka.partitions,
        metrics: metrics.clone(),
    };
    let sw = tokio::spawn(sweeper::run(sweep, cfg.sweep_age, cfg.sweep_interval, shutdown_tx.subscribe()));
    let cl = tokio::spawn(closer::run(
        pool.clone(),
        redis.clone(),
        scripts.clone(),
        cfg.close_batch,
        cfg.close_interval,
        metrics.clone(),
        shutdown_tx.subscribe(),
    ));

    let ev = tokio::spawn(events::run(
        events::Relay {
            pool: pool.clone(),
            kafka: kc.clone(),
            conf: cfg.events.clone(),
            produce_timeout: cfg.kafka.produce_timeout,
        },
        shutdown_tx.subscribe(),
    ));

    let mut rx = shutdown_tx.subscribe();
    axum::serve(listener, router(state))
        .with_graceful_shutdown(async move {
            let _ = rx.wait_for(|v| *v).await;
        })
        .await?;
    for t in tasks {
        if let Err(e) = t.await? {
            tracing::error!(error = %format!("{e:#}"), "writer ended with an error");
        }
    }
    let _ = sw.await;
    let _ = cl.await;
    let _ = ev.await;
    if let Some(t) = admin_task {
        let _ = t.await;
    }
    tracing::info!("order writer stopped");
    Ok(())
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
