//! The `[shutdown]` table of the server file: graceful shutdown and the zero-downtime upgrade
//! (Pingora's: `SIGTERM` drains, `SIGQUIT` hands the listening sockets to a new process started
//! with `--upgrade`, which takes them over the upgrade socket).

use std::path::PathBuf;
use std::time::Duration;

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{Checker, S};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShutdown {
    grace_period_secs: Option<S<i64>>,
    drain_timeout_secs: Option<S<i64>>,
    upgrade_sock: Option<S<String>>,
}

/// Graceful shutdown and upgrade settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownConf {
    /// After `SIGTERM` / `SIGQUIT`, how long the listeners still accept (a new process started
    /// with `--upgrade` already accepts on the same sockets meanwhile).
    pub grace_period: Duration,
    /// Then how long in-flight requests have to finish before the process exits.
    pub drain_timeout: Duration,
    /// The Unix socket over which an old process hands its listening sockets to a new one.
    pub upgrade_sock: PathBuf,
}

/// The default upgrade socket.
pub const DEFAULT_UPGRADE_SOCK: &str = "/tmp/seckill-gateway-upgrade.sock";

/// Validates the table; an absent value keeps its default (1 s, 10 s, [`DEFAULT_UPGRADE_SOCK`]).
pub(super) fn check(c: &Checker<'_>, raw: &RawShutdown) -> Result<ShutdownConf, ConfError> {
    let secs = |v: &Option<S<i64>>, field: &str, default: u64| match v {
        Some(v) => c.int(v, field, 0, 300).map(|n| Duration::from_secs(n as u64)),
        None => Ok(Duration::from_secs(default)),
    };
    let upgrade_sock = match &raw.upgrade_sock {
        Some(p) if p.get_ref().is_empty() || !p.get_ref().starts_with('/') => {
            return Err(c.err(p.span(), "shutdown.upgrade_sock", "must be an absolute path"));
        }
        Some(p) => PathBuf::from(p.get_ref()),
        None => PathBuf::from(DEFAULT_UPGRADE_SOCK),
    };
    Ok(ShutdownConf {
        grace_period: secs(&raw.grace_period_secs, "shutdown.grace_period_secs", 1)?,
        drain_timeout: secs(&raw.drain_timeout_secs, "shutdown.drain_timeout_secs", 10)?,
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
        assert_eq!((s.grace_period, s.drain_timeout), (Duration::from_secs(1), Duration::from_secs(10)));
        let with = |lines: &str| format!("{GOOD}\n[shutdown]\n{lines}\n");
        let s = parse(&with("drain_timeout_secs = 3\nupgrade_sock = \"/run/gw.sock\"")).unwrap().shutdown;
        assert_eq!(
            (s.drain_timeout, s.upgrade_sock.to_str()),
            (Duration::from_secs(3), Some("/run/gw.sock"))
        );
        let line = GOOD.lines().count() + 3;
        expect_err(
            &with("drain_timeout_secs = 301"),
            line,
            "shutdown.drain_timeout_secs",
            "between 0 and 300",
        );
        expect_err(&with("upgrade_sock = \"gw.sock\""), line, "shutdown.upgrade_sock", "absolute");
    }
}
