//! The operated state of each campaign, read from its control hash in Redis every
//! [`protocol::control::POLL`] ([`run`]): `order-writer campaign pause|resume|queue-only|close|
//! extend|end` reach every gateway this way, and a campaign whose files disagree with what was
//! published (a frozen field, the signing key, the topic) is not sold here until they agree.
//!
//! What is read goes into each campaign's [`crate::checks::control::LiveControl`] (kept across
//! reloads, like its sold-out flag). When Redis does not answer, the last state read stays.

use std::collections::HashMap;
use std::sync::Arc;

use fred::clients::Pool;
use fred::interfaces::HashesInterface;
use protocol::control::{Control, POLL};

use crate::setup::registry::Registrar;

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
