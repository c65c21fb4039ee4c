//! What the audit reads: the campaign's winners from PostgreSQL, the crowd's attempts from the
//! gateways' JSON access logs, the thresholds from the conf's `[audit]` table.

use std::io::BufRead;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::Deserialize;
use sqlx::PgPool;

use super::{audit, Attempt, Audit, Thresholds, Winner};

/// The conf file as the audit reads it: its `[audit]` table only (the rest is [`crate::conf`]'s).
#[derive(Debug, Default, Deserialize)]
struct AuditFile {
    #[serde(default)]
    audit: Option<Thresholds>,
}

/// The thresholds of the conf `file`'s `[audit]` table over the defaults (absent table or
/// fields: [`Thresholds::default`]).
pub fn conf_thresholds(file: &Path) -> anyhow::Result<Thresholds> {
    let text = std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let f: AuditFile = toml::from_str(&text).with_context(|| format!("{}: [audit]", file.display()))?;
    Ok(f.audit.unwrap_or_default())
}

/// An error naming campaign `id` when the database does not have it.
pub async fn check_campaign(pg: &PgPool, id: &str) -> anyhow::Result<()> {
    let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM campaigns WHERE id = $1")
        .bind(id)
        .fetch_optional(pg)
        .await
        .context("reading the campaign")?;
    found.map(|_| ()).ok_or_else(|| anyhow::anyhow!("no campaign {id:?} in the database"))
}

/// Every order of campaign `id` (any status) with its origin; the account's age taken when it
/// reserved.
pub async fn winners(pg: &PgPool, id: &str) -> anyhow::Result<Vec<Winner>> {
    type Row = (String, i64, Option<String>, Option<String>, Option<i64>);
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT user_id, qty, host(client_ip), device_id, extract(epoch FROM reserved_at - registered_at)::int8
           FROM orders WHERE campaign_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(pg)
    .await
    .context("reading the campaign's orders")?;
    Ok(rows
        .into_iter()
        .map(|(user, qty, ip, device, registered)| Winner {
            user,
            qty,
            client_ip: ip.and_then(|ip| ip.parse().ok()),
            device,
            account_age_secs: registered,
        })
        .collect())
}

/// Whether `uri` is an order request of campaign `id`: `/seckill/<id>/order` or
/// `/seckill/<id>/<hidden path>/order`, any query.
pub fn is_order_uri(uri: &str, id: &str) -> bool {
    let path = uri.split('?').next().unwrap_or("");
    let Some(rest) = path.strip_prefix("/seckill/").and_then(|p| p.strip_prefix(id)) else {
        return false;
    };
    rest.starts_with('/') && (rest == "/order" || rest.ends_with("/order") && rest.matches('/').count() == 2)
}

/// One JSON access log line of an order request of `id` as an attempt; `None` for any other
/// line (another request, a text line, a line that does not parse).
pub fn attempt_of(line: &str, id: &str) -> Option<Attempt> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["method"].as_str() != Some("POST") || !is_order_uri(v["uri"].as_str()?, id) {
        return None;
    }
    Some(Attempt {
        client: v["client"].as_str().and_then(|c| c.parse::<IpAddr>().ok()),
        device: v["device"].as_str().map(str::to_string),
        code: v["code"].as_str().map(str::to_string),
    })
}

/// The attempts of campaign `id` in the JSON access logs `files`.
pub fn attempts(files: &[PathBuf], id: &str) -> anyhow::Result<Vec<Attempt>> {
    let mut out = Vec::new();
    for f in files {
        let file = std::fs::File::open(f).with_context(|| format!("opening {}", f.display()))?;
        for line in std::io::BufReader::new(file).lines() {
            let line = line.with_context(|| format!("reading {}", f.display()))?;
            out.extend(attempt_of(&line, id));
        }
    }
    Ok(out)
}

/// The audit of campaign `id`: its winners, the attempts in `logs` (none given: attempts
/// unknown), judged against `t`.
pub async fn audit_of(pg: &PgPool, id: &str, logs: &[PathBuf], t: &Thresholds) -> anyhow::Result<Audit> {
    check_campaign(pg, id).await?;
    let winners = winners(pg, id).await?;
    let attempts = if logs.is_empty() { None } else { Some(attempts(logs, id)?) };
    Ok(audit(id, &winners, attempts.as_deref(), t))
}
