//! The `[shutdown]` table of the server file: graceful shutdown and the zero-downtime upgrade
//! (Pingora's: `SIGTERM` stops accepting and drains, `SIGQUIT` first hands the listening sockets
//! to a new process started with `--upgrade`, which takes them over the upgrade socket).
//!
//! Pingora stops accepting at once, then lets the requests in flight run for its grace period
//! (always the whole period), then stops its runtimes, cancelling what is left: so the grace
//! period is the drain bound, `drain_secs` here. Before it, `linger_secs`: how long the gateway
//! keeps serving after `SIGTERM` while it says it is leaving (`crate::shutdown`).

use std::path::PathBuf;
use std::time::Duration;

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{Checker, S};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShutdown {
    drain_secs: Option<S<i64>>,
    linger_secs: Option<S<i64>>,
    upgrade_sock: Option<S<String>>,
}

/// Graceful shutdown and upgrade settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownConf {
    /// After `SIGTERM` (or the upgrade's hand-over), how long requests in flight have to
    /// finish; the process exits after it (Pingora waits the whole period).
    pub drain: Duration,
    /// After `SIGTERM` and before the drain, how long the gateway keeps accepting and serving
    /// while `/readyz` answers 503 and every HTTP/1 answer closes its connection: the time a balancer
    /// needs to stop sending to it (its readiness checks' interval times their fall count).
    pub linger: Duration,
    /// The Unix socket over which an old process hands its listening sockets to a new one.
    pub upgrade_sock: PathBuf,
}

/// The default upgrade socket.
pub const DEFAULT_UPGRADE_SOCK: &str = "/tmp/seckill-gateway-upgrade.sock";

/// Validates the table; an absent value keeps its default (drain 5 s, no linger,
/// [`DEFAULT_UPGRADE_SOCK`]).
pub(super) fn check(c: &Checker<'_>, raw: &RawShutdown) -> Result<ShutdownConf, ConfError> {
    let upgrade_sock = match &raw.upgrade_sock {
        Some(p) if p.get_ref().is_empty() || !p.get_ref().starts_with('/') => {
            return Err(c.err(p.span(), "shutdown.upgrade_sock", "must be an absolute path"));
        }
        Some(p) => PathBuf::from(p.get_ref()),
        None => PathBuf::from(DEFAULT_UPGRADE_SOCK),
    };
    Ok(ShutdownConf {
        drain: match &raw.drain_secs {
            Some(v) => Duration::from_secs(c.int(v, "shutdown.drain_secs", 0, 300)? as u64),
            None => Duration::from_secs(5),
        },
        linger: match &raw.linger_secs {
            Some(v) => Duration::from_secs(c.int(v, "shutdown.linger_secs", 0, 120)? as u64),
            None => Duration::ZERO,
        },
        upgrade_sock,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{expect_err, parse, GOOD};
    use std::time::Duration;

    #[test]
    fn shutdown_defaults_and_bounds() {
        let s = parse(GOOD).unwrap().shutdown;
        assert_eq!((s.drain, s.linger), (Duration::from_secs(5), Duration::ZERO));
        let with = |lines: &str| format!("{GOOD}\n[shutdown]\n{lines}\n");
        let s = parse(&with("drain_secs = 3\nupgrade_sock = \"/run/gw.sock\"")).unwrap().shutdown;
        assert_eq!((s.drain, s.upgrade_sock.to_str()), (Duration::from_secs(3), Some("/run/gw.sock")));
        let line = GOOD.lines().count() + 3;
        expect_err(&with("drain_secs = 301"), line, "shutdown.drain_secs", "between 0 and 300");
        expect_err(&with("upgrade_sock = \"gw.sock\""), line, "shutdown.upgrade_sock", "absolute");
        assert_eq!(parse(&with("linger_secs = 4")).unwrap().shutdown.linger, Duration::from_secs(4));
        expect_err(&with("linger_secs = 121"), line, "shutdown.linger_secs", "between 0 and 120");
        expect_err(&with("linger_secs = -1"), line, "shutdown.linger_secs", "between 0 and 120");
    }
}
