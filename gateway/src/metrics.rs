//! The gateway's Prometheus metrics, in the process's default registry (the one Pingora's
//! Prometheus app gathers from, see [`crate::admin`]).
//!
//! Two kinds:
//! - **counted on the request path** ([`Metrics`]): answers of order requests by campaign and
//!   code, latency and status class per route kind, upstream errors per pool. Every handle a request touches is resolved before the
//!   request (per route kind at start, per campaign when the conf loads: [`Answers`]), so an
//!   update is one atomic add, with no lookup and no allocation;
//! - **read at scrape time** (`crate::admin::Live`): the access log's counters.
//!
//! The sale's own (the reservation step's latency and Redis failures, the global limits that
//! failed open, the Kafka queue, sold-out flags, the Redis pool, the lag, the waiting room) are
//! registered by the sale itself in the same registry (`plugins`' `serve::metrics`).
//!
//! Names: every metric starts with `seckill_gateway_`; the README lists them.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use prometheus::core::Collector;
use prometheus::{Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts};
use protocol::codes::Code;

/// Latency buckets (seconds): 100 µs to 2.5 s, for answers given in-process and proxied ones.
const LATENCY_BUCKETS: &[f64] =
    &[0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5];

/// The campaign label of an order answer whose campaign is not configured (so a crowd of made-up
/// ids cannot create series).
pub const UNKNOWN_CAMPAIGN: &str = "(unknown)";

/// The codes an order request is answered with; their series exist (at 0) for every campaign
/// from the start, so a dashboard's `rate()` has a series to read before the first such answer.
pub const ORDER_CODES: [Code; 13] = [
    Code::Queued,
    Code::SoldOut,
    Code::LimitReached,
    Code::NotStarted,
    Code::Ended,
    Code::CampaignNotReady,
    Code::CampaignClosed,
    Code::TryLater,
    Code::RateLimited,
    Code::BadRequest,
    Code::ServiceDegraded,
    Code::CampaignUnknown,
    Code::Internal,
];

/// What a request was, for its latency and status series.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteKind {
    /// `POST /seckill/{c}/{path}/order`.
    Order,
    /// `POST /seckill/{c}/captcha` and `POST /seckill/{c}/token` (before an order).
    Token,
    /// `GET /seckill/{c}/result/{id}` (proxied to the order writer).
    Result,
    /// `GET /seckill/{c}/info`.
    Info,
    /// `GET /seckill/{c}/` and its files: the buyer's page.
    Page,
    /// A shop route (proxied).
    Shop,
    /// No route (404), or the request could not be read.
    None,
}

impl RouteKind {
    /// Every kind, in label order.
    pub const ALL: [RouteKind; 7] = [
        RouteKind::Order,
        RouteKind::Token,
        RouteKind::Result,
        RouteKind::Info,
        RouteKind::Page,
        RouteKind::Shop,
        RouteKind::None,
    ];

    /// The `route` label.
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Order => "order",
            RouteKind::Token => "token",
            RouteKind::Result => "result",
            RouteKind::Info => "info",
            RouteKind::Page => "page",
            RouteKind::Shop => "shop",
            RouteKind::None => "none",
        }
    }
}

/// The `class` label of an HTTP status (`0` when no answer was written).
pub fn status_class(status: u16) -> usize {
    match status {
        100..=199 => 1,
        200..=299 => 2,
        300..=399 => 3,
        400..=499 => 4,
        500..=599 => 5,
        _ => 0,
    }
}

const CLASSES: [&str; 6] = ["none", "1xx", "2xx", "3xx", "4xx", "5xx"];

/// The handles of one route kind.
struct RouteHandles {
    duration: Histogram,
    by_class: [IntCounter; 6],
}

/// The metrics updated on the request path.
pub struct Metrics {
    answers: IntCounterVec,
    durations: HistogramVec,
    responses: IntCounterVec,
    upstream_errors: IntCounterVec,
    limited: IntCounterVec,
    routes: [RouteHandles; 7],
    unknown: Answers,
}

/// The process's metrics (created on first use; registered by [`register`]).
pub fn metrics() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

impl Metrics {
    fn new() -> Self {
        // The names and labels are constants: creating them cannot fail.
        let answers = IntCounterVec::new(
            Opts::new(
                "seckill_gateway_order_answers_total",
                "Order requests answered, by campaign and answer code",
            ),
            &["campaign", "code"],
        )
        .expect("valid metric");
        let durations = HistogramVec::new(
            HistogramOpts::new(
                "seckill_gateway_request_duration_seconds",
                "Time from the request's header to its logging phase, by route kind",
            )
            .buckets(LATENCY_BUCKETS.to_vec()),
            &["route"],
        )
        .expect("valid metric");
        let responses = IntCounterVec::new(
            Opts::new("seckill_gateway_responses_total", "Responses by route kind and status class"),
            &["route", "class"],
        )
        .expect("valid metric");
        let upstream_errors = IntCounterVec::new(
            Opts::new(
                "seckill_gateway_upstream_errors_total",
                "Proxied requests that failed, by upstream pool",
            ),
            &["pool"],
        )
        .expect("valid metric");
        let limited = IntCounterVec::new(
            Opts::new(
                "seckill_gateway_route_limited_total",
                "Shop requests rejected by a route's limit_req or limit_conn, by limit and zone",
            ),
            &["limit", "zone"],
        )
        .expect("valid metric");
        let routes = RouteKind::ALL.map(|kind| RouteHandles {
            duration: durations.with_label_values(&[kind.as_str()]),
            by_class: CLASSES.map(|class| responses.with_label_values(&[kind.as_str(), class])),
        });
        let unknown = Answers::resolve(&answers, UNKNOWN_CAMPAIGN);
        Self { answers, durations, responses, upstream_errors, limited, routes, unknown }
    }

    /// A request of `kind` answered with `status` after `took`.
    pub fn request(&self, kind: RouteKind, status: u16, took: Duration) {
        let h = &self.routes[kind as usize];
        h.duration.observe(took.as_secs_f64());
        h.by_class[status_class(status)].inc();
    }

    /// The answer counters of an order whose campaign is not configured.
    pub fn unknown_campaign(&self) -> &Answers {
        &self.unknown
    }

    /// The answer counters of `campaign`, resolved once (when the conf loads).
    pub fn answers_for(&self, campaign: &str) -> Answers {
        Answers::resolve(&self.answers, campaign)
    }

    /// A proxied request to `pool` failed (an error path: the label is looked up here).
    pub fn upstream_error(&self, pool: &str) {
        self.upstream_errors.with_label_values(&[pool]).inc();
    }

    /// A shop request was rejected by `limit` (`limit_req`, `limit_conn`) of `zone` (a
    /// rejection's path: the labels are looked up here).
    pub fn limited(&self, limit: &str, zone: &str) {
        self.limited.with_label_values(&[limit, zone]).inc();
    }

    /// Gives `pool` its upstream-error series (at 0) when the conf loads, so a dashboard reads
    /// 0 rather than nothing.
    pub fn pool_loaded(&self, pool: &str) {
        self.upstream_errors.with_label_values(&[pool]);
    }

    fn collectors(&self) -> Vec<Box<dyn Collector>> {
        vec![
            Box::new(self.answers.clone()),
            Box::new(self.durations.clone()),
            Box::new(self.responses.clone()),
            Box::new(self.upstream_errors.clone()),
            Box::new(self.limited.clone()),
        ]
    }
}

/// One campaign's order-answer counters, one per [`ORDER_CODES`] entry.
#[derive(Clone)]
pub struct Answers {
    campaign: String,
    by_code: Arc<[(Code, IntCounter)]>,
    vec: IntCounterVec,
}

impl std::fmt::Debug for Answers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Answers").field("campaign", &self.campaign).finish_non_exhaustive()
    }
}

impl Answers {
    fn resolve(vec: &IntCounterVec, campaign: &str) -> Self {
        let by_code = ORDER_CODES.map(|code| (code, vec.with_label_values(&[campaign, code.as_str()])));
        Self { campaign: campaign.to_string(), by_code: Arc::new(by_code), vec: vec.clone() }
    }

    /// Counts one answer with `code`.
    pub fn count(&self, code: Code) {
        match self.by_code.iter().find(|(c, _)| *c == code) {
            Some((_, counter)) => counter.inc(),
            // A code no order answer uses today: counted all the same, at the cost of a lookup.
            None => self.vec.with_label_values(&[self.campaign.as_str(), code.as_str()]).inc(),
        }
    }
}

/// Registers the request-path metrics and `scrape_time` (the families read when scraped) in
/// the default registry. Once per process.
pub fn register(scrape_time: Box<dyn Collector>) -> prometheus::Result<()> {
    let registry = prometheus::default_registry();
    for c in metrics().collectors() {
        registry.register(c)?;
    }
    registry.register(scrape_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_fall_in_their_class() {
        assert_eq!(CLASSES[status_class(202)], "2xx");
        assert_eq!(CLASSES[status_class(410)], "4xx");
        assert_eq!(CLASSES[status_class(503)], "5xx");
        assert_eq!(CLASSES[status_class(0)], "none");
    }

    #[test]
    fn answers_count_per_code_including_codes_outside_the_list() {
        let m = metrics();
        let a = m.answers_for("metrics-unit");
        a.count(Code::Queued);
        a.count(Code::Queued);
        a.count(Code::Paid);
        let get = |code: &str| m.answers.with_label_values(&["metrics-unit", code]).get();
        assert_eq!((get("QUEUED"), get("SOLD_OUT"), get("PAID")), (2, 0, 1));
        m.request(RouteKind::Order, 202, Duration::from_millis(2));
        assert_eq!(m.responses.with_label_values(&["order", "2xx"]).get(), 1);
        assert_eq!(m.durations.with_label_values(&["order"]).get_sample_count(), 1);
    }
}
