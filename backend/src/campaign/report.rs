//! `order-writer campaign report <id> --out FILE.html`: the report of a real sale, made from what
//! the campaign left behind, not from a load tool's own counts: PostgreSQL (the campaign, its
//! orders, payments and closes, its order events), Redis (the stock left in each bucket, the
//! stats hashes), the reconciliation (its stock equation, [`crate::workers::reconcile`], run
//! without repair), the audit ([`super::audit`]) and, when given, the gateways' `/metrics`
//! (answers by code, `seckill_gateway_order_answers_total`).
//!
//! Read ([`source`]) → the figures ([`Sale`], plain data, also written as JSON with `--json`) →
//! the page ([`html::page`], pure: a self-contained HTML file in the look of the demo's report,
//! `e2e/crowd/src/page.rs`, whose chart code stays in the load tool: the order writer does not depend
//! on it).

pub mod html;
pub mod source;

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

use super::audit::Audit;

/// The campaign as PostgreSQL has it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Campaign {
    /// Id.
    pub id: String,
    /// Item.
    pub sku: String,
    /// State (`DRAFT`, `READY`, `LIVE`, `ENDED`).
    pub state: String,
    /// Total stock.
    pub total_stock: i64,
    /// Units of live orders (`campaigns.sold`).
    pub sold: i64,
    /// Per-user limit.
    pub per_user_limit: i64,
    /// Unit price in cents.
    pub price_cents: i64,
    /// Window start, RFC 3339.
    pub starts_at: String,
    /// Window end, RFC 3339.
    pub ends_at: String,
    /// Window start, unix seconds (the timeline's zero).
    pub starts_at_unix: i64,
    /// Hot-stock buckets.
    pub buckets: u32,
}

/// The orders by status: how many and how many units.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Orders {
    /// Every order ever written for the campaign.
    pub orders: i64,
    /// Their units.
    pub units: i64,
    /// Distinct buyers.
    pub buyers: i64,
    /// Orders waiting for payment, and their units.
    pub pending: (i64, i64),
    /// Paid orders, and their units.
    pub paid: (i64, i64),
    /// Closed (unpaid in time) orders, and their units.
    pub closed: (i64, i64),
    /// Closed orders whose units Redis has taken back.
    pub closed_released: i64,
    /// Money taken, cents.
    pub paid_cents: i64,
    /// Seconds from order to payment: median and 90th percentile.
    pub pay_secs_p50_p90: Option<(f64, f64)>,
    /// Reservations PostgreSQL refused (`reservation_results`), by status.
    pub refused: BTreeMap<String, i64>,
    /// Order events (`order_events`) by kind: (produced, waiting).
    pub events: BTreeMap<String, (i64, i64)>,
}

/// One second of the sale: orders reserved, paid and closed in it (seconds from the window's
/// start).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Second {
    /// Seconds from the window's opening.
    pub t: i64,
    /// Orders whose reservation was made in that second.
    pub ordered: i64,
    /// Orders paid in that second.
    pub paid: i64,
    /// Orders closed in that second.
    pub closed: i64,
}

/// What Redis holds for the campaign now.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Stock {
    /// Each bucket's stock left, in bucket order.
    pub left: Vec<i64>,
    /// The stats hashes summed over the buckets (`released_qty`, `acked_count`, ...).
    pub stats: BTreeMap<String, i64>,
    /// Reservations still in the outbox (not acked by an order or a refusal yet).
    pub outbox: i64,
    /// Units buyers hold (Σ `bought`).
    pub held: i64,
}

/// The reconciliation's verdict.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// Redis' own equation holds.
    pub redis: bool,
    /// PostgreSQL's `sold` equals its live orders.
    pub postgres: bool,
    /// What Redis holds for buyers equals live orders plus queued reservations.
    pub across: bool,
    /// Differences found, by kind.
    pub differences: BTreeMap<String, u64>,
    /// The equation as `order-writer reconcile` prints it.
    pub text: String,
}

impl Verdict {
    /// Every equation holds and no request id differs.
    pub fn holds(&self) -> bool {
        self.redis && self.postgres && self.across && self.differences.is_empty()
    }
}

/// Everything the report shows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Sale {
    /// The campaign.
    pub campaign: Campaign,
    /// Orders, payments, closes, refusals, events.
    pub orders: Orders,
    /// Second by second.
    pub timeline: Vec<Second>,
    /// Redis now.
    pub stock: Stock,
    /// The reconciliation.
    pub reconcile: Verdict,
    /// The gateways' answers by code (none: no metrics read).
    pub answers: Option<BTreeMap<String, u64>>,
    /// The audit.
    pub audit: Audit,
    /// When the report was made, RFC 3339.
    pub made_at: String,
}

/// The command's flags.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The HTML file to write.
    #[arg(long, value_name = "FILE.html")]
    pub out: PathBuf,
    /// The figures as JSON too, in this file.
    #[arg(long, value_name = "FILE.json")]
    pub json: Option<PathBuf>,
    /// A gateway's `/metrics` URL (repeat for each gateway): the answers by code.
    #[arg(long = "gateway-metrics", value_name = "URL")]
    pub gateway_metrics: Vec<String>,
    /// The audit's access logs and thresholds.
    #[command(flatten)]
    pub audit: super::audit::Inputs,
}

/// The one line the command prints: what was sold, paid, closed and left, the verdict, the file.
pub fn summary(s: &Sale, out: &std::path::Path) -> String {
    format!(
        "report of {}: stock {}, ordered {} units, paid {}, closed {}, sold {}, left in Redis {}; reconcile {}; {} audit groups flagged; {}",
        s.campaign.id,
        s.campaign.total_stock,
        s.orders.units,
        s.orders.paid.1,
        s.orders.closed.1,
        s.campaign.sold,
        s.stock.left.iter().sum::<i64>(),
        if s.reconcile.holds() { "holds" } else { "DIFFERS" },
        s.audit.flagged().count(),
        out.display()
    )
}

/// Runs the command: reads the sale, writes the page (and the JSON), prints [`summary`].
pub async fn run(
    conns: &crate::app::Connections<'_>,
    id: &str,
    conf: &std::path::Path,
    args: &Args,
) -> anyhow::Result<()> {
    let sale = source::sale(conns, id, conf, args).await?;
    std::fs::write(&args.out, html::page(&sale))
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", args.out.display()))?;
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&sale)?)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    println!("{}", summary(&sale, &args.out));
    Ok(())
}
