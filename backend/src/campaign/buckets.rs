//! Hot-stock buckets as the order writer sees them (protocol::keys::Bucket): how many a
//! campaign has (PostgreSQL `campaigns.buckets`, fixed once the campaign is published), the
//! transfer ledgers (`sent`, `received`) and finishing a transfer whose "take" never ran.
//!
//! A transfer (`lua/transfer.lua`) is a "give" on the donor bucket, then a "take" on the
//! receiver. A caller that dies between the two leaves the units in neither stock: the sweeper
//! finds `sent` entries older than the sweep age whose id the receiver never `received`, and
//! runs the take (idempotent by transfer id).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fred::prelude::*;
use protocol::keys::Bucket;
use protocol::scripts::{Scripts, TakeOutcome};
use sqlx::PgPool;

/// One entry of a bucket's `sent` ledger: `sent[id] = "<to index> <qty> <ms>"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The transfer id.
    pub id: String,
    /// The receiving bucket's index.
    pub to: u32,
    /// Units given.
    pub qty: i64,
    /// When they were given (Redis' clock, ms).
    pub at_ms: i64,
}

/// Parses a `sent` ledger (unreadable entries are left out), sorted by id.
pub fn parse_sent(ledger: &HashMap<String, String>) -> Vec<Sent> {
    let mut out: Vec<Sent> = ledger
        .iter()
        .filter_map(|(id, v)| {
            let mut it = v.split_whitespace();
            let to = it.next()?.parse().ok()?;
            let qty = it.next()?.parse().ok()?;
            let at_ms = it.next()?.parse().ok()?;
            Some(Sent { id: id.clone(), to, qty, at_ms })
        })
        .collect();
    out.sort_by(|a, b| a.id.cmp(&b.id));
    out
}

/// The transfers of `sent` still in flight: not in `received` (the transfer ids the receiving
/// bucket `to` took, by bucket index) and given more than `age_ms` ago by Redis' clock
/// `now_ms`. Younger ones are left to the caller that gave them.
pub fn in_flight<'a>(
    sent: &'a [Sent],
    received: &HashMap<u32, HashSet<String>>,
    now_ms: i64,
    age_ms: i64,
) -> Vec<&'a Sent> {
    sent.iter()
        .filter(|s| now_ms - s.at_ms > age_ms)
        .filter(|s| !received.get(&s.to).is_some_and(|r| r.contains(&s.id)))
        .collect()
}

/// How many buckets `campaign` has, from PostgreSQL (`None`: no such campaign).
pub async fn count(pool: &PgPool, campaign: &str) -> anyhow::Result<Option<u32>> {
    let b: Option<i32> = sqlx::query_scalar("SELECT buckets FROM campaigns WHERE id = $1")
        .bind(campaign)
        .fetch_optional(pool)
        .await?;
    Ok(b.map(|b| b.max(1) as u32))
}

/// Bucket counts of published campaigns, remembered: a count never changes once the campaign is
/// not DRAFT (publish refuses it), so it is read from PostgreSQL once per campaign.
#[derive(Debug, Clone, Default)]
pub struct CountCache {
    known: Arc<Mutex<HashMap<String, u32>>>,
}

impl CountCache {
    /// The bucket count of `campaign` (1 for a campaign PostgreSQL does not know: nothing of it
    /// is in Redis but possibly old single keys).
    pub async fn get(&self, pool: &PgPool, campaign: &str) -> anyhow::Result<u32> {
        if let Some(n) = self.known.lock().expect("cache lock").get(campaign) {
            return Ok(*n);
        }
        let row: Option<(i32, String)> = sqlx::query_as("SELECT buckets, state FROM campaigns WHERE id = $1")
            .bind(campaign)
            .fetch_optional(pool)
            .await?;
        let Some((n, state)) = row else { return Ok(1) };
        let n = n.max(1) as u32;
        if state != "DRAFT" {
            self.known.lock().expect("cache lock").insert(campaign.to_string(), n);
        }
        Ok(n)
    }
}

/// Redis' clock (ms).
pub async fn redis_now_ms(redis: &Client) -> anyhow::Result<i64> {
    let time: Vec<i64> = redis.custom(fred::cmd!("TIME"), Vec::<String>::new()).await?;
    let (secs, micros) = (time.first().copied().unwrap_or(0), time.get(1).copied().unwrap_or(0));
    Ok(secs * 1000 + micros / 1000)
}

/// The `received` ledger of every bucket, by index.
pub async fn received_ids(redis: &Client, all: &[Bucket]) -> anyhow::Result<HashMap<u32, HashSet<String>>> {
    let mut out = HashMap::new();
    for b in all {
        let ids: Vec<String> = redis.hkeys(&b.keys.received).await?;
        out.insert(b.index, ids.into_iter().collect());
    }
    Ok(out)
}

/// Finishes every transfer of `campaign` (with `count` buckets) given more than `age` ago whose
/// take never ran. Returns how many were taken now.
pub async fn finish_transfers(
    redis: &Client,
    scripts: &Scripts,
    campaign: &str,
    count: u32,
    age: Duration,
) -> anyhow::Result<usize> {
    if count <= 1 {
        return Ok(0);
    }
    let all = Bucket::all(campaign, count);
    // Every transfer id given is received once: as many entries on both sides, nothing is in
    // flight (two lengths per bucket instead of the ledgers, on every pass).
    let (mut sent_n, mut received_n) = (0i64, 0i64);
    for b in &all {
        sent_n += redis.hlen::<i64, _>(&b.keys.sent).await?;
        received_n += redis.hlen::<i64, _>(&b.keys.received).await?;
    }
    if sent_n == received_n {
        return Ok(0);
    }
    let received = received_ids(redis, &all).await?;
    let now_ms = redis_now_ms(redis).await?;
    let mut taken = 0;
    for b in &all {
        let ledger: HashMap<String, String> = redis.hgetall(&b.keys.sent).await?;
        let sent = parse_sent(&ledger);
        for s in in_flight(&sent, &received, now_ms, age.as_millis() as i64) {
            let to = Bucket::nth(campaign, s.to, count);
            if let TakeOutcome::Added { .. } = scripts.take(redis, &to, &s.id, s.qty).await? {
                tracing::info!(campaign, transfer = %s.id, from = b.index, to = s.to, qty = s.qty, "transfer finished by the sweeper");
                taken += 1;
            }
        }
    }
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ledger(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn the_sent_ledger_is_parsed_and_bad_entries_left_out() {
        let sent =
            parse_sent(&ledger(&[("t2", "1 3 500"), ("t1", "0 2 400"), ("bad", "x 1"), ("short", "1 2")]));
        assert_eq!(
            sent,
            vec![
                Sent { id: "t1".into(), to: 0, qty: 2, at_ms: 400 },
                Sent { id: "t2".into(), to: 1, qty: 3, at_ms: 500 },
            ]
        );
    }

    #[test]
    fn only_old_transfers_the_receiver_never_took_are_in_flight() {
        let sent = parse_sent(&ledger(&[("old", "1 3 1000"), ("young", "1 1 9500"), ("done", "2 1 1000")]));
        let received: HashMap<u32, HashSet<String>> =
            [(1, HashSet::new()), (2, ["done".to_string()].into())].into_iter().collect();
        let ids: Vec<&str> =
            in_flight(&sent, &received, 10_000, 1_000).iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["old"]);
        // The same transfer id taken by another bucket does not count.
        let elsewhere: HashMap<u32, HashSet<String>> =
            [(2, ["old".to_string()].into())].into_iter().collect();
        assert_eq!(in_flight(&sent, &elsewhere, 10_000, 1_000).len(), 2);
    }
}
