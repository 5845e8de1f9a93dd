//! The session manager: the one owner of the RTSP session core and of the cluster core.
//!
//! RTSP requests from every connection, RTCP liveness, the sender's and scheduler's notices,
//! cluster messages and membership, and the reaping tick all arrive as [`SessionCommand`]s on one
//! channel. The manager feeds them to the two sans-IO cores and carries out what they hand back:
//!
//! - [`ServerCore`] (RTSP, RFC 2326) says what a request means for a session: a PLAY, a PAUSE, a
//!   pace change, a session closed;
//! - [`ClusterCore`] (Yima §2.2) turns those into the session's *shares*: every node holding
//!   blocks of the object (this one included) reserves its share at its own scheduler, then
//!   reads and sends its own blocks on the session's clock. A single node is a cluster of one,
//!   driven by the same calls (its clock pinned by its scheduler, its pacer sending the whole
//!   object), so one code path serves both.
//!
//! A PLAY is answered once the cluster has admitted the session (reserve everywhere, then start:
//! a refusal is a 453 naming the node and disk) and, for a seek while playing, once every node
//! has stopped the previous run. PLAY order matters (RFC 2326 §12.33): the response (with
//! RTP-Info computed from the start packet's GSN and send time) goes back before the first
//! packet can leave: a single node's scheduler anchors the clock `startup_delay` after its first
//! block is in memory; a cluster's origin pins it `start_delay` ahead.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Sender;
use isochron_base::{
    BlockIndex, DiskId, Instant, IoFailure, MediaTime, NodeId, Pace, RunId, StreamId, TrackSeqs,
};
use isochron_cluster::message::{Dest, Role};
use isochron_cluster::{
    ClusterConfig, ClusterCore, Delivery, LocalAction, LocalAnchor, MemberInfo, Message, OpenSpec,
    Refusal, RunSpec, RunTracks, SessionEvent, ShareFailure, ShareKey, ShareReport, StartSpec,
    StopKind, TrackSpec,
};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::pacer::{
    PlayRun, RtcpMode, RunReport, SeqOffsets, ShareBlock, StreamSetup, TrackStamp,
};
use isochron_dataplane::rtx::RtxSetup;
use isochron_dataplane::sched_thread::{DecisionSink, SchedCommand};
use isochron_dataplane::sender::{OutFrame, SenderCommand, StreamTransport};
use isochron_dataplane::shards::Senders;
use isochron_rtsp::rtsp_types::{HeaderName, Method, Request, Response};
use isochron_rtsp::sdp::RTX_PAYLOAD_TYPE;
use isochron_rtsp::server::{
    ConnId, ConnInfo, Event, Handled, PauseAction, PlayAction, PlayOutcome, PlayStart, Position,
    RateAction, Rates, ServerCore, SessionTransport,
};
use isochron_sched::{Anchor, Decision, OpenStream};
use isochron_store::Epoch;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::library::{Library, ObjectEntry};

/// Commands to the session manager.
#[derive(Debug)]
pub enum SessionCommand {
    /// An RTSP request from a connection, answered on `reply`.
    Request {
        /// The connection.
        conn: ConnInfo,
        /// The request.
        req: Box<Request<Vec<u8>>>,
        /// The response.
        reply: oneshot::Sender<Response<Vec<u8>>>,
    },
    /// A connection opened; `frames` is its interleaved frame queue.
    ConnOpened {
        /// The connection.
        conn: ConnId,
        /// Its frame queue.
        frames: mpsc::Sender<OutFrame>,
    },
    /// A connection closed.
    ConnClosed {
        /// The connection.
        conn: ConnId,
    },
    /// RTCP arrived on the UDP socket, naming these media SSRCs.
    Rtcp {
        /// SSRCs of our streams it reports on.
        media_ssrcs: Vec<u32>,
    },
    /// RTCP arrived interleaved on a connection.
    InterleavedRtcp {
        /// The connection.
        conn: ConnId,
        /// The channel.
        channel: u8,
    },
    /// The sender sent a local stream's last packet of a run.
    ShareEnded {
        /// The local stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: RunReport,
    },
    /// The sender stopped a local stream's run.
    ShareStopped {
        /// The local stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: RunReport,
    },
    /// The scheduler decided on a share's admission.
    Admitted {
        /// The share.
        key: ShareKey,
        /// The decision (`None`: the scheduler thread is gone).
        decision: Option<Decision>,
    },
    /// A block of a local stream could not be read.
    ReadFailed {
        /// The stream.
        stream: StreamId,
        /// Why.
        error: IoFailure,
    },
    /// A message from another node.
    Peer {
        /// The node.
        from: NodeId,
        /// The message (boxed: a run's start is a few hundred bytes).
        msg: Box<Message>,
    },
    /// A node's record or liveness changed (from etcd).
    Member {
        /// The node.
        info: MemberInfo,
        /// Where it takes relayed RTP.
        relay: Option<SocketAddr>,
    },
    /// A node left the cluster for good: not live, and no disk in use is its own (removed with
    /// `isochron node remove`, or dead and its disks retired) ([`ClusterCore::remove_member`]).
    Forget {
        /// The node.
        id: NodeId,
    },
    /// Allocate a stream id for a recording, from the sequence the RTSP sessions' streams use.
    AllocateStream {
        /// The id.
        reply: oneshot::Sender<StreamId>,
    },
    /// List the sessions.
    List {
        /// The reply.
        reply: oneshot::Sender<Vec<SessionInfo>>,
    },
    /// Report the cluster as this node sees it.
    Cluster {
        /// The reply.
        reply: oneshot::Sender<ClusterInfo>,
    },
    /// The oldest placement epoch a session or share of this node reads (`None`: none runs).
    OldestEpoch {
        /// The reply.
        reply: oneshot::Sender<Option<Epoch>>,
    },
}

/// A session as the HTTP API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct SessionInfo {
    /// The RTSP session id.
    pub id: String,
    /// The stream id.
    pub stream: u64,
    /// The object's name.
    pub object: String,
    /// `ready`, `playing` or `paused`.
    pub state: String,
    /// `udp` or `tcp`.
    pub transport: String,
    /// `bipartite` or `relay` (a single node: `bipartite`, it sends everything itself).
    pub delivery: String,
    /// The client: where UDP media goes (`ip:rtp_port`), or the RTSP connection's peer for
    /// interleaved (TCP) media.
    pub client: String,
    /// The object's mean bit rate, bit/s.
    pub bitrate_bps: u64,
    /// Blocks of this stream not in memory by their deadline (the scheduler's per-stream count);
    /// filled in by the HTTP API.
    pub missed_deadlines: u64,
    /// Blocks the scheduler has delivered to the sender for this stream.
    pub blocks_delivered: u64,
    /// Media time of the last packet sent, seconds into the object (the sender's; filled in by
    /// the HTTP API).
    pub position_s: f64,
    /// The pace (1.0 = the object's own timing), from the sender.
    pub pace: f64,
    /// RTP packets sent to this session (the sender's count).
    pub packets_sent: u64,
    /// RTP payload bytes sent to this session.
    pub bytes_sent: u64,
}

/// The cluster as one node sees it.
#[derive(Clone, Debug, Serialize)]
pub struct ClusterInfo {
    /// Sessions this node is the origin of.
    pub sessions: usize,
    /// Shares this node runs (its own sessions' included).
    pub shares: usize,
    /// Every member: name, health, clock offset.
    pub members: Vec<MemberSummary>,
    /// Times this node found it had stood still (`cluster::ClusterConfig::stall`).
    pub stalls: u64,
}

/// One member, as the cluster core sees it.
#[derive(Clone, Debug, Serialize)]
pub struct MemberSummary {
    /// Its id.
    pub id: u32,
    /// Its name.
    pub name: String,
    /// `up`, `suspect` or `down`.
    pub health: String,
    /// Its clock minus ours, ns.
    pub clock_offset_ns: i64,
    /// Heartbeat round trip, µs.
    pub round_trip_us: Option<u64>,
}

/// A node's link to the rest of the cluster, when it is in one.
pub(crate) struct ClusterLink {
    /// Messages for peers.
    pub(crate) out: mpsc::UnboundedSender<(NodeId, Message)>,
    /// The shared store.
    pub(crate) store: Arc<isochron_diskio::Store>,
    /// The disks this node owns: its shares read only these.
    pub(crate) local_disks: Arc<BTreeSet<DiskId>>,
    /// What this node's IO knows of the cluster (whether etcd answers).
    pub(crate) view: Arc<crate::cluster_view::ClusterView>,
}

type Reply = oneshot::Sender<Response<Vec<u8>>>;

/// What an origin session waits for before it can answer a request.
enum Waiting {
    /// The cluster's admission, to start a PLAY.
    Open(PlayAction, Reply),
    /// Every node to stop the running run, to start a PLAY (a seek).
    StopForPlay(PlayAction, Reply),
    /// Every node to stop at the pause cutoff.
    Pause(PauseAction, Reply),
    /// Every node to stop after a node failed: the client's stream ends there, with a BYE
    /// giving this reason.
    Fail(Arc<str>),
}

/// A session this node is the origin of.
struct Origin {
    entry: Arc<ObjectEntry>,
    delivery: Delivery,
    opened: bool,
    run: RunId,
    running: bool,
    run_start: Position,
    /// Each track's sequence offset in the current run.
    seq_offsets: Vec<u16>,
    /// The sequence number each track's next packet gets; `None` before the first PLAY.
    next_seqs: Option<Vec<u16>>,
    /// The current (or last) run is trick play.
    trick: bool,
    pace: Pace,
    waiting: Option<Waiting>,
}

impl Origin {
    /// A session not opened yet.
    fn new(
        entry: Arc<ObjectEntry>,
        delivery: Delivery,
        pace: Pace,
        waiting: Option<Waiting>,
    ) -> Self {
        Self {
            entry,
            delivery,
            opened: false,
            run: RunId(0),
            running: false,
            run_start: Position::START,
            seq_offsets: Vec::new(),
            next_seqs: None,
            trick: false,
            pace,
            waiting,
        }
    }
}

/// A share this node runs.
struct Share {
    /// The local stream the scheduler and sender know it by.
    stream: StreamId,
    entry: Arc<ObjectEntry>,
    /// Whether the sender knows the stream.
    added: bool,
    run: RunId,
}

/// Everything the manager needs.
pub(crate) struct Manager {
    pub(crate) core: ServerCore,
    pub(crate) cluster: ClusterCore,
    link: Option<ClusterLink>,
    /// The store, in a cluster (for objects not in the library yet).
    store: Option<Arc<isochron_diskio::Store>>,
    pub(crate) library: Arc<Library>,
    pub(crate) clock: Clock,
    pub(crate) sched: Sender<SchedCommand>,
    pub(crate) sender: Senders,
    pub(crate) cname: String,
    /// The manager's own channel, for answers from spawned waits.
    me: mpsc::UnboundedSender<SessionCommand>,
    pub(crate) conns: HashMap<ConnId, mpsc::Sender<OutFrame>>,
    /// Each open connection's client address, learnt from its requests (for the API).
    peers: HashMap<ConnId, SocketAddr>,
    /// Each connection's delivery wish (`?delivery=`) and player (`User-Agent`).
    prefs: HashMap<ConnId, (Option<Delivery>, String)>,
    origins: HashMap<StreamId, Origin>,
    shares: HashMap<ShareKey, Share>,
    share_of: HashMap<StreamId, ShareKey>,
    relays: HashMap<NodeId, SocketAddr>,
}

impl Manager {
    /// A manager around `core`; in a cluster when `link` is given (this node is `node`,
    /// called `name`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        core: ServerCore,
        library: Arc<Library>,
        clock: Clock,
        sched: Sender<SchedCommand>,
        sender: Senders,
        cname: String,
        me: mpsc::UnboundedSender<SessionCommand>,
        node: (NodeId, String),
        link: Option<ClusterLink>,
    ) -> Self {
        // The Unix time of the clock's zero: anchors travel as Unix time between nodes.
        let unix_now =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let unix_base_ns = unix_now.saturating_sub(clock.now().as_nanos());
        let mut config = ClusterConfig::new(node.0, node.1, unix_base_ns);
        // With copies on other nodes a lost node's share is taken over (`take_over`).
        config.replication = link.as_ref().map_or(1, |l| l.store.replication());
        let cluster = ClusterCore::new(config);
        Self {
            core,
            cluster,
            store: link.as_ref().map(|l| Arc::clone(&l.store)),
            link,
            library,
            clock,
            sched,
            sender,
            cname,
            me,
            conns: HashMap::new(),
            peers: HashMap::new(),
            prefs: HashMap::new(),
            origins: HashMap::new(),
            shares: HashMap::new(),
            share_of: HashMap::new(),
            relays: HashMap::new(),
        }
    }

    /// Runs until every command sender is gone.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<SessionCommand>) {
        // The cluster core's timers (heartbeats first) are due at most a heartbeat apart.
        let mut tick = tokio::time::interval(self.cluster.config().heartbeat);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut stalls_seen = self.cluster.stalls();
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => {
                        // How far the senders have got, fresh for whichever call into the
                        // cluster core comes first after a stall: it re-pins the relayed
                        // sessions by the senders' lag (`ClusterCore::repin_relayed`), and a
                        // task that only waited for the CPU while they sent must not.
                        let now = self.clock.now();
                        self.cluster.handle_sent_through(self.sender.sent_through().unwrap_or(now));
                        self.handle(cmd);
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    let now = self.clock.now();
                    // No shard playing a stream: nothing due is unsent.
                    self.cluster.handle_sent_through(self.sender.sent_through().unwrap_or(now));
                    self.core.handle_timeout(now);
                    self.cluster.handle_timeout(now);
                }
            }
            // A stall is seen by whichever call into the core comes first after it: a tick, or
            // a message that waited in a socket (a peer's word that it took this node's part
            // over, say).
            let stalls = self.cluster.stalls();
            if stalls > stalls_seen {
                stalls_seen = stalls;
                if self.cluster.session_count() + self.cluster.share_count() > 0 {
                    warn!(
                        "this node stood still (stopped, or starved of CPU): its peers are \
                         judged only on the time it was awake"
                    );
                }
            }
            self.drive();
        }
    }

    fn handle(&mut self, cmd: SessionCommand) {
        let now = self.clock.now();
        match cmd {
            SessionCommand::Request { conn, req, reply } => {
                self.peers.insert(conn.id, conn.peer);
                self.note_prefs(conn.id, &req);
                match self.core.handle_request(now, &conn, &req, &*self.library) {
                    Handled::Respond(r) => {
                        let _ = reply.send(r);
                    }
                    Handled::Play(action) => self.play(now, conn.id, action, reply),
                    Handled::Pause(action) => self.pause(now, action, reply),
                    Handled::Rate(action) => {
                        let _ = reply.send(self.rate(now, action));
                    }
                }
            }
            SessionCommand::ConnOpened { conn, frames } => {
                self.conns.insert(conn, frames);
            }
            SessionCommand::ConnClosed { conn } => {
                self.conns.remove(&conn);
                self.peers.remove(&conn);
                self.prefs.remove(&conn);
                self.core.handle_conn_closed(now, conn);
            }
            SessionCommand::Rtcp { media_ssrcs } => {
                for ssrc in media_ssrcs {
                    self.core.handle_rtcp(now, ssrc);
                }
            }
            SessionCommand::InterleavedRtcp { conn, channel } => {
                self.core.handle_interleaved_rtcp(now, conn, channel);
            }
            SessionCommand::ShareEnded { stream, run, report } => {
                if let Some(key) = self.share_key(stream, run) {
                    self.cluster.handle_share_ended(now, key, run, share_report(report));
                }
            }
            SessionCommand::ShareStopped { stream, run, report } => {
                if let Some(key) = self.share_key(stream, run) {
                    self.cluster.handle_share_stopped(now, key, run, share_report(report));
                }
            }
            SessionCommand::Admitted { key, decision } => {
                let node = self.cluster.config().name.clone();
                let result = match decision {
                    Some(Decision::Admit) => Ok(()),
                    None => {
                        self.forget_share(key);
                        Err(Refusal { node, disk: None, reason: "scheduler stopped".into() })
                    }
                    Some(Decision::Reject(r)) => {
                        let disk = match &r {
                            isochron_sched::Refusal::Bandwidth(o) => {
                                o.disks.first().map(|d| d.disk)
                            }
                            isochron_sched::Refusal::NoProfile { disk } => Some(*disk),
                            _ => None,
                        };
                        info!(share = %key, reason = %r, "admission: rejected");
                        self.forget_share(key);
                        Err(Refusal { node, disk, reason: r.to_string() })
                    }
                };
                self.cluster.handle_admitted(now, key, result);
            }
            SessionCommand::ReadFailed { stream, error } => {
                warn!(%stream, %error, "a block could not be read");
                if let Some(&key) = self.share_of.get(&stream)
                    && let Some(run) = self.shares.get(&key).map(|s| s.run)
                {
                    self.cluster.handle_share_failed(now, key, run, &ShareFailure::Read(error));
                }
            }
            SessionCommand::Peer { from, msg } => self.cluster.handle_message(now, from, *msg),
            SessionCommand::Member { info, relay } => {
                if let Some(addr) = relay {
                    self.relays.insert(info.id, addr);
                }
                self.cluster.handle_member(now, info);
            }
            SessionCommand::Forget { id } => {
                info!(node = %id, "a node that left the cluster is forgotten");
                self.cluster.remove_member(now, id);
            }
            SessionCommand::AllocateStream { reply } => {
                let _ = reply.send(self.core.allocate_stream());
            }
            SessionCommand::List { reply } => {
                let _ = reply.send(self.list());
            }
            SessionCommand::Cluster { reply } => {
                let _ = reply.send(self.cluster_info(now));
            }
            SessionCommand::OldestEpoch { reply } => {
                let origins = self.origins.values().map(|o| o.entry.epoch);
                let shares = self.shares.values().map(|s| s.entry.epoch);
                let _ = reply.send(origins.chain(shares).min());
            }
        }
    }

    /// Carries out what the cores handed back, until they have nothing more.
    fn drive(&mut self) {
        loop {
            let mut any = false;
            while let Some(ev) = self.core.poll_event() {
                any = true;
                let Event::Closed { session, stream, reason } = ev;
                debug!(%stream, ?session, ?reason, "session closed");
                self.origins.remove(&stream);
                let now = self.clock.now();
                self.cluster.close(now, stream);
            }
            while let Some(action) = self.cluster.poll_local() {
                any = true;
                self.local(action);
            }
            while let Some(ev) = self.cluster.poll_event() {
                any = true;
                self.session_event(ev);
            }
            while let Some((to, msg)) = self.cluster.poll_transmit() {
                any = true;
                if let Some(link) = &self.link {
                    let _ = link.out.send((to, msg));
                }
            }
            if !any {
                break;
            }
        }
    }

    // ----- the origin's side -------------------------------------------------------------------

    fn note_prefs(&mut self, conn: ConnId, req: &Request<Vec<u8>>) {
        let entry = self.prefs.entry(conn).or_insert((None, String::new()));
        if let Some(ua) = req.header(&HeaderName::from_static_str("User-Agent").expect("valid")) {
            entry.1 = ua.as_str().to_owned();
        }
        if matches!(req.method(), Method::Setup | Method::Play | Method::Describe)
            && let Some(d) = req.request_uri().and_then(|u| delivery_query(u.query()))
        {
            entry.0 = Some(d);
        }
    }

    /// The delivery a connection's player gets: what it asked for, else by player (`auto`).
    fn delivery_for(&self, conn: ConnId) -> Delivery {
        match self.prefs.get(&conn) {
            Some((Some(d), _)) => *d,
            Some((None, ua)) => auto_delivery(ua),
            None => Delivery::Relay,
        }
    }

    fn play(&mut self, now: Instant, conn: ConnId, action: PlayAction, reply: Reply) {
        let stream = action.stream;
        if let Some(o) = self.origins.get_mut(&stream) {
            if o.waiting.is_some() {
                let outcome =
                    PlayOutcome::Failed { reason: "another request is in progress".into() };
                let _ = reply.send(self.core.finish_play(now, action, outcome));
                return;
            }
            if o.running {
                // A seek while playing: every node stops first, to learn where numbering stands.
                o.waiting = Some(Waiting::StopForPlay(action, reply));
                self.cluster.stop(now, stream, StopKind::Now);
                return;
            }
            if o.opened {
                let resp = self.start(now, action);
                let _ = reply.send(resp);
                return;
            }
        }
        if let Some(link) = &self.link
            && !link.view.etcd_ok.load(std::sync::atomic::Ordering::Relaxed)
        {
            // Membership and placement cannot be confirmed: sessions already open go on, new
            // ones wait for etcd (docs/design/etcd.md).
            let reason = "etcd is unreachable: this node takes no new sessions until it answers";
            warn!(stream = %stream, "{reason}");
            let outcome = PlayOutcome::Unavailable { reason: reason.into() };
            let _ = reply.send(self.core.finish_play(now, action, outcome));
            return;
        }
        let Some(entry) = self.library.by_id(action.object) else {
            let outcome = PlayOutcome::Failed { reason: "object was removed".into() };
            let _ = reply.send(self.core.finish_play(now, action, outcome));
            return;
        };
        let delivery = self.delivery_for(conn);
        let spec = OpenSpec {
            stream,
            object: entry.record.id,
            epoch: entry.epoch,
            avg_bitrate: entry.record.avg_bitrate,
            peak_bitrate: entry.record.peak_bitrate,
            delivery,
        };
        let pace = self.origins.get(&stream).map_or(Pace::NOMINAL, |o| o.pace);
        let waiting = Some(Waiting::Open(action, reply));
        self.origins.insert(stream, Origin::new(entry, delivery, pace, waiting));
        self.cluster.open(now, spec);
    }

    /// Starts a run of an opened session everywhere and answers the PLAY.
    fn start(&mut self, now: Instant, action: PlayAction) -> Response<Vec<u8>> {
        let stream = action.stream;
        let Some(view) = self.core.session_by_stream(stream) else {
            let outcome = PlayOutcome::Failed { reason: "session vanished".into() };
            return self.core.finish_play(now, action, outcome);
        };
        // Each track as the client set it up (all of them go the same way).
        let n = view.track_count();
        let mut set_up: Vec<Option<(u32, u16, u32, Dest)>> = vec![None; n];
        for t in view.tracks() {
            let dest = match t.transport() {
                SessionTransport::Udp { client_rtp, client_rtcp, .. } => {
                    Dest::Udp { rtp: *client_rtp, rtcp: *client_rtcp }
                }
                SessionTransport::Interleaved { .. } => Dest::Origin,
            };
            set_up[t.index()] = Some((t.ssrc(), t.seq_offset(), t.rtp_ts_offset(), dest));
        }
        let Some(o) = self.origins.get_mut(&stream) else {
            let outcome = PlayOutcome::Failed { reason: "session vanished".into() };
            return self.core.finish_play(now, action, outcome);
        };
        let single = self.link.is_none();
        let rec = &o.entry.record;
        // Trick play (Scale, RFC 2326 §12.34): key frames of native objects on a single node
        // (its packets are numbered by the one sender that sends them all). Speed (§12.35):
        // the run paced that much faster or slower.
        let trick = action.scale.filter(|_| single && rec.media.is_some());
        let speed = action.speed.filter(|_| trick.is_none());
        let run_pace = trick.or(speed).unwrap_or(o.pace);
        // A trick run starts at a key frame; the run after one restarts at the key frame at or
        // before where it stopped (its positions count the packets it sent, not the track's).
        let start = match action.start {
            PlayStart::Seek(t) => seek_position(rec, t),
            PlayStart::Resume(pos) if trick.is_some() || o.trick => seek_position(rec, pos.time),
            PlayStart::Resume(pos) => pos,
            PlayStart::Beginning => seek_position(rec, MediaTime::ZERO),
        };
        o.trick = trick.is_some();
        // Numbering continues across seeks: each track's first packet gets its next number.
        let seq_offsets: Vec<u16> = (0..n)
            .map(|t| match (&o.next_seqs, set_up[t]) {
                (Some(next), _) => {
                    next.get(t).copied().unwrap_or(0).wrapping_sub(start.track_seq(t) as u16)
                }
                (None, Some((_, first, _, _))) => first,
                (None, None) => 0,
            })
            .collect();
        let tracks: Vec<TrackSpec> = (0..n)
            .map(|t| {
                let (clock_rate, payload_type) = rec
                    .media
                    .as_ref()
                    .and_then(|m| m.tracks.get(t))
                    .map_or((90_000, 33), |d| (d.clock_rate, d.payload_type));
                let (ssrc, _, rtp_ts_offset, dest) = set_up[t].unwrap_or((0, 0, 0, Dest::Origin));
                TrackSpec {
                    ssrc,
                    seq_offset: seq_offsets[t],
                    rtp_ts_offset,
                    clock_rate,
                    payload_type,
                    dest,
                    enabled: set_up[t].is_some(),
                }
            })
            .collect();
        o.run = o.run.next();
        o.running = true;
        o.run_start = start;
        o.seq_offsets.clone_from(&seq_offsets);
        let run = o.run;
        let end = action.end;
        let spec = StartSpec { start, end, tracks: RunTracks::new(&tracks), trick };
        debug!(%stream, %run, gsn = %start.gsn, npt = %start.time, ?seq_offsets, ?trick, ?speed, "play");
        // An open range unless the client asked to stop early (see PlayOutcome::Started).
        let end = end.filter(|e| *e < rec.duration);
        self.cluster.start(now, stream, run, spec, run_pace);
        let rates = Rates { scale: trick, speed };
        self.core.finish_play(
            now,
            action,
            PlayOutcome::Started { first: start, end, seq_offsets, rates },
        )
    }

    fn pause(&mut self, now: Instant, action: PauseAction, reply: Reply) {
        let stream = action.stream;
        let Some(o) = self.origins.get_mut(&stream) else {
            // Never played: it is at its start.
            let _ = reply.send(self.core.finish_pause(now, action, Position::START));
            return;
        };
        if o.waiting.is_some() || !o.running {
            let at = match o.next_seqs {
                Some(_) => self.core.session_by_stream(stream).and_then(|v| v.position()),
                None => None,
            }
            .unwrap_or(o.run_start);
            let _ = reply.send(self.core.finish_pause(now, action, at));
            return;
        }
        o.waiting = Some(Waiting::Pause(action, reply));
        self.cluster.stop(now, stream, StopKind::Pause);
    }

    /// MTFC: paces the session at the pace asked for, on every node. A session without a run
    /// gets it when it starts.
    fn rate(&mut self, now: Instant, action: RateAction) -> Response<Vec<u8>> {
        let applied = self.cluster.pace(now, action.stream, action.pace).unwrap_or(action.pace);
        if let Some(o) = self.origins.get_mut(&action.stream) {
            o.pace = applied;
        } else {
            // Before the first PLAY: kept with the session until it opens.
            self.pending_pace(action.stream, applied);
        }
        debug!(stream = %action.stream, pace = %applied, "rate change");
        self.core.finish_rate(now, action, applied)
    }

    /// A pace asked for before the session's first PLAY.
    fn pending_pace(&mut self, stream: StreamId, pace: Pace) {
        let Some(view) = self.core.session_by_stream(stream) else { return };
        let Some(entry) = self.library.by_id(view.object()) else { return };
        // Not opened: the PLAY opens it with the player's delivery and this pace.
        self.origins.insert(stream, Origin::new(entry, Delivery::Relay, pace, None));
    }

    fn session_event(&mut self, ev: SessionEvent) {
        let now = self.clock.now();
        let single = self.link.is_none();
        match ev {
            SessionEvent::Opened { stream } => {
                let Some(o) = self.origins.get_mut(&stream) else { return };
                o.opened = true;
                info!(%stream, object = %o.entry.record.name, "admission: admitted");
                if let Some(Waiting::Open(action, reply)) = o.waiting.take() {
                    let resp = self.start(now, action);
                    let _ = reply.send(resp);
                }
            }
            SessionEvent::Refused { stream, refusal } => {
                let Some(o) = self.origins.remove(&stream) else { return };
                info!(%stream, object = %o.entry.record.name, %refusal, "admission: rejected");
                if let Some(Waiting::Open(action, reply)) = o.waiting {
                    // A single node's refusal is its scheduler's own words.
                    let reason = if single { refusal.reason } else { refusal.to_string() };
                    let outcome = PlayOutcome::Rejected { reason };
                    let _ = reply.send(self.core.finish_play(now, action, outcome));
                }
            }
            SessionEvent::Stopped { stream, run, next, last_sent } => {
                let Some(o) = self.origins.get_mut(&stream) else { return };
                if o.run != run {
                    return;
                }
                o.running = false;
                let at = RunReport { next, last_sent }.resume_at(o.run_start);
                o.next_seqs = Some(next_seqs(&o.seq_offsets, &at));
                match o.waiting.take() {
                    Some(Waiting::StopForPlay(action, reply)) => {
                        let resp = self.start(now, action);
                        let _ = reply.send(resp);
                    }
                    Some(Waiting::Pause(action, reply)) => {
                        let _ = reply.send(self.core.finish_pause(now, action, at));
                    }
                    Some(Waiting::Fail(reason)) => {
                        // The client is told why (RFC 3550 §6.6) by the RTCP of this node's share,
                        // and its RTSP connection is reset: to players a BYE reads as a normal
                        // end, a reset at least as a warning (docs/design/closing.md).
                        let key = ShareKey { origin: self.cluster.config().node, stream };
                        if let Some(share) = self.shares.get(&key) {
                            let bye =
                                SenderCommand::Bye { stream: share.stream, reason: Some(reason) };
                            let _ = self.sender.send(bye);
                        }
                        let conn = self.core.session_by_stream(stream).and_then(|s| s.conn());
                        if let Some(frames) = conn.and_then(|c| self.conns.get(&c)) {
                            let frames = frames.clone();
                            tokio::spawn(async move {
                                // After the BYE the sender queues, if it comes within a moment.
                                tokio::time::sleep(Duration::from_millis(100)).await;
                                frames.send(OutFrame::Close).await
                            });
                        }
                        self.core.handle_end_of_stream(now, stream, at);
                    }
                    other => o.waiting = other,
                }
            }
            SessionEvent::Ended { stream, run, last_sent } => {
                let Some(o) = self.origins.get_mut(&stream) else { return };
                if o.run != run {
                    return;
                }
                o.running = false;
                let at = RunReport { next: None, last_sent }.resume_at(o.run_start);
                o.next_seqs = Some(next_seqs(&o.seq_offsets, &at));
                debug!(%stream, %run, gsn = %at.gsn, "end of stream");
                self.core.handle_end_of_stream(now, stream, at);
            }
            SessionEvent::Failed { stream, run, error } => {
                warn!(%stream, %run, %error, "ending stream: a node cannot go on");
                let Some(o) = self.origins.get_mut(&stream) else { return };
                if o.run == run && o.running && o.waiting.is_none() {
                    o.waiting = Some(Waiting::Fail(Arc::from(error.as_str())));
                    self.cluster.stop(now, stream, StopKind::Now);
                }
            }
        }
    }

    // ----- this node's shares ------------------------------------------------------------------

    fn local(&mut self, action: LocalAction) {
        match action {
            LocalAction::Admit { key, object, epoch, avg_bitrate, peak_bitrate, lost } => {
                let entry = self.library.by_id(object).or_else(|| self.catalog_entry(object));
                let entry = entry.map(|e| self.at_epoch(e, epoch));
                let entry = match entry.map(|e| self.without_lost(e, &lost)) {
                    Some(Ok(entry)) => entry,
                    Some(Err(reason)) => {
                        let now = self.clock.now();
                        let node = self.cluster.config().name.clone();
                        let refusal = Refusal { node, disk: None, reason };
                        self.cluster.handle_admitted(now, key, Err(refusal));
                        return;
                    }
                    None => {
                        let now = self.clock.now();
                        let node = self.cluster.config().name.clone();
                        let reason = format!("object {object} is not in this node's library");
                        let refusal = Refusal { node, disk: None, reason };
                        self.cluster.handle_admitted(now, key, Err(refusal));
                        return;
                    }
                };
                let stream = if key.origin == self.cluster.node() {
                    key.stream
                } else {
                    self.core.allocate_stream()
                };
                let req = OpenStream {
                    stream,
                    plan: Arc::clone(&entry.plan),
                    avg_bitrate,
                    peak_bitrate,
                    local: self.link.as_ref().map(|l| Arc::clone(&l.local_disks)),
                };
                let name = entry.record.name.clone();
                self.shares.insert(key, Share { stream, entry, added: false, run: RunId(0) });
                self.share_of.insert(stream, key);
                let me = self.me.clone();
                let reply = DecisionSink::new(move |d| {
                    let _ = me.send(SessionCommand::Admitted { key, decision: Some(d) });
                });
                if self.sched.send(SchedCommand::Open { req, name, reply }).is_err() {
                    let _ = self.me.send(SessionCommand::Admitted { key, decision: None });
                }
            }
            LocalAction::Start { key, run, spec, anchor } => {
                self.start_share(key, run, &spec, anchor)
            }
            LocalAction::Stop { key, run, cutoff } => {
                let Some(share) = self.shares.get(&key) else { return };
                let _ = self.sender.send(SenderCommand::Stop { stream: share.stream, run, cutoff });
            }
            LocalAction::Pace { key, run, anchor, pace } => {
                let Some(share) = self.shares.get(&key) else { return };
                let stream = share.stream;
                let _ = match anchor {
                    Some(a) => self.sender.send(SenderCommand::Reanchor {
                        stream,
                        run,
                        anchor: Anchor { wall: a.wall, media: a.media },
                        pace,
                    }),
                    None => self.sender.send(SenderCommand::Pace { stream, pace }),
                };
            }
            LocalAction::Bye { key } => {
                if let Some(share) = self.shares.get(&key) {
                    let _ =
                        self.sender.send(SenderCommand::Bye { stream: share.stream, reason: None });
                }
            }
            LocalAction::Close { key } => self.forget_share(key),
            LocalAction::TakeOver { key, run, dead, from, cause } => {
                self.take_over(key, run, &dead, from);
                info!(%key, %run, ?dead, ?from, ?cause, "taking over a lost node's part of a session");
            }
            LocalAction::GiveBack { key, run, dead, node, at } => {
                let given = self.give_back(key, run, &dead, node, at);
                info!(%key, %run, %node, ?at, given, "a lost node is back: giving its part of a session back");
            }
            LocalAction::Withhold { key, run, from, takers, until } => {
                let Some(blocks) = self.withheld_blocks(key, run, from, takers.as_ref()) else {
                    return;
                };
                let Some(share) = self.shares.get(&key) else { return };
                let stream = share.stream;
                let n = blocks.as_ref().map(Vec::len);
                let cmd = SenderCommand::Withhold { stream, run, from, blocks, until };
                let _ = self.sender.send(cmd);
                info!(%key, %run, ?from, ?takers, ?until, blocks = ?n, "this node's part of a session was taken over: holding it back");
            }
            LocalAction::Freeze { key, run } | LocalAction::Thaw { key, run } => {
                let frozen = matches!(action, LocalAction::Freeze { .. });
                let Some(share) = self.shares.get(&key).filter(|s| s.run == run) else { return };
                let stream = share.stream;
                let _ = self.sender.send(SenderCommand::Freeze { stream, run, frozen });
                if frozen {
                    info!(%key, %run, "the origin of a relayed session is silent: waiting for it");
                } else {
                    info!(%key, %run, "the origin of a relayed session speaks again: going on");
                }
            }
            LocalAction::Release { key, run, at } => {
                let Some(share) = self.shares.get(&key).filter(|s| s.run == run) else { return };
                let stream = share.stream;
                let _ = self.sender.send(SenderCommand::Release { stream, run, at });
                info!(%key, %run, ?at, "taking this node's part of a session back");
            }
        }
    }

    /// The blocks of the share's plan from `from` on whose next copy (the first on another
    /// node) is on one of `takers` (`None`: every block, `Some(None)`); `None` for a share not
    /// running `run`.
    fn withheld_blocks(
        &self,
        key: ShareKey,
        run: RunId,
        from: MediaTime,
        takers: Option<&BTreeSet<NodeId>>,
    ) -> Option<Option<Vec<BlockIndex>>> {
        let share = self.shares.get(&key).filter(|s| s.run == run)?;
        let (Some(takers), Some(link)) = (takers, self.link.as_ref()) else { return Some(None) };
        let now = self.clock.now();
        let names: BTreeSet<String> =
            self.cluster.members(now).filter(|m| takers.contains(&m.id)).map(|m| m.name).collect();
        let meta = link.store.meta();
        let plan = &share.entry.plan;
        let first = plan.blocks.partition_point(|b| b.first_send_time <= from).saturating_sub(1);
        let blocks = plan.blocks.iter().enumerate().skip(first).filter(|(_, b)| {
            let next = b.copies.iter().find(|d| !link.local_disks.contains(d));
            let owner = next.and_then(|d| meta.disk(d)).and_then(|r| r.owner.as_deref());
            owner.is_some_and(|o| names.contains(o))
        });
        Some(Some(blocks.map(|(i, _)| BlockIndex(i as u32)).collect()))
    }

    /// Carries out [`LocalAction::GiveBack`]: the blocks after the one holding `at` that this
    /// node took over only because `node` was lost go back to the scheduler, which stops
    /// reading those it has not reached, and the pacer passes over every packet of them, those
    /// read ahead too (`node` sends them whole). Returns how many were named.
    fn give_back(
        &mut self,
        key: ShareKey,
        run: RunId,
        dead: &BTreeSet<NodeId>,
        node: NodeId,
        at: MediaTime,
    ) -> usize {
        let (Some(link), Some(share)) = (self.link.as_ref(), self.shares.get(&key)) else {
            return 0;
        };
        if share.run != run {
            return 0;
        }
        let now = self.clock.now();
        let still = self.alive_names(now, dead);
        let mut with_node = dead.clone();
        with_node.insert(node);
        let before = self.alive_names(now, &with_node);
        let meta = link.store.meta();
        let is_out = |d: DiskId, alive: &BTreeSet<String>| {
            meta.disk(d).and_then(|r| r.owner.as_deref()).is_some_and(|o| !alive.contains(o))
        };
        let plan = &share.entry.plan;
        let holding = plan.blocks.partition_point(|b| b.first_send_time <= at).saturating_sub(1);
        let now_mine: BTreeSet<BlockIndex> =
            taken_blocks(plan, &link.local_disks, |d| is_out(d, &still), at)
                .iter()
                .map(|b| b.index)
                .collect();
        let blocks: Vec<BlockIndex> =
            taken_blocks(plan, &link.local_disks, |d| is_out(d, &before), at)
                .iter()
                .map(|b| b.index)
                .filter(|i| i.0 as usize > holding && !now_mine.contains(i))
                .collect();
        if blocks.is_empty() {
            return 0;
        }
        let n = blocks.len();
        // Those read already (the lookahead) are not sent either: their node sends them whole.
        let stream = share.stream;
        let _ = self.sender.send(SenderCommand::PassOver { stream, run, blocks: blocks.clone() });
        let _ = self.sched.send(SchedCommand::GiveBack { stream, run, blocks });
        n
    }

    /// Carries out [`LocalAction::TakeOver`]: the blocks of the share's plan from `from` on
    /// whose first copy on a live node is on this node's disks (and that are not already its
    /// own) go to the scheduler (reads) and the pacer (sends) of the running share.
    fn take_over(&mut self, key: ShareKey, run: RunId, dead: &BTreeSet<NodeId>, from: MediaTime) {
        let (Some(link), Some(share)) = (self.link.as_ref(), self.shares.get(&key)) else {
            return;
        };
        if share.run != run {
            return;
        }
        let now = self.clock.now();
        // Out of the session: its lost members, and nodes no longer members at all (removed).
        let alive = self.alive_names(now, dead);
        let meta = link.store.meta();
        let is_dead = |d: DiskId| {
            meta.disk(d).and_then(|r| r.owner.as_deref()).is_some_and(|o| !alive.contains(o))
        };
        let plan = &share.entry.plan;
        // On the session's origin, a block from here on with no copy left: nobody can send
        // it, and the session must not go on with a hole. Only the origin says so: a member
        // cut off from the others would find every block without a copy, and its share (an
        // orphan then) would close, though the others still send.
        let first = plan.blocks.partition_point(|b| b.first_send_time <= from).saturating_sub(1);
        let orphan = plan.blocks[first..].iter().position(|b| b.copies.iter().all(is_dead));
        if let Some(i) = orphan.filter(|_| key.origin == self.cluster.node()) {
            let error = ShareFailure::NoCopy(BlockIndex((first + i) as u32));
            self.cluster.handle_share_failed(now, key, run, &error);
            return;
        }
        let blocks = taken_blocks(plan, &link.local_disks, is_dead, from);
        if blocks.is_empty() {
            return;
        }
        let stream = share.stream;
        let indices: Vec<BlockIndex> = blocks.iter().map(|b| b.index).collect();
        let _ = self.sender.send(SenderCommand::Extend { stream, run, blocks, from });
        let _ = self.sched.send(SchedCommand::TakeOver { stream, run, blocks: indices });
    }

    /// The names of the members not in `dead`: a disk whose owner is not among them is out of
    /// a session whose lost members are `dead` (lost, or removed from the cluster).
    fn alive_names(&self, now: Instant, dead: &BTreeSet<NodeId>) -> BTreeSet<String> {
        self.cluster.members(now).filter(|m| !dead.contains(&m.id)).map(|m| m.name).collect()
    }

    fn start_share(
        &mut self,
        key: ShareKey,
        run: RunId,
        spec: &RunSpec,
        anchor: Option<LocalAnchor>,
    ) {
        let me = self.cluster.node();
        let Some(share) = self.shares.get_mut(&key) else { return };
        let stream = share.stream;
        share.run = run;
        if !share.added {
            let mut rtx = None;
            let origin_view = (key.origin == me).then(|| self.core.session_by_stream(key.stream));
            let relay = self.relays.get(&key.origin).copied();
            let mut transports: Vec<Option<StreamTransport>> = Vec::new();
            let mut missing = false;
            // The origin of a relayed session: the other nodes' packets come through here.
            let mut relay_origin = false;
            for (i, t) in spec.tracks.as_slice().iter().enumerate() {
                if !t.enabled {
                    transports.push(None);
                    continue;
                }
                let transport = match t.dest {
                    Dest::Udp { rtp, rtcp } => Some(StreamTransport::Udp { rtp, rtcp }),
                    Dest::Origin if key.origin == me => {
                        relay_origin = true;
                        let view = origin_view.flatten();
                        let track = view.and_then(|v| v.tracks().find(|tv| tv.index() == i));
                        track.and_then(|tv| match tv.transport() {
                            SessionTransport::Udp { client_rtp, client_rtcp, feedback } => {
                                // A player that chose AVPF took the RTX stream DESCRIBE offered
                                // (MP2T objects only: their one track).
                                if i == 0 {
                                    rtx = feedback.then(|| RtxSetup {
                                        payload_type: RTX_PAYLOAD_TYPE,
                                        ssrc: t.ssrc ^ RTX_SSRC_MASK,
                                    });
                                }
                                Some(StreamTransport::Udp { rtp: *client_rtp, rtcp: *client_rtcp })
                            }
                            SessionTransport::Interleaved { conn, rtp_channel, rtcp_channel } => {
                                self.conns.get(conn).map(|frames| StreamTransport::Interleaved {
                                    frames: frames.clone(),
                                    rtp_channel: *rtp_channel,
                                    rtcp_channel: *rtcp_channel,
                                })
                            }
                        })
                    }
                    // A feeder: RTP to the origin's relay port, RTCP nowhere that matters.
                    Dest::Origin => relay.map(|a| StreamTransport::Udp { rtp: a, rtcp: a }),
                };
                missing |= transport.is_none();
                transports.push(transport);
            }
            if missing || transports.iter().all(Option::is_none) {
                let now = self.clock.now();
                self.cluster.handle_share_failed(now, key, run, &ShareFailure::NoTransport);
                return;
            }
            let plan = &share.entry.plan;
            let last_block = BlockIndex(plan.blocks.len().saturating_sub(1) as u32);
            let local = self.link.as_ref().map(|l| &l.local_disks);
            let (blocks, rtcp) = match (spec.role, local) {
                (Role::Whole, _) | (_, None) => (None, RtcpMode::AfterPackets),
                (role, Some(disks)) => {
                    let blocks: Arc<[ShareBlock]> = plan
                        .blocks
                        .iter()
                        .enumerate()
                        .filter(|(_, b)| disks.contains(&b.disk))
                        .map(|(i, b)| ShareBlock {
                            index: BlockIndex(i as u32),
                            first: Position::at(b.first_gsn, b.first_send_time),
                        })
                        .collect();
                    let rtcp = match role {
                        Role::Share { rtcp: true } => RtcpMode::Timer,
                        _ => RtcpMode::None,
                    };
                    (Some(blocks), rtcp)
                }
            };
            let setup = StreamSetup {
                tracks: spec
                    .tracks
                    .as_slice()
                    .iter()
                    .map(|t| TrackStamp {
                        ssrc: t.ssrc,
                        rtp_ts_offset: t.rtp_ts_offset,
                        clock_rate: t.clock_rate,
                        payload_type: t.payload_type,
                        enabled: t.enabled,
                    })
                    .collect(),
                seq_offsets: seq_offsets(&spec.tracks),
                share: blocks,
                rtcp,
                lsn: spec.lsn,
                ..StreamSetup::whole(stream, 0, 0, 0, last_block)
            };
            // Where the origin asks for relayed packets that did not come (every other node's
            // relay port: only the one that sent a number has it).
            // (A node that paces every block itself, a single node among them, relays nothing.)
            let relay = (relay_origin && spec.role != Role::Whole)
                .then(|| self.relays.iter().filter(|(n, _)| **n != me).map(|(_, a)| *a).collect());
            let _ = self.sender.send(SenderCommand::Add {
                setup,
                transports,
                cname: self.cname.clone(),
                rtx,
                relay,
            });
            share.added = true;
        }
        let anchor = anchor.map(|a| Anchor { wall: a.wall, media: a.media });
        if anchor.is_none() {
            // The scheduler pins the clock: the pacer reports the pace with the anchor. Every
            // run sets it (a trick or Speed run leaves its own behind).
            let _ = self.sender.send(SenderCommand::Pace { stream, pace: spec.pace });
        }
        let from = share.entry.plan.block_of(spec.start.gsn).unwrap_or(BlockIndex(0));
        let play = PlayRun {
            run,
            start: spec.start,
            from,
            end: spec.end,
            seq_offsets: seq_offsets(&spec.tracks),
            anchor,
            trick: spec.trick,
        };
        let _ = self.sender.send(SenderCommand::Play { stream, play });
        let pinned = anchor.map(|a| (a, spec.pace));
        let media = spec.start.time;
        let _ = self.sched.send(SchedCommand::Start { stream, run, from, media, pinned });
    }

    /// An object another node has just ingested, read from the shared catalog before this
    /// node's poll has seen it (a cluster only; one catalog read, on a miss).
    /// `entry` planned at `epoch`: the origin's epoch, which differs from this node's during a
    /// flip (one of them has not seen it yet). Every node of a session reads the same placement,
    /// so no block is sent twice or by nobody.
    fn at_epoch(&self, entry: Arc<ObjectEntry>, epoch: Epoch) -> Arc<ObjectEntry> {
        let Some(store) = self.store.as_ref() else { return entry };
        if entry.epoch == epoch {
            return entry;
        }
        if epoch > store.current_epoch() {
            // The origin saw an operation this node has not polled yet.
            if let Err(e) = store.refresh() {
                warn!(error = %e, "reading the store metadata");
            }
        }
        let planned = Arc::new(ObjectEntry::at_epoch(store, entry.record.clone(), epoch));
        debug!(object = %entry.record.name, from = %entry.epoch, to = %epoch, "planned at the origin's epoch");
        planned
    }

    /// `entry` planned without the members in `lost` (a session opened while they are down):
    /// each block read and sent from its first copy on a live node, which is what this node
    /// admits and sends. `Err`: a block with no copy left, in words for the refusal.
    fn without_lost(
        &self,
        entry: Arc<ObjectEntry>,
        lost: &BTreeSet<NodeId>,
    ) -> Result<Arc<ObjectEntry>, String> {
        let Some(link) = self.link.as_ref().filter(|_| !lost.is_empty()) else { return Ok(entry) };
        let now = self.clock.now();
        let names: BTreeSet<String> =
            self.cluster.members(now).filter(|m| lost.contains(&m.id)).map(|m| m.name).collect();
        let meta = link.store.meta();
        let is_lost = |d: DiskId| {
            meta.disk(d).and_then(|r| r.owner.as_deref()).is_some_and(|o| names.contains(o))
        };
        match entry.plan.without(is_lost) {
            Ok(plan) => Ok(Arc::new(ObjectEntry {
                record: entry.record.clone(),
                plan: Arc::new(plan),
                source: entry.source.clone(),
                epoch: entry.epoch,
            })),
            Err(block) => {
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                Err(format!(
                    "block {block} of {} has no copy on a live node (down: {})",
                    entry.record.name,
                    names.join(", ")
                ))
            }
        }
    }

    fn catalog_entry(&self, object: isochron_base::ObjectId) -> Option<Arc<ObjectEntry>> {
        let store = self.store.as_ref()?;
        let rec = store.catalog().objects().ok()?.into_iter().find(|r| r.id == object)?;
        let entry = Arc::new(ObjectEntry::new(store, rec));
        self.library.insert(Arc::clone(&entry));
        Some(entry)
    }

    fn forget_share(&mut self, key: ShareKey) {
        if let Some(share) = self.shares.remove(&key) {
            self.share_of.remove(&share.stream);
            let _ = self.sender.send(SenderCommand::Remove { stream: share.stream });
            let _ = self.sched.send(SchedCommand::Close { stream: share.stream });
        }
    }

    fn share_key(&self, stream: StreamId, run: RunId) -> Option<ShareKey> {
        let key = *self.share_of.get(&stream)?;
        (self.shares.get(&key)?.run == run).then_some(key)
    }

    // ----- reports -----------------------------------------------------------------------------

    fn list(&self) -> Vec<SessionInfo> {
        self.core
            .sessions()
            .map(|v| {
                let entry = self.library.by_id(v.object());
                let (transport, client) = match v.transport() {
                    SessionTransport::Udp { client_rtp, .. } => ("udp", client_rtp.to_string()),
                    SessionTransport::Interleaved { conn, .. } => {
                        ("tcp", self.peers.get(conn).map_or_else(String::new, ToString::to_string))
                    }
                };
                let delivery = match self.origins.get(&v.stream()).map(|o| o.delivery) {
                    Some(Delivery::Relay) if self.link.is_some() => "relay",
                    _ => "bipartite",
                };
                SessionInfo {
                    id: v.id().to_string(),
                    stream: v.stream().0,
                    object: entry
                        .as_ref()
                        .map_or_else(|| v.object().to_string(), |e| e.record.name.clone()),
                    state: format!("{:?}", v.state()).to_lowercase(),
                    transport: transport.into(),
                    delivery: delivery.into(),
                    client,
                    bitrate_bps: entry.as_ref().map_or(0, |e| e.record.avg_bitrate.0),
                    missed_deadlines: 0,
                    blocks_delivered: 0,
                    position_s: v.position().map_or(0.0, |p| p.time.as_secs_f64()),
                    pace: 1.0,
                    packets_sent: 0,
                    bytes_sent: 0,
                }
            })
            .collect()
    }

    fn cluster_info(&self, now: Instant) -> ClusterInfo {
        ClusterInfo {
            sessions: self.cluster.session_count(),
            shares: self.cluster.share_count(),
            members: self
                .cluster
                .members(now)
                .map(|m| MemberSummary {
                    id: u32::from(m.id.0),
                    name: m.name,
                    health: format!("{:?}", m.health).to_lowercase(),
                    clock_offset_ns: m.clock_offset_ns,
                    round_trip_us: m.round_trip.map(|d| d.as_micros() as u64),
                })
                .collect(),
            stalls: self.cluster.stalls(),
        }
    }
}

fn share_report(r: RunReport) -> ShareReport {
    ShareReport { next: r.next, last_sent: r.last_sent }
}

/// The RTX stream's SSRC is the media SSRC with these bits flipped: distinct from it, and from
/// every other session's with all but negligible probability (SSRCs are random).
const RTX_SSRC_MASK: u32 = 0x5254_5800;

/// `delivery=bipartite|relay` in a URL's query.
fn delivery_query(query: Option<&str>) -> Option<Delivery> {
    query?.split('&').find_map(|kv| match kv.split_once('=') {
        Some(("delivery", "bipartite")) => Some(Delivery::Bipartite),
        Some(("delivery", "relay")) => Some(Delivery::Relay),
        _ => None,
    })
}

/// `auto` delivery: bipartite for players shown to take RTP of one SSRC from several addresses
/// (`docs/results/cluster-players.md`), relay for every other.
fn auto_delivery(user_agent: &str) -> Delivery {
    // isochron's own client, and ffmpeg (libavformat accepts RTP of one SSRC from any source
    // address unless `-rtsp_flags filter_src`). GStreamer drops a second source as an SSRC
    // collision (RFC 3550 §8.2) and VLC's SAT>IP module does not strip header extensions.
    const BIPARTITE: [&str; 2] = ["isochron", "lavf"];
    if BIPARTITE.iter().any(|p| user_agent.to_ascii_lowercase().starts_with(p)) {
        Delivery::Bipartite
    } else {
        Delivery::Relay
    }
}

/// Where playing from `t` starts: the object's seek point for `t` (the last random-access point
/// at or before it).
fn seek_position(rec: &isochron_store::catalog::ObjectRecord, t: MediaTime) -> Position {
    let i = rec.seek_index(t);
    let sp = rec.seek(t);
    let tracks = match &rec.media {
        Some(m) => {
            m.track_seqs_at(i).map_or_else(|| TrackSeqs::zeros(m.tracks.len()), TrackSeqs::new)
        }
        None => TrackSeqs::NONE,
    };
    Position { gsn: sp.gsn, time: sp.time, tracks }
}

/// Each track's sequence number for its next packet at `at`, under `offsets`.
fn next_seqs(offsets: &[u16], at: &Position) -> Vec<u16> {
    offsets.iter().enumerate().map(|(t, o)| o.wrapping_add(at.track_seq(t) as u16)).collect()
}

/// A run's per-track sequence offsets, as the pacer takes them.
fn seq_offsets(tracks: &RunTracks) -> SeqOffsets {
    let mut o = SeqOffsets::default();
    for (i, t) in tracks.as_slice().iter().enumerate() {
        o[i] = t.seq_offset;
    }
    o
}

/// The blocks of `plan` a share on `local` disks takes over (`docs/design/takeover.md`): from
/// the block holding media time `from` on, every block not already on a local disk (replica 0)
/// whose first copy on a live disk (`is_dead` false) is local. Every survivor computes this
/// from the same dead set, so each such block has one sender.
fn taken_blocks(
    plan: &isochron_sched::ObjectPlan,
    local: &BTreeSet<DiskId>,
    is_dead: impl Fn(DiskId) -> bool,
    from: MediaTime,
) -> Vec<ShareBlock> {
    let first = plan.blocks.partition_point(|b| b.first_send_time <= from).saturating_sub(1);
    plan.blocks
        .iter()
        .enumerate()
        .skip(first)
        .filter(|(_, b)| !local.contains(&b.disk))
        .filter(|(_, b)| b.copies.iter().find(|d| !is_dead(*d)).is_some_and(|d| local.contains(&d)))
        .map(|(i, b)| ShareBlock {
            index: BlockIndex(i as u32),
            first: Position::at(b.first_gsn, b.first_send_time),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_from_the_query_and_the_player() {
        assert_eq!(delivery_query(Some("a=1&delivery=relay")), Some(Delivery::Relay));
        assert_eq!(delivery_query(Some("delivery=bipartite")), Some(Delivery::Bipartite));
        assert_eq!(delivery_query(Some("delivery=other")), None);
        assert_eq!(delivery_query(None), None);
        assert_eq!(auto_delivery("isochron/0.1"), Delivery::Bipartite);
        assert_eq!(auto_delivery("Lavf/61.7.100"), Delivery::Bipartite);
        assert_eq!(auto_delivery("GStreamer/1.22"), Delivery::Relay);
        assert_eq!(auto_delivery("VLC/3.0.21 LibVLC/3.0.21"), Delivery::Relay);
    }

    #[test]
    fn the_next_live_copy_s_node_takes_a_block_over() {
        use isochron_base::{Bytes, Gsn, ObjectId, Replicas};
        use isochron_sched::{ObjectPlan, PlannedBlock};
        // Disks 0, 1, 2 on nodes a, b, c; two copies of each block; block i's copies on
        // (i, i + 1) mod 3 and 1 s long. This node is b (disk 1); c (disk 2) is lost.
        let blocks = (0..6u16)
            .map(|i| {
                let mut copies = Replicas::single(DiskId(i % 3));
                copies.push(DiskId((i + 1) % 3));
                PlannedBlock {
                    disk: DiskId(i % 3),
                    copies,
                    first_gsn: Gsn(u64::from(i) * 10),
                    first_send_time: MediaTime::from_nanos(u64::from(i) * 1_000_000_000),
                    len: Bytes::kib(64),
                }
            })
            .collect();
        let plan = ObjectPlan { object: ObjectId(1), blocks };
        let local: BTreeSet<DiskId> = [DiskId(1)].into();
        let dead = |d: DiskId| d == DiskId(2);
        let taken = |from_ms: u64| -> Vec<u32> {
            let from = MediaTime::from_nanos(from_ms * 1_000_000);
            taken_blocks(&plan, &local, dead, from).iter().map(|b| b.index.0).collect()
        };
        // Blocks on c first: 2 and 5, copies on (2, 0): a takes them, not b. Blocks on a: not
        // lost. So b takes nothing...
        assert_eq!(taken(0), Vec::<u32>::new());
        // ...and a (disk 0) takes 2 and 5, from the block holding `from` on.
        let local: BTreeSet<DiskId> = [DiskId(0)].into();
        let from = |ms: u64| MediaTime::from_nanos(ms * 1_000_000);
        let a = |ms| {
            taken_blocks(&plan, &local, dead, from(ms))
                .iter()
                .map(|b| b.index.0)
                .collect::<Vec<_>>()
        };
        assert_eq!(a(0), vec![2, 5]);
        assert_eq!(a(2_500), vec![2, 5], "from inside block 2: block 2 again");
        assert_eq!(a(3_000), vec![5]);
        // Both c and a lost: b takes nothing (no live copy of 2 and 5), nor does anyone.
        let dead2 = |d: DiskId| d == DiskId(2) || d == DiskId(0);
        let b: BTreeSet<DiskId> = [DiskId(1)].into();
        let got: Vec<u32> =
            taken_blocks(&plan, &b, dead2, from(0)).iter().map(|x| x.index.0).collect();
        assert_eq!(got, vec![0, 3], "a's blocks 0 and 3 have their second copy on b");
    }
}
