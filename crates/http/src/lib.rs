//! isochron's HTTP side: the JSON API, `/metrics`, the dashboard, and media over HTTP.
//!
//! ```text
//!  HTTP request ──axum──▶ api (JSON under /api/v1/, /metrics, /healthz)
//!                           ├─ state::gather: List / Stats / Progress / Status to every owner
//!                           └─ PUT /api/v1/record/NAME ──▶ isochron_server::recorder
//!               ──────▶ media (/objects, /hls, /watch) ──SchedCommand::HttpRead──▶ sched thread
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
//! The modules depend downward only: [`range`] (sans-IO, fuzzed on its own) ← `media`;
//! `error` ← `state` (the handles and the one snapshot) ← `media`, `metrics`, `api`; `api`
//! routes everything, `dashboard` included.

mod api;
mod auth;
mod cluster;
mod dashboard;
mod error;
mod fsck;
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

/// Serves HTTP on `listener` from `handles` until the task is aborted. Must run inside a tokio
/// runtime.
pub fn serve(listener: TcpListener, handles: Handles) -> JoinHandle<()> {
    let Handles {
        recorders,
        library,
        sessions,
        sched,
        sender,
        reorg,
        store,
        node,
        hls_segment,
        cluster,
        auth,
        rtsp_limits,
    } = handles;
    let app = api::router(ApiState {
        recorders,
        library,
        sessions,
        sched,
        sender,
        reorg,
        store,
        media: Arc::new(MediaState::new(hls_segment)),
        node: Arc::new(node),
        cluster,
        auth,
        auth_refusals: Arc::default(),
        rtsp_limits,
    });
    tokio::spawn(async move {
        let app = app.into_make_service_with_connect_info::<std::net::SocketAddr>();
        if let Err(e) = axum::serve(listener, app).await {
            warn!(error = %e, "HTTP server stopped");
        }
    })
}
