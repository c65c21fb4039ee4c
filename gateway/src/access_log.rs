//! The access log: one line per request, like Nginx's `access_log`, written off the request
//! path.
//!
//! A request formats its line in its logging phase (one `String`) and pushes it onto a bounded
//! queue under a short lock, with no I/O and no wake-up ([`AccessLog::log`]); one thread of its
//! own takes the queued lines every [`FLUSH_INTERVAL`] (swapping buffers) and writes them through
//! a buffered writer, one flush per turn. When the queue is full the line is dropped and counted ([`LogStats::dropped`], exported as
//! `seckill_gateway_access_log_dropped_total`): a slow disk never slows an answer.
//!
//! The file is opened for appending and reopened on `SIGUSR1` ([`watch_sigusr1`]), logrotate's
//! convention: rename the file, send `SIGUSR1`, and the next lines go to a new file of the old
//! name (lines already buffered are flushed to the renamed one first).
//!
//! Nginx's `combined` (`format = "combined"`, the default) or a template of Nginx's variables
//! (`template = '...'`, with `escape`; [`format`]), rendered straight into the line:
//!
//! ```text
//! 203.0.113.7 - - [01/May/2026:10:00:00 +0000] "GET /a?b=1 HTTP/1.1" 200 512 "-" "curl/8.5.0"
//! ```
//!
//! The gateway's own text format (`format = "text"`), fields separated by one space, `-` when absent:
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
//! numbers of seconds), and one more: `device`, the request's `x-device-id` header as sent (at
//! most 128 bytes, else `null`), which the campaign audit counts attempts by.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Datelike, Timelike, Utc};
use protocol::codes::Code;

use crate::conf::{AccessLogConf, LogFormat, LogOutput};

use crate::access_line::push_bytes;
pub use crate::access_line::{Entry, Escape, LogTemplate, TemplateError, COMBINED};

/// Counters of the access log since start.
#[derive(Debug, Default)]
pub struct LogStats {
    /// Lines written.
    pub written: AtomicU64,
    /// Lines dropped because the writer's queue was full.
    pub dropped: AtomicU64,
}

/// Appends `s`, escaping `"`, `\` and bytes outside printable ASCII as `\xHH` (as Nginx does).
fn push_escaped(out: &mut String, s: &str) {
    push_bytes(out, s.as_bytes(), Escape::Default);
}

/// Appends `t` as RFC 3339 UTC with milliseconds (`2026-05-01T10:00:00.123Z`), without
/// parsing a format string per line.
fn push_time(out: &mut String, t: DateTime<Utc>) {
    use std::fmt::Write as _;
    let _ = write!(
        out,
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z",
        t.year(),
        t.month(),
        t.day(),
        t.hour(),
        t.minute(),
        t.second(),
        t.timestamp_subsec_millis().min(999)
    );
}

/// The text line of `e` (without the newline).
pub fn text_line(e: &Entry<'_>) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(160 + e.uri.len());
    push_time(&mut s, e.time);
    s.push(' ');
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
    let mut time = String::with_capacity(24);
    push_time(&mut time, e.time);
    serde_json::json!({
        "time": time,
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
        "device": device(e),
    })
    .to_string()
}

/// The request's `x-device-id` header as sent, for the JSON line (the audit counts a campaign's
/// order attempts by device, `order-writer campaign audit --access-log`); `None` when absent,
/// not text, or longer than the gateway accepts (128 bytes).
fn device<'a>(e: &Entry<'a>) -> Option<&'a str> {
    let value = e.headers?.get(protocol::signing::DEVICE_HEADER)?.to_str().ok()?;
    (value.len() <= 128).then_some(value)
}

/// How often the writer takes the queued lines and writes them (Nginx's `flush=`): a line
/// reaches the file at most this late, and a request never wakes the writer.
pub const FLUSH_INTERVAL: Duration = Duration::from_millis(100);

/// What the requests and the writer share: the lines waiting, and the reopen flag.
struct Queue {
    lines: Mutex<Vec<String>>,
    capacity: usize,
    reopen: AtomicBool,
    stats: Arc<LogStats>,
}

/// The handle requests log through; cheap to clone.
#[derive(Clone)]
pub struct AccessLog {
    queue: Arc<Queue>,
    format: LogFormat,
    writer: std::thread::Thread,
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
        let queue = Arc::new(Queue {
            lines: Mutex::new(Vec::with_capacity(conf.queue.min(65_536))),
            capacity: conf.queue,
            reopen: AtomicBool::new(false),
            stats: Arc::new(LogStats::default()),
        });
        let q = Arc::clone(&queue);
        let writer =
            std::thread::Builder::new().name("gw-access-log".into()).spawn(move || write_lines(&q, out))?;
        Ok(Self { queue, format: conf.format.clone(), writer: writer.thread().clone() })
    }

    /// Formats `e` and queues it without waiting for any I/O (a short lock, no wake-up); a full
    /// queue drops it (counted).
    pub fn log(&self, e: &Entry<'_>) {
        let line = match &self.format {
            LogFormat::Text => text_line(e),
            LogFormat::Json => json_line(e),
            LogFormat::Template(t) => {
                let mut line = String::with_capacity(192 + e.uri.len());
                t.render(e, &mut line);
                line
            }
        };
        let mut lines = self.queue.lines.lock().unwrap_or_else(|p| p.into_inner());
        if lines.len() < self.queue.capacity {
            lines.push(line);
        } else {
            drop(lines);
            self.queue.stats.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Asks the writer to reopen its file (after a rename) now; lines already queued go to the
    /// renamed file first.
    pub fn reopen(&self) {
        self.queue.reopen.store(true, Ordering::Release);
        self.writer.unpark();
    }

    /// The counters.
    pub fn stats(&self) -> Arc<LogStats> {
        Arc::clone(&self.queue.stats)
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

/// Writes `lines`; a failed write drops the rest (counted), logged once until a reopen.
fn write_batch(out: &mut Output, lines: &mut Vec<String>, stats: &LogStats, failed: &mut bool) {
    let n = lines.len() as u64;
    let mut written = 0;
    let mut result = Ok(());
    for line in lines.drain(..) {
        if result.is_ok() {
            result = out.writer.write_all(line.as_bytes()).and_then(|()| out.writer.write_all(b"\n"));
            if result.is_ok() {
                written += 1;
            }
        }
    }
    let result = result.and_then(|()| out.writer.flush());
    stats.written.fetch_add(written, Ordering::Relaxed);
    stats.dropped.fetch_add(n - written, Ordering::Relaxed);
    if let Err(e) = result {
        if !*failed {
            tracing::error!(error = %e, "access log write failed; lines are dropped until it works");
            *failed = true;
        }
    }
}

/// The writer thread: every [`FLUSH_INTERVAL`] (or at once when asked to reopen), takes the
/// queued lines by swapping buffers and writes them; ends when every handle is gone.
fn write_lines(queue: &Arc<Queue>, mut out: Output) {
    let mut failed = false;
    let mut batch: Vec<String> = Vec::new();
    loop {
        std::thread::park_timeout(FLUSH_INTERVAL);
        std::mem::swap(&mut *queue.lines.lock().unwrap_or_else(|p| p.into_inner()), &mut batch);
        write_batch(&mut out, &mut batch, &queue.stats, &mut failed);
        if queue.reopen.swap(false, Ordering::AcqRel) && matches!(out.target, LogOutput::File(_)) {
            match Output::open(&out.target) {
                Ok(new) => {
                    out = new;
                    failed = false;
                    tracing::info!(output = ?out.target, "access log reopened");
                }
                Err(e) => tracing::error!(error = %e, "access log not reopened; writing to the old file"),
            }
        }
        // Only this thread holds the queue: every handle is gone, and what they queued is written.
        if Arc::strong_count(queue) == 1 && queue.lines.lock().map_or(true, |l| l.is_empty()) {
            return;
        }
    }
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
            upstream_response_time: None,
            headers: None,
            host: "",
            scheme: "http",
            server_name: "",
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
        assert!(v["device"].is_null(), "no header, no device");
        // The device the request sent, for the audit; one longer than the gateway accepts is not.
        let mut headers = http::HeaderMap::new();
        headers.insert("x-device-id", http::HeaderValue::from_static("device-7"));
        let v: serde_json::Value =
            serde_json::from_str(&json_line(&Entry { headers: Some(&headers), ..entry() })).unwrap();
        assert_eq!(v["device"], "device-7");
        headers.insert("x-device-id", http::HeaderValue::from_str(&"d".repeat(129)).unwrap());
        let v: serde_json::Value =
            serde_json::from_str(&json_line(&Entry { headers: Some(&headers), ..entry() })).unwrap();
        assert!(v["device"].is_null());
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
