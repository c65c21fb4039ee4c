//! One ACME order (RFC 8555 §7.4): the account (found or created from its key), the order for
//! the entry's names, each authorization's HTTP-01 challenge published for the plain listeners
//! (in memory and in the store) and taken back afterwards, then the CSR (a new P-256 key) and
//! the chain.

use std::time::Duration;

use anyhow::{anyhow, bail, Context};
use instant_acme::{
    Account, AuthorizationStatus, ChallengeType, Identifier, Key, NewOrder, Order, OrderStatus, RetryPolicy,
};
use rustls::pki_types::{PrivateKeyDer, PrivatePkcs8KeyDer};

use super::store::Store;
use super::Live;
use crate::conf::acme::AcmeConf;

/// How long the server is given to validate, then to sign.
const POLL: RetryPolicy =
    RetryPolicy::new().initial_delay(Duration::from_millis(250)).timeout(Duration::from_secs(90));

/// A new certificate for `conf`: (PEM chain, PEM key).
pub(super) async fn order(conf: &AcmeConf, store: &Store, live: &Live) -> anyhow::Result<(String, String)> {
    let account = account(conf).await?;
    let ids: Vec<Identifier> = conf.hosts.iter().map(|h| Identifier::Dns(h.clone())).collect();
    let mut new = NewOrder::new(&ids);
    if let Some(p) = &conf.profile {
        new = new.profile(p);
    }
    let mut order = account.new_order(&new).await.context("new order")?;
    let mut tokens = Vec::new();
    let validated = validate(&mut order, store, live, &mut tokens).await;
    for token in &tokens {
        live.set_challenge(token, None);
        let _ = store.set_challenge(token, None);
    }
    validated?;
    let key_pem = order.finalize().await.context("finalize")?;
    let chain = order.poll_certificate(&POLL).await.context("certificate")?;
    Ok((chain, key_pem))
}

/// The account of the entry's key: created on the first order, found by its key afterwards.
async fn account(conf: &AcmeConf) -> anyhow::Result<Account> {
    let builder = match &conf.directory_ca_file {
        Some(ca) => Account::builder_with_root(ca),
        None => Account::builder(),
    }
    .context("ACME HTTP client")?;
    let der = PrivatePkcs8KeyDer::from(conf.account_key.pkcs8_der().to_vec());
    let key = Key::from_pkcs8_der(der.clone_key()).context("account key")?;
    let (account, _) = builder
        .create_from_key((key, PrivateKeyDer::Pkcs8(der)), conf.directory.clone())
        .await
        .with_context(|| format!("account at {}", conf.directory))?;
    if !conf.contact.is_empty() {
        let contact: Vec<&str> = conf.contact.iter().map(String::as_str).collect();
        account.update_contacts(&contact).await.context("account contact")?;
    }
    Ok(account)
}

/// Answers every pending authorization by HTTP-01 and waits until the order is ready.
async fn validate(
    order: &mut Order,
    store: &Store,
    live: &Live,
    tokens: &mut Vec<String>,
) -> anyhow::Result<()> {
    let mut authzs = order.authorizations();
    while let Some(authz) = authzs.next().await {
        let mut authz = authz.context("authorization")?;
        match authz.status {
            AuthorizationStatus::Valid => continue,
            AuthorizationStatus::Pending => {}
            other => bail!("authorization for {} is {other:?}", authz.identifier()),
        }
        let mut challenge = authz
            .challenge(ChallengeType::Http01)
            .ok_or_else(|| anyhow!("the server offers no http-01 challenge"))?;
        let key_auth = challenge.key_authorization();
        tokens.push(challenge.token.clone());
        live.set_challenge(&challenge.token, Some(key_auth.as_str()));
        store.set_challenge(&challenge.token, Some(key_auth.as_str())).context("challenge file")?;
        challenge.set_ready().await.context("challenge ready")?;
    }
    match order.poll_ready(&POLL).await.context("validation")? {
        OrderStatus::Ready => Ok(()),
        status => Err(anyhow!("the order is {status:?}: {}", why_invalid(order).await)),
    }
}

/// What the server said of the failed challenges.
async fn why_invalid(order: &mut Order) -> String {
    let mut said = Vec::new();
    let mut authzs = order.authorizations();
    while let Some(Ok(authz)) = authzs.next().await {
        for ch in &authz.challenges {
            if let Some(p) = &ch.error {
                said.push(format!("{}: {}", authz.identifier(), p.detail.as_deref().unwrap_or("failed")));
            }
        }
    }
    if said.is_empty() {
        "no reason given".into()
    } else {
        said.join("; ")
    }
}
