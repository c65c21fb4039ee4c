//! The sale's Redis pool, with its safety settings: fail fast (one attempt per command, the
//! reservation's command timeout, bounded connection and internal timeouts), reconnect in the
//! background forever, and on a cluster follow no redirection (`protocol::cluster`: a script
//! refused with `MOVED`, `ASK` or `TRYAGAIN` did not run and is sent again by the scripts' own
//! retry).

use std::time::Duration;

use fred::prelude::*;
use protocol::scripts::Scripts;

use crate::reserve;
use crate::setup::conf::RedisConf;

/// Builds the pool and loads the scripts on it. Starting while Redis is down is allowed: orders
/// answer `SERVICE_DEGRADED` until it is back, and the scripts load on first use. A
/// `redis-cluster://` URL makes it a cluster client: every command goes to the master of its
/// first key's slot, and a script is loaded on every master.
pub async fn connect(conf: &RedisConf, scripts: &Scripts) -> Result<Pool, Error> {
    let config = conf.config()?;
    let url = protocol::secret::redact_url(&conf.url);
    let clustered = config.server.is_clustered();
    let pool = Builder::from_config(config)
        .with_connection_config(|c| {
            c.connection_timeout = Duration::from_millis(500);
            c.internal_command_timeout = Duration::from_secs(1);
            c.max_command_attempts = 1;
            if clustered {
                c.max_redirections = protocol::cluster::MAX_REDIRECTIONS;
            }
            c.tcp = TcpConfig { nodelay: Some(true), ..Default::default() };
        })
        .with_performance_config(|p| p.default_command_timeout = reserve::command_timeout(conf.timeout))
        .set_policy(ReconnectPolicy::new_constant(0, 200))
        .build_pool(conf.pool_size)?;
    pool.connect();
    match tokio::time::timeout(Duration::from_secs(2), pool.wait_for_connect()).await {
        Ok(Ok(())) => {
            match tokio::time::timeout(Duration::from_secs(2), scripts.preload(pool.next())).await {
                Ok(Ok(())) => tracing::info!(%url, "redis connected, scripts loaded"),
                _ => tracing::warn!("could not preload the scripts; they load on first use"),
            }
        }
        _ => {
            tracing::warn!(%url, "redis is not reachable yet: orders answer SERVICE_DEGRADED until it is")
        }
    }
    Ok(pool)
}
