//! The operated state of each campaign, read from its control hash in Redis every
//! [`protocol::control::POLL`] ([`run`]): `order-writer campaign pause|resume|queue-only|close|
//! extend|end` reach every gateway this way, and a campaign whose files disagree with what was
//! published (a frozen field, the signing key, the topic) is not sold here until they agree.
//!
//! A campaign's [`LiveControl`] is kept across reloads (like its sold-out flag); the edge's
//! checks read two atomics of it per order. When Redis does not answer, the last state read
//! stays.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use fred::clients::Pool;
use fred::interfaces::HashesInterface;
use protocol::campaign::Campaign;
use protocol::control::{Control, Fleet, State, POLL};

use crate::setup::registry::Registrar;

/// What this process last read of one campaign's control hash.
#[derive(Debug, Default)]
pub struct LiveControl {
    state: AtomicU8,
    version: AtomicU64,
    /// The window's end in force, in ms (0: the file's).
    ends_at_ms: AtomicI64,
    /// Whether this process's files disagree with the published campaign.
    conflicted: AtomicBool,
    /// The hash as read and the disagreements found (for the reload check and the status).
    last: Mutex<Option<(Control, Vec<String>)>>,
}

impl LiveControl {
    /// The state in force.
    pub fn state(&self) -> State {
        State::from_index(self.state.load(Ordering::Relaxed))
    }

    /// The control version last read (0: none yet).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Relaxed)
    }

    /// The window's end moved by `extend`, in ms since the epoch, when it was.
    pub fn ends_at_ms(&self) -> Option<i64> {
        Some(self.ends_at_ms.load(Ordering::Relaxed)).filter(|ms| *ms > 0)
    }

    /// Whether this process's files disagree with the published campaign (it is then not sold
    /// here).
    pub fn conflicted(&self) -> bool {
        self.conflicted.load(Ordering::Relaxed)
    }

    /// The hash as last read and what disagreed then.
    pub fn last(&self) -> Option<(Control, Vec<String>)> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Takes a hash read for `campaign`, this process's file, under contract `mine`.
    pub fn update(&self, read: Control, campaign: &Campaign, mine: &Fleet) {
        let found: Vec<String> = read.disagreements(campaign, mine).into_iter().map(|d| d.message).collect();
        let was = (self.state(), self.conflicted());
        self.state.store(read.state.index(), Ordering::Relaxed);
        self.version.store(read.version, Ordering::Relaxed);
        let end = read.ends_at.map_or(0, |_| read.ends_at(campaign).timestamp_millis());
        self.ends_at_ms.store(end, Ordering::Relaxed);
        self.conflicted.store(!found.is_empty(), Ordering::Relaxed);
        if was.0 != read.state {
            tracing::info!(campaign = %campaign.id, state = read.state.as_str(), version = read.version, "campaign state changed");
        }
        if !found.is_empty() && !was.1 {
            tracing::error!(campaign = %campaign.id, disagreements = ?found, "not selling: this gateway's files disagree with the published campaign");
        }
        *self.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((read, found));
    }
}

/// Every campaign's [`LiveControl`], kept across reloads.
#[derive(Debug, Default)]
pub struct Controls {
    by_campaign: RwLock<HashMap<String, Arc<LiveControl>>>,
}

impl Controls {
    /// The control of `campaign`, created (open, nothing read) on first use.
    pub fn get(&self, campaign: &str) -> Arc<LiveControl> {
        if let Some(c) = self.by_campaign.read().unwrap_or_else(|e| e.into_inner()).get(campaign) {
            return Arc::clone(c);
        }
        let mut map = self.by_campaign.write().unwrap_or_else(|e| e.into_inner());
        Arc::clone(map.entry(campaign.to_string()).or_default())
    }

    /// The hash last read for `campaign`, if one was.
    pub fn last(&self, campaign: &str) -> Option<Control> {
        let map = self.by_campaign.read().unwrap_or_else(|e| e.into_inner());
        map.get(campaign).and_then(|c| c.last()).map(|(read, _)| read)
    }
}

/// Reads every served campaign's control hash every [`POLL`], forever.
pub async fn run(redis: Pool, registrar: Arc<Registrar>) {
    let mut tick = tokio::time::interval(POLL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tick.tick().await;
        match poll_once(&redis, &registrar).await {
            Ok(()) if failing => {
                tracing::info!("campaign control hashes read again");
                failing = false;
            }
            Ok(()) => {}
            Err(e) if !failing => {
                tracing::warn!(error = %e, "cannot read the campaigns' control hashes; their last state stays");
                failing = true;
            }
            Err(_) => {}
        }
    }
}

async fn poll_once(redis: &Pool, registrar: &Registrar) -> Result<(), String> {
    let registry = registrar.active();
    for (id, entry) in &registry.campaigns {
        let hash: HashMap<String, String> =
            redis.next().hgetall(protocol::keys::control_key(id)).await.map_err(|e| e.to_string())?;
        let read = Control::from_hash(&hash).map_err(|e| format!("campaign {id}: {e}"))?;
        entry.control.update(read, &entry.campaign, &registry.fleet);
    }
    Ok(())
}
