//! Log output of every binary of the workspace (the gateway, the order writer, the e2e tools):
//! one line per event on stderr, colours only when stderr is a terminal, our own crates at
//! `info` and every library (rskafka, sqlx, pingora, fred, hyper, h2, tower, axum, …) at `warn`,
//! so a log file shows the service's events rather than connection chatter. `RUST_LOG`, when
//! set to a valid filter, replaces the default entirely.

use std::io::IsTerminal;

use tracing_subscriber::fmt::format::{DefaultFields, Format};
use tracing_subscriber::fmt::{MakeWriter, SubscriberBuilder};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Log targets of this workspace: its library crates and its binaries (a binary's events carry
/// its crate name, `-` read as `_`).
pub const OUR_TARGETS: &[&str] = &[
    "protocol",
    "plugins",
    "gateway",
    "backend",
    "e2e",
    "order_writer",
    "seckill_load",
    "seckill_writer_bench",
];

/// The filter used when `RUST_LOG` is unset or invalid: `warn` for everything, `info` for
/// [`OUR_TARGETS`].
pub fn default_directives() -> String {
    let mut directives = String::from("warn");
    for target in OUR_TARGETS {
        directives.push_str(&format!(",{target}=info"));
    }
    directives
}

/// The filter for a `RUST_LOG` value: that value if it is set and valid, else
/// [`default_directives`].
pub fn filter(rust_log: Option<&str>) -> EnvFilter {
    rust_log.and_then(|v| EnvFilter::try_new(v).ok()).unwrap_or_else(|| EnvFilter::new(default_directives()))
}

/// The subscriber of [`init`], writing to `writer`, with ANSI colours only if `ansi`.
pub fn subscriber<W>(
    rust_log: Option<&str>,
    writer: W,
    ansi: bool,
) -> SubscriberBuilder<DefaultFields, Format, EnvFilter, W>
where
    W: for<'a> MakeWriter<'a> + Send + Sync + 'static,
{
    tracing_subscriber::fmt().with_env_filter(filter(rust_log)).with_writer(writer).with_ansi(ansi)
}

/// Installs the process's log subscriber: stderr, filtered by `RUST_LOG` or
/// [`default_directives`], colours only when stderr is a terminal. Call once, first thing in
/// `main`.
pub fn init() {
    let rust_log = std::env::var("RUST_LOG").ok();
    subscriber(rust_log.as_deref(), std::io::stderr, std::io::stderr().is_terminal()).finish().init();
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A writer that keeps what was logged.
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Captured {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Captured {
        type Writer = Captured;
        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }

    /// What one event of each target logs under `rust_log`, as text.
    fn log(rust_log: Option<&str>, ansi: bool) -> String {
        let out = Captured::default();
        let sub = subscriber(rust_log, out.clone(), ansi).finish();
        tracing::subscriber::with_default(sub, || {
            tracing::info!(target: "gateway::proxy", "ours-info");
            tracing::info!(target: "order_writer", "writer-info");
            tracing::debug!(target: "backend::writer", "ours-debug");
            tracing::info!(target: "sqlx::query", "library-info");
            tracing::info!(target: "pingora_core::server", "pingora-info");
            tracing::warn!(target: "rskafka::client", "library-warn");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        text
    }

    #[test]
    fn the_default_is_warn_with_every_crate_of_ours_at_info() {
        assert_eq!(
            default_directives(),
            "warn,protocol=info,plugins=info,gateway=info,backend=info,e2e=info,\
             order_writer=info,seckill_load=info,seckill_writer_bench=info"
        );
    }

    #[test]
    fn by_default_our_info_shows_and_library_info_does_not() {
        for rust_log in [None, Some("no such=filter=at all")] {
            let text = log(rust_log, false);
            assert!(text.contains("ours-info") && text.contains("writer-info"), "{text}");
            assert!(text.contains("library-warn"), "{text}");
            assert!(!text.contains("ours-debug"), "{text}");
            assert!(!text.contains("library-info") && !text.contains("pingora-info"), "{text}");
        }
    }

    #[test]
    fn rust_log_replaces_the_default() {
        let text = log(Some("sqlx=info,backend=debug"), false);
        assert!(text.contains("library-info") && text.contains("ours-debug"), "{text}");
        assert!(!text.contains("ours-info") && !text.contains("pingora-info"), "{text}");
    }

    #[test]
    fn colours_only_when_asked() {
        assert!(!log(None, false).contains('\u{1b}'));
        assert!(log(None, true).contains('\u{1b}'));
    }
}
