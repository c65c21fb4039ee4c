//! The `[admin]` and `[access_log]` tables of the server file: where `/metrics`, `/healthz` and
//! `/readyz` are served, and where one line per request is written. Both are off when their
//! table is absent; changing either needs a restart.

use std::net::SocketAddr;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use protocol::conf::ConfError;
use serde::Deserialize;

use super::{spanned, Checker, S};
use crate::access_log::{Escape, LogTemplate};

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
    format: Option<S<String>>,
    template: Option<S<String>>,
    escape: Option<S<String>>,
    #[serde(default = "d_queue")]
    queue: S<i64>,
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogFormat {
    /// Nginx's variables in a template (`combined`, the default, is one).
    Template(Arc<LogTemplate>),
    /// The gateway's own space-separated line (documented in `access_log`).
    Text,
    /// The gateway's own JSON object per line, the same fields by name.
    Json,
}

/// The access log: one line per request, written by a thread of its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogConf {
    /// Where lines go.
    pub output: LogOutput,
    /// Nginx's `combined`, a template, or the gateway's text or JSON lines.
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
    let format = log_format(c, a)?;
    let queue = c.int(&a.queue, "access_log.queue", 16, 10_000_000)?;
    Ok(Some(AccessLogConf { output, format, queue }))
}

/// `format` (`combined` by default, `text`, `json`) or `template` with its `escape`.
fn log_format(c: &Checker<'_>, a: &RawAccessLog) -> Result<LogFormat, ConfError> {
    let escape = match &a.escape {
        None => Escape::Default,
        Some(e) if a.template.is_none() => {
            return Err(c.err(e.span(), "access_log.escape", "applies to a `template` only"))
        }
        Some(e) => Escape::parse(e.get_ref()).ok_or_else(|| {
            c.err(
                e.span(),
                "access_log.escape",
                format!("must be default, json or none, found {:?}", e.get_ref()),
            )
        })?,
    };
    if let Some(t) = &a.template {
        if let Some(f) = &a.format {
            return Err(c.err(f.span(), "access_log.format", "give `format` or `template`, not both"));
        }
        let parsed = LogTemplate::parse(t.get_ref(), escape).map_err(|e| {
            c.err(within(c.text(), t.span(), t.get_ref(), e.offset), "access_log.template", e.message)
        })?;
        return Ok(LogFormat::Template(Arc::new(parsed)));
    }
    match a.format.as_ref().map_or("combined", |f| f.get_ref().as_str()) {
        "combined" => Ok(LogFormat::Template(Arc::new(LogTemplate::combined()))),
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        other => Err(c.err(
            a.format.as_ref().map_or(0..0, |f| f.span()),
            "access_log.format",
            format!("must be \"combined\", \"text\" or \"json\" (or give a `template`), found {other:?}"),
        )),
    }
}

/// The place of byte `offset` of a string value written at `span`: exact when the value is
/// written on one line without escapes (what a template usually is), else the value's start.
fn within(text: &str, span: Range<usize>, value: &str, offset: usize) -> Range<usize> {
    let inner = span.start + 1..span.end.saturating_sub(1);
    if text.get(inner) == Some(value) {
        let at = span.start + 1 + offset;
        at..at + 1
    } else {
        span
    }
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
        let combined = LogFormat::Template(Arc::new(LogTemplate::combined()));
        assert_eq!(stdout.access_log.unwrap().format, combined, "Nginx's combined by default");
        let template = |body: &str| {
            let text = format!("{GOOD}\n[access_log]\noutput = \"stdout\"\n{body}\n");
            parse(&text).map(|c| c.access_log.unwrap().format)
        };
        let json = LogTemplate::parse("{\"s\":\"$status\"}", Escape::Json).unwrap();
        assert_eq!(
            template("template = '{\"s\":\"$status\"}'\nescape = \"json\"").unwrap(),
            LogFormat::Template(Arc::new(json))
        );
        assert_eq!(template("format = \"text\"").unwrap(), LogFormat::Text);

        // After GOOD and one blank line, the table starts on line `at(2)`.
        let at = |k: usize| GOOD.lines().count() + k;
        expect_err(&format!("{GOOD}\n[admin]\nlisten = \"localhost:9\"\n"), at(3), "admin.listen", "IP:port");
        expect_err(&format!("{GOOD}\n[admin]\nlisen = \"127.0.0.1:9\"\n"), at(3), "lisen", "unknown field");
        let log = |body: &str| format!("{GOOD}\n[access_log]\noutput = \"stdout\"\n{body}\n");
        expect_err(
            &log("format = \"main\""),
            at(4),
            "access_log.format",
            "\"combined\", \"text\" or \"json\"",
        );
        expect_err(&log("template = \"$status\"\nformat = \"text\""), at(5), "access_log.format", "not both");
        expect_err(&log("escape = \"json\""), at(4), "access_log.escape", "a `template` only");
        expect_err(
            &log("template = \"$a\"\nescape = \"xml\""),
            at(5),
            "access_log.escape",
            "default, json or none",
        );
        // The column of the unknown variable itself: `template = '$status $nope'` has it at 21.
        let err = parse(&log("template = '$status $nope'")).unwrap_err().to_string();
        assert!(err.contains(&format!(":{}:21:", at(4))) && err.contains("access_log.template"), "{err}");
        assert!(err.contains("unknown variable $nope"), "{err}");
        expect_err(&log("queue = 1"), at(4), "access_log.queue", "between 16 and");
        expect_err(&format!("{GOOD}\n[access_log]\noutput = \"\"\n"), at(3), "access_log.output", "stdout");
    }
}
