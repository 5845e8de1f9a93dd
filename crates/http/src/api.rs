//! The HTTP API: health, objects, sessions, disks, nodes, reorganisation, admission decisions,
//! the dashboard's overview, recording, Prometheus metrics, and the dashboard itself.
//!
//! A small, versioned JSON API under `/api/v1/` (documented in `docs/API.md`), plus `/metrics` in
//! the Prometheus text format ([`crate::metrics`]) and the live dashboard at `/`
//! ([`crate::dashboard`]). It reads state through the same command channels as everything else
//! (the session manager, the scheduler, sender and reorganiser), so it never locks the streaming
//! path: one [`gather`] asks every owner at once and the handlers shape the answers. Errors are
//! `{"error": "…"}` with a matching status ([`ApiError`]). `PUT /api/v1/record/{name}?rate=…`
//! records the request body as an object ([`isochron_server::recorder`]).
//! Media delivery (`/objects/…`, `/hls/…`, `/watch/…`) is [`crate::media`]; [`router`] puts every
//! route in one place.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{DefaultBodyLimit, Path, Query, State};
use axum::http::{StatusCode, Uri, header};
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{delete, get, post, put};
use futures_util::StreamExt as _;
use isochron_base::DiskId;
use isochron_dataplane::admission_log::{AdmissionEntry, DEFAULT_CAPACITY};
use isochron_dataplane::sched_thread::{SchedCommand, SchedSnapshot};
use isochron_media::ContainerKind;
use isochron_server::library::ObjectSummary;
use isochron_server::recorder::live::LiveStatus;
use isochron_server::recorder::{RecordError, RecordParams};
use isochron_server::reorg::{ReorgCommand, ReorgStatus};
use isochron_server::sessions::SessionInfo;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::auth::SeesClients;
use crate::cluster::node_json;
use crate::error::ApiError;
use crate::state::{ApiState, gather};

/// The largest block a node takes from another: an encoded block of the largest block size.
const BLOCK_BODY_LIMIT: usize = isochron_store::block::MAX_BLOCK_SIZE.0 as usize + (1 << 20);

/// The router.
pub(crate) fn router(state: ApiState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/api/v1/objects", get(objects))
        .route("/api/v1/sessions", get(sessions))
        .route("/api/v1/live", get(live))
        .route("/api/v1/disks", get(disks).post(add_disk))
        .route("/api/v1/disks/{id}", delete(remove_disk))
        .route("/api/v1/nodes", get(nodes))
        .route("/api/v1/reorg", get(reorg))
        .route("/api/v1/admission", get(admission))
        .route("/api/v1/overview", get(overview))
        .route("/api/v1/record/{name}", put(record))
        .route("/api/v1/objects/{name}", put(crate::cluster::ingest))
        .route(
            "/api/v1/cluster/blocks/{disk}/{object}/{index}",
            put(crate::cluster::put_block).layer(DefaultBodyLimit::max(BLOCK_BODY_LIMIT)),
        )
        .route(
            "/api/v1/cluster/moves/{disk}/{object}/{index}",
            get(crate::cluster::get_move)
                .put(crate::cluster::put_move)
                .layer(DefaultBodyLimit::max(BLOCK_BODY_LIMIT)),
        )
        .route("/api/v1/cluster/feeds/{name}", get(crate::cluster::get_feed))
        .route("/api/v1/nodes/{name}", delete(crate::cluster::remove_node))
        .route("/api/v1/fsck", post(crate::fsck::fsck))
        .route("/api/v1/transcode", get(transcode_jobs))
        .route("/metrics", get(metrics))
        .route("/objects/{name}", get(crate::media::object))
        .route("/hls/{name}/{file}", get(crate::media::hls))
        .route("/hls/{name}/{track}/{file}", get(crate::media::hls_track))
        .route("/dash/{name}/{file}", get(crate::dash::serve))
        .route("/assets/vendor/dash.mediaplayer.min.js", get(crate::media::dash_js))
        .route("/watch/{name}", get(crate::media::watch))
        .route("/assets/vendor/hls.light.min.js", get(crate::media::hls_js))
        .merge(crate::dashboard::router())
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::auth::guard))
        .with_state(state)
}

/// Unknown paths: a JSON `404` under `/api/`, plain text elsewhere.
async fn not_found(uri: Uri) -> Response {
    if uri.path().starts_with("/api/") {
        ApiError(StatusCode::NOT_FOUND, format!("no such endpoint: {}", uri.path())).into_response()
    } else {
        (StatusCode::NOT_FOUND, "not found\n").into_response()
    }
}

async fn objects(State(s): State<ApiState>) -> Json<Vec<ObjectSummary>> {
    Json(s.library.list().iter().map(|e| ObjectSummary::from(&e.record)).collect())
}

/// `GET /api/v1/sessions`: every RTSP session with its scheduler and sender counters; session
/// ids and client addresses only to those with the `admin` permission ([`redacted`]).
async fn sessions(
    State(s): State<ApiState>,
    sees: Option<axum::Extension<SeesClients>>,
) -> Result<Json<Vec<SessionInfo>>, ApiError> {
    Ok(Json(redacted(gather(&s).await?.sessions, sees)))
}

/// `GET /api/v1/live`: the feeds being published and recorded, with their viewers
/// (`docs/API.md`); publishers' addresses only to those with the `admin` permission, as for
/// sessions.
async fn live(
    State(s): State<ApiState>,
    sees: Option<axum::Extension<SeesClients>>,
) -> Result<Json<Vec<LiveStatus>>, ApiError> {
    let sessions = gather(&s).await?.sessions;
    Ok(Json(live_feeds(&s, &sessions, sees)))
}

/// The feeds in progress with their viewers among `sessions` (those playing them); the
/// publishers' addresses only for `sees`.
fn live_feeds(
    s: &ApiState,
    sessions: &[SessionInfo],
    sees: Option<axum::Extension<SeesClients>>,
) -> Vec<LiveStatus> {
    let mut feeds = s.recorders.live_feeds();
    // In a cluster, the feeds published on other nodes that this one serves too.
    let remote = s.library.remote_live();
    feeds.extend(remote.iter().map(|(p, f)| LiveStatus::of_remote(p, f)));
    let sees = sees.is_some_and(|axum::Extension(SeesClients(yes))| yes);
    for f in &mut feeds {
        f.viewers = sessions.iter().filter(|v| v.object == f.name && v.state == "playing").count();
        if !sees {
            f.publisher.clear();
        }
    }
    feeds
}

/// `sessions` as `sees` may see them: without `admin`, each id is replaced by its stream's
/// number and the client address is blank. A session id is all it takes to act on a session from
/// its client's address, and an address says who watches what (RFC 2326 §16).
fn redacted(
    mut sessions: Vec<SessionInfo>,
    sees: Option<axum::Extension<SeesClients>>,
) -> Vec<SessionInfo> {
    if !sees.is_some_and(|axum::Extension(SeesClients(yes))| yes) {
        for s in &mut sessions {
            s.id = format!("stream-{}", s.stream);
            s.client.clear();
        }
    }
    sessions
}

/// One disk in `GET /api/v1/disks`, `/api/v1/nodes` and the overview.
#[derive(Clone, Debug, Serialize)]
struct DiskJson {
    /// The disk's id.
    id: u16,
    /// Its directory.
    path: String,
    /// Block files on it (`GET /api/v1/disks` only: counting them reads the directory).
    #[serde(skip_serializing_if = "Option::is_none")]
    blocks: Option<u64>,
    /// `active`, `joining`, `draining` or `retired`.
    state: String,
    /// The emulation model, for an emulated disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    /// Real-time IOs queued or in flight now.
    queue: usize,
    /// Real-time block reads completed (counter).
    reads: u64,
    /// Bytes of those reads (counter; the dashboard derives the read bandwidth from it).
    read_bytes: u64,
    /// Bytes of reorganisation copies read or written on it (counter).
    nrt_bytes: u64,
    /// Seconds its IO thread has spent on real-time IO (counter).
    rt_busy_s: f64,
    /// Seconds its IO thread has spent on reorganisation copies (counter).
    nrt_busy_s: f64,
    /// Failed IOs (counter).
    errors: u64,
    /// Admission's predicted share of its real-time cycle time in use, 0..1 (`null`: unknown).
    utilisation: Option<f64>,
}

/// Every disk of the store with the scheduler's counters; `usage` adds the block counts.
fn disk_list(
    s: &ApiState,
    sched: &SchedSnapshot,
    usage: Option<&HashMap<u16, u64>>,
) -> Vec<DiskJson> {
    s.store
        .meta()
        .disks
        .into_iter()
        .map(|rec| {
            let snap = sched.disks.iter().find(|d| d.disk == rec.id).copied().unwrap_or_default();
            let util = sched.utilisation.iter().find(|(d, _)| *d == rec.id).map(|(_, u)| *u);
            DiskJson {
                id: rec.id.0,
                path: rec.path.display().to_string(),
                blocks: usage.map(|u| u.get(&rec.id.0).copied().unwrap_or(0)),
                state: format!("{:?}", rec.state).to_lowercase(),
                model: rec.model.map(|m| m.to_string()),
                queue: snap.queue,
                reads: snap.reads,
                read_bytes: snap.read_bytes,
                nrt_bytes: snap.io.nrt_bytes,
                rt_busy_s: snap.io.rt_busy.as_secs_f64(),
                nrt_busy_s: snap.io.nrt_busy.as_secs_f64(),
                errors: snap.io.errors,
                utilisation: util.filter(|u| u.is_finite()),
            }
        })
        .collect()
}

/// `GET /api/v1/disks`: `{"disks":[…],"replication":K,"reorganisation":{…}}` (the CLI's `disk
/// list --server`).
async fn disks(State(s): State<ApiState>) -> Result<Response, ApiError> {
    let store = Arc::clone(&s.store);
    let usage = match tokio::task::spawn_blocking(move || store.disk_usage()).await {
        Ok(Ok(u)) => u,
        Ok(Err(e)) => return Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        Err(e) => return Err(ApiError(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    };
    let usage: HashMap<u16, u64> = usage.into_iter().map(|(r, u)| (r.id.0, u.blocks)).collect();
    let g = gather(&s).await?;
    let disks = disk_list(&s, &g.sched, Some(&usage));
    Ok(Json(serde_json::json!({
        "disks": disks,
        "replication": s.store.replication(),
        "reorganisation": reorg_json(&g.reorg, &s.store),
    }))
    .into_response())
}

/// The reorganisation as the API shows it.
#[derive(Clone, Debug, Serialize)]
struct ReorgJson {
    #[serde(flatten)]
    status: ReorgStatus,
    /// Blocks still to copy.
    remaining: u64,
    /// `moved / total`, 0..1 (1 when there is nothing to move).
    fraction: f64,
    /// The placement epoch in force (as this node last read it, in a cluster).
    epoch: u32,
    /// The epoch a pending reorganisation leads to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pending_epoch: Option<u32>,
}

fn reorg_json(r: &ReorgStatus, store: &isochron_diskio::Store) -> ReorgJson {
    let fraction = if r.total == 0 { 1.0 } else { r.moved as f64 / r.total as f64 };
    ReorgJson {
        status: r.clone(),
        remaining: r.total.saturating_sub(r.moved),
        fraction,
        epoch: store.active_epoch().0,
        pending_epoch: store.pending().map(|(_, p)| p.0),
    }
}

/// `GET /api/v1/reorg`: the reorganisation's state and progress.
async fn reorg(State(s): State<ApiState>) -> Result<Json<ReorgJson>, ApiError> {
    let (tx, rx) = oneshot::channel();
    s.reorg.send(ReorgCommand::Status { reply: tx }).map_err(|_| ApiError::unavailable())?;
    let status = rx.await.map_err(|_| ApiError::unavailable())?;
    Ok(Json(reorg_json(&status, &s.store)))
}

/// `GET /api/v1/transcode`: this node's ladder jobs, oldest first (`{"jobs": [...]}`: id,
/// title, rungs, state — queued, running, done, failed —, progress 0 to 1, seconds, error,
/// nodes), and in a cluster every rung's task in etcd (`"tasks"`: name, title, state, node,
/// progress, submitted_by, error).
async fn transcode_jobs(State(s): State<ApiState>) -> Result<Response, ApiError> {
    Ok(Json(jobs(&s).await?).into_response())
}

/// The transcoder's jobs.
async fn jobs(s: &ApiState) -> Result<isochron_server::transcoder::JobList, ApiError> {
    use isochron_server::transcoder::TranscodeCommand;
    let (tx, rx) = oneshot::channel();
    s.transcoder.send(TranscodeCommand::List { reply: tx }).map_err(|_| ApiError::unavailable())?;
    rx.await.map_err(|_| ApiError::unavailable())
}

/// The query of `GET /api/v1/nodes`.
#[derive(serde::Deserialize)]
struct NodesQuery {
    /// `self`: only this node's own figures (what peers ask each other).
    scope: Option<String>,
}

/// `GET /api/v1/nodes`: the nodes serving (an array; one entry for a single server).
async fn nodes(State(s): State<ApiState>, q: Query<NodesQuery>) -> Result<Response, ApiError> {
    let g = gather(&s).await?;
    let me = node_json(&s, &g);
    if q.scope.as_deref() == Some("self") {
        return Ok(Json(me).into_response());
    }
    match &s.cluster {
        None => Ok(Json(vec![me]).into_response()),
        Some(view) => {
            let peers = crate::cluster::peer_figures(view).await;
            Ok(Json(crate::cluster::nodes(view, &s.store.meta(), me, &peers)).into_response())
        }
    }
}

/// Now, in milliseconds since the Unix epoch.
fn unix_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// Admission's counters and recent decisions.
#[derive(Clone, Debug, Serialize)]
struct AdmissionJson {
    /// The policy.
    policy: &'static str,
    /// Streams admitted since start (counter).
    accepts_total: u64,
    /// Streams refused since start (counter).
    rejects_total: u64,
    /// Refusals since start by kind.
    rejects_by_reason: BTreeMap<&'static str, u64>,
    /// The latest decisions, newest first.
    decisions: Vec<AdmissionEntry>,
}

async fn admission_json(
    s: &ApiState,
    sched: &SchedSnapshot,
    limit: usize,
) -> Result<AdmissionJson, ApiError> {
    let (tx, rx) = oneshot::channel();
    s.sched
        .send(SchedCommand::Admissions { limit, reply: tx })
        .map_err(|_| ApiError::unavailable())?;
    let decisions = rx.await.map_err(|_| ApiError::unavailable())?;
    Ok(AdmissionJson {
        policy: sched.admission_policy,
        accepts_total: sched.stats.admitted,
        rejects_total: sched.stats.rejected,
        rejects_by_reason: sched.rejects_by_reason.iter().copied().collect(),
        decisions,
    })
}

/// `GET /api/v1/admission[?limit=N]`: the last `N` (default and at most 256) admission decisions.
async fn admission(
    State(s): State<ApiState>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<AdmissionJson>, ApiError> {
    let limit = match query.get("limit") {
        None => DEFAULT_CAPACITY,
        Some(v) => v.parse::<usize>().map_err(|_| {
            ApiError::bad_request(format!("limit must be a number of decisions, not {v:?}"))
        })?,
    };
    let (stx, srx) = oneshot::channel();
    s.sched.send(SchedCommand::Stats { reply: stx }).map_err(|_| ApiError::unavailable())?;
    let sched = srx.await.map_err(|_| ApiError::unavailable())?;
    Ok(Json(admission_json(&s, &sched, limit.min(DEFAULT_CAPACITY)).await?))
}

/// Server-wide counters and gauges in the overview.
#[derive(Clone, Debug, Serialize)]
struct Totals {
    /// RTSP sessions.
    sessions: usize,
    /// Sessions playing.
    playing: usize,
    /// Streams admitted by the scheduler.
    streams: usize,
    /// Playable objects.
    objects: usize,
    /// Recordings in progress.
    recordings: usize,
    /// RTP packets sent (counter).
    packets_sent: u64,
    /// RTP payload bytes sent (counter).
    payload_bytes_sent: u64,
    /// Block bytes delivered from disk reads, Yima's `B_disk` (counter).
    disk_bytes: u64,
    /// Block bytes delivered from the cache, Yima's `B_cache` (counter).
    cache_bytes: u64,
    /// Block requests answered from the cache (counter).
    cache_hits: u64,
    /// Block requests that needed a disk read (counter).
    cache_misses: u64,
    /// Block requests that joined a read in flight (counter).
    cache_coalesced: u64,
    /// Bytes held by the block cache now.
    cache_used_bytes: u64,
    /// Blocks not in memory by their deadline (counter).
    missed_deadlines: u64,
    /// Block reads finished after their deadline (counter).
    late_reads: u64,
    /// Packets due whose block was not in memory (counter).
    underruns: u64,
    /// Datagrams the kernel refused (counter).
    send_errors: u64,
    /// Scheduler cycles ended (counter).
    cycles: u64,
    /// Largest delay of a packet past its send time so far, seconds.
    packet_lateness_max_s: f64,
}

/// `GET /api/v1/overview`: everything the dashboard shows, in one request.
#[derive(Clone, Debug, Serialize)]
struct Overview {
    /// When the snapshot was taken, milliseconds since the Unix epoch.
    time_unix_ms: u64,
    /// The nodes: this one, and in a cluster every live peer's own figures.
    nodes: Vec<serde_json::Value>,
    /// Server-wide totals.
    totals: Totals,
    /// The sessions.
    sessions: Vec<SessionInfo>,
    /// The disks.
    disks: Vec<DiskJson>,
    /// Admission: counters and the latest 20 decisions.
    admission: AdmissionJson,
    /// The reorganisation.
    reorg: ReorgJson,
    /// The ladder jobs (`GET /api/v1/transcode`).
    transcode: Vec<isochron_server::transcoder::JobInfo>,
    /// The feeds being published (`GET /api/v1/live`).
    live: Vec<LiveStatus>,
}

/// The longest `GET /api/v1/overview?after=…` waits.
const MAX_OVERVIEW_WAIT: Duration = Duration::from_secs(5);

/// `GET /api/v1/overview[?after=MS]`. With `after` (milliseconds since the Unix epoch, typically
/// the previous answer's `time_unix_ms` + 1000) the answer waits until then (at most 5 s): the
/// server paces the polling, so samples are evenly spaced in its own time whatever the client's
/// timers do (a background tab, a headless browser's virtual time).
async fn overview(
    State(s): State<ApiState>,
    sees: Option<axum::Extension<SeesClients>>,
    Query(query): Query<HashMap<String, String>>,
) -> Result<Json<Overview>, ApiError> {
    if let Some(v) = query.get("after") {
        let after: u64 = v.parse().map_err(|_| {
            ApiError::bad_request(format!(
                "after must be milliseconds since the Unix epoch, not {v:?}"
            ))
        })?;
        let wait = Duration::from_millis(after.saturating_sub(unix_ms()));
        tokio::time::sleep(wait.min(MAX_OVERVIEW_WAIT)).await;
    }
    let g = gather(&s).await?;
    let admission = admission_json(&s, &g.sched, 20).await?;
    let (st, c, p) = (&g.sched.stats, g.sched.stats.cache, g.send.pacer);
    let totals = Totals {
        sessions: g.sessions.len(),
        playing: g.sessions.iter().filter(|x| x.state == "playing").count(),
        streams: g.sched.streams,
        objects: g.objects,
        recordings: g.recordings.active,
        packets_sent: p.packets,
        payload_bytes_sent: p.payload_bytes,
        disk_bytes: c.bytes_from_disk,
        cache_bytes: c.bytes_from_cache,
        cache_hits: c.hits,
        cache_misses: c.misses,
        cache_coalesced: c.coalesced,
        cache_used_bytes: g.sched.cache_bytes,
        missed_deadlines: st.missed_deadlines,
        late_reads: st.late_reads,
        underruns: p.underruns,
        send_errors: g.send.send_errors,
        cycles: st.cycles,
        packet_lateness_max_s: p.lateness_us_max as f64 / 1e6,
    };
    let mut nodes = vec![serde_json::to_value(node_json(&s, &g)).unwrap_or_default()];
    if let Some(view) = &s.cluster {
        nodes.extend(crate::cluster::peer_figures(view).await.into_values());
    }
    Ok(Json(Overview {
        time_unix_ms: unix_ms(),
        nodes,
        totals,
        disks: disk_list(&s, &g.sched, None),
        admission,
        reorg: reorg_json(&g.reorg, &s.store),
        live: live_feeds(&s, &g.sessions, sees),
        sessions: redacted(g.sessions, sees),
        transcode: jobs(&s).await?.jobs,
    }))
}

/// The body of `POST /api/v1/disks`.
#[derive(serde::Deserialize)]
struct AddDisk {
    /// `PATH` or `PATH,seek_ms=10,rate_mib_s=4`.
    spec: String,
}

/// `POST /api/v1/disks` `{"spec": "PATH[,seek_ms=…,rate_mib_s=…]"}`: 202 with the new disk's id;
/// the reorganisation runs in the background (follow it with `GET /api/v1/disks`).
async fn add_disk(
    State(s): State<ApiState>,
    body: Result<Json<AddDisk>, JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body.map_err(|e| ApiError(e.status(), e.body_text()))?;
    let spec: isochron_store::catalog::DiskSpec =
        body.spec.parse().map_err(|e| ApiError::bad_request(format!("spec: {e}")))?;
    let root = s.store.root().to_owned();
    let disks: Vec<std::path::PathBuf> =
        s.store.meta().disks.iter().map(|d| root.join(&d.path)).collect();
    check_disk_path(&root, &disks, &spec.path).map_err(ApiError::bad_request)?;
    let (tx, rx) = oneshot::channel();
    if s.reorg.send(ReorgCommand::AddDisk { spec: body.spec, reply: tx }).is_err() {
        return Err(ApiError::unavailable());
    }
    match rx.await {
        Ok(Ok(id)) => {
            Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "id": id.0 }))).into_response())
        }
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ApiError::unavailable()),
    }
}

/// System trees a disk may not be in (nor be an ancestor of).
const SYSTEM_TREES: [&str; 12] = [
    "/proc", "/sys", "/dev", "/etc", "/boot", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/run",
    "/var/run",
];

/// Whether `path` (a new disk's directory, relative to the store `root` if relative) may become
/// a disk over the network: a relative path stays inside the store root (no `..`); an absolute
/// one must already be a directory, not in or above a system tree, and not inside or above
/// another disk (`disks`, absolute) or the store root. Checked before anything is created or
/// moved.
fn check_disk_path(
    root: &std::path::Path,
    disks: &[std::path::PathBuf],
    path: &std::path::Path,
) -> Result<(), String> {
    use std::path::Component;
    let shown = path.display();
    if path.is_relative() {
        if path.components().any(|c| !matches!(c, Component::Normal(_))) {
            return Err(format!("{shown}: a relative disk path must stay inside the store"));
        }
        let full = root.join(path);
        if disks.iter().any(|d| full.starts_with(d) || d.starts_with(&full)) {
            return Err(format!("{shown}: inside or above another disk"));
        }
        // What exists of it is resolved: a symbolic link on the way may point anywhere.
        for a in full.ancestors().take_while(|a| *a != root) {
            if std::fs::symlink_metadata(a).is_ok_and(|m| m.file_type().is_symlink()) {
                return Err(format!(
                    "{shown}: {} is a symbolic link; a relative disk path must stay inside the \
                     store",
                    a.display()
                ));
            }
        }
        return Ok(());
    }
    let real = std::fs::canonicalize(path)
        .map_err(|e| format!("{shown}: {e} (a disk's directory must exist)"))?;
    if !real.is_dir() {
        return Err(format!("{shown}: not a directory"));
    }
    if real == std::path::Path::new("/")
        || SYSTEM_TREES
            .iter()
            .any(|t| real.starts_with(t) || std::path::Path::new(t).starts_with(&real))
    {
        return Err(format!("{shown}: in or above a system directory"));
    }
    let canon = |p: &std::path::Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_owned());
    let root = canon(root);
    if real.starts_with(&root) && real != root && disks.iter().all(|d| !real.starts_with(canon(d)))
    {
        // A new directory inside the store root, beside the disks: fine.
        return Ok(());
    }
    if root.starts_with(&real) {
        return Err(format!("{shown}: the store's own directory or above it"));
    }
    for d in disks {
        let d = canon(d);
        if real.starts_with(&d) || d.starts_with(&real) {
            return Err(format!("{shown}: inside or above disk {}", d.display()));
        }
    }
    Ok(())
}

/// `DELETE /api/v1/disks/{id}`: 202; the disk drains in the background and is then retired.
async fn remove_disk(
    State(s): State<ApiState>,
    id: Result<Path<u16>, PathRejection>,
) -> Result<Response, ApiError> {
    let Path(id) =
        id.map_err(|_| ApiError::bad_request("a disk id is a number from 0 to 65535"))?;
    let (tx, rx) = oneshot::channel();
    if s.reorg.send(ReorgCommand::RemoveDisk { id: DiskId(id), reply: tx }).is_err() {
        return Err(ApiError::unavailable());
    }
    match rx.await {
        Ok(Ok(())) => {
            Ok((StatusCode::ACCEPTED, Json(serde_json::json!({ "id": id }))).into_response())
        }
        Ok(Err(e)) => Err(e.into()),
        Err(_) => Err(ApiError::unavailable()),
    }
}

/// `PUT /api/v1/record/{name}?rate=4M[&peak=6M]` with an MPEG-TS body: records it as object
/// `name`, read at `rate` (see [`isochron_server::recorder`]). `201 Created` with the object's summary when
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
    // Refused before a byte of the body is read: the answer to `Expect: 100-continue`.
    if let Err(e) = s.recorders.check(&name) {
        return record_error(&e);
    }
    // A file of another container (MP4, Matroska, M2TS) is not a live stream to pace: it is
    // spooled and ingested whole, as `PUT /api/v1/objects/NAME` does. Its first bytes say.
    let mut stream = body.into_data_stream();
    let mut head = Vec::new();
    while head.len() < SNIFF_BYTES {
        match futures_util::StreamExt::next(&mut stream).await {
            Some(Ok(chunk)) => head.extend_from_slice(&chunk),
            Some(Err(e)) => {
                return record_error(&RecordError::BadRequest(format!("reading the body: {e}")));
            }
            None => break,
        }
    }
    let file = matches!(
        isochron_media::sniff(&head),
        Some(ContainerKind::Mp4 | ContainerKind::Matroska | ContainerKind::M2ts)
    );
    if file {
        let rest = Body::from_stream(stream);
        let ladder = crate::cluster::LadderAsk::Default;
        return crate::cluster::spool_and_ingest(&s, name, head.into(), rest, ladder).await;
    }
    // The recorder reads the body through a channel fed here, so that what it leaves unread when
    // it refuses the stream mid-body can be drained before the answer.
    // `None` is the body's end: a channel closed without it (this exchange dropped as its client
    // went away) is a failed body, never a short recording.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let fed = futures_util::stream::unfold(Some(rx), |rx| async move {
        let mut rx = rx?;
        match rx.recv().await {
            Some(Some(chunk)) => Some((chunk, Some(rx))),
            Some(None) => None,
            None => Some((Err(axum::Error::new("the upload was abandoned")), None)),
        }
    });
    let head = futures_util::stream::iter([Ok(axum::body::Bytes::from(head))]);
    let body = Body::from_stream(head.chain(fed));
    // Its own task: it sees the body through and cleans up even if the client goes away and
    // this exchange is dropped.
    let mut task = tokio::spawn(Arc::clone(&s.recorders).record(name, params, body));
    let mut feed = Some(tx);
    let result = loop {
        tokio::select! {
            done = &mut task => break done,
            chunk = stream.next(), if feed.is_some() => {
                // The end or a failure of the body is the last thing fed (the recorder sees which).
                let last = !matches!(chunk, Some(Ok(_)));
                let taken = match &feed {
                    Some(tx) => tx.send(chunk).await.is_ok(),
                    None => true,
                };
                if last {
                    feed = None;
                } else if !taken {
                    // The recorder stopped reading: its answer is coming.
                    break task.await;
                }
            }
        }
    };
    if !matches!(result, Ok(Ok(_))) {
        drain(&mut stream).await;
    }
    match result {
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

/// Reads and discards what is left of a refused upload, for at most [`DRAIN_TIME`] and
/// [`DRAIN_BYTES`], before the answer is sent and the connection closed. A server that closes with
/// request data unread makes its TCP send a reset, which can erase the answer before the client
/// reads it (RFC 9112 §9.6): the client would see a broken connection instead of the reason.
async fn drain<S>(stream: &mut S)
where
    S: futures_util::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Unpin,
{
    let mut left = DRAIN_BYTES;
    let _ = tokio::time::timeout(DRAIN_TIME, async {
        while let Some(Ok(chunk)) = stream.next().await {
            left = left.saturating_sub(chunk.len());
            if left == 0 {
                break;
            }
        }
    })
    .await;
}

/// The longest a refused upload is drained ([`drain`]).
const DRAIN_TIME: Duration = Duration::from_secs(5);
/// The most bytes of a refused upload drained ([`drain`]).
const DRAIN_BYTES: usize = 64 << 20;

/// How many bytes of a recording's body decide what it is (`isochron_media::sniff` needs 200 for
/// M2TS: two packets of 192 bytes would be 384; one packet and the next sync byte suffice).
const SNIFF_BYTES: usize = 400;

fn record_error(e: &RecordError) -> Response {
    (e.status(), Json(serde_json::json!({ "error": e.to_string() }))).into_response()
}

/// `GET /metrics`: Prometheus text format 0.0.4 ([`crate::metrics`]).
async fn metrics(State(s): State<ApiState>) -> Result<Response, ApiError> {
    let g = gather(&s).await?;
    let mut text = crate::metrics::render(&g);
    if let Some(view) = &s.cluster {
        crate::cluster::render_metrics(&mut text, view);
    }
    s.auth_refusals.render(&mut text);
    for (proto, l) in [("rtsp", &s.rtsp_limits), ("http", &s.http_limits)] {
        use std::fmt::Write as _;
        use std::sync::atomic::Ordering::Relaxed;
        let _ = writeln!(
            text,
            "# HELP isochron_{proto}_connections_open {proto} connections open.\n\
             # TYPE isochron_{proto}_connections_open gauge\n\
             isochron_{proto}_connections_open {}\n\
             # HELP isochron_{proto}_connections_refused_total {proto} connections refused by a \
             cap ({proto}.max_connections, {proto}.max_connections_per_client), or closed on a \
             reserved slot after a first request that proved nothing ({proto}.reserved_connections).\n\
             # TYPE isochron_{proto}_connections_refused_total counter\n\
             isochron_{proto}_connections_refused_total{{cap=\"total\"}} {}\n\
             isochron_{proto}_connections_refused_total{{cap=\"per_client\"}} {}\n\
             isochron_{proto}_connections_refused_total{{cap=\"reserve\"}} {}",
            l.open(),
            l.refused_total.load(Relaxed),
            l.refused_per_client.load(Relaxed),
            l.refused_on_probation.load(Relaxed)
        );
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], text).into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_path_from_the_network_is_checked_before_anything_moves() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let d0 = root.join("disk-0");
        let other = dir.path().join("elsewhere");
        for d in [&d0, &other] {
            std::fs::create_dir_all(d).unwrap();
        }
        let disks = vec![d0.clone()];
        let check = |p: &std::path::Path| check_disk_path(&root, &disks, p);
        assert_eq!(check(std::path::Path::new("disk-1")), Ok(()));
        assert!(check(std::path::Path::new("../x")).unwrap_err().contains("inside the store"));
        assert!(check(std::path::Path::new("disk-0/sub")).unwrap_err().contains("another disk"));
        assert_eq!(check(&other), Ok(()));
        let missing = dir.path().join("nonexistent/x");
        assert!(check(&missing).unwrap_err().contains("must exist"), "nothing created");
        assert!(!missing.exists());
        assert!(check(std::path::Path::new("/etc")).unwrap_err().contains("system"));
        assert!(check(std::path::Path::new("/")).unwrap_err().contains("system"));
        assert!(check(&d0.join(".")).unwrap_err().contains("inside or above disk"));
        assert!(check(dir.path()).unwrap_err().contains("store's own directory"));
        let file = dir.path().join("f");
        std::fs::write(&file, b"x").unwrap();
        assert!(check(&file).unwrap_err().contains("not a directory"));
        // A relative path through a link out of the store is refused, the link left alone.
        std::os::unix::fs::symlink(&other, root.join("out")).unwrap();
        for p in ["out", "out/sub"] {
            let e = check(std::path::Path::new(p)).unwrap_err();
            assert!(e.contains("symbolic link"), "{p}: {e}");
        }
        assert!(std::fs::read_dir(&other).unwrap().next().is_none(), "nothing written there");
    }
}
