//! Listens on [`REPLENISH_CHANNEL`]: "stock came back for campaign X" clears this process's
//! sold-out flag for X at once (the flag's TTL is the backstop when a message is missed).

use std::sync::Arc;
use std::time::Duration;

use fred::prelude::*;
use protocol::keys::REPLENISH_CHANNEL;

use crate::setup::conf::RedisConf;
use crate::setup::registry::Registrar;

/// Subscribes to the Redis of `redis` and clears flags, forever; reconnects (and resubscribes)
/// after errors.
pub async fn run(redis: RedisConf, registrar: Arc<Registrar>) {
    loop {
        if let Err(e) = subscribe_once(&redis, &registrar).await {
            tracing::warn!(error = %e, "replenish subscription failed; retrying in 1s");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

async fn subscribe_once(redis: &RedisConf, registrar: &Registrar) -> Result<(), Error> {
    let config = redis.config()?;
    let subscriber = Builder::from_config(config)
        .with_connection_config(|c| c.connection_timeout = Duration::from_secs(2))
        .set_policy(ReconnectPolicy::new_constant(0, 500))
        .build_subscriber_client()?;
    let mut messages = subscriber.message_rx();
    let mut reconnects = subscriber.reconnect_rx();
    subscriber.init().await?;
    let _resubscribe = subscriber.manage_subscriptions();
    subscriber.subscribe(REPLENISH_CHANNEL).await?;
    tracing::info!(channel = REPLENISH_CHANNEL, "subscribed to replenish messages");
    loop {
        tokio::select! {
            msg = messages.recv() => match msg {
                Ok(msg) => {
                    let campaign = msg.value.as_string().unwrap_or_default();
                    let was_set = registrar.sold_out.clear(&campaign);
                    tracing::info!(campaign, was_set, "replenish message: sold-out flag cleared");
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(missed = n, "replenish messages lagged: clearing every flag");
                    registrar.sold_out.clear_all();
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                    return Err(Error::new(ErrorKind::Canceled, "subscriber closed"));
                }
            },
            Ok(_) = reconnects.recv() => {
                // Messages sent while we were disconnected are lost: forget every flag.
                tracing::info!("replenish subscriber reconnected: clearing every flag");
                registrar.sold_out.clear_all();
            }
        }
    }
}
