//! [`NodeCore`]: the node's session decisions, sans-IO.
//!
//! RTSP requests, RTCP liveness, the sender's and scheduler's notices, cluster messages and
//! membership, and the timer all arrive as `handle_*(now, …)` calls; what they decide leaves
//! through [`NodeCore::poll_output`] as [`NodeOutput`]s for the owner to carry out. The core
//! feeds the two protocol cores and joins their answers:
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
//! RTP-Info computed from the start packet's GSN and send time) is output before the work that
//! sends the first packet, and a single node's scheduler anchors the clock `startup_delay`
//! after its first block is in memory; a cluster's origin pins it `start_delay` ahead.
//!
//! Trick play (RFC 2326 §12.34 `Scale`) sends the key frames of native objects on a single node;
//! `Speed` (§12.35) paces a run faster or slower; sequence numbers continue across seeks
//! (§12.33: a player expects one numbering per session).

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{
    BlockIndex, DiskId, Gsn, Instant, IoFailure, MediaTime, NodeId, ObjectId, Pace, RunId,
    StreamId, TrackSeqs,
};
use isochron_cluster::message::{Dest, Role};
use isochron_cluster::{
    ClusterConfig, ClusterCore, Delivery, LocalAction, LocalAnchor, MemberInfo, Message, OpenSpec,
    Refusal, RunSpec, RunTracks, SessionEvent, ShareFailure, ShareKey, ShareReport, StartSpec,
    StopKind, TrackSpec,
};
use isochron_pacing::pacer::{
    PlayRun, RtcpMode, RunReport, SeqOffsets, ShareBlock, StreamOp, StreamSetup, TrackStamp,
};
use isochron_pacing::rtx::RtxSetup;
use isochron_rtsp::rtsp_types::{HeaderName, Method, Request};
use isochron_rtsp::server::{
    BufferLevel, ConnId, ConnInfo, Event, Handled, PauseAction, PlayAction, PlayOutcome, PlayStart,
    Position, RateAction, Rates, ServerCore, SessionTransport,
};
use isochron_sched::{Anchor, Decision, OpenStream, ReadOp};
use isochron_store::Epoch;
use tracing::{debug, info, warn};

use crate::abr::{AbrConfig, Chooser, ReceiverFeedback};
use crate::entry::{Catalog, ObjectEntry};
use crate::output::{NodeOutput, Ticket, Transport};
use crate::report::{ClusterInfo, MemberSummary, SessionInfo};

/// How a node is set up.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node.
    pub node: NodeId,
    /// Its name (what the store's disk records call their owner).
    pub name: String,
    /// The Unix time of the node clock's zero, ns: anchors travel as Unix time between nodes.
    pub unix_base_ns: u64,
    /// In a cluster: the disks this node owns (its shares read only these) and the store's
    /// number of copies of every block. `None`: a single node.
    pub cluster: Option<(Arc<BTreeSet<DiskId>>, u8)>,
    /// Degrade instead of refuse (`sched.degrade`, `degrade.rs`).
    pub degrade: bool,
    /// How each live feed's edge serves its viewers (`live.rs`): its time-shift window.
    pub live: isochron_live::EdgeConfig,
}

/// What an origin session waits for before it can answer a request.
enum Waiting {
    /// The cluster's admission, to start a PLAY.
    Open(PlayAction, Ticket),
    /// Every node to stop the running run, to start a PLAY (a seek).
    StopForPlay(PlayAction, Ticket),
    /// Every node to stop at the pause cutoff.
    Pause(PauseAction, Ticket),
    /// Every node to stop after a node failed: the client's stream ends there, with a BYE
    /// giving this reason.
    Fail(Arc<str>),
    /// Every node to stop just before the key frame at `at` (its first packet `key`), to go
    /// on from it on rung `to` of the session's ladder (`switch.rs`).
    Switch { to: usize, at: MediaTime, key: Gsn },
    /// The cluster's admission of rung `to`, to go on from `at`; `from` is the rung before
    /// the switch, reopened if `to` is refused. `paused`: a PAUSE came meanwhile, and the
    /// session waits for a PLAY once admitted.
    Reopen { to: usize, from: usize, at: MediaTime, paused: bool },
}

/// What a run is asked to do: a PLAY's range and rates, or a switch's key frame.
pub(super) struct RunRequest {
    start: PlayStart,
    end: Option<MediaTime>,
    scale: Option<Pace>,
    speed: Option<Pace>,
}

/// A session played from a title's ladder of renditions (adaptive bit rate).
struct Abr {
    /// The renditions, highest mean rate first.
    ladder: Vec<Arc<ObjectEntry>>,
    /// Which one it plays, and when to switch.
    chooser: Chooser,
}

/// A session this node is the origin of.
struct Origin {
    entry: Arc<ObjectEntry>,
    delivery: Delivery,
    opened: bool,
    run: RunId,
    running: bool,
    run_start: Position,
    /// The current run's media clock, as its pacer runs it.
    clock: RunClock,
    /// The current run's `Speed` (RFC 2326 §12.35), if its PLAY had one.
    speed: Option<Pace>,
    /// Where the current run stops, if its PLAY gave a range end before the end of media.
    run_end: Option<MediaTime>,
    /// Each track's sequence offset in the current run.
    seq_offsets: Vec<u16>,
    /// The sequence number each track's next packet gets; `None` before the first PLAY.
    next_seqs: Option<Vec<u16>>,
    /// The current (or last) run is trick play.
    trick: bool,
    pace: Pace,
    waiting: Option<Waiting>,
    /// The ladder it plays from, if it plays a title's ladder.
    abr: Option<Abr>,
    /// Its PLAY was refused the rung it asked for and tries a lower one (`degrade.rs`).
    degraded: bool,
    /// Its player asked for rate pacing, and got it ([`Pacing::Rate`]): every run of it is
    /// paced by bytes at its object's mean rate.
    smooth: bool,
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
            clock: RunClock { wall: Instant::ZERO, media: MediaTime::ZERO, pace },
            speed: None,
            run_end: None,
            seq_offsets: Vec::new(),
            next_seqs: None,
            trick: false,
            pace,
            waiting,
            abr: None,
            degraded: false,
            smooth: false,
        }
    }

    /// Whether a switch of rendition can be made now: a run plays (not trick play) and no
    /// request or switch is under way.
    fn can_switch(&self) -> bool {
        self.running && !self.trick && self.waiting.is_none()
    }

    /// A switch of rendition decided is not carried out (a PLAY or PAUSE took its place, the
    /// stream ended first): the chooser stays on the rung playing.
    fn give_up_switch(&mut self, now: Instant) {
        if let Some(abr) = self.abr.as_mut() {
            let current = abr.chooser.current();
            abr.chooser.handle_switched(now, current);
        }
    }
}

/// Where a run's media clock stood at an instant, and the pace it has run at since (its own,
/// a `Speed`, an MTFC rate): the session's position at any later instant. The pacer anchors
/// the run a moment after it is started or re-paced here, so the position this gives is ahead
/// of the truth when the pace rises and behind it by that moment's worth of the change when it
/// falls: milliseconds.
#[derive(Clone, Copy, Debug)]
struct RunClock {
    wall: Instant,
    media: MediaTime,
    pace: Pace,
}

impl RunClock {
    /// The media time at `now`.
    fn media_at(self, now: Instant) -> MediaTime {
        self.media + self.pace.media_span(now.saturating_duration_since(self.wall))
    }

    /// The same clock run at `pace` from `now` on.
    fn repaced(self, now: Instant, pace: Pace) -> Self {
        Self { wall: now, media: self.media_at(now), pace }
    }
}

/// What admission needs to open a session of `entry` for `stream`.
fn open_spec(stream: StreamId, entry: &ObjectEntry, delivery: Delivery) -> OpenSpec {
    OpenSpec {
        stream,
        object: entry.record.id,
        epoch: entry.epoch,
        avg_bitrate: entry.record.avg_bitrate,
        peak_bitrate: entry.record.peak_bitrate,
        delivery,
    }
}

/// A share this node runs.
struct Share {
    /// The local stream the scheduler and sender know it by.
    stream: StreamId,
    entry: Arc<ObjectEntry>,
    /// The open of the session it was admitted for (a session reopened at another rendition
    /// reuses its key): the scheduler's decision names it.
    open: u32,
    /// Whether the sender knows the stream.
    added: bool,
    run: RunId,
    /// The run sent its last packet (until blocks taken over revive it).
    ended: bool,
    /// The run's part taken over while this node was lost ([`LocalAction::Withhold`]).
    withheld: Option<WithheldPart>,
}

/// A share's part another node sends for it while this node was lost (its pacer passes over
/// those packets): the blocks (`None`: every block of its part) and the give-back point once
/// known. Kept to give back to the share what a taker lost in turn can no longer send.
#[derive(Debug)]
struct WithheldPart {
    blocks: Option<BTreeSet<BlockIndex>>,
    until: Option<MediaTime>,
}

/// One node's session decisions (see the module docs).
pub struct NodeCore {
    rtsp: ServerCore,
    cluster: ClusterCore,
    catalog: Arc<dyn Catalog + Send + Sync>,
    /// The disks this node owns, in a cluster (`None`: a single node).
    local_disks: Option<Arc<BTreeSet<DiskId>>>,
    /// Open RTSP connections (interleaved media goes on them).
    conns: BTreeSet<ConnId>,
    /// Each open connection's client address, learnt from its requests (for the API).
    peers: HashMap<ConnId, SocketAddr>,
    /// Each connection's delivery wish (`?delivery=`) and player (`User-Agent`).
    prefs: HashMap<ConnId, (Option<Delivery>, String)>,
    origins: HashMap<StreamId, Origin>,
    shares: HashMap<ShareKey, Share>,
    share_of: HashMap<StreamId, ShareKey>,
    relays: HashMap<NodeId, SocketAddr>,
    stalls_seen: u64,
    /// Degrade instead of refuse.
    degrade: bool,
    /// How a live feed's edge is set up.
    live: isochron_live::EdgeConfig,
    /// PLAYs waiting for sessions to step down, with since when.
    room_wanted: Vec<(StreamId, Instant)>,
    /// A reservation was released since the waiting PLAYs were last tried.
    room_freed: bool,
    /// Sessions stepping up whose admission is not decided: their old rung's reservation is
    /// closed, and reopened if the higher is refused (`switch.rs`).
    probing: BTreeSet<StreamId>,
    /// Other sessions' admissions held meanwhile, so that none takes the room the old rung
    /// needs back (`switch.rs`).
    held: VecDeque<OpenSpec>,
    abr_stats: AbrStats,
    takeover_stats: TakeoverStats,
    /// Live feeds being published, by the object each is recorded as (`live.rs`).
    feeds: HashMap<ObjectId, live::Feed>,
    /// Viewers of live feeds, by stream.
    viewers: HashMap<StreamId, live::Viewer>,
    out: VecDeque<NodeOutput>,
}

impl NodeCore {
    /// A node around the RTSP server core `rtsp`, reading objects through `catalog`.
    #[must_use]
    pub fn new(
        config: NodeConfig,
        rtsp: ServerCore,
        catalog: Arc<dyn Catalog + Send + Sync>,
    ) -> Self {
        let mut cluster = ClusterConfig::new(config.node, config.name, config.unix_base_ns);
        // With copies on other nodes a lost node's share is taken over (`take_over`).
        cluster.replication = config.cluster.as_ref().map_or(1, |c| c.1);
        Self {
            rtsp,
            cluster: ClusterCore::new(cluster),
            catalog,
            local_disks: config.cluster.map(|c| c.0),
            degrade: config.degrade,
            live: config.live,
            room_wanted: Vec::new(),
            room_freed: false,
            probing: BTreeSet::new(),
            held: VecDeque::new(),
            abr_stats: AbrStats::default(),
            takeover_stats: TakeoverStats::default(),
            conns: BTreeSet::new(),
            peers: HashMap::new(),
            prefs: HashMap::new(),
            origins: HashMap::new(),
            shares: HashMap::new(),
            share_of: HashMap::new(),
            relays: HashMap::new(),
            stalls_seen: 0,
            feeds: HashMap::new(),
            viewers: HashMap::new(),
            out: VecDeque::new(),
        }
    }

    /// How often [`NodeCore::handle_timeout`] is due at least (the cluster's heartbeat).
    #[must_use]
    pub fn tick(&self) -> Duration {
        self.cluster.config().heartbeat
    }

    /// The next thing to carry out, in order.
    pub fn poll_output(&mut self) -> Option<NodeOutput> {
        self.out.pop_front()
    }

    /// An RTSP request from `conn`; its answer comes out as [`NodeOutput::Respond`] with
    /// `ticket` (at once, or once the cluster has decided).
    pub fn handle_request(
        &mut self,
        now: Instant,
        conn: &ConnInfo,
        req: &Request<Vec<u8>>,
        ticket: Ticket,
    ) {
        self.peers.insert(conn.id, conn.peer);
        self.note_prefs(conn.id, req);
        let catalog = Arc::clone(&self.catalog);
        match self.rtsp.handle_request(now, conn, req, &*catalog) {
            Handled::Respond(response) => self.respond(ticket, response),
            Handled::Play(action) => self.play(now, conn.id, action, ticket),
            Handled::Pause(action) => self.pause(now, action, ticket),
            Handled::Rate(action) => {
                let response = self.rate(now, action);
                self.respond(ticket, response);
            }
        }
        self.drive(now);
    }

    /// A connection opened: interleaved media can go on it.
    pub fn handle_conn_opened(&mut self, conn: ConnId) {
        self.conns.insert(conn);
    }

    /// A connection closed.
    pub fn handle_conn_closed(&mut self, now: Instant, conn: ConnId) {
        self.conns.remove(&conn);
        self.peers.remove(&conn);
        self.prefs.remove(&conn);
        self.rtsp.handle_conn_closed(now, conn);
        self.drive(now);
    }

    /// RTCP arrived on the UDP socket naming these media SSRCs (liveness, RFC 2326 §10.5's
    /// alternative to keep-alive requests), with what its receiver reports say of the path
    /// (a session playing a ladder may switch rendition on them: [`crate::abr`]), and the
    /// packets of each stream its generic NACKs ask for again (`nacks`: SSRC, numbers).
    pub fn handle_rtcp(
        &mut self,
        now: Instant,
        media_ssrcs: &[u32],
        reports: &[ReceiverFeedback],
        nacks: &[(u32, Vec<u16>)],
    ) {
        for &ssrc in media_ssrcs {
            self.rtsp.handle_rtcp(now, ssrc);
        }
        for (ssrc, seqs) in nacks {
            self.nacked(*ssrc, seqs);
        }
        for fb in reports {
            self.feedback(now, *fb, "a receiver report");
        }
        self.drive(now);
    }

    /// RTCP arrived interleaved on `conn`'s channel `channel`, with what its receiver reports
    /// say: a report counts only for a stream of a session on that very connection (another
    /// client cannot steer a session's rendition by naming its SSRC).
    pub fn handle_interleaved_rtcp(
        &mut self,
        now: Instant,
        conn: ConnId,
        channel: u8,
        reports: &[ReceiverFeedback],
    ) {
        self.rtsp.handle_interleaved_rtcp(now, conn, channel);
        for fb in reports {
            if self.rtsp.ssrc_is_on(fb.ssrc, conn) {
                self.feedback(now, *fb, "a receiver report");
            }
        }
        self.drive(now);
    }

    /// The queue ahead of connection `conn`'s client, as its socket shows it
    /// ([`crate::abr::QueueDelay`]): a report on each of its sessions' streams, as a receiver
    /// report's round trip would show it (RTSP/TCP players may send no report).
    pub fn handle_conn_queue(&mut self, now: Instant, conn: ConnId, delay: Duration) {
        for ssrc in self.rtsp.ssrcs_on(conn) {
            let fb = ReceiverFeedback {
                ssrc,
                fraction_lost: 0,
                rtt: Some(delay),
                highest_seq: None,
                jitter: 0,
            };
            self.feedback(now, fb, "the connection's queue");
        }
        self.drive(now);
    }

    /// The sender sent a local stream's last packet of run `run`.
    pub fn handle_share_ended(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        report: RunReport,
    ) {
        if let Some(key) = self.share_key(stream, run) {
            if let Some(share) = self.shares.get_mut(&key) {
                share.ended = true;
            }
            self.cluster.handle_share_ended(now, key, run, share_report(report));
        }
        self.drive(now);
    }

    /// The sender stopped a local stream's run `run`.
    pub fn handle_share_stopped(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        report: RunReport,
    ) {
        if let Some(key) = self.share_key(stream, run) {
            self.cluster.handle_share_stopped(now, key, run, share_report(report));
        }
        self.drive(now);
    }

    /// The scheduler decided on a share's admission ([`NodeOutput::Admit`], whose `open` it
    /// hands back); `None`: the scheduler is gone. A decision on an earlier open of the share
    /// (closed since, and opened again) is not this one's: dropped.
    pub fn handle_admitted(
        &mut self,
        now: Instant,
        key: ShareKey,
        open: u32,
        decision: Option<Decision>,
    ) {
        if self.shares.get(&key).is_none_or(|s| s.open != open) {
            debug!(share = %key, open, "admission: a decision on an earlier open");
            return;
        }
        let node = self.cluster.config().name.clone();
        let result = match decision {
            Some(Decision::Admit) => Ok(()),
            None => {
                self.forget_share(key);
                Err(Refusal { node, disk: None, reason: "scheduler stopped".into() })
            }
            Some(Decision::Reject(r)) => {
                let disk = match &r {
                    isochron_sched::Refusal::Bandwidth(o) => o.disks.first().map(|d| d.disk),
                    isochron_sched::Refusal::NoProfile { disk } => Some(*disk),
                    _ => None,
                };
                info!(share = %key, reason = %r, "admission: rejected");
                self.forget_share(key);
                Err(Refusal { node, disk, reason: r.to_string() })
            }
        };
        self.cluster.handle_admitted(now, key, result);
        self.drive(now);
    }

    /// A block of local stream `stream` could not be read from any copy.
    pub fn handle_read_failed(&mut self, now: Instant, stream: StreamId, error: IoFailure) {
        warn!(%stream, %error, "a block could not be read");
        if let Some(&key) = self.share_of.get(&stream)
            && let Some(run) = self.shares.get(&key).map(|s| s.run)
        {
            self.cluster.handle_share_failed(now, key, run, &ShareFailure::Read(error));
        }
        self.drive(now);
    }

    /// A message from node `from`.
    pub fn handle_message(&mut self, now: Instant, from: NodeId, msg: Message) {
        self.cluster.handle_message(now, from, msg);
        self.drive(now);
    }

    /// A peer's control connection to this node closed ([`ClusterCore::handle_peer_closed`]).
    pub fn handle_peer_closed(&mut self, now: Instant, peer: NodeId) {
        self.cluster.handle_peer_closed(now, peer);
        self.drive(now);
    }

    /// A node's record or liveness changed; `relay` is where it takes relayed RTP.
    pub fn handle_member(&mut self, now: Instant, info: MemberInfo, relay: Option<SocketAddr>) {
        if let Some(addr) = relay {
            self.relays.insert(info.id, addr);
        }
        self.cluster.handle_member(now, info);
        self.drive(now);
    }

    /// A node left the cluster for good ([`ClusterCore::remove_member`]).
    pub fn handle_forget(&mut self, now: Instant, id: NodeId) {
        info!(node = %id, "a node that left the cluster is forgotten");
        self.cluster.remove_member(now, id);
        self.drive(now);
    }

    /// How far the senders have got ([`ClusterCore::handle_sent_through`]): given before any
    /// other call after a stall, so a node that only waited for the CPU while its senders sent
    /// is not judged to have stood still.
    pub fn handle_sent_through(&mut self, t: Instant) {
        self.cluster.handle_sent_through(t);
    }

    /// The timer ([`NodeCore::tick`]): sessions' timeouts, heartbeats, leases.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.rtsp.handle_timeout(now);
        self.live_timeout(now);
        self.retry_room(now);
        self.cluster.handle_timeout(now);
        self.drive(now);
    }

    /// A stream id for a recording, from the sequence the RTSP sessions' streams use.
    pub fn allocate_stream(&mut self) -> StreamId {
        self.rtsp.allocate_stream()
    }

    /// The oldest placement epoch a session or share of this node reads (`None`: none runs).
    #[must_use]
    pub fn oldest_epoch(&self) -> Option<Epoch> {
        let origins = self.origins.values().map(|o| o.entry.epoch);
        let shares = self.shares.values().map(|s| s.entry.epoch);
        origins.chain(shares).min()
    }

    fn respond(&mut self, ticket: Ticket, response: isochron_rtsp::rtsp_types::Response<Vec<u8>>) {
        self.out.push_back(NodeOutput::Respond { ticket, response });
    }

    /// The way to a client's track as its session set it up: its UDP ports, or its RTSP
    /// connection (`None` once that closed).
    fn client_transport(&self, t: &SessionTransport) -> Option<Transport> {
        match t {
            SessionTransport::Udp { client_rtp, client_rtcp, .. } => {
                Some(Transport::Udp { rtp: *client_rtp, rtcp: *client_rtcp })
            }
            SessionTransport::Interleaved { conn, rtp_channel, rtcp_channel } => {
                self.conns.contains(conn).then_some(Transport::Interleaved {
                    conn: *conn,
                    rtp_channel: *rtp_channel,
                    rtcp_channel: *rtcp_channel,
                })
            }
        }
    }

    fn read(&mut self, op: ReadOp) {
        self.out.push_back(NodeOutput::Read(op));
    }

    fn send(&mut self, op: StreamOp) {
        self.out.push_back(NodeOutput::Send(op));
    }

    /// Carries out what the protocol cores handed back, until they have nothing more.
    fn drive(&mut self, now: Instant) {
        loop {
            let mut any = false;
            if self.room_freed {
                any = true;
                self.retry_room(now);
            }
            while let Some(ev) = self.rtsp.poll_event() {
                any = true;
                let Event::Closed { session, stream, reason } = ev;
                debug!(%stream, ?session, ?reason, "session closed");
                self.close_live(now, stream);
                if let Some(o) = self.origins.remove(&stream) {
                    self.answer_ended(now, o.waiting);
                    self.room_freed |= o.opened;
                }
                self.room_wanted.retain(|(s, _)| *s != stream);
                self.cluster.close(now, stream);
                self.probe_done(now, stream);
            }
            while let Some(action) = self.cluster.poll_local() {
                any = true;
                self.local(now, action);
            }
            while let Some(ev) = self.cluster.poll_event() {
                any = true;
                self.session_event(now, ev);
            }
            while let Some((to, msg)) = self.cluster.poll_transmit() {
                any = true;
                if self.local_disks.is_some() {
                    self.out.push_back(NodeOutput::Transmit { to, msg: Box::new(msg) });
                }
            }
            if !any {
                break;
            }
        }
        // A stall is seen by whichever call into the cluster core comes first after it: a tick,
        // or a message that waited in a socket.
        let stalls = self.cluster.stalls();
        if stalls > self.stalls_seen {
            self.stalls_seen = stalls;
            if self.cluster.session_count() + self.cluster.share_count() > 0 {
                warn!(
                    "this node stood still (stopped, or starved of CPU): its peers are judged \
                     only on the time it was awake"
                );
            }
        }
    }
}

mod degrade;
mod live;
mod origin;
mod share;
mod switch;

pub use degrade::AbrStats;
pub use live::FeedEvent;
pub use share::TakeoverStats;

impl NodeCore {
    /// The sessions this node is the origin of, as the HTTP API shows them (the sender's and
    /// scheduler's counters are filled in by the API).
    #[must_use]
    pub fn sessions(&self) -> Vec<SessionInfo> {
        self.rtsp
            .sessions()
            .map(|v| {
                // The rendition a ladder session plays now, not the title it asked for.
                let entry = match self.origins.get(&v.stream()) {
                    Some(o) => Some(Arc::clone(&o.entry)),
                    None => self.catalog.by_id(v.object()),
                };
                let (transport, client) = match v.transport() {
                    SessionTransport::Udp { client_rtp, .. } => ("udp", client_rtp.to_string()),
                    SessionTransport::Interleaved { conn, .. } => {
                        ("tcp", self.peers.get(conn).map_or_else(String::new, ToString::to_string))
                    }
                };
                let delivery = match self.origins.get(&v.stream()).map(|o| o.delivery) {
                    Some(Delivery::Relay) if self.local_disks.is_some() => "relay",
                    _ => "bipartite",
                };
                SessionInfo {
                    id: v.id().to_string(),
                    stream: v.stream().0,
                    object: entry
                        .as_ref()
                        .map_or_else(|| v.name().to_owned(), |e| e.record.name.clone()),
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

    /// What switching and degrading did, since the node started.
    #[must_use]
    pub fn abr_stats(&self) -> AbrStats {
        self.abr_stats
    }

    /// What the takeover rules did, since the node started.
    #[must_use]
    pub fn takeover_stats(&self) -> TakeoverStats {
        self.takeover_stats
    }

    /// The cluster as this node sees it.
    #[must_use]
    pub fn cluster_info(&self, now: Instant) -> ClusterInfo {
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
