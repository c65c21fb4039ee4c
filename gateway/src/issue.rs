//! Before an order: the captcha challenge and the campaign token, answered by the gateway with
//! `plugins::edge` (whose `issue` module lists their checks): the campaign exists → the edge's
//! checks → the JSON answer.

use std::net::IpAddr;

use pingora_proxy::Session;
use plugins::Denial;
use serde_json::Value;

use crate::proxy::{head, read_body, unknown_campaign, Gateway};
use crate::reload::Active;

impl Gateway {
    /// `POST /seckill/{c}/captcha`.
    pub(crate) fn captcha(
        &self,
        session: &Session,
        active: &Active,
        campaign: &str,
        client: Option<IpAddr>,
    ) -> std::result::Result<Value, Denial> {
        let entry = active.campaigns.get(campaign).ok_or_else(unknown_campaign)?;
        self.edge.challenge(&active.edge(), &entry.edge(), &head(session, client))
    }

    /// `POST /seckill/{c}/token`: the headers' checks, the body, the captcha and the token.
    pub(crate) async fn token(
        &self,
        session: &mut Session,
        active: &Active,
        campaign: &str,
        client: Option<IpAddr>,
    ) -> std::result::Result<Value, Denial> {
        let entry = active.campaigns.get(campaign).ok_or_else(unknown_campaign)?;
        let (conf, c) = (active.edge(), entry.edge());
        let asked = self.edge.admit_token(&conf, &c, &head(session, client))?;
        let body = read_body(session).await?;
        self.edge.token(&conf, &c, asked, &body).await
    }
}
