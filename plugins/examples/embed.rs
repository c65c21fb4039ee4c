//! A platform team's own Pingora proxy with the whole sale embedded, everything else proxied to
//! one upstream: `embed <listen> <shop upstream> <order writer> <sale conf file>`. The sale conf
//! is the `[sale]`, `[redis]`, `[kafka]` and `[defense]` sections of `conf/server.toml`.
use std::{path::Path, sync::Arc};

use async_trait::async_trait;
use pingora_core::{server::Server, upstreams::peer::HttpPeer, Result};
use pingora_proxy::{ProxyHttp, Session};
use plugins::checks::{Permit, TrustedProxies};
use plugins::pingora::{client, write, PingoraRequest};
use plugins::{FlashSale, Handled, SaleRoute, Start};

struct Shop {
    sale: Arc<FlashSale>,
    upstream: String,
    order_writer: String,
}

#[async_trait]
impl ProxyHttp for Shop {
    /// The campaign's budget place, held until the answer is written; where the request goes;
    /// when it arrived (its head read: the waiting room judges its lotteries by it).
    type CTX = (Option<Permit>, bool, chrono::DateTime<chrono::Utc>);
    fn new_ctx(&self) -> Self::CTX {
        (None, false, chrono::Utc::now())
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Self::CTX) -> Result<bool> {
        let Some(route) = SaleRoute::of(session.req_header().uri.path()) else { return Ok(false) };
        let (id, client) = (uuid::Uuid::now_v7().to_string(), client(session, &TrustedProxies::default()));
        let mut req = PingoraRequest { session, client, arrived: ctx.2 };
        match self.sale.handle(&route, &mut req, &id).await {
            Handled::Reply(mut reply) => {
                ctx.0 = reply.permit.take();
                write(session, &reply).await.map(|()| true)
            }
            Handled::ToOrderWriter => {
                ctx.1 = true; // a checked result query: to the order writer
                Ok(false)
            }
        }
    }

    async fn upstream_peer(&self, _: &mut Session, ctx: &mut Self::CTX) -> Result<Box<HttpPeer>> {
        let to = if ctx.1 { &self.order_writer } else { &self.upstream };
        Ok(Box::new(HttpPeer::new(to.as_str(), false, String::new())))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let [_, listen, upstream, order_writer, conf] = &std::env::args().collect::<Vec<_>>()[..] else {
        return Err("usage: embed <listen> <shop upstream> <order writer> <sale conf file>".into());
    };
    // Redis, Kafka, the replenish listener and SIGHUP run on a runtime of their own.
    let runtime = tokio::runtime::Runtime::new()?;
    let sale = Arc::new(runtime.block_on(FlashSale::start(Path::new(conf), Start::on(runtime.handle())))?);
    runtime.spawn(Arc::clone(&sale).watch_sighup());
    let mut server = Server::new(None)?;
    server.bootstrap();
    let shop = Shop { sale, upstream: upstream.clone(), order_writer: order_writer.clone() };
    let mut proxy = pingora_proxy::http_proxy_service(&server.configuration, shop);
    proxy.add_tcp(listen);
    server.add_service(proxy);
    let _runtime = runtime;
    server.run_forever()
}
