//! A platform team's own Pingora proxy with the sale embedded: the smallest `ProxyHttp` that
//! sells one campaign through `plugins::edge` and proxies everything else to one upstream.
//!
//! ```text
//! SECKILL_REDIS_URL=redis://127.0.0.1:6390 SECKILL_KAFKA_BROKER=127.0.0.1:19092 \
//! SECKILL_EDGE_KEY=... SECKILL_LOGIN_KEY=... SECKILL_GATEWAY_KEY=... \
//! cargo run -p plugins --example embed -- 127.0.0.1:8088 127.0.0.1:8081 conf/campaigns/demo.toml
//! ```
//!
//! Its `request_filter` is all the sale needs from a proxy:
//! - `POST /seckill/{c}/captcha` → [`Edge::challenge`];
//! - `POST /seckill/{c}/token` → [`Edge::admit_token`], the body, [`Edge::token`];
//! - `POST /seckill/{c}/{path}/order` → [`Edge::admit`], the body, [`Edge::verify`],
//!   [`Edge::reserve`];
//!
//! each answered with its JSON (a denial with its status and `Retry-After`). The campaign's
//! stock is published by the order writer (`order-writer campaign publish`), the records it
//! reserves go to the topic `reservations` (`SECKILL_TOPIC`), and the login JWTs it accepts are
//! HS256 with issuer `shop-auth` and audience `seckill` (the demo's). What the gateway adds on
//! top (reload, metrics, access log, front door, routes and pools) is left out.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fred::prelude::*;
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_http::ResponseHeader;
use pingora_proxy::{ProxyHttp, Session};
use plugins::auth::{JwtCheck, LoginAlg, LoginVerifier};
use plugins::budget::{Budget, Permit};
use plugins::client_ip::{self, TrustedProxies};
use plugins::edge::{CampaignRef, Conf, Edge, Head};
use plugins::eligibility::Eligibility;
use plugins::queue::{QueueConf, ReservationQueue};
use plugins::sold_out::SoldOutFlag;
use plugins::token::EdgeKeys;
use plugins::Denial;
use protocol::campaign::Campaign;
use protocol::codes::{Answer, Code};
use protocol::scripts::Scripts;
use protocol::signing::Signer;
use serde_json::Value;

/// What the proxy holds: the edge, the one campaign with its state, the server's keys.
struct Shop {
    edge: Edge,
    campaign: Campaign,
    sold_out: SoldOutFlag,
    budget: Arc<Budget>,
    eligibility: Eligibility,
    keys: EdgeKeys,
    login: LoginVerifier,
    trusted: TrustedProxies,
    signer: Signer,
    upstream: String,
}

impl Shop {
    fn conf(&self) -> Conf<'_> {
        Conf {
            keys: &self.keys,
            login: &self.login,
            provider: None,
            signer: &self.signer,
            sold_out_ttl: Duration::from_secs(1),
        }
    }

    fn campaign(&self) -> CampaignRef<'_> {
        CampaignRef {
            campaign: &self.campaign,
            sold_out: &self.sold_out,
            budget: &self.budget,
            eligibility: &self.eligibility,
        }
    }

    /// The sale's answer to a request on `rest` (the path after `/seckill/{campaign}/`), with the
    /// id this proxy gave it.
    async fn sale(
        &self,
        session: &mut Session,
        rest: &str,
        id: &str,
        permit: &mut Option<Permit>,
    ) -> Result<Value, Denial> {
        let (conf, c) = (self.conf(), self.campaign());
        // Who the client is, decided once for the request.
        let peer = session.client_addr().and_then(|a| a.as_inet()).map(|a| a.ip());
        let client = client_ip::client_ip(
            peer,
            client_ip::forwarded_lines(&session.req_header().headers),
            &self.trusted,
        );
        match rest.split('/').collect::<Vec<_>>()[..] {
            ["captcha"] => self.edge.challenge(&conf, &c, &head(session, client)),
            ["token"] => {
                let asked = self.edge.admit_token(&conf, &c, &head(session, client))?;
                let body = body(session).await?;
                self.edge.token(&conf, &c, asked, &body).await
            }
            [path, "order"] => {
                let mut admitted = self.edge.admit(&conf, &c, &head(session, client), path)?;
                *permit = admitted.permit.take();
                let body = body(session).await?;
                let order = self.edge.verify(&conf, &c, admitted, &head(session, client), &body).await?;
                let queued = self.edge.reserve(&conf, &c, &order, id).await?;
                let id = match queued {
                    plugins::sale::Queued::New => id.to_string(),
                    plugins::sale::Queued::Retry(first) => first,
                };
                // The result is told only to whoever holds this token (`X-Result-Token`).
                let result_token = self.edge.result_token(&conf, &c, &order, &id);
                Ok(serde_json::json!({
                    "code": Code::Queued,
                    "message": "reserved",
                    "request_id": id,
                    "result_token": result_token,
                }))
            }
            _ => Err(Denial::new(Code::RouteNotFound, "no such sale path")),
        }
    }
}

fn head(session: &Session, client: Option<std::net::IpAddr>) -> Head<'_> {
    let req = session.req_header();
    Head { method: &req.method, uri: &req.uri, headers: &req.headers, client }
}

/// The request body, at most 4 KiB.
async fn body(session: &mut Session) -> Result<Vec<u8>, Denial> {
    let mut body = Vec::new();
    while let Some(chunk) = session.read_request_body().await.map_err(|_| unreadable())? {
        body.extend_from_slice(&chunk);
        if body.len() > 4096 {
            return Err(unreadable());
        }
    }
    Ok(body)
}

fn unreadable() -> Denial {
    Denial::new(Code::BadRequest, "the body could not be read (at most 4 KiB)")
}

async fn write(session: &mut Session, status: u16, body: Vec<u8>, retry_after: Option<u32>) -> Result<bool> {
    let mut header = ResponseHeader::build(status, Some(4))?;
    header.insert_header("content-type", "application/json")?;
    header.insert_header("content-length", body.len())?;
    if let Some(secs) = retry_after {
        header.insert_header("retry-after", secs)?;
    }
    session.write_response_header(Box::new(header), false).await?;
    session.write_response_body(Some(Bytes::from(body)), true).await?;
    Ok(true)
}

/// Per request: the concurrency budget's place, held until the answer is written.
#[derive(Default)]
struct Ctx {
    permit: Option<Permit>,
}

#[async_trait]
impl ProxyHttp for Shop {
    type CTX = Ctx;

    fn new_ctx(&self) -> Ctx {
        Ctx::default()
    }

    async fn request_filter(&self, session: &mut Session, ctx: &mut Ctx) -> Result<bool> {
        let prefix = format!("/seckill/{}/", self.campaign.id);
        let Some(rest) = session.req_header().uri.path().strip_prefix(prefix.as_str()).map(str::to_string)
        else {
            return Ok(false); // the rest of the shop: proxied
        };
        let id = uuid::Uuid::now_v7().to_string();
        match self.sale(session, &rest, &id, &mut ctx.permit).await {
            Ok(answer) => {
                let status = if answer["code"] == "QUEUED" { 202 } else { 200 };
                write(session, status, serde_json::to_vec(&answer).unwrap_or_default(), None).await
            }
            Err(d) => {
                let body = Answer { code: d.code, message: &d.message, request_id: &id }.to_json();
                write(session, d.code.status(), body, d.retry_after_secs).await
            }
        }
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut Ctx) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(self.upstream.as_str(), false, String::new())))
    }
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is required"))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, upstream, campaign_file] = &args[..] else {
        eprintln!("usage: embed <listen addr> <upstream addr> <campaign file>");
        std::process::exit(2);
    };
    let campaign = Campaign::load(campaign_file.as_ref()).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2);
    });
    let eligibility = Eligibility::new(campaign.eligibility.clone(), Default::default(), None);
    let scripts = Scripts::load(&protocol::scripts::default_dir()).expect("the lua/ folder");

    // Redis and Kafka live on a runtime of their own, beside Pingora's.
    let runtime = tokio::runtime::Runtime::new().expect("a runtime");
    let pool = runtime.block_on(async {
        let pool = Builder::from_config(Config::from_url(&env("SECKILL_REDIS_URL")).expect("redis url"))
            .build_pool(4)
            .expect("a pool");
        pool.init().await.expect("redis reachable");
        pool
    });
    let queue = ReservationQueue::start(
        QueueConf {
            connection: protocol::kafka::KafkaConnection::plaintext(vec![env("SECKILL_KAFKA_BROKER")]),
            topic: std::env::var("SECKILL_TOPIC").unwrap_or_else(|_| "reservations".into()),
            partitions: 4,
            batch_max: 256,
            linger: Duration::from_millis(2),
            produce_timeout: Duration::from_secs(2),
            capacity: 100_000,
        },
        runtime.handle(),
    );
    let login =
        JwtCheck::new(LoginAlg::Hs256, env("SECKILL_LOGIN_KEY").as_bytes(), "shop-auth", "seckill", 5)
            .expect("a login key");
    let shop = Shop {
        edge: Edge::new(
            pool,
            scripts,
            queue,
            (Duration::from_millis(200), Default::default()),
            Duration::from_secs(1),
        ),
        budget: Arc::new(Budget::new(campaign.limits.max_inflight)),
        sold_out: SoldOutFlag::default(),
        eligibility,
        keys: EdgeKeys::derive(env("SECKILL_EDGE_KEY").as_bytes()).expect("a master key"),
        login: LoginVerifier::new(login),
        trusted: TrustedProxies::default(),
        signer: Signer::new(env("SECKILL_GATEWAY_KEY").as_bytes()),
        upstream: upstream.clone(),
        campaign,
    };

    let mut server = Server::new(None).expect("a server");
    server.bootstrap();
    let mut proxy = pingora_proxy::http_proxy_service(&server.configuration, shop);
    proxy.add_tcp(listen);
    server.add_service(proxy);
    let _runtime = runtime;
    server.run_forever()
}
