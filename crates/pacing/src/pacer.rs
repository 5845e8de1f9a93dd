//! The pacer: which packet of which stream is due when (sans-IO).
//!
//! Each RTP payload unit carries the send time derived from the file's PCR at ingest (RFC 2250 §2:
//! the RTP timestamp of MP2T is the target transmission time). A stream's clock is pinned to the
//! wall clock by an [`Anchor`]: the one the scheduler attaches to its first block after a start
//! (a single node), or the one the session's origin chose and gave with the start (a cluster,
//! where every node must send on one clock, Yima §2.2). Packet `p` is then due at
//! `anchor.wall + (p.send_time − anchor.media)`. The pacer keeps every playing stream in one heap
//! ordered by its next due time, so the sender thread asks "what is due now?" in O(log n) and
//! batches the answers of many streams into one `sendmmsg`.
//!
//! A stream can be paced faster or slower than its own timing (MTFC rate smoothing, Yima §2.5,
//! `docs/design/mtfc.md`: the client asks, the server only paces): at pace `r` packet `p`
//! is due at `anchor.wall + (p.send_time − anchor.media) / r`. A change of pace re-anchors at the
//! current packet (the next one to send, else the last one sent): the new anchor is that
//! packet's due time under the old pace, so the schedule stays continuous and, the division
//! being integer arithmetic on one span from one anchor, no rounding accumulates across changes.
//! In a cluster the origin chooses the new anchor instead, a little ahead, and every node applies
//! it from the first packet at or after its media time ([`Pacer::handle_reanchor`]). The pace
//! outlives seeks and pauses; the scheduler is told every anchor/pace pair ([`PacerEvent::Paced`])
//! so that it reads ahead on the same clock.
//!
//! **Rate pacing.** A VBR stream paced by its own send times leaves its bursts as bursts, only
//! sooner or later with a pace: MTFC's server sends at a *rate* the client steers instead, and
//! the bursts land in the client's buffer (Yima §2.5; `docs/design/mtfc.md`). A stream told its
//! object's mean byte rate ([`Pacer::handle_smooth`]) sends packet `p` when the bytes before it
//! have gone at that rate times its pace, on a byte clock started at its run's first packet and
//! drawn back toward the media clock ([`PacerConfig::smooth_settle`]: a stretch of the content
//! above the mean is followed over seconds, what is shorter is smoothed), never earlier than
//! [`PacerConfig::smooth_window`] before its own due time (the scheduler reads blocks on the
//! media clock, at least a cycle ahead) nor later than that after it (a player that does not
//! steer never falls further behind than that). Both bounds follow the media clock, so the due
//! times stay monotone and a bound that takes over sends at the content's own rate, never in a
//! burst. A pace change restarts the byte clock at the current packet's due time; a packet sent
//! late (its block was not there yet) restarts it at once, so a smoothed stream never catches
//! up in a burst either. Only a stream that sends every block has the bytes before a packet at
//! hand: a cluster share does not, and is not smoothed.
//!
//! **Shares.** In a cluster a stream may be this node's *share* of a session: only the blocks on
//! its own disks ([`StreamSetup::share`]), which arrive with gaps in their indices. The pacer sends
//! them in index order whatever order they arrive in, so the session's origin in relay delivery
//! can also pace blocks forwarded by other nodes alongside its own. A running share may gain
//! blocks ([`Pacer::handle_extend`]): a dead node's part taken over from the next live copy
//! (`docs/design/takeover.md`). Added blocks before the share's current block are overdue: they
//! go first, in index order, then the share resumes where it was; blocks it already sent are
//! never sent again. Until it is back on its clock the share sends at most
//! [`PacerConfig::catch_up`] times its own byte rate: every session of a lost node is taken over
//! at once, and their overdue parts sent in one burst overflow the survivors' links.
//!
//! **Stops.** [`Pacer::handle_stop`] stops a run now, or after its last packet at or before a
//! cutoff (a cluster pause, synchronised on every node by its media time); either way the run's
//! [`RunReport`] says where it stood: the first packet it did not send and the last it did.
//!
//! It also decides when a stream's RTCP goes out ([`RtcpMode`]): for a stream that sends every
//! packet, an SR + SDES right after the first packet of a start, then every `rtcp_interval`, and
//! SR + SDES + BYE after the last packet (RFC 3550 §6.1, §6.2, §6.6; ffmpeg ends only on BYE);
//! for the origin of a cluster session whose packets come from several nodes, SRs every
//! `rtcp_interval` from the anchor on a timer and the BYE when told; for other shares, none.
//!
//! **Tracks.** An object ingested from MP4 or Matroska holds the RTP payloads of several tracks
//! interleaved in send order (block format version 2). A stream then sends each track as its own
//! RTP stream (RFC 3550 §5.2): its own SSRC, sequence offset, timestamp offset and clock
//! ([`TrackStamp`]), and its own SRs with that track's counts; a packet of a track the client
//! did not set up is passed over. An MPEG-TS object is one track.
//!
//! **Trick play.** A run with a scale (RFC 2326 §12.34, `Scale: 2`) is paced that much faster
//! and sends only key frames: from each seek point's first packet to the end of that access
//! unit (its marker), on the seek point's track; every other packet is passed over. Its packets
//! are numbered one after the other from the run's start (the player sees no gap), and their RTP
//! timestamps are scaled around the run's start so that they advance at the wall clock's rate,
//! as a player that asked for the scale expects (its NPT is `Range` start + scale × elapsed).
//!
//! Not here: sockets, the clock, and how a packet is framed on the wire (the sender thread).
//! Sequence numbers and timestamps follow the contract of [`isochron_rtsp::server::rtp_seq`] and
//! [`isochron_rtsp::server::rtp_timestamp_at`]: both derive from what the packet stores (its
//! track's index, GSN for MPEG-TS; its timestamp, the send time for MPEG-TS), so a seek or a
//! resume needs no renumbering and RTP-Info can be computed before the first packet.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{
    BlockIndex, Gsn, Instant, MAX_TRACKS, MediaTime, Pace, RunId, StreamId, TrackSeqs,
};
use isochron_rtsp::server::{Position, rtp_seq, rtp_timestamp_at};
use isochron_sched::Anchor;
use isochron_store::block::Block;

/// Pacer settings.
#[derive(Clone, Copy, Debug)]
pub struct PacerConfig {
    /// Interval between a stream's sender reports.
    pub rtcp_interval: Duration,
    /// How long a stream that cannot take a packet (a full TCP queue) waits before it is asked
    /// again.
    pub retry_delay: Duration,
    /// How long after its last packet a stream's BYE goes out. ffmpeg stops reading at the
    /// first BYE even with RTP still queued on its other socket; the grace lets those arrive.
    pub bye_delay: Duration,
    /// A share (cluster) whose next packet is overdue by more than this is held for
    /// `hold_window` before it is sent, once per stretch of lateness: the node stood still so
    /// long that its peers may have taken its part over, and their word
    /// ([`Pacer::handle_withhold`]) is on its way. `None` (a single node): never held.
    pub hold_after: Option<Duration>,
    /// How long such a share is held when no word comes (a stall nobody acted on).
    pub hold_window: Duration,
    /// How long a withheld share waits for its release ([`Pacer::handle_release`]) before it
    /// takes its part back on its own word: a give-back point lost with a broken connection
    /// would otherwise leave a hole once the takers give the part back. It then passes over
    /// what fell due before it was told (the takers sent that: they give back only after a
    /// point the origin chooses later) and sends the rest, perhaps twice; duplicates are the
    /// lesser harm.
    pub release_wait: Duration,
    /// How fast a share catches up on blocks it took over that were overdue already
    /// ([`Pacer::handle_extend`]): from the takeover on, it sends at most `catch_up` times its
    /// own byte rate (that of its blocks, those taken over included) until its packets fall due
    /// on their own clock again. Sent all at once, every session's overdue part (about a second
    /// of the lost node's share, `docs/design/takeover.md`) met the survivors' links together,
    /// and their queues dropped what did not fit. At 1.25 a survivor sends a quarter more than
    /// it will send from then on, for as long as the overdue bytes take at that quarter; no
    /// packet leaves later than the first overdue one would have anyway.
    pub catch_up: Pace,
    /// How far a rate-paced stream's packets may be from their own due time, either way
    /// ([`Pacer::handle_smooth`]): earlier, the scheduler may not have read their block yet (it
    /// reads one cycle ahead at least); later, a player that does not steer the pace may run
    /// dry.
    pub smooth_window: Duration,
    /// How fast a rate-paced stream's byte clock is drawn back to its media clock: its rate is
    /// raised (lowered) by the time it is behind (ahead) over this. The object's mean rate is
    /// the whole object's, and a stretch of the content above it would otherwise leave the
    /// stream pinned at the window's late edge, paced by the content again; drawn back, it
    /// follows the content's rate over tens of seconds and smooths what is shorter.
    /// `None`: never.
    pub smooth_settle: Option<Duration>,
}

impl Default for PacerConfig {
    fn default() -> Self {
        Self {
            rtcp_interval: Duration::from_secs(5),
            retry_delay: Duration::from_millis(2),
            bye_delay: Duration::from_millis(500),
            hold_after: None,
            hold_window: Duration::from_millis(300),
            release_wait: Duration::from_secs(2),
            catch_up: Pace::from_ppm(1_250_000),
            smooth_window: Duration::from_millis(500),
            smooth_settle: Some(Duration::from_secs(5)),
        }
    }
}

/// One block of a cluster share: its index and its first packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShareBlock {
    /// The block's index in the object.
    pub index: BlockIndex,
    /// Its first packet.
    pub first: Position,
}

/// Which RTCP a stream sends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum RtcpMode {
    /// SRs after its own packets and a BYE after its last: the stream sends every packet.
    #[default]
    AfterPackets,
    /// SRs every interval from the anchor, whether or not it sent packets, and a BYE when told
    /// ([`Pacer::handle_bye`]): the origin of a session whose packets several nodes send.
    Timer,
    /// None: another node sends the session's RTCP.
    None,
}

/// How the packets of one track are stamped, and whether they are sent at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TrackStamp {
    /// Its RTP SSRC.
    pub ssrc: u32,
    /// Its RTP timestamp offset.
    pub rtp_ts_offset: u32,
    /// Its RTP clock rate (90 kHz for MP2T).
    pub clock_rate: u32,
    /// Its RTP payload type.
    pub payload_type: u8,
    /// The client set it up: packets of a track not set up are passed over.
    pub enabled: bool,
}

impl TrackStamp {
    /// The one MP2T track of an MPEG-TS object (payload type 33, 90 kHz).
    #[must_use]
    pub fn mp2t(ssrc: u32, rtp_ts_offset: u32) -> Self {
        Self { ssrc, rtp_ts_offset, clock_rate: 90_000, payload_type: 33, enabled: true }
    }
}

/// The sequence-number offset of each track for a run (seq = offset + the packet's `track_seq`).
pub type SeqOffsets = [u16; MAX_TRACKS];

/// Offsets for an object of one track.
#[must_use]
pub fn single_offset(seq_offset: u16) -> SeqOffsets {
    let mut o = [0; MAX_TRACKS];
    o[0] = seq_offset;
    o
}

/// What the pacer needs to know about a stream once, when its session is set up.
#[derive(Clone, Debug)]
pub struct StreamSetup {
    /// The stream.
    pub stream: StreamId,
    /// Its tracks, by index (one for MP2T).
    pub tracks: Vec<TrackStamp>,
    /// Each track's RTP sequence-number offset (changed by every run).
    pub seq_offsets: SeqOffsets,
    /// The object's last block: after it the stream ends.
    pub last_block: BlockIndex,
    /// A cluster share: the blocks this node sends, in index order. `None`: every block.
    pub share: Option<Arc<[ShareBlock]>>,
    /// Its RTCP.
    pub rtcp: RtcpMode,
    /// Whether packets carry this node's local sequence number (Yima's LSN).
    pub lsn: bool,
}

impl StreamSetup {
    /// A stream of an MPEG-TS object that sends every block with its own RTCP (a single node).
    #[must_use]
    pub fn whole(
        stream: StreamId,
        ssrc: u32,
        seq_offset: u16,
        rtp_ts_offset: u32,
        last_block: BlockIndex,
    ) -> Self {
        Self {
            stream,
            tracks: vec![TrackStamp::mp2t(ssrc, rtp_ts_offset)],
            seq_offsets: single_offset(seq_offset),
            last_block,
            share: None,
            rtcp: RtcpMode::AfterPackets,
            lsn: false,
        }
    }
}

/// A run to start: where, until when, numbered how, on which clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlayRun {
    /// The run number (matches the scheduler's).
    pub run: RunId,
    /// The first packet.
    pub start: Position,
    /// The block holding it.
    pub from: BlockIndex,
    /// The last media time to send, if the range had an end.
    pub end: Option<MediaTime>,
    /// Each track's RTP sequence-number offset in this run (seq = offset + `track_seq`, the
    /// GSN for MP2T).
    pub seq_offsets: SeqOffsets,
    /// The clock, when the session's origin pinned it; otherwise the scheduler's anchor on the
    /// first block pins it.
    pub anchor: Option<Anchor>,
    /// Trick play at this scale: key frames only, timestamps scaled (see the module docs); the
    /// stream's pace is set to the scale too.
    pub trick: Option<Pace>,
}

/// Something to put on the wire now.
#[derive(Debug)]
pub enum Transmit<B> {
    /// One RTP packet: the header fields and the payload's place in a block.
    Rtp {
        /// The stream.
        stream: StreamId,
        /// The track (0 for MP2T).
        track: u8,
        /// The track's RTP payload type.
        payload_type: u8,
        /// The block holding the payload.
        block: Arc<Block<B>>,
        /// The packet's index within the block.
        packet: usize,
        /// RTP sequence number.
        seq: u16,
        /// RTP timestamp.
        timestamp: u32,
        /// RTP marker bit (MP2T: a timestamp discontinuity, RFC 2250 §2; video: the last packet
        /// of an access unit).
        marker: bool,
        /// This node's local sequence number for the stream, when it stamps one.
        lsn: Option<u16>,
        /// The RTP sequence number of the block's last packet of this track (sent with the LSN).
        block_end: u16,
    },
    /// An RTCP compound packet of one track: SR + SDES, plus BYE when `bye`.
    Rtcp {
        /// The stream.
        stream: StreamId,
        /// The track.
        track: u8,
        /// The RTP timestamp of "now" on the track's clock.
        rtp_timestamp: u32,
        /// The track's packets sent so far.
        packets: u32,
        /// The track's payload octets sent so far.
        octets: u32,
        /// Append a BYE: the media has ended.
        bye: bool,
        /// The BYE's reason for leaving, when the stream could not go on (RFC 3550 §6.6).
        reason: Option<Arc<str>>,
    },
}

/// Where a run stood when it ended or stopped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunReport {
    /// The first packet of the stream's share that it did not send; `None` after the run's end.
    pub next: Option<Position>,
    /// The last packet it sent in the run; its `tracks` are each track's next packet *after*
    /// it (so the position after it is this one's with the next GSN).
    pub last_sent: Option<Position>,
}

impl RunReport {
    /// Where a resume continues: the next packet, else the one after the last sent, else `start`.
    #[must_use]
    pub fn resume_at(&self, start: Position) -> Position {
        self.next.unwrap_or_else(|| {
            self.last_sent.map_or(start, |p| Position { gsn: p.gsn.next(), ..p })
        })
    }
}

/// What a node asks of one stream's pacer: one variant per `Pacer::handle_*` a session's
/// decisions call (the node core emits them, the sender thread applies them to the pacer that
/// owns the stream). The blocks themselves come from the scheduler, not through here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StreamOp {
    /// Start a run ([`Pacer::handle_play`]).
    Play {
        /// The stream.
        stream: StreamId,
        /// The run.
        play: PlayRun,
    },
    /// Stop run `run` now or after its last packet at or before `cutoff`; where it stood is
    /// reported as [`PacerEvent::Stopped`] ([`Pacer::handle_stop`]).
    Stop {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The cutoff (a cluster's synchronised pause).
        cutoff: Option<MediaTime>,
        /// The first packet not to send, if the stop is just before one (a switch of
        /// rendition before a key frame).
        before: Option<Gsn>,
    },
    /// Re-pin run `run`'s clock (a cluster's pace change, [`Pacer::handle_reanchor`]).
    Reanchor {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The new anchor.
        anchor: Anchor,
        /// The new pace.
        pace: Pace,
    },
    /// Pace a stream at a new speed (MTFC, [`Pacer::handle_pace`]); the pacer reports the
    /// anchor it re-pinned as [`PacerEvent::Paced`].
    Pace {
        /// The stream.
        stream: StreamId,
        /// The pace asked for.
        pace: Pace,
    },
    /// Pace a stream by bytes at its object's mean rate, or by its packets' own times again
    /// ([`Pacer::handle_smooth`]).
    Smooth {
        /// The stream.
        stream: StreamId,
        /// The object's mean payload bytes a second at the nominal pace; `None`: its own times.
        rate: Option<u64>,
    },
    /// A running share gains blocks taken over from a lost node ([`Pacer::handle_extend`]).
    Extend {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks gained.
        blocks: Vec<ShareBlock>,
        /// How far the lost node had got: earlier packets of these blocks are not sent.
        from: MediaTime,
    },
    /// This node's part of a share was taken over from `from` while it was lost
    /// ([`Pacer::handle_withhold`]).
    Withhold {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The media time its part was taken over from.
        from: MediaTime,
        /// The blocks taken over (`None`: every block of the share).
        blocks: Option<Vec<BlockIndex>>,
        /// The give-back point, when known already.
        until: Option<MediaTime>,
    },
    /// The share's part is its own again after the block holding `at`
    /// ([`Pacer::handle_release`]).
    Release {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The give-back point.
        at: MediaTime,
    },
    /// Freeze or thaw a relayed session's feeder ([`Pacer::handle_freeze`]).
    Freeze {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Frozen (`true`) or thawed.
        frozen: bool,
    },
    /// A running share gives back blocks it had taken over, their node sending them whole:
    /// none of their packets is sent any more ([`Pacer::handle_pass_over`]).
    PassOver {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks given back.
        blocks: Vec<BlockIndex>,
    },
    /// The stream's last block is now known ([`Pacer::handle_last`]: a live feed ended).
    Last {
        /// The stream.
        stream: StreamId,
        /// Its last block.
        last: BlockIndex,
    },
    /// Send the session's BYE ([`Pacer::handle_bye`]).
    Bye {
        /// The stream.
        stream: StreamId,
        /// Why it ends, when it could not go on (the BYE's reason for leaving).
        reason: Option<Arc<str>>,
    },
    /// Forget a stream.
    Remove {
        /// The stream.
        stream: StreamId,
    },
}

impl StreamOp {
    /// The stream it concerns.
    #[must_use]
    pub fn stream(&self) -> StreamId {
        match self {
            Self::Play { stream, .. }
            | Self::Stop { stream, .. }
            | Self::Reanchor { stream, .. }
            | Self::Pace { stream, .. }
            | Self::Smooth { stream, .. }
            | Self::Extend { stream, .. }
            | Self::Withhold { stream, .. }
            | Self::Release { stream, .. }
            | Self::Freeze { stream, .. }
            | Self::PassOver { stream, .. }
            | Self::Last { stream, .. }
            | Self::Bye { stream, .. }
            | Self::Remove { stream } => *stream,
        }
    }
}

/// Notices for the rest of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacerEvent {
    /// Every packet of a block was sent: the scheduler may release it.
    BlockDone {
        /// The stream.
        stream: StreamId,
        /// The run the block was delivered for.
        run: RunId,
        /// The block.
        index: BlockIndex,
    },
    /// The stream sent its last packet (end of object, of its share, or of the PLAY range).
    Ended {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: RunReport,
    },
    /// The stream stopped ([`Pacer::handle_stop`]).
    Stopped {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: RunReport,
    },
    /// A stream's clock changed pace (or an anchored run started at a pace other than nominal):
    /// from now on its packet at media time `t` is due at
    /// `anchor.wall + pace.wall_span(t − anchor.media)`.
    Paced {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The new anchor.
        anchor: Anchor,
        /// The pace.
        pace: Pace,
    },
}

/// Upper bounds of [`PacerStats::lateness_buckets`], µs: 1 ms to 2 s.
pub const LATENESS_BUCKETS_US: [u64; 8] =
    [1_000, 5_000, 10_000, 50_000, 100_000, 500_000, 1_000_000, 2_000_000];

/// Counters, monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacerStats {
    /// RTP packets handed out.
    pub packets: u64,
    /// RTP payload bytes handed out.
    pub payload_bytes: u64,
    /// Times a playing stream was due but its next block was not in memory.
    pub underruns: u64,
    /// Sum over packets of how late they were handed out, in µs (for a mean).
    pub lateness_us_sum: u64,
    /// Largest lateness of a packet, in µs.
    pub lateness_us_max: u64,
    /// Packets by lateness: `[i]` counts those at most [`LATENESS_BUCKETS_US`]`[i]` late and
    /// more than the bucket below (the later ones are in `packets` only).
    pub lateness_buckets: [u64; LATENESS_BUCKETS_US.len()],
    /// Changes of a stream's pace (MTFC rate requests carried out).
    pub pace_changes: u64,
    /// Packets of streams whose transport held them back in this run (a TCP client that reads
    /// slower than the stream): their lateness is the client's doing and is not in the lateness
    /// counters above, which time what the sender was free to send.
    pub held_packets: u64,
    /// Withheld shares that sent what they held back because their release did not come within
    /// [`PacerConfig::release_wait`] (`docs/design/takeover.md`): each a lost give-back point.
    pub release_timeouts: u64,
}

impl PacerStats {
    /// Adds another pacer's counters to these (the largest lateness is the larger of the two).
    pub fn add(&mut self, o: &Self) {
        self.packets += o.packets;
        self.payload_bytes += o.payload_bytes;
        self.underruns += o.underruns;
        self.release_timeouts += o.release_timeouts;
        self.lateness_us_sum += o.lateness_us_sum;
        self.lateness_us_max = self.lateness_us_max.max(o.lateness_us_max);
        for (a, b) in self.lateness_buckets.iter_mut().zip(o.lateness_buckets) {
            *a += b;
        }
        self.pace_changes += o.pace_changes;
        self.held_packets += o.held_packets;
    }
}

/// One stream's progress, for the API ([`Pacer::progress`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StreamProgress {
    /// The stream.
    pub stream: StreamId,
    /// Whether it is sending (played and not paused or ended).
    pub playing: bool,
    /// Media time of the last packet sent, or of the run's start before its first packet.
    pub position: MediaTime,
    /// Its pace.
    pub pace: Pace,
    /// RTP packets sent since it was added (every run).
    pub packets: u64,
    /// RTP payload bytes sent since it was added.
    pub bytes: u64,
}

#[derive(Debug)]
struct Paced<B> {
    setup: StreamSetup,
    run: RunId,
    playing: bool,
    start: Position,
    /// The block holding the start packet.
    from: BlockIndex,
    end: Option<MediaTime>,
    /// A pending stop at this cutoff (`end` is at most the cutoff).
    stop_at: Option<MediaTime>,
    /// A stop just before this packet (see [`StreamOp::Stop`]).
    stop_before: Option<Gsn>,
    anchor: Option<Anchor>,
    pace: Pace,
    /// A re-anchoring the origin chose, applied from the first packet at or after its media time.
    pending: Option<(Anchor, Pace)>,
    /// The next block to send and where in it (the next packet); `None` once the run is done.
    next: Option<BlockIndex>,
    cursor: usize,
    /// Blocks delivered and not yet sent, by index.
    blocks: BTreeMap<BlockIndex, Arc<Block<B>>>,
    generation: u64,
    scheduled: bool,
    /// Packets and payload bytes sent since the stream was added: the API's counts.
    sent_packets: u64,
    sent_bytes: u64,
    /// The same per track: the SR's sender counts modulo 2^32 (RFC 3550 §6.4.1).
    track_packets: [u64; MAX_TRACKS],
    track_bytes: [u64; MAX_TRACKS],
    /// Each track's next packet (`track_seq`) in the run: from the run's start, moved past
    /// every packet this stream sent or passed over.
    next_tracks: TrackSeqs,
    /// The block whose per-track last sequence numbers `block_ends` holds (LSN streams).
    block_ends: Option<(BlockIndex, [u16; MAX_TRACKS])>,
    /// The run's trick-play scale, if any.
    trick: Option<Pace>,
    /// In trick play: the track of the key frame being sent (until its marker).
    in_key: Option<u8>,
    /// In trick play: the packets of each track sent in the run.
    trick_sent: [u32; MAX_TRACKS],
    next_sr: Option<Instant>,
    last_sent: Option<Position>,
    /// Its transport refused a packet in this run (a client reading slower than the stream):
    /// from then on its timing is the client's ([`PacerStats::held_packets`]).
    held: bool,
    lsn: u16,
    /// Blocks gained by a takeover that come before the block the share was at, in index order:
    /// sent before it resumes.
    catch_up: BTreeSet<BlockIndex>,
    /// Where the share resumes after `catch_up` (block, packet).
    resume: Option<(BlockIndex, usize)>,
    /// The clock of a catch-up in progress ([`PacerConfig::catch_up`]).
    catching_up: Option<CatchUp>,
    /// Blocks gained by a takeover that are sent from a media time inside them (the lost
    /// node had sent the packets before it): those packets are passed over.
    skip_before: BTreeMap<BlockIndex, MediaTime>,
    /// Blocks given back that are sent by their node again ([`Pacer::handle_pass_over`]):
    /// their packets are passed over, those delivered already too.
    passed_over: BTreeSet<BlockIndex>,
    /// Its part taken over by others from a media time on ([`Pacer::handle_withhold`]).
    withheld: Option<Withheld>,
    /// Held until then: its next packet was overdue past [`PacerConfig::hold_after`].
    hold_until: Option<Instant>,
    /// The hold of this stretch of lateness was used (cleared by a packet sent in time).
    hold_used: bool,
    /// Frozen ([`Pacer::handle_freeze`]): a relayed session's feeder whose origin is silent.
    frozen: bool,
    /// Rate pacing ([`Pacer::handle_smooth`]).
    smooth: Option<Smooth>,
    /// The run sent its last packet ([`PacerEvent::Ended`]); blocks taken over later revive
    /// it ([`Pacer::handle_extend`]).
    ended: bool,
}

/// The mean media time between two consecutive blocks of `share` from block `from` on (up to
/// 64 of them), or over the whole share when fewer than two are left: how much media one of
/// its blocks stands for. `None` for a share of fewer than two blocks.
fn block_spacing(share: &[ShareBlock], from: BlockIndex) -> Option<Duration> {
    let spacing = |blocks: &[ShareBlock]| {
        let (first, last) = (blocks.first()?, blocks.last()?);
        let gaps = u32::try_from(blocks.len().checked_sub(1).filter(|&n| n > 0)?).ok()?;
        Some(last.first.time.saturating_duration_since(first.first.time) / gaps)
    };
    let at = share.partition_point(|b| b.index < from);
    spacing(&share[at..share.len().min(at + 64)]).or_else(|| spacing(share))
}

/// A takeover's catch-up in progress: from `wall` on the share sends at most `rate` payload
/// bytes a second, its packets due no sooner than `wall + bytes / rate`, until they fall due on
/// their own clock.
#[derive(Clone, Copy, Debug)]
struct CatchUp {
    wall: Instant,
    /// Payload bytes sent since `wall`.
    bytes: u64,
    /// The mean media time between two of the share's blocks from where it resumes on.
    spacing: Duration,
    /// Bytes a second, once a block of the share is at hand to measure (`spacing` and the
    /// block's payload bytes, times [`PacerConfig::catch_up`]).
    rate: Option<u64>,
    pace: Pace,
}

impl CatchUp {
    /// When the next packet may go, given `block` (the one it is in) to measure the rate by.
    fn not_before<B: AsRef<[u8]>>(&mut self, block: &Block<B>) -> Instant {
        let rate = *self.rate.get_or_insert_with(|| {
            let bytes: u64 =
                (0..block.packet_count()).map(|i| block.packet(i).payload.len() as u64).sum();
            // bytes per `spacing` of media, sent `pace` times faster: bytes × pace / spacing.
            let per_s = bytes as f64 / self.spacing.as_secs_f64().max(1e-6) * self.pace.as_f64();
            (per_s as u64).max(1)
        });
        let ns = u128::from(self.bytes) * 1_000_000_000 / u128::from(rate);
        self.wall + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// A rate-paced stream's byte clock ([`Pacer::handle_smooth`]).
#[derive(Clone, Copy, Debug)]
struct Smooth {
    /// Payload bytes a second at the nominal pace.
    rate: u64,
    /// How far from the media clock a packet may go, either way.
    window: Duration,
    /// How fast the byte clock is drawn back to the media clock ([`PacerConfig::smooth_settle`]).
    settle: Option<Duration>,
    /// When the next packet is due on the byte clock; `None` until the run's first packet is at
    /// hand.
    next: Option<Instant>,
}

impl Smooth {
    /// The byte clock after a packet of `len` bytes due at `at` on it, whose own due time is
    /// `own`, at `pace`: the next one is due when those bytes have gone at the rate, sped up
    /// (slowed down) by a `settle`-th of how far the byte clock is behind (ahead of) the media
    /// clock, within half to twice the rate.
    fn after(&self, at: Instant, len: u64, own: Instant, pace: Pace) -> Instant {
        let behind = (i128::from(at.as_nanos()) - i128::from(own.as_nanos())) as f64 / 1e9;
        let factor = self.settle.map_or(1.0, |t| 1.0 + behind / t.as_secs_f64().max(1e-3));
        // Bytes a second × 10¹²: the rate, the pace and the factor each in parts per million.
        let factor_ppm = (factor.clamp(0.5, 2.0) * 1e6).round() as u128;
        let per = u128::from(self.rate) * u128::from(pace.ppm()) * factor_ppm;
        let ns = u128::from(len) * 1_000_000_000_000_000_000_000 / per.max(1);
        at + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// A packet sent later than this after its due time restarts a rate-paced stream's byte clock:
/// what it missed is not made up in a burst.
const SMOOTH_SLACK: Duration = Duration::from_millis(20);

/// A share's part taken over by other nodes while this one was lost
/// ([`Pacer::handle_withhold`]).
#[derive(Clone, Debug)]
struct Withheld {
    /// Its packets from this media time on are not its own.
    from: MediaTime,
    /// Of these blocks (`None`: all).
    blocks: Option<BTreeSet<BlockIndex>>,
    /// Released ([`Pacer::handle_release`]): its blocks whose first packet is after this media
    /// time are its own again; `None`: not yet, the stream waits.
    until: Option<MediaTime>,
    /// Until then at most ([`PacerConfig::release_wait`]).
    wait_until: Instant,
    /// The media time due when it was told: released there if `wait_until` passes.
    told_at: MediaTime,
    /// Blocks it sends whatever the above says ([`Pacer::handle_extend`]): taken over from a
    /// node lost since, or its own again, the node that took them over lost in turn.
    exempt: BTreeSet<BlockIndex>,
}

impl Withheld {
    /// Whether the packet at `time`, in a block whose first packet is at `first`, is someone
    /// else's to send (passed over), and whether the stream must wait for a release before it.
    fn verdict(&self, index: BlockIndex, time: MediaTime, first: MediaTime) -> Verdict {
        match self.until {
            _ if time < self.from => Verdict::Send,
            _ if self.blocks.as_ref().is_some_and(|b| !b.contains(&index)) => Verdict::Send,
            _ if self.exempt.contains(&index) => Verdict::Send,
            None => Verdict::Wait,
            Some(until) if first <= until => Verdict::PassOver,
            Some(_) => Verdict::Send,
        }
    }

    /// Whether the block `index`, whose first packet is at `first`, is withheld from `from` on.
    fn withholds(&self, index: BlockIndex, first: MediaTime) -> bool {
        self.verdict(index, first.max(self.from), first) != Verdict::Send
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Send,
    PassOver,
    Wait,
}

/// The pacing core, generic over the block buffer type.
#[derive(Debug)]
pub struct Pacer<B> {
    config: PacerConfig,
    streams: HashMap<StreamId, Paced<B>>,
    heap: BinaryHeap<Reverse<(Instant, u64, StreamId)>>,
    /// Timers: timed SRs and cutoff stops, by due time (entries stale once the stream moved on).
    timers: BinaryHeap<Reverse<(Instant, StreamId, Timer)>>,
    pending: VecDeque<Transmit<B>>,
    /// BYEs waiting for their grace period, in due order.
    byes: VecDeque<(Instant, Transmit<B>)>,
    events: VecDeque<PacerEvent>,
    stats: PacerStats,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Timer {
    /// A timed SR of run `.0`.
    Sr(RunId),
    /// The cutoff stop of run `.0`.
    Stop(RunId),
}

impl<B: AsRef<[u8]>> Pacer<B> {
    /// An empty pacer.
    #[must_use]
    pub fn new(config: PacerConfig) -> Self {
        Self {
            config,
            streams: HashMap::new(),
            heap: BinaryHeap::new(),
            timers: BinaryHeap::new(),
            pending: VecDeque::new(),
            byes: VecDeque::new(),
            events: VecDeque::new(),
            stats: PacerStats::default(),
        }
    }

    /// Registers a stream (idle until [`Self::handle_play`]).
    pub fn handle_add(&mut self, setup: StreamSetup) {
        let stream = setup.stream;
        self.streams.insert(
            stream,
            Paced {
                setup,
                run: RunId(0),
                playing: false,
                start: Position::at(Gsn(0), MediaTime::ZERO),
                from: BlockIndex(0),
                end: None,
                stop_at: None,
                stop_before: None,
                anchor: None,
                pace: Pace::NOMINAL,
                pending: None,
                next: None,
                cursor: 0,
                blocks: BTreeMap::new(),
                generation: 0,
                scheduled: false,
                sent_packets: 0,
                sent_bytes: 0,
                track_packets: [0; MAX_TRACKS],
                track_bytes: [0; MAX_TRACKS],
                next_tracks: TrackSeqs::NONE,
                block_ends: None,
                trick: None,
                in_key: None,
                trick_sent: [0; MAX_TRACKS],
                next_sr: None,
                last_sent: None,
                held: false,
                lsn: 0,
                catch_up: BTreeSet::new(),
                catching_up: None,
                resume: None,
                skip_before: BTreeMap::new(),
                passed_over: BTreeSet::new(),
                withheld: None,
                hold_until: None,
                hold_used: false,
                frozen: false,
                smooth: None,
                ended: false,
            },
        );
    }

    /// A running share gives back `blocks` it had taken over, and their node sends them whole
    /// (`docs/design/takeover.md`): none of their packets is sent from now on, not even those
    /// of a block already read and delivered (the scheduler's lookahead) or being sent. They
    /// still pass through in order, so that the scheduler is told each is done. Returns
    /// `false` for an unknown stream or another run.
    pub fn handle_pass_over(
        &mut self,
        stream: StreamId,
        run: RunId,
        blocks: &[BlockIndex],
    ) -> bool {
        let Some(s) = self.streams.get_mut(&stream).filter(|s| s.run == run) else {
            return false;
        };
        s.passed_over.extend(blocks.iter().copied());
        true
    }

    /// This node was lost to the share's session and others took its part over from media
    /// time `from` (`docs/design/takeover.md`, *A node that stood still*): the packets of
    /// `blocks` (`None`: every block) from there on, those overdue from a stall included, are
    /// not sent. Until the give-back point is known (`until`, else [`Self::handle_release`])
    /// the stream waits at the first of them; then those of blocks whose first packet is at or
    /// before it are passed over (the others send them) and the rest are sent. Earlier
    /// packets and other blocks are still its own. Replaces an earlier withhold, but for the
    /// blocks exempt from it ([`Self::handle_extend`]), which stay exempt. A word for
    /// every block ends a hold; a word for some (one taker's: the others' may be on its way)
    /// does not: the hold runs out its window before the other blocks' overdue packets go.
    /// Returns `false` for an unknown stream, another run, or a stream that is not playing.
    pub fn handle_withhold(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        from: MediaTime,
        blocks: Option<&[BlockIndex]>,
        until: Option<MediaTime>,
    ) -> bool {
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        if s.run != run || !s.playing {
            return false;
        }
        let blocks: Option<BTreeSet<BlockIndex>> = blocks.map(|b| b.iter().copied().collect());
        let wait_until = now + self.config.release_wait;
        let told_at = s
            .anchor
            .map_or(from, |a| a.media + s.pace.media_span(now.saturating_duration_since(a.wall)));
        let whole = blocks.is_none();
        // A word said again (a taker that resumed says it once more) must not withhold what
        // the share gained or took back since: those stay exempt.
        let exempt = s.withheld.take().map(|w| w.exempt).unwrap_or_default();
        s.withheld = Some(Withheld { from, blocks, until, wait_until, told_at, exempt });
        if whole {
            // The whole word came: no hold for this stretch of lateness.
            s.hold_until = None;
            s.hold_used = true;
        }
        s.generation += 1;
        s.scheduled = false;
        Self::schedule(&mut self.heap, s, &mut self.stats);
        true
    }

    /// Freezes (`frozen`) or thaws a share of run `run`: a frozen share sends nothing, its
    /// blocks kept; thawed, it goes on on its clock (`docs/design/takeover.md`, *A relaying
    /// origin that stood still*: the feeders of a relayed session wait for their silent origin,
    /// which re-pins the session's clock, [`Self::handle_reanchor`], before they thaw). A
    /// frozen share does not hold back [`Self::sent_through`]. Returns `false` for an unknown
    /// stream or another run.
    pub fn handle_freeze(&mut self, stream: StreamId, run: RunId, frozen: bool) -> bool {
        let Some(s) = self.streams.get_mut(&stream).filter(|s| s.run == run) else {
            return false;
        };
        if s.frozen == frozen {
            return true;
        }
        s.frozen = frozen;
        s.generation += 1;
        s.scheduled = false;
        if !frozen && s.playing {
            Self::schedule(&mut self.heap, s, &mut self.stats);
        }
        true
    }

    /// The share's part is its own again after the block holding media time `at` (the origin's
    /// give-back point, the same for the nodes that took it over): of the packets withheld,
    /// those of blocks whose first packet is at or before `at` are passed over (the others
    /// send them), and the rest are sent, the overdue ones at once. Returns `false` for an
    /// unknown stream, another run, or a stream not withheld.
    pub fn handle_release(&mut self, stream: StreamId, run: RunId, at: MediaTime) -> bool {
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        let Some(w) = s.withheld.as_mut().filter(|_| s.run == run && s.playing) else {
            return false;
        };
        w.until = Some(at);
        if w.blocks.is_none() {
            s.hold_until = None;
            s.hold_used = true;
        }
        s.generation += 1;
        s.scheduled = false;
        Self::schedule(&mut self.heap, s, &mut self.stats);
        true
    }

    /// A running share gains `added` (blocks another node was sending, taken over): they are
    /// sent in index order with its own, from the run's first block on; added blocks before the
    /// share's current one are sent first (they are overdue), then it resumes where it was.
    /// Packets before `from` (how far the other node had got) are passed over: the block that
    /// holds `from` is sent from there, not from its start. Blocks the share already has are
    /// ignored, and nothing already sent is sent again, except its own blocks withheld for a
    /// node that took them over ([`Self::handle_withhold`]) and was lost before the give-back
    /// point: those are its own again, and the packets it passed over of them, from `from`
    /// on, are sent like overdue ones (a block it passed over already comes again from the
    /// scheduler). The overdue packets are not sent at once but at [`PacerConfig::catch_up`]
    /// from `now`. A share whose run ended goes on with what it gains, or, gaining nothing,
    /// reports its end again ([`PacerEvent::Ended`]). Returns `false` (nothing changed) for an
    /// unknown stream, another run, a stream that is not a share, or a run that is over.
    pub fn handle_extend(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        added: &[ShareBlock],
        from: MediaTime,
    ) -> bool {
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        let pace = self.config.catch_up;
        if s.ended && s.run == run {
            if Self::revive(&mut self.heap, &mut self.stats, s, added, from, now, pace) {
                return true;
            }
            // Nothing it had not sent (the lost node's blocks after `from` were its own or
            // taken before): its end stands, said again, as its node may have told the origin
            // to wait for a revival.
            let report = RunReport { next: None, last_sent: s.last_sent };
            self.events.push_back(PacerEvent::Ended { stream, run, report });
            return false;
        }
        let Some(next) = s.next.filter(|_| s.playing && s.run == run) else { return false };
        let Some(share) = s.setup.share.as_ref() else { return false };
        let have: BTreeSet<BlockIndex> = share.iter().map(|b| b.index).collect();
        let mut merged: BTreeMap<BlockIndex, ShareBlock> =
            share.iter().map(|b| (b.index, *b)).collect();
        // Where the share's own walk stands: the block it resumes at after catching up.
        let walk = s.resume.map_or(next, |(r, _)| r);
        let mut behind = BTreeSet::new();
        let mut restarted = false;
        let start = s.from;
        for b in added.iter().filter(|b| b.index >= start) {
            let own = have.contains(&b.index);
            if !Self::gain(s, b, own, from) {
                continue;
            }
            if own {
                // The block its walk stands in, passed over in part: again from its start,
                // what was sent skipped.
                match s.resume.as_mut() {
                    Some((r, c)) if *r == b.index => *c = 0,
                    None if b.index == walk && s.cursor > 0 => {
                        s.cursor = 0;
                        restarted = true;
                    }
                    _ => {}
                }
            } else {
                merged.insert(b.index, *b);
            }
            if b.index < walk {
                behind.insert(b.index);
            }
        }
        s.setup.share = Some(merged.into_values().collect());
        if behind.is_empty() {
            if restarted {
                s.generation += 1;
                s.scheduled = false;
                Self::schedule(&mut self.heap, s, &mut self.stats);
            }
            return true;
        }
        s.catch_up.extend(behind);
        if s.resume.is_none() {
            // Interrupt the current block (perhaps begun): the overdue blocks go first.
            s.resume = Some((next, s.cursor));
        } else if s.cursor == 0 {
            // Catching up already, between two blocks: take the lowest again.
            s.catch_up.insert(next);
        } else {
            // In the middle of an overdue block: finish it, the new ones follow.
            return true;
        }
        s.next = s.catch_up.pop_first();
        s.cursor = 0;
        s.catching_up = Self::catch_up_from(s, walk, now, pace);
        s.generation += 1;
        s.scheduled = false;
        Self::schedule(&mut self.heap, s, &mut self.stats);
        true
    }

    /// The catch-up of a share that resumes its walk at `walk`, from `now`: paced by the media
    /// its blocks from there on stand for. `None` (sent at once) if fewer than two are left.
    fn catch_up_from(s: &Paced<B>, walk: BlockIndex, now: Instant, pace: Pace) -> Option<CatchUp> {
        let share = s.setup.share.as_deref()?;
        let spacing = block_spacing(share, walk).filter(|d| !d.is_zero())?;
        Some(CatchUp { wall: now, bytes: 0, spacing, rate: None, pace })
    }

    /// Whether the share takes block `b` of a takeover (`own`: already in its list): one
    /// another node sent (not `own`), or its own withheld for a taker lost since; an own block
    /// not withheld it sent itself, and keeps as it is. A block taken is exempt from the
    /// withhold (not the part this node was told it was lost for) and sent from `from` on, an
    /// own one from the withhold's start too (it sent what came before itself).
    fn gain(s: &mut Paced<B>, b: &ShareBlock, own: bool, from: MediaTime) -> bool {
        let mut since = from;
        if own {
            let Some(w) = s.withheld.as_ref().filter(|w| w.withholds(b.index, b.first.time)) else {
                return false;
            };
            since = since.max(w.from);
        }
        if let Some(w) = s.withheld.as_mut() {
            w.exempt.insert(b.index);
        }
        if b.first.time < since {
            s.skip_before.insert(b.index, since);
        }
        true
    }

    /// A share whose run ended gains blocks taken over from a node lost after that (its own
    /// last block came before the lost node's): the run goes on with them, from the first, on
    /// its clock; its own blocks were all sent, and are not sent again. `false` when none of
    /// `added` is at or after the run's first block.
    fn revive(
        heap: &mut BinaryHeap<Reverse<(Instant, u64, StreamId)>>,
        stats: &mut PacerStats,
        s: &mut Paced<B>,
        added: &[ShareBlock],
        from: MediaTime,
        now: Instant,
        pace: Pace,
    ) -> bool {
        let Some(share) = s.setup.share.as_ref() else { return false };
        let have: BTreeSet<BlockIndex> = share.iter().map(|b| b.index).collect();
        let mut gained: BTreeMap<BlockIndex, ShareBlock> = BTreeMap::new();
        let start = s.from;
        for b in added.iter().filter(|b| b.index >= start) {
            if Self::gain(s, b, have.contains(&b.index), from) {
                gained.insert(b.index, *b);
            }
        }
        let Some(first) = gained.keys().next().copied() else { return false };
        let Some(share) = s.setup.share.as_ref() else { return false };
        let mut list: Vec<ShareBlock> = share.iter().filter(|b| b.index < first).copied().collect();
        list.extend(gained.values());
        s.setup.share = Some(list.into());
        s.ended = false;
        s.playing = true;
        s.next = Some(first);
        s.cursor = 0;
        s.catch_up.clear();
        s.resume = None;
        s.catching_up = Self::catch_up_from(s, first, now, pace);
        s.generation += 1;
        s.scheduled = false;
        Self::schedule(heap, s, stats);
        true
    }

    /// A running share gives back `blocks` it had taken over (their node is back, and the
    /// scheduler will not deliver them: `CycleEvent::GivenBack`): they leave its list. The
    /// block being sent, the one it resumes at and those it holds or must catch up on stay
    /// (the scheduler gives back only blocks its walk has not reached). Returns `false` for an
    /// unknown stream, another run, or a stream that is not a share.
    pub fn handle_give_back(
        &mut self,
        stream: StreamId,
        run: RunId,
        blocks: &[BlockIndex],
    ) -> bool {
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        if s.run != run {
            return false;
        }
        let Some(share) = s.setup.share.as_ref() else { return false };
        let keep = |i: BlockIndex| {
            s.next == Some(i)
                || s.resume.is_some_and(|(r, _)| r == i)
                || s.blocks.contains_key(&i)
                || s.catch_up.contains(&i)
        };
        let gone: BTreeSet<BlockIndex> = blocks.iter().copied().filter(|i| !keep(*i)).collect();
        let left: Vec<ShareBlock> =
            share.iter().copied().filter(|b| !gone.contains(&b.index)).collect();
        s.setup.share = Some(left.into());
        true
    }

    /// Starts a run of a stream (a seek, resume or first play), numbering each track's packets
    /// `seq_offset + track_seq` from now on; blocks of earlier runs still in flight are ignored
    /// when they arrive. A share with nothing to send in the run ends at once.
    pub fn handle_play(&mut self, now: Instant, stream: StreamId, play: PlayRun) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.setup.seq_offsets = play.seq_offsets;
        s.next_tracks = play.start.tracks;
        s.block_ends = None;
        s.trick = play.trick;
        s.in_key = None;
        s.trick_sent = [0; MAX_TRACKS];
        if let Some(scale) = play.trick {
            s.pace = scale;
        }
        s.run = play.run;
        s.playing = true;
        s.ended = false;
        if let Some(sm) = s.smooth.as_mut() {
            // The run's first packet starts the byte clock again.
            sm.next = None;
        }
        s.start = play.start;
        s.from = play.from;
        s.end = play.end;
        s.stop_at = None;
        s.stop_before = None;
        s.anchor = play.anchor;
        s.pending = None;
        s.blocks.clear();
        s.catch_up.clear();
        s.resume = None;
        s.catching_up = None;
        s.skip_before.clear();
        s.passed_over.clear();
        s.withheld = None;
        s.hold_until = None;
        s.hold_used = false;
        s.next = first_block(&s.setup, play.from);
        s.cursor = 0;
        s.generation += 1;
        s.scheduled = false;
        s.next_sr = None;
        s.last_sent = None;
        s.held = false;
        if let (Some(a), RtcpMode::Timer) = (play.anchor, s.setup.rtcp) {
            s.next_sr = Some(a.wall);
            self.timers.push(Reverse((a.wall, stream, Timer::Sr(play.run))));
        }
        if let (Some(a), true) = (play.anchor, s.pace != Pace::NOMINAL) {
            self.events.push_back(PacerEvent::Paced {
                stream,
                run: play.run,
                anchor: a,
                pace: s.pace,
            });
        }
        if s.next.is_none() {
            self.finish(now, stream, false);
        }
    }

    /// A block for a stream, from the scheduler (or, relayed, from another node). Blocks may
    /// arrive in any order; they are sent in index order.
    pub fn handle_block(
        &mut self,
        stream: StreamId,
        run: RunId,
        index: BlockIndex,
        block: Arc<Block<B>>,
        anchor: Option<Anchor>,
    ) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let wanted = s.next.is_some_and(|n| index >= n)
            || s.catch_up.contains(&index)
            || s.resume.is_some_and(|(r, _)| index >= r);
        if !s.playing || s.run != run || !wanted {
            return;
        }
        if let Some(a) = anchor
            && s.anchor.is_none()
        {
            s.anchor = Some(a);
            if s.pace != Pace::NOMINAL {
                let (run, pace) = (s.run, s.pace);
                self.events.push_back(PacerEvent::Paced { stream, run, anchor: a, pace });
            }
        }
        if s.next == Some(index) && !s.blocks.contains_key(&index) {
            // The block to send next: begin at the start packet if it holds it.
            s.cursor = if index == s.from { block.find_gsn(s.start.gsn).unwrap_or(0) } else { 0 };
        }
        s.blocks.insert(index, block);
        if !s.scheduled {
            Self::schedule(&mut self.heap, s, &mut self.stats);
        }
    }

    /// Stops a stream's run `run`: now (`cutoff: None`), returning where it stood, or after its
    /// last packet at or before `cutoff`, reported by [`PacerEvent::Stopped`] when that time has
    /// come (at once, as the return value, if the stream's clock is not pinned yet). `None` for
    /// an unknown stream or another run.
    pub fn handle_stop(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        cutoff: Option<MediaTime>,
        before: Option<Gsn>,
    ) -> Option<RunReport> {
        let s = self.streams.get_mut(&stream)?;
        if s.run != run {
            return None;
        }
        s.stop_before = before;
        if !s.playing {
            return Some(RunReport { next: None, last_sent: s.last_sent });
        }
        match (cutoff, s.anchor) {
            (Some(c), Some(_)) => {
                s.end = Some(s.end.map_or(c, |e| e.min(c)));
                s.stop_at = Some(c);
                // Just after the cutoff's own due time: a packet due then still goes.
                let due = (Self::due(s, c) + Duration::from_micros(1)).max(now);
                self.timers.push(Reverse((due, stream, Timer::Stop(run))));
                None
            }
            _ => Some(self.stop_now(stream)),
        }
    }

    /// Paces a stream at `pace` from now on (MTFC). Returns the pace in force, or `None` for an
    /// unknown stream. A playing, anchored stream is re-anchored at its current packet (see the
    /// module docs) and the scheduler is told with [`PacerEvent::Paced`].
    pub fn handle_pace(&mut self, stream: StreamId, pace: Pace) -> Option<Pace> {
        let s = self.streams.get_mut(&stream)?;
        if s.pace == pace {
            return Some(pace);
        }
        self.stats.pace_changes += 1;
        if let (true, Some(old)) = (s.playing, s.anchor) {
            // The current packet: the next to send, else the last sent, else the anchor's own.
            let next = s
                .next
                .and_then(|n| s.blocks.get(&n))
                .filter(|b| s.cursor < b.packet_count())
                .map(|b| b.packet(s.cursor).send_time);
            let media = next.or_else(|| s.last_sent.map(|p| p.time)).unwrap_or(old.media);
            let wall = old.wall + s.pace.wall_span(media.saturating_duration_since(old.media));
            let anchor = Anchor { wall, media };
            // The byte clock goes on from the current packet's due time at the new rate.
            let at = Self::send_due(s, media);
            if let Some(sm) = s.smooth.as_mut().filter(|sm| sm.next.is_some()) {
                sm.next = Some(at);
            }
            s.anchor = Some(anchor);
            s.pace = pace;
            s.pending = None;
            let run = s.run;
            self.events.push_back(PacerEvent::Paced { stream, run, anchor, pace });
            if s.scheduled {
                // The heap entry holds the old due time: replace it (a new generation).
                Self::schedule(&mut self.heap, s, &mut self.stats);
            }
        } else {
            s.pace = pace;
        }
        Some(pace)
    }

    /// Paces `stream` by bytes at `rate` (its object's mean payload bytes a second; `None`: by
    /// its packets' own times again): from its current packet on, each packet is due when the
    /// bytes before it have gone at `rate` times its pace, within
    /// [`PacerConfig::smooth_window`] of its own due time (module docs, *Rate pacing*). Returns
    /// whether the stream is now rate-paced: `false` for an unknown stream, a cluster share
    /// (which does not have the bytes before its packets) or a zero rate.
    pub fn handle_smooth(&mut self, stream: StreamId, rate: Option<u64>) -> bool {
        let (window, settle) = (self.config.smooth_window, self.config.smooth_settle);
        let Some(s) = self.streams.get_mut(&stream) else { return false };
        let rate = rate.filter(|&r| r > 0 && s.setup.share.is_none());
        match (rate, s.smooth.as_mut()) {
            (None, _) => s.smooth = None,
            (Some(r), Some(sm)) => sm.rate = r,
            (Some(r), None) => {
                // The byte clock starts at the next packet's due time.
                let at = Self::next_position(s).filter(|_| s.playing && s.anchor.is_some());
                let next = at.map(|p| Self::due(s, p.time));
                s.smooth = Some(Smooth { rate: r, window, settle, next });
            }
        }
        if s.scheduled {
            Self::schedule(&mut self.heap, s, &mut self.stats);
        }
        s.smooth.is_some()
    }

    /// Re-pins run `run`'s clock at `anchor` with `pace` (a cluster's pace change, chosen by the
    /// session's origin so that every node changes at the same packet): packets at or after
    /// `anchor.media` are due at `anchor.wall + pace.wall_span(t − anchor.media)`, earlier ones
    /// keep the clock they had. The scheduler is told at once, to read ahead on the new clock.
    pub fn handle_reanchor(&mut self, stream: StreamId, run: RunId, anchor: Anchor, pace: Pace) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if s.run != run {
            return;
        }
        if s.pace != pace {
            self.stats.pace_changes += 1;
        }
        if let Some(sm) = s.smooth.as_mut() {
            sm.next = None;
        }
        if s.anchor.is_none() || s.last_sent.is_none_or(|l| l.time >= anchor.media) {
            s.anchor = Some(anchor);
            s.pace = pace;
            s.pending = None;
            // Lateness on the old clock is no reason to wait on the new one (a relaying
            // origin re-pins its session's clock after a stall).
            s.hold_until = None;
        } else {
            s.pending = Some((anchor, pace));
        }
        self.events.push_back(PacerEvent::Paced { stream, run, anchor, pace });
        if s.scheduled {
            Self::schedule(&mut self.heap, s, &mut self.stats);
        }
    }

    /// A stream added with no known end (a viewer of a live feed, whose blocks are the feed's
    /// chunks) learns its last block: its run ends after that block's last packet, with the
    /// BYE of its RTCP mode, however far behind it plays; at once if it has sent it already.
    pub fn handle_last(&mut self, now: Instant, stream: StreamId, last: BlockIndex) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.setup.last_block = last;
        if s.playing && s.next.is_some_and(|n| n > last) {
            self.finish(now, stream, false);
        }
    }

    /// Sends the session's BYE (after the grace period) and stops its timed SRs: a
    /// [`RtcpMode::Timer`] stream whose session every node has finished, or a stream that cannot
    /// go on, with the `reason`.
    pub fn handle_bye(&mut self, now: Instant, stream: StreamId, reason: Option<Arc<str>>) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.next_sr = None;
        let due = now + self.config.bye_delay;
        for bye in Self::rtcp(s, due, true, reason) {
            self.byes.push_back((due, bye));
        }
    }

    /// A stream's pace (nominal unless changed by [`Self::handle_pace`]).
    #[must_use]
    pub fn pace(&self, stream: StreamId) -> Option<Pace> {
        self.streams.get(&stream).map(|s| s.pace)
    }

    /// Forgets a stream (its pending BYE, if any, is dropped).
    pub fn handle_remove(&mut self, stream: StreamId) {
        self.streams.remove(&stream);
        self.byes.retain(|(_, t)| !matches!(t, Transmit::Rtcp { stream: s, .. } if *s == stream));
    }

    /// Applies one of the node's [`StreamOp`]s: the `handle_*` it names. A stop that takes
    /// effect at once is reported as [`PacerEvent::Stopped`] like one at a cutoff.
    pub fn handle_op(&mut self, now: Instant, op: StreamOp) {
        match op {
            StreamOp::Play { stream, play } => self.handle_play(now, stream, play),
            StreamOp::Stop { stream, run, cutoff, before } => {
                if let Some(report) = self.handle_stop(now, stream, run, cutoff, before) {
                    self.events.push_back(PacerEvent::Stopped { stream, run, report });
                }
            }
            StreamOp::Reanchor { stream, run, anchor, pace } => {
                self.handle_reanchor(stream, run, anchor, pace);
            }
            StreamOp::Pace { stream, pace } => {
                self.handle_pace(stream, pace);
            }
            StreamOp::Smooth { stream, rate } => {
                self.handle_smooth(stream, rate);
            }
            StreamOp::Extend { stream, run, blocks, from } => {
                self.handle_extend(now, stream, run, &blocks, from);
            }
            StreamOp::Withhold { stream, run, from, blocks, until } => {
                self.handle_withhold(now, stream, run, from, blocks.as_deref(), until);
            }
            StreamOp::Release { stream, run, at } => {
                self.handle_release(stream, run, at);
            }
            StreamOp::Freeze { stream, run, frozen } => {
                self.handle_freeze(stream, run, frozen);
            }
            StreamOp::PassOver { stream, run, blocks } => {
                self.handle_pass_over(stream, run, &blocks);
            }
            StreamOp::Last { stream, last } => self.handle_last(now, stream, last),
            StreamOp::Bye { stream, reason } => self.handle_bye(now, stream, reason),
            StreamOp::Remove { stream } => self.handle_remove(stream),
        }
    }

    /// The next transmit due at `now`. `can_send` says whether a stream's transport can take a
    /// packet now; a stream that cannot is asked again after `retry_delay`, its packet kept.
    pub fn poll_transmit(
        &mut self,
        now: Instant,
        mut can_send: impl FnMut(StreamId) -> bool,
    ) -> Option<Transmit<B>> {
        if let Some(t) = self.pending.pop_front() {
            return Some(t);
        }
        if self.byes.front().is_some_and(|(due, _)| *due <= now) {
            return self.byes.pop_front().map(|(_, t)| t);
        }
        self.fire_timers(now);
        if let Some(t) = self.pending.pop_front() {
            return Some(t);
        }
        while let Some(&Reverse((due, generation, stream))) = self.heap.peek() {
            if due > now {
                return None;
            }
            self.heap.pop();
            let Some(s) = self.streams.get_mut(&stream) else { continue };
            if s.generation != generation || !s.playing {
                continue;
            }
            s.scheduled = false;
            if s.frozen {
                continue;
            }
            if !can_send(stream) {
                s.held = true;
                s.generation += 1;
                s.scheduled = true;
                self.heap.push(Reverse((now + self.config.retry_delay, s.generation, stream)));
                continue;
            }
            // A release that did not come in time: it takes its part back on its own word,
            // after what fell due before it was told (see `release_wait`).
            if let Some(w) = s.withheld.as_mut().filter(|w| w.until.is_none())
                && now >= w.wait_until
            {
                w.until = Some(w.told_at);
                self.stats.release_timeouts += 1;
            }
            if let Some(until) = Self::hold(&self.config, s, now) {
                s.generation += 1;
                s.scheduled = true;
                self.heap.push(Reverse((until, s.generation, stream)));
                continue;
            }
            // `None`: a packet of a track not set up was passed over, or the run ended.
            if let Some(t) = self.take_packet(now, stream, due) {
                return Some(t);
            }
            if let Some(t) = self.pending.pop_front() {
                return Some(t);
            }
        }
        None
    }

    /// Notices for the scheduler and the session manager.
    pub fn poll_event(&mut self) -> Option<PacerEvent> {
        self.events.pop_front()
    }

    /// When the next packet (or timer) is due, if any stream is waiting on time (not on a block).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.pending.is_empty() {
            return Some(Instant::ZERO);
        }
        [
            self.byes.front().map(|(t, _)| *t),
            self.heap.peek().map(|Reverse((t, _, _))| *t),
            self.timers.peek().map(|Reverse((t, _, _))| *t),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// How far the pacer has got at `now`: every packet of a playing stream due before the
    /// returned instant has been handed out (it is `now` when nothing is overdue; `None` when
    /// no stream plays on a clock). A stream waiting for its next block, or held back by its
    /// transport, holds it back: a peer that takes this node's part over starts there
    /// (`docs/design/takeover.md`), so it must never be later than a packet not yet sent.
    #[must_use]
    pub fn sent_through(&self, now: Instant) -> Option<Instant> {
        let mut playing = self
            .streams
            .values()
            .filter(|s| s.playing && !s.frozen && s.anchor.is_some())
            .peekable();
        playing.peek()?;
        // A stream waiting for its release sends nothing of its own meanwhile: the others do.
        let waiting = |s: &Paced<B>, t: MediaTime| {
            s.withheld.as_ref().is_some_and(|w| {
                w.until.is_none()
                    && t >= w.from
                    && s.next.is_some_and(|b| w.blocks.as_ref().is_none_or(|set| set.contains(&b)))
            })
        };
        let due = playing.filter_map(|s| {
            Self::next_position(s).filter(|p| !waiting(s, p.time)).map(|p| Self::due(s, p.time))
        });
        Some(due.fold(now, Instant::min))
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> PacerStats {
        self.stats
    }

    /// Number of registered streams.
    #[must_use]
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Every registered stream's progress, in no particular order.
    pub fn progress(&self) -> impl Iterator<Item = StreamProgress> + '_ {
        self.streams.values().map(|s| StreamProgress {
            stream: s.setup.stream,
            playing: s.playing,
            position: s.last_sent.map_or(s.start.time, |p| p.time),
            pace: s.pace,
            packets: s.sent_packets,
            bytes: s.sent_bytes,
        })
    }

    /// Whether the stream's next packet, found due at `now`, must wait (until the returned
    /// instant): a share overdue past `hold_after` is held for `hold_window`, once per stretch
    /// of lateness; not one held back by its client (its timing is the client's), one
    /// catching up on blocks it took over (their lateness is the lost node's), nor one told
    /// already that its whole part was taken over (withheld). One told of some blocks is held
    /// all the same: the word for the others may be on its way.
    fn hold(config: &PacerConfig, s: &mut Paced<B>, now: Instant) -> Option<Instant> {
        let after = config.hold_after.filter(|_| s.setup.share.is_some())?;
        if let Some(until) = s.hold_until {
            if now < until {
                return Some(until);
            }
            s.hold_until = None;
            return None;
        }
        let next = s.next.and_then(|n| s.blocks.get(&n)).filter(|b| s.cursor < b.packet_count())?;
        let late = now.saturating_duration_since(Self::due(s, next.packet(s.cursor).send_time));
        if late <= after {
            s.hold_used = false;
            return None;
        }
        // Not a second time, nor when the whole word came already (withheld, every block),
        // nor for a client's timing or a takeover's catch-up.
        let told_all = s.withheld.as_ref().is_some_and(|w| w.blocks.is_none());
        if s.hold_used || told_all || s.held || s.resume.is_some() || s.catching_up.is_some() {
            return None;
        }
        s.hold_used = true;
        let until = now + config.hold_window;
        s.hold_until = Some(until);
        Some(until)
    }

    /// Carries out the timers due at `now`: timed SRs and cutoff stops.
    fn fire_timers(&mut self, now: Instant) {
        while let Some(&Reverse((due, stream, timer))) = self.timers.peek() {
            if due > now {
                return;
            }
            self.timers.pop();
            let Some(s) = self.streams.get_mut(&stream) else { continue };
            match timer {
                Timer::Sr(run) if s.run == run && s.next_sr == Some(due) => {
                    let next = due + self.config.rtcp_interval;
                    s.next_sr = Some(next);
                    self.pending.extend(Self::rtcp(s, now, false, None));
                    self.timers.push(Reverse((next, stream, Timer::Sr(run))));
                }
                Timer::Stop(run) if s.run == run && s.playing && s.stop_at.is_some() => {
                    self.finish(now, stream, true);
                }
                _ => {}
            }
        }
    }

    /// Stops a stream now and reports where it stood.
    fn stop_now(&mut self, stream: StreamId) -> RunReport {
        let Some(s) = self.streams.get_mut(&stream) else { return RunReport::default() };
        let report = RunReport { next: Self::next_position(s), last_sent: s.last_sent };
        s.playing = false;
        s.blocks.clear();
        s.next = None;
        s.stop_at = None;
        s.stop_before = None;
        s.generation += 1;
        s.scheduled = false;
        report
    }

    /// The first packet of the stream's part of the run that it has not sent, if any is left.
    fn next_position(s: &Paced<B>) -> Option<Position> {
        let next = s.next?;
        if let Some(b) = s.blocks.get(&next)
            && s.cursor < b.packet_count()
        {
            let p = b.packet(s.cursor);
            return Some(Position { gsn: p.gsn, time: p.send_time, tracks: s.next_tracks });
        }
        let started = s.last_sent.is_some_and(|l| next <= s.from || l.gsn >= s.start.gsn);
        let position = match &s.setup.share {
            // The run's first block, not yet begun: its start packet.
            _ if next == s.from && !started => s.start,
            // A later block of its share, not read yet: its first packet, with each track's
            // count of what this node sent (as a block read would give, above). The block's own
            // counts are the object's at that packet, past what the other nodes sent up to the
            // stop: the origin takes each track's highest count over the nodes, and numbering
            // on from those would leave a gap in every track (a switch of rendition's run, which
            // starts from its own seek point, did).
            Some(share) => share
                .iter()
                .find(|b| b.index == next)
                .map_or(s.start, |b| Position { tracks: s.next_tracks, ..b.first }),
            // Every block: the packet after the last sent (GSNs are contiguous).
            None => s.last_sent.map_or(s.start, |p| Position { gsn: p.gsn.next(), ..p }),
        };
        Some(position)
    }

    /// When the packet at media time `t` is due on the stream's clock.
    fn due(s: &Paced<B>, t: MediaTime) -> Instant {
        let (anchor, pace) = match s.pending {
            Some((a, p)) if t >= a.media => (a, p),
            _ => match s.anchor {
                Some(a) => (a, s.pace),
                None => return Instant::ZERO,
            },
        };
        anchor.wall + pace.wall_span(t.saturating_duration_since(anchor.media))
    }

    /// When the packet at media time `t`, the next to send, goes: at its due time, or for a
    /// rate-paced stream on its byte clock within the window of it (module docs, *Rate
    /// pacing*). Trick play keeps its own times.
    fn send_due(s: &Paced<B>, t: MediaTime) -> Instant {
        let due = Self::due(s, t);
        let Some(sm) = s.smooth.filter(|_| s.trick.is_none() && s.anchor.is_some()) else {
            return due;
        };
        match sm.next {
            Some(at) => {
                let early = due.saturating_sub(sm.window);
                at.clamp(early, due + sm.window)
            }
            None => due,
        }
    }

    fn schedule(
        heap: &mut BinaryHeap<Reverse<(Instant, u64, StreamId)>>,
        s: &mut Paced<B>,
        stats: &mut PacerStats,
    ) {
        let block = s.next.and_then(|n| s.blocks.get(&n));
        let (Some(block), Some(_)) = (block, s.anchor) else {
            if s.playing && s.anchor.is_some() {
                stats.underruns += 1;
            }
            return;
        };
        let first = block.packet(0).send_time;
        let t = block.packet(s.cursor).send_time;
        let index = s.next.unwrap_or(BlockIndex(0));
        if s.smooth.is_some_and(|sm| sm.next.is_none()) && s.anchor.is_some() {
            // The run's first packet at hand: the byte clock starts at its due time.
            let at = Self::due(s, t);
            if let Some(sm) = s.smooth.as_mut() {
                sm.next = Some(at);
            }
        }
        let mut due = Self::send_due(s, t);
        if let Some(c) = s.catching_up.as_mut() {
            let paced = c.not_before(block);
            if paced > due {
                due = paced;
            } else {
                // Caught up: its own clock again.
                s.catching_up = None;
            }
        }
        if let Some(w) = s.withheld.as_ref().filter(|w| w.verdict(index, t, first) == Verdict::Wait)
        {
            // Until its release (`handle_release` schedules it again), at most `release_wait`.
            due = due.max(w.wait_until);
        }
        s.generation += 1;
        s.scheduled = true;
        heap.push(Reverse((due, s.generation, s.setup.stream)));
    }

    fn take_packet(&mut self, now: Instant, stream: StreamId, due: Instant) -> Option<Transmit<B>> {
        let interval = self.config.rtcp_interval;
        let s = self.streams.get_mut(&stream)?;
        let index = s.next?;
        let block = Arc::clone(s.blocks.get(&index)?);
        let cursor = s.cursor;
        let pkt = block.packet(cursor);
        let (gsn, time, marker, len) =
            (pkt.gsn, pkt.send_time, pkt.marker, pkt.payload.len() as u64);
        let pkt_random_access = pkt.random_access;
        let (track, track_seq, rtp_time) = (usize::from(pkt.track), pkt.track_seq, pkt.rtp_time);
        if s.end.is_some_and(|end| time > end) || s.stop_before.is_some_and(|b| gsn >= b) {
            let stopped = s.stop_at.is_some();
            self.finish(now, stream, stopped);
            return None;
        }
        if let Some((a, p)) = s.pending.filter(|(a, _)| time >= a.media) {
            s.anchor = Some(a);
            s.pace = p;
            s.pending = None;
        }
        let mut stamp = s.setup.tracks.get(track).copied().filter(|t| t.enabled);
        // The packet's place in its track's numbering: its own, or in trick play the count of
        // the run's packets sent before it.
        let mut seq_index = track_seq;
        match s.trick {
            None => s.next_tracks.set(track, (track_seq as u32).wrapping_add(1)),
            Some(_) => {
                // A key frame runs from its seek point's packet to its track's next marker;
                // packets of other tracks in between are passed over and change nothing.
                if pkt_random_access || s.in_key == Some(track as u8) {
                    s.in_key = (!marker).then_some(track as u8);
                } else {
                    stamp = None;
                }
                if stamp.is_some() {
                    let first = s.start.track_seq(track) as u32;
                    seq_index = u64::from(first.wrapping_add(s.trick_sent[track]));
                    s.trick_sent[track] = s.trick_sent[track].wrapping_add(1);
                    s.next_tracks.set(track, first.wrapping_add(s.trick_sent[track]));
                }
            }
        }
        // Sent already by the node whose block this was, before it was lost.
        if s.skip_before.get(&index).is_some_and(|t| time < *t) {
            stamp = None;
        }
        // Given back to its node, which sends it.
        if s.passed_over.contains(&index) {
            stamp = None;
        }
        // Sent by the nodes that took this one's part over while it was lost.
        let first = block.packet(0).send_time;
        if s.withheld.as_ref().is_some_and(|w| w.verdict(index, time, first) == Verdict::PassOver) {
            stamp = None;
        }
        let start_time = s.start.time;
        let trick = s.trick;
        let transmit = match stamp {
            Some(stamp) => {
                let lsn = s.setup.lsn.then(|| {
                    s.lsn = s.lsn.wrapping_add(1);
                    s.lsn
                });
                let offset = s.setup.seq_offsets[track];
                let block_end = if s.setup.lsn {
                    block_end(&mut s.block_ends, index, &block, &s.setup.seq_offsets)[track]
                } else {
                    0
                };
                s.sent_packets += 1;
                s.sent_bytes += len;
                if let Some(c) = s.catching_up.as_mut() {
                    c.bytes += len;
                }
                if s.smooth.is_some() {
                    let (own, pace) = (Self::due(s, time), s.pace);
                    if let Some(sm) = s.smooth.as_mut() {
                        let at = match sm.next {
                            // Late (its block came late): the clock starts again, no burst.
                            Some(at) if now.saturating_duration_since(due) <= SMOOTH_SLACK => at,
                            _ => now,
                        };
                        sm.next = Some(sm.after(at, len, own, pace));
                    }
                }
                s.track_packets[track] += 1;
                s.track_bytes[track] += len;
                s.last_sent = Some(Position { gsn, time, tracks: s.next_tracks });
                let late = now.saturating_duration_since(due).as_micros() as u64;
                self.stats.packets += 1;
                self.stats.payload_bytes += len;
                if s.held {
                    self.stats.held_packets += 1;
                } else {
                    self.stats.lateness_us_sum += late;
                    self.stats.lateness_us_max = self.stats.lateness_us_max.max(late);
                    if let Some(i) = LATENESS_BUCKETS_US.iter().position(|&b| late <= b) {
                        self.stats.lateness_buckets[i] += 1;
                    }
                }
                Some(Transmit::Rtp {
                    stream,
                    track: track as u8,
                    payload_type: stamp.payload_type,
                    block: Arc::clone(&block),
                    packet: cursor,
                    seq: rtp_seq(offset, Gsn(seq_index)),
                    timestamp: {
                        let raw =
                            rtp_time.unwrap_or_else(|| rtp_timestamp_at(0, time, stamp.clock_rate));
                        let scaled = trick_time(trick, start_time, stamp.clock_rate, raw);
                        stamp.rtp_ts_offset.wrapping_add(scaled)
                    },
                    marker,
                    lsn,
                    block_end,
                })
            }
            // A track the client did not set up: passed over.
            None => None,
        };

        // Advance.
        let mut ended = false;
        if cursor + 1 < block.packet_count() {
            s.cursor = cursor + 1;
        } else {
            s.blocks.remove(&index);
            s.skip_before.remove(&index);
            s.passed_over.remove(&index);
            self.events.push_back(PacerEvent::BlockDone { stream, run: s.run, index });
            s.cursor = 0;
            // Overdue blocks of a takeover first, then back to where the share was.
            s.next = match (s.catch_up.pop_first(), s.resume) {
                (Some(c), _) => Some(c),
                (None, Some((r, cursor))) => {
                    s.resume = None;
                    s.cursor = match s.blocks.get(&r) {
                        // Not begun, and the run's first block: at its start packet.
                        Some(b) if cursor == 0 && r == s.from => {
                            b.find_gsn(s.start.gsn).unwrap_or(0)
                        }
                        _ => cursor,
                    };
                    Some(r)
                }
                (None, None) => next_block(&s.setup, index),
            };
            ended = s.next.is_none();
        }
        // RTCP: an SR right after the first packet of a run, then every interval.
        if s.setup.rtcp == RtcpMode::AfterPackets && transmit.is_some() {
            let sr_due = s.next_sr.is_none_or(|t| now >= t);
            if sr_due && !ended {
                s.next_sr = Some(now + interval);
                self.pending.extend(Self::rtcp(s, now, false, None));
            }
        }
        if ended {
            self.finish(now, stream, false);
        } else if let Some(s) = self.streams.get_mut(&stream) {
            Self::schedule(&mut self.heap, s, &mut self.stats);
        }
        transmit
    }

    /// Ends the run: at a stop (`stopped`), or at its end, with the BYE of a stream that sends
    /// its session's RTCP after its packets.
    fn finish(&mut self, now: Instant, stream: StreamId, stopped: bool) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let report = RunReport {
            next: if stopped { Self::next_position(s) } else { None },
            last_sent: s.last_sent,
        };
        if !stopped && s.setup.rtcp == RtcpMode::AfterPackets {
            let due = now + self.config.bye_delay;
            for bye in Self::rtcp(s, due, true, None) {
                self.byes.push_back((due, bye));
            }
        }
        s.playing = false;
        s.ended = !stopped;
        s.blocks.clear();
        s.next = None;
        s.stop_at = None;
        s.stop_before = None;
        s.generation += 1;
        s.scheduled = false;
        let run = s.run;
        self.events.push_back(if stopped {
            PacerEvent::Stopped { stream, run, report }
        } else {
            PacerEvent::Ended { stream, run, report }
        });
    }

    /// The RTCP of every set-up track: an SR on each track's clock at the same media time, so
    /// that players keep the tracks in sync (RFC 3550 §6.4.1).
    fn rtcp(
        s: &Paced<B>,
        now: Instant,
        bye: bool,
        reason: Option<Arc<str>>,
    ) -> impl Iterator<Item = Transmit<B>> + use<B> {
        let media = s.anchor.map_or(s.start.time, |a| {
            a.media + s.pace.media_span(now.saturating_duration_since(a.wall))
        });
        let stream = s.setup.stream;
        let (packets, bytes) = (s.track_packets, s.track_bytes);
        let (trick, start) = (s.trick, s.start.time);
        let tracks = s.setup.tracks.clone();
        tracks.into_iter().enumerate().filter(|(_, t)| t.enabled).map(move |(i, t)| {
            Transmit::Rtcp {
                stream,
                track: i as u8,
                rtp_timestamp: t.rtp_ts_offset.wrapping_add(trick_time(
                    trick,
                    start,
                    t.clock_rate,
                    rtp_timestamp_at(0, media, t.clock_rate),
                )),
                // The SR's counts wrap at 32 bits (RFC 3550 §6.4.1): the low bits of the totals.
                packets: packets[i] as u32,
                octets: bytes[i] as u32,
                bye,
                reason: reason.clone(),
            }
        })
    }
}

/// A packet's RTP timestamp `raw` (before the session's offset) in a run of trick play at
/// `scale` from media time `start`: scaled around the start's timestamp so that it advances at
/// the wall clock's rate; unchanged without trick play.
fn trick_time(scale: Option<Pace>, start: MediaTime, clock: u32, raw: u32) -> u32 {
    let Some(scale) = scale else { return raw };
    let base = rtp_timestamp_at(0, start, clock);
    // Signed distance from the start (the stored timestamps wrap at 2^32).
    let d = i64::from(raw.wrapping_sub(base) as i32);
    let scaled = d * 1_000_000 / i64::from(scale.ppm().max(1));
    base.wrapping_add(scaled as u32)
}

/// Each track's RTP sequence number of its last packet in block `index` (the block end a
/// packet carries with its LSN, so a player knows which node to ask for a lost number), cached
/// for the block being sent.
fn block_end<'c, B: AsRef<[u8]>>(
    cache: &'c mut Option<(BlockIndex, [u16; MAX_TRACKS])>,
    index: BlockIndex,
    block: &Block<B>,
    offsets: &SeqOffsets,
) -> &'c [u16; MAX_TRACKS] {
    if cache.is_none_or(|(i, _)| i != index) {
        let mut ends = [0u16; MAX_TRACKS];
        for p in block.packets() {
            let t = usize::from(p.track);
            ends[t] = rtp_seq(offsets[t], Gsn(p.track_seq));
        }
        *cache = Some((index, ends));
    }
    // Set just above.
    &cache.as_ref().expect("cached").1
}

/// The first block a run starting at block `from` sends: `from` itself, or for a share its first
/// block at or after `from`.
fn first_block(setup: &StreamSetup, from: BlockIndex) -> Option<BlockIndex> {
    match &setup.share {
        None => (from <= setup.last_block).then_some(from),
        Some(share) => {
            let i = share.partition_point(|b| b.index < from);
            share.get(i).map(|b| b.index)
        }
    }
}

/// The block after `index` that the stream sends, if any.
fn next_block(setup: &StreamSetup, index: BlockIndex) -> Option<BlockIndex> {
    match &setup.share {
        None => (index < setup.last_block).then(|| BlockIndex(index.0 + 1)),
        Some(share) => {
            let i = share.partition_point(|b| b.index <= index);
            share.get(i).map(|b| b.index)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isochron_base::{BlockKey, Bytes, ObjectId};
    use isochron_store::block::{BlockBuilder, NativeMeta, PacketMeta};

    /// A block of `n` one-TS-packet units, 10 ms apart, starting at GSN `first`.
    fn block(index: u32, first: u64, n: u64) -> Arc<Block<Vec<u8>>> {
        let key = BlockKey::new(ObjectId(1), BlockIndex(index));
        let mut b = BlockBuilder::new(key, Gsn(first), Bytes::kib(64));
        for g in first..first + n {
            let meta = PacketMeta {
                send_time: MediaTime::from_nanos(g * 10_000_000),
                ts_packets: 1,
                random_access: false,
                discontinuity: false,
            };
            let mut payload = vec![0x47; 188];
            payload[1] = g as u8;
            b.push(meta, &payload);
        }
        Arc::new(Block::parse(b.finish(), Some(key)).unwrap())
    }

    fn setup(p: &mut Pacer<Vec<u8>>, last: u32) {
        p.handle_add(StreamSetup::whole(StreamId(1), 9, 65_530, 100, BlockIndex(last)));
    }

    fn play(p: &mut Pacer<Vec<u8>>, run: RunId, start: Position, end: Option<MediaTime>, seq: u16) {
        let play = PlayRun {
            run,
            start,
            from: BlockIndex(0),
            end,
            seq_offsets: single_offset(seq),
            anchor: None,
            trick: None,
        };
        p.handle_play(Instant::ZERO, StreamId(1), play);
    }

    fn ms(n: u64) -> Instant {
        Instant::from_nanos(n * 1_000_000)
    }

    /// Runs the pacer in virtual time until `until`, returning (time, seq) of each RTP packet,
    /// the number of RTCP packets without BYE, and the times (ms) of the BYEs.
    fn drive(p: &mut Pacer<Vec<u8>>, until: Instant) -> (Vec<(u64, u16)>, usize, Vec<u64>) {
        let (mut rtp, mut sr, mut bye) = (Vec::new(), 0, Vec::new());
        let mut now = Instant::ZERO;
        while now <= until {
            while let Some(t) = p.poll_transmit(now, |_| true) {
                match t {
                    Transmit::Rtp { seq, .. } => rtp.push((now.as_nanos() / 1_000_000, seq)),
                    Transmit::Rtcp { bye: true, .. } => bye.push(now.as_nanos() / 1_000_000),
                    Transmit::Rtcp { .. } => sr += 1,
                }
            }
            match p.poll_timeout() {
                Some(t) if t > now => now = t,
                Some(_) => {}
                None => break,
            }
        }
        (rtp, sr, bye)
    }

    /// A native block: packets alternating video (track 0, 90 kHz) and audio (track 1,
    /// 48 kHz), 10 ms apart, starting at GSN `first` (video track_seq = GSN / 2).
    fn native_block(index: u32, first: u64, n: u64) -> Arc<Block<Vec<u8>>> {
        let key = BlockKey::new(ObjectId(1), BlockIndex(index));
        let mut b = BlockBuilder::new_native(key, Gsn(first), Bytes::kib(64));
        for g in first..first + n {
            let track = (g % 2) as u8;
            let meta = NativeMeta {
                send_time: MediaTime::from_nanos(g * 10_000_000),
                track,
                rtp_time: if track == 0 { g as u32 * 900 } else { g as u32 * 480 + 7 },
                track_seq: (g / 2) as u32,
                marker: track == 0,
                random_access: g == 0,
            };
            b.push_native(meta, &[g as u8; 100]);
        }
        Arc::new(Block::parse(b.finish(), Some(key)).unwrap())
    }

    fn native_setup(audio: bool) -> StreamSetup {
        let audio_track = TrackStamp {
            ssrc: 22,
            rtp_ts_offset: 1_000,
            clock_rate: 48_000,
            payload_type: 97,
            enabled: audio,
        };
        StreamSetup {
            tracks: vec![
                TrackStamp {
                    ssrc: 11,
                    rtp_ts_offset: 5,
                    clock_rate: 90_000,
                    payload_type: 96,
                    enabled: true,
                },
                audio_track,
            ],
            ..StreamSetup::whole(StreamId(1), 0, 0, 0, BlockIndex(1))
        }
    }

    /// Adds the stream of [`native_setup`], plays it from the start with `offsets`, and hands it
    /// its first block on a clock pinned at 0.
    fn native_play(p: &mut Pacer<Vec<u8>>, audio: bool, offsets: SeqOffsets) {
        p.handle_add(native_setup(audio));
        let start = Position { tracks: TrackSeqs::zeros(2), ..Position::START };
        let (from, end, anchor) = (BlockIndex(0), None, None);
        let run =
            PlayRun { run: RunId(1), start, from, end, seq_offsets: offsets, anchor, trick: None };
        p.handle_play(Instant::ZERO, StreamId(1), run);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), native_block(0, 0, 6), Some(anchor));
    }

    /// Each track is its own RTP stream: numbered by its own index plus its own offset, stamped
    /// with its stored timestamp plus its own offset, its own payload type, its own SRs and
    /// BYE; where the run stopped says each track's next packet.
    #[test]
    fn native_tracks_are_stamped_and_reported_apart() {
        let mut p = Pacer::new(PacerConfig::default());
        let mut offsets = single_offset(100);
        offsets[1] = 65_535;
        native_play(&mut p, true, offsets);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), native_block(1, 6, 4), None);
        let mut rtp = Vec::new();
        let mut rtcp = Vec::new();
        let mut now = Instant::ZERO;
        while now <= ms(2_000) {
            while let Some(t) = p.poll_transmit(now, |_| true) {
                match t {
                    Transmit::Rtp { track, payload_type, seq, timestamp, marker, .. } => {
                        rtp.push((track, payload_type, seq, timestamp, marker));
                    }
                    Transmit::Rtcp { track, packets, bye, .. } => rtcp.push((track, packets, bye)),
                }
            }
            match p.poll_timeout() {
                Some(t) if t > now => now = t,
                _ => break,
            }
        }
        assert_eq!(rtp.len(), 10);
        assert_eq!(rtp[0], (0, 96, 100, 5, true));
        assert_eq!(rtp[1], (1, 97, 65_535, 1_000 + 480 + 7, false));
        assert_eq!(rtp[2], (0, 96, 101, 5 + 1_800, true));
        assert_eq!(rtp[3].2, 0, "the audio numbers wrap on their own");
        // An SR per track after the first packet, a BYE per track after the last.
        assert_eq!(rtcp.iter().filter(|r| !r.2).map(|r| r.0).collect::<Vec<_>>(), [0, 1]);
        assert_eq!(
            rtcp.iter().filter(|r| r.2).map(|r| (r.0, r.1)).collect::<Vec<_>>(),
            [(0, 5), (1, 5)]
        );
        let ended = std::iter::from_fn(|| p.poll_event())
            .find_map(|e| match e {
                PacerEvent::Ended { report, .. } => Some(report),
                _ => None,
            })
            .unwrap();
        let last = ended.last_sent.unwrap();
        assert_eq!((last.gsn, last.tracks.as_slice()), (Gsn(9), &[5, 5][..]));
    }

    /// Trick play: only the key frame's packets (from its seek point to its track's marker,
    /// whatever other tracks interleave), numbered one after the other, timestamps scaled to
    /// wall-clock rate around the start, paced at the scale.
    #[test]
    fn trick_play_sends_key_frames_numbered_without_gaps() {
        // Video key frames of 3 packets at 0 and 1 s, a P frame of 2 between, audio between all.
        let key = BlockKey::new(ObjectId(1), BlockIndex(0));
        let mut b = BlockBuilder::new_native(key, Gsn(0), Bytes::kib(64));
        let mut vseq = 0;
        let mut aseq = 0;
        let mut push = |b: &mut BlockBuilder, ms: u64, track: u8, marker: bool, rap: bool| {
            let seq = if track == 0 { &mut vseq } else { &mut aseq };
            let meta = NativeMeta {
                send_time: MediaTime::from_nanos(ms * 1_000_000),
                track,
                rtp_time: (ms * 90) as u32,
                track_seq: *seq,
                marker,
                random_access: rap,
            };
            *seq += 1;
            b.push_native(meta, &[track; 50]);
        };
        for base in [0, 1000] {
            push(&mut b, base, 0, false, true);
            push(&mut b, base + 1, 1, true, false); // audio inside the key frame
            push(&mut b, base + 2, 0, false, false);
            push(&mut b, base + 3, 0, true, false);
            push(&mut b, base + 500, 0, false, false); // a P frame
            push(&mut b, base + 501, 0, true, false);
            push(&mut b, base + 502, 1, true, false);
        }
        let block = Arc::new(Block::parse(b.finish(), Some(key)).unwrap());
        let mut p = Pacer::new(PacerConfig::default());
        p.handle_add(StreamSetup { last_block: BlockIndex(0), ..native_setup(true) });
        let start = Position { tracks: TrackSeqs::zeros(2), ..Position::START };
        let (from, end, anchor) = (BlockIndex(0), None, None);
        let trick = Some(Pace::from_ppm(2_000_000));
        let run = PlayRun {
            run: RunId(1),
            start,
            from,
            end,
            seq_offsets: single_offset(10),
            anchor,
            trick,
        };
        p.handle_play(Instant::ZERO, StreamId(1), run);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block, Some(anchor));
        let mut rtp = Vec::new();
        let mut now = Instant::ZERO;
        while now <= ms(3_000) {
            while let Some(t) = p.poll_transmit(now, |_| true) {
                if let Transmit::Rtp { track, seq, timestamp, .. } = t {
                    rtp.push((now.as_nanos() / 1_000_000, track, seq, timestamp));
                }
            }
            match p.poll_timeout() {
                Some(t) if t > now => now = t,
                _ => break,
            }
        }
        // Six video packets (two key frames of three), numbered 10..16; the second key frame
        // at 1 s of media is sent at 0.5 s and stamped 0.5 s after the first (scaled by 2).
        let video: Vec<_> = rtp.iter().map(|r| (r.0, r.1, r.2, r.3)).collect();
        assert_eq!(video.iter().map(|r| r.2).collect::<Vec<_>>(), [10, 11, 12, 13, 14, 15]);
        assert!(video.iter().all(|r| r.1 == 0), "only video: {video:?}");
        assert_eq!(video[3].0, 500, "paced at twice the speed");
        assert_eq!(video[3].3.wrapping_sub(video[0].3), 45_000, "timestamps at wall rate");
    }

    /// A track the client did not set up is passed over, but counted in the positions.
    #[test]
    fn a_track_not_set_up_is_passed_over() {
        let mut p = Pacer::new(PacerConfig::default());
        native_play(&mut p, false, single_offset(0));
        let mut tracks = Vec::new();
        let mut now = Instant::ZERO;
        while now <= ms(35) {
            while let Some(t) = p.poll_transmit(now, |_| true) {
                if let Transmit::Rtp { track, seq, .. } = t {
                    tracks.push((track, seq));
                }
            }
            match p.poll_timeout() {
                Some(t) if t > now => now = t,
                _ => break,
            }
        }
        assert_eq!(tracks, [(0, 0), (0, 1)]);
        let report = p.handle_stop(now, StreamId(1), RunId(1), None, None).unwrap();
        let next = report.next.unwrap();
        assert_eq!((next.gsn, next.tracks.as_slice()), (Gsn(4), &[2, 2][..]));
    }

    #[test]
    fn paces_by_send_time_and_ends_with_bye() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        let (rtp, sr, bye) = drive(&mut p, ms(1_000));
        let times: Vec<u64> = rtp.iter().map(|r| r.0).collect();
        assert_eq!(times, (0..10).map(|i| 100 + 10 * i).collect::<Vec<_>>());
        // seq = offset + GSN, wrapping.
        assert_eq!(rtp[0].1, 65_530);
        assert_eq!(rtp[6].1, 0);
        assert_eq!(sr, 1);
        assert_eq!(bye, vec![190 + 500], "BYE trails the last packet by the grace period");
        let ev: Vec<_> = std::iter::from_fn(|| p.poll_event()).collect();
        assert_eq!(
            ev,
            vec![
                PacerEvent::BlockDone { stream: StreamId(1), run: RunId(1), index: BlockIndex(0) },
                PacerEvent::BlockDone { stream: StreamId(1), run: RunId(1), index: BlockIndex(1) },
                PacerEvent::Ended {
                    stream: StreamId(1),
                    run: RunId(1),
                    report: RunReport {
                        next: None,
                        last_sent: Some(Position::at(Gsn(9), MediaTime::from_nanos(90_000_000))),
                    },
                },
            ]
        );
    }

    #[test]
    fn progress_counts_packets_and_bytes_across_runs() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        let start = Position::at(Gsn(0), MediaTime::ZERO);
        play(&mut p, RunId(1), start, None, 0);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        drive(&mut p, ms(25));
        let got: Vec<_> = p.progress().collect();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].packets, got[0].bytes), (3, 3 * 188), "packets at 0, 10 and 20 ms");
        assert_eq!(got[0].position, MediaTime::from_nanos(20_000_000));
        assert!(got[0].playing);
        let _ = p.handle_stop(ms(25), StreamId(1), RunId(1), None, None);
        play(&mut p, RunId(2), start, None, 0);
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(2), BlockIndex(0), block(0, 0, 5), Some(anchor));
        drive(&mut p, ms(115));
        let got = p.progress().next().unwrap();
        assert_eq!(got.packets, 5, "counts keep growing over runs");
    }

    #[test]
    fn seek_start_inside_a_block_and_stale_runs_ignored() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        // Run 2 starts at GSN 3; a block delivered for run 1 arrives late and is dropped.
        let start = Position::at(Gsn(3), MediaTime::from_nanos(30_000_000));
        play(&mut p, RunId(2), start, None, 65_530);
        let anchor = Anchor { wall: ms(0), media: start.time };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        assert!(p.poll_timeout().is_none());
        p.handle_block(StreamId(1), RunId(2), BlockIndex(0), block(0, 0, 5), Some(anchor));
        let (rtp, ..) = drive(&mut p, ms(100));
        assert_eq!(rtp, vec![(0, 65_533), (10, 65_534)]);
    }

    #[test]
    fn pause_reports_the_next_packet_and_resume_has_no_gap() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        let mut sent = Vec::new();
        while let Some(t) = p.poll_transmit(ms(15), |_| true) {
            if let Transmit::Rtp { seq, .. } = t {
                sent.push(seq);
            }
        }
        assert_eq!(sent, vec![65_530, 65_531]);
        let report = p.handle_stop(ms(15), StreamId(1), RunId(1), None, None).unwrap();
        let at = report.next.unwrap();
        assert_eq!(at, Position::at(Gsn(2), MediaTime::from_nanos(20_000_000)));
        assert_eq!(rtp_seq(65_530, at.gsn), 65_532, "the next packet's sequence number");
        assert!(p.poll_transmit(ms(1_000), |_| true).is_none());
        play(&mut p, RunId(2), at, None, 65_530);
        let anchor = Anchor { wall: ms(2_000), media: at.time };
        p.handle_block(StreamId(1), RunId(2), BlockIndex(0), block(0, 0, 5), Some(anchor));
        let (rtp, ..) = drive(&mut p, ms(3_000));
        assert_eq!(rtp.iter().map(|r| r.1).collect::<Vec<_>>(), vec![65_532, 65_533, 65_534]);
        assert_eq!(rtp[0].0, 2_000);
    }

    #[test]
    fn sent_through_is_the_first_packet_not_handed_out() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        // Nothing playing, or not yet on a clock: nothing to say.
        assert_eq!(p.sent_through(ms(5)), None);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        assert_eq!(p.sent_through(ms(5)), None);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        // Packets due at 0, 10, 20 … ms: at 15 the first two are out, the next is not due.
        while p.poll_transmit(ms(15), |_| true).is_some() {}
        assert_eq!(p.sent_through(ms(15)), Some(ms(15)));
        // Held back by its transport: the packet due at 20 is not out at 25.
        assert!(p.poll_transmit(ms(25), |_| false).is_none());
        assert_eq!(p.sent_through(ms(25)), Some(ms(20)));
        // Block 0 out, block 1 not read: its first packet (due at 50) is not out at 60. Its
        // time is unknown until it is read; the last one sent (40) bounds it.
        while p.poll_transmit(ms(60), |_| true).is_some() {}
        assert_eq!(p.sent_through(ms(60)), Some(ms(40)));
        // Paused: nothing of it is due.
        p.handle_stop(ms(60), StreamId(1), RunId(1), None, None);
        assert_eq!(p.sent_through(ms(70)), None);
    }

    #[test]
    fn backpressure_keeps_the_packet() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 2), Some(anchor));
        assert!(p.poll_transmit(ms(0), |_| false).is_none());
        assert_eq!(p.poll_timeout(), Some(ms(2)));
        match p.poll_transmit(ms(2), |_| true) {
            Some(Transmit::Rtp { seq, .. }) => assert_eq!(seq, 65_530),
            other => panic!("{other:?}"),
        }
        // Held back by its client, the stream's timing is the client's: counted as held, not
        // in the lateness the sender is judged by (a reader that never reads made it 48 s).
        while p.poll_transmit(ms(60_000), |_| true).is_some() {}
        let st = p.stats();
        assert_eq!((st.packets, st.held_packets), (2, 2));
        assert_eq!((st.lateness_us_max, st.lateness_us_sum), (0, 0));
        // A new run starts unheld.
        play(&mut p, RunId(2), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(70_000), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(2), BlockIndex(0), block(0, 0, 2), Some(anchor));
        while p.poll_transmit(ms(70_003), |_| true).is_some() {}
        let st = p.stats();
        assert_eq!((st.packets, st.held_packets), (3, 2));
        assert_eq!(st.lateness_us_max, 3_000);
    }

    #[test]
    fn pace_change_reanchors_at_the_current_packet() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        // Packets at 100, 110, 120 ms at nominal pace (10 ms apart).
        let mut sent = Vec::new();
        while let Some(t) = p.poll_transmit(ms(125), |_| true) {
            if let Transmit::Rtp { seq, .. } = t {
                sent.push(seq);
            }
        }
        assert_eq!(sent.len(), 3);
        // Twice as fast from packet 3 on: packet 3 keeps its due time (130 ms), then 5 ms apart.
        let double = Pace::from_multiplier(2.0).unwrap();
        assert_eq!(p.handle_pace(StreamId(1), double), Some(double));
        let ev: Vec<_> = std::iter::from_fn(|| p.poll_event())
            .filter(|e| matches!(e, PacerEvent::Paced { .. }))
            .collect();
        let media = MediaTime::from_nanos(30_000_000);
        assert_eq!(
            ev,
            vec![PacerEvent::Paced {
                stream: StreamId(1),
                run: RunId(1),
                anchor: Anchor { wall: ms(130), media },
                pace: double
            }]
        );
        let (rtp, ..) = drive(&mut p, ms(1_000));
        let times: Vec<u64> = rtp.iter().map(|r| r.0).collect();
        assert_eq!(times, vec![130, 135, 140, 145, 150, 155, 160]);
        assert_eq!(p.stats().pace_changes, 1);
        assert_eq!(p.handle_pace(StreamId(1), double), Some(double), "same pace: no change");
        assert_eq!(p.stats().pace_changes, 1);
    }

    /// A block of units of `sizes` TS packets each, 10 ms apart, from GSN `first`.
    fn sized_block(index: u32, first: u64, sizes: &[usize]) -> Arc<Block<Vec<u8>>> {
        let key = BlockKey::new(ObjectId(1), BlockIndex(index));
        let mut b = BlockBuilder::new(key, Gsn(first), Bytes::kib(64));
        for (g, &len) in (first..).zip(sizes) {
            let meta = PacketMeta {
                send_time: MediaTime::from_nanos(g * 10_000_000),
                ts_packets: len as u8,
                random_access: false,
                discontinuity: false,
            };
            b.push(meta, &vec![0x47; 188 * len]);
        }
        Arc::new(Block::parse(b.finish(), Some(key)).unwrap())
    }

    /// A 50 ms window, the byte clock never drawn back: each packet exactly when the bytes before
    /// it have gone at the rate.
    /// Blocks 0 and 1 of stream 1's run 1: the first ten packets of `sizes`, then the rest.
    fn two_blocks(p: &mut Pacer<Vec<u8>>, sizes: &[usize], anchor: Anchor) {
        let (a, b) = (sized_block(0, 0, &sizes[..10]), sized_block(1, 10, &sizes[10..]));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), a, Some(anchor));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), b, None);
    }

    fn smooth_config() -> PacerConfig {
        PacerConfig {
            smooth_window: Duration::from_millis(50),
            smooth_settle: None,
            ..PacerConfig::default()
        }
    }

    #[test]
    fn a_rate_paced_stream_sends_its_bytes_at_the_mean_rate_within_the_window_of_its_times() {
        // 200 ms of media: ten 940-byte packets, then ten of 188 bytes (56.4 bytes a ms on
        // average), paced at 47 bytes a ms.
        let sizes: Vec<usize> = [5; 10].into_iter().chain([1; 10]).collect();
        let mut p = Pacer::new(smooth_config());
        setup(&mut p, 1);
        assert!(p.handle_smooth(StreamId(1), Some(47_000)));
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        two_blocks(&mut p, &sizes, anchor);
        let (rtp, ..) = drive(&mut p, ms(1_000));
        let times: Vec<u64> = rtp.iter().map(|r| r.0).collect();
        // Each packet when the bytes before it have gone at 47 bytes a ms, kept within 50 ms of
        // its own time (k × 10 ms).
        let want: Vec<u64> = (0..20u64)
            .map(|k| {
                let before: u64 = sizes[..k as usize].iter().map(|&n| 188 * n as u64).sum();
                let at = before * 1_000_000_000 / 47_000;
                at.clamp((k * 10).saturating_sub(50) * 1_000_000, (k * 10 + 50) * 1_000_000)
                    / 1_000_000
            })
            .collect();
        assert_eq!(times, want);
        assert_eq!(&times[..4], &[0, 20, 40, 60], "the big packets go at the rate, later");
        assert_eq!(times[9], 140, "at most the window behind their own time");
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
        // By content, the same packets go 10 ms apart whatever their size.
        let mut c = Pacer::new(smooth_config());
        setup(&mut c, 1);
        play(&mut c, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        two_blocks(&mut c, &sizes, anchor);
        let (rtp, ..) = drive(&mut c, ms(1_000));
        assert_eq!(
            rtp.iter().map(|r| r.0).collect::<Vec<_>>(),
            (0..20).map(|k| k * 10).collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_rate_paced_stream_goes_on_at_its_rate_after_a_late_block_and_a_pace_change() {
        let mut p = Pacer::new(smooth_config());
        setup(&mut p, 1);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(
            StreamId(1),
            RunId(1),
            BlockIndex(0),
            sized_block(0, 0, &[3; 10]),
            Some(anchor),
        );
        // Rate pacing asked for while the stream plays: 56.4 bytes a ms, its own rate.
        assert!(p.handle_smooth(StreamId(1), Some(56_400)));
        let (rtp, ..) = drive(&mut p, ms(125));
        assert_eq!(
            rtp.iter().map(|r| r.0).collect::<Vec<_>>(),
            (0..10).map(|k| k * 10).collect::<Vec<_>>()
        );
        // The next block comes 30 ms after its first packet was due: that packet goes at once,
        // the rest at the rate from there (by content, three would go at once).
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), sized_block(1, 10, &[3; 10]), None);
        let mut now = ms(130);
        let mut times = Vec::new();
        while times.len() < 3 {
            if let Some(Transmit::Rtp { .. }) = p.poll_transmit(now, |_| true) {
                times.push(now.as_nanos() / 1_000_000);
                continue;
            }
            now = p.poll_timeout().unwrap().max(now);
        }
        assert_eq!(times, vec![130, 140, 150]);
        // Twice the pace from the next packet on: its due time kept, then 5 ms apart.
        let double = Pace::from_multiplier(2.0).unwrap();
        p.handle_pace(StreamId(1), double);
        let mut rest = Vec::new();
        while let Some(t) = p.poll_timeout() {
            now = t.max(now);
            while let Some(Transmit::Rtp { .. }) = p.poll_transmit(now, |_| true) {
                rest.push(now.as_nanos() / 1_000_000);
            }
        }
        assert_eq!(rest, vec![160, 165, 170, 175, 180, 185, 190]);
        // A cluster share has not the bytes before its packets: never rate-paced.
        let mut s = Pacer::new(smooth_config());
        share(&mut s, RtcpMode::None);
        assert!(!s.handle_smooth(StreamId(1), Some(56_400)));
    }

    #[test]
    fn a_rate_paced_stream_is_drawn_back_to_its_own_times_not_pinned_at_the_window() {
        // 940 bytes every 10 ms (94 bytes a ms) paced at 47: the byte clock falls behind.
        let run = |settle: Option<Duration>| {
            let config = PacerConfig { smooth_settle: settle, ..smooth_config() };
            let mut p = Pacer::new(config);
            setup(&mut p, 0);
            assert!(p.handle_smooth(StreamId(1), Some(47_000)));
            play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
            let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
            let block = sized_block(0, 0, &[5; 60]);
            p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block, Some(anchor));
            let (rtp, ..) = drive(&mut p, ms(2_000));
            // How far behind its own time each packet went, ms.
            rtp.iter().enumerate().map(|(k, r)| r.0 - 10 * k as u64).collect::<Vec<u64>>()
        };
        // Never drawn back: pinned at the window's late edge from the sixth packet on.
        let pinned = run(None);
        assert!(pinned[5..].iter().all(|&l| l == 50), "{pinned:?}");
        // Drawn back with a 25 ms settling time: twice the rate at 25 ms behind, so it settles
        // there, inside the window, and keeps the content's pace.
        let settled = run(Some(Duration::from_millis(25)));
        assert!(settled.iter().all(|&l| l < 50), "{settled:?}");
        assert!(settled[30..].iter().all(|&l| (23..=26).contains(&l)), "{settled:?}");
    }

    #[test]
    fn pace_set_before_the_anchor_applies_from_the_start() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        let half = Pace::from_multiplier(0.5).unwrap();
        p.handle_pace(StreamId(1), half);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 65_530);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 3), Some(anchor));
        assert!(
            p.poll_event()
                .is_some_and(|e| matches!(e, PacerEvent::Paced { pace, .. } if pace == half))
        );
        let (rtp, ..) = drive(&mut p, ms(1_000));
        assert_eq!(rtp.iter().map(|r| r.0).collect::<Vec<_>>(), vec![0, 20, 40]);
    }

    #[test]
    fn range_end_stops_early_and_underrun_is_counted() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 5);
        let end = Some(MediaTime::from_nanos(25_000_000));
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), end, 65_530);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 2), Some(anchor));
        let (rtp, ..) = drive(&mut p, ms(100));
        assert_eq!(rtp.len(), 2);
        assert_eq!(p.stats().underruns, 1, "block 1 was not there when due");
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 2, 3), None);
        let (rtp, _, bye) = drive(&mut p, ms(1_000));
        assert_eq!(rtp.len(), 1, "packets at 20 ms only; 30 ms is past the range end");
        assert_eq!(bye.len(), 1);
    }

    /// A share of blocks 1 and 3 of 0..=3 (5 packets each), anchored by the origin at 100 ms.
    fn share(p: &mut Pacer<Vec<u8>>, rtcp: RtcpMode) {
        let first = |i: u64| Position::at(Gsn(5 * i), MediaTime::from_nanos(i * 50_000_000));
        let blocks: Arc<[ShareBlock]> = [1, 3]
            .into_iter()
            .map(|i| ShareBlock { index: BlockIndex(i as u32), first: first(i) })
            .collect();
        let setup = StreamSetup {
            share: Some(blocks),
            rtcp,
            lsn: true,
            ..StreamSetup::whole(StreamId(1), 9, 0, 0, BlockIndex(3))
        };
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        play_share(p, setup, first(0), Some(anchor));
    }

    /// Adds `setup` (a share) and plays run 1 from `start`, from block 0, on `anchor`.
    fn play_share(
        p: &mut Pacer<Vec<u8>>,
        setup: StreamSetup,
        start: Position,
        anchor: Option<Anchor>,
    ) {
        p.handle_add(setup);
        let play = PlayRun {
            run: RunId(1),
            start,
            from: BlockIndex(0),
            end: None,
            seq_offsets: single_offset(0),
            anchor,
            trick: None,
        };
        p.handle_play(Instant::ZERO, StreamId(1), play);
    }

    /// The report of the first [`PacerEvent::Stopped`] the pacer has to give.
    fn stopped_report(p: &mut Pacer<Vec<u8>>) -> RunReport {
        std::iter::from_fn(|| p.poll_event())
            .find_map(|e| match e {
                PacerEvent::Stopped { report, .. } => Some(report),
                _ => None,
            })
            .unwrap()
    }

    #[test]
    fn a_share_sends_its_blocks_in_order_on_the_origin_clock_with_lsns() {
        let mut p = Pacer::new(PacerConfig::default());
        share(&mut p, RtcpMode::None);
        // Out of order: block 3 first.
        p.handle_block(StreamId(1), RunId(1), BlockIndex(3), block(3, 15, 5), None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        let mut got = Vec::new();
        let mut now = Instant::ZERO;
        while now <= ms(1_000) {
            while let Some(t) = p.poll_transmit(now, |_| true) {
                match t {
                    Transmit::Rtp { seq, lsn, .. } => {
                        got.push((now.as_nanos() / 1_000_000, seq, lsn))
                    }
                    Transmit::Rtcp { .. } => panic!("a share without RTCP sent some"),
                }
            }
            match p.poll_timeout() {
                Some(t) if t > now => now = t,
                _ => break,
            }
        }
        let seqs: Vec<u16> = got.iter().map(|g| g.1).collect();
        assert_eq!(seqs, vec![5, 6, 7, 8, 9, 15, 16, 17, 18, 19], "GSNs of its blocks only");
        assert_eq!(got[0].0, 150, "packet 5 (50 ms) at anchor + 50 ms");
        assert_eq!(got[5].0, 250);
        let lsns: Vec<u16> = got.iter().filter_map(|g| g.2).collect();
        assert_eq!(lsns, (1..=10).collect::<Vec<_>>(), "LSN counts this node's packets");
        let ended =
            std::iter::from_fn(|| p.poll_event()).find(|e| matches!(e, PacerEvent::Ended { .. }));
        assert!(ended.is_some());
    }

    /// Sends what is due from `from` to `until`: (ms, seq) of each RTP packet. Returns the time
    /// reached.
    fn drive_from(
        p: &mut Pacer<Vec<u8>>,
        from: Instant,
        until: Instant,
        got: &mut Vec<(u64, u16)>,
    ) -> Instant {
        let mut now = from;
        while now <= until {
            while let Some(t) = p.poll_transmit(now, |_| true) {
                if let Transmit::Rtp { seq, .. } = t {
                    got.push((now.as_nanos() / 1_000_000, seq));
                }
            }
            match p.poll_timeout() {
                Some(t) if t > now && t <= until => now = t,
                _ => break,
            }
        }
        until
    }

    #[test]
    fn a_running_share_gains_blocks_sends_the_overdue_first_and_resends_nothing() {
        let mut p = Pacer::new(PacerConfig::default());
        share(&mut p, RtcpMode::None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(3), block(3, 15, 5), None);
        let mut got = Vec::new();
        // Up to 265 ms: block 1 sent, block 3 begun (packets 15 and 16 at 250 and 260 ms).
        let now = drive_from(&mut p, Instant::ZERO, ms(265), &mut got);
        assert_eq!(got.iter().map(|g| g.1).collect::<Vec<_>>(), vec![5, 6, 7, 8, 9, 15, 16]);
        // Blocks 0 and 2 are taken over (block 1 is its own already: ignored).
        let first = |i: u64| Position::at(Gsn(5 * i), MediaTime::from_nanos(i * 50_000_000));
        let added: Vec<ShareBlock> = [2, 0, 1]
            .iter()
            .map(|&i| ShareBlock { index: BlockIndex(i), first: first(i.into()) })
            .collect();
        assert!(p.handle_extend(now, StreamId(1), RunId(1), &added, MediaTime::ZERO));
        assert!(
            !p.handle_extend(now, StreamId(1), RunId(2), &added, MediaTime::ZERO),
            "another run"
        );
        // They arrive out of order, after a while.
        let now = drive_from(&mut p, now, ms(280), &mut got);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(2), block(2, 10, 5), None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), None);
        // Packet 17 was due at 270 ms but waits for the overdue blocks.
        drive_from(&mut p, now, ms(1_000), &mut got);
        let seqs: Vec<u16> = got.iter().map(|g| g.1).collect();
        assert_eq!(
            seqs,
            vec![5, 6, 7, 8, 9, 15, 16, 0, 1, 2, 3, 4, 10, 11, 12, 13, 14, 17, 18, 19],
            "overdue blocks first in index order, then the share resumes; nothing twice"
        );
        // Not at once: from the takeover (265 ms) at 1.25 times the share's byte rate (a block
        // of 940 bytes per 50 ms of media: a 188-byte packet every 8 ms), those due by the time
        // the blocks came (280 ms) together; the share's own packets after them (17-19, due at
        // 270-290 ms) on that clock too, until they are due on their own.
        let times: Vec<u64> = got[7..].iter().map(|g| g.0).collect();
        assert_eq!(
            times,
            [280, 280, 281, 289, 297, 305, 313, 321, 329, 337, 345, 353, 361],
            "catch-up at 1.25x: {got:?}"
        );
        let events: Vec<_> = std::iter::from_fn(|| p.poll_event()).collect();
        assert!(events.iter().any(|e| matches!(e, PacerEvent::Ended { .. })), "{events:?}");
        assert!(
            !p.handle_extend(ms(1_000), StreamId(1), RunId(1), &added, MediaTime::ZERO),
            "nothing new for a run that is over"
        );
        // A block gained after the end (its node lost late) revives the run: caught up from
        // then at 1.25x (overdue), nothing of the share sent again, then the end once more.
        let late = [ShareBlock { index: BlockIndex(4), first: first(4) }];
        assert!(p.handle_extend(ms(1_000), StreamId(1), RunId(1), &late, MediaTime::ZERO));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(4), block(4, 20, 5), None);
        let mut more = Vec::new();
        drive_from(&mut p, ms(1_000), ms(2_000), &mut more);
        assert_eq!(
            more,
            [(1_000, 20), (1_008, 21), (1_016, 22), (1_024, 23), (1_032, 24)],
            "block 4 alone, at 1.25x from the takeover"
        );
        let events: Vec<_> = std::iter::from_fn(|| p.poll_event()).collect();
        assert!(events.iter().any(|e| matches!(e, PacerEvent::Ended { .. })), "{events:?}");
    }

    #[test]
    fn a_takeover_catches_up_at_a_quarter_over_the_share_rate_then_keeps_its_clock() {
        let mut p = Pacer::new(PacerConfig::default());
        let first = |i: u64| Position::at(Gsn(5 * i), MediaTime::from_nanos(i * 50_000_000));
        let own: Arc<[ShareBlock]> = (1..20)
            .step_by(2)
            .map(|i| ShareBlock { index: BlockIndex(i as u32), first: first(i) })
            .collect();
        let setup = StreamSetup {
            share: Some(own),
            rtcp: RtcpMode::None,
            ..StreamSetup::whole(StreamId(1), 9, 0, 0, BlockIndex(19))
        };
        play_share(&mut p, setup, first(0), Some(Anchor { wall: ms(100), media: MediaTime::ZERO }));
        let deliver = |p: &mut Pacer<Vec<u8>>, blocks: std::iter::StepBy<std::ops::Range<u32>>| {
            for i in blocks {
                let b = block(i, 5 * u64::from(i), 5);
                p.handle_block(StreamId(1), RunId(1), BlockIndex(i), b, None);
            }
        };
        deliver(&mut p, (1..20).step_by(2));
        let mut got = Vec::new();
        let now = drive_from(&mut p, Instant::ZERO, ms(265), &mut got);
        // Every other block is taken over at 265 ms: blocks 0 and 2 are overdue.
        let taken: Vec<ShareBlock> = (0..20)
            .step_by(2)
            .map(|i| ShareBlock { index: BlockIndex(i), first: first(i.into()) })
            .collect();
        assert!(p.handle_extend(now, StreamId(1), RunId(1), &taken, MediaTime::ZERO));
        deliver(&mut p, (0..20).step_by(2));
        drive_from(&mut p, now, ms(2_000), &mut got);
        let after: Vec<(u64, u16)> = got.iter().copied().filter(|g| g.0 >= 265).collect();
        let seqs: Vec<u16> = after.iter().map(|g| g.1).collect();
        let want: Vec<u16> = (0..5).chain(10..15).chain(17..100).collect();
        assert_eq!(seqs, want, "the overdue blocks, then the rest in order, each once");
        // A 188-byte packet per 10 ms of media is the share's rate from then on: at 1.25 times
        // that, one every 8 ms from the takeover, until a packet is due on its own clock
        // (packet 55 at 650 ms; the 48th sent, 8 ms × 48 after 265 ms is 649 ms).
        for (k, &(t, seq)) in after.iter().enumerate() {
            let (paced, own) = (265 + 8 * k as u64, 100 + 10 * u64::from(seq));
            assert_eq!(
                t,
                paced.max(own).max(if k < 3 { 265 } else { 0 }),
                "packet {seq}: {after:?}"
            );
            assert_eq!(t <= paced, seq < 55, "caught up at packet 55: {after:?}");
        }
    }

    /// A share of blocks 1, 3, 5 and 7 (block `i`: GSNs 5i..5i+4, 10 ms apart from media time
    /// 50i ms; packet `g` due at 100 + 10g ms), every block delivered, held past 750 ms of
    /// lateness for 300 ms.
    fn held_share() -> Pacer<Vec<u8>> {
        let config = PacerConfig {
            hold_after: Some(Duration::from_millis(750)),
            hold_window: Duration::from_millis(300),
            ..PacerConfig::default()
        };
        let mut p = Pacer::new(config);
        let first = |i: u64| Position::at(Gsn(5 * i), MediaTime::from_nanos(i * 50_000_000));
        let blocks: Arc<[ShareBlock]> = [1, 3, 5, 7]
            .into_iter()
            .map(|i| ShareBlock { index: BlockIndex(i as u32), first: first(i) })
            .collect();
        let setup = StreamSetup {
            share: Some(blocks),
            rtcp: RtcpMode::None,
            ..StreamSetup::whole(StreamId(1), 9, 0, 0, BlockIndex(7))
        };
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        play_share(&mut p, setup, first(0), Some(anchor));
        for i in [1, 3, 5, 7] {
            p.handle_block(
                StreamId(1),
                RunId(1),
                BlockIndex(i),
                block(i, 5 * u64::from(i), 5),
                None,
            );
        }
        p
    }

    fn seqs(got: &[(u64, u16)]) -> Vec<u16> {
        got.iter().map(|g| g.1).collect()
    }

    /// [`held_share`] driven to 165 ms: packets 5 and 6 sent, 7 due at 170 ms.
    fn held_share_under_way() -> Pacer<Vec<u8>> {
        let mut p = held_share();
        let mut got = Vec::new();
        drive_from(&mut p, Instant::ZERO, ms(165), &mut got);
        assert_eq!(seqs(&got), [5, 6]);
        p
    }

    /// [`held_share_under_way`] that stood still until 2 s: packet 7, due at 170 ms, is 1.83 s
    /// late; held, nothing sent.
    fn held_share_resumed() -> Pacer<Vec<u8>> {
        let mut p = held_share_under_way();
        let mut got = Vec::new();
        drive_from(&mut p, ms(2_000), ms(2_000), &mut got);
        assert!(got.is_empty(), "held: {got:?}");
        p
    }

    /// Every packet of [`held_share`] after packet 6.
    const AFTER_6: [u16; 18] =
        [7, 8, 9, 15, 16, 17, 18, 19, 25, 26, 27, 28, 29, 35, 36, 37, 38, 39];

    #[test]
    fn a_share_that_stood_still_holds_its_overdue_packets_and_sends_them_if_nobody_took_over() {
        let mut p = held_share_resumed();
        let mut got = Vec::new();
        assert_eq!(p.poll_timeout(), Some(ms(2_300)));
        // Nobody said it was taken over: at the window's end, everything overdue goes.
        drive_from(&mut p, ms(2_300), ms(2_300), &mut got);
        assert_eq!(seqs(&got), AFTER_6);
        assert!(got.iter().all(|g| g.0 == 2_300));
    }

    #[test]
    fn a_share_late_by_less_than_a_suspicion_is_not_held() {
        let mut p = held_share_under_way();
        let mut got = Vec::new();
        // 630 ms late: nobody can have taken over yet; sent at once.
        drive_from(&mut p, ms(800), ms(800), &mut got);
        assert_eq!(seqs(&got), AFTER_6);
    }

    #[test]
    fn a_share_taken_over_while_it_stood_still_sends_only_its_part_outside_the_takeover() {
        let mut p = held_share_resumed();
        let mut got = Vec::new();
        // The others took over from media time 80 ms (packet 8): packet 7 is still its own.
        let from = MediaTime::from_nanos(80_000_000);
        assert!(p.handle_withhold(ms(2_000), StreamId(1), RunId(1), from, None, None));
        drive_from(&mut p, ms(2_000), ms(2_000), &mut got);
        assert_eq!(seqs(&got), [7]);
        // It waits for the word: nothing more, whenever asked (within `release_wait`).
        drive_from(&mut p, ms(2_001), ms(3_900), &mut got);
        assert_eq!(seqs(&got), [7]);
        assert_eq!(p.sent_through(ms(3_900)), Some(ms(3_900)), "waiting holds nothing back");
        // Given back after the block holding 260 ms (block 5): blocks up to 5 are the takers',
        // block 7 its own again, overdue, sent at once.
        assert!(p.handle_release(StreamId(1), RunId(1), MediaTime::from_nanos(260_000_000)));
        got.clear();
        drive_from(&mut p, ms(3_900), ms(3_900), &mut got);
        assert_eq!(seqs(&got), [35, 36, 37, 38, 39]);
        assert_eq!(p.stats().release_timeouts, 0);
        // Another run forgets it.
        assert!(!p.handle_release(StreamId(1), RunId(2), MediaTime::ZERO));
    }

    #[test]
    fn a_withheld_share_whose_release_never_comes_takes_its_part_back_on_its_own_word() {
        let mut p = held_share_under_way();
        let mut got = Vec::new();
        // Told at 260 ms (media 160 ms, in block 3) that its part was taken over from 80 ms.
        let from = MediaTime::from_nanos(80_000_000);
        assert!(p.handle_withhold(ms(260), StreamId(1), RunId(1), from, None, None));
        drive_from(&mut p, ms(260), ms(2_259), &mut got);
        assert_eq!(seqs(&got), [7]);
        // The give-back point was lost (a broken connection): after `release_wait` it passes
        // over what fell due before it was told (blocks 1 and 3: the takers sent them) and
        // sends the rest, late and perhaps twice, rather than leave a hole.
        got.clear();
        drive_from(&mut p, ms(2_260), ms(2_260), &mut got);
        assert_eq!(seqs(&got), [25, 26, 27, 28, 29, 35, 36, 37, 38, 39]);
        assert_eq!(p.stats().release_timeouts, 1);
    }

    #[test]
    fn a_share_holds_back_only_the_blocks_its_takers_took() {
        let mut p = held_share_under_way();
        let mut got = Vec::new();
        // One node took blocks 3 and 7 over from 80 ms, given back after block 5's (260 ms):
        // block 3 is passed over, the rest is this node's (overdue: sent when the hold ends,
        // as another taker's word for them may be on its way).
        let taken = [BlockIndex(3), BlockIndex(7)];
        let from = MediaTime::from_nanos(80_000_000);
        let until = Some(MediaTime::from_nanos(260_000_000));
        assert!(p.handle_withhold(ms(2_000), StreamId(1), RunId(1), from, Some(&taken), until));
        drive_from(&mut p, ms(2_000), ms(2_299), &mut got);
        assert_eq!(seqs(&got), [0u16; 0], "a word for some blocks does not end the hold");
        drive_from(&mut p, ms(2_300), ms(2_300), &mut got);
        assert_eq!(seqs(&got), [7, 8, 9, 25, 26, 27, 28, 29, 35, 36, 37, 38, 39]);
    }

    /// Block `i` of [`held_share`]'s object as a [`ShareBlock`].
    fn held_block(i: u32) -> ShareBlock {
        let first =
            Position::at(Gsn(5 * u64::from(i)), MediaTime::from_nanos(u64::from(i) * 50_000_000));
        ShareBlock { index: BlockIndex(i), first }
    }

    #[test]
    fn a_block_taken_over_while_withheld_is_sent_before_the_give_back_point() {
        // Its whole part was taken over from 80 ms, given back after block 5's (260 ms); then
        // another node is lost and this one takes its block 4 over from 200 ms. Block 4 is not
        // the part it was told it was lost for: it is sent (it was passed over, a hole).
        let mut p = held_share_resumed();
        let mut got = Vec::new();
        let from = MediaTime::from_nanos(80_000_000);
        let until = Some(MediaTime::from_nanos(260_000_000));
        assert!(p.handle_withhold(ms(2_000), StreamId(1), RunId(1), from, None, until));
        let at = MediaTime::from_nanos(200_000_000);
        assert!(p.handle_extend(ms(2_000), StreamId(1), RunId(1), &[held_block(4)], at));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(4), block(4, 20, 5), None);
        drive_from(&mut p, ms(2_000), ms(3_000), &mut got);
        assert_eq!(seqs(&got), [7, 20, 21, 22, 23, 24, 35, 36, 37, 38, 39]);
    }

    #[test]
    fn its_own_block_withheld_for_a_taker_lost_since_is_its_own_again() {
        // A taker took blocks 3 and 5 over from 80 ms, given back after block 5's; it is lost
        // in turn (from 120 ms) before it sent block 3, which is this node's to send again.
        let mut p = held_share_resumed();
        let mut got = Vec::new();
        let from = MediaTime::from_nanos(80_000_000);
        let until = Some(MediaTime::from_nanos(260_000_000));
        let taken = [BlockIndex(3), BlockIndex(5)];
        assert!(p.handle_withhold(ms(2_000), StreamId(1), RunId(1), from, Some(&taken), until));
        let lost = MediaTime::from_nanos(120_000_000);
        assert!(p.handle_extend(ms(2_000), StreamId(1), RunId(1), &[held_block(3)], lost));
        drive_from(&mut p, ms(2_000), ms(2_300), &mut got);
        assert_eq!(seqs(&got), [7, 8, 9, 15, 16, 17, 18, 19, 35, 36, 37, 38, 39]);

        // The same loss after its run ended (block 3 passed over long since): the run goes on
        // with block 3, delivered again, from where the taker had got (170 ms).
        let mut p = held_share_resumed();
        got.clear();
        assert!(p.handle_withhold(ms(2_000), StreamId(1), RunId(1), from, Some(&taken), until));
        drive_from(&mut p, ms(2_000), ms(2_300), &mut got);
        assert_eq!(seqs(&got), [7, 8, 9, 35, 36, 37, 38, 39]);
        got.clear();
        let lost = MediaTime::from_nanos(170_000_000);
        assert!(p.handle_extend(ms(2_400), StreamId(1), RunId(1), &[held_block(3)], lost));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(3), block(3, 15, 5), None);
        drive_from(&mut p, ms(2_400), ms(3_000), &mut got);
        assert_eq!(seqs(&got), [17, 18, 19]);
        // A block it sent itself (block 1, not withheld) is not sent again: its end stands,
        // reported again (its node told the origin to wait for a revival).
        while p.poll_event().is_some() {}
        assert!(!p.handle_extend(ms(3_000), StreamId(1), RunId(1), &[held_block(1)], lost));
        let again = std::iter::from_fn(|| p.poll_event());
        assert!(again.into_iter().any(|e| matches!(e, PacerEvent::Ended { .. })));
    }

    #[test]
    fn a_share_told_by_one_taker_waits_out_its_hold_for_the_others_word() {
        // Held from 2 s (until 2.3 s). Two nodes took its part over from 80 ms, each the
        // blocks whose next copy it holds; their words come one after the other. Sending the
        // blocks outside the first word at once sent the second taker's twice (seen in the
        // stand-still test: whole blocks from the resumed origin, duplicates at the clients).
        let mut p = held_share_resumed();
        let mut got = Vec::new();
        let from = MediaTime::from_nanos(80_000_000);
        let until = Some(MediaTime::from_nanos(260_000_000));
        let first = [BlockIndex(3)];
        assert!(p.handle_withhold(ms(2_000), StreamId(1), RunId(1), from, Some(&first), until));
        drive_from(&mut p, ms(2_000), ms(2_100), &mut got);
        assert_eq!(seqs(&got), [0u16; 0], "still held: the other taker's word may come");
        let both = [BlockIndex(1), BlockIndex(3), BlockIndex(5)];
        assert!(p.handle_withhold(ms(2_100), StreamId(1), RunId(1), from, Some(&both), until));
        drive_from(&mut p, ms(2_100), ms(2_300), &mut got);
        // Packet 7 is before the takeover; blocks 1, 3 and 5 are the takers' up to the
        // give-back point; block 7 is after it, this node's again.
        assert_eq!(seqs(&got), [7, 35, 36, 37, 38, 39]);
        assert!(got.iter().all(|g| g.0 == 2_300), "at the hold's end: {got:?}");
    }

    #[test]
    fn blocks_given_back_after_they_were_read_are_passed_over_and_reported_done() {
        let mut p = held_share();
        let mut got = Vec::new();
        drive_from(&mut p, Instant::ZERO, ms(160), &mut got);
        // Blocks 3 and 7 go back to their node, read already: not sent, but done.
        assert!(p.handle_pass_over(StreamId(1), RunId(1), &[BlockIndex(3), BlockIndex(7)]));
        drive_from(&mut p, ms(161), ms(1_000), &mut got);
        assert_eq!(seqs(&got), [5, 6, 7, 8, 9, 25, 26, 27, 28, 29]);
        let done: Vec<BlockIndex> = std::iter::from_fn(|| p.poll_event())
            .filter_map(|e| match e {
                PacerEvent::BlockDone { index, .. } => Some(index),
                _ => None,
            })
            .collect();
        assert_eq!(done, [1, 3, 5, 7].map(BlockIndex));
    }

    #[test]
    fn a_block_taken_over_is_sent_from_where_the_lost_node_had_got() {
        let mut p = Pacer::new(PacerConfig::default());
        share(&mut p, RtcpMode::None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        let mut got = Vec::new();
        let now = drive_from(&mut p, Instant::ZERO, ms(130), &mut got);
        // Block 2 (packets 10–14, due 100–140 ms) is taken over from 125 ms: the lost node
        // had sent packets 10, 11 and 12.
        let first = Position::at(Gsn(10), MediaTime::from_nanos(100_000_000));
        let taken = [ShareBlock { index: BlockIndex(2), first }];
        assert!(p.handle_extend(
            now,
            StreamId(1),
            RunId(1),
            &taken,
            MediaTime::from_nanos(125_000_000)
        ));
        for (i, g) in [(2, 10), (3, 15)] {
            p.handle_block(StreamId(1), RunId(1), BlockIndex(i), block(i, g, 5), None);
        }
        drive_from(&mut p, now, ms(1_000), &mut got);
        let seqs: Vec<u16> = got.iter().map(|g| g.1).collect();
        let want: Vec<u16> = (5..10).chain(13..20).collect();
        assert_eq!(seqs, want, "block 2 from packet 13 on, then block 3");
    }

    #[test]
    fn a_share_gives_back_blocks_it_has_not_received_and_sends_the_rest() {
        let mut p = Pacer::new(PacerConfig::default());
        share(&mut p, RtcpMode::None);
        let first = |i: u64| Position::at(Gsn(5 * i), MediaTime::from_nanos(i * 50_000_000));
        let taken: Vec<ShareBlock> = [2, 4]
            .iter()
            .map(|&i| ShareBlock { index: BlockIndex(i), first: first(i.into()) })
            .collect();
        assert!(p.handle_extend(Instant::ZERO, StreamId(1), RunId(1), &taken, MediaTime::ZERO));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(2), block(2, 10, 5), None);
        let mut got = Vec::new();
        let now = drive_from(&mut p, Instant::ZERO, ms(170), &mut got);
        // Block 2 is held (delivered): it stays; block 4 goes; block 3 is its own.
        assert!(!p.handle_give_back(StreamId(1), RunId(2), &[BlockIndex(2), BlockIndex(4)]));
        assert!(p.handle_give_back(StreamId(1), RunId(1), &[BlockIndex(2), BlockIndex(4)]));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(3), block(3, 15, 5), None);
        drive_from(&mut p, now, ms(1_000), &mut got);
        let seqs: Vec<u16> = got.iter().map(|g| g.1).collect();
        assert_eq!(seqs, (5..20).collect::<Vec<u16>>(), "blocks 1, 2 and 3, not 4");
        let events: Vec<_> = std::iter::from_fn(|| p.poll_event()).collect();
        assert!(events.iter().any(|e| matches!(e, PacerEvent::Ended { .. })), "{events:?}");
    }

    #[test]
    fn a_share_gains_later_blocks_in_its_walk() {
        let mut p = Pacer::new(PacerConfig::default());
        share(&mut p, RtcpMode::None);
        let first = |i: u64| Position::at(Gsn(5 * i), MediaTime::from_nanos(i * 50_000_000));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        let mut got = Vec::new();
        let now = drive_from(&mut p, Instant::ZERO, ms(170), &mut got);
        // Block 2 (after the current one, not due yet) joins the walk in index order.
        assert!(p.handle_extend(
            now,
            StreamId(1),
            RunId(1),
            &[ShareBlock { index: BlockIndex(2), first: first(2) }],
            MediaTime::ZERO
        ));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(3), block(3, 15, 5), None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(2), block(2, 10, 5), None);
        drive_from(&mut p, now, ms(1_000), &mut got);
        let seqs: Vec<u16> = got.iter().map(|g| g.1).collect();
        assert_eq!(seqs, (5..20).collect::<Vec<u16>>());
        assert_eq!(got[5].0, 200, "block 2 on the clock");
    }

    #[test]
    fn a_cutoff_stop_sends_up_to_the_cutoff_and_reports_the_next_packet() {
        let mut p = Pacer::new(PacerConfig::default());
        share(&mut p, RtcpMode::None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(3), block(3, 15, 5), None);
        // Cutoff at media 70 ms: packets 5, 6, 7 (50, 60, 70 ms) go, 8 does not.
        assert_eq!(
            p.handle_stop(
                ms(0),
                StreamId(1),
                RunId(1),
                Some(MediaTime::from_nanos(70_000_000)),
                None
            ),
            None
        );
        let (rtp, ..) = drive(&mut p, ms(1_000));
        assert_eq!(rtp.iter().map(|r| r.1).collect::<Vec<_>>(), vec![5, 6, 7]);
        let stopped = stopped_report(&mut p);
        assert_eq!(stopped.next.map(|n| n.gsn), Some(Gsn(8)));
        assert_eq!(stopped.last_sent.map(|n| n.gsn), Some(Gsn(7)));
    }

    #[test]
    fn a_cutoff_before_a_share_block_reports_that_blocks_first_packet() {
        let mut p = Pacer::new(PacerConfig::default());
        share(&mut p, RtcpMode::None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        // Cutoff at 20 ms: nothing of this share is due before it.
        p.handle_stop(ms(0), StreamId(1), RunId(1), Some(MediaTime::from_nanos(20_000_000)), None);
        let (rtp, ..) = drive(&mut p, ms(1_000));
        assert!(rtp.is_empty());
        let report = stopped_report(&mut p);
        assert_eq!(report.next.map(|n| n.gsn), Some(Gsn(5)));
    }

    /// A stop before a block of the share that was not read yet reports that block's first
    /// packet, counting each track's packets as far as this node sent them: the block's own
    /// counts (the object's) would run past what the other nodes sent.
    #[test]
    fn a_stop_before_a_block_not_read_counts_the_tracks_this_node_sent() {
        let mut p = Pacer::new(PacerConfig::default());
        // Blocks 0 and 4 of a native object (block `i`: GSNs 6i..6i+5): track `t`'s count at
        // block 4's first packet is 12.
        let first = |i: u64| Position {
            gsn: Gsn(6 * i),
            time: MediaTime::from_nanos(i * 60_000_000),
            tracks: TrackSeqs::new(&[3 * i as u32, 3 * i as u32]),
        };
        let blocks: Arc<[ShareBlock]> = [0, 4]
            .into_iter()
            .map(|i| ShareBlock { index: BlockIndex(i as u32), first: first(i) })
            .collect();
        let setup = StreamSetup {
            share: Some(blocks),
            rtcp: RtcpMode::None,
            last_block: BlockIndex(4),
            ..native_setup(true)
        };
        play_share(&mut p, setup, first(0), None);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), native_block(0, 0, 6), Some(anchor));
        // Cutoff at 100 ms: block 0 (0 to 50 ms) goes whole; block 4 (240 ms) is not read yet.
        p.handle_stop(ms(0), StreamId(1), RunId(1), Some(MediaTime::from_nanos(100_000_000)), None);
        let (rtp, ..) = drive(&mut p, ms(1_000));
        assert_eq!(rtp.len(), 6);
        let report = stopped_report(&mut p);
        let next = report.next.unwrap();
        assert_eq!(next.gsn, Gsn(24));
        assert_eq!(next.tracks.as_slice(), [3, 3], "the packets this node sent, track by track");
    }

    #[test]
    fn the_origin_sends_timed_srs_and_a_bye_when_told() {
        let mut p = Pacer::new(PacerConfig {
            rtcp_interval: Duration::from_millis(100),
            ..PacerConfig::default()
        });
        share(&mut p, RtcpMode::Timer);
        let (_, sr, bye) = drive(&mut p, ms(450));
        assert_eq!(sr, 4, "SRs at 100, 200, 300, 400 ms with no packet sent");
        assert!(bye.is_empty());
        p.handle_bye(ms(450), StreamId(1), None);
        let mut byes = 0;
        while let Some(t) = p.poll_transmit(ms(2_000), |_| true) {
            if let Transmit::Rtcp { bye: true, .. } = t {
                byes += 1;
            }
        }
        assert_eq!(byes, 1);
    }

    #[test]
    fn a_frozen_share_sends_nothing_and_thawed_on_a_repinned_clock_goes_on_at_its_pace() {
        // A relayed session's feeder whose origin fell silent at 165 ms: frozen, nothing goes
        // and it does not hold back how far this node's senders have got.
        let mut p = held_share_under_way();
        assert!(p.handle_freeze(StreamId(1), RunId(1), true));
        assert!(!p.handle_freeze(StreamId(1), RunId(2), true), "another run");
        let mut got = Vec::new();
        drive_from(&mut p, ms(165), ms(2_000), &mut got);
        assert!(got.is_empty(), "frozen: {got:?}");
        assert_eq!(p.sent_through(ms(2_000)), None);
        // The origin speaks again, its clock re-pinned 1.9 s later: packet 7 (170 ms) is due at
        // 2070 ms, and the rest at their pace after it; nothing at once, nothing held.
        let repinned = Anchor { wall: ms(2_000), media: MediaTime::ZERO };
        p.handle_reanchor(StreamId(1), RunId(1), repinned, Pace::NOMINAL);
        assert!(p.handle_freeze(StreamId(1), RunId(1), false));
        drive_from(&mut p, ms(2_000), ms(3_000), &mut got);
        assert_eq!(seqs(&got), AFTER_6);
        let at: Vec<u64> = got.iter().map(|g| g.0).collect();
        assert_eq!(&at[..3], [2_070, 2_080, 2_090]);
        assert!(got.iter().all(|&(t, g)| t == 2_000 + 10 * u64::from(g)), "{got:?}");

        // A share held on resuming from its own stall (the origin's): the re-pin ends the hold.
        let mut p = held_share_resumed();
        let repinned = Anchor { wall: ms(1_930), media: MediaTime::ZERO };
        p.handle_reanchor(StreamId(1), RunId(1), repinned, Pace::NOMINAL);
        let mut got = Vec::new();
        drive_from(&mut p, ms(2_000), ms(2_020), &mut got);
        assert_eq!(got.first(), Some(&(2_000, 7)), "due at 2000 ms on the new clock: {got:?}");
    }

    #[test]
    fn a_reanchor_applies_from_its_media_time() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        let start = Position::at(Gsn(0), MediaTime::ZERO);
        let run = PlayRun {
            run: RunId(1),
            start,
            from: BlockIndex(0),
            end: None,
            seq_offsets: single_offset(0),
            anchor: Some(anchor),
            trick: None,
        };
        p.handle_play(Instant::ZERO, StreamId(1), run);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), None);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        while p.poll_transmit(ms(15), |_| true).is_some() {}
        // From media 50 ms, twice as fast, pinned at wall 60 ms.
        let double = Pace::from_multiplier(2.0).unwrap();
        let new = Anchor { wall: ms(60), media: MediaTime::from_nanos(50_000_000) };
        p.handle_reanchor(StreamId(1), RunId(1), new, double);
        let (rtp, ..) = drive(&mut p, ms(1_000));
        let times: Vec<u64> = rtp.iter().filter(|r| r.0 >= 15).map(|r| r.0).collect();
        assert_eq!(times, vec![20, 30, 40, 60, 65, 70, 75, 80]);
    }

    /// A stream with no known end ends after the last block it is told of, with its BYE after
    /// its last packet however late that is; told after it sent that block, at once.
    #[test]
    fn a_stream_told_its_last_block_ends_after_it() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, u32::MAX);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 0);
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        p.handle_block(StreamId(1), RunId(1), BlockIndex(1), block(1, 5, 5), None);
        // Told before its last packets are due: they all go, then the BYE.
        p.handle_last(ms(100), StreamId(1), BlockIndex(1));
        let (rtp, _, bye) = drive(&mut p, ms(1_000));
        assert_eq!(rtp.len(), 10);
        assert_eq!(bye, vec![190 + 500]);
        // Told once it has sent everything it was given: it ends at once.
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, u32::MAX);
        play(&mut p, RunId(1), Position::at(Gsn(0), MediaTime::ZERO), None, 0);
        p.handle_block(StreamId(1), RunId(1), BlockIndex(0), block(0, 0, 5), Some(anchor));
        let (rtp, _, bye) = drive(&mut p, ms(1_000));
        assert_eq!((rtp.len(), bye.len()), (5, 0), "waits for more");
        p.handle_last(ms(1_000), StreamId(1), BlockIndex(0));
        let (_, _, bye) = drive(&mut p, ms(3_000));
        assert_eq!(bye, vec![1_500]);
    }
}
