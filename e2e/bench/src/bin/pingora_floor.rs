//! The floor under the gateway's sold-out path, for `e2e/bench/gateway.sh`: the same Pingora
//! server and proxy service, configured like the gateway (threads, no work stealing), whose
//! `request_filter` answers every request at once with a fixed `410` of the gateway's shape
//! (same headers, same body length), with no checks at all.
//!
//! The gateway's sold-out short circuit can be at most as fast as this; measured beside nginx in
//! one run, it splits the gap between the gateway and nginx into the framework's share and ours.
//!
//! `cargo run --release -p bench --bin pingora_floor -- 127.0.0.1:18090 2`
//!
//! `FLOOR_WORKERS=<n>` runs it in the gateway's default layout (`[server] workers`, Nginx's):
//! n services of one thread each, all listening on the address with `SO_REUSEPORT`; the thread
//! count is then ignored. Without it, one service of that many threads (the old layout).

use async_trait::async_trait;
use bytes::Bytes;
use pingora_core::listeners::TcpSocketOptions;
use pingora_core::server::configuration::ServerConf;
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::{Error, ErrorType, Result};
use pingora_http::ResponseHeader;
use pingora_proxy::{ProxyHttp, Session};

/// A body as long as the gateway's SOLD_OUT answer (its request id is a 36-character UUID).
const BODY: &[u8] =
    br#"{"code":"SOLD_OUT","message":"sold out","request_id":"00000000-0000-0000-0000-000000000000"}"#;

struct Floor;

#[async_trait]
impl ProxyHttp for Floor {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        let mut header = ResponseHeader::build(410, Some(3))?;
        header.insert_header(http::header::CONTENT_TYPE, "application/json")?;
        header.insert_header(http::header::CONTENT_LENGTH, BODY.len())?;
        header.insert_header(http::header::CACHE_CONTROL, "no-store")?;
        session.write_response_header(Box::new(header), false).await?;
        session.write_response_body(Some(Bytes::from_static(BODY)), true).await?;
        Ok(true)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Err(Error::explain(ErrorType::InternalError, "the floor has no upstream"))
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let listen = args.next().unwrap_or_else(|| "127.0.0.1:18090".into());
    let threads = args.next().and_then(|t| t.parse().ok()).unwrap_or(2);
    let conf =
        ServerConf { threads, work_stealing: false, grace_period_seconds: Some(1), ..ServerConf::default() };
    let mut server = Server::new_with_opt_and_conf(None, conf);
    server.bootstrap();
    let workers: usize = std::env::var("FLOOR_WORKERS").ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    for _ in 0..workers.max(1) {
        let mut proxy = pingora_proxy::http_proxy_service(&server.configuration, Floor);
        if workers > 0 {
            let mut options = TcpSocketOptions::default();
            options.so_reuseport = Some(true);
            proxy.add_tcp_with_settings(&listen, options);
            proxy.threads = Some(1);
        } else {
            proxy.add_tcp(&listen);
        }
        server.add_service(proxy);
    }
    server.run_forever()
}
