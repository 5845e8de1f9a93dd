//! The cluster core: membership, session fan-out on the origin, and this node's shares.
//!
//! Yima §2.2's bipartite model: the node a client talks RTSP to (the session's **origin**) keeps
//! the session; every node holding blocks of the object (a **share** each, the origin's own
//! included) reads, schedules and sends its own blocks. The origin tells the shares what to do
//! with small control messages; data never goes node to node in bipartite delivery. Relay
//! delivery, for players that take RTP from one address only, has the other nodes send their
//! packets to the origin, which sends them on to the client from its own address.
//!
//! One [`ClusterCore`] per node, owned by the session manager task and fed, in the quinn-proto
//! shape:
//!
//! - membership from etcd ([`ClusterCore::handle_member`]) and heartbeats over the control
//!   connections (suspicion after `suspect_after` of silence);
//! - the RTSP side of sessions this node is the origin of: [`ClusterCore::open`] (reserve
//!   everywhere, then [`SessionEvent::Opened`] or [`SessionEvent::Refused`]: XTREAM admission
//!   made cluster-wide), [`ClusterCore::start`], [`ClusterCore::stop`], [`ClusterCore::pace`],
//!   [`ClusterCore::close`];
//! - messages from peers ([`ClusterCore::handle_message`]);
//! - what this node's scheduler and sender did with its shares
//!   ([`ClusterCore::handle_admitted`], [`ClusterCore::handle_share_stopped`],
//!   [`ClusterCore::handle_share_ended`], [`ClusterCore::handle_share_failed`]);
//! - [`ClusterCore::handle_timeout`].
//!
//! Outputs: [`ClusterCore::poll_transmit`] (messages for peers), [`ClusterCore::poll_local`]
//! (actions for this node's scheduler and sender), [`ClusterCore::poll_event`] (outcomes for the
//! RTSP side), [`ClusterCore::poll_timeout`]. Messages a node addresses to itself never leave the
//! core. A single node is a cluster of one: the same calls, with the clock pinned by the
//! scheduler (no anchor) and the node pacing the whole object.
//!
//! **Synchronised stops.** Nodes stop at different instants, so a pause that said "stop now" would
//! leave the client with packets from one node past the point where another stopped. A pause
//! instead names a media-time cutoff a `control_margin` ahead on the session's clock: every share
//! sends exactly its packets at or before the cutoff and reports the first one it did not send;
//! the smallest of those is where the session resumes, so nothing is sent twice or skipped.
//! The same margin pins a pace change (MTFC) to a common future instant on every node.
//!
//! Not here: sockets, etcd, the clock, and what a share does with its blocks.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use isochron_base::{
    BitRate, Epoch, Gsn, Instant, MediaTime, NodeId, ObjectId, Pace, Position, RunId, StreamId,
    TrackSeqs,
};

use crate::clock::ClockSync;
use crate::message::{
    Dest, Message, Refusal, Role, RunSpec, RunTracks, ShareFailure, ShareKey, ShareReport,
    WallAnchor,
};

/// Settings of a [`ClusterCore`].
#[derive(Clone, Debug)]
pub struct ClusterConfig {
    /// This node.
    pub node: NodeId,
    /// Its name.
    pub name: String,
    /// Unix nanoseconds at this node's `Instant::ZERO` (the driver's clock epoch).
    pub unix_base_ns: u64,
    /// A cluster session's clock is pinned this far after its PLAY (time for the start to reach
    /// every node and each node's first read). Default 250 ms.
    pub start_delay: Duration,
    /// How far ahead a pause's cutoff and a pace change's new anchor are set. Default 100 ms.
    pub control_margin: Duration,
    /// How far before a lost node's last sign of life the takeover of its blocks starts when
    /// the node never said how far it had got (a driver that does not report its senders'
    /// progress). Default 1 s: a node on a busy machine sends its packets late (hundreds of
    /// milliseconds were measured with both cores taken), so "heard at t" does not mean "had
    /// sent everything due before t"; what it did send after the start is sent twice (a
    /// relayed session's origin drops the duplicates; players drop them by sequence number).
    pub takeover_margin: Duration,
    /// How far before a lost node's last reported progress ([`Message::Ping`]'s
    /// `sent_through_unix_ns`: every packet due before it was handed out) the takeover starts:
    /// the error of the clock-offset estimate that maps the node's clock onto ours, and packets
    /// handed out but not yet sent (a sender thread publishes its progress at most every
    /// 10 ms, and hands out a batch at a time). Default 30 ms: on a LAN the offset estimate is
    /// good to a millisecond (its best sample's round trip bounds it); each millisecond of
    /// margin is a millisecond of the lost node's part sent twice.
    pub progress_margin: Duration,
    /// How long the origin waits for a node's answer (reserve, stop). Default 2 s.
    pub reply_timeout: Duration,
    /// Heartbeat (ping) interval. Default 50 ms: every ping says how far the node's senders
    /// had got, and a takeover of its part starts from the last one heard, so the interval
    /// bounds what the node sent after it and a taker sends again (`docs/design/takeover.md`);
    /// at 100 ms that was most of the duplicates a pause cost. A ping and its pong are under
    /// 40 bytes each: 20 a second to each peer is nothing beside the media.
    pub heartbeat: Duration,
    /// Silence after which a peer is suspected down. Default 1 s: with K ≥ 2 copies a suspected
    /// peer's share is taken over at once, and that must happen well inside a client's 2 s
    /// buffer (`docs/design/takeover.md`).
    pub suspect_after: Duration,
    /// A gap this long between two calls into the core means this node itself stood still (a
    /// SIGSTOP, a GC or VM pause, a machine too busy to run it): the heartbeat timer fires every
    /// `heartbeat`, so a longer gap is the node's own stall, not its peers' silence. Peers are
    /// judged only on time this node was awake: after a stall each gets a full `suspect_after`
    /// to be heard again before it is suspected. Default 500 ms.
    pub stall: Duration,
    /// How far ahead a member that speaks again takes its part back ([`Message::Rejoin`]):
    /// time for the word to reach every member before the blocks change hands. Default 500 ms.
    pub rejoin_margin: Duration,
    /// How long a sender holds a stream it finds overdue by more than [`Self::hold_after`]
    /// (this node stood still so long that its peers may have taken its part over) before it
    /// sends what fell due: time for their word ([`LocalAction::Withhold`]), waiting in this
    /// node's control sockets, to be read. Default 300 ms (`docs/design/takeover.md`, *A node
    /// that stood still*).
    pub hold_window: Duration,
    /// How long a relayed session's feeders wait, frozen ([`LocalAction::Freeze`]), for their
    /// origin once it falls silent: every packet of the session goes through it, so while it
    /// is silent theirs would only fill its socket. An origin that only stood still (longer
    /// than its lease, even) speaks again and re-pins the session's clock; one that died never
    /// does, and its feeders close their shares after this. Default 30 s: longer than a
    /// lapsed lease and a re-registration, shorter than an RTSP session's timeout
    /// (`docs/design/takeover.md`, *A relaying origin that stood still*).
    pub origin_wait: Duration,
    /// The store's number of copies of every block (`store.replication`). With 2 or more, a
    /// lost member's part of every session is taken over by the holders of the other copies
    /// ([`LocalAction::TakeOver`]) instead of failing the session. Default 1.
    pub replication: u8,
}

impl ClusterConfig {
    /// The defaults for `node` named `name`.
    #[must_use]
    pub fn new(node: NodeId, name: impl Into<String>, unix_base_ns: u64) -> Self {
        Self {
            node,
            name: name.into(),
            unix_base_ns,
            start_delay: Duration::from_millis(250),
            control_margin: Duration::from_millis(100),
            takeover_margin: Duration::from_secs(1),
            progress_margin: Duration::from_millis(30),
            reply_timeout: Duration::from_secs(2),
            heartbeat: Duration::from_millis(50),
            suspect_after: Duration::from_secs(1),
            stall: Duration::from_millis(500),
            rejoin_margin: Duration::from_millis(500),
            hold_window: Duration::from_millis(300),
            origin_wait: Duration::from_secs(30),
            replication: 1,
        }
    }

    /// How overdue a stream's next packet must be for its sender to hold it
    /// ([`Self::hold_window`]): `suspect_after` less a heartbeat, the shortest silence after
    /// which a peer may have been suspected (its last heartbeat went up to one interval before
    /// the stall). A shorter stall is nobody's business: what fell due is sent at once.
    #[must_use]
    pub fn hold_after(&self) -> Duration {
        self.suspect_after.saturating_sub(self.heartbeat)
    }
}

/// What etcd says about a node (its lease).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberInfo {
    /// The node.
    pub id: NodeId,
    /// Its name.
    pub name: String,
    /// Whether it holds a live lease.
    pub live: bool,
}

/// How a peer looks from here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Live in etcd and heard from recently (or not probed yet).
    Up,
    /// Live in etcd but silent for `suspect_after`.
    Suspect,
    /// Its lease lapsed (or it left).
    Down,
}

/// Why a member's part of the sessions is taken over.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LossCause {
    /// Silent for `suspect_after` (heartbeats), still live in etcd.
    Suspected,
    /// Its control connection to this node closed ([`ClusterCore::handle_peer_closed`]).
    Closed,
    /// Its lease lapsed, or it was removed.
    Down,
}

/// A member as the API shows it.
#[derive(Clone, Debug)]
pub struct MemberView {
    /// The node.
    pub id: NodeId,
    /// Its name.
    pub name: String,
    /// Its health.
    pub health: Health,
    /// Its clock's estimated offset from ours (ns; positive: ahead).
    pub clock_offset_ns: i64,
    /// The heartbeat round trip in use for the estimate.
    pub round_trip: Option<Duration>,
}

#[derive(Debug)]
struct Member {
    name: String,
    live: bool,
    last_heard: Option<Instant>,
    /// How far its senders had got by its last heartbeat, on our clock (every packet due
    /// before it was handed out), if it says.
    sent_through: Option<Instant>,
    next_ping: Instant,
    ping_seq: u64,
    clock: ClockSync,
    /// Whether its loss was acted on already (suspicion, then the lease lapse, act once).
    lost: bool,
}

/// How a session's packets reach its client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Delivery {
    /// Every node sends its own packets straight to the client (Yima §2.2).
    Bipartite,
    /// The other nodes forward their blocks to the origin, which sends every packet: for
    /// players that take RTP from one address only, and for interleaved (TCP) transport.
    Relay,
}

/// A session to open on the origin.
#[derive(Clone, Copy, Debug)]
pub struct OpenSpec {
    /// The session's stream (on this node).
    pub stream: StreamId,
    /// The object.
    pub object: ObjectId,
    /// The placement epoch of the plan.
    pub epoch: Epoch,
    /// The object's mean rate.
    pub avg_bitrate: BitRate,
    /// Its peak rate.
    pub peak_bitrate: BitRate,
    /// The delivery mode.
    pub delivery: Delivery,
}

/// A run to start on the origin.
#[derive(Clone, Copy, Debug)]
pub struct StartSpec {
    /// The first packet.
    pub start: Position,
    /// The last media time to send, if the range had an end.
    pub end: Option<MediaTime>,
    /// Its tracks: each one's stamps, and its destination: the client's UDP addresses
    /// ([`Dest::Udp`]) or [`Dest::Origin`] for interleaved transport.
    pub tracks: RunTracks,
    /// Trick play at this scale (a single node's runs only).
    pub trick: Option<Pace>,
}

impl StartSpec {
    /// Whether every set-up track goes to the client over UDP (what bipartite delivery needs).
    #[must_use]
    pub fn all_udp(&self) -> bool {
        self.tracks
            .as_slice()
            .iter()
            .filter(|t| t.enabled)
            .all(|t| matches!(t.dest, Dest::Udp { .. }))
    }
}

/// Stop now (a seek) or at a synchronised cutoff (a pause, a switch of rendition).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopKind {
    /// As soon as each node hears of it; positions are approximate (a seek follows).
    Now,
    /// After the packets at or before a cutoff `control_margin` ahead; positions are exact.
    Pause,
    /// Just before packet `before` (a switch of rendition just before a key frame the
    /// renditions share, whose packets are sent ahead of its presentation time `cutoff`):
    /// every share sends its packets before `before` and reports, once `cutoff` is due, the
    /// first it did not send; positions are exact. `due` is how long until `cutoff` comes at
    /// most: the stop's replies are awaited that much longer than `reply_timeout`.
    At {
        /// The media time at which every packet before `before` has been sent.
        cutoff: MediaTime,
        /// The first packet not sent.
        before: Gsn,
        /// How long until `cutoff` comes, at most.
        due: Duration,
    },
}

/// A session's clock once pinned by the origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalAnchor {
    /// The instant on this node's clock.
    pub wall: Instant,
    /// The media time due then.
    pub media: MediaTime,
}

/// What this node's scheduler and sender must do for a share.
// A run's tracks make starts a few hundred bytes: one per PLAY, no cost worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalAction {
    /// Admit the share at the scheduler (its own disks' part of the object at `epoch`), then
    /// call [`ClusterCore::handle_admitted`].
    Admit {
        /// The share.
        key: ShareKey,
        /// The object.
        object: ObjectId,
        /// The placement epoch.
        epoch: Epoch,
        /// Mean rate.
        avg_bitrate: BitRate,
        /// Peak rate.
        peak_bitrate: BitRate,
        /// Members lost before the session opened ([`Message::Reserve`]'s `lost`): plan the
        /// share as if they were gone, each block on its first copy on a node not in `lost`,
        /// and refuse if a block has no such copy.
        lost: BTreeSet<NodeId>,
        /// Which of the session's opens this is ([`Message::Reserve`]'s `open`). A session
        /// reopened (a switch of rendition) reuses its key: the scheduler's decision on an
        /// earlier open, coming late, is not this one's.
        open: u32,
    },
    /// Start a run: read the share's blocks on the session's clock and send or forward them.
    Start {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// What to do.
        spec: RunSpec,
        /// `spec.anchor` on this node's clock.
        anchor: Option<LocalAnchor>,
    },
    /// Stop the run (at `cutoff`, or now); then call [`ClusterCore::handle_share_stopped`].
    Stop {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The cutoff.
        cutoff: Option<MediaTime>,
        /// The first packet not to send (see [`Message::Stop`]).
        before: Option<Gsn>,
    },
    /// Change the pace: re-pin at `anchor` (cluster), or at the current packet (`None`, a
    /// single node: the pacer knows it best).
    Pace {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The new anchor.
        anchor: Option<LocalAnchor>,
        /// The new pace.
        pace: Pace,
    },
    /// Send the session's RTCP BYE (the origin in bipartite delivery, once every node ended).
    Bye {
        /// The share.
        key: ShareKey,
    },
    /// Forget the share and release its reservation.
    Close {
        /// The share.
        key: ShareKey,
    },
    /// Members of the share's session are lost (`dead`, every one lost so far): from media time
    /// `from` on, also send every block whose first copy on a node not in `dead` is on this
    /// node (`isochron_store::replica`), in index order, without resending what the share sent
    /// already. Packets already due are sent at once. `docs/design/takeover.md`.
    TakeOver {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// Every member of the session lost so far.
        dead: BTreeSet<NodeId>,
        /// The media time to take over from (the dead node's last sign of life, minus
        /// `control_margin`; never before the run's start).
        from: MediaTime,
        /// What told us.
        cause: LossCause,
    },
    /// A member lost to the session speaks again and takes its part back
    /// ([`Message::Rejoin`]): of the blocks after the one holding media time `at`, stop sending
    /// those this node sends only because `node` was lost (its first copy on a node not in
    /// `dead ∪ {node}` is here, and not on a node not in `dead`). `dead` is the dead set
    /// without `node`.
    GiveBack {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// Every member of the session still lost.
        dead: BTreeSet<NodeId>,
        /// The member back.
        node: NodeId,
        /// The media time after whose block it sends its own blocks alone.
        at: MediaTime,
    },
    /// This node was lost to the share's session (it stood still, or its link failed) and its
    /// part was taken over from media time `from`: send none of the packets of the blocks
    /// taken over from `from` on, neither those that fell due while it stood still nor later
    /// ones, until the give-back point `until` (or, while `None`, [`LocalAction::Release`])
    /// says from where they are its own again. Packets before `from`, and blocks nobody took,
    /// are still its own. Replaces what an earlier withhold of the run said.
    /// `docs/design/takeover.md`, *A node that stood still*.
    Withhold {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The media time its part was taken over from.
        from: MediaTime,
        /// Who took it over: every block of its part whose next copy (the first on another
        /// node) is on one of these nodes. `None`: every block of its part (the origin's word,
        /// which every member heard).
        takers: Option<BTreeSet<NodeId>>,
        /// The media time after whose block its blocks are its own again, when known already.
        until: Option<MediaTime>,
        /// The members this node counts lost besides whoever took its part over, when that
        /// narrows its part: its part as the takers see it is the blocks whose first copy off
        /// these members is on this node. Blocks it took over from a taker are not in it and
        /// stay its own to send (the taker holds them back on this node's word): when both
        /// sides of a partition lost each other at once, each took the other's part over.
        /// Given on a member's word; on the origin's word only when this node lost the origin
        /// too (otherwise every block of its part: `None`).
        lost_besides: Option<BTreeSet<NodeId>>,
    },
    /// The share feeds a relayed session whose origin fell silent: send nothing until
    /// [`LocalAction::Thaw`] (or [`LocalAction::Close`]). Its packets would only wait in the
    /// silent origin's socket, and overflow it; the origin, once it speaks again, re-pins the
    /// session's clock ([`LocalAction::Pace`]) so that everyone goes on from where it stopped.
    Freeze {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
    },
    /// The origin of a frozen share speaks again: send on, on the share's clock.
    Thaw {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
    },
    /// The session's members give this node's part back after the block holding media time
    /// `at` ([`Message::Rejoin`]): of the packets held back by [`LocalAction::Withhold`], pass
    /// over those of blocks up to that one (the takers send them) and send from the next block
    /// on.
    Release {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The media time after whose block the share's blocks are its own again.
        at: MediaTime,
    },
}

/// What became of a session this node is the origin of.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEvent {
    /// Every node reserved its share.
    Opened {
        /// The stream.
        stream: StreamId,
    },
    /// A node refused (or could not be asked); every reservation was released.
    Refused {
        /// The stream.
        stream: StreamId,
        /// Who and why.
        refusal: Refusal,
    },
    /// Every node stopped the run.
    Stopped {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where to resume: the first packet no node sent (`None`: the end).
        next: Option<Position>,
        /// The last packet sent, by the node that went furthest.
        last_sent: Option<Position>,
    },
    /// Every sending node sent its last packet of the run.
    Ended {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The last packet sent.
        last_sent: Option<Position>,
    },
    /// A node cannot go on with the run.
    Failed {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Which node and why.
        error: String,
    },
}

#[derive(Debug)]
struct Session {
    open: OpenSpec,
    /// This open's number ([`Message::Reserve`]'s `open`): answers to an earlier open of the
    /// same stream are not this one's.
    open_id: u32,
    members: BTreeSet<NodeId>,
    reserving: Option<Reserving>,
    reserved: BTreeSet<NodeId>,
    run: Option<RunState>,
    /// Members lost (before it opened, or while it ran), whose parts the others took over.
    lost: BTreeSet<NodeId>,
    /// Those lost while it ran with their share reserved, and the run they were lost in: one
    /// that speaks again (it only stood still, or its link healed) still runs that share, and
    /// takes its part back if the session is still in that run.
    rejoinable: BTreeMap<NodeId, RunId>,
    /// Where this node, the origin, takes its own part back after members took it over (it
    /// stood still, or its links to them failed): the run, the media time after whose block
    /// its blocks are its own again ([`Message::Rejoin`], told to every member that says it
    /// took over), and those members.
    taken_back: Option<TakenBack>,
    /// Those the members' shares were planned without (the `lost` of `Reserve`): a member lost
    /// after that and before the first run is announced to the others with the run's `Start`.
    planned_without: BTreeSet<NodeId>,
}

#[derive(Debug)]
struct TakenBack {
    run: RunId,
    at: MediaTime,
    from: MediaTime,
    takers: BTreeSet<NodeId>,
}

#[derive(Debug)]
struct Reserving {
    pending: BTreeSet<NodeId>,
    deadline: Instant,
}

#[derive(Debug)]
struct RunState {
    run: RunId,
    /// The session's clock, when the origin pinned it.
    clock: Option<(LocalAnchor, Pace)>,
    pace: Pace,
    /// Nodes whose pacers send packets: every member (in relay, to the origin).
    senders: BTreeSet<NodeId>,
    ended: BTreeMap<NodeId, ShareReport>,
    ended_reported: bool,
    stopping: Option<Stopping>,
    /// After a member was lost before its end: the other senders whose word on their share
    /// ([`Message::Status`]) the run waits for before it can end (their shares may have ended
    /// before the loss and go on with the blocks they took over), until `recheck_until`.
    recheck: BTreeSet<NodeId>,
    recheck_until: Instant,
}

#[derive(Debug)]
struct Stopping {
    pending: BTreeSet<NodeId>,
    reports: Vec<ShareReport>,
    deadline: Instant,
}

#[derive(Debug, Default)]
struct Share {
    /// The open it was reserved for ([`Message::Reserve`]'s `open`), named in the answer.
    open: u32,
    run: Option<RunId>,
    /// The running run's start, role and clock (on this node's clock), for a takeover.
    spec: Option<RunSpec>,
    clock: Option<(LocalAnchor, Pace)>,
    /// Members of the session lost so far (their parts are taken over).
    dead: BTreeSet<NodeId>,
    /// Those lost before it opened: its plan leaves them out already (no takeover needed).
    planned_without: BTreeSet<NodeId>,
    /// The origin is lost: nobody will stop or close the share; it runs to its end and then
    /// releases itself.
    orphan: bool,
    /// The media time this node took the lost origin's own part over from, as it told the
    /// origin ([`Message::Lost`]): it gives that part back at the origin's word
    /// ([`Message::Rejoin`]), and says it again when the origin speaks again.
    told_origin: Option<MediaTime>,
    /// A feeder frozen since then: its origin fell silent ([`LocalAction::Freeze`]).
    frozen_since: Option<Instant>,
    /// The running run's end, once its last packet went (until a takeover revives it).
    ended: Option<ShareReport>,
}

/// The cluster core of one node. See the module docs.
#[derive(Debug)]
pub struct ClusterCore {
    config: ClusterConfig,
    members: BTreeMap<NodeId, Member>,
    /// Each peer's process incarnation, as its last [`Message::Hello`] said: another one is a
    /// restarted process, which runs none of the shares the last one did. Kept apart from
    /// `members`: a peer's control connection may open (with its `Hello`, said once) before
    /// etcd shows this node the peer, and an incarnation dropped then would let a restarted
    /// process pass for the old one come back (given its part back, which it never sends).
    incarnations: BTreeMap<NodeId, u64>,
    sessions: BTreeMap<StreamId, Session>,
    shares: BTreeMap<ShareKey, Share>,
    /// The number of the last session this node opened as an origin.
    last_open: u32,
    out: VecDeque<(NodeId, Message)>,
    local: VecDeque<LocalAction>,
    events: VecDeque<SessionEvent>,
    /// The last instant the driver called in (timers and messages).
    last_call: Option<Instant>,
    /// The end of this node's last stall: silence before it says nothing about a peer.
    awake_since: Instant,
    /// Stalls seen.
    stalls: u64,
    /// How far this node's senders had got, as the driver last said.
    sent_through: Option<Instant>,
    /// Shares that ran to their end while their origin was lost, with their report and when
    /// they ended: the `Ended` sent then may have been lost with the link, and is said again
    /// when the origin speaks again (kept `origin_wait` at most).
    ended_orphans: BTreeMap<ShareKey, (RunId, ShareReport, Instant)>,
}

impl ClusterCore {
    /// A core for `config.node`, itself its only member until told otherwise.
    #[must_use]
    pub fn new(config: ClusterConfig) -> Self {
        let mut members = BTreeMap::new();
        members.insert(
            config.node,
            Member {
                name: config.name.clone(),
                live: true,
                last_heard: None,
                sent_through: None,
                next_ping: Instant::ZERO,
                ping_seq: 0,
                clock: ClockSync::default(),
                lost: false,
            },
        );
        Self {
            config,
            members,
            incarnations: BTreeMap::new(),
            sessions: BTreeMap::new(),
            shares: BTreeMap::new(),
            last_open: 0,
            out: VecDeque::new(),
            local: VecDeque::new(),
            events: VecDeque::new(),
            last_call: None,
            ended_orphans: BTreeMap::new(),
            awake_since: Instant::ZERO,
            stalls: 0,
            sent_through: None,
        }
    }

    /// The driver's word on how far this node's senders have got: every packet of its shares
    /// due before `t` has been handed out. Carried in every heartbeat from now on, so that a
    /// peer that loses this node takes its part over from there rather than a fixed margin
    /// before its last sign of life (`docs/design/takeover.md`). A sender that lags behind
    /// (a busy machine) reports an earlier `t`; a stale word is only cautious.
    pub fn handle_sent_through(&mut self, t: Instant) {
        self.sent_through = Some(t);
    }

    /// How many times this node found it had stood still for longer than `stall`.
    #[must_use]
    pub fn stalls(&self) -> u64 {
        self.stalls
    }

    /// Notes a call at `now`: a gap longer than `stall` since the last one was this node's own
    /// stall, and the silence of its peers during it is not held against them.
    fn wake(&mut self, now: Instant) {
        let gap = self.last_call.map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
        if gap > self.config.stall {
            self.awake_since = self.awake_since.max(now);
            self.stalls += 1;
        }
        self.last_call = Some(self.last_call.map_or(now, |l| l.max(now)));
        // How far this node's senders fell behind in the stall: no further than they say.
        let lag = self.sent_through.map_or(gap, |t| gap.min(now.saturating_duration_since(t)));
        if lag > self.config.hold_after() {
            self.repin_relayed(now, lag);
        }
    }

    /// This node stood still for `lag`, long enough for its peers to have suspected it: the
    /// feeders of the relayed sessions it is the origin of froze (or will, a moment from now)
    /// and its own senders are `lag` behind. Every such session's clock moves on by `lag`
    /// ([`Message::Pace`], to every member and this node's own share, before anything else it
    /// says to them): the client's stream goes on from where it stopped, late by the stall,
    /// and every node from where it was, nothing sent twice and nothing at once
    /// (`docs/design/takeover.md`, *A relaying origin that stood still*). The feeders thaw on
    /// hearing it. A bipartite session is not moved: its members took this node's part over
    /// and their packets reached the client meanwhile.
    fn repin_relayed(&mut self, now: Instant, lag: Duration) {
        let me = self.config.node;
        let mut tell = Vec::new();
        for (stream, session) in &mut self.sessions {
            if session.open.delivery != Delivery::Relay {
                continue;
            }
            let Some(run) = session.run.as_mut().filter(|r| r.stopping.is_none()) else {
                continue;
            };
            let Some((anchor, pace)) = run.clock else { continue };
            let new = LocalAnchor { wall: anchor.wall + lag, media: anchor.media };
            run.clock = Some((new, pace));
            let key = ShareKey { origin: me, stream: *stream };
            for to in &session.members {
                tell.push((*to, key, run.run, new, pace));
            }
        }
        for (to, key, run, new, pace) in tell {
            let anchor = WallAnchor { unix_ns: self.unix_ns(new.wall), media: new.media };
            self.send(now, to, Message::Pace { key, run, anchor, pace });
        }
    }

    /// When `m` was last heard, as far as this node can tell: never before this node woke.
    fn heard(&self, m: &Member) -> Option<Instant> {
        m.last_heard.map(|t| t.max(self.awake_since))
    }

    /// This node.
    #[must_use]
    pub fn node(&self) -> NodeId {
        self.config.node
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &ClusterConfig {
        &self.config
    }

    // ----- membership ------------------------------------------------------------------------

    /// A node's record or liveness changed in etcd. A member that goes down ends its part in
    /// every session (see [`Self::handle_timeout`] for the consequences).
    pub fn handle_member(&mut self, now: Instant, info: MemberInfo) {
        self.wake(now);
        if info.id == self.config.node {
            return;
        }
        let was_live = self.members.get(&info.id).is_some_and(|m| m.live);
        let m = self.members.entry(info.id).or_insert_with(|| Member {
            name: info.name.clone(),
            live: false,
            last_heard: None,
            sent_through: None,
            next_ping: now,
            ping_seq: 0,
            clock: ClockSync::default(),
            lost: false,
        });
        m.name = info.name;
        m.live = info.live;
        if info.live && !was_live {
            m.last_heard = None;
            m.sent_through = None;
            m.next_ping = now;
        }
        if was_live && !info.live {
            self.member_lost(now, info.id, LossCause::Down);
        }
    }

    /// Forgets a node that left the cluster for good (`isochron node remove`, then stopped: it
    /// owns no disk in use). Its part of running sessions stays with those who took it over,
    /// but it leaves their count of lost members: a later loss is one of K, not two, and new
    /// sessions are not refused for it.
    pub fn remove_member(&mut self, now: Instant, id: NodeId) {
        if id == self.config.node {
            return;
        }
        if self.members.contains_key(&id) {
            self.member_lost(now, id, LossCause::Down);
            self.members.remove(&id);
        }
        for session in self.sessions.values_mut() {
            session.lost.remove(&id);
            session.rejoinable.remove(&id);
        }
    }

    /// Every member, this node included.
    pub fn members(&self, now: Instant) -> impl Iterator<Item = MemberView> + '_ {
        self.members.iter().map(move |(id, m)| MemberView {
            id: *id,
            name: m.name.clone(),
            health: self.health(now, *id),
            clock_offset_ns: m.clock.offset_ns(),
            round_trip: m.clock.round_trip(),
        })
    }

    /// A member's health.
    #[must_use]
    pub fn health(&self, now: Instant, id: NodeId) -> Health {
        match self.members.get(&id) {
            None => Health::Down,
            Some(_) if id == self.config.node => Health::Up,
            Some(m) if !m.live => Health::Down,
            Some(m) => match self.heard(m) {
                Some(t) if now.saturating_duration_since(t) > self.config.suspect_after => {
                    Health::Suspect
                }
                _ => Health::Up,
            },
        }
    }

    /// `peer`'s control connection to this node closed (end of stream, or reset): its process
    /// ended (a crash, a kill, a restart, a shutdown), or the connection failed. With copies
    /// elsewhere its part is taken over now, as on a suspicion, rather than after
    /// `suspect_after` of silence: a killed node's takeover starts about a second sooner, a
    /// second of a player's buffer (`docs/design/takeover.md`, *Detection*). A peer that
    /// only lost the connection opens another and speaks again: taken back as after a false
    /// suspicion, at the cost of duplicates. The driver reports only the peer's newest
    /// connection.
    pub fn handle_peer_closed(&mut self, now: Instant, peer: NodeId) {
        let open = self.members.get(&peer).is_some_and(|m| m.live && !m.lost);
        if peer != self.config.node && open && self.config.replication >= 2 {
            self.member_lost(now, peer, LossCause::Closed);
        }
    }

    /// Converts a Unix time on `peer`'s clock to an instant on ours.
    #[must_use]
    pub fn local_instant(&self, peer: NodeId, unix_ns: u64) -> Instant {
        let ours = match self.members.get(&peer) {
            Some(m) if peer != self.config.node => m.clock.to_local(unix_ns),
            _ => unix_ns,
        };
        Instant::from_nanos(ours.saturating_sub(self.config.unix_base_ns))
    }

    /// Our instant `t` in Unix ns.
    #[must_use]
    pub fn unix_ns(&self, t: Instant) -> u64 {
        t.as_nanos().saturating_add(self.config.unix_base_ns)
    }

    // ----- the origin: sessions ---------------------------------------------------------------

    /// Opens a session: asks every member to reserve its share. The answer comes as
    /// [`SessionEvent::Opened`] or [`SessionEvent::Refused`].
    ///
    /// A member that is down (its lease lapsed) or lost (silent past `suspect_after`) cannot
    /// read its blocks. With one copy of every block that refuses the session at once; with
    /// K ≥ 2 copies and fewer than K members lost, the session opens on the others, planned
    /// without the lost ones: each block is sent by its first copy on a live node, as a
    /// takeover would (`docs/design/takeover.md`), and a member that finds a block with no such
    /// copy refuses.
    pub fn open(&mut self, now: Instant, spec: OpenSpec) {
        let me = self.config.node;
        let k = usize::from(self.config.replication.max(1));
        let lost: BTreeSet<NodeId> = self
            .members
            .iter()
            .filter(|(id, m)| **id != me && (m.lost || self.health(now, **id) == Health::Down))
            .map(|(id, _)| *id)
            .collect();
        if let Some(first) = lost.iter().next()
            && (k < 2 || lost.len() >= k)
        {
            let name = self.members[first].name.clone();
            let reason = match lost.len() {
                1 => "node is down".to_owned(),
                n => format!("node is down ({n} of the {k} copies' nodes are)"),
            };
            self.events.push_back(SessionEvent::Refused {
                stream: spec.stream,
                refusal: Refusal { node: name, disk: None, reason },
            });
            return;
        }
        let members: BTreeSet<NodeId> =
            self.members.keys().copied().filter(|id| !lost.contains(id)).collect();
        let key = ShareKey { origin: me, stream: spec.stream };
        // Numbered from 1 (0 is "not numbered"), wrapping: only the last open of a stream
        // counts, and nobody waits for four billion answers.
        self.last_open = self.last_open.checked_add(1).unwrap_or(1);
        let open_id = self.last_open;
        self.sessions.insert(
            spec.stream,
            Session {
                open: spec,
                open_id,
                members: members.clone(),
                reserving: Some(Reserving {
                    pending: members.clone(),
                    deadline: now + self.config.reply_timeout,
                }),
                reserved: BTreeSet::new(),
                run: None,
                lost: lost.clone(),
                rejoinable: BTreeMap::new(),
                taken_back: None,
                planned_without: lost.clone(),
            },
        );
        for to in members {
            self.send(
                now,
                to,
                Message::Reserve {
                    key,
                    open: open_id,
                    object: spec.object,
                    epoch: spec.epoch,
                    avg_bitrate: spec.avg_bitrate,
                    peak_bitrate: spec.peak_bitrate,
                    lost: lost.clone(),
                },
            );
        }
    }

    /// Whether this node is the origin of an open (or opening) session for `stream`.
    #[must_use]
    pub fn has_session(&self, stream: StreamId) -> bool {
        self.sessions.contains_key(&stream)
    }

    /// Starts run `run` of an opened session on every member. A cluster session's clock is
    /// pinned `start_delay` from now; a single node's by its scheduler.
    pub fn start(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        spec: StartSpec,
        pace: Pace,
    ) {
        let me = self.config.node;
        let cluster = self.members.len() > 1;
        let anchor = cluster
            .then(|| LocalAnchor { wall: now + self.config.start_delay, media: spec.start.time });
        let wall = anchor.map(|a| WallAnchor { unix_ns: self.unix_ns(a.wall), media: a.media });
        let Some(session) = self.sessions.get_mut(&stream) else { return };
        let delivery = if spec.all_udp() { session.open.delivery } else { Delivery::Relay };
        // Every member sends its own packets: to the client, or (relay) to the origin, which
        // sends them on from its own address.
        let senders: BTreeSet<NodeId> = session.members.clone();
        session.run = Some(RunState {
            run,
            clock: anchor.map(|a| (a, pace)),
            pace,
            senders,
            ended: BTreeMap::new(),
            ended_reported: false,
            stopping: None,
            recheck: BTreeSet::new(),
            recheck_until: Instant::ZERO,
        });
        let key = ShareKey { origin: me, stream };
        let base = RunSpec {
            object: session.open.object,
            epoch: session.open.epoch,
            start: spec.start,
            end: spec.end,
            anchor: wall,
            pace,
            tracks: spec.tracks.with_dest(Dest::Origin),
            trick: spec.trick,
            role: Role::Whole,
            // Yima's LSN lets a client tell the nodes' packets apart, and the block end next to
            // it which node owes a lost tail (RBEC): for players that take bipartite delivery,
            // on a single node too, so that its client finds a lost tail the same way. A relayed
            // session has one source, and players that need relay get plain RTP.
            lsn: delivery == Delivery::Bipartite,
        };
        let members: Vec<NodeId> = session.members.iter().copied().collect();
        for to in members {
            let spec = match (cluster, delivery) {
                (false, _) => base,
                (true, Delivery::Bipartite) => {
                    RunSpec { tracks: spec.tracks, role: Role::Share { rtcp: to == me }, ..base }
                }
                (true, _) if to == me => RunSpec { role: Role::Share { rtcp: true }, ..base },
                (true, _) => RunSpec { role: Role::Feeder, ..base },
            };
            self.send(now, to, Message::Start { key, run, spec });
        }
        // Members lost since the shares were planned and before any run: every member takes
        // their part over from the first packet (one that still hears them would not by itself).
        let Some(session) = self.sessions.get_mut(&stream) else { return };
        let unplanned: Vec<NodeId> =
            session.lost.difference(&session.planned_without).copied().collect();
        session.planned_without.extend(unplanned.iter().copied());
        let tell: Vec<NodeId> = session.members.iter().copied().filter(|n| *n != me).collect();
        for to in tell {
            for node in &unplanned {
                let lost = Message::Lost { key, run, node: *node, from: spec.start.time };
                self.send(now, to, lost);
            }
        }
    }

    /// Stops the running run of `stream` on every node; [`SessionEvent::Stopped`] follows.
    /// Returns `false` if nothing is running.
    pub fn stop(&mut self, now: Instant, stream: StreamId, kind: StopKind) -> bool {
        let margin = self.config.control_margin;
        let timeout = self.config.reply_timeout;
        let Some(session) = self.sessions.get_mut(&stream) else { return false };
        let Some(run) = session.run.as_mut() else { return false };
        if run.stopping.is_some() {
            return true;
        }
        let cutoff = match (kind, run.clock) {
            (StopKind::Now, _) => None,
            (StopKind::Pause, Some((anchor, pace))) => Some(media_at(anchor, pace, now + margin)),
            (StopKind::At { cutoff, .. }, _) => Some(cutoff),
            // A single node stops exactly where its pacer is.
            (StopKind::Pause, None) => None,
        };
        let pending: BTreeSet<NodeId> = session.members.clone();
        let wait = match kind {
            StopKind::At { due, .. } => timeout + due,
            StopKind::Now | StopKind::Pause => timeout,
        };
        run.stopping =
            Some(Stopping { pending: pending.clone(), reports: Vec::new(), deadline: now + wait });
        let before = match kind {
            StopKind::At { before, .. } => Some(before),
            StopKind::Now | StopKind::Pause => None,
        };
        let r = run.run;
        let key = ShareKey { origin: self.config.node, stream };
        for to in pending {
            self.send(now, to, Message::Stop { key, run: r, cutoff, before });
        }
        true
    }

    /// Changes the session's pace (MTFC). Returns the pace in force, or `None` if the session
    /// has no run. A cluster session's clock is re-pinned `control_margin` ahead on every node.
    pub fn pace(&mut self, now: Instant, stream: StreamId, pace: Pace) -> Option<Pace> {
        let margin = self.config.control_margin;
        let session = self.sessions.get_mut(&stream)?;
        let run = session.run.as_mut()?;
        run.pace = pace;
        let r = run.run;
        let key = ShareKey { origin: self.config.node, stream };
        let members: Vec<NodeId> = session.members.iter().copied().collect();
        match run.clock {
            Some((anchor, old)) => {
                let wall = (now + margin).max(anchor.wall);
                let new = LocalAnchor { wall, media: media_at(anchor, old, wall) };
                run.clock = Some((new, pace));
                let anchor = WallAnchor { unix_ns: self.unix_ns(new.wall), media: new.media };
                for to in members {
                    self.send(now, to, Message::Pace { key, run: r, anchor, pace });
                }
            }
            None => self.local.push_back(LocalAction::Pace { key, run: r, anchor: None, pace }),
        }
        Some(pace)
    }

    /// Closes a session: every node forgets its share and releases its reservation.
    pub fn close(&mut self, now: Instant, stream: StreamId) {
        let Some(session) = self.sessions.remove(&stream) else { return };
        let key = ShareKey { origin: self.config.node, stream };
        let told: BTreeSet<NodeId> = match &session.reserving {
            Some(_) => session.members.clone(),
            None => session.reserved.clone(),
        };
        for to in told {
            self.send(now, to, Message::Close { key });
        }
    }

    // ----- this node's shares -----------------------------------------------------------------

    /// This node's scheduler decided on a share's reservation.
    pub fn handle_admitted(&mut self, now: Instant, key: ShareKey, result: Result<(), Refusal>) {
        let Some(open) = self.shares.get(&key).map(|s| s.open) else {
            // Closed meanwhile: release what was just admitted.
            if result.is_ok() {
                self.local.push_back(LocalAction::Close { key });
            }
            return;
        };
        if result.is_err() {
            self.shares.remove(&key);
        }
        self.send(now, key.origin, Message::Reserved { key, open, result });
    }

    /// This node's part of a run stopped (after a [`LocalAction::Stop`]).
    pub fn handle_share_stopped(
        &mut self,
        now: Instant,
        key: ShareKey,
        run: RunId,
        report: ShareReport,
    ) {
        if self.shares.get(&key).is_some_and(|s| s.run == Some(run)) {
            self.send(now, key.origin, Message::Stopped { key, run, report });
        }
    }

    /// This node's part of a run sent (or forwarded) its last packet.
    pub fn handle_share_ended(
        &mut self,
        now: Instant,
        key: ShareKey,
        run: RunId,
        report: ShareReport,
    ) {
        match self.shares.get(&key) {
            Some(s) if s.run == Some(run) && s.orphan => {
                // The origin is told all the same: one that only stood still ends its session
                // with the others' reports (told again when it speaks again: a connection that
                // broke meanwhile lost it). With the origin down, nobody will close the share:
                // it is released now. With the origin only suspected, it stays, ended, until
                // the origin speaks again (then it closes it as usual), is down, or stays
                // silent `origin_wait`: a member lost after the origin is back may still have
                // blocks to give it.
                if self.members.get(&key.origin).is_none_or(|m| !m.live) {
                    self.shares.remove(&key);
                    self.local.push_back(LocalAction::Close { key });
                } else if let Some(s) = self.shares.get_mut(&key) {
                    s.ended = Some(report);
                }
                self.send(now, key.origin, Message::Ended { key, run, report });
                self.ended_orphans.insert(key, (run, report, now));
            }
            Some(s) if s.run == Some(run) => {
                if let Some(s) = self.shares.get_mut(&key) {
                    s.ended = Some(report);
                }
                self.send(now, key.origin, Message::Ended { key, run, report });
            }
            _ => {}
        }
    }

    /// The driver carried out a [`LocalAction::TakeOver`] of share `key`'s run `run`;
    /// `revived` when the share had ended and goes on with blocks it gained. The origin is told
    /// where the share stands ([`Message::Status`]): it does not end the run before.
    pub fn handle_taken_over(&mut self, now: Instant, key: ShareKey, run: RunId, revived: bool) {
        let Some(share) = self.shares.get_mut(&key).filter(|s| s.run == Some(run)) else {
            return;
        };
        if revived {
            share.ended = None;
        }
        let ended = share.ended;
        self.status(now, key, run, ended);
    }

    /// Where this node's share `key` stands, to its origin (or, on the origin, to itself).
    fn status(&mut self, now: Instant, key: ShareKey, run: RunId, ended: Option<ShareReport>) {
        let me = self.config.node;
        if key.origin == me {
            self.on_status(me, key, run, ended);
        } else {
            self.send(now, key.origin, Message::Status { key, run, ended });
        }
    }

    /// This node's part of a run cannot go on.
    pub fn handle_share_failed(
        &mut self,
        now: Instant,
        key: ShareKey,
        run: RunId,
        error: &ShareFailure,
    ) {
        match self.shares.get(&key) {
            Some(s) if s.run == Some(run) => {
                if s.orphan {
                    self.shares.remove(&key);
                    self.local.push_back(LocalAction::Close { key });
                }
                let error = format!("node {}: {error}", self.config.name);
                self.send(now, key.origin, Message::Failed { key, run, error });
            }
            _ => {}
        }
    }

    /// The clock of share `key`'s running run (on this node's clock), if pinned.
    #[must_use]
    pub fn share_clock(&self, key: ShareKey) -> Option<(LocalAnchor, Pace)> {
        self.shares.get(&key)?.clock
    }

    /// Shares this node runs.
    #[must_use]
    pub fn share_count(&self) -> usize {
        self.shares.len()
    }

    /// Sessions this node is the origin of.
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    // ----- messages and time ------------------------------------------------------------------

    /// A message from `from` (over its control connection).
    pub fn handle_message(&mut self, now: Instant, from: NodeId, msg: Message) {
        self.on_message(now, from, msg);
        // The origin of frozen feeders speaks: they go on, on the clock it re-pinned (its
        // first word after a stall, [`Self::repin_relayed`], this one or an earlier one).
        if from == self.config.node {
            return;
        }
        for (key, share) in &mut self.shares {
            if key.origin != from {
                continue;
            }
            if let (Some(_), Some(run)) = (share.frozen_since.take(), share.run) {
                self.local.push_back(LocalAction::Thaw { key: *key, run });
            }
        }
    }

    fn on_message(&mut self, now: Instant, from: NodeId, msg: Message) {
        if from != self.config.node {
            self.wake(now);
        }
        if let Message::Hello { incarnation, .. } = msg {
            let was = self.incarnations.insert(from, incarnation);
            let restarted = was.is_some_and(|w| w != incarnation);
            if restarted {
                // A new process runs none of the old one's shares: nothing to take back. Nor
                // does it know the sessions the old one was the origin of: their frozen
                // feeders have nobody to feed.
                for session in self.sessions.values_mut() {
                    session.rejoinable.remove(&from);
                }
                let stale: Vec<ShareKey> = self
                    .shares
                    .iter()
                    .filter(|(k, s)| k.origin == from && s.frozen_since.is_some())
                    .map(|(k, _)| *k)
                    .collect();
                for key in stale {
                    self.shares.remove(&key);
                    self.local.push_back(LocalAction::Close { key });
                }
            }
        }
        if from != self.config.node
            && let Some(m) = self.members.get_mut(&from)
        {
            m.last_heard = Some(now);
            // A lost peer speaks again (it stood still, or its link healed).
            if m.live && m.lost {
                m.lost = false;
                // The sessions it is the origin of have it back, and its blocks: it says from
                // where it takes its part back ([`Message::Rejoin`], one point for every
                // member and itself). It was told this node took its part over when it was
                // lost; the word is said again, in case that one was lost with a connection.
                let mut tell = Vec::new();
                for (key, share) in &mut self.shares {
                    if key.origin != from {
                        continue;
                    }
                    share.orphan = false;
                    if !share.dead.contains(&from) {
                        continue;
                    }
                    match (share.run, share.told_origin) {
                        (Some(run), Some(at)) => {
                            tell.push(Message::Lost { key: *key, run, node: from, from: at });
                        }
                        // Lost before its share ran: nothing was taken over, nothing to give
                        // back (a run started later has it back in full).
                        _ => {
                            share.dead.remove(&from);
                        }
                    }
                }
                let ended: Vec<ShareKey> =
                    self.ended_orphans.keys().filter(|k| k.origin == from).copied().collect();
                for key in ended {
                    if let Some((run, report, _)) = self.ended_orphans.remove(&key) {
                        tell.push(Message::Ended { key, run, report });
                    }
                }
                for msg in tell {
                    self.send(now, from, msg);
                }
                self.rejoin(now, from);
            }
        }
        match msg {
            Message::Hello { .. } => {}
            Message::Ping { seq, sent_unix_ns, sent_through_unix_ns } => {
                if let Some(through) = sent_through_unix_ns {
                    let t = self.local_instant(from, through);
                    if let Some(m) = self.members.get_mut(&from) {
                        m.sent_through = Some(t);
                    }
                }
                let t = self.unix_ns(now);
                self.out.push_back((
                    from,
                    Message::Pong {
                        seq,
                        ping_sent_unix_ns: sent_unix_ns,
                        received_unix_ns: t,
                        sent_unix_ns: t,
                    },
                ));
            }
            Message::Pong { ping_sent_unix_ns, received_unix_ns, sent_unix_ns, .. } => {
                let t3 = self.unix_ns(now);
                if let Some(m) = self.members.get_mut(&from) {
                    m.clock.handle_sample(ping_sent_unix_ns, received_unix_ns, sent_unix_ns, t3);
                }
            }
            Message::Reserve { key, open, object, epoch, avg_bitrate, peak_bitrate, lost } => {
                // The share is planned without the lost members from its first run on.
                self.shares.insert(
                    key,
                    Share {
                        open,
                        dead: lost.clone(),
                        planned_without: lost.clone(),
                        ..Share::default()
                    },
                );
                self.local.push_back(LocalAction::Admit {
                    key,
                    object,
                    epoch,
                    avg_bitrate,
                    peak_bitrate,
                    lost,
                    open,
                });
            }
            Message::Start { key, run, spec } => {
                let anchor = spec.anchor.map(|a| LocalAnchor {
                    wall: self.local_instant(key.origin, a.unix_ns),
                    media: a.media,
                });
                let Some(share) = self.shares.get_mut(&key) else { return };
                share.run = Some(run);
                share.spec = Some(spec);
                share.clock = anchor.map(|a| (a, spec.pace));
                let dead = share.dead.clone();
                let taken = share.dead != share.planned_without;
                self.local.push_back(LocalAction::Start { key, run, spec, anchor });
                // A run started after a loss (a seek, a resume) carries the lost parts from
                // its first packet (those lost before the session opened are in its plan).
                if taken {
                    self.local.push_back(LocalAction::TakeOver {
                        key,
                        run,
                        dead,
                        from: spec.start.time,
                        cause: LossCause::Down,
                    });
                }
            }
            Message::Stop { key, run, cutoff, before } => {
                if self.shares.get(&key).is_some_and(|s| s.run == Some(run)) {
                    self.local.push_back(LocalAction::Stop { key, run, cutoff, before });
                } else {
                    // Not running that run (already ended, or never started): nothing to stop.
                    self.send(
                        now,
                        key.origin,
                        Message::Stopped { key, run, report: ShareReport::default() },
                    );
                }
            }
            Message::Pace { key, run, anchor, pace } => {
                let anchor = LocalAnchor {
                    wall: self.local_instant(key.origin, anchor.unix_ns),
                    media: anchor.media,
                };
                if let Some(share) = self.shares.get_mut(&key).filter(|s| s.run == Some(run)) {
                    share.clock = Some((anchor, pace));
                    self.local.push_back(LocalAction::Pace {
                        key,
                        run,
                        anchor: Some(anchor),
                        pace,
                    });
                }
            }
            Message::Status { key, run, ended } => self.on_status(from, key, run, ended),
            Message::Lost { key, run, node, from: at } if node == self.config.node => {
                self.taken_over(now, from, key, run, at);
            }
            Message::Lost { key, run, node, from } => {
                // The origin's word: take `node`'s part over if this node has not already.
                let Some(share) = self.shares.get_mut(&key) else { return };
                if share.run != Some(run) || node == self.config.node {
                    return;
                }
                if !share.dead.insert(node) {
                    // Taken over already, on this node's own suspicion: the origin waits for
                    // its word all the same.
                    let ended = share.ended;
                    self.status(now, key, run, ended);
                    return;
                }
                let dead = share.dead.clone();
                let from = share.spec.map_or(from, |s| from.max(s.start.time));
                let cause = LossCause::Suspected;
                self.local.push_back(LocalAction::TakeOver { key, run, dead, from, cause });
            }
            Message::Rejoin { key, run, node, at } if node == self.config.node => {
                // This node's part is its own again after `at`'s block.
                if self.shares.get(&key).is_some_and(|s| s.run == Some(run)) {
                    self.local.push_back(LocalAction::Release { key, run, at });
                }
            }
            Message::Rejoin { key, run, node, at } => {
                let Some(share) = self.shares.get_mut(&key) else { return };
                if share.run != Some(run) || !share.dead.remove(&node) {
                    return;
                }
                let dead = share.dead.clone();
                self.local.push_back(LocalAction::GiveBack { key, run, dead, node, at });
            }
            Message::Close { key } => {
                if self.shares.remove(&key).is_some() {
                    self.local.push_back(LocalAction::Close { key });
                }
            }
            Message::Reserved { key, open, result } => {
                self.on_reserved(now, from, key, open, result);
            }
            Message::Stopped { key, run, report } => {
                self.on_stopped(now, from, key, run, Some(report))
            }
            Message::Ended { key, run, report } => self.on_ended(from, key, run, report),
            Message::Failed { key, run, error } => {
                if self.run_is(key, run) {
                    self.events.push_back(SessionEvent::Failed { stream: key.stream, run, error });
                }
            }
        }
    }

    /// Expires answers not given in time, sends heartbeats, suspects silent peers.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.wake(now);
        // Heartbeats to every live peer.
        let unix = self.unix_ns(now);
        let through = self.sent_through.map(|t| self.unix_ns(t.min(now)));
        let me = self.config.node;
        for (id, m) in &mut self.members {
            if *id == me || !m.live || m.next_ping > now {
                continue;
            }
            m.ping_seq += 1;
            // On the heartbeat's own schedule, not from when this call came: a driver that
            // calls every `heartbeat` (the server's tick) a little late each time would
            // otherwise find the next ping not yet due and send one every other call. After a
            // stall, from now.
            let next = m.next_ping + self.config.heartbeat;
            m.next_ping = if next > now { next } else { now + self.config.heartbeat };
            self.out.push_back((
                *id,
                Message::Ping {
                    seq: m.ping_seq,
                    sent_unix_ns: unix,
                    sent_through_unix_ns: through,
                },
            ));
        }
        // Peers silent for `suspect_after`: with copies elsewhere, take their parts over now
        // rather than when their lease lapses (`docs/design/takeover.md`).
        if self.config.replication >= 2 {
            let suspects: Vec<NodeId> = self
                .members
                .iter()
                .filter(|(id, m)| **id != me && m.live && !m.lost)
                .filter(|(id, _)| self.health(now, **id) == Health::Suspect)
                .map(|(id, _)| *id)
                .collect();
            for id in suspects {
                self.member_lost(now, id, LossCause::Suspected);
            }
        }
        // Feeders whose origin stayed silent for `origin_wait`, and shares that ended while it
        // was: it died.
        let wait = self.config.origin_wait;
        let ended = |k: &ShareKey| self.ended_orphans.get(k).map(|(_, _, t)| *t);
        let gone: Vec<ShareKey> = self
            .shares
            .iter()
            .filter(|(k, s)| s.frozen_since.or_else(|| ended(k)).is_some_and(|t| now >= t + wait))
            .map(|(k, _)| *k)
            .collect();
        for key in gone {
            self.shares.remove(&key);
            self.ended_orphans.remove(&key);
            self.local.push_back(LocalAction::Close { key });
        }
        self.ended_orphans.retain(|_, (_, _, t)| now < *t + wait);
        // Answers not given in time.
        let late: Vec<(StreamId, Vec<NodeId>)> = self
            .sessions
            .iter()
            .filter_map(|(s, sess)| {
                let r = sess.reserving.as_ref().filter(|r| r.deadline <= now)?;
                Some((*s, r.pending.iter().copied().collect()))
            })
            .collect();
        for (stream, pending) in late {
            if let Some(node) = pending.first() {
                let name = self.member_name(*node);
                self.refuse(
                    now,
                    stream,
                    Refusal { node: name, disk: None, reason: "did not answer".into() },
                );
            }
        }
        let late: Vec<(StreamId, RunId, Vec<NodeId>)> = self
            .sessions
            .iter()
            .filter_map(|(s, sess)| {
                let run = sess.run.as_ref()?;
                let st = run.stopping.as_ref().filter(|st| st.deadline <= now)?;
                Some((*s, run.run, st.pending.iter().copied().collect()))
            })
            .collect();
        for (stream, run, pending) in late {
            let key = ShareKey { origin: me, stream };
            for node in pending {
                self.on_stopped(now, node, key, run, None);
            }
        }
        // Words after a loss not given in time: the ends reported before stand.
        let late: Vec<StreamId> = self
            .sessions
            .iter()
            .filter_map(|(s, sess)| {
                let run = sess.run.as_ref()?;
                (!run.recheck.is_empty() && run.recheck_until <= now).then_some(*s)
            })
            .collect();
        for stream in late {
            if let Some(run) = self.sessions.get_mut(&stream).and_then(|s| s.run.as_mut()) {
                run.recheck.clear();
            }
            self.check_ended(stream);
        }
    }

    /// The next instant [`Self::handle_timeout`] has something to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let me = self.config.node;
        let pings =
            self.members.iter().filter(|(id, m)| **id != me && m.live).map(|(_, m)| m.next_ping);
        let reserves =
            self.sessions.values().filter_map(|s| s.reserving.as_ref().map(|r| r.deadline));
        let stops = self
            .sessions
            .values()
            .filter_map(|s| s.run.as_ref()?.stopping.as_ref().map(|st| st.deadline));
        let rechecks = self
            .sessions
            .values()
            .filter_map(|s| s.run.as_ref().filter(|r| !r.recheck.is_empty()))
            .map(|r| r.recheck_until);
        // With copies elsewhere, the instant each peer becomes suspect.
        let suspicions = self
            .members
            .iter()
            .filter(|(id, m)| **id != me && m.live && !m.lost && self.config.replication >= 2)
            .filter_map(|(_, m)| self.heard(m).map(|t| t + self.config.suspect_after + NANO));
        let frozen = self
            .shares
            .values()
            .filter_map(|s| s.frozen_since)
            .chain(self.ended_orphans.values().map(|(_, _, t)| *t))
            .map(|t| t + self.config.origin_wait);
        pings.chain(reserves).chain(stops).chain(rechecks).chain(suspicions).chain(frozen).min()
    }

    /// The next message for a peer.
    pub fn poll_transmit(&mut self) -> Option<(NodeId, Message)> {
        self.out.pop_front()
    }

    /// The next action for this node's scheduler and sender.
    pub fn poll_local(&mut self) -> Option<LocalAction> {
        self.local.pop_front()
    }

    /// The next outcome for the RTSP side.
    pub fn poll_event(&mut self) -> Option<SessionEvent> {
        self.events.pop_front()
    }

    // ----- internals --------------------------------------------------------------------------

    fn send(&mut self, now: Instant, to: NodeId, msg: Message) {
        if to == self.config.node {
            self.handle_message(now, to, msg);
        } else {
            self.out.push_back((to, msg));
        }
    }

    fn member_name(&self, id: NodeId) -> String {
        self.members.get(&id).map_or_else(|| format!("#{id}"), |m| m.name.clone())
    }

    fn run_is(&self, key: ShareKey, run: RunId) -> bool {
        key.origin == self.config.node
            && self
                .sessions
                .get(&key.stream)
                .and_then(|s| s.run.as_ref())
                .is_some_and(|r| r.run == run)
    }

    fn on_reserved(
        &mut self,
        now: Instant,
        from: NodeId,
        key: ShareKey,
        open: u32,
        result: Result<(), Refusal>,
    ) {
        if key.origin != self.config.node {
            return;
        }
        let Some(session) = self.sessions.get_mut(&key.stream) else {
            // The session is gone: release a reservation made meanwhile.
            if result.is_ok() {
                self.send(now, from, Message::Close { key });
            }
            return;
        };
        if open != session.open_id {
            // The answer to an earlier open of this stream (refused elsewhere, then reopened
            // at another rendition), sent before that member was told to close it: the close
            // already releases what it reserved, and it answers this open on its own.
            return;
        }
        let pending = session.reserving.as_mut().is_some_and(|r| r.pending.remove(&from));
        if !pending {
            // A member lost before it answered, answering now: the session opened without it.
            if result.is_ok() && !session.members.contains(&from) {
                self.send(now, from, Message::Close { key });
            }
            return;
        }
        match result {
            Ok(()) => {
                session.reserved.insert(from);
                open_once_reserved(session, key.stream, &mut self.events);
            }
            Err(refusal) => self.refuse(now, key.stream, refusal),
        }
    }

    /// Ends an opening session with a refusal, releasing what was reserved.
    fn refuse(&mut self, now: Instant, stream: StreamId, refusal: Refusal) {
        let Some(session) = self.sessions.remove(&stream) else { return };
        let key = ShareKey { origin: self.config.node, stream };
        // Nodes still to answer are told too: a late "reserved" must be released.
        let pending = session.reserving.map(|r| r.pending).unwrap_or_default();
        for to in session.reserved.into_iter().chain(pending) {
            self.send(now, to, Message::Close { key });
        }
        self.events.push_back(SessionEvent::Refused { stream, refusal });
    }

    fn on_stopped(
        &mut self,
        _now: Instant,
        from: NodeId,
        key: ShareKey,
        run: RunId,
        report: Option<ShareReport>,
    ) {
        if !self.run_is(key, run) {
            return;
        }
        let Some(state) = self.sessions.get_mut(&key.stream).and_then(|s| s.run.as_mut()) else {
            return;
        };
        let Some(stopping) = state.stopping.as_mut() else { return };
        if !stopping.pending.remove(&from) {
            return;
        }
        if let Some(r) = report
            && state.senders.contains(&from)
        {
            stopping.reports.push(r);
        }
        if stopping.pending.is_empty() {
            let reports = std::mem::take(&mut stopping.reports);
            state.stopping = None;
            let (next, last_sent) = combine(&reports);
            self.events.push_back(SessionEvent::Stopped {
                stream: key.stream,
                run,
                next,
                last_sent,
            });
        }
    }

    fn on_ended(&mut self, from: NodeId, key: ShareKey, run: RunId, report: ShareReport) {
        if !self.run_is(key, run) {
            return;
        }
        let Some(state) = self.sessions.get_mut(&key.stream).and_then(|s| s.run.as_mut()) else {
            return;
        };
        if !state.senders.contains(&from) || state.ended_reported || state.stopping.is_some() {
            return;
        }
        // Sent before it took its part of a loss over: its word on that comes next.
        if state.recheck.contains(&from) {
            return;
        }
        state.ended.insert(from, report);
        self.check_ended(key.stream);
    }

    /// A sender's word on its share after a takeover ([`Message::Status`]).
    fn on_status(&mut self, from: NodeId, key: ShareKey, run: RunId, ended: Option<ShareReport>) {
        if !self.run_is(key, run) {
            return;
        }
        let Some(state) = self.sessions.get_mut(&key.stream).and_then(|s| s.run.as_mut()) else {
            return;
        };
        state.recheck.remove(&from);
        match ended {
            Some(report) if state.senders.contains(&from) => {
                state.ended.insert(from, report);
            }
            Some(_) => {}
            None => {
                state.ended.remove(&from);
            }
        }
        self.check_ended(key.stream);
    }

    /// Reports the run's end once every sending node has ended.
    fn check_ended(&mut self, stream: StreamId) {
        let me = self.config.node;
        let Some(state) = self.sessions.get_mut(&stream).and_then(|s| s.run.as_mut()) else {
            return;
        };
        let done = !state.senders.is_empty()
            && state.recheck.is_empty()
            && state.senders.iter().all(|n| state.ended.contains_key(n));
        if state.ended_reported || state.stopping.is_some() || !done {
            return;
        }
        state.ended_reported = true;
        let reports: Vec<ShareReport> = state.ended.values().copied().collect();
        let (_, last_sent) = combine(&reports);
        let bye = state.senders.len() > 1 || !state.senders.contains(&me);
        let run = state.run;
        self.events.push_back(SessionEvent::Ended { stream, run, last_sent });
        if bye {
            self.local.push_back(LocalAction::Bye { key: ShareKey { origin: me, stream } });
        }
    }

    /// `by` took this node's part of the share `key` over from media time `from`: this node was
    /// lost to it (it stood still, or a link failed). The share holds its packets back from
    /// there on ([`LocalAction::Withhold`]) until it is told where its blocks are its own again:
    /// by the origin's [`Message::Rejoin`], or, when this node is the origin, at a point it
    /// chooses now, `rejoin_margin` ahead (one point per run and stall, told to every member
    /// that took over).
    fn taken_over(&mut self, now: Instant, by: NodeId, key: ShareKey, run: RunId, from: MediaTime) {
        let me = self.config.node;
        if self.shares.get(&key).is_none_or(|s| s.run != Some(run)) {
            return;
        }
        if key.origin != me {
            if by != key.origin {
                return;
            }
            // The origin's word: every member was told to take this node's part over. If this
            // node lost the origin meanwhile and took its part over, that part stays with it.
            let lost_besides =
                self.shares.get(&key).filter(|s| s.dead.contains(&by)).map(|s| {
                    s.dead.iter().copied().filter(|n| *n != by).collect::<BTreeSet<NodeId>>()
                });
            let action =
                LocalAction::Withhold { key, run, from, takers: None, until: None, lost_besides };
            self.local.push_back(action);
            return;
        }
        // A member's word: it took over the blocks whose next copy is on it, and the other
        // members those whose next copy is on them only if they lost this node too (a link
        // may have failed between this node and that member alone). Only the blocks of the
        // members that said so are held back.
        let margin = self.config.rejoin_margin;
        let Some(session) = self.sessions.get_mut(&key.stream) else { return };
        let clock = session.run.as_ref().filter(|r| r.run == run).and_then(|r| r.clock);
        let Some((anchor, pace)) = clock else { return };
        let t = match session.taken_back.as_mut() {
            // Another member that took over in the same stall (or the same one saying it
            // again): the same point, given to it too; its blocks are held back as well.
            Some(t) if t.run == run && from <= t.at => t,
            _ => session.taken_back.insert(TakenBack {
                run,
                at: media_at(anchor, pace, now + margin),
                from,
                takers: BTreeSet::new(),
            }),
        };
        t.takers.insert(by);
        t.from = t.from.min(from);
        let (at, from, takers) = (t.at, t.from, t.takers.clone());
        let lost_besides = Some(session.lost.difference(&takers).copied().collect());
        let until = Some(at);
        let action =
            LocalAction::Withhold { key, run, from, takers: Some(takers), until, lost_besides };
        self.local.push_back(action);
        self.send(now, by, Message::Rejoin { key, run, node: me, at });
    }

    /// A member this node had lost speaks again. In the sessions this node is the origin of
    /// that it was lost to while running its share, it takes its part back at a media time
    /// `rejoin_margin` ahead: every member that took a block of it over sends the blocks after
    /// that time's block no more ([`LocalAction::GiveBack`]), while it never stopped sending its
    /// own. It counts as a member again (stops, pace changes, the end), and no longer as lost:
    /// a second loss is then one of K, not two. During a synchronised stop it is told to close
    /// its share instead (it would not stop with the others).
    fn rejoin(&mut self, now: Instant, node: NodeId) {
        let me = self.config.node;
        let margin = self.config.rejoin_margin;
        let streams: Vec<StreamId> = self
            .sessions
            .iter()
            .filter(|(_, s)| s.rejoinable.contains_key(&node))
            .map(|(stream, _)| *stream)
            .collect();
        for stream in streams {
            let Some(s) = self.sessions.get_mut(&stream) else { continue };
            let lost_in = s.rejoinable.remove(&node);
            let key = ShareKey { origin: me, stream };
            let Some(run) = s.run.as_mut() else { continue };
            // A run started since (a seek, a resume) was not started on it: its share still
            // runs the old one. So is a run being stopped. It stays out, its share closed.
            let (Some((anchor, pace)), None, true) =
                (run.clock, run.stopping.as_ref(), lost_in == Some(run.run))
            else {
                self.out.push_back((node, Message::Close { key }));
                continue;
            };
            let at = media_at(anchor, pace, now + margin);
            let r = run.run;
            run.senders.insert(node);
            s.lost.remove(&node);
            s.members.insert(node);
            s.reserved.insert(node);
            // Every member, this node's own share too, and the node itself: it held its part
            // back from where it was taken over (`LocalAction::Withhold`), and sends its
            // blocks after `at`'s from now on.
            let tell: Vec<NodeId> = s.members.iter().copied().collect();
            for to in tell {
                self.send(now, to, Message::Rejoin { key, run: r, node, at });
            }
        }
    }

    /// A member is gone (or suspected so): its answers will never come, and the sessions it
    /// served lose its part. With one copy of every block that ends them; with K ≥ 2 the holders
    /// of the other copies take its part over (`docs/design/takeover.md`), each deciding for
    /// itself from the same dead set.
    fn member_lost(&mut self, now: Instant, id: NodeId, cause: LossCause) {
        let me = self.config.node;
        let k = usize::from(self.config.replication.max(1));
        let name = self.member_name(id);
        // Where its part is taken over from: a margin before how far it said its senders had
        // got, else a wider one before its last sign of life.
        let progress = match self.members.get_mut(&id) {
            Some(m) => {
                m.lost = true;
                match m.sent_through {
                    Some(t) => Some(t.saturating_sub(self.config.progress_margin)),
                    None => m.last_heard.map(|t| t.saturating_sub(self.config.takeover_margin)),
                }
            }
            None => None,
        };
        let takeover = k >= 2;
        if !takeover && cause != LossCause::Down {
            return;
        }
        // The sessions this node is the origin of.
        let streams: Vec<StreamId> = self.sessions.keys().copied().collect();
        for stream in streams {
            let key = ShareKey { origin: me, stream };
            let Some(session) = self.sessions.get_mut(&stream) else { continue };
            if !session.members.contains(&id) {
                continue;
            }
            session.lost.insert(id);
            if let Some(r) = session.reserving.as_mut().filter(|r| r.pending.contains(&id)) {
                // Lost before it answered: with K ≥ 2 and fewer than K lost the session opens
                // on the others (its part is taken over from the first run on), as if it had
                // been lost before the session opened; otherwise some block has no copy left.
                if !takeover || session.lost.len() >= k {
                    let reason = "node is down".to_owned();
                    self.refuse(now, stream, Refusal { node: name.clone(), disk: None, reason });
                    continue;
                }
                r.pending.remove(&id);
                session.members.remove(&id);
                open_once_reserved(session, stream, &mut self.events);
                continue;
            }
            if let Some(run) = session.run.as_ref().filter(|_| session.reserved.contains(&id)) {
                session.rejoinable.insert(id, run.run);
            }
            let lost = session.lost.len();
            if let Some(r) = session.run.as_ref().map(|run| run.run) {
                if !takeover || lost >= k {
                    self.events.push_back(SessionEvent::Failed {
                        stream,
                        run: r,
                        error: format!("node {name} is down"),
                    });
                }
                // Lost before its end: its part goes to the others, whose shares may have
                // ended already and go on with it. The run waits for each one's word.
                let wait = self.config.reply_timeout;
                if let Some(run) = self.sessions.get_mut(&stream).and_then(|s| s.run.as_mut()) {
                    run.recheck.remove(&id);
                    let unended = run.senders.contains(&id) && !run.ended.contains_key(&id);
                    if takeover && lost < k && unended && run.stopping.is_none() {
                        run.recheck = run.senders.iter().copied().filter(|n| *n != id).collect();
                        run.recheck_until = now + wait;
                    }
                }
                // A pending stop completes without it; a run that waited only for it has ended.
                self.on_stopped(now, id, key, r, None);
                // Its end, if it reported one, stays on record: should it speak again and be
                // taken back (`rejoin`), the run does not wait for an end it sent already.
                if let Some(run) = self.sessions.get_mut(&stream).and_then(|s| s.run.as_mut()) {
                    run.senders.remove(&id);
                }
                self.check_ended(stream);
            }
            let Some(s) = self.sessions.get_mut(&stream) else { continue };
            s.members.remove(&id);
            s.reserved.remove(&id);
            // Tell the other members, so that every one takes its part over (one that still
            // hears the lost node would not by itself).
            let Some(run) = s.run.as_ref().filter(|_| takeover && s.lost.len() < k) else {
                continue;
            };
            let from = takeover_from(progress, run.clock).unwrap_or(MediaTime::ZERO);
            let r = run.run;
            // The lost node too: if it only stood still, the word waits in its socket, and it
            // holds back its part from there on instead of sending it twice when it resumes
            // (`LocalAction::Withhold`).
            let tell: Vec<NodeId> =
                s.members.iter().copied().filter(|n| *n != me).chain([id]).collect();
            for to in tell {
                self.send(now, to, Message::Lost { key, run: r, node: id, from });
            }
        }
        // This node's shares.
        let keys: Vec<ShareKey> = self.shares.keys().copied().collect();
        for key in keys {
            let Some(share) = self.shares.get_mut(&key) else { continue };
            let feeder = share.spec.is_some_and(|s| s.role == Role::Feeder);
            // A relayed session's packets all go through its origin: with it silent, the
            // feeders' would only fill its socket. They wait, frozen, for it to speak again
            // (it may only stand still, longer than its lease even), `origin_wait` at most.
            if let (true, true, Some(run)) = (key.origin == id, feeder, share.run) {
                if share.frozen_since.is_none() {
                    share.frozen_since = Some(now);
                    self.local.push_back(LocalAction::Freeze { key, run });
                }
                continue;
            }
            // A suspected origin may only have stood still: its shares wait for its lease.
            // Once it is down, nobody will start or close a share it has not started, or one
            // that ended.
            let idle = share.run.is_none() || share.ended.is_some();
            if key.origin == id && (!takeover || (cause == LossCause::Down && idle)) {
                self.shares.remove(&key);
                self.ended_orphans.remove(&key);
                self.local.push_back(LocalAction::Close { key });
                continue;
            }
            if !takeover || share.dead.contains(&id) {
                continue;
            }
            share.dead.insert(id);
            if key.origin == id {
                share.orphan = true;
            }
            let (Some(run), Some(spec)) = (share.run, share.spec) else { continue };
            // From how far the dead node had got, less a margin: what it sent after that is
            // sent twice, and the client (or a relayed session's origin) drops the duplicates
            // by sequence number.
            let from = takeover_from(progress, share.clock)
                .map_or(spec.start.time, |t| t.max(spec.start.time));
            let dead = share.dead.clone();
            self.local.push_back(LocalAction::TakeOver { key, run, dead, from, cause });
            // A lost origin is told too, for its own part: should it only have stood still, it
            // holds that part back on resuming and says where it takes it back.
            if key.origin == id {
                share.told_origin = Some(from);
                self.send(now, id, Message::Lost { key, run, node: id, from });
            }
        }
    }
}

/// One nanosecond: health turns suspect strictly after `suspect_after`.
const NANO: Duration = Duration::from_nanos(1);

/// Ends `session`'s reservation once no member is left to answer: it is open.
fn open_once_reserved(
    session: &mut Session,
    stream: StreamId,
    events: &mut VecDeque<SessionEvent>,
) {
    if session.reserving.as_ref().is_some_and(|r| r.pending.is_empty()) {
        session.reserving = None;
        events.push_back(SessionEvent::Opened { stream });
    }
}

/// Where a takeover from the instant `t` (a lost node's progress less a margin) starts on the
/// clock `clock`.
fn takeover_from(t: Option<Instant>, clock: Option<(LocalAnchor, Pace)>) -> Option<MediaTime> {
    let (t, (anchor, pace)) = (t?, clock?);
    Some(media_at(anchor, pace, t))
}

/// The media time the clock `(anchor, pace)` shows at `wall`.
fn media_at(anchor: LocalAnchor, pace: Pace, wall: Instant) -> MediaTime {
    anchor.media + pace.media_span(wall.saturating_duration_since(anchor.wall))
}

/// Where a session stands from its senders' reports: the first packet no node sent, and the
/// furthest packet any node sent. Each track's next packet is the furthest any node counted:
/// every node started the run at the same vector and moved each track past the packets it
/// sent, so together they are past every packet sent.
fn combine(reports: &[ShareReport]) -> (Option<Position>, Option<Position>) {
    let all = reports.iter().flat_map(|r| [r.next, r.last_sent]).flatten();
    let tracks = all.map(|p| p.tracks).reduce(TrackSeqs::max);
    let with = |p: Position| Position { tracks: tracks.unwrap_or(p.tracks), ..p };
    let next = reports.iter().filter_map(|r| r.next).min_by_key(|p| p.gsn).map(with);
    let last = reports.iter().filter_map(|r| r.last_sent).max_by_key(|p| p.gsn).map(with);
    (next, last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_driver_calling_every_heartbeat_a_little_late_pings_on_every_call() {
        let mut core = ClusterCore::new(ClusterConfig::new(NodeId(1), "n1", 0));
        for id in [1, 2] {
            let info = MemberInfo { id: NodeId(id), name: format!("n{id}"), live: true };
            core.handle_member(Instant::ZERO, info);
        }
        // The server's tick: every heartbeat, each call a few milliseconds late, some less late
        // than the one before (a ping due at the last call + a heartbeat would not be due yet).
        let beat = u64::try_from(core.config().heartbeat.as_millis()).unwrap();
        let mut pings = 0;
        for k in 0..50u64 {
            let late = if k % 2 == 0 { 5 } else { 1 };
            core.handle_timeout(Instant::from_nanos((k * beat + late) * 1_000_000));
            while let Some((_, msg)) = core.poll_transmit() {
                pings += usize::from(matches!(msg, Message::Ping { .. }));
            }
        }
        assert_eq!(pings, 50);
    }

    /// A session refused by one member is reopened at once (a switch of rendition going back
    /// to the rung it left); another member's refusal of the first open, arriving after that,
    /// is not the answer to the second: only the answers to the second open decide it.
    #[test]
    fn a_late_answer_to_an_earlier_open_is_not_the_answer_to_the_reopen() {
        let now = Instant::ZERO;
        let mut core = ClusterCore::new(ClusterConfig::new(NodeId(1), "n1", 0));
        for id in [1, 2, 3] {
            core.handle_member(
                now,
                MemberInfo { id: NodeId(id), name: format!("n{id}"), live: true },
            );
        }
        let spec = |object| OpenSpec {
            stream: StreamId(7),
            object: ObjectId(object),
            epoch: Epoch(0),
            avg_bitrate: BitRate(1_500_000),
            peak_bitrate: BitRate(2_000_000),
            delivery: Delivery::Relay,
        };
        let key = ShareKey { origin: NodeId(1), stream: StreamId(7) };
        let reserves = |core: &mut ClusterCore| {
            let mut opens = Vec::new();
            while let Some((_, msg)) = core.poll_transmit() {
                if let Message::Reserve { open, .. } = msg {
                    opens.push(open);
                }
            }
            opens
        };
        let full = |node: &str| {
            Err(Refusal { node: node.into(), disk: None, reason: "not enough egress".into() })
        };
        core.open(now, spec(1));
        let first = reserves(&mut core);
        assert_eq!(first.len(), 2, "one reserve per other member");
        let first = first[0];
        core.handle_message(
            now,
            NodeId(2),
            Message::Reserved { key, open: first, result: full("n2") },
        );
        assert!(matches!(core.poll_event(), Some(SessionEvent::Refused { .. })));
        core.open(now, spec(2));
        let second = reserves(&mut core)[0];
        assert_ne!(second, first);
        // n3 refused the first open too; its answer comes now.
        core.handle_message(
            now,
            NodeId(3),
            Message::Reserved { key, open: first, result: full("n3") },
        );
        assert_eq!(core.poll_event(), None, "the reopen stands");
        for id in [2, 3] {
            let msg = Message::Reserved { key, open: second, result: Ok(()) };
            core.handle_message(now, NodeId(id), msg);
        }
        assert_eq!(core.poll_event(), None, "this node's own share is still to be admitted");
        core.handle_admitted(now, key, Ok(()));
        assert!(matches!(core.poll_event(), Some(SessionEvent::Opened { .. })));
    }
}
