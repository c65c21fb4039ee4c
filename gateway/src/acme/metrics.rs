//! The ACME metrics, by entry (`cert`: its first host), in the default registry.

use std::sync::OnceLock;

use prometheus::{IntCounterVec, IntGaugeVec, Opts};

pub(super) struct AcmeMetrics {
    pub attempts: IntCounterVec,
    pub failures: IntCounterVec,
    pub issued: IntCounterVec,
    pub not_after: IntGaugeVec,
}

fn counter(name: &str, help: &str) -> IntCounterVec {
    IntCounterVec::new(Opts::new(name, help), &["cert"]).expect("valid metric")
}

pub(super) fn get() -> &'static AcmeMetrics {
    static M: OnceLock<AcmeMetrics> = OnceLock::new();
    M.get_or_init(|| AcmeMetrics {
        attempts: counter("seckill_gateway_acme_attempts_total", "ACME orders this gateway started"),
        failures: counter(
            "seckill_gateway_acme_failures_total",
            "ACME attempts that failed (retried with backoff; the served certificate stays)",
        ),
        issued: counter("seckill_gateway_acme_issued_total", "Certificates this gateway obtained by ACME"),
        not_after: IntGaugeVec::new(
            Opts::new(
                "seckill_gateway_acme_cert_not_after_seconds",
                "Expiry (Unix time) of the ACME certificate served now",
            ),
            &["cert"],
        )
        .expect("valid metric"),
    })
}

/// Registers them once per process.
pub(super) fn register() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        let m = get();
        let registry = prometheus::default_registry();
        let all: [Box<dyn prometheus::core::Collector>; 4] = [
            Box::new(m.attempts.clone()),
            Box::new(m.failures.clone()),
            Box::new(m.issued.clone()),
            Box::new(m.not_after.clone()),
        ];
        for c in all {
            if let Err(e) = registry.register(c) {
                tracing::warn!(error = %e, "ACME metrics not registered");
            }
        }
    });
}
