//! A platform team's own Pingora proxy: the whole sale embedded, the rest proxied to the shop.
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
        Ok(ctx.peer(&self.upstream, &self.order_writer)) // the order writer for a result query
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = std::env::args().collect::<Vec<_>>();
    let [_, listen, upstream, order_writer, conf, metrics] = &args[..] else { return Err(USAGE.into()) };
    let sale = FlashSale::from_file(conf)?; // Redis, Kafka, campaigns, metrics: all checked here
    let mut server = Server::new(None)?;
    server.bootstrap();
    server.add_services(sale.services(Some(metrics))); // replenish, reload on SIGHUP, Prometheus
    let shop = Shop { sale, upstream: upstream.clone(), order_writer: order_writer.clone() };
    let mut proxy = http_proxy_service(&server.configuration, shop);
    proxy.add_tcp(listen);
    server.add_service(proxy);
    server.run_forever()
}
