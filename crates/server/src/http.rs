//! The HTTP API: health, objects, sessions, disks, recording and Prometheus metrics.
//!
//! A small, versioned JSON API under `/api/v1/`, plus `/metrics` in the Prometheus text format.
//! It reads state through the same command channels as everything else (the session manager, the
//! scheduler and sender threads), so it never locks the streaming path. `PUT
//! /api/v1/record/{name}?rate=…` records the request body as an object ([`crate::recorder`]).
//! Media delivery (`/objects/…`, `/hls/…`, `/watch/…`) is [`crate::http_media`].

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{delete, get, put};
use crossbeam_channel::Sender;
use isochron_base::{DiskId, StreamId};
use isochron_diskio::Store;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::library::{Library, ObjectSummary};
use crate::recorder::{RecordError, RecordParams, Recorders};
use crate::reorg::{ReorgCommand, ReorgStatus};
use crate::sched_thread::{SchedCommand, SchedSnapshot};
use crate::sender::{SenderCommand, SenderStats};
use crate::sessions::SessionCommand;

/// Handles the API needs.
#[derive(Clone)]
pub(crate) struct ApiState {
    pub(crate) recorders: Arc<Recorders>,
    pub(crate) library: Arc<Library>,
    pub(crate) sessions: mpsc::UnboundedSender<SessionCommand>,
    pub(crate) sched: Sender<SchedCommand>,
    pub(crate) sender: Sender<SenderCommand>,
    pub(crate) reorg: mpsc::UnboundedSender<ReorgCommand>,
    pub(crate) store: Arc<Store>,
    pub(crate) media: Arc<crate::http_media::MediaState>,
}

/// The router.
pub(crate) fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/v1/objects", get(objects))
        .route("/api/v1/sessions", get(sessions))
        .route("/api/v1/disks", get(disks).post(add_disk))
        .route("/api/v1/disks/{id}", delete(remove_disk))
        .route("/api/v1/record/{name}", put(record))
        .route("/metrics", get(metrics))
        .route("/objects/{name}", get(crate::http_media::object))
        .route("/hls/{name}/{file}", get(crate::http_media::hls))
        .route("/watch/{name}", get(crate::http_media::watch))
        .route("/assets/vendor/hls.light.min.js", get(crate::http_media::hls_js))
        .with_state(state)
}

async fn objects(State(s): State<ApiState>) -> Json<Vec<ObjectSummary>> {
    Json(s.library.list().iter().map(|e| ObjectSummary::from(&e.record)).collect())
}

async fn sessions(State(s): State<ApiState>) -> impl IntoResponse {
    let (tx, rx) = oneshot::channel();
    let (stx, srx) = oneshot::channel::<SchedSnapshot>();
    if s.sessions.send(SessionCommand::List { reply: tx }).is_err()
        || s.sched.send(SchedCommand::Stats { reply: stx }).is_err()
    {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let (Ok(mut list), Ok(sched)) = (rx.await, srx.await) else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    for session in &mut list {
        if let Some(st) = sched.per_stream.get(&StreamId(session.stream)) {
            session.missed_deadlines = st.missed;
            session.blocks_delivered = st.delivered;
        }
    }
    Json(list).into_response()
}

/// One disk in `GET /api/v1/disks`.
#[derive(Serialize)]
struct DiskJson {
    id: u16,
    path: String,
    blocks: u64,
    state: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

/// `GET /api/v1/disks`: `{"disks":[{"id","path","blocks","state"}],"reorganisation":{…}}`.
async fn disks(State(s): State<ApiState>) -> impl IntoResponse {
    let store = Arc::clone(&s.store);
    let usage = match tokio::task::spawn_blocking(move || store.disk_usage()).await {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let Some(reorg) = reorg_status(&s).await else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let disks: Vec<DiskJson> = usage
        .into_iter()
        .map(|(rec, u)| DiskJson {
            id: rec.id.0,
            path: rec.path.display().to_string(),
            blocks: u.blocks,
            state: format!("{:?}", rec.state).to_lowercase(),
            model: rec.model.map(|m| m.to_string()),
        })
        .collect();
    Json(serde_json::json!({ "disks": disks, "reorganisation": reorg })).into_response()
}

async fn reorg_status(s: &ApiState) -> Option<ReorgStatus> {
    let (tx, rx) = oneshot::channel();
    s.reorg.send(ReorgCommand::Status { reply: tx }).ok()?;
    rx.await.ok()
}

/// The body of `POST /api/v1/disks`.
#[derive(serde::Deserialize)]
struct AddDisk {
    /// `PATH` or `PATH,seek_ms=10,rate_mib_s=4`.
    spec: String,
}

/// `POST /api/v1/disks` `{"spec": "PATH[,seek_ms=…,rate_mib_s=…]"}`: 202 with the new disk's id;
/// the reorganisation runs in the background (follow it with `GET /api/v1/disks`).
async fn add_disk(State(s): State<ApiState>, Json(body): Json<AddDisk>) -> impl IntoResponse {
    let (tx, rx) = oneshot::channel();
    if s.reorg.send(ReorgCommand::AddDisk { spec: body.spec, reply: tx }).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match rx.await {
        Ok(Ok(id)) => {
            (StatusCode::ACCEPTED, Json(serde_json::json!({ "id": id.0 }))).into_response()
        }
        Ok(Err(e)) => {
            (StatusCode::CONFLICT, Json(serde_json::json!({ "error": e }))).into_response()
        }
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// `DELETE /api/v1/disks/{id}`: 202; the disk drains in the background and is then retired.
async fn remove_disk(State(s): State<ApiState>, Path(id): Path<u16>) -> impl IntoResponse {
    let (tx, rx) = oneshot::channel();
    if s.reorg.send(ReorgCommand::RemoveDisk { id: DiskId(id), reply: tx }).is_err() {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    match rx.await {
        Ok(Ok(())) => (StatusCode::ACCEPTED, Json(serde_json::json!({ "id": id }))).into_response(),
        Ok(Err(e)) => {
            (StatusCode::CONFLICT, Json(serde_json::json!({ "error": e }))).into_response()
        }
        Err(_) => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// `PUT /api/v1/record/{name}?rate=4M[&peak=6M]` with an MPEG-TS body: records it as object
/// `name`, read at `rate` (see [`crate::recorder`]). `201 Created` with the object's summary when
/// the body ends and the object is committed; errors are `{"error": "…"}` with `400` (bad name,
/// `rate` or `peak`), `409` (name taken or being recorded), `422` (not MPEG-TS, with the offset),
/// `503` (not admitted, with the reason), `408` (the body stalled) or `500` (a write failed).
async fn record(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    body: Body,
) -> Response {
    let params = match RecordParams::from_query(&query) {
        Ok(p) => p,
        Err(e) => return record_error(&e),
    };
    // Its own task: it sees the body through and cleans up even if the client goes away and
    // this exchange is dropped.
    let task = tokio::spawn(Arc::clone(&s.recorders).record(name, params, body));
    match task.await {
        Ok(Ok(report)) => (StatusCode::CREATED, Json(report)).into_response(),
        Ok(Err(e)) => record_error(&e),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({
                "error": format!("the recording task failed: {e}")
            })),
        )
            .into_response(),
    }
}

fn record_error(e: &RecordError) -> Response {
    (e.status(), Json(serde_json::json!({ "error": e.to_string() }))).into_response()
}

async fn metrics(State(s): State<ApiState>) -> impl IntoResponse {
    let (stx, srx) = oneshot::channel::<SchedSnapshot>();
    let (ptx, prx) = oneshot::channel::<SenderStats>();
    let (ltx, lrx) = oneshot::channel();
    let _ = s.sched.send(SchedCommand::Stats { reply: stx });
    let _ = s.sender.send(SenderCommand::Stats { reply: ptx });
    let _ = s.sessions.send(SessionCommand::List { reply: ltx });
    let (Ok(sched), Ok(send), Ok(list)) = (srx.await, prx.await, lrx.await) else {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    };
    let reorg = reorg_status(&s).await.unwrap_or_default();
    let mut out = String::new();
    let mut metric = |name: &str, kind: &str, help: &str, value: f64| {
        let _ = writeln!(out, "# HELP isochron_{name} {help}\n# TYPE isochron_{name} {kind}");
        let _ = writeln!(out, "isochron_{name} {value}");
    };
    let c = sched.stats.cache;
    metric("sessions", "gauge", "RTSP sessions.", list.len() as f64);
    metric("streams", "gauge", "Streams admitted by the scheduler.", sched.streams as f64);
    metric("objects", "gauge", "Playable objects.", s.library.list().len() as f64);
    metric("packets_sent_total", "counter", "RTP packets sent.", send.pacer.packets as f64);
    metric(
        "payload_bytes_sent_total",
        "counter",
        "RTP payload bytes sent.",
        send.pacer.payload_bytes as f64,
    );
    metric(
        "send_errors_total",
        "counter",
        "Datagrams the kernel refused.",
        send.send_errors as f64,
    );
    metric("sendmmsg_calls_total", "counter", "sendmmsg calls.", send.syscalls as f64);
    metric(
        "underruns_total",
        "counter",
        "Packets due whose block was not in memory.",
        send.pacer.underruns as f64,
    );
    metric(
        "pace_changes_total",
        "counter",
        "Changes of a stream's pace (MTFC rate requests, SET_PARAMETER x-isochron-rate).",
        send.pacer.pace_changes as f64,
    );
    metric(
        "packet_lateness_max_seconds",
        "gauge",
        "Largest delay of a packet past its send time.",
        send.pacer.lateness_us_max as f64 / 1e6,
    );
    metric(
        "disk_bytes_total",
        "counter",
        "Block bytes delivered from disk reads (Yima B_disk).",
        c.bytes_from_disk as f64,
    );
    metric(
        "cache_bytes_total",
        "counter",
        "Block bytes delivered from the cache (Yima B_cache).",
        c.bytes_from_cache as f64,
    );
    metric("cache_used_bytes", "gauge", "Bytes held by the block cache.", sched.cache_bytes as f64);
    let st = &sched.stats;
    for (name, help, v) in [
        ("reads_total", "Block reads issued.", st.reads),
        ("writes_total", "Recording block writes issued.", st.writes),
        ("late_reads_total", "Block reads finished after their deadline.", st.late_reads),
        ("failed_reads_total", "Block reads that failed.", st.failed_reads),
        ("missed_deadlines_total", "Blocks not in memory by their deadline.", st.missed_deadlines),
        (
            "missed_write_deadlines_total",
            "Recorded blocks not on disk by their deadline.",
            st.missed_write_deadlines,
        ),
        ("cycles_total", "Scheduler cycles ended.", st.cycles),
        (
            "cycles_with_misses_total",
            "Cycles in which a deadline was missed.",
            st.cycles_with_misses,
        ),
        ("admission_accepts_total", "Streams admitted.", st.admitted),
        ("admission_rejects_total", "Streams rejected.", st.rejected),
    ] {
        metric(name, "counter", help, v as f64);
    }
    let h = sched.http;
    for (name, help, v) in [
        ("http_block_requests_total", "Blocks HTTP delivery asked the scheduler for.", h.requests),
        (
            "http_cache_hits_total",
            "HTTP block requests answered from the block cache.",
            h.cache_hits,
        ),
        (
            "http_disk_reads_total",
            "Non-real-time disk reads issued for HTTP delivery.",
            h.disk_reads,
        ),
        ("http_failed_reads_total", "HTTP delivery's block reads that failed.", h.failed),
        ("http_block_bytes_total", "Block bytes handed to HTTP responses.", h.bytes),
    ] {
        metric(name, "counter", help, v as f64);
    }
    metric(
        "http_reads_in_flight",
        "gauge",
        "HTTP delivery's disk reads queued or in service.",
        h.in_flight as f64,
    );
    let rec = s.recorders.stats();
    metric("recordings", "gauge", "Recordings in progress.", rec.active as f64);
    metric(
        "recorded_bytes_total",
        "counter",
        "Request body bytes accepted by recordings.",
        rec.bytes as f64,
    );
    metric("recordings_committed_total", "counter", "Recordings committed.", rec.committed as f64);
    metric(
        "recordings_failed_total",
        "counter",
        "Recordings that failed after admission (nothing committed).",
        rec.failed as f64,
    );
    metric(
        "reorg_running",
        "gauge",
        "1 while a disk reorganisation runs.",
        f64::from(u8::from(reorg.state == "running")),
    );
    metric(
        "reorg_moved_blocks",
        "gauge",
        "Blocks the current (or last) reorganisation has copied.",
        reorg.moved as f64,
    );
    metric(
        "reorg_total_blocks",
        "gauge",
        "Blocks the current (or last) reorganisation must copy.",
        reorg.total as f64,
    );
    metric(
        "reorg_moved_bytes",
        "gauge",
        "Bytes the current (or last) reorganisation has copied.",
        reorg.bytes as f64,
    );
    let _ = writeln!(out, "# HELP isochron_disk_queue_depth Reads queued or in flight per disk.");
    let _ = writeln!(out, "# TYPE isochron_disk_queue_depth gauge");
    for (d, n) in &sched.disk_queues {
        let _ = writeln!(out, "isochron_disk_queue_depth{{disk=\"{d}\"}} {n}");
    }
    let _ = writeln!(
        out,
        "# HELP isochron_disk_admitted_utilisation Predicted share of each disk's real-time cycle \
         time in use by admitted streams, 0..1.\n# TYPE isochron_disk_admitted_utilisation gauge"
    );
    for (d, u) in &sched.utilisation {
        let _ = writeln!(out, "isochron_disk_admitted_utilisation{{disk=\"{d}\"}} {u}");
    }
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out).into_response()
}
