//! What a shop route does besides proxying the request as it came: its own answer (`return`),
//! its rewrites ([`rewrite`], run when the route is searched) and the path sent upstream
//! (`replace_prefix`), and the HTML pages a shop visitor is shown when the gateway answers in
//! the upstream's place, like Nginx's.

use std::net::IpAddr;

use bytes::Bytes;
use http::HeaderValue;
use pingora_core::{Error, ErrorType, Result};
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_proxy::Session;
use regex::Captures;

use crate::conf::{Location, RouteConf};
use crate::frontdoor;
use crate::template::Vars;
use crate::uri::encode_path;

pub mod rewrite;

/// The request's URI where it differs from the one sent: `$uri` and `$args`.
#[derive(Debug, Clone, Copy, Default)]
pub struct At<'a> {
    /// The path, when normalizing or a rewrite changed it.
    pub path: Option<&'a str>,
    /// The query (without `?`), when a rewrite changed it.
    pub args: Option<&'a str>,
}

/// The variables of the request in `session` on `route` (`at`: its path and query where they
/// differ from those sent; `client`: its address; `request_id`: its id). `$host` of a request
/// without a host is the route's first host name, as Nginx's is its server's name.
pub fn vars<'a>(
    session: &'a Session,
    route: &RouteConf,
    at: At<'a>,
    client: Option<IpAddr>,
    request_id: &'a str,
) -> Vars<'a> {
    let req = session.req_header();
    let http_host =
        req.headers.get(http::header::HOST).and_then(|v| v.to_str().ok()).or_else(|| req.uri.host());
    let http_host = http_host.unwrap_or("");
    let host = match host_name(http_host).to_ascii_lowercase() {
        h if h.is_empty() => route.hosts.first().map(|h| h.key()).unwrap_or_default(),
        h => h,
    };
    Vars {
        scheme: frontdoor::scheme(session),
        host,
        http_host,
        request_uri: req.uri.path_and_query().map_or("/", |p| p.as_str()),
        uri: at.path.unwrap_or(req.uri.path()),
        args: at.args.unwrap_or(req.uri.query().unwrap_or("")),
        remote_addr: client,
        request_id,
    }
}

/// The name of a `Host` field as sent, without its port and trailing dot (not lowercased).
pub fn host_name(http_host: &str) -> &str {
    let name = match http_host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map_or(http_host, |(a, _)| a),
        None => http_host.rsplit_once(':').map_or(http_host, |(n, _)| n),
    };
    name.trim_end_matches('.')
}

/// The captures of the route's regex path over `path`, when it is one.
fn location_captures<'p>(route: &'p RouteConf, path: &'p str) -> Option<Captures<'p>> {
    match &route.location {
        Location::Regex(p) => p.regex().captures(path),
        _ => None,
    }
}

/// Writes the route's own answer (`route.answer` is set): a redirect with its `Location`, or
/// a status with its text.
pub async fn answer(
    session: &mut Session,
    route: &RouteConf,
    at: At<'_>,
    client: Option<IpAddr>,
    request_id: &str,
) -> Result<bool> {
    let (header, body) = {
        let vars = vars(session, route, at, client, request_id);
        own_answer(route, &vars)?
    };
    session.write_response_header(Box::new(header), false).await?;
    session.write_response_body(Some(Bytes::from(body)), true).await?;
    Ok(true)
}

/// The head and body of the route's own answer.
fn own_answer(route: &RouteConf, vars: &Vars<'_>) -> Result<(ResponseHeader, String)> {
    let Some(ret) = &route.answer else {
        return Err(Error::explain(ErrorType::InternalError, "the route has no return"));
    };
    let caps = location_captures(route, vars.uri);
    if let Some(location) = &ret.location {
        return redirect(route, vars, ret.status, &location.render(vars, caps.as_ref()));
    }
    let mut header = ResponseHeader::build(ret.status, Some(4))?;
    let body = match &ret.text {
        Some(text) => {
            header.insert_header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")?;
            text.render(vars, caps.as_ref())
        }
        None => String::new(),
    };
    header.insert_header(http::header::CONTENT_LENGTH, body.len())?;
    response_headers(route, vars, &mut header)?;
    Ok((header, body))
}

/// The head and body of a redirect of `route` to `to` (a `return` or a rewrite's), with Nginx's
/// page and the route's added headers.
pub fn redirect(
    route: &RouteConf,
    vars: &Vars<'_>,
    status: u16,
    to: &str,
) -> Result<(ResponseHeader, String)> {
    let mut header = ResponseHeader::build(status, Some(4))?;
    let to = HeaderValue::from_str(to).or_else(|_| HeaderValue::from_str(&encode_path(to)));
    header.insert_header(
        http::header::LOCATION,
        to.map_err(|e| Error::explain(ErrorType::HTTPStatus(400), e.to_string()))?,
    )?;
    header.insert_header(http::header::CONTENT_TYPE, "text/html")?;
    let body = page(status);
    header.insert_header(http::header::CONTENT_LENGTH, body.len())?;
    response_headers(route, vars, &mut header)?;
    Ok((header, body))
}

/// Sets the path of the request going upstream: the route's `replace_prefix` over `$uri`
/// (unless a `break` rewrite changed it, as Nginx ignores `proxy_pass`'s URI then), else the
/// rewritten URI (`rewritten`), encoded again; else the request goes as it was sent.
pub fn upstream_uri(
    route: &RouteConf,
    vars: &Vars<'_>,
    rewritten: Option<&rewrite::Rewritten>,
    upstream: &mut RequestHeader,
) -> Result<()> {
    let replaced = match &route.replace_prefix {
        Some(p) if !rewritten.is_some_and(|r| r.broke) => {
            vars.uri.strip_prefix(p.from.as_str()).map(|rest| format!("{}{rest}", p.to))
        }
        _ => None,
    };
    let new = match (replaced, rewritten) {
        (Some(path), _) => with_args(path, vars.args),
        (None, Some(r)) => with_args(r.path.clone(), &r.args),
        (None, None) => return Ok(()),
    };
    let uri = encode_path(&new);
    let uri = http::Uri::try_from(uri.as_str()).map_err(|e| {
        Error::explain(ErrorType::HTTPStatus(400), format!("the rewritten path {uri:?}: {e}"))
    })?;
    upstream.set_uri(uri);
    Ok(())
}

/// Sets and removes the route's request headers on the request going upstream
/// (`proxy_set_header`; a value that renders to no valid header value is not sent).
pub fn request_headers(route: &RouteConf, vars: &Vars<'_>, upstream: &mut RequestHeader) -> Result<()> {
    for (name, value) in &route.headers.set {
        match value.as_ref().map(|v| HeaderValue::from_str(&v.render(vars, None))) {
            Some(Ok(v)) => {
                upstream.insert_header(name.clone(), v)?;
            }
            None | Some(Err(_)) => {
                upstream.remove_header(name);
            }
        }
    }
    Ok(())
}

/// Statuses Nginx's `add_header` adds to without `always`.
const ADD_HEADER_STATUSES: [u16; 10] = [200, 201, 204, 206, 301, 302, 303, 304, 307, 308];

/// Hides the route's hidden headers from an answer and adds its headers (those without
/// `always` only on the statuses Nginx adds them to).
pub fn response_headers(route: &RouteConf, vars: &Vars<'_>, resp: &mut ResponseHeader) -> Result<()> {
    for name in &route.headers.hide {
        resp.remove_header(name);
    }
    let status = resp.status.as_u16();
    for (name, value, always) in &route.headers.add {
        if *always || ADD_HEADER_STATUSES.contains(&status) {
            if let Ok(v) = HeaderValue::from_str(&value.render(vars, None)) {
                resp.append_header(name.clone(), v)?;
            }
        }
    }
    Ok(())
}

/// The rewritten path with the client's query, by Nginx's rule.
pub(crate) fn with_args(new: String, args: &str) -> String {
    if let Some(own) = new.strip_suffix('?') {
        return own.to_string();
    }
    match (new.contains('?'), args.is_empty()) {
        (_, true) => new,
        (true, false) => format!("{new}&{args}"),
        (false, false) => format!("{new}?{args}"),
    }
}

/// The head and body of the page a shop route's visitor is shown for `status` (502, 504):
/// HTML (the route's `error_page` for it, else the built-in page), with the route's
/// `add_header_always` fields.
pub fn error_page(route: &RouteConf, vars: &Vars<'_>, status: u16) -> Result<(ResponseHeader, Vec<u8>)> {
    let own = route.error_pages.iter().find(|(s, _)| *s == status).map(|(_, page)| page.to_vec());
    let body = own.unwrap_or_else(|| page(status).into_bytes());
    let mut header = crate::answer::head(status, "text/html", body.len())?;
    response_headers(route, vars, &mut header)?;
    Ok((header, body))
}

/// The page a shop visitor is shown for `status` when the gateway answers it (a redirect, an
/// unreachable or slow upstream), like Nginx's own.
pub fn page(status: u16) -> String {
    let reason = http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("");
    format!(
        "<html>\r\n<head><title>{status} {reason}</title></head>\r\n<body>\r\n\
         <center><h1>{status} {reason}</h1></center>\r\n<hr><center>gateway</center>\r\n</body>\r\n</html>\r\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_keeps_the_query_as_nginx() {
        assert_eq!(with_args("/n".into(), "a=1"), "/n?a=1");
        assert_eq!(with_args("/n?b=2".into(), "a=1"), "/n?b=2&a=1");
        assert_eq!(with_args("/n?".into(), "a=1"), "/n");
        assert_eq!(with_args("/n?b=2?".into(), "a=1"), "/n?b=2");
        assert_eq!(with_args("/n".into(), ""), "/n");
        assert!(page(504).contains("<title>504 Gateway Timeout</title>"));
    }
}
