//! What every HTTP handler reads: the handles of the server's owners, and one snapshot of their
//! state asked of all of them at once.
//!
//! Why a module of its own: the JSON API (`api`), media delivery (`media`) and `/metrics`
//! (`metrics`) all serve from the same [`ApiState`], and the API and the metrics render the same
//! [`Gathered`] snapshot; with both here, below them, none of those modules depends on another
//! (media delivery's own small state, [`MediaState`], lives here for the same reason). State is
//! read through the owners' command channels (the session manager, the scheduler and sender
//! threads, the reorganiser), so nothing here locks the streaming path.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::Sender;
use isochron_base::{BlockKey, StreamId};
use isochron_dataplane::sched_thread::{SchedCommand, SchedSnapshot};
use isochron_dataplane::sender::{SenderCommand, SenderStats};
use isochron_dataplane::shards::Senders;
use isochron_diskio::Store;
use isochron_server::NodeIdentity;
use isochron_server::library::Library;
use isochron_server::recorder::{RecorderStats, Recorders};
use isochron_server::reorg::{ReorgCommand, ReorgStatus};
use isochron_server::sessions::{AbrStats, SessionCommand, SessionInfo, TakeoverStats};
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;

/// Handles the API needs: the owners' channels, the objects, the store, the recordings, HTTP
/// delivery's own state and the node's identity.
#[derive(Clone)]
pub(crate) struct ApiState {
    pub(crate) recorders: Arc<Recorders>,
    pub(crate) library: Arc<Library>,
    pub(crate) sessions: mpsc::UnboundedSender<SessionCommand>,
    pub(crate) sched: Sender<SchedCommand>,
    pub(crate) sender: Senders,
    pub(crate) reorg: mpsc::UnboundedSender<ReorgCommand>,
    /// The ladder jobs' owner.
    pub(crate) transcoder: mpsc::UnboundedSender<isochron_server::transcoder::TranscodeCommand>,
    /// `[transcode]`: the server's own ladder, the key-frame interval.
    pub(crate) transcode: Arc<isochron_server::transcoder::TranscodeSettings>,
    pub(crate) store: Arc<Store>,
    pub(crate) media: Arc<MediaState>,
    pub(crate) node: Arc<NodeIdentity>,
    pub(crate) cluster: Option<Arc<isochron_server::cluster::ClusterView>>,
    /// Who may do what (`[auth]`).
    pub(crate) auth: Arc<isochron_auth::Authority>,
    /// Requests the policy refused, for `/metrics`.
    pub(crate) auth_refusals: Arc<Refusals>,
    /// The RTSP connection caps, for `/metrics`.
    pub(crate) rtsp_limits: Arc<isochron_server::conn_limits::ConnLimits>,
    /// The HTTP connection caps, for `/metrics`.
    pub(crate) http_limits: Arc<isochron_server::conn_limits::ConnLimits>,
}

/// HTTP delivery's settings and small caches.
#[derive(Debug)]
pub(crate) struct MediaState {
    /// Target HLS segment duration.
    pub(crate) hls_segment: Duration,
    /// Blocks known to hold no PAT, per object (so that looking back for the last PAT of a
    /// file with few PATs reads each such block once).
    no_pat: Mutex<HashSet<BlockKey>>,
}

impl MediaState {
    /// The state for a server whose HLS segments aim at `hls_segment`.
    pub(crate) fn new(hls_segment: Duration) -> Self {
        Self { hls_segment, no_pat: Mutex::new(HashSet::new()) }
    }

    /// The blocks known to hold no PAT.
    pub(crate) fn no_pat(&self) -> std::sync::MutexGuard<'_, HashSet<BlockKey>> {
        self.no_pat.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One consistent-enough snapshot of the whole server, asked of every owner at once.
#[derive(Debug, Default)]
pub(crate) struct Gathered {
    /// The scheduler thread's counters, per disk and per stream.
    pub(crate) sched: SchedSnapshot,
    /// The sender thread's counters.
    pub(crate) send: SenderStats,
    /// The RTSP sessions, with their scheduler and sender counters filled in.
    pub(crate) sessions: Vec<SessionInfo>,
    /// Switches between renditions and degraded admissions.
    pub(crate) abr: AbrStats,
    /// What the cluster's takeover rules did on this node.
    pub(crate) takeover: TakeoverStats,
    /// The reorganisation.
    pub(crate) reorg: ReorgStatus,
    /// The recordings.
    pub(crate) recordings: RecorderStats,
    /// Playable objects.
    pub(crate) objects: usize,
    /// Seconds since the server started.
    pub(crate) uptime_s: f64,
}

/// Asks the session manager, the scheduler, the sender and the reorganiser for their state.
pub(crate) async fn gather(s: &ApiState) -> Result<Gathered, ApiError> {
    let (ltx, lrx) = oneshot::channel();
    let (stx, srx) = oneshot::channel::<SchedSnapshot>();
    let (ptx, prx) = oneshot::channel::<SenderStats>();
    let (gtx, grx) = oneshot::channel();
    let (rtx, rrx) = oneshot::channel();
    let sent = s.sessions.send(SessionCommand::List { reply: ltx }).is_ok()
        && s.sched.send(SchedCommand::Stats { reply: stx }).is_ok()
        && s.sender.send(SenderCommand::Stats { reply: ptx }).is_ok()
        && s.sender.send(SenderCommand::Progress { reply: gtx }).is_ok()
        && s.reorg.send(ReorgCommand::Status { reply: rtx }).is_ok();
    if !sent {
        return Err(ApiError::unavailable());
    }
    let (Ok((mut sessions, abr, takeover)), Ok(sched), Ok(send), Ok(progress), Ok(reorg)) =
        (lrx.await, srx.await, prx.await, grx.await, rrx.await)
    else {
        return Err(ApiError::unavailable());
    };
    let progress: HashMap<u64, _> = progress.into_iter().map(|p| (p.stream.0, p)).collect();
    for session in &mut sessions {
        if let Some(st) = sched.per_stream.get(&StreamId(session.stream)) {
            session.missed_deadlines = st.missed;
            session.blocks_delivered = st.delivered;
        }
        if let Some(p) = progress.get(&session.stream) {
            if p.playing || p.packets > 0 {
                session.position_s = p.position.as_secs_f64();
            }
            session.pace = p.pace.as_f64();
            session.packets_sent = p.packets;
            session.bytes_sent = p.bytes;
        }
    }
    sessions.sort_by_key(|s| s.stream);
    Ok(Gathered {
        sched,
        send,
        sessions,
        abr,
        takeover,
        reorg,
        recordings: s.recorders.stats(),
        objects: s.library.list().len(),
        uptime_s: s.node.started.elapsed().as_secs_f64(),
    })
}

/// Requests refused, by status (`isochron_http_auth_refusals_total`).
#[derive(Debug, Default)]
pub(crate) struct Refusals {
    /// 401s.
    pub(crate) unauthorized: std::sync::atomic::AtomicU64,
    /// 403s.
    pub(crate) forbidden: std::sync::atomic::AtomicU64,
}

impl Refusals {
    /// Appends `isochron_http_auth_refusals_total` to a `/metrics` text.
    pub(crate) fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        use std::sync::atomic::Ordering::Relaxed;
        let _ = writeln!(
            out,
            "# HELP isochron_http_auth_refusals_total HTTP requests refused by the access policy \
             ([auth]), by status.\n# TYPE isochron_http_auth_refusals_total counter\n\
             isochron_http_auth_refusals_total{{status=\"401\"}} {}\n\
             isochron_http_auth_refusals_total{{status=\"403\"}} {}",
            self.unauthorized.load(Relaxed),
            self.forbidden.load(Relaxed)
        );
    }
}
