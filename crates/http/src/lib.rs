//! isochron's HTTP side: the JSON API, `/metrics`, the dashboard, and media over HTTP.
//!
//! ```text
//!  HTTP request ──axum──▶ api (JSON under /api/v1/, /metrics, /healthz)
//!                           ├─ state::gather: List / Stats / Progress / Status to every owner
//!                           └─ PUT /api/v1/record/NAME ──▶ isochron_server::recorder
//!               ──────▶ media (/objects, /hls, /watch) ──SchedCommand::HttpRead──▶ sched thread
//!               ──────▶ dash (/dash: the manifest; its segments are media's)
//!               ──────▶ dashboard (/, embedded assets)
//! ```
//!
//! Why a crate of its own: HTTP is a client of the server's owners, not one of them. It holds no
//! state of the server's; it asks the session manager, the scheduler and sender threads and the
//! reorganiser over their command channels (the [`isochron_server::Handles`] that
//! [`isochron_server::start`] hands out), and reads blocks only through the scheduler thread. So
//! it sits above `isochron-server` and `isochron-dataplane` and neither of them knows it. The
//! binary binds nothing itself: [`isochron_server::start`] binds the HTTP listener (so its
//! address and any bind error come with the server's own), and [`serve`] serves it.
//!
//! The modules depend downward only (`scripts/check-arch.sh` finds any cycle): [`range`]
//! (sans-IO, fuzzed on its own) ← `media` ← `dash`; `error` ← `state` (the handles and the one
//! snapshot) ← `auth` (the access policy, who is a trusted peer) ← `cluster` (node-to-node
//! calls, the nodes' JSON), `fsck`; `state` ← `media`, `metrics`; `api` routes everything,
//! `dashboard` included.

mod api;
mod auth;
mod cluster;
mod dash;
mod dashboard;
mod error;
mod fsck;
mod master;
mod media;
mod metrics;
pub mod range;
mod state;

use std::sync::Arc;

use isochron_server::Handles;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::state::{ApiState, MediaState};

/// How long a client may take to send a request's headers (slowloris); then the connection is
/// closed.
pub const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Serves HTTP on `listener` from `handles` until the task is aborted. Must run inside a tokio
/// runtime.
///
/// Each connection takes a slot of `handles.http_limits` (total and per client address, the
/// caps the RTSP listener has too: a client over one gets `503` with `Retry-After` and the
/// connection closes) and must send a request's headers within [`HEADER_TIMEOUT`]. Served with
/// hyper directly rather than `axum::serve`, which has neither (its connections have no timer).
///
/// With `handles.tls` the port speaks HTTPS too: a connection that opens with a TLS handshake is
/// served over TLS (`isochron_server::tls`), and Basic credentials are taken over it from any
/// address.
pub fn serve(listener: TcpListener, handles: Handles) -> JoinHandle<()> {
    let Handles {
        recorders,
        library,
        sessions,
        sched,
        sender,
        reorg,
        transcoder,
        transcode,
        store,
        node,
        hls_segment,
        cluster,
        auth,
        tls,
        rtsp_limits,
        http_limits,
    } = handles;
    let app = api::router(ApiState {
        recorders,
        library,
        sessions,
        sched,
        sender,
        reorg,
        transcoder,
        transcode: Arc::new(transcode),
        store,
        media: Arc::new(MediaState::new(hls_segment)),
        node: Arc::new(node),
        cluster: cluster.clone(),
        auth,
        auth_refusals: Arc::default(),
        rtsp_limits,
        http_limits: Arc::clone(&http_limits),
    });
    tokio::spawn(async move {
        loop {
            let (stream, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    warn!(error = %e, "HTTP accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let member = cluster.as_ref().is_some_and(|v| v.member_ips().contains(&peer.ip()));
            let permit = match http_limits.admit_as(peer.ip(), !peer.ip().is_loopback() && !member)
            {
                Ok(p) => p,
                Err(why) => {
                    tracing::debug!(%peer, ?why, "HTTP connection refused");
                    tokio::spawn(refuse_connection(stream));
                    continue;
                }
            };
            let app = app.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let _permit = permit;
                match tls {
                    Some(tls) if opens_with_tls(&stream).await => {
                        let accept =
                            tokio::time::timeout(HEADER_TIMEOUT, tls.acceptor().accept(stream));
                        match accept.await {
                            Ok(Ok(stream)) => serve_connection(stream, peer, true, app).await,
                            Ok(Err(e)) => {
                                tracing::debug!(%peer, error = %e, "TLS handshake failed")
                            }
                            Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
                        }
                    }
                    _ => serve_connection(stream, peer, false, app).await,
                }
            });
        }
    })
}

/// Marks a request that came over TLS (a request extension): Basic credentials are taken from
/// anywhere over it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OverTls;

/// Whether a new connection's first byte is a TLS handshake record (`isochron_server::tls`):
/// waits for it at most [`HEADER_TIMEOUT`]; a client that sends nothing is served as plain HTTP,
/// whose header timeout then closes it.
async fn opens_with_tls(stream: &tokio::net::TcpStream) -> bool {
    let mut first = [0u8; 1];
    matches!(
        tokio::time::timeout(HEADER_TIMEOUT, stream.peek(&mut first)).await,
        Ok(Ok(1)) if first[0] == isochron_server::tls::HANDSHAKE_RECORD
    )
}

/// Serves HTTP/1.1 on one connection (plain or TLS) until it closes.
async fn serve_connection<S>(stream: S, peer: std::net::SocketAddr, tls: bool, app: axum::Router)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let service = hyper::service::service_fn(move |mut req| {
        req.extensions_mut().insert(axum::extract::ConnectInfo(peer));
        if tls {
            req.extensions_mut().insert(OverTls);
        }
        tower::ServiceExt::oneshot(app.clone(), req)
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!(%peer, error = %e, "HTTP connection ended");
    }
}

/// A `503` with `Retry-After` to a connection over a cap, then the close.
async fn refuse_connection(mut stream: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt as _;
    let body = "too many connections from this client or in all; retry later\n";
    let resp = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\nConnection: close\r\n\
         Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ =
        tokio::time::timeout(std::time::Duration::from_secs(2), stream.write_all(resp.as_bytes()))
            .await;
}
