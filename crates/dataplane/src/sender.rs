//! The sender thread: puts every stream's packets on the wire at their send times.
//!
//! Why a dedicated OS thread rather than tokio tasks: pacing is a timer problem with thousands of
//! deadlines per second, and the natural batch unit (one `sendmmsg` with the due packets of every
//! session) spans all streams. One thread owns the [`Pacer`] and the transports, is fed a closed
//! [`SenderCommand`] enum over one channel, and sleeps until the next packet is due — but wakes
//! at most once per quantum (`[sender] quantum_us`, 500 µs by default). With hundreds of streams
//! a packet is due every few microseconds, and waking for each one is costly (a `perf` profile
//! at 311 streams: the channel's timed receive, timers and context switches were about a fifth
//! of the thread's samples); a quantum turns those wake-ups into `sendmmsg` batches, for a
//! lateness of at most the quantum — far below a player's jitter buffer.
//!
//! A pass sends what is due for at most [`MAX_PASS`], then the thread reads its commands again:
//! its sockets block, so behind a full link a pass takes as long as the link does, and without
//! the bound an overloaded link's backlog held a TEARDOWN or the next PLAY for its whole length.
//!
//! What the sender has to tell the rest of the server (a block sent, a stream re-paced, a stream
//! ended) goes out as the pacer's [`PacerEvent`]s to the [`SenderSink`] it was built with: the
//! thread names no other owner's command type, and the server's wiring decides who hears what.
//!
//! UDP packets go out through the shared RTP socket in batches; RTCP through the shared RTCP
//! socket. Interleaved (TCP) packets are handed to their connection's writer task as
//! [`OutFrame`]s holding a reference to the block, never a copy; when a connection's queue is
//! full the stream waits (backpressure) instead of dropping or queueing without bound.

use std::collections::HashMap;
use std::net::{SocketAddr, UdpSocket};
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use isochron_base::{BlockIndex, Gsn, Instant, RunId, StreamId};
use isochron_diskio::AlignedBuf;
use isochron_rtp::{
    NtpTimestamp, RTP_HEADER_LEN, RTP_HEADER_LSN_LEN, RtpHeader, SenderReport, interleaved_prefix,
    rtcp,
};
use isochron_rtsp::server::rtp_seq;
use isochron_sched::Anchor;
use isochron_store::block::Block;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::clock::Clock;
use crate::net::{Batch, MAX_HEADER, UdpPair};
use crate::pacer::{
    Pacer, PacerConfig, PacerEvent, PacerStats, PlayRun, StreamOp, StreamProgress, StreamSetup,
    Transmit,
};
use crate::reseq::{Reseq, ReseqConfig, ReseqStats};
use crate::rtx::{RetransmitBuffer, RetransmitStats, RtxSetup, Sent};

/// Where the sender thread's events go. It is called on the sender thread between send passes, so
/// it should only hand the event on (a channel send), never block.
pub type SenderSink = Box<dyn Fn(PacerEvent) + Send>;

/// A block as the server holds it: parsed, checksum-verified, in an O_DIRECT-aligned buffer.
pub type SharedBlock = Arc<Block<AlignedBuf>>;

/// One interleaved frame for a connection's writer (RFC 2326 §10.12).
#[derive(Debug)]
pub enum OutFrame {
    /// An RTP packet: `$`, channel, length, the RTP header, then the payload from the block.
    Rtp {
        /// The 4-byte interleave prefix and the RTP header (12 bytes, 20 with the LSN
        /// extension), in the first `head_len` bytes.
        head: [u8; 4 + MAX_HEADER],
        /// How much of `head` is used.
        head_len: usize,
        /// The block holding the payload.
        block: SharedBlock,
        /// The packet's index in the block.
        packet: usize,
    },
    /// A whole frame with its interleave prefix: an RTCP compound packet, or an RTP packet
    /// relayed from another node.
    Owned(Vec<u8>),
    /// Close the connection once what is queued before this is written: a stream on it cannot
    /// go on without a hole (RTP over TCP is never cut silently; the player sees the close).
    Close,
}

impl OutFrame {
    /// The frame's bytes, in up to two slices.
    #[must_use]
    pub fn parts(&self) -> (&[u8], &[u8]) {
        match self {
            Self::Rtp { head, head_len, block, packet } => {
                (&head[..*head_len], block.packet(*packet).payload)
            }
            Self::Owned(b) => (b, &[]),
            Self::Close => (&[], &[]),
        }
    }
}

/// Where a stream's packets go.
#[derive(Clone, Debug)]
pub enum StreamTransport {
    /// UDP to the client's ports.
    Udp {
        /// Client RTP address.
        rtp: SocketAddr,
        /// Client RTCP address.
        rtcp: SocketAddr,
    },
    /// Interleaved on the RTSP connection.
    Interleaved {
        /// The connection's frame queue.
        frames: mpsc::Sender<OutFrame>,
        /// RTP channel.
        rtp_channel: u8,
        /// RTCP channel.
        rtcp_channel: u8,
    },
}

/// Commands to the sender thread.
#[derive(Debug)]
pub enum SenderCommand {
    /// A new stream.
    Add {
        /// Pacing parameters.
        setup: StreamSetup,
        /// Each track's transport, by track index (`None`: the client did not set it up).
        transports: Vec<Option<StreamTransport>>,
        /// The RTCP CNAME to announce.
        cname: String,
        /// The RFC 4588 RTX stream of each track (by index) its player negotiated:
        /// retransmissions go out in it (else as the packets were first sent).
        rtx: Vec<Option<RtxSetup>>,
        /// This node is the origin of a relayed session (relay delivery): the stream's packets
        /// come from its own pacer and from the other nodes, and leave resequenced
        /// ([`crate::reseq`]). The nodes' relay addresses, where requests for the holes go.
        relay: Option<Vec<SocketAddr>>,
    },
    /// A client's generic NACK (RFC 4585 §6.2.1) for the stream with SSRC `ssrc`: resend the
    /// packets numbered `seqs` that this node sent within the retransmission window.
    Nack {
        /// The media SSRC the NACK names.
        ssrc: u32,
        /// The sequence numbers asked for.
        seqs: Vec<u16>,
    },
    /// What the node asks of one of this shard's streams (the pacer's vocabulary).
    Stream(StreamOp),
    /// A block from the scheduler.
    Block {
        /// The stream.
        stream: StreamId,
        /// The run it was read for.
        run: RunId,
        /// Its index.
        index: BlockIndex,
        /// The block.
        block: SharedBlock,
        /// The pacing anchor, on the first block of a run.
        anchor: Option<Anchor>,
    },
    /// A running share gives back blocks it had taken over ([`Pacer::handle_give_back`]).
    GiveBack {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks given back.
        blocks: Vec<BlockIndex>,
    },
    /// An RTP packet another node sent this node to relay: it goes to the stream whose SSRC it
    /// carries, from this node's address (relay delivery).
    Relayed {
        /// The datagram.
        datagram: Vec<u8>,
    },
    /// Report counters.
    Stats {
        /// The reply.
        reply: oneshot::Sender<SenderStats>,
    },
    /// Report every stream's progress (position, pace, packets and bytes sent).
    Progress {
        /// The reply.
        reply: oneshot::Sender<Vec<StreamProgress>>,
    },
    /// Exit the thread.
    Shutdown,
}

/// Sender counters.
#[derive(Clone, Copy, Debug, Default)]
pub struct SenderStats {
    /// The pacer's counters.
    pub pacer: PacerStats,
    /// `sendmmsg` calls made.
    pub syscalls: u64,
    /// Datagrams the kernel refused.
    pub send_errors: u64,
    /// Streams registered.
    pub streams: usize,
    /// Packets relayed for other nodes.
    pub relayed: u64,
    /// Relayed packets for no known stream (dropped).
    pub relay_unknown: u64,
    /// Retransmission (RBEC) counters.
    pub retransmit: RetransmitStats,
    /// The relay resequencers' counters (relayed sessions' origins).
    pub reseq: ReseqStats,
    /// Relayed streams ended because a hole could not be filled and the client is on TCP.
    pub relay_cut: u64,
    /// RTP frames a connection's queue refused (never expected: `has_room` reserves for them).
    pub interleaved_lost: u64,
}

impl SenderStats {
    /// Adds another shard's counters to these (the largest lateness is the larger of the two).
    pub fn add(&mut self, o: &Self) {
        self.pacer.add(&o.pacer);
        self.syscalls += o.syscalls;
        self.send_errors += o.send_errors;
        self.streams += o.streams;
        self.relayed += o.relayed;
        self.relay_unknown += o.relay_unknown;
        self.retransmit.add(&o.retransmit);
        self.reseq.add(&o.reseq);
        self.relay_cut += o.relay_cut;
        self.interleaved_lost += o.interleaved_lost;
    }
}

struct StreamOut {
    /// By track index; `None` for a track not set up.
    tracks: Vec<Option<TrackOut>>,
    cname: String,
    /// Each track's RTX stream, by index, and its next sequence number.
    rtx: Vec<Option<(RtxSetup, u16)>>,
    /// The origin's resequencers of a relayed session.
    relay: Option<RelayIn>,
}

/// Where one track's packets go.
struct TrackOut {
    transport: StreamTransport,
    ssrc: u32,
}

impl StreamOut {
    fn track(&self, track: u8) -> Option<&TrackOut> {
        self.tracks.get(usize::from(track)).and_then(Option::as_ref)
    }
}

/// How far one sender thread has got ([`Pacer::sent_through`]), published for the cluster's
/// heartbeats: a peer that loses this node takes its part over from there
/// (`docs/design/takeover.md`). Written by the thread at most every [`PROGRESS_EVERY`], read
/// by anyone; a value read late is only cautious (it was true when written).
#[derive(Debug)]
pub struct SentThrough(AtomicU64);

/// How often a sender thread publishes its [`SentThrough`]: a pass over its streams, cheap
/// next to the packets sent meanwhile.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(10);

/// The longest one send pass runs before the thread handles its commands again. The sockets
/// block: behind a full link a pass lasts as long as the link takes to carry what is due, and
/// an overloaded link leaves every stream behind, so a pass that sent all of it held every
/// command (a TEARDOWN's removal, the next session's start) for the length of the backlog —
/// measured behind a 1 Gb/s link after a trial at 176 streams: a second, every new session's
/// start that late, and its overdue first second sent at once (`docs/results/fig3.md`).
pub const MAX_PASS: Duration = Duration::from_millis(5);

/// Transmits asked of the pacer between two readings of the clock against [`MAX_PASS`].
const PASS_CHECK_EVERY: u32 = 64;

impl SentThrough {
    /// Nothing published yet.
    #[must_use]
    pub fn new() -> Self {
        Self(AtomicU64::new(u64::MAX))
    }

    /// Publishes `t` (on the server's clock), or that no stream plays (`None`).
    pub fn publish(&self, t: Option<Instant>) {
        self.0.store(t.map_or(u64::MAX, Instant::as_nanos), Ordering::Relaxed);
    }

    /// What was last published, if anything: `None` before the first word, and while no
    /// stream plays (the thread then has nothing a peer could take over).
    #[must_use]
    pub fn read(&self) -> Option<Instant> {
        let v = self.0.load(Ordering::Relaxed);
        (v != u64::MAX).then(|| Instant::from_nanos(v))
    }
}

impl Default for SentThrough {
    fn default() -> Self {
        Self::new()
    }
}

/// Everything the thread needs.
pub struct SenderThread {
    /// The server's clock.
    pub clock: Clock,
    /// The thread's commands.
    pub rx: Receiver<SenderCommand>,
    /// The shared RTP/RTCP sockets.
    pub udp: Arc<UdpPair>,
    /// Where blocks sent, pace changes and ends of streams are reported.
    pub on_event: SenderSink,
    /// How often a playing stream sends an RTCP sender report.
    pub rtcp_interval: Duration,
    /// Most datagrams in one `sendmmsg` call.
    pub batch_packets: usize,
    /// Wake at most once per quantum (`[sender] quantum_us`): a packet leaves up to this late,
    /// and the packets due meanwhile go out together in `sendmmsg` batches.
    pub quantum: Duration,
    /// How long a UDP stream's packets are kept for retransmission (`[sender] retransmit_ms`).
    pub retransmit_window: Duration,
    /// Coalesce a stream's packets due together with UDP GSO (`[sender] gso`, where the
    /// kernel has it: [`crate::net::gso_supported`]).
    pub gso: bool,
    /// How many sender threads there are: the RTP frames of an RTSP connection's sessions may
    /// come from that many at once, so a connection's queue is written only while it has more
    /// free slots than that.
    pub shards: usize,
    /// Where the thread publishes how far it has got.
    pub sent_through: Arc<SentThrough>,
    /// In a cluster, a share overdue by more than this is held a moment before it is sent
    /// ([`PacerConfig::hold_after`]); `None` on a single node.
    pub hold_after: Option<Duration>,
    /// How long such a share is held ([`PacerConfig::hold_window`]).
    pub hold_window: Duration,
}

impl SenderThread {
    /// Runs until `Shutdown` or until every command sender is gone.
    pub fn run(self) {
        SenderLoop::new(self).run();
    }
}

/// The sender thread's state between two passes: the pacer, each stream's way out, the batch
/// being filled and the packets kept for retransmission. Each pass takes every command waiting
/// (one method per command, [`SenderLoop::handle`]), then sends everything due
/// ([`SenderLoop::send_due`]), then forwards the pacer's events.
struct SenderLoop {
    t: SenderThread,
    pacer: Pacer<AlignedBuf>,
    outs: HashMap<StreamId, StreamOut>,
    by_ssrc: HashMap<u32, (StreamId, u8)>,
    batch: Batch,
    /// Blocks referenced by the batch stay alive until it is sent.
    held: Vec<SharedBlock>,
    rtcp_buf: Vec<u8>,
    stats: SenderStats,
    kept: RetransmitBuffer<AlignedBuf>,
    resend_buf: Vec<u8>,
    /// The streams of relayed sessions this node is the origin of.
    relayed: Vec<StreamId>,
    /// Interleaved BYEs that found their connection's queue full, retried every quantum.
    late_byes: Vec<LateBye>,
    last_pass: Instant,
    published: Instant,
}

impl SenderLoop {
    fn new(t: SenderThread) -> Self {
        let pacer = Pacer::new(PacerConfig {
            rtcp_interval: t.rtcp_interval,
            hold_after: t.hold_after,
            hold_window: t.hold_window,
            ..PacerConfig::default()
        });
        Self {
            pacer,
            outs: HashMap::new(),
            by_ssrc: HashMap::new(),
            batch: Batch::with_capacity(t.batch_packets, t.gso),
            held: Vec::with_capacity(t.batch_packets),
            rtcp_buf: Vec::with_capacity(256),
            stats: SenderStats::default(),
            kept: RetransmitBuffer::new(t.retransmit_window),
            resend_buf: Vec::with_capacity(2048),
            relayed: Vec::new(),
            late_byes: Vec::new(),
            last_pass: t.clock.now(),
            published: Instant::ZERO,
            t,
        }
    }

    fn run(mut self) {
        loop {
            let Some(mut next) = self.wait() else { return };
            while let Some(cmd) = next.take().or_else(|| self.t.rx.try_recv().ok()) {
                if self.handle(cmd).is_break() {
                    return;
                }
            }
            self.send_due();
            while let Some(ev) = self.pacer.poll_event() {
                if let PacerEvent::Ended { stream, run, report } = &ev {
                    debug!(%stream, %run, last = ?report.last_sent, "end of run");
                }
                (self.t.on_event)(ev);
            }
        }
    }

    /// Waits for a command, or for the next due packet but no sooner than a quantum after the
    /// last send pass: `Some(None)` when it is time to send, `None` when every sender is gone.
    fn wait(&self) -> Option<Option<SenderCommand>> {
        let now = self.t.clock.now();
        let quantum_after = self.last_pass + self.t.quantum;
        // Resequenced packets waiting for room, and BYEs, are retried every quantum.
        let relay_wake = self
            .relayed
            .iter()
            .filter_map(|s| self.outs.get(s)?.relay.as_ref()?.poll_timeout(quantum_after))
            .chain((!self.late_byes.is_empty()).then_some(quantum_after))
            .min();
        let wake = match (self.pacer.poll_timeout(), relay_wake) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        match wake.map(|t| t.max(quantum_after)) {
            Some(t) if t <= now => Some(self.t.rx.try_recv().ok()),
            Some(t) => match self.t.rx.recv_timeout(t - now) {
                Ok(c) => Some(Some(c)),
                Err(RecvTimeoutError::Timeout) => Some(None),
                Err(RecvTimeoutError::Disconnected) => None,
            },
            None => self.t.rx.recv().ok().map(Some),
        }
    }

    /// One command; `Break` on `Shutdown`.
    fn handle(&mut self, cmd: SenderCommand) -> ControlFlow<()> {
        let now = || self.t.clock.now();
        match cmd {
            SenderCommand::Add { setup, transports, cname, rtx, relay } => {
                self.add(setup, transports, cname, rtx, relay);
            }
            SenderCommand::Nack { ssrc, seqs } => {
                let Some(&(stream, track)) = self.by_ssrc.get(&ssrc) else {
                    self.kept.handle_unknown();
                    return ControlFlow::Continue(());
                };
                let found = self.kept.handle_nack(now(), stream, track, seqs);
                if let Some(out) = self.outs.get_mut(&stream) {
                    for sent in found {
                        resend(&self.t.udp.rtp, out, track, &sent, &mut self.resend_buf);
                    }
                }
            }
            SenderCommand::Stream(op) => self.stream_op(op),
            SenderCommand::Block { stream, run, index, block, anchor } => {
                self.pacer.handle_block(stream, run, index, block, anchor);
            }
            SenderCommand::GiveBack { stream, run, blocks } => {
                self.pacer.handle_give_back(stream, run, &blocks);
            }
            SenderCommand::Relayed { datagram } => self.relayed_in(datagram),
            SenderCommand::Stats { reply } => {
                let _ = reply.send(self.snapshot());
            }
            SenderCommand::Progress { reply } => {
                let _ = reply.send(self.pacer.progress().collect());
            }
            SenderCommand::Shutdown => return ControlFlow::Break(()),
        }
        ControlFlow::Continue(())
    }

    /// Applies `op` to the pacer (and to the relay resequencer of a relayed session's origin).
    fn stream_op(&mut self, op: StreamOp) {
        let now = self.t.clock.now();
        match &op {
            StreamOp::Play { stream, play } => {
                if let Some(r) = self.outs.get_mut(stream).and_then(|o| o.relay.as_mut()) {
                    r.handle_play(play);
                }
            }
            StreamOp::Bye { stream, .. } => {
                if let Some(r) = self.outs.get_mut(stream).and_then(|o| o.relay.as_mut()) {
                    r.handle_end(now);
                }
            }
            StreamOp::Remove { stream } => return self.remove(*stream),
            _ => {}
        }
        self.pacer.handle_op(now, op);
    }

    /// A stream to send: its tracks' ways out, kept for retransmission when any goes over UDP,
    /// and (on a relayed session's origin) the resequencer its feeders' packets join.
    fn add(
        &mut self,
        setup: StreamSetup,
        transports: Vec<Option<StreamTransport>>,
        cname: String,
        rtx: Vec<Option<RtxSetup>>,
        relay: Option<Vec<SocketAddr>>,
    ) {
        let stream = setup.stream;
        let mut tracks = Vec::with_capacity(transports.len());
        for (i, transport) in transports.into_iter().enumerate() {
            let ssrc = setup.tracks.get(i).map_or(0, |t| t.ssrc);
            tracks.push(transport.map(|transport| {
                self.by_ssrc.insert(ssrc, (stream, i as u8));
                TrackOut { transport, ssrc }
            }));
        }
        let udp =
            tracks.iter().flatten().any(|t| matches!(t.transport, StreamTransport::Udp { .. }));
        if udp {
            self.kept.handle_add(stream);
        }
        let rtx = rtx.into_iter().map(|r| r.map(|r| (r, rand_seq(r.ssrc)))).collect();
        self.pacer.handle_add(setup);
        let relay = relay.map(|feeders| {
            self.relayed.push(stream);
            RelayIn::new(&tracks, feeders)
        });
        self.outs.insert(stream, StreamOut { tracks, cname, rtx, relay });
    }

    /// A packet a feeder relayed: into the origin's resequencer of the track whose SSRC it
    /// carries.
    fn relayed_in(&mut self, datagram: Vec<u8>) {
        let reseq = RtpHeader::parse(&datagram).ok().and_then(|(h, _)| {
            let &(stream, track) = self.by_ssrc.get(&h.ssrc)?;
            let relay = self.outs.get_mut(&stream)?.relay.as_mut()?;
            Some((relay.track_mut(track)?, h.sequence))
        });
        match reseq {
            Some((reseq, seq)) => {
                self.stats.relayed += 1;
                let d = Queued::Relayed(Arc::from(datagram));
                let _ = reseq.handle_packet(self.t.clock.now(), seq, d);
            }
            None => self.stats.relay_unknown += 1,
        }
    }

    /// A stream gone: its pacing, its kept packets, its ways out (and its resequencer's counts
    /// into the totals).
    fn remove(&mut self, stream: StreamId) {
        self.pacer.handle_remove(stream);
        self.kept.handle_remove(stream);
        if let Some(out) = self.outs.remove(&stream) {
            for t in out.tracks.iter().flatten() {
                self.by_ssrc.remove(&t.ssrc);
            }
            if let Some(r) = out.relay {
                self.stats.reseq.add(&r.stats());
                self.relayed.retain(|s| *s != stream);
            }
        }
    }

    /// What [`SenderCommand::Stats`] answers.
    fn snapshot(&mut self) -> SenderStats {
        self.stats.pacer = self.pacer.stats();
        self.stats.streams = self.pacer.stream_count();
        self.stats.retransmit = self.kept.stats();
        let mut now_stats = self.stats;
        for r in self.outs.values().filter_map(|o| o.relay.as_ref()) {
            now_stats.reseq.add(&r.stats());
        }
        now_stats
    }

    /// Sends what is due, in batches, for at most [`MAX_PASS`]; serves the relayed sessions'
    /// resequencers; retries the BYEs that waited for room.
    fn send_due(&mut self) {
        let now = self.t.clock.now();
        self.last_pass = now;
        let mut polls = 0u32;
        if now.saturating_duration_since(self.published) >= PROGRESS_EVERY {
            self.t.sent_through.publish(self.pacer.sent_through(now));
            self.published = now;
        }
        let shards = self.t.shards;
        loop {
            // Every track of a stream goes the same way (one connection when interleaved).
            let outs = &self.outs;
            let can_send = |s: StreamId| {
                let Some(o) = outs.get(&s) else { return true };
                let tracks = o.tracks.iter().flatten().count();
                o.tracks
                    .iter()
                    .flatten()
                    .next()
                    .is_none_or(|t| has_room(&t.transport, shards, tracks))
            };
            // A pass ends after MAX_PASS even with packets still due: the commands waiting
            // (a TEARDOWN's removal, a PLAY, a NACK) are handled before the next one.
            polls += 1;
            if polls.is_multiple_of(PASS_CHECK_EVERY)
                && self.t.clock.now().saturating_duration_since(now) >= MAX_PASS
            {
                break;
            }
            let Some(t) = self.pacer.poll_transmit(now, can_send) else { break };
            match t {
                Transmit::Rtp {
                    stream,
                    track,
                    payload_type,
                    block,
                    packet,
                    seq,
                    timestamp,
                    marker,
                    lsn,
                    block_end,
                } => {
                    let header =
                        RtpHeader { marker, payload_type, sequence: seq, timestamp, ssrc: 0 };
                    self.transmit_rtp(
                        now,
                        stream,
                        track,
                        header,
                        (block, packet),
                        (lsn, block_end),
                    );
                }
                Transmit::Rtcp { stream, track, rtp_timestamp, packets, octets, bye, reason } => {
                    let report = (rtp_timestamp, packets, octets);
                    self.transmit_rtcp(now, stream, track, report, bye, reason.as_deref());
                }
            }
        }
        // Relayed sessions: what is in order leaves, holes are asked for or given up.
        for stream in &self.relayed {
            let Some(out) = self.outs.get_mut(stream) else { continue };
            let io = RelayIo {
                udp: &self.t.udp,
                shards: self.t.shards,
                batch_packets: self.t.batch_packets,
                kept: &mut self.kept,
                stats: &mut self.stats,
                scratch: &mut self.resend_buf,
                late_byes: &mut self.late_byes,
            };
            out.service_relay(now, *stream, io, &mut self.batch, &mut self.held);
        }
        flush(&mut self.batch, &mut self.held, &self.t.udp.rtp, &mut self.stats);
        // A BYE waits for room, however long the player takes to read: it is how the
        // player learns the stream ended (RFC 3550 §6.6; GStreamer's rtspsrc ends on it).
        self.late_byes.retain_mut(LateBye::retry);
    }

    /// One RTP packet of `stream`'s `track` (`header` without its SSRC, which is the track's):
    /// into a relayed session's resequencer, the UDP batch (kept for retransmission), or the
    /// connection's queue of interleaved frames.
    fn transmit_rtp(
        &mut self,
        now: Instant,
        stream: StreamId,
        track: u8,
        mut rtp_header: RtpHeader,
        (block, packet): (SharedBlock, usize),
        (lsn, block_end): (Option<u16>, u16),
    ) {
        let Some(o) = self.outs.get_mut(&stream) else { return };
        rtp_header.ssrc = o.track(track).map_or(0, |t| t.ssrc);
        if let Some(reseq) = o.relay.as_mut().and_then(|r| r.track_mut(track)) {
            // A relayed session's own packets join the others' in order.
            let own = Queued::Own { header: rtp_header, block, packet };
            let _ = reseq.handle_packet(now, rtp_header.sequence, own);
            return;
        }
        let Some(out) = o.track(track) else { return };
        let mut buf = [0u8; RTP_HEADER_LSN_LEN];
        let header: &[u8] = match lsn {
            Some(lsn) => {
                rtp_header.write_lsn(lsn, block_end, &mut buf);
                &buf
            }
            None => {
                let b: &mut [u8; RTP_HEADER_LEN] =
                    (&mut buf[..RTP_HEADER_LEN]).try_into().expect("12 bytes");
                rtp_header.write(b);
                &buf[..RTP_HEADER_LEN]
            }
        };
        match &out.transport {
            StreamTransport::Udp { rtp, .. } => {
                self.batch.push(*rtp, header, block.packet(packet).payload);
                let sent = Sent::Block { block: Arc::clone(&block), packet, header: rtp_header };
                self.kept.handle_sent(now, stream, track, rtp_header.sequence, sent);
                self.held.push(block);
                if self.batch.len() >= self.t.batch_packets {
                    flush(&mut self.batch, &mut self.held, &self.t.udp.rtp, &mut self.stats);
                }
            }
            StreamTransport::Interleaved { frames, rtp_channel, .. } => {
                let len = header.len() + block.packet(packet).payload.len();
                let mut head = [0u8; 4 + MAX_HEADER];
                head[..4].copy_from_slice(&interleaved_prefix(*rtp_channel, len as u16));
                head[4..4 + header.len()].copy_from_slice(header);
                let head_len = 4 + header.len();
                // `can_send` saw room for what every sender thread may push at the same instant
                // (`has_room`): this does not fail for lack of room.
                let frame = OutFrame::Rtp { head, head_len, block, packet };
                if frames.try_send(frame).is_err() {
                    self.stats.interleaved_lost += 1;
                }
            }
        }
    }

    /// A sender report of `stream`'s `track` (`report`: RTP timestamp, packets, octets), with a
    /// BYE when `bye`; a relayed session's BYE waits for what is held.
    fn transmit_rtcp(
        &mut self,
        now: Instant,
        stream: StreamId,
        track: u8,
        (rtp_timestamp, packets, octets): (u32, u32, u32),
        bye: bool,
        reason: Option<&str>,
    ) {
        let Some(out) = self.outs.get_mut(&stream) else { return };
        let StreamOut { tracks, cname, relay, .. } = out;
        let Some(Some(t)) = tracks.get(usize::from(track)) else { return };
        // RTP queued in the batch goes first: a BYE must not overtake the last packets
        // (GStreamer ends the stream on BYE and drops what follows).
        flush(&mut self.batch, &mut self.held, &self.t.udp.rtp, &mut self.stats);
        self.rtcp_buf.clear();
        let said = bye.then_some(reason);
        build_rtcp(&mut self.rtcp_buf, t, cname, rtp_timestamp, packets, octets, said);
        match relay.as_mut() {
            // Nothing more will be relayed: what is held leaves before the BYE.
            Some(r) if bye => r.defer_bye(now, track, self.rtcp_buf.clone()),
            _ => {
                let unsent = send_rtcp(&self.t.udp.rtcp, t, &self.rtcp_buf);
                self.late_byes.extend(unsent.filter(|_| bye));
            }
        }
    }
}

fn flush(
    batch: &mut Batch,
    held: &mut Vec<SharedBlock>,
    socket: &UdpSocket,
    stats: &mut SenderStats,
) {
    if batch.is_empty() {
        return;
    }
    let n = batch.len();
    stats.syscalls += 1;
    match batch.send(socket) {
        Ok(sent) => stats.send_errors += (n - sent) as u64,
        Err(e) => {
            stats.send_errors += n as u64;
            warn!(error = %e, "sendmmsg failed");
        }
    }
    held.clear();
}

fn build_rtcp(
    out: &mut Vec<u8>,
    s: &TrackOut,
    cname: &str,
    rtp_timestamp: u32,
    packets: u32,
    octets: u32,
    bye: Option<Option<&str>>,
) {
    let unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let sr = SenderReport {
        ssrc: s.ssrc,
        ntp: NtpTimestamp::from_unix_nanos(unix_ns),
        rtp_timestamp,
        packet_count: packets,
        octet_count: octets,
    };
    rtcp::write_sender_report(out, &sr);
    // One CNAME for every track of the session: players sync tracks by it (RFC 3550 §6.5.1).
    rtcp::write_sdes_cname(out, s.ssrc, cname);
    if let Some(reason) = bye {
        rtcp::write_bye(out, s.ssrc, reason);
    }
}

/// Sends an RTCP packet to `s`'s client. Over UDP it is sent or lost like any datagram. On an
/// interleaved connection RTP leaves the last slots of the queue free (see `has_room`), so a
/// report finds room unless the client has not read for a while: the frame is then given back
/// (a sender report may be dropped, RFC 3550 §6; a BYE is retried, [`LateBye`]).
fn send_rtcp(socket: &UdpSocket, s: &TrackOut, pkt: &[u8]) -> Option<LateBye> {
    match &s.transport {
        StreamTransport::Udp { rtcp, .. } => {
            if let Err(e) = socket.send_to(pkt, rtcp) {
                debug!(error = %e, to = %rtcp, "RTCP send failed");
            }
            None
        }
        StreamTransport::Interleaved { frames, rtcp_channel, .. } => {
            let mut b = Vec::with_capacity(4 + pkt.len());
            b.extend_from_slice(&interleaved_prefix(*rtcp_channel, pkt.len() as u16));
            b.extend_from_slice(pkt);
            match frames.try_send(OutFrame::Owned(b)) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => None,
                Err(mpsc::error::TrySendError::Full(frame)) => {
                    debug!("interleaved RTCP found the connection's queue full");
                    Some(LateBye { frames: frames.clone(), frame: Some(frame) })
                }
            }
        }
    }
}

/// An interleaved BYE that found its connection's queue full: queued as soon as there is room,
/// dropped only when the connection is gone. A player that reads slowly (a busy machine) still
/// learns that the stream ended instead of waiting for it forever.
struct LateBye {
    frames: mpsc::Sender<OutFrame>,
    frame: Option<OutFrame>,
}

impl LateBye {
    /// Tries again: `true` while it still waits.
    fn retry(&mut self) -> bool {
        let Some(frame) = self.frame.take() else { return false };
        match self.frames.try_send(frame) {
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => false,
            Err(mpsc::error::TrySendError::Full(frame)) => {
                self.frame = Some(frame);
                true
            }
        }
    }
}

/// Sends a kept packet again to a UDP client: in the stream's RTX stream if its player
/// negotiated one (RFC 4588 §4: the original sequence number, then the payload), else as it was
/// first sent but without header extension (a repair is not a new packet of this node: it
/// takes no LSN).
fn resend(
    socket: &UdpSocket,
    out: &mut StreamOut,
    track: u8,
    sent: &Sent<AlignedBuf>,
    buf: &mut Vec<u8>,
) {
    let Some(TrackOut { transport: StreamTransport::Udp { rtp, .. }, .. }) = out.track(track)
    else {
        return;
    };
    let rtp = *rtp;
    let (header, payload): (RtpHeader, &[u8]) = match sent {
        Sent::Block { block, packet, header } => (*header, block.packet(*packet).payload),
        Sent::Datagram(d) => match RtpHeader::parse(d) {
            Ok((h, range)) => (h, &d[range]),
            Err(_) => return,
        },
    };
    buf.clear();
    match out.rtx.get_mut(usize::from(track)).and_then(Option::as_mut) {
        Some((setup, seq)) => {
            isochron_rtp::rtx_packet(buf, &header, payload, setup.payload_type, setup.ssrc, *seq);
            *seq = seq.wrapping_add(1);
        }
        None => {
            buf.extend_from_slice(&header.to_bytes());
            buf.extend_from_slice(payload);
        }
    }
    if let Err(e) = socket.send_to(buf, rtp) {
        debug!(error = %e, to = %rtp, "retransmission send failed");
    }
}

/// A random-looking first sequence number for an RTX stream (RFC 3550 §5.1 asks for a random
/// one), derived from the media SSRC.
fn rand_seq(ssrc: u32) -> u16 {
    (isochron_base::mix::hash_words(&[u64::from(ssrc), 0x0072_7478]) >> 48) as u16
}

/// Most numbers one relay NACK asks for (a hole longer than that is asked for in parts).
const MAX_NACK: usize = 128;

/// A packet of a relayed session waiting in its origin's resequencer.
#[derive(Debug)]
enum Queued {
    /// This node's own, from its pacer.
    Own {
        /// Its RTP header.
        header: RtpHeader,
        /// The block holding the payload.
        block: SharedBlock,
        /// The packet's index in the block.
        packet: usize,
    },
    /// Another node's, the datagram as it came.
    Relayed(Arc<[u8]>),
}

/// The origin's side of a relayed session's stream (relay delivery, [`crate::reseq`]): a
/// resequencer per set-up track, the other nodes' relay addresses for its NACKs, and the BYEs
/// waiting for what is held.
struct RelayIn {
    tracks: Vec<Option<Reseq<Queued>>>,
    feeders: Vec<SocketAddr>,
    byes: Vec<(u8, Vec<u8>)>,
    /// Numbers given up so far (logged as they grow).
    lost: u64,
    /// The stream was cut (a hole on an interleaved client): nothing more goes out.
    cut: bool,
}

impl RelayIn {
    fn new(tracks: &[Option<TrackOut>], feeders: Vec<SocketAddr>) -> Self {
        let config = |t: &TrackOut| match t.transport {
            StreamTransport::Interleaved { .. } => ReseqConfig::interleaved(),
            StreamTransport::Udp { .. } => ReseqConfig::default(),
        };
        let tracks = tracks.iter().map(|t| t.as_ref().map(|t| Reseq::new(config(t)))).collect();
        Self { tracks, feeders, byes: Vec::new(), lost: 0, cut: false }
    }

    fn track_mut(&mut self, track: u8) -> Option<&mut Reseq<Queued>> {
        self.tracks.get_mut(usize::from(track))?.as_mut()
    }

    /// A run starts: each track's first number is its start's.
    fn handle_play(&mut self, play: &PlayRun) {
        for (i, r) in self.tracks.iter_mut().enumerate() {
            if let Some(r) = r {
                r.handle_start(rtp_seq(play.seq_offsets[i], Gsn(play.start.track_seq(i))));
            }
        }
        self.byes.clear();
    }

    /// Every node sent its last packet: what is still held or on its way leaves first.
    fn handle_end(&mut self, now: Instant) {
        for r in self.tracks.iter_mut().flatten() {
            r.handle_end(now);
        }
    }

    /// A BYE waits until every track's packets are out ([`Reseq::is_finished`]); it is itself a
    /// sign that every node sent its last packet.
    fn defer_bye(&mut self, now: Instant, track: u8, rtcp: Vec<u8>) {
        self.handle_end(now);
        self.byes.push((track, rtcp));
    }

    fn stats(&self) -> ReseqStats {
        let mut s = ReseqStats::default();
        for r in self.tracks.iter().flatten() {
            s.add(&r.stats());
        }
        s
    }

    /// When the sender must wake for this stream: at `retry` when a packet waits for room (or
    /// a BYE for the release), else when a hole is to be asked for or given up.
    fn poll_timeout(&self, retry: Instant) -> Option<Instant> {
        if self.cut {
            return None;
        }
        let waiting = self.tracks.iter().flatten().any(Reseq::ready);
        let holes = self.tracks.iter().flatten().filter_map(Reseq::poll_timeout).min();
        match (waiting.then_some(retry), holes) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// What servicing a relayed stream needs of the sender thread.
struct RelayIo<'a> {
    udp: &'a UdpPair,
    shards: usize,
    batch_packets: usize,
    kept: &'a mut RetransmitBuffer<AlignedBuf>,
    stats: &'a mut SenderStats,
    scratch: &'a mut Vec<u8>,
    late_byes: &'a mut Vec<LateBye>,
}

impl StreamOut {
    /// A relayed session's stream at its origin: asks for its holes (a NACK to every other
    /// node), gives up the holes too old to be filled, sends what is in order while its
    /// transport has room, then the deferred BYEs once every packet is out. A hole given up on an
    /// interleaved client ends the connection (`OutFrame::Close`): RTP over TCP is never cut
    /// silently.
    fn service_relay(
        &mut self,
        now: Instant,
        stream: StreamId,
        io: RelayIo<'_>,
        batch: &mut Batch,
        held: &mut Vec<SharedBlock>,
    ) {
        let Some(relay) = self.relay.as_mut() else { return };
        if relay.cut {
            return;
        }
        let tracks = self.tracks.iter().flatten().count();
        for (i, reseq) in relay.tracks.iter_mut().enumerate() {
            let (Some(reseq), Some(Some(out))) = (reseq.as_mut(), self.tracks.get(i)) else {
                continue;
            };
            reseq.handle_timeout(now);
            if let Some(missing) = reseq.poll_nack(now, MAX_NACK) {
                io.scratch.clear();
                rtcp::write_nack(io.scratch, out.ssrc ^ NACK_SSRC_MASK, out.ssrc, &missing);
                for f in &relay.feeders {
                    if let Err(e) = io.udp.rtp.send_to(io.scratch, f) {
                        debug!(error = %e, to = %f, "relay NACK send failed");
                    }
                }
            }
            while reseq.ready() && has_room(&out.transport, io.shards, tracks) {
                let Some((seq, q)) = reseq.poll_release() else { break };
                let track = i as u8;
                match (&out.transport, q) {
                    (StreamTransport::Udp { rtp, .. }, Queued::Own { header, block, packet }) => {
                        batch.push(*rtp, &header.to_bytes(), block.packet(packet).payload);
                        let sent = Sent::Block { block: Arc::clone(&block), packet, header };
                        io.kept.handle_sent(now, stream, track, seq, sent);
                        held.push(block);
                        if batch.len() >= io.batch_packets {
                            flush(batch, held, &io.udp.rtp, io.stats);
                        }
                    }
                    (StreamTransport::Udp { rtp, .. }, Queued::Relayed(d)) => {
                        // After the own packets batched before it.
                        flush(batch, held, &io.udp.rtp, io.stats);
                        if let Err(e) = io.udp.rtp.send_to(&d, rtp) {
                            debug!(error = %e, to = %rtp, "relayed RTP send failed");
                        }
                        io.kept.handle_sent(now, stream, track, seq, Sent::Datagram(d));
                    }
                    (StreamTransport::Interleaved { frames, rtp_channel, .. }, q) => {
                        let frame = match q {
                            Queued::Own { header, block, packet } => {
                                let len = RTP_HEADER_LEN + block.packet(packet).payload.len();
                                let mut head = [0u8; 4 + MAX_HEADER];
                                head[..4]
                                    .copy_from_slice(&interleaved_prefix(*rtp_channel, len as u16));
                                head[4..4 + RTP_HEADER_LEN].copy_from_slice(&header.to_bytes());
                                OutFrame::Rtp { head, head_len: 4 + RTP_HEADER_LEN, block, packet }
                            }
                            Queued::Relayed(d) => {
                                let mut b = Vec::with_capacity(4 + d.len());
                                b.extend_from_slice(&interleaved_prefix(
                                    *rtp_channel,
                                    d.len() as u16,
                                ));
                                b.extend_from_slice(&d);
                                OutFrame::Owned(b)
                            }
                        };
                        // `has_room` left room for it.
                        if frames.try_send(frame).is_err() {
                            io.stats.interleaved_lost += 1;
                        }
                    }
                }
            }
        }
        let lost = relay.stats().lost;
        if lost > relay.lost {
            let last = relay.tracks.iter().flatten().filter_map(Reseq::last_given_up).next_back();
            warn!(%stream, lost = lost - relay.lost, ?last, "relayed packets no node could resend were given up");
            relay.lost = lost;
            if let Some(Some(TrackOut {
                transport: StreamTransport::Interleaved { frames, .. },
                ..
            })) = self.tracks.iter().find(|t| t.is_some())
            {
                // RTP over TCP is never cut silently: the player sees the connection end.
                warn!(%stream, "a relayed TCP stream lost packets: closing its connection");
                relay.cut = frames.try_send(OutFrame::Close).is_ok() || frames.is_closed();
                io.stats.relay_cut += 1;
                return;
            }
        }
        if !relay.byes.is_empty() && relay.tracks.iter().flatten().all(|r| r.is_finished(now)) {
            flush(batch, held, &io.udp.rtp, io.stats);
            for (track, rtcp) in std::mem::take(&mut relay.byes) {
                if let Some(t) = self.track(track) {
                    io.late_byes.extend(send_rtcp(&io.udp.rtcp, t, &rtcp));
                }
            }
        }
    }
}

/// Whether `transport` can take a packet of a stream of `tracks` set-up tracks now: UDP always; a
/// connection while its queue has room for what every sender thread may push at the same instant
/// (one RTP packet and an SR for each track, each): an RTP frame is never refused for lack of
/// room.
fn has_room(transport: &StreamTransport, shards: usize, tracks: usize) -> bool {
    match transport {
        StreamTransport::Udp { .. } => true,
        StreamTransport::Interleaved { frames, .. } => {
            // Bounded by half the queue, so a small queue (`tcp_queue_frames` ≥ 16) on a
            // machine of many cores still moves; a refusal is then counted, not silent.
            let reserve = (shards * (1 + tracks)).min(frames.max_capacity() / 2);
            frames.capacity() > reserve
        }
    }
}

/// Mixed into a track's SSRC for the sender SSRC of the origin's relay NACKs (RFC 4585 §6.1
/// wants one; the other nodes match NACKs by the media SSRC).
const NACK_SSRC_MASK: u32 = 0x4e41_434b;

#[cfg(test)]
mod tests {
    use super::*;

    /// A BYE that finds a slow reader's queue full is not lost: it is given back, retried, and
    /// queued as soon as the player reads (a player that never gets it waits forever).
    #[test]
    fn an_interleaved_bye_waits_for_room() {
        let socket = UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0)).unwrap();
        let (frames, mut client) = mpsc::channel::<OutFrame>(2);
        let track = TrackOut {
            transport: StreamTransport::Interleaved { frames, rtp_channel: 0, rtcp_channel: 1 },
            ssrc: 7,
        };
        let mut bye = Vec::new();
        rtcp::write_bye(&mut bye, 7, None);
        // Two sender reports fill the queue; the player reads nothing for now.
        assert!(send_rtcp(&socket, &track, b"sr-1").is_none());
        assert!(send_rtcp(&socket, &track, b"sr-2").is_none());
        let mut late = send_rtcp(&socket, &track, &bye).expect("a full queue gives the BYE back");
        assert!(late.retry(), "still waiting while the queue is full");
        // The player reads one frame: the BYE goes next, once.
        assert!(client.try_recv().is_ok());
        assert!(!late.retry(), "queued");
        assert!(!late.retry(), "and only once");
        let _ = client.try_recv().unwrap();
        let OutFrame::Owned(got) = client.try_recv().unwrap() else { panic!("an owned frame") };
        assert_eq!(&got[..4], &interleaved_prefix(1, bye.len() as u16)[..]);
        assert_eq!(&got[4..], &bye[..]);
        // A BYE for a connection that closed while it waited is dropped.
        let (frames, client) = mpsc::channel::<OutFrame>(1);
        frames.try_send(OutFrame::Owned(b"sr".to_vec())).unwrap();
        let mut late = LateBye { frames, frame: Some(OutFrame::Owned(bye)) };
        assert!(late.retry());
        drop(client);
        assert!(!late.retry());
    }
}
