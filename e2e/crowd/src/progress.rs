//! A progress bar on a terminal (stderr), plain lines every two seconds when not a terminal.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A phase's progress: `add` as work completes, `finish` at the end.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

struct Inner {
    name: &'static str,
    total: u64,
    done: AtomicU64,
    finished: AtomicBool,
    started: Instant,
}

impl Progress {
    /// Starts showing the progress of `name` towards `total`.
    pub fn start(name: &'static str, total: u64) -> Self {
        let inner = Arc::new(Inner {
            name,
            total,
            done: AtomicU64::new(0),
            finished: AtomicBool::new(false),
            started: Instant::now(),
        });
        let shown = inner.clone();
        tokio::spawn(async move {
            let tty = std::io::stderr().is_terminal();
            let every = if tty { Duration::from_millis(200) } else { Duration::from_secs(2) };
            loop {
                tokio::time::sleep(every).await;
                if shown.finished.load(Ordering::Relaxed) {
                    break;
                }
                shown.show(tty);
            }
        });
        Self { inner }
    }

    /// Counts `n` more done.
    pub fn add(&self, n: u64) {
        self.inner.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Ends the bar (a last line).
    pub fn finish(&self) {
        self.inner.finished.store(true, Ordering::Relaxed);
        let tty = std::io::stderr().is_terminal();
        self.inner.show(tty);
        if tty {
            eprintln!();
        }
    }
}

impl Inner {
    fn show(&self, tty: bool) {
        let done = self.done.load(Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        let rate = done as f64 / secs.max(1e-3);
        let line = format!("{:<6} {done:>8}/{} {rate:>8.0}/s {secs:>6.1} s", self.name, self.total);
        if tty {
            let width = 30u64;
            let filled = (done * width).checked_div(self.total).unwrap_or(width).min(width) as usize;
            let bar = format!("{}{}", "#".repeat(filled), ".".repeat(width as usize - filled));
            eprint!("\r[{bar}] {line}");
            let _ = std::io::stderr().flush();
        } else {
            eprintln!("seckill-load: {line}");
        }
    }
}
