//! The cluster's HTTP endpoints (`docs/design/cluster.md`): ingest through any node, block
//! writes from the ingesting node to a block's owner, and `/api/v1/nodes` for every node.
//!
//! The node-to-node calls (`/api/v1/cluster/…`) are accepted only from loopback and from live
//! cluster members' addresses. Ingest and node removal are `admin` (`crate::auth`): with no
//! `[auth]` users that is loopback and members too, else a user's credentials.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use futures_util::StreamExt as _;
use isochron_base::{BlockIndex, BlockKey, DiskId, ObjectId};
use isochron_server::cluster::ClusterView;
use isochron_server::library::ObjectSummary;
use isochron_server::reorg::ReorgCommand;
use serde::Serialize;
use tokio::sync::oneshot;

use crate::auth::refuse_non_member;
use crate::error::{error, io_error};
use crate::state::{ApiState, Gathered};

/// A node of the deployment (today: this server) in `GET /api/v1/nodes` and the overview.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct NodeJson {
    /// The node's id (0: a single server).
    id: u32,
    /// A display name, `isochron@ADDR`.
    name: String,
    /// The server's version.
    version: &'static str,
    /// RTSP listen address.
    rtsp: String,
    /// HTTP listen address.
    http: String,
    /// The RTP port (RTCP is the next one).
    rtp_port: u16,
    /// When the node started, milliseconds since the Unix epoch.
    started_unix_ms: u64,
    /// Seconds since it started.
    uptime_s: f64,
    /// Its disks (ids), retired ones excluded.
    disks: Vec<u16>,
    /// RTSP sessions.
    sessions: usize,
    /// Streams admitted by the scheduler (playing and recording).
    streams: usize,
    /// The admission policy.
    admission_policy: &'static str,
    /// Sum of the mean bit rates of the sessions playing now, bit/s (the bandwidth it has
    /// committed to).
    playing_bitrate_bps: u64,
    /// RTP payload bytes sent (counter; the dashboard derives the send bandwidth from it).
    payload_bytes_sent: u64,
    /// RTP packets sent (counter).
    packets_sent: u64,
    /// Bytes read from its disks by real-time reads (counter; the disk bandwidth).
    disk_read_bytes: u64,
    /// Bytes it sent to other nodes on its control connections (counter; 0 on a single server).
    control_bytes_sent: u64,
    /// Bytes it received from other nodes on its control connections (counter).
    control_bytes_received: u64,
    /// Retransmission requests (RTCP generic NACKs) it answered (counter).
    nacks_received: u64,
    /// Packets it sent again for them (counter).
    retransmitted_packets: u64,
}

pub(crate) fn node_json(s: &ApiState, g: &Gathered) -> NodeJson {
    let n = &s.node;
    let mut host = n.rtsp;
    if host.ip().is_unspecified() {
        host.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let local = s.store.local_disks();
    let disks = s
        .store
        .meta()
        .disks
        .iter()
        .filter(|d| d.state != isochron_store::catalog::DiskState::Retired && local.contains(&d.id))
        .map(|d| d.id.0)
        .collect();
    let count = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let (id, name, control) = match &s.cluster {
        Some(v) => (
            u32::from(s.store.node().map_or(0, |n| isochron_server::cluster::node_id(n).0)),
            v.node.clone(),
            (count(&v.control_bytes_out), count(&v.control_bytes_in)),
        ),
        None => (0, format!("isochron@{host}"), (0, 0)),
    };
    NodeJson {
        id,
        name,
        version: env!("CARGO_PKG_VERSION"),
        rtsp: n.rtsp.to_string(),
        http: n.http.to_string(),
        rtp_port: n.rtp_port,
        started_unix_ms: n.started_unix_ms,
        uptime_s: g.uptime_s,
        disks,
        sessions: g.sessions.len(),
        streams: g.sched.streams,
        admission_policy: g.sched.admission_policy,
        playing_bitrate_bps: g
            .sessions
            .iter()
            .filter(|x| x.state == "playing")
            .map(|x| x.bitrate_bps)
            .sum(),
        payload_bytes_sent: g.send.pacer.payload_bytes,
        packets_sent: g.send.pacer.packets,
        disk_read_bytes: g.sched.disks.iter().map(|d| d.read_bytes).sum(),
        control_bytes_sent: control.0,
        control_bytes_received: control.1,
        nacks_received: g.send.retransmit.nacks,
        retransmitted_packets: g.send.retransmit.resent,
    }
}

/// `PUT /api/v1/cluster/blocks/{disk}/{object}/{index}`: a block for one of this node's disks,
/// from the node ingesting its object.
pub(crate) async fn put_block(
    State(s): State<ApiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((disk, object, index)): Path<(u16, u64, u32)>,
    body: Bytes,
) -> Response {
    if let Some(refused) = refuse_non_member(&s, peer) {
        return refused;
    }
    let Some(d) = s.store.disk(DiskId(disk)) else {
        return error(StatusCode::NOT_FOUND, format!("disk {disk} is not on this node"));
    };
    let key = BlockKey::new(ObjectId(object), BlockIndex(index));
    match tokio::task::spawn_blocking(move || d.write_block(key, &body)).await {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("block {key}: {e}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// `GET /api/v1/cluster/moves/{disk}/{object}/{index}`: a block of one of this node's disks,
/// read in the disk's non-real-time share for the node running a reorganisation (the source of
/// a copy).
pub(crate) async fn get_move(
    State(s): State<ApiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((disk, object, index)): Path<(u16, u64, u32)>,
) -> Response {
    if let Some(refused) = refuse_non_member(&s, peer) {
        return refused;
    }
    let key = BlockKey::new(ObjectId(object), BlockIndex(index));
    let (reply, rx) = oneshot::channel();
    if s.reorg.send(ReorgCommand::ServeRead { disk: DiskId(disk), key, reply }).is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the reorganiser is not running");
    }
    match rx.await {
        Ok(Ok(bytes)) => (StatusCode::OK, bytes).into_response(),
        Ok(Err(e)) => io_error(&e),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the reorganiser is not running"),
    }
}

/// `GET /api/v1/cluster/feeds/{name}`: the chunks of feed `name`, published here, for another
/// node that serves it (`isochron_live::relay` frames on a body that lasts as long as the feed:
/// an `Opened` frame once its first packet has come, every chunk sealed from now on, an `Alive`
/// after a second of nothing, `Ended` at its end). A subscriber that falls behind by more than
/// the tap holds is cut off (its node ends the feed for its viewers).
pub(crate) async fn get_feed(
    State(s): State<ApiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path(name): Path<String>,
) -> Response {
    if let Some(refused) = refuse_non_member(&s, peer) {
        return refused;
    }
    let Some(sub) = s.recorders.subscribe_feed(&name) else {
        return error(StatusCode::NOT_FOUND, format!("no feed {name} is published on this node"));
    };
    let view = s.cluster;
    let first = sub.zero.map(opened_frame);
    let name: Arc<str> = name.into();
    let frames = futures_util::stream::unfold(
        (sub.items, first, false),
        move |(mut items, pending, done)| {
            let name = Arc::clone(&name);
            async move {
                if let Some(f) = pending {
                    return Some((f, (items, None, done)));
                }
                if done {
                    return None;
                }
                let (frame, end) = next_feed_frame(&mut items, &name, peer).await?;
                Some((frame, (items, None, end)))
            }
        },
    )
    .map(move |b: Bytes| {
        if let Some(v) = &view {
            v.feed_bytes_out.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        Ok::<_, std::convert::Infallible>(b)
    });
    ([("content-type", "application/octet-stream")], Body::from_stream(frames)).into_response()
}

/// A feed's `Opened` frame, written now: the time since its first packet arrived at `zero`.
fn opened_frame(zero: tokio::time::Instant) -> Bytes {
    use isochron_live::relay::{FeedFrame, encode};
    Bytes::from(encode(&FeedFrame::Opened { elapsed: zero.elapsed() }))
}

/// The next frame of feed `name` for subscriber `peer`, and whether it is the last; `None`
/// when the subscriber fell behind (cut off).
async fn next_feed_frame(
    items: &mut tokio::sync::broadcast::Receiver<isochron_server::recorder::live::TapItem>,
    name: &str,
    peer: SocketAddr,
) -> Option<(Bytes, bool)> {
    use isochron_live::relay::{FeedFrame, encode};
    use isochron_server::recorder::live::TapItem;
    use tokio::sync::broadcast::error::RecvError;
    Some(match tokio::time::timeout(FEED_ALIVE, items.recv()).await {
        Err(_) => (Bytes::from(encode(&FeedFrame::Alive)), false),
        Ok(Ok(TapItem::Opened(zero))) => (opened_frame(zero), false),
        Ok(Ok(TapItem::Frame(f))) => (Bytes::copy_from_slice(&f), false),
        Ok(Ok(TapItem::Ended) | Err(RecvError::Closed)) => {
            (Bytes::from(encode(&FeedFrame::Ended)), true)
        }
        Ok(Err(RecvError::Lagged(n))) => {
            tracing::warn!(feed = %name, %peer, behind = n, "a node subscribed to a feed fell behind: cut off");
            return None;
        }
    })
}

/// A feed's subscriber hears from it at least this often.
const FEED_ALIVE: std::time::Duration = std::time::Duration::from_secs(1);

/// `PUT /api/v1/cluster/moves/{disk}/{object}/{index}`: a block for one of this node's disks
/// from the node running a reorganisation (the target of a copy), verified and written durably
/// in the disk's non-real-time share before the answer.
pub(crate) async fn put_move(
    State(s): State<ApiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Path((disk, object, index)): Path<(u16, u64, u32)>,
    body: Bytes,
) -> Response {
    if let Some(refused) = refuse_non_member(&s, peer) {
        return refused;
    }
    let key = BlockKey::new(ObjectId(object), BlockIndex(index));
    let (reply, rx) = oneshot::channel();
    let cmd = ReorgCommand::ServeWrite { disk: DiskId(disk), key, bytes: body.to_vec(), reply };
    if s.reorg.send(cmd).is_err() {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the reorganiser is not running");
    }
    match rx.await {
        Ok(Ok(())) => StatusCode::NO_CONTENT.into_response(),
        Ok(Err(e)) => io_error(&e),
        Err(_) => error(StatusCode::SERVICE_UNAVAILABLE, "the reorganiser is not running"),
    }
}

/// `DELETE /api/v1/nodes/{name}` (`isochron node remove NAME`): drains every disk of node
/// `name` as one SCADDAR removal; that node copies its blocks to the others and flips the
/// epoch. `202 Accepted` with the draining disks; `409` when refused (a reorganisation pending,
/// no such node, the last disks).
pub(crate) async fn remove_node(State(s): State<ApiState>, Path(name): Path<String>) -> Response {
    if s.cluster.is_none() {
        return error(StatusCode::NOT_FOUND, "this server is not a cluster node");
    }
    let store = Arc::clone(&s.store);
    let n = name.clone();
    match tokio::task::spawn_blocking(move || store.remove_node(&n)).await {
        Ok(Ok((disks, epoch))) => {
            let disks: Vec<u16> = disks.iter().map(|d| d.0).collect();
            let body = serde_json::json!({ "node": name, "draining": disks, "epoch": epoch.0 });
            (StatusCode::ACCEPTED, Json(body)).into_response()
        }
        Ok(Err(e)) => error(StatusCode::CONFLICT, format!("removing node {name}: {e}")),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// What `PUT /api/v1/objects/{name}` may say: `?ladder=720p,480p` (make that ladder of the
/// title: a rung it cannot give is an error, and nothing is stored), `?ladder=none` (no
/// ladder, whatever `transcode.ladder` says).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IngestQuery {
    ladder: Option<String>,
}

/// The ladder an upload is to get.
#[derive(Debug)]
pub(crate) enum LadderAsk {
    /// The server's own (`transcode.ladder`), its rungs taller than the title left out.
    Default,
    /// None.
    No,
    /// This one, every rung of it.
    Given(isochron_transcode::Ladder),
}

/// `PUT /api/v1/objects/{name}`: ingests the body (a media file: MPEG-TS, M2TS, MP4,
/// Matroska/WebM) as object `name`, its blocks written to their owners' disks on every node
/// (`isochron ingest --server`); with a ladder (`?ladder=`, or the server's `transcode.ladder`)
/// a job then makes its renditions, and the answer names it (`"job"`, in `GET
/// /api/v1/transcode`).
pub(crate) async fn ingest(
    State(s): State<ApiState>,
    Path(name): Path<String>,
    query: Result<axum::extract::Query<IngestQuery>, axum::extract::rejection::QueryRejection>,
    body: Body,
) -> Response {
    // Renditions (`TITLE~RUNG`) are the server's to make, never uploaded.
    if let Err(e) = isochron_store::catalog::validate_title(&name) {
        return error(StatusCode::BAD_REQUEST, e.to_string());
    }
    let query = match query {
        Ok(q) => q.0,
        Err(e) => return error(StatusCode::BAD_REQUEST, e.body_text()),
    };
    let ladder = match query.ladder.as_deref().map(str::trim) {
        None => LadderAsk::Default,
        Some("none") => LadderAsk::No,
        Some(spec) => match isochron_transcode::Ladder::parse(spec) {
            Ok(l) => LadderAsk::Given(l),
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("ladder: {e}")),
        },
    };
    spool_and_ingest(&s, name, Bytes::new(), body, ladder).await
}

/// Spools `head` then the rest of `body` to a file in the store (the cutter seeks: it reads a
/// file more than once) and ingests it as object `name`: `201` with the object's summary,
/// `422` naming what is wrong with the input (or with the ladder asked for: then nothing is
/// stored). With a ladder, the spooled file becomes the source of a job making it.
pub(crate) async fn spool_and_ingest(
    s: &ApiState,
    name: String,
    head: Bytes,
    body: Body,
    ladder: LadderAsk,
) -> Response {
    let spool = match tempfile::NamedTempFile::new_in(s.store.root()) {
        Ok(f) => f,
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("spool file: {e}")),
    };
    let (file, path) = spool.into_parts();
    let mut file = std::io::BufWriter::new(file);
    if let Err(e) = file.write_all(&head) {
        return error(StatusCode::INTERNAL_SERVER_ERROR, format!("spool file: {e}"));
    }
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => return error(StatusCode::BAD_REQUEST, format!("reading the upload: {e}")),
        };
        if let Err(e) = file.write_all(&chunk) {
            return error(StatusCode::INTERNAL_SERVER_ERROR, format!("spool file: {e}"));
        }
    }
    if let Err(e) = file.flush() {
        return error(StatusCode::INTERNAL_SERVER_ERROR, format!("spool file: {e}"));
    }
    drop(file);
    let settings = Arc::clone(&s.transcode);
    let (store, library) = (Arc::clone(&s.store), Arc::clone(&s.library));
    let task = tokio::task::spawn_blocking(move || {
        use isochron_server::transcoder::plan;
        // The ladder is checked against the file before anything is stored.
        let plan = match &ladder {
            LadderAsk::Given(l) => Some(plan(&path, l, &settings, true).map_err(|e| {
                (StatusCode::UNPROCESSABLE_ENTITY, format!("object {name}: ladder: {e}"))
            })?),
            LadderAsk::Default => settings.ladder.as_ref().and_then(|l| {
                plan(&path, l, &settings, false)
                    .inspect_err(|e| tracing::warn!(object = %name, "no ladder made: {e}"))
                    .ok()
            }),
            LadderAsk::No => None,
        };
        let report = isochron_diskio::ingest::ingest_file(&store, &path, &name, &mut |_| {})
            .map_err(|e| (StatusCode::UNPROCESSABLE_ENTITY, format!("object {name}: {e}")))?;
        for skipped in &report.skipped {
            tracing::warn!(object = %name, "{skipped}; stored the other tracks");
        }
        library.insert(Arc::new(isochron_server::library::entry(&store, report.record.clone())));
        // The job's source: the spooled file, the job's to remove.
        let job = match plan {
            Some(plan) => Some((
                plan,
                path.keep().map_err(|e| {
                    (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        format!("keeping the upload for its ladder: {e}"),
                    )
                })?,
            )),
            None => None,
        };
        Ok::<_, (StatusCode, String)>((ObjectSummary::from(&report.record), job, name))
    });
    match task.await {
        Ok(Ok((summary, job, name))) => {
            let mut body = serde_json::to_value(&summary).unwrap_or_default();
            if let Some((plan, path)) = job {
                use isochron_server::transcoder::{JobSource, TranscodeCommand};
                let (tx, rx) = oneshot::channel();
                let source = JobSource { path, remove_after: true };
                let submit =
                    TranscodeCommand::Submit { title: name, source, plan, reply: Some(tx) };
                if s.transcoder.send(submit).is_err() {
                    return error(StatusCode::SERVICE_UNAVAILABLE, "the server is shutting down");
                }
                if let Ok(id) = rx.await {
                    body["job"] = id.into();
                }
            }
            (StatusCode::CREATED, Json(body)).into_response()
        }
        Ok(Err((status, msg))) => error(status, msg),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

/// A node in `/api/v1/nodes` in a cluster.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct ClusterNodeJson {
    /// Its name.
    name: String,
    /// Its id in the cluster's messages.
    id: u16,
    /// `up` (its lease is alive) or `down`.
    state: &'static str,
    /// RTSP address.
    rtsp: String,
    /// HTTP address.
    http: Option<String>,
    /// Control connections and relay.
    control: String,
    /// Its disks.
    disks: Vec<u16>,
    /// The node's own figures (sessions, streams, bytes sent, control bytes …), as its
    /// `/api/v1/nodes?scope=self` answered; absent for a node that is down or did not answer.
    #[serde(skip_serializing_if = "Option::is_none")]
    local: Option<serde_json::Value>,
}

/// How long the answering node waits for a peer's own figures.
const PEER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(1);

/// Every live peer's own figures (`GET /api/v1/nodes?scope=self` on each, at once), by name.
pub(crate) async fn peer_figures(view: &ClusterView) -> BTreeMap<String, serde_json::Value> {
    let live = view.live.lock().map(|l| l.clone()).unwrap_or_default();
    let asks: Vec<_> = live
        .into_values()
        .filter(|r| r.name != view.node)
        .filter_map(|r| Some((r.name, r.http?)))
        .map(|(name, http)| {
            tokio::task::spawn_blocking(move || {
                let agent: ureq::Agent =
                    ureq::Agent::config_builder().timeout_global(Some(PEER_TIMEOUT)).build().into();
                let url = format!("http://{http}/api/v1/nodes?scope=self");
                let v = agent
                    .get(&url)
                    .call()
                    .ok()?
                    .into_body()
                    .read_json::<serde_json::Value>()
                    .ok()?;
                Some((name, v))
            })
        })
        .collect();
    let mut out = BTreeMap::new();
    for a in asks {
        if let Ok(Some((name, v))) = a.await {
            out.insert(name, v);
        }
    }
    out
}

/// Every node the cluster ever had, from etcd, with each live one's own figures.
pub(crate) fn nodes(
    view: &ClusterView,
    meta: &isochron_store::catalog::StoreMeta,
    me: NodeJson,
    peers: &BTreeMap<String, serde_json::Value>,
) -> Vec<ClusterNodeJson> {
    let me = serde_json::to_value(me).unwrap_or_default();
    let known = view.known.lock().map(|k| k.clone()).unwrap_or_default();
    let live = view.live.lock().map(|k| k.clone()).unwrap_or_default();
    known
        .into_values()
        .map(|r| {
            let mine = r.name == view.node;
            ClusterNodeJson {
                state: if live.contains_key(&r.name) { "up" } else { "down" },
                id: r.id,
                rtsp: r.rtsp.to_string(),
                http: r.http.map(|h| h.to_string()),
                control: r.control.to_string(),
                disks: meta
                    .disks
                    .iter()
                    .filter(|d| {
                        d.owner.as_deref() == Some(r.name.as_str())
                            && d.state != isochron_store::catalog::DiskState::Retired
                    })
                    .map(|d| d.id.0)
                    .collect(),
                local: if mine { Some(me.clone()) } else { peers.get(&r.name).cloned() },
                name: r.name,
            }
        })
        .collect()
}

/// The cluster's counters in the Prometheus text format: node-to-node traffic, to be set against
/// the media bytes (`isochron_payload_bytes_sent_total`).
pub(crate) fn render_metrics(out: &mut String, view: &ClusterView) {
    use std::fmt::Write as _;
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let _ = writeln!(
        out,
        "# HELP isochron_cluster_control_bytes_total Bytes on this node's control connections.\n\
         # TYPE isochron_cluster_control_bytes_total counter\n\
         isochron_cluster_control_bytes_total{{direction=\"out\"}} {}\n\
         isochron_cluster_control_bytes_total{{direction=\"in\"}} {}\n\
         # HELP isochron_cluster_control_messages_total Control messages sent to peers.\n\
         # TYPE isochron_cluster_control_messages_total counter\n\
         isochron_cluster_control_messages_total {}\n\
         # HELP isochron_cluster_relay_packets_total RTP packets other nodes sent here to relay.\n\
         # TYPE isochron_cluster_relay_packets_total counter\n\
         isochron_cluster_relay_packets_total {}\n\
         # HELP isochron_cluster_relay_bytes_total Their bytes.\n\
         # TYPE isochron_cluster_relay_bytes_total counter\n\
         isochron_cluster_relay_bytes_total {}\n\
         # HELP isochron_cluster_relay_nacks_total NACKs from relayed sessions' origins for packets this node relayed there.\n\
         # TYPE isochron_cluster_relay_nacks_total counter\n\
         isochron_cluster_relay_nacks_total {}\n\
         # HELP isochron_cluster_block_bytes_out_total Block bytes written to other nodes' disks.\n\
         # TYPE isochron_cluster_block_bytes_out_total counter\n\
         isochron_cluster_block_bytes_out_total {}\n\
         # HELP isochron_cluster_block_bytes_in_total Block bytes read from other nodes' disks (reorganisation).\n\
         # TYPE isochron_cluster_block_bytes_in_total counter\n\
         isochron_cluster_block_bytes_in_total {}\n\
         # HELP isochron_cluster_feed_bytes_total Bytes of live feeds between nodes: sent to the nodes serving a feed published here, received from a feed's node.\n\
         # TYPE isochron_cluster_feed_bytes_total counter\n\
         isochron_cluster_feed_bytes_total{{direction=\"out\"}} {}\n\
         isochron_cluster_feed_bytes_total{{direction=\"in\"}} {}\n\
         # HELP isochron_cluster_live_nodes Nodes whose lease is alive.\n\
         # TYPE isochron_cluster_live_nodes gauge\n\
         isochron_cluster_live_nodes {}",
        get(&view.control_bytes_out),
        get(&view.control_bytes_in),
        get(&view.control_messages_out),
        get(&view.relay_packets_in),
        get(&view.relay_bytes_in),
        get(&view.relay_nacks_in),
        get(&view.block_bytes_out),
        get(&view.block_bytes_in),
        get(&view.feed_bytes_out),
        get(&view.feed_bytes_in),
        view.live.lock().map_or(0, |l| l.len()),
    );
}
