//! The access log: one line per request, like Nginx's `access_log`, written off the request
//! path.
//!
//! A request formats its line in its logging phase (one `String`) and hands it to a bounded
//! channel without waiting ([`AccessLog::log`]); one thread of its own writes the lines through
//! a buffered writer, flushing whenever the channel is empty. When the channel is full the line
//! is dropped and counted ([`LogStats::dropped`], exported as
//! `seckill_gateway_access_log_dropped_total`): a slow disk never slows an answer.
//!
//! The file is opened for appending and reopened on `SIGUSR1` ([`watch_sigusr1`]), logrotate's
//! convention: rename the file, send `SIGUSR1`, and the next lines go to a new file of the old
//! name (lines already buffered are flushed to the renamed one first).
//!
//! Text format (`format = "text"`), fields separated by one space, `-` when absent:
//!
//! ```text
//! time client "method uri protocol" status bytes request_time upstream upstream_time code request_id
//! 2026-05-01T10:00:00.123Z 203.0.113.7 "POST /seckill/demo/order?qty=1 HTTP/1.1" 202 151 0.000412 - - QUEUED 0196a3c2-...
//! ```
//!
//! - `time`: when the request was logged, RFC 3339 UTC with milliseconds;
//! - `client`: the client's address after trusted proxies (`server.trusted_proxies`, as Nginx's
//!   `real_ip`), `-` on a Unix socket;
//! - the request line as received (bytes outside printable ASCII, `"` and `\` as `\xHH`);
//! - `status`: the HTTP status sent (`0` when no answer could be written);
//! - `bytes`: body bytes sent to the client (Nginx's `$body_bytes_sent`);
//! - `request_time`: seconds, to the microsecond, from the request's header to the log line;
//! - `upstream`: the address a proxied request went to; `upstream_time`: seconds from picking it
//!   to its response header (Nginx's `$upstream_header_time`);
//! - `code`: the answer code the gateway gave (`QUEUED`, `SOLD_OUT`, …; `-` for a proxied answer);
//! - `request_id`: the id in the answer's JSON, the reservation record and the order row
//!   (`orders.request_id`); sent upstream as `X-Request-Id` on proxied requests.
//!
//! JSON lines (`format = "json"`): one object per line with the same fields by those names
//! (`request` split into `method`, `uri` and `protocol`; absent values are `null`; times are
//! numbers of seconds).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use protocol::codes::Code;

use crate::conf::{AccessLogConf, LogFormat, LogOutput};

/// Counters of the access log since start.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Lines written.
    pub written: AtomicU64,
    /// Lines dropped because the writer's queue was full.
    pub dropped: AtomicU64,
}

/// One request, as its access line tells it.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// When it was logged.
    pub time: DateTime<Utc>,
    /// The client after trusted proxies.
    pub client: Option<IpAddr>,
    /// Request method.
    pub method: &'a str,
    /// Path and query, as received.
    pub uri: &'a str,
    /// `HTTP/1.1`, `HTTP/2.0`, …
    pub protocol: &'a str,
    /// Status sent (0: none).
    pub status: u16,
    /// Body bytes sent.
    pub bytes: usize,
    /// From the request's header to the log line.
    pub request_time: Duration,
    /// The upstream a proxied request went to.
    pub upstream: Option<SocketAddr>,
    /// From picking the upstream to its response header.
    pub upstream_time: Option<Duration>,
    /// The gateway's answer code.
    pub code: Option<Code>,
    /// The request id.
    pub request_id: &'a str,
}

/// Appends `s`, escaping `"`, `\` and bytes outside printable ASCII as `\xHH` (as Nginx does).
fn push_escaped(out: &mut String, s: &str) {
    for b in s.bytes() {
        if (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\' {
            out.push(b as char);
        } else {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
}

/// The text line of `e` (without the newline).
pub fn text_line(e: &Entry<'_>) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(160 + e.uri.len());
    let _ = write!(s, "{} ", e.time.format("%Y-%m-%dT%H:%M:%S%.3fZ"));
    match e.client {
        Some(ip) => {
            let _ = write!(s, "{ip} \"");
        }
        None => s.push_str("- \""),
    }
    push_escaped(&mut s, e.method);
    s.push(' ');
    push_escaped(&mut s, e.uri);
    s.push(' ');
    push_escaped(&mut s, e.protocol);
    let _ = write!(s, "\" {} {} {:.6} ", e.status, e.bytes, e.request_time.as_secs_f64());
    match e.upstream {
        Some(a) => {
            let _ = write!(s, "{a} ");
        }
        None => s.push_str("- "),
    }
    match e.upstream_time {
        Some(t) => {
            let _ = write!(s, "{:.6} ", t.as_secs_f64());
        }
        None => s.push_str("- "),
    }
    s.push_str(e.code.map_or("-", Code::as_str));
    s.push(' ');
    if e.request_id.is_empty() {
        s.push('-');
    } else {
        push_escaped(&mut s, e.request_id);
    }
    s
}

/// The JSON line of `e` (without the newline).
pub fn json_line(e: &Entry<'_>) -> String {
    serde_json::json!({
        "time": e.time.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
        "client": e.client.map(|ip| ip.to_string()),
        "method": e.method,
        "uri": e.uri,
        "protocol": e.protocol,
        "status": e.status,
        "bytes": e.bytes,
        "request_time": e.request_time.as_secs_f64(),
        "upstream": e.upstream.map(|a| a.to_string()),
        "upstream_time": e.upstream_time.map(|t| t.as_secs_f64()),
        "code": e.code.map(Code::as_str),
        "request_id": (!e.request_id.is_empty()).then_some(e.request_id),
    })
    .to_string()
}

enum Msg {
    Line(String),
    Reopen,
}

/// The handle requests log through; cheap to clone.
#[derive(Clone)]
pub struct AccessLog {
    tx: SyncSender<Msg>,
    format: LogFormat,
    stats: Arc<LogStats>,
    reopen: Arc<AtomicBool>,
}

impl std::fmt::Debug for AccessLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AccessLog").field("format", &self.format).finish_non_exhaustive()
    }
}

impl AccessLog {
    /// Opens the output (an unwritable file is an error now, not at the first request) and
    /// starts the writer thread.
    pub fn start(conf: &AccessLogConf) -> io::Result<Self> {
        let out = Output::open(&conf.output)?;
        let (tx, rx) = sync_channel(conf.queue);
        let stats = Arc::new(LogStats::default());
        let reopen = Arc::new(AtomicBool::new(false));
        let (s, r) = (Arc::clone(&stats), Arc::clone(&reopen));
        std::thread::Builder::new()
            .name("gw-access-log".into())
            .spawn(move || write_lines(rx, out, &s, &r))?;
        Ok(Self { tx, format: conf.format, stats, reopen })
    }

    /// Formats `e` and hands it to the writer without waiting; a full queue drops it (counted).
    pub fn log(&self, e: &Entry<'_>) {
        let line = match self.format {
            LogFormat::Text => text_line(e),
            LogFormat::Json => json_line(e),
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = self.tx.try_send(Msg::Line(line))
        {
            self.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks the writer to reopen its file (after a rename); lines already queued go first.
    pub fn reopen(&self) {
        self.reopen.store(true, Ordering::Release);
        // Wakes an idle writer; when the queue is full the writer is busy and sees the flag.
        let _ = self.tx.try_send(Msg::Reopen);
    }

    /// The counters.
    pub fn stats(&self) -> Arc<LogStats> {
        Arc::clone(&self.stats)
    }
}

/// The writer's output.
struct Output {
    target: LogOutput,
    writer: BufWriter<Box<dyn Write + Send>>,
}

impl Output {
    fn open(target: &LogOutput) -> io::Result<Self> {
        let inner: Box<dyn Write + Send> = match target {
            LogOutput::Stdout => Box::new(io::stdout()),
            LogOutput::File(path) => Box::new(open_append(path)?),
        };
        Ok(Self { target: target.clone(), writer: BufWriter::with_capacity(64 * 1024, inner) })
    }
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| io::Error::new(e.kind(), format!("access log {}: {e}", path.display())))
}

/// Writes one message's line; a failed write drops the line (counted), logged once until a
/// reopen.
fn write_msg(out: &mut Output, msg: Msg, stats: &LogStats, failed: &mut bool) {
    let Msg::Line(line) = msg else { return };
    match out.writer.write_all(line.as_bytes()).and_then(|()| out.writer.write_all(b"\n")) {
        Ok(()) => {
            stats.written.fetch_add(1, Ordering::Relaxed);
        }
        Err(e) => {
            stats.dropped.fetch_add(1, Ordering::Relaxed);
            if !*failed {
                tracing::error!(error = %e, "access log write failed; lines are dropped until it works");
                *failed = true;
            }
        }
    }
}

/// The writer thread: until every handle is gone.
fn write_lines(rx: Receiver<Msg>, mut out: Output, stats: &LogStats, reopen: &AtomicBool) {
    let mut failed = false;
    while let Ok(first) = rx.recv() {
        write_msg(&mut out, first, stats, &mut failed);
        // Everything queued meanwhile, then one flush: one write per burst, not per line.
        loop {
            match rx.try_recv() {
                Ok(msg) => write_msg(&mut out, msg, stats, &mut failed),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    let _ = out.writer.flush();
                    return;
                }
            }
        }
        let _ = out.writer.flush();
        if reopen.swap(false, Ordering::AcqRel) && matches!(out.target, LogOutput::File(_)) {
            match Output::open(&out.target) {
                Ok(new) => {
                    out = new;
                    failed = false;
                    tracing::info!(output = ?out.target, "access log reopened");
                }
                Err(e) => tracing::error!(error = %e, "access log not reopened; writing to the old file"),
            }
        }
    }
    let _ = out.writer.flush();
}

/// Reopens the access log on every `SIGUSR1`, forever.
pub async fn watch_sigusr1(log: AccessLog) {
    use tokio::signal::unix::{signal, SignalKind};
    let mut usr1 = match signal(SignalKind::user_defined1()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "cannot listen for SIGUSR1: the access log is never reopened");
            return;
        }
    };
    while usr1.recv().await.is_some() {
        log.reopen();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> Entry<'static> {
        Entry {
            time: "2026-05-01T10:00:00.123456Z".parse().unwrap(),
            client: Some("203.0.113.7".parse().unwrap()),
            method: "POST",
            uri: "/seckill/demo/order?qty=1",
            protocol: "HTTP/1.1",
            status: 202,
            bytes: 151,
            request_time: Duration::from_micros(412),
            upstream: None,
            upstream_time: None,
            code: Some(Code::Queued),
            request_id: "0196a3c2-0000-7000-8000-000000000001",
        }
    }

    #[test]
    fn a_text_line_has_every_field_in_order() {
        assert_eq!(
            text_line(&entry()),
            "2026-05-01T10:00:00.123Z 203.0.113.7 \"POST /seckill/demo/order?qty=1 HTTP/1.1\" 202 151 \
             0.000412 - - QUEUED 0196a3c2-0000-7000-8000-000000000001"
        );
        let proxied = Entry {
            client: None,
            uri: "/a\"b\\c\u{1}é",
            upstream: Some("127.0.0.1:9000".parse().unwrap()),
            upstream_time: Some(Duration::from_millis(3)),
            code: None,
            request_id: "",
            ..entry()
        };
        assert_eq!(
            text_line(&proxied),
            "2026-05-01T10:00:00.123Z - \"POST /a\\x22b\\x5Cc\\x01\\xC3\\xA9 HTTP/1.1\" 202 151 0.000412 \
             127.0.0.1:9000 0.003000 - -"
        );
    }

    #[test]
    fn a_json_line_has_the_same_fields_by_name() {
        let v: serde_json::Value = serde_json::from_str(&json_line(&entry())).unwrap();
        assert_eq!(v["time"], "2026-05-01T10:00:00.123Z");
        assert_eq!(v["client"], "203.0.113.7");
        assert_eq!((v["method"].as_str(), v["status"].as_u64()), (Some("POST"), Some(202)));
        assert_eq!((v["code"].as_str(), v["upstream"].is_null()), (Some("QUEUED"), true));
        assert_eq!(v["request_time"].as_f64(), Some(0.000412));
        assert_eq!(v["request_id"], "0196a3c2-0000-7000-8000-000000000001");
    }

    #[test]
    fn lines_reach_the_file_and_a_reopen_follows_a_rename() {
        let dir = std::env::temp_dir().join(format!("gw-alog-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("access.log");
        let conf =
            AccessLogConf { output: LogOutput::File(file.clone()), format: LogFormat::Text, queue: 16 };
        let log = AccessLog::start(&conf).unwrap();
        // Polls `f` every 20 ms for at most 5 s.
        let wait = |f: &dyn Fn() -> bool| {
            (0..250).any(|_| {
                f() || {
                    std::thread::sleep(Duration::from_millis(20));
                    false
                }
            })
        };
        let lines = |path: &Path| std::fs::read_to_string(path).unwrap_or_default().lines().count();
        log.log(&entry());
        assert!(wait(&|| lines(&file) == 1), "the line is written");
        std::fs::rename(&file, dir.join("access.log.1")).unwrap();
        log.reopen();
        assert!(wait(&|| file.exists()), "reopened under the old name");
        log.log(&Entry { request_id: "after", ..entry() });
        assert!(wait(&|| lines(&file) == 1));
        assert!(std::fs::read_to_string(&file).unwrap().ends_with(" after\n"));
        assert_eq!(std::fs::read_to_string(dir.join("access.log.1")).unwrap().lines().count(), 1);
        assert_eq!(log.stats().written.load(Ordering::Relaxed), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
