//! The floor under the gateway's proxied shop requests, for `e2e/bench/proxy.sh`: the same
//! Pingora server as the gateway (threads, no work stealing, one upstream pool, the same
//! keepalive levers), whose `ProxyHttp` has only `upstream_peer`: no filters, no checks, no
//! access line, no metrics.
//!
//! The gateway's proxied request can be at most as fast as this; measured beside Nginx
//! `proxy_pass` in one run, it splits the gap into Pingora's share and the gateway's.
//!
//! `cargo run --release -p bench --bin proxy_floor -- 127.0.0.1:18091 127.0.0.1:8080 2`
//!
//! The levers, by environment (for the bench's lever runs; the defaults are the gateway's):
//! `FLOOR_WORK_STEALING=1` (one shared runtime), `FLOOR_POOL_SIZE=<n>` (upstream keepalive pool
//! per thread, Pingora's default 128), `FLOOR_SHARED_POOL=1` (one upstream pool for every
//! thread, Pingora's default, instead of one per thread as the gateway keeps it),
//! `FLOOR_REHOME=1` (move each new connection to the serving thread's reactor: with Pingora
//! 0.9 as it is this costs one more write per answer and saves less than that, so neither the
//! gateway nor the floor does it by default), `FLOOR_WORKERS=<n>` (Nginx's layout: n services of
//! one thread each, all listening on the address with `SO_REUSEPORT`, so the kernel spreads the
//! connections and no thread ever hands work to another; the thread count is then ignored).

use std::net::SocketAddr;
use std::time::Duration;

use std::sync::Arc;

use async_trait::async_trait;
use pingora_core::apps::{HttpServerApp, ServerApp};
use pingora_core::listeners::TcpSocketOptions;
use pingora_core::protocols::l4::stream::Stream as L4Stream;
use pingora_core::protocols::{GetSocketDigest, SocketDigest, Stream};
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use pingora_core::server::ShutdownWatch;
use pingora_core::services::listening::Service;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_proxy::{ProxyHttp, Session};
use std::os::fd::{AsRawFd, BorrowedFd};

struct Floor {
    upstream: SocketAddr,
    per_thread_pool: bool,
}

#[async_trait]
impl ProxyHttp for Floor {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        let mut peer = HttpPeer::new(self.upstream, false, String::new());
        peer.options.idle_timeout = Some(Duration::from_secs(60));
        if self.per_thread_pool {
            peer.group_key = gateway::threads::upstream_group_key();
        }
        Ok(Box::new(peer))
    }
}

/// The gateway's front door reduced to its thread lever: each new connection is moved to the
/// serving thread's reactor ([`rehome`]), then served by the proxy.
struct Rehome<A> {
    app: Arc<A>,
    on: bool,
}

#[async_trait]
impl<A: HttpServerApp + Send + Sync + 'static> ServerApp for Rehome<A> {
    async fn process_new(self: &Arc<Self>, stream: Stream, shutdown: &ShutdownWatch) -> Option<Stream> {
        let mut stream = if self.on { rehome(stream) } else { stream };
        loop {
            stream = self.app.process_new(stream, shutdown).await?;
        }
    }

    async fn cleanup(&self) {
        self.app.http_cleanup().await;
    }
}

fn flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| v == "1")
}

fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:18091".into());
    let upstream = args.next().unwrap_or_else(|| "127.0.0.1:8080".into()).parse().expect("upstream address");
    let threads = args.next().and_then(|t| t.parse().ok()).unwrap_or(2);
    let mut conf = ServerConf {
        threads,
        work_stealing: flag("FLOOR_WORK_STEALING"),
        grace_period_seconds: Some(1),
        graceful_shutdown_timeout_seconds: Some(1),
        ..ServerConf::default()
    };
    if let Some(size) = std::env::var("FLOOR_POOL_SIZE").ok().and_then(|s| s.parse().ok()) {
        conf.upstream_keepalive_pool_size = size;
    }
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let workers: usize = std::env::var("FLOOR_WORKERS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    for _ in 0..workers.max(1) {
        let floor = Floor { upstream, per_thread_pool: !flag("FLOOR_SHARED_POOL") };
        let proxy = pingora_proxy::http_proxy(&server.configuration, floor);
        let app = Rehome { app: Arc::new(proxy), on: flag("FLOOR_REHOME") };
        let mut service = Service::new("proxy floor".to_string(), app);
        if workers > 0 {
            let mut options = TcpSocketOptions::default();
            options.so_reuseport = Some(true);
            service.add_tcp_with_settings(&listen, options);
            service.threads = Some(1);
        } else {
            service.add_tcp(&listen);
        }
        server.add_service(service);
    }
    server.run_forever()
}

/// A new plain-TCP downstream connection, registered with the calling thread's reactor (see
/// `gateway::threads`); any other stream (TLS, Unix socket), or one that cannot be moved, is
/// returned as it is. Call it before anything is read from the connection.
pub fn rehome(stream: Stream) -> Stream {
    if !stream.as_any().is::<L4Stream>() {
        return stream;
    }
    let Ok(old) = stream.into_any().downcast::<L4Stream>() else { unreachable!("checked above") };
    // SAFETY: the descriptor belongs to `old`, alive for this borrow.
    let dup = match unsafe { BorrowedFd::borrow_raw(old.as_raw_fd()) }.try_clone_to_owned() {
        Ok(fd) => fd,
        Err(_) => return old,
    };
    let std_stream = std::net::TcpStream::from(dup);
    let moved = std_stream.set_nonblocking(true).and_then(|()| tokio::net::TcpStream::from_std(std_stream));
    let Ok(tcp) = moved else {
        return old;
    };
    let mut new = L4Stream::from(tcp);
    let digest = SocketDigest::from_raw_fd(new.as_raw_fd());
    if let Some(peer) = old.get_socket_digest().and_then(|d| d.peer_addr().cloned()) {
        let _ = digest.peer_addr.set(Some(peer));
    }
    new.set_socket_digest(digest);
    // Dropping `old` deregisters the socket from the acceptor's reactor and closes its
    // descriptor; the connection lives on in the duplicate.
    drop(old);
    Box::new(new)
}
