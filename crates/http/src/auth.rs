//! Every HTTP request through the access policy ([`isochron_auth::Authority`]) before its handler.
//!
//! Why one guard in front of the router rather than checks in handlers: a new endpoint is
//! covered the day it is added. [`needs`] maps a request to the permission it needs, and anything
//! it does not know that is not a GET or HEAD needs `admin` (deny by default). Reads name their
//! object (`/objects/NAME`, `/hls/NAME/…`, `/watch/NAME`) so a user's object globs apply.
//!
//! Node-to-node calls (`/api/v1/cluster/…`, and the fsck fan-out `POST /api/v1/fsck?scope=self`)
//! carry no user's credentials: they are open to cluster members' addresses and loopback only,
//! checked by their handlers, and a user's credentials do not open them to anyone else.
//!
//! A refusal is `401` with `WWW-Authenticate: Basic realm="isochron", Bearer realm="isochron"`
//! (RFC 9110 §11.6.1, RFC 7617, RFC 6750) or `403`, in the API's JSON error shape under `/api/`.

use std::net::{IpAddr, SocketAddr};

use axum::body::Body;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use isochron_auth::{Access, Credentials, Decision, Permission};

use crate::error::{ApiError, error};
use crate::state::ApiState;

/// What the request needs: `None` for what is open to all (`/healthz`) and for the node-to-node
/// calls (checked by membership in their handlers).
pub(crate) fn needs<'a>(method: &Method, path: &'a str, query: Option<&str>) -> Needs<'a> {
    if path == "/healthz" || path.starts_with("/api/v1/cluster/") {
        return Needs::Open;
    }
    if method == Method::POST
        && path == "/api/v1/fsck"
        && query.is_some_and(|q| q.split('&').any(|kv| kv == "scope=self"))
    {
        return Needs::Open;
    }
    let object =
        |prefix: &str| path.strip_prefix(prefix).map(|rest| rest.split('/').next().unwrap_or(rest));
    if method == Method::GET || method == Method::HEAD {
        let object = object("/objects/")
            .or_else(|| object("/hls/"))
            .or_else(|| object("/dash/"))
            .or_else(|| object("/watch/"));
        return Needs::Permission(Permission::Read, object);
    }
    if method == Method::PUT
        && let Some(name) = object("/api/v1/record/")
    {
        return Needs::Permission(Permission::Record, Some(name));
    }
    Needs::Permission(Permission::Admin, None)
}

/// The endpoints that list sessions or feeds: their ids and client (publisher) addresses are
/// shown to `admin` only ([`SeesClients`]).
const LISTS_SESSIONS: [&str; 3] = ["/api/v1/sessions", "/api/v1/overview", "/api/v1/live"];

/// Whether the requester may see session ids and client addresses (it has `admin`), set by
/// [`crate::auth::guard`] on the requests that list sessions.
#[derive(Clone, Copy, Debug)]
pub(crate) struct SeesClients(pub(crate) bool);

/// What a request needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Needs<'a> {
    /// Nothing (open, or checked by its handler).
    Open,
    /// A permission, for an object when it names one.
    Permission(Permission, Option<&'a str>),
}

/// The middleware: decides, then runs the handler or refuses.
pub(crate) async fn guard(
    State(s): State<ApiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let Needs::Permission(permission, object) = needs(req.method(), &path, req.uri().query())
    else {
        return next.run(req).await;
    };
    let credentials = match req.headers().get(header::AUTHORIZATION).map(HeaderValue::to_str) {
        None => None,
        Some(Ok(v)) => match Credentials::from_authorization(v) {
            Ok(c) => Some(c),
            Err(e) => return refuse(&path, StatusCode::UNAUTHORIZED, e.to_string()),
        },
        Some(Err(_)) => {
            return refuse(&path, StatusCode::UNAUTHORIZED, "Authorization is not text".into());
        }
    };
    let object = object.map(percent_decoded);
    let access = Access {
        permission,
        object: object.as_deref(),
        credentials: credentials.as_ref(),
        trusted_peer: is_trusted(&s, peer.ip()),
        secure: req.extensions().get::<crate::OverTls>().is_some(),
        method: req.method().as_str(),
        now_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let decision = s.auth.check(&access);
    let sees = matches!(decision, Decision::Allow { .. })
        && LISTS_SESSIONS.contains(&path.as_str())
        && matches!(
            s.auth.check(&Access { permission: Permission::Admin, object: None, ..access }),
            Decision::Allow { .. }
        );
    match decision {
        Decision::Allow { .. } => {
            let mut req = req;
            req.extensions_mut().insert(SeesClients(sees));
            next.run(req).await
        }
        Decision::Unauthorized(why) => {
            s.auth_refusals.unauthorized.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(%peer, %path, %why, "HTTP request refused (401)");
            refuse(&path, StatusCode::UNAUTHORIZED, why)
        }
        Decision::Forbidden(why) => {
            s.auth_refusals.forbidden.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::info!(%peer, %path, %why, "HTTP request refused (403)");
            refuse(&path, StatusCode::FORBIDDEN, why)
        }
    }
}

fn refuse(path: &str, status: StatusCode, why: String) -> Response {
    let mut resp = if path.starts_with("/api/") {
        ApiError(status, why).into_response()
    } else {
        (status, Body::from(format!("{why}\n"))).into_response()
    };
    if status == StatusCode::UNAUTHORIZED {
        resp.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Basic realm=\"isochron\", charset=\"UTF-8\""),
        );
        resp.headers_mut().append(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"isochron\""),
        );
    }
    resp
}

/// `%XX` decoded (object names in paths are percent-encoded by clients); invalid escapes and
/// non-UTF-8 results are kept as written, which matches no name they could stand for.
fn percent_decoded(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) =
                (b.get(i + 1).copied().and_then(hex), b.get(i + 2).copied().and_then(hex))
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or_else(|_| s.to_owned())
}

/// Whether `peer` is trusted: loopback, or a live member of this node's cluster (node-to-node
/// calls; with no `[auth]` users, also record and admin, `crate::auth`).
pub(crate) fn is_trusted(s: &ApiState, peer: IpAddr) -> bool {
    peer.is_loopback() || s.cluster.as_ref().is_some_and(|v| v.member_ips().contains(&peer))
}

/// Node-to-node requests: `403` naming the peer unless it is a member or loopback.
pub(crate) fn refuse_non_member(s: &ApiState, peer: SocketAddr) -> Option<Response> {
    (!is_trusted(s, peer.ip()))
        .then(|| error(StatusCode::FORBIDDEN, format!("{} is not a cluster member", peer.ip())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_needs_what_it_does() {
        use Needs::{Open, Permission as P};
        use Permission::{Admin, Read, Record};
        let n = |m: Method, p: &'static str, q: Option<&str>| needs(&m, p, q);
        assert_eq!(n(Method::GET, "/healthz", None), Open);
        assert_eq!(n(Method::GET, "/", None), P(Read, None));
        assert_eq!(n(Method::GET, "/api/v1/objects", None), P(Read, None));
        assert_eq!(n(Method::GET, "/objects/demo", None), P(Read, Some("demo")));
        assert_eq!(n(Method::HEAD, "/hls/demo/index.m3u8", None), P(Read, Some("demo")));
        assert_eq!(n(Method::GET, "/watch/demo", None), P(Read, Some("demo")));
        assert_eq!(n(Method::GET, "/dash/demo/manifest.mpd", None), P(Read, Some("demo")));
        assert_eq!(
            n(Method::PUT, "/api/v1/record/cam-1", Some("rate=5M")),
            P(Record, Some("cam-1"))
        );
        assert_eq!(n(Method::PUT, "/api/v1/objects/x", None), P(Admin, None));
        assert_eq!(n(Method::POST, "/api/v1/disks", None), P(Admin, None));
        assert_eq!(n(Method::DELETE, "/api/v1/disks/0", None), P(Admin, None));
        assert_eq!(n(Method::DELETE, "/api/v1/nodes/n3", None), P(Admin, None));
        assert_eq!(n(Method::POST, "/api/v1/fsck", Some("repair=1")), P(Admin, None));
        assert_eq!(n(Method::POST, "/api/v1/fsck", Some("scope=self&repair=0")), Open);
        assert_eq!(n(Method::PUT, "/api/v1/cluster/blocks/1/2/3", None), Open);
        // Unknown writes need admin.
        assert_eq!(n(Method::PATCH, "/anything", None), P(Admin, None));
        assert_eq!(n(Method::POST, "/objects/demo", None), P(Admin, None));
    }

    #[test]
    fn object_names_are_percent_decoded() {
        assert_eq!(percent_decoded("a%20b"), "a b");
        assert_eq!(percent_decoded("caf%C3%A9"), "café");
        assert_eq!(percent_decoded("bad%zz"), "bad%zz");
        assert_eq!(percent_decoded("%ff"), "%ff");
    }
}
