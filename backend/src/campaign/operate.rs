//! A published campaign, operated: `order-writer campaign pause|resume|queue-only|close|extend|
//! end|add-stock|status|apply ID`.
//!
//! The state commands write the campaign's control hash in Redis (`protocol::control`), which
//! every gateway reads every `protocol::control::POLL`, then wait for every gateway of `[fleet]`
//! to show the new version ([`super::fleet::Gateways::converge`]) and print each one's view;
//! they fail, naming the gateway, when one did not. Which change is allowed from which state is
//! [`decide`], a pure function.

use std::collections::HashMap;

use anyhow::Context;
use chrono::{DateTime, Utc};
use fred::prelude::{Client as RedisClient, HashesInterface, KeysInterface, TransactionInterface};
use protocol::control::{Control, State};
use protocol::keys::{control_key, Bucket};
use sqlx::PgPool;

use super::fleet::{self, Gateways};
use crate::app::{Connections, COMMAND_POOL};

/// A change of a campaign's operated state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Orders answered `CAMPAIGN_CLOSED` with `Retry-After` until `resume`.
    Pause,
    /// Back to selling.
    Resume,
    /// Orders answered `TRY_LATER`, nothing reserved.
    QueueOnly,
    /// Orders answered `ENDED` (until `resume`, or for good after `end`).
    Close,
    /// The window's end moved later.
    Extend(DateTime<Utc>),
    /// Over for good (after the drain and the final reconcile: [`super::end`]).
    End,
}

impl Change {
    fn name(self) -> &'static str {
        match self {
            Change::Pause => "pause",
            Change::Resume => "resume",
            Change::QueueOnly => "queue-only",
            Change::Close => "close",
            Change::Extend(_) => "extend",
            Change::End => "end",
        }
    }
}

/// The state a change leads to from `now` (the control as read) for a campaign whose window ends
/// at `ends_at` (the end in force), or why it is refused.
pub fn decide(now: &Control, ends_at: DateTime<Utc>, change: Change) -> Result<State, String> {
    let from = now.state;
    if from == State::Ended {
        return Err("the campaign is ENDED: nothing changes it any more".into());
    }
    Ok(match change {
        Change::Pause => State::Paused,
        Change::QueueOnly => State::QueueOnly,
        Change::Close => State::Closed,
        Change::End => State::Ended,
        Change::Resume if from == State::Open => return Err("the campaign is already OPEN".into()),
        Change::Resume => State::Open,
        Change::Extend(to) if to <= ends_at => {
            return Err(format!("{to} is not after the window's end in force, {ends_at} (extend moves it later; close stops sooner)"))
        }
        Change::Extend(_) => from,
    })
}

/// The campaign's row as the commands read it.
#[derive(Debug, sqlx::FromRow)]
pub struct Row {
    /// DRAFT, READY, LIVE or ENDED.
    pub state: String,
    /// The window's end as published.
    pub ends_at: DateTime<Utc>,
    /// Seconds an order may stay unpaid.
    pub pay_window_secs: i64,
    /// Hot-stock buckets.
    pub buckets: i32,
    /// Units for sale, additions included.
    pub total_stock: i64,
    /// Units sold (live orders).
    pub sold: i64,
    /// Units added by `add-stock`.
    pub stock_added: i64,
}

/// The published campaign `id` (an error naming what to do when it is not).
pub async fn published(pool: &PgPool, id: &str) -> anyhow::Result<Row> {
    let row: Option<Row> = sqlx::query_as(
        "SELECT state, ends_at, pay_window_secs, buckets, total_stock, sold, stock_added FROM campaigns WHERE id = $1",
    )
    .bind(id)
    .fetch_optional(pool)
    .await?;
    match row {
        None => {
            anyhow::bail!("unknown campaign {id:?}: publish it first (order-writer campaign publish {id})")
        }
        Some(r) if r.state == "DRAFT" => anyhow::bail!("campaign {id} is DRAFT: publish it first"),
        Some(r) => Ok(r),
    }
}

/// The control hash of `id` as it is now.
pub async fn read_control(redis: &RedisClient, id: &str) -> anyhow::Result<Control> {
    let hash: HashMap<String, String> = redis.hgetall(control_key(id)).await?;
    Control::from_hash(&hash).map_err(anyhow::Error::msg)
}

/// Writes `state` (and the window's end, when given) and bumps the version, atomically; returns
/// the new version.
pub async fn write_state(
    redis: &RedisClient,
    id: &str,
    state: State,
    ends_at: Option<DateTime<Utc>>,
) -> anyhow::Result<u64> {
    let key = control_key(id);
    let mut fields = vec![("state".to_string(), state.as_str().to_string())];
    fields.push(("updated_at".to_string(), Utc::now().to_rfc3339()));
    if let Some(end) = ends_at {
        fields.push(("ends_at_ms".to_string(), end.timestamp_millis().to_string()));
    }
    let tx = redis.multi();
    let _: () = tx.hset(&key, fields).await?;
    let _: () = tx.hincrby(&key, "version", 1).await?;
    let (_, version): (i64, i64) = tx.exec(true).await.context("writing the control hash")?;
    Ok(version.max(0) as u64)
}

/// `pause`, `resume`, `queue-only`, `close` and `extend`: the change, then every gateway's view.
pub async fn run(conns: &Connections<'_>, id: &str, change: Change) -> anyhow::Result<()> {
    let pool = conns.migrated_postgres(COMMAND_POOL).await?;
    let redis = conns.redis().await?;
    let row = published(&pool, id).await?;
    let now = read_control(&redis, id).await?;
    let in_force = now.ends_at_after(row.ends_at);
    let to = decide(&now, in_force, change)
        .map_err(|why| anyhow::anyhow!("{} {id} refused: {why}", change.name()))?;
    let end = match change {
        Change::Extend(t) => Some(t),
        _ => None,
    };
    let version = write_state(&redis, id, to, end).await?;
    println!("campaign {id}: {} → {} (control version {version})", now.state.as_str(), to.as_str());
    converge(conns, id, version).await
}

/// Waits for every gateway of `[fleet]` to show control `version` of `id`, printing each one's
/// view; an error naming those that did not.
pub async fn converge(conns: &Connections<'_>, id: &str, version: u64) -> anyhow::Result<()> {
    let fleet = &conns.conf().fleet;
    if fleet.gateways.is_empty() {
        println!("  no [fleet] gateways in the conf: the gateways' convergence is not checked");
        return Ok(());
    }
    let gateways = Gateways::new(fleet)?;
    let (seen, took) = gateways.converge(id, |c| c.version >= version).await;
    print!("{}", fleet::table(&seen, id));
    match took {
        Some(t) => {
            println!("  every gateway ({}) shows version {version} after {} ms", seen.len(), t.as_millis());
            Ok(())
        }
        None => {
            let late: Vec<&str> = seen
                .iter()
                .filter(|s| s.campaign(id).is_none_or(|c| c.version < version))
                .map(|s| s.gateway.as_str())
                .collect();
            anyhow::bail!(
                "not every gateway took control version {version} within {} ms: {}",
                fleet.converge.as_millis(),
                late.join(", ")
            )
        }
    }
}

/// One bucket of a campaign in Redis now.
#[derive(Debug)]
pub struct BucketNow {
    /// Its index.
    pub index: u32,
    /// Its stock left (`None`: no stock key).
    pub stock: Option<i64>,
    /// Reservations in its outbox (waiting for their order).
    pub outbox: i64,
}

/// Each bucket's stock and outbox now (`status` and the live view).
pub async fn buckets_now(redis: &RedisClient, id: &str, buckets: i32) -> anyhow::Result<Vec<BucketNow>> {
    let mut out = Vec::new();
    for b in Bucket::all(id, buckets.max(1) as u32) {
        let stock: Option<i64> = redis.get(&b.keys.stock).await?;
        let outbox: i64 = redis.hlen(&b.keys.outbox).await?;
        out.push(BucketNow { index: b.index, stock, outbox });
    }
    Ok(out)
}

/// `status ID`: the campaign's row, control, stock left per bucket, and every gateway's view.
pub async fn status(conns: &Connections<'_>, id: &str) -> anyhow::Result<()> {
    let pool = conns.migrated_postgres(COMMAND_POOL).await?;
    let redis = conns.redis().await?;
    let row = published(&pool, id).await?;
    let control = read_control(&redis, id).await?;
    println!(
        "campaign {id}: {} in PostgreSQL, {} (control version {}); stock {} ({} added), sold {}",
        row.state,
        control.state.as_str(),
        control.version,
        row.total_stock,
        row.stock_added,
        row.sold
    );
    let in_force = control.ends_at_after(row.ends_at);
    println!("  window ends {in_force}{}", if control.ends_at.is_some() { " (extended)" } else { "" });
    let mut left = 0;
    for b in buckets_now(&redis, id, row.buckets).await? {
        println!(
            "  bucket {}: {} left, {} in the outbox",
            b.index,
            b.stock.map_or("-".into(), |s| s.to_string()),
            b.outbox
        );
        left += b.stock.unwrap_or(0);
    }
    println!("  left in Redis: {left}");
    if conns.conf().fleet.gateways.is_empty() {
        println!("  no [fleet] gateways in the conf");
        return Ok(());
    }
    let seen = Gateways::new(&conns.conf().fleet)?.serving().await;
    print!("{}", fleet::table(&seen, id));
    Ok(())
}

/// `apply ID`: the campaign file as delivered to the gateways (the team's own tooling puts the
/// same file in each one's campaigns folder; this conf's copy is the reference), checked against
/// what was published, then every gateway asked to reload and to show the file's digest. Fails,
/// naming each gateway, when one refused the reload or serves another version.
pub async fn apply(conns: &Connections<'_>, id: &str) -> anyhow::Result<()> {
    let file = conns.conf().campaigns_dir.join(format!("{id}.toml"));
    let campaign = protocol::campaign::Campaign::load(&file)?;
    let redis = conns.redis().await?;
    let control = read_control(&redis, id).await?;
    let found = control.disagreements(&campaign, &fleet::of_writer(conns.conf()));
    if let Some(d) = found.first() {
        anyhow::bail!("{}: {}", file.display(), d.message);
    }
    let gateways = Gateways::new(&conns.conf().fleet)?;
    let reloaded = gateways.reload().await;
    let refused: Vec<String> = reloaded
        .iter()
        .filter_map(|s| s.answer.as_ref().err().map(|e| format!("{}: {e}", s.gateway)))
        .collect();
    let (seen, took) = gateways.converge(id, |c| c.digest == campaign.digest).await;
    println!("campaign {id}: file digest {}", campaign.digest);
    print!("{}", fleet::table(&seen, id));
    if !refused.is_empty() {
        anyhow::bail!("the reload was refused by {} gateway(s):\n  {}", refused.len(), refused.join("\n  "));
    }
    match took {
        Some(t) => {
            println!(
                "  every gateway ({}) serves digest {} after {} ms",
                seen.len(),
                campaign.digest,
                t.as_millis()
            );
            Ok(())
        }
        None => {
            let behind: Vec<&str> = seen
                .iter()
                .filter(|s| s.campaign(id).is_none_or(|c| c.digest != campaign.digest))
                .map(|s| s.gateway.as_str())
                .collect();
            anyhow::bail!(
                "not every gateway serves digest {} of {}: {}",
                campaign.digest,
                file.display(),
                behind.join(", ")
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(state: State) -> Control {
        Control { state, ..Default::default() }
    }

    #[test]
    fn each_change_from_each_state() {
        let end = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        let later = end + chrono::Duration::hours(1);
        assert_eq!(decide(&at(State::Open), end, Change::Pause), Ok(State::Paused));
        assert_eq!(decide(&at(State::Paused), end, Change::Resume), Ok(State::Open));
        assert_eq!(
            decide(&at(State::Closed), end, Change::Resume),
            Ok(State::Open),
            "close is undone by resume"
        );
        assert_eq!(decide(&at(State::Open), end, Change::QueueOnly), Ok(State::QueueOnly));
        assert_eq!(
            decide(&at(State::Paused), end, Change::Extend(later)),
            Ok(State::Paused),
            "extend keeps the state"
        );
        assert!(decide(&at(State::Open), end, Change::Resume).unwrap_err().contains("already OPEN"));
        assert!(decide(&at(State::Open), end, Change::Extend(end)).unwrap_err().contains("not after"));
        for change in [Change::Resume, Change::Pause, Change::Close, Change::End, Change::Extend(later)] {
            assert!(decide(&at(State::Ended), end, change).unwrap_err().contains("ENDED"), "{change:?}");
        }
    }
}
