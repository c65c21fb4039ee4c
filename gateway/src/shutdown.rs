//! `SIGTERM` with a linger: the gateway first says it is leaving, then leaves.
//!
//! Pingora closes the listening sockets as soon as it handles `SIGTERM`; a connection the kernel
//! had queued on a closed socket is reset, and a balancer that had sent it a request answers
//! its client 502 (it does not resend a `POST`). A balancer stops sending to a gateway that
//! fails its readiness check; `[shutdown] linger_secs` gives it that time: for the linger, the
//! gateway keeps accepting and serving, `/readyz` answers 503 `draining`, and every HTTP/1 answer says
//! `Connection: close` (a client or balancer reconnects, elsewhere; an HTTP/2 connection is told
//! to go at the drain, by Pingora's GOAWAY); then Pingora's own
//! graceful terminate (stop accepting, the drain bound, exit). `SIGQUIT` (the upgrade) and
//! `SIGINT` are Pingora's, at once: the upgrade hands the sockets over, nothing is closed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::server::{ShutdownSignal, ShutdownSignalWatch};
use tokio::signal::unix::{signal, SignalKind};

static DRAINING: AtomicBool = AtomicBool::new(false);

/// Whether a `SIGTERM` was received: the gateway is lingering or draining.
pub fn draining() -> bool {
    DRAINING.load(Ordering::Relaxed)
}

/// The gateway's shutdown signals, for `Server::run`: `SIGTERM` lingers for `linger` first.
pub struct Signals {
    /// How long the gateway keeps serving after `SIGTERM`, saying it is leaving.
    pub linger: Duration,
}

#[async_trait]
impl ShutdownSignalWatch for Signals {
    async fn recv(&self) -> ShutdownSignal {
        let (Ok(mut quit), Ok(mut term), Ok(mut int)) =
            (signal(SignalKind::quit()), signal(SignalKind::terminate()), signal(SignalKind::interrupt()))
        else {
            tracing::error!(
                "cannot install the shutdown signals' handlers: SIGTERM ends the gateway at once"
            );
            return std::future::pending().await;
        };
        tokio::select! {
            _ = quit.recv() => ShutdownSignal::GracefulUpgrade,
            _ = int.recv() => ShutdownSignal::FastShutdown,
            _ = term.recv() => {
                DRAINING.store(true, Ordering::Relaxed);
                tracing::info!(linger_ms = self.linger.as_millis() as u64, "SIGTERM: lingering (readyz 503, Connection: close), then draining");
                tokio::time::sleep(self.linger).await;
                ShutdownSignal::GracefulTerminate
            }
        }
    }
}
