//! A platform team's own Pingora proxy with the whole sale embedded, everything else proxied to
//! one upstream, its metrics on a listener of their own.
use async_trait::async_trait;
use pingora_core::prelude::*;
use pingora_proxy::prelude::*;
use plugins::{FlashSale, SaleCtx};
const USAGE: &str = "usage: embed <listen> <shop upstream> <order writer> <sale conf file> <metrics listen>";

struct Shop {
    sale: std::sync::Arc<FlashSale>,
    upstream: String,
    order_writer: String,
}

#[async_trait]
impl ProxyHttp for Shop {
    type CTX = SaleCtx; // the request's arrival, id, client and route, and its budget place
    fn new_ctx(&self) -> SaleCtx {
        SaleCtx::default()
    }
    async fn request_filter(&self, session: &mut Session, ctx: &mut SaleCtx) -> Result<bool> {
        self.sale.request_filter(session, ctx).await // true: answered; false: passed on, its own headers gone
    }
    async fn upstream_peer(&self, _: &mut Session, ctx: &mut SaleCtx) -> Result<Box<HttpPeer>> {
        let to = if ctx.to_order_writer() { &self.order_writer } else { &self.upstream };
        Ok(Box::new(HttpPeer::new(to.as_str(), false, String::new())))
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = std::env::args().collect::<Vec<_>>();
    let [_, listen, upstream, order_writer, conf, metrics] = &args[..] else { return Err(USAGE.into()) };
    let sale = FlashSale::from_file(conf)?; // Redis, Kafka, campaigns, metrics: all checked here
    let mut server = Server::new(None)?;
    server.bootstrap();
    server.add_services(sale.services()); // the replenish listener, the reload on SIGHUP
    server.add_service(FlashSale::metrics_service(metrics));
    let shop = Shop { sale, upstream: upstream.clone(), order_writer: order_writer.clone() };
    let mut proxy = http_proxy_service(&server.configuration, shop);
    proxy.add_tcp(listen);
    server.add_service(proxy);
    server.run_forever()
}
