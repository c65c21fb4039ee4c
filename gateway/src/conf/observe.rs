//! The `[admin]` and `[access_log]` tables of the server file: where `/metrics`, `/healthz` and
//! `/readyz` are served, and where one line per request is written. Both are off when their
//! table is absent; changing either needs a restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{spanned, Checker, S};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    listen: S<String>,
    token: Option<S<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAccessLog {
    output: S<String>,
    #[serde(default = "d_format")]
    format: S<String>,
    #[serde(default = "d_queue")]
    queue: S<i64>,
}

fn d_format() -> S<String> {
    spanned("text".into())
}
fn d_queue() -> S<i64> {
    spanned(65_536)
}

/// The admin listener: Prometheus `/metrics`, `/healthz` (alive) and `/readyz` (Redis reachable);
/// with a token, `GET /campaigns` and `POST /reload` for the fleet's commands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AdminConf {
    /// Its address; keep it off the public interface (loopback or a private network).
    pub listen: SocketAddr,
    /// The bearer token `/campaigns` and `/reload` require (by reference); without one they are
    /// off.
    pub token: Option<protocol::secret::Password>,
}

/// Where access lines go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogOutput {
    /// The process's standard output.
    Stdout,
    /// A file, appended to, reopened on `SIGUSR1` (after logrotate renamed it).
    File(PathBuf),
}

/// The shape of an access line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One space-separated line, like Nginx's `log_format` (documented in `access_log`).
    Text,
    /// One JSON object per line, the same fields by name.
    Json,
}

/// The access log: one line per request, written by a thread of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogConf {
    /// Where lines go.
    pub output: LogOutput,
    /// Text or JSON lines.
    pub format: LogFormat,
    /// Lines waiting for the writer at most; past it a line is dropped (and counted).
    pub queue: usize,
}

/// Validates `[admin]`.
pub(super) fn admin(
    c: &Checker<'_>,
    raw: &Option<RawAdmin>,
    base: &Path,
) -> Result<Option<AdminConf>, ConfError> {
    let Some(a) = raw else { return Ok(None) };
    let token = match &a.token {
        None => None,
        Some(t) => {
            let token = protocol::secret::Password::read(t.get_ref(), base)
                .map_err(|e| c.err(t.span(), "admin.token", e.to_string()))?;
            if token.expose().len() < 16 {
                return Err(c.err(t.span(), "admin.token", "must be at least 16 characters".to_string()));
            }
            Some(token)
        }
    };
    Ok(Some(AdminConf { listen: c.addr(&a.listen, "admin.listen")?, token }))
}

/// Validates `[access_log]`; a relative file is taken from the server file's folder.
pub(super) fn access_log(
    c: &Checker<'_>,
    raw: &Option<RawAccessLog>,
    base: &Path,
) -> Result<Option<AccessLogConf>, ConfError> {
    let Some(a) = raw else { return Ok(None) };
    let output = match a.output.get_ref().as_str() {
        "" => return Err(c.err(a.output.span(), "access_log.output", "must be \"stdout\" or a file path")),
        "stdout" => LogOutput::Stdout,
        path => LogOutput::File(base.join(path)),
    };
    let format = match a.format.get_ref().as_str() {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            return Err(c.err(
                a.format.span(),
                "access_log.format",
                format!("must be \"text\" or \"json\", found {other:?}"),
            ))
        }
    };
    let queue = c.int(&a.queue, "access_log.queue", 16, 10_000_000)?;
    Ok(Some(AccessLogConf { output, format, queue }))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::tests::{expect_err, parse, GOOD};
    use super::*;

    #[test]
    fn admin_and_access_log_are_off_unless_asked_and_checked_when_asked() {
        let off = parse(GOOD).unwrap();
        assert_eq!((off.admin, off.access_log), (None, None));
        let on = parse(&format!(
            "{GOOD}\n[admin]\nlisten = \"127.0.0.1:9180\"\n\n[access_log]\noutput = \"logs/access.log\"\nformat = \"json\"\n"
        ))
        .unwrap();
        assert_eq!(on.admin.unwrap().listen.port(), 9180);
        let log = on.access_log.unwrap();
        assert_eq!(log.output, LogOutput::File(Path::new("conf/logs/access.log").into()));
        assert_eq!((log.format, log.queue), (LogFormat::Json, 65_536));
        let stdout = parse(&format!("{GOOD}\n[access_log]\noutput = \"stdout\"\n")).unwrap();
        assert_eq!(stdout.access_log.unwrap().format, LogFormat::Text, "text by default");

        // After GOOD and one blank line, the table starts on line `at(2)`.
        let at = |k: usize| GOOD.lines().count() + k;
        expect_err(&format!("{GOOD}\n[admin]\nlisten = \"localhost:9\"\n"), at(3), "admin.listen", "IP:port");
        expect_err(&format!("{GOOD}\n[admin]\nlisen = \"127.0.0.1:9\"\n"), at(3), "lisen", "unknown field");
        let log = |body: &str| format!("{GOOD}\n[access_log]\noutput = \"stdout\"\n{body}\n");
        expect_err(&log("format = \"combined\""), at(4), "access_log.format", "\"text\" or \"json\"");
        expect_err(&log("queue = 1"), at(4), "access_log.queue", "between 16 and");
        expect_err(&format!("{GOOD}\n[access_log]\noutput = \"\"\n"), at(3), "access_log.output", "stdout");
    }
}
