//! Redis Cluster: what the gateway and the order writer need beyond what fred does for them.
//!
//! Both accept a single Redis or a Redis Cluster, chosen by the URL's scheme ([`URL_FORMS`]):
//! fred's `Config::from_url` picks its cluster mode from `redis-cluster://`. In that mode fred
//! routes each command by its first key's slot, refreshes its slot map on `MOVED`, and
//! `Script::load` loads a script on every primary. Every script of the sale keeps its keys on
//! one slot (the campaign's hash tag, [`crate::keys`]), so each stays one atomic call on one
//! node.
//!
//! Redirections are not followed by fred here ([`MAX_REDIRECTIONS`]): fred 10.1 follows `ASK`
//! by writing `ASKING` to the target and awaiting the next reply of that connection inside its
//! router task, while other commands' replies are pending on it; under load the client wedged
//! (every later command timed out). A call refused with `MOVED` or `ASK` fails instead (after
//! fred refreshed its slot map on `MOVED`), and so does a script refused with `TRYAGAIN` (its keys
//! split by a migration). Neither ran: [`EvalRetry::evalsha_with_retry`] sends them again,
//! briefly.

use std::time::Duration;

use fred::clients::Client;
use fred::error::{Error, ErrorKind};
use fred::types::scripts::Script;
use fred::types::{FromValue, MultipleKeys, MultipleValues};

/// The Redis URL forms both binaries accept (for conf error messages and docs).
pub const URL_FORMS: &str = "redis://host:port (one Redis) or \
     redis-cluster://host:port?node=host:port&node=host:port (a Redis Cluster)";

/// Whether `url` has one of the schemes of [`URL_FORMS`] (the rest is fred's to parse).
pub fn accepted_url(url: &str) -> bool {
    ["redis://", "redis-cluster://"].iter().any(|s| url.starts_with(s))
}

/// `url` as a conf field's Redis URL, or why not: a scheme of [`URL_FORMS`]; `rediss://` and
/// `rediss-cluster://` are refused with their reason (fred is built without TLS here: such a
/// client would connect in plaintext or fail).
pub fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("rediss://") || url.starts_with("rediss-cluster://") {
        return Err("rediss:// is refused: this build's Redis client has no TLS (it would connect in \
                    plaintext or fail); reach Redis over a private network or a TLS tunnel on \
                    loopback, as redis://"
            .into());
    }
    if !accepted_url(url) {
        return Err(format!("must be {URL_FORMS}"));
    }
    Ok(())
}

/// fred's `max_redirections` for a cluster client: none followed (see the module's doc); the
/// refusal comes back as an error that [`refused_before_running`] recognizes.
pub const MAX_REDIRECTIONS: u32 = 0;

/// How many times a call refused before running is sent again.
pub const TRYAGAIN_RETRIES: u32 = 4;

/// The pause before each retry: the retries take at most 4 x 5 ms = 20 ms beyond the calls
/// themselves, well under the gateway's smallest reservation bound (`redis.timeout_ms`, 100 ms by
/// default), which still bounds the whole call. A migration that splits a campaign's keys for
/// longer fails the call with the last refusal, as any Redis error: the gateway answers
/// `SERVICE_DEGRADED`, the order writer's loops try again on their next pass.
pub const TRYAGAIN_PAUSE: Duration = Duration::from_millis(5);

/// Whether Redis Cluster refused the call before running it: `TRYAGAIN` (fred gives it no error
/// kind of its own), or a `MOVED` or `ASK` redirection that fred did not follow
/// ([`MAX_REDIRECTIONS`]; fred's "Too many redirections.").
pub fn refused_before_running(e: &Error) -> bool {
    e.details().starts_with("TRYAGAIN")
        || (*e.kind() == ErrorKind::Routing && e.details() == "Too many redirections.")
}

/// Runs `call` once, then again after [`TRYAGAIN_PAUSE`] while Redis Cluster refused it before
/// running it ([`refused_before_running`]), at most [`TRYAGAIN_RETRIES`] more times; any other
/// outcome is returned at once.
pub async fn retry_tryagain<T, F, Fut>(mut call: F) -> Result<T, Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, Error>>,
{
    let mut retries = 0;
    loop {
        match call().await {
            Err(e) if refused_before_running(&e) && retries < TRYAGAIN_RETRIES => {
                retries += 1;
                tokio::time::sleep(TRYAGAIN_PAUSE).await;
            }
            outcome => return outcome,
        }
    }
}

/// `EVALSHA` that survives a slot migration.
pub trait EvalRetry {
    /// fred's `evalsha_with_reload` (a `NOSCRIPT` loads the script on every primary and calls
    /// again), retried by [`retry_tryagain`] when Redis Cluster answered `TRYAGAIN`, `MOVED` or
    /// `ASK`.
    ///
    /// Safe to send again: those are Redis Cluster's refusals before it runs a command (the
    /// node checks where the keys are before anything executes), so the script did not run and
    /// nothing of it was written. Every other error, a timeout included, is returned as it is:
    /// the script may have run, and only the caller knows how to undo it.
    fn evalsha_with_retry<R, K, V>(
        &self,
        client: &Client,
        keys: K,
        args: V,
    ) -> impl std::future::Future<Output = Result<R, Error>> + Send
    where
        R: FromValue + Send,
        K: Into<MultipleKeys> + Send,
        V: TryInto<MultipleValues> + Send,
        V::Error: Into<Error> + Send;
}

impl EvalRetry for Script {
    async fn evalsha_with_retry<R, K, V>(&self, client: &Client, keys: K, args: V) -> Result<R, Error>
    where
        R: FromValue + Send,
        K: Into<MultipleKeys> + Send,
        V: TryInto<MultipleValues> + Send,
        V::Error: Into<Error> + Send,
    {
        let keys: MultipleKeys = keys.into();
        let args: MultipleValues = args.try_into().map_err(Into::into)?;
        retry_tryagain(|| self.evalsha_with_reload(client, keys.clone(), args.clone())).await
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::*;

    fn tryagain() -> Error {
        Error::new(ErrorKind::Unknown, "TRYAGAIN Multiple keys request during rehashing of slot")
    }

    #[test]
    fn only_refusals_before_running_are_recognized() {
        assert!(refused_before_running(&tryagain()));
        assert!(refused_before_running(&Error::new(ErrorKind::Routing, "Too many redirections.")));
        for other in ["NOSCRIPT No matching script", "ERR x TRYAGAIN", "Max attempts reached."] {
            assert!(!refused_before_running(&Error::new(ErrorKind::Unknown, other)), "{other}");
            assert!(!refused_before_running(&Error::new(ErrorKind::Routing, other)), "{other}");
        }
        assert!(!refused_before_running(&Error::new(ErrorKind::Timeout, "Request timed out.")));
    }

    #[tokio::test]
    async fn tryagain_is_retried_until_the_call_runs() {
        let calls = Cell::new(0);
        let out = retry_tryagain(|| {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move {
                if n < 3 {
                    Err(tryagain())
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(out.unwrap(), 3);
        assert_eq!(calls.get(), 3);
    }

    #[tokio::test]
    async fn tryagain_retries_are_bounded() {
        let calls = Cell::new(0);
        let out: Result<(), Error> = retry_tryagain(|| {
            calls.set(calls.get() + 1);
            async { Err(tryagain()) }
        })
        .await;
        assert!(refused_before_running(&out.unwrap_err()), "the last refusal is returned");
        assert_eq!(calls.get(), 1 + TRYAGAIN_RETRIES);
    }

    #[tokio::test]
    async fn other_errors_are_not_retried() {
        for kind in [ErrorKind::Timeout, ErrorKind::IO, ErrorKind::Unknown] {
            let calls = Cell::new(0);
            let out: Result<(), Error> = retry_tryagain(|| {
                calls.set(calls.get() + 1);
                let kind = kind.clone();
                async move { Err(Error::new(kind, "ERR something else")) }
            })
            .await;
            assert!(out.is_err());
            assert_eq!(calls.get(), 1, "{kind:?}: the script may have run; never sent twice");
        }
    }

    #[test]
    fn url_forms() {
        for ok in ["redis://127.0.0.1:6390", "redis-cluster://127.0.0.1:7390?node=127.0.0.1:7391"] {
            assert!(accepted_url(ok), "{ok}");
        }
        for bad in ["127.0.0.1:6390", "redis-sentinel://127.0.0.1:26379", "http://x", "redis+unix:///s"] {
            assert!(!accepted_url(bad), "{bad}");
            assert!(check_url(bad).unwrap_err().contains("redis-cluster://"), "{bad}");
        }
        for tls in ["rediss://127.0.0.1:6390", "rediss-cluster://127.0.0.1:7390"] {
            assert!(check_url(tls).unwrap_err().contains("no TLS"), "{tls}");
        }
    }
}
