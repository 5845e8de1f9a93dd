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
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use isochron_base::{BlockIndex, MediaTime, Pace, StreamId};
use isochron_diskio::AlignedBuf;
use isochron_rtp::{
    NtpTimestamp, RTP_HEADER_LEN, RTP_HEADER_LSN_LEN, RtpHeader, SenderReport, interleaved_prefix,
    rtcp,
};
use isochron_sched::Anchor;
use isochron_store::block::Block;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::clock::Clock;
use crate::net::{Batch, MAX_HEADER, UdpPair};
use crate::pacer::{
    Pacer, PacerConfig, PacerEvent, PacerStats, PlayRun, StreamProgress, StreamSetup, Transmit,
};
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
        /// The RFC 4588 RTX stream its player negotiated: retransmissions go out in it (else
        /// as the packets were first sent).
        rtx: Option<RtxSetup>,
    },
    /// A client's generic NACK (RFC 4585 §6.2.1) for the stream with SSRC `ssrc`: resend the
    /// packets numbered `seqs` that this node sent within the retransmission window.
    Nack {
        /// The media SSRC the NACK names.
        ssrc: u32,
        /// The sequence numbers asked for.
        seqs: Vec<u16>,
    },
    /// Start a run.
    Play {
        /// The stream.
        stream: StreamId,
        /// The run.
        play: PlayRun,
    },
    /// A block from the scheduler.
    Block {
        /// The stream.
        stream: StreamId,
        /// The run it was read for.
        run: u64,
        /// Its index.
        index: BlockIndex,
        /// The block.
        block: SharedBlock,
        /// The pacing anchor, on the first block of a run.
        anchor: Option<Anchor>,
    },
    /// Stop run `run` now or after its last packet at or before `cutoff`; where it stood is
    /// reported as [`PacerEvent::Stopped`].
    Stop {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: u64,
        /// The cutoff (a cluster's synchronised pause).
        cutoff: Option<MediaTime>,
    },
    /// Re-pin run `run`'s clock (a cluster's pace change, [`Pacer::handle_reanchor`]).
    Reanchor {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: u64,
        /// The new anchor.
        anchor: Anchor,
        /// The new pace.
        pace: Pace,
    },
    /// A running share gains blocks taken over from a lost node ([`Pacer::handle_extend`]).
    Extend {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: u64,
        /// The blocks gained.
        blocks: Vec<crate::pacer::ShareBlock>,
    },
    /// Send the session's BYE ([`Pacer::handle_bye`]).
    Bye {
        /// The stream.
        stream: StreamId,
        /// Why it ends, when it could not go on (the BYE's reason for leaving).
        reason: Option<Arc<str>>,
    },
    /// An RTP packet another node sent this node to relay: it goes to the stream whose SSRC it
    /// carries, from this node's address (relay delivery).
    Relayed {
        /// The datagram.
        datagram: Vec<u8>,
    },
    /// Pace a stream at a new speed (MTFC); replies with the pace in force (`None` for an
    /// unknown stream).
    Pace {
        /// The stream.
        stream: StreamId,
        /// The pace asked for.
        pace: Pace,
        /// The reply.
        reply: oneshot::Sender<Option<Pace>>,
    },
    /// Forget a stream.
    Remove {
        /// The stream.
        stream: StreamId,
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
    }
}

struct StreamOut {
    /// By track index; `None` for a track not set up.
    tracks: Vec<Option<TrackOut>>,
    cname: String,
    /// The RTX stream of track 0 (MP2T) and its next sequence number.
    rtx: Option<(RtxSetup, u16)>,
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
}

impl SenderThread {
    /// Runs until `Shutdown` or until every command sender is gone.
    pub fn run(self) {
        let mut pacer: Pacer<AlignedBuf> =
            Pacer::new(PacerConfig { rtcp_interval: self.rtcp_interval, ..PacerConfig::default() });
        let mut outs: HashMap<StreamId, StreamOut> = HashMap::new();
        let mut by_ssrc: HashMap<u32, (StreamId, u8)> = HashMap::new();
        let mut batch = Batch::with_capacity(self.batch_packets, self.gso);
        // Blocks referenced by the batch stay alive until it is sent.
        let mut held: Vec<SharedBlock> = Vec::with_capacity(self.batch_packets);
        let mut rtcp_buf = Vec::with_capacity(256);
        let mut stats = SenderStats::default();
        let mut kept: RetransmitBuffer<AlignedBuf> = RetransmitBuffer::new(self.retransmit_window);
        let mut resend_buf = Vec::with_capacity(2048);
        let mut held_relays = HeldRelays::default();
        let mut last_pass = self.clock.now();
        loop {
            // Wait for a command, or for the next due packet but no sooner than a quantum after
            // the last send pass.
            let now = self.clock.now();
            // Held relayed frames are retried every quantum.
            let wake = match (pacer.poll_timeout(), held_relays.is_empty()) {
                (t, true) => t,
                (Some(t), false) => Some(t.min(last_pass + self.quantum)),
                (None, false) => Some(last_pass + self.quantum),
            };
            let first = match wake.map(|t| t.max(last_pass + self.quantum)) {
                Some(t) if t <= now => self.rx.try_recv().ok(),
                Some(t) => match self.rx.recv_timeout(t - now) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => return,
                },
                None => match self.rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => return,
                },
            };
            for cmd in first.into_iter().chain(std::iter::from_fn(|| self.rx.try_recv().ok())) {
                match cmd {
                    SenderCommand::Add { setup, transports, cname, rtx } => {
                        let stream = setup.stream;
                        let mut tracks = Vec::with_capacity(transports.len());
                        for (i, transport) in transports.into_iter().enumerate() {
                            let ssrc = setup.tracks.get(i).map_or(0, |t| t.ssrc);
                            tracks.push(transport.map(|transport| {
                                by_ssrc.insert(ssrc, (stream, i as u8));
                                TrackOut { transport, ssrc }
                            }));
                        }
                        let udp = tracks
                            .iter()
                            .flatten()
                            .any(|t| matches!(t.transport, StreamTransport::Udp { .. }));
                        if udp {
                            kept.handle_add(stream);
                        }
                        let first_ssrc = setup.tracks.first().map_or(0, |t| t.ssrc);
                        let rtx = rtx.map(|r| (r, rand_seq(first_ssrc)));
                        pacer.handle_add(setup);
                        outs.insert(stream, StreamOut { tracks, cname, rtx });
                    }
                    SenderCommand::Nack { ssrc, seqs } => {
                        let Some(&(stream, track)) = by_ssrc.get(&ssrc) else {
                            kept.handle_unknown();
                            continue;
                        };
                        let found = kept.handle_nack(self.clock.now(), stream, track, seqs);
                        if let Some(out) = outs.get_mut(&stream) {
                            for sent in found {
                                resend(&self.udp.rtp, out, track, &sent, &mut resend_buf);
                            }
                        }
                    }
                    SenderCommand::Play { stream, play } => {
                        pacer.handle_play(self.clock.now(), stream, play);
                    }
                    SenderCommand::Block { stream, run, index, block, anchor } => {
                        pacer.handle_block(stream, run, index, block, anchor);
                    }
                    SenderCommand::Stop { stream, run, cutoff } => {
                        let now = self.clock.now();
                        if let Some(report) = pacer.handle_stop(now, stream, run, cutoff) {
                            (self.on_event)(PacerEvent::Stopped { stream, run, report });
                        }
                    }
                    SenderCommand::Reanchor { stream, run, anchor, pace } => {
                        pacer.handle_reanchor(stream, run, anchor, pace);
                    }
                    SenderCommand::Extend { stream, run, blocks } => {
                        pacer.handle_extend(stream, run, &blocks);
                    }
                    SenderCommand::Bye { stream, reason } => {
                        pacer.handle_bye(self.clock.now(), stream, reason);
                    }
                    SenderCommand::Relayed { datagram } => {
                        let target = datagram
                            .get(8..12)
                            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                            .and_then(|ssrc| by_ssrc.get(&ssrc).copied());
                        let found = target.and_then(|(stream, track)| {
                            outs.get(&stream)?.track(track).map(|t| (stream, track, t))
                        });
                        match found {
                            Some((stream, track, out)) => {
                                stats.relayed += 1;
                                if kept.keeps(stream)
                                    && let Ok((h, _)) = RtpHeader::parse(&datagram)
                                {
                                    let now = self.clock.now();
                                    let d: Arc<[u8]> = Arc::from(datagram);
                                    relay(&self.udp.rtp, out, &d, &mut held_relays);
                                    let sent = Sent::Datagram(d);
                                    kept.handle_sent(now, stream, track, h.sequence, sent);
                                } else {
                                    relay(&self.udp.rtp, out, &datagram, &mut held_relays);
                                }
                            }
                            None => stats.relay_unknown += 1,
                        }
                    }
                    SenderCommand::Pace { stream, pace, reply } => {
                        let _ = reply.send(pacer.handle_pace(stream, pace));
                    }
                    SenderCommand::Remove { stream } => {
                        pacer.handle_remove(stream);
                        kept.handle_remove(stream);
                        if let Some(out) = outs.remove(&stream) {
                            for t in out.tracks.iter().flatten() {
                                by_ssrc.remove(&t.ssrc);
                            }
                        }
                    }
                    SenderCommand::Stats { reply } => {
                        stats.pacer = pacer.stats();
                        stats.streams = pacer.stream_count();
                        stats.retransmit = kept.stats();
                        let _ = reply.send(stats);
                    }
                    SenderCommand::Progress { reply } => {
                        let _ = reply.send(pacer.progress().collect());
                    }
                    SenderCommand::Shutdown => return,
                }
            }

            // Send everything due, in batches; relayed frames held for want of room first.
            let now = self.clock.now();
            last_pass = now;
            held_relays.retry();
            loop {
                // Every track of a stream goes the same way (one connection when interleaved).
                let can_send =
                    |s: StreamId| match outs.get(&s).and_then(|o| o.tracks.iter().flatten().next())
                    {
                        Some(TrackOut {
                            transport: StreamTransport::Interleaved { frames, .. },
                            ..
                        }) => frames.capacity() > self.shards,
                        _ => true,
                    };
                let Some(t) = pacer.poll_transmit(now, can_send) else { break };
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
                        let Some(out) = outs.get(&stream).and_then(|o| o.track(track)) else {
                            continue;
                        };
                        let rtp_header = RtpHeader {
                            marker,
                            payload_type,
                            sequence: seq,
                            timestamp,
                            ssrc: out.ssrc,
                        };
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
                                batch.push(*rtp, header, block.packet(packet).payload);
                                let sent = Sent::Block {
                                    block: Arc::clone(&block),
                                    packet,
                                    header: rtp_header,
                                };
                                kept.handle_sent(now, stream, track, seq, sent);
                                held.push(block);
                                if batch.len() >= self.batch_packets {
                                    flush(&mut batch, &mut held, &self.udp.rtp, &mut stats);
                                }
                            }
                            StreamTransport::Interleaved { frames, rtp_channel, .. } => {
                                let len = header.len() + block.packet(packet).payload.len();
                                let mut head = [0u8; 4 + MAX_HEADER];
                                head[..4]
                                    .copy_from_slice(&interleaved_prefix(*rtp_channel, len as u16));
                                head[4..4 + header.len()].copy_from_slice(header);
                                let head_len = 4 + header.len();
                                // `can_send` saw more room than there are sender threads, each
                                // of which (one per session on this connection) may push one
                                // frame at the same instant: this does not fail for lack of
                                // room, and a slot is still left for RTCP.
                                let frame = OutFrame::Rtp { head, head_len, block, packet };
                                let _ = frames.try_send(frame);
                            }
                        }
                    }
                    Transmit::Rtcp {
                        stream,
                        track,
                        rtp_timestamp,
                        packets,
                        octets,
                        bye,
                        reason,
                    } => {
                        let Some(out) = outs.get(&stream) else { continue };
                        let Some(t) = out.track(track) else { continue };
                        // RTP queued in the batch goes first: a BYE must not overtake the last
                        // packets (GStreamer ends the stream on BYE and drops what follows).
                        flush(&mut batch, &mut held, &self.udp.rtp, &mut stats);
                        rtcp_buf.clear();
                        let bye = bye.then_some(reason.as_deref());
                        let cname = &out.cname;
                        build_rtcp(&mut rtcp_buf, t, cname, rtp_timestamp, packets, octets, bye);
                        send_rtcp(&self.udp.rtcp, t, &rtcp_buf);
                    }
                }
            }
            flush(&mut batch, &mut held, &self.udp.rtp, &mut stats);

            while let Some(ev) = pacer.poll_event() {
                if let PacerEvent::Ended { stream, run, report } = ev {
                    debug!(%stream, run, last = ?report.last_sent, "end of run");
                }
                (self.on_event)(ev);
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

fn send_rtcp(socket: &UdpSocket, s: &TrackOut, pkt: &[u8]) {
    match &s.transport {
        StreamTransport::Udp { rtcp, .. } => {
            if let Err(e) = socket.send_to(pkt, rtcp) {
                debug!(error = %e, to = %rtcp, "RTCP send failed");
            }
        }
        StreamTransport::Interleaved { frames, rtcp_channel, .. } => {
            let mut b = Vec::with_capacity(4 + pkt.len());
            b.extend_from_slice(&interleaved_prefix(*rtcp_channel, pkt.len() as u16));
            b.extend_from_slice(pkt);
            // RTP leaves the last slots of the queue free (see `can_send`), so a report finds room
            // unless the client stopped reading; then dropping it is harmless (RFC 3550 §6).
            if frames.try_send(OutFrame::Owned(b)).is_err() {
                debug!("interleaved RTCP dropped: connection queue full or closed");
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
    match out.rtx.as_mut().filter(|_| track == 0) {
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

/// Sends a relayed RTP packet on to the stream's client, from this node's RTP socket or on its
/// RTSP connection.
fn relay(socket: &UdpSocket, out: &TrackOut, datagram: &[u8], held: &mut HeldRelays) {
    match &out.transport {
        StreamTransport::Udp { rtp, .. } => {
            if let Err(e) = socket.send_to(datagram, rtp) {
                debug!(error = %e, to = %rtp, "relayed RTP send failed");
            }
        }
        StreamTransport::Interleaved { frames, rtp_channel, .. } => {
            let mut b = Vec::with_capacity(4 + datagram.len());
            b.extend_from_slice(&interleaved_prefix(*rtp_channel, datagram.len() as u16));
            b.extend_from_slice(datagram);
            held.send(frames, OutFrame::Owned(b));
        }
    }
}

/// Relayed packets for interleaved clients whose connection queue was full, oldest first. A
/// relayed packet has no pacer to wait in (it arrived from another node when that node sent
/// it), so it waits here and goes before anything else at the next passes, in order per
/// connection, instead of being dropped; a client that stops reading loses them beyond
/// [`HeldRelays::MAX`].
#[derive(Default)]
struct HeldRelays {
    frames: std::collections::VecDeque<(mpsc::Sender<OutFrame>, OutFrame)>,
}

impl HeldRelays {
    /// Most frames held for every connection together.
    const MAX: usize = 4096;

    /// Queues `frame` on `to`, behind any frame held for it.
    fn send(&mut self, to: &mpsc::Sender<OutFrame>, frame: OutFrame) {
        let behind = self.frames.iter().any(|(c, _)| c.same_channel(to));
        let frame = if behind {
            frame
        } else {
            match to.try_send(frame) {
                Ok(()) => return,
                Err(mpsc::error::TrySendError::Full(f)) => f,
                Err(mpsc::error::TrySendError::Closed(_)) => return,
            }
        };
        if self.frames.len() < Self::MAX {
            self.frames.push_back((to.clone(), frame));
        } else {
            debug!("relayed RTP dropped: a connection queue stayed full");
        }
    }

    /// Sends what the connections now have room for, oldest first; a connection still full
    /// keeps the rest of its frames in order.
    fn retry(&mut self) {
        let mut still: Vec<mpsc::Sender<OutFrame>> = Vec::new();
        let mut i = 0;
        while i < self.frames.len() {
            let (to, _) = &self.frames[i];
            if still.iter().any(|c| c.same_channel(to)) {
                i += 1;
                continue;
            }
            let Some((to, frame)) = self.frames.remove(i) else { break };
            match to.try_send(frame) {
                Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
                Err(mpsc::error::TrySendError::Full(frame)) => {
                    self.frames.insert(i, (to.clone(), frame));
                    still.push(to);
                    i += 1;
                }
            }
        }
    }

    fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }
}
