//! The control messages nodes exchange, as the core sees them (typed).
//!
//! Why typed messages apart from the wire: the core reasons in ids, positions and media times;
//! [`crate::wire`] pins the bytes (a version byte and a postcard encoding of plain mirror
//! structs), so either can change without the other (the catalog's pattern, `isochron-store`).
//!
//! Every message is small (tens of bytes): Yima §2.2's point is that bipartite delivery leaves
//! only control between nodes, "orders of magnitude less than the streaming data traffic".

use std::collections::BTreeSet;
use std::fmt;
use std::net::SocketAddr;

use isochron_base::{
    BitRate, BlockIndex, DiskId, Epoch, Gsn, IoFailure, MAX_TRACKS, MediaTime, NodeId, ObjectId,
    Pace, Position, RunId, StreamId,
};

/// One node's part in one session: the session's node (`origin`) and its stream id there.
///
/// Stream ids are allocated per node, so a share is named by both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShareKey {
    /// The node that answers the session's RTSP (Yima's single control point).
    pub origin: NodeId,
    /// The session's stream on the origin.
    pub stream: StreamId,
}

impl fmt::Display for ShareKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.origin, self.stream)
    }
}

/// A wall-clock instant on the sending node's clock (Unix nanoseconds) paired with the media time
/// due then: where a session's media clock is pinned (the cluster form of `sched::Anchor`).
///
/// Nodes translate it to their own monotonic clock with the offset they estimate to the sender
/// ([`crate::clock::ClockSync`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WallAnchor {
    /// Unix nanoseconds on the sender's clock.
    pub unix_ns: u64,
    /// The media time due at `unix_ns`.
    pub media: MediaTime,
}

/// Where a share's packets go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dest {
    /// RTP straight to the client from the sending node's own address (bipartite delivery).
    Udp {
        /// The client's RTP address.
        rtp: SocketAddr,
        /// The client's RTCP address.
        rtcp: SocketAddr,
    },
    /// Through the origin: on the origin, the session's own transport (UDP or interleaved TCP);
    /// any other node sends its RTP packets to the origin's relay port (relay delivery).
    Origin,
}

/// One track of a run: how every sending node stamps its packets, where they go, and whether
/// the client set it up (an object ingested from MP4 or Matroska sends each track as its own
/// RTP stream; an MPEG-TS object has one track).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackSpec {
    /// The track's SSRC, shared by every sending node.
    pub ssrc: u32,
    /// RTP sequence-number offset (seq = offset + the packet's `track_seq`, the GSN for MP2T).
    pub seq_offset: u16,
    /// RTP timestamp offset.
    pub rtp_ts_offset: u32,
    /// The RTP clock rate (90 kHz for MP2T).
    pub clock_rate: u32,
    /// The RTP payload type.
    pub payload_type: u8,
    /// Where its packets go.
    pub dest: Dest,
    /// The client set it up; packets of other tracks are not sent.
    pub enabled: bool,
}

impl TrackSpec {
    /// The one MP2T track of an MPEG-TS object (PT 33, 90 kHz).
    #[must_use]
    pub fn mp2t(ssrc: u32, seq_offset: u16, rtp_ts_offset: u32, dest: Dest) -> Self {
        Self {
            ssrc,
            seq_offset,
            rtp_ts_offset,
            clock_rate: 90_000,
            payload_type: 33,
            dest,
            enabled: true,
        }
    }

    /// Whether this is exactly that MP2T track (what wire version 1 can carry).
    #[must_use]
    pub fn is_mp2t(&self) -> bool {
        self.clock_rate == 90_000 && self.payload_type == 33 && self.enabled
    }
}

/// A run's tracks, by index (at most [`MAX_TRACKS`]); `Copy`, so that specs stay plain values.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunTracks {
    len: u8,
    tracks: [TrackSpec; MAX_TRACKS],
}

impl RunTracks {
    /// The tracks `tracks` (those past [`MAX_TRACKS`] dropped; objects never have more).
    #[must_use]
    pub fn new(tracks: &[TrackSpec]) -> Self {
        let filler = TrackSpec::mp2t(0, 0, 0, Dest::Origin);
        let mut out = Self { len: 0, tracks: [filler; MAX_TRACKS] };
        for (i, t) in tracks.iter().take(MAX_TRACKS).enumerate() {
            out.tracks[i] = *t;
        }
        out.len = tracks.len().min(MAX_TRACKS) as u8;
        out
    }

    /// One MP2T track.
    #[must_use]
    pub fn one(track: TrackSpec) -> Self {
        Self::new(&[track])
    }

    /// The tracks, by index.
    #[must_use]
    pub fn as_slice(&self) -> &[TrackSpec] {
        &self.tracks[..usize::from(self.len)]
    }

    /// The same tracks with every destination set to `dest`.
    #[must_use]
    pub fn with_dest(mut self, dest: Dest) -> Self {
        for t in &mut self.tracks {
            t.dest = dest;
        }
        self
    }

    /// The first track (a run always has one).
    #[must_use]
    pub fn first(&self) -> TrackSpec {
        self.tracks[0]
    }
}

/// What a node does with its share of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Paces every block of the object and sends the session's RTCP after its packets, as a
    /// single server does.
    Whole,
    /// Paces only its own blocks; sends the session's RTCP sender reports on a timer and its BYE
    /// when told (`rtcp`), or no RTCP at all.
    Share {
        /// Whether this node sends the session's RTCP (the origin, RFC 3550 §6.4.1).
        rtcp: bool,
    },
    /// Paces its own blocks on the session's clock as RTP to the origin, which sends each packet
    /// on to the client from its own address (relay); no RTCP.
    Feeder,
}

/// The run a node is asked to carry out: everything it needs to read, pace and stamp its packets
/// without asking anyone (Yima §2.2: "every node retrieves, schedules, and sends data blocks
/// that are stored locally directly to the requesting client").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunSpec {
    /// The object.
    pub object: ObjectId,
    /// The placement epoch the origin planned with.
    pub epoch: Epoch,
    /// The run's first packet (a seek point, or where a pause stopped).
    pub start: Position,
    /// The last media time to send, if the PLAY range had an end.
    pub end: Option<MediaTime>,
    /// Where the session's clock is pinned; `None`: the node pins it itself when its first
    /// block is in memory (a single node, XTREAM's low initial latency).
    pub anchor: Option<WallAnchor>,
    /// The session's pace (MTFC).
    pub pace: Pace,
    /// Its tracks: stamps and destinations.
    pub tracks: RunTracks,
    /// Trick play at this scale (key frames only, RFC 2326 §12.34; a single node's runs only).
    pub trick: Option<Pace>,
    /// This node's role.
    pub role: Role,
    /// Whether packets carry the node's local sequence number (Yima's LSN, RFC 8285).
    pub lsn: bool,
}

/// Why a node refused its share of a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    /// The node's name.
    pub node: String,
    /// The disk that would be overloaded, when one is to blame.
    pub disk: Option<DiskId>,
    /// The node's own words (its admission controller's reason).
    pub reason: String,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.disk {
            Some(d) => write!(f, "node {} disk {d}: {}", self.node, self.reason),
            None => write!(f, "node {}: {}", self.node, self.reason),
        }
    }
}

/// Why this node's part of a run cannot go on ([`crate::ClusterCore::handle_share_failed`]);
/// the origin hears it, with the node's name, as [`Message::Failed`] and ends the session with
/// it as the reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShareFailure {
    /// A block could not be read from any copy this node can reach.
    Read(IoFailure),
    /// A block the run still has to send has no copy on a live node (the origin's word:
    /// nobody can send it).
    NoCopy(BlockIndex),
    /// The share has no transport to its client: the client's connection closed, or the
    /// origin's relay address is unknown.
    NoTransport,
}

impl fmt::Display for ShareFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read(e) => e.fmt(f),
            Self::NoCopy(i) => write!(f, "block {} has no copy on a live node", i.0),
            Self::NoTransport => {
                f.write_str("no transport to the client (connection closed or origin unknown)")
            }
        }
    }
}

/// Where a node's share stood when it stopped or ended.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShareReport {
    /// The first packet of its share it did not send (`None`: none left in the run's range).
    pub next: Option<Position>,
    /// The last packet it sent in this run, if any.
    pub last_sent: Option<Position>,
}

/// A control message between nodes.
// A run's tracks make starts a few hundred bytes: one per PLAY, no cost worth a box.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// First message on a control connection.
    Hello {
        /// The sender.
        node: NodeId,
        /// Its name.
        name: String,
        /// Changes every time the node process starts, so a restarted node is told apart.
        incarnation: u64,
    },
    /// Heartbeat and clock probe.
    Ping {
        /// Probe number.
        seq: u64,
        /// Unix ns on the sender's clock when sent.
        sent_unix_ns: u64,
        /// How far the sender's senders had got (Unix ns on its clock): every packet of its
        /// shares due before it had been handed out. A peer that loses the sender takes its
        /// part over from there ([`crate::ClusterConfig::progress_margin`]); `None` from a
        /// driver that does not report it (the takeover then starts a fixed margin before the
        /// sender's last sign of life).
        sent_through_unix_ns: Option<u64>,
    },
    /// Answer to [`Message::Ping`] (NTP's four timestamps, RFC 5905 §8).
    Pong {
        /// The ping's number.
        seq: u64,
        /// The ping's send time (sender's clock).
        ping_sent_unix_ns: u64,
        /// When the ping arrived (answerer's clock).
        received_unix_ns: u64,
        /// When this pong left (answerer's clock).
        sent_unix_ns: u64,
    },
    /// Admit a share (reserve its disks' bandwidth) until it starts or is closed.
    Reserve {
        /// The share.
        key: ShareKey,
        /// Which of the session's opens this is (the origin numbers them; 0: not numbered).
        /// A session reopened (a switch of rendition) reuses its key: the answer names the
        /// open it answers, so that a late answer to an earlier one is not taken for it.
        open: u32,
        /// The object.
        object: ObjectId,
        /// The placement epoch.
        epoch: Epoch,
        /// The object's mean rate.
        avg_bitrate: BitRate,
        /// Its peak rate.
        peak_bitrate: BitRate,
        /// Members the origin counts lost when it opened the session (K ≥ 2): the session is
        /// planned without them, every block sent by its first copy on a node not in `lost`
        /// (`docs/design/takeover.md`). Empty in a healthy cluster.
        lost: BTreeSet<NodeId>,
    },
    /// Answer to [`Message::Reserve`].
    Reserved {
        /// The share.
        key: ShareKey,
        /// The open it answers ([`Message::Reserve`]'s `open`).
        open: u32,
        /// `Ok`: reserved.
        result: Result<(), Refusal>,
    },
    /// Start a run (first play, seek, resume).
    Start {
        /// The share.
        key: ShareKey,
        /// The run number.
        run: RunId,
        /// What to do.
        spec: RunSpec,
    },
    /// Stop a run: now (`cutoff: None`), or after the last packet at or before `cutoff`.
    Stop {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The media time after which nothing is sent.
        cutoff: Option<MediaTime>,
        /// Nothing from this packet on is sent either (a switch of rendition stops just before
        /// a key frame, whose packets are sent before its presentation time).
        before: Option<Gsn>,
    },
    /// Answer to [`Message::Stop`], once stopped.
    Stopped {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: ShareReport,
    },
    /// Re-pin the session's clock (MTFC): packets at or after `anchor.media` are due at
    /// `anchor + (t − anchor.media) / pace`.
    Pace {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The new anchor.
        anchor: WallAnchor,
        /// The new pace.
        pace: Pace,
    },
    /// A share sent (or forwarded) its last packet of the run.
    Ended {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: ShareReport,
    },
    /// A share cannot go on (a block could not be read, the object is unknown there).
    Failed {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// Why.
        error: String,
    },
    /// From the session's origin to its other members: `node` is lost to run `run` (silent
    /// past `suspect_after`, or down); from media time `from` on, send the blocks whose first
    /// copy on a node not lost is yours. The origin's word makes the members' dead sets agree
    /// even where one of them still hears `node` (a partition), so that a lost node that speaks
    /// again can be told to stop (`docs/design/takeover.md`). Also to `node` itself, and from a
    /// member to a lost origin (`node` the origin): your part was taken over from `from`; if
    /// you only stood still, hold it back until the give-back point ([`Message::Rejoin`]).
    Lost {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The lost member.
        node: NodeId,
        /// The media time to take over from.
        from: MediaTime,
    },
    /// From the session's origin to its other members: `node`, lost to run `run`, speaks again
    /// and sends its own blocks; of those after the block holding media time `at`, send no more
    /// the ones you took over from it (`docs/design/takeover.md`, *A node that stood still*).
    /// To `node` itself: send your blocks after that one again. From an origin that stood
    /// still (`node` the origin), in answer to a member's `Lost`: the point it takes its own
    /// part back at.
    Rejoin {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// The member back.
        node: NodeId,
        /// The media time after whose block it sends its part alone again.
        at: MediaTime,
    },
    /// From a member to the session's origin, after it applied a takeover (the origin's
    /// [`Message::Lost`], or its own suspicion): where its share of run `run` stands now.
    /// `None`: it runs, its [`Message::Ended`] is to come (perhaps again: a share that had
    /// ended and gained blocks from the lost node goes on with them); `Some`: it ended, with
    /// this report. The origin waits for every member's word after a loss before it ends the
    /// run (`docs/design/takeover.md`, *A share that ended before the loss*).
    Status {
        /// The share.
        key: ShareKey,
        /// The run.
        run: RunId,
        /// Its end's report, if it ended.
        ended: Option<ShareReport>,
    },
    /// The session is over: release everything.
    Close {
        /// The share.
        key: ShareKey,
    },
}

impl Message {
    /// The message's name, for logs and metrics labels.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Hello { .. } => "hello",
            Self::Ping { .. } => "ping",
            Self::Pong { .. } => "pong",
            Self::Reserve { .. } => "reserve",
            Self::Reserved { .. } => "reserved",
            Self::Start { .. } => "start",
            Self::Stop { .. } => "stop",
            Self::Stopped { .. } => "stopped",
            Self::Pace { .. } => "pace",
            Self::Ended { .. } => "ended",
            Self::Failed { .. } => "failed",
            Self::Lost { .. } => "lost",
            Self::Rejoin { .. } => "rejoin",
            Self::Status { .. } => "status",
            Self::Close { .. } => "close",
        }
    }
}
