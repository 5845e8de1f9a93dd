//! The pacer: which packet of which stream is due when (sans-IO).
//!
//! Each RTP payload unit carries the send time derived from the file's PCR at ingest (RFC 2250 §2:
//! the RTP timestamp of MP2T is the target transmission time). A stream's clock is pinned to the
//! wall clock by the [`Anchor`] the scheduler attaches to its first block after a start; packet
//! `p` is then due at `anchor.wall + (p.send_time − anchor.media)`. The pacer keeps every playing
//! stream in one heap ordered by its next due time, so the sender thread asks "what is due now?"
//! in O(log n) and batches the answers of many streams into one `sendmmsg`.
//!
//! A stream can be paced faster or slower than its own timing (MTFC rate smoothing, Yima §2.5,
//! `research/algorithms.md` §3.3: the client asks, the server only paces): at pace `r` packet `p`
//! is due at `anchor.wall + (p.send_time − anchor.media) / r`. A change of pace re-anchors at the
//! current packet (the next one to send, else the last one sent): the new anchor is that
//! packet's due time under the old pace, so the schedule stays continuous and, the division
//! being integer arithmetic on one span from one anchor, no rounding accumulates across changes.
//! The pace outlives seeks and pauses; the scheduler is told every anchor/pace pair
//! ([`PacerEvent::Paced`]) so that it reads ahead on the same clock.
//!
//! It also decides when a stream's RTCP goes out: an SR + SDES right after the first packet of a
//! start, then every `rtcp_interval`, and SR + SDES + BYE after the last packet (RFC 3550 §6.1,
//! §6.2, §6.6; ffmpeg ends only on BYE).
//!
//! Not here: sockets, the clock, and how a packet is framed on the wire (the sender thread).
//! Sequence numbers and timestamps follow the contract of [`isochron_rtsp::server::rtp_seq`] and
//! [`isochron_rtsp::server::rtp_timestamp`]: both derive from the packet's GSN and send time, so a
//! seek or a resume needs no renumbering and RTP-Info can be computed before the first packet.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{BlockIndex, Gsn, Instant, MediaTime, Pace, StreamId};
use isochron_rtsp::server::{Position, rtp_seq, rtp_timestamp};
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
}

impl Default for PacerConfig {
    fn default() -> Self {
        Self {
            rtcp_interval: Duration::from_secs(5),
            retry_delay: Duration::from_millis(2),
            bye_delay: Duration::from_millis(500),
        }
    }
}

/// What the pacer needs to know about a stream once, when its session is set up.
#[derive(Clone, Copy, Debug)]
pub struct StreamSetup {
    /// The stream.
    pub stream: StreamId,
    /// Its RTP SSRC.
    pub ssrc: u32,
    /// Its RTP sequence-number offset.
    pub seq_offset: u16,
    /// Its RTP timestamp offset.
    pub rtp_ts_offset: u32,
    /// The object's last block: after it the stream ends.
    pub last_block: BlockIndex,
}

/// Something to put on the wire now.
#[derive(Debug)]
pub enum Transmit<B> {
    /// One RTP packet: the header fields and the payload's place in a block.
    Rtp {
        /// The stream.
        stream: StreamId,
        /// The block holding the payload.
        block: Arc<Block<B>>,
        /// The packet's index within the block.
        packet: usize,
        /// RTP sequence number.
        seq: u16,
        /// RTP timestamp.
        timestamp: u32,
        /// RTP marker bit (a timestamp discontinuity, RFC 2250 §2).
        marker: bool,
    },
    /// An RTCP compound packet: SR + SDES, plus BYE when `bye`.
    Rtcp {
        /// The stream.
        stream: StreamId,
        /// The RTP timestamp of "now" on the stream's clock.
        rtp_timestamp: u32,
        /// Packets sent so far.
        packets: u32,
        /// Payload octets sent so far.
        octets: u32,
        /// Append a BYE: the media has ended.
        bye: bool,
    },
}

/// Notices for the rest of the server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacerEvent {
    /// Every packet of a block was sent: the scheduler may release it.
    BlockDone {
        /// The stream.
        stream: StreamId,
        /// The run the block was delivered for.
        run: u64,
        /// The block.
        index: BlockIndex,
    },
    /// The stream sent its last packet (end of object or of the PLAY range).
    EndOfStream {
        /// The stream.
        stream: StreamId,
        /// The position after the last packet sent.
        at: Position,
        /// The RTP sequence number the next packet would have had.
        next_seq: u16,
    },
    /// A stream's clock changed pace (or an anchored run started at a pace other than nominal):
    /// from now on its packet at media time `t` is due at
    /// `anchor.wall + pace.wall_span(t − anchor.media)`.
    Paced {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: u64,
        /// The new anchor.
        anchor: Anchor,
        /// The pace.
        pace: Pace,
    },
}

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
    /// Changes of a stream's pace (MTFC rate requests carried out).
    pub pace_changes: u64,
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
    run: u64,
    playing: bool,
    start: Position,
    end: Option<MediaTime>,
    anchor: Option<Anchor>,
    pace: Pace,
    blocks: VecDeque<(BlockIndex, Arc<Block<B>>)>,
    /// Next packet of the front block; set when the front block arrives.
    cursor: Option<usize>,
    generation: u64,
    scheduled: bool,
    /// Packets and payload bytes sent since the stream was added: the API's counts, and the
    /// SR's sender counts modulo 2^32 (RFC 3550 §6.4.1).
    sent_packets: u64,
    sent_bytes: u64,
    next_sr: Option<Instant>,
    last_sent: Option<Position>,
    next_seq: u16,
}

/// The pacing core, generic over the block buffer type.
#[derive(Debug)]
pub struct Pacer<B> {
    config: PacerConfig,
    streams: HashMap<StreamId, Paced<B>>,
    heap: BinaryHeap<Reverse<(Instant, u64, StreamId)>>,
    pending: VecDeque<Transmit<B>>,
    /// BYEs waiting for their grace period, in due order.
    byes: VecDeque<(Instant, Transmit<B>)>,
    events: VecDeque<PacerEvent>,
    stats: PacerStats,
}

impl<B: AsRef<[u8]>> Pacer<B> {
    /// An empty pacer.
    #[must_use]
    pub fn new(config: PacerConfig) -> Self {
        Self {
            config,
            streams: HashMap::new(),
            heap: BinaryHeap::new(),
            pending: VecDeque::new(),
            byes: VecDeque::new(),
            events: VecDeque::new(),
            stats: PacerStats::default(),
        }
    }

    /// Registers a stream (idle until [`Self::handle_play`]).
    pub fn handle_add(&mut self, setup: StreamSetup) {
        self.streams.insert(
            setup.stream,
            Paced {
                setup,
                run: 0,
                playing: false,
                start: Position { gsn: Gsn(0), time: MediaTime::ZERO },
                end: None,
                anchor: None,
                pace: Pace::NOMINAL,
                blocks: VecDeque::new(),
                cursor: None,
                generation: 0,
                scheduled: false,
                sent_packets: 0,
                sent_bytes: 0,
                next_sr: None,
                last_sent: None,
                next_seq: setup.seq_offset,
            },
        );
    }

    /// Starts run `run` of a stream at `start` (a seek, resume or first play), numbering packets
    /// `seq_offset + GSN` from now on; blocks of earlier runs still in flight are ignored when
    /// they arrive.
    pub fn handle_play(
        &mut self,
        stream: StreamId,
        run: u64,
        start: Position,
        end: Option<MediaTime>,
        seq_offset: u16,
    ) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.setup.seq_offset = seq_offset;
        s.next_seq = rtp_seq(seq_offset, start.gsn);
        s.run = run;
        s.playing = true;
        s.start = start;
        s.end = end;
        s.anchor = None;
        s.blocks.clear();
        s.cursor = None;
        s.generation += 1;
        s.scheduled = false;
        s.next_sr = None;
        s.last_sent = None;
    }

    /// A block for a stream, from the scheduler. Blocks arrive in index order.
    pub fn handle_block(
        &mut self,
        stream: StreamId,
        run: u64,
        index: BlockIndex,
        block: Arc<Block<B>>,
        anchor: Option<Anchor>,
    ) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        if !s.playing || s.run != run {
            return;
        }
        if let Some(a) = anchor {
            s.anchor = Some(a);
            if s.pace != Pace::NOMINAL {
                let (run, pace) = (s.run, s.pace);
                self.events.push_back(PacerEvent::Paced { stream, run, anchor: a, pace });
            }
        }
        if s.blocks.is_empty() && s.cursor.is_none() {
            // The first block of the run: begin at the start packet.
            s.cursor = Some(block.find_gsn(s.start.gsn).unwrap_or(0));
        }
        s.blocks.push_back((index, block));
        if !s.scheduled {
            Self::schedule(&mut self.heap, s, &mut self.stats);
        }
    }

    /// Stops a stream and returns where it stopped: the next packet it would have sent, and the
    /// sequence number it would have had.
    pub fn handle_pause(&mut self, stream: StreamId) -> Option<(Position, u16)> {
        let s = self.streams.get_mut(&stream)?;
        let at = Self::position(s);
        s.playing = false;
        s.blocks.clear();
        s.cursor = None;
        s.generation += 1;
        s.scheduled = false;
        Some((at, s.next_seq))
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
            let next = match (s.blocks.front(), s.cursor) {
                (Some((_, b)), Some(c)) if c < b.packet_count() => Some(b.packet(c).send_time),
                _ => None,
            };
            let media = next.or_else(|| s.last_sent.map(|p| p.time)).unwrap_or(old.media);
            let wall = old.wall + s.pace.wall_span(media.saturating_duration_since(old.media));
            let anchor = Anchor { wall, media };
            s.anchor = Some(anchor);
            s.pace = pace;
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
            if !can_send(stream) {
                s.generation += 1;
                s.scheduled = true;
                self.heap.push(Reverse((now + self.config.retry_delay, s.generation, stream)));
                continue;
            }
            return self.take_packet(now, stream, due);
        }
        None
    }

    /// Notices for the scheduler and the session manager.
    pub fn poll_event(&mut self) -> Option<PacerEvent> {
        self.events.pop_front()
    }

    /// When the next packet is due, if any stream is waiting on time (not on a block).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        if !self.pending.is_empty() {
            return Some(Instant::ZERO);
        }
        let bye = self.byes.front().map(|(t, _)| *t);
        let packet = self.heap.peek().map(|Reverse((t, _, _))| *t);
        match (bye, packet) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
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

    fn position(s: &Paced<B>) -> Position {
        match (s.blocks.front(), s.cursor) {
            (Some((_, b)), Some(c)) if c < b.packet_count() => {
                let p = b.packet(c);
                Position { gsn: p.gsn, time: p.send_time }
            }
            _ => s.last_sent.map_or(s.start, |p| Position { gsn: p.gsn.next(), time: p.time }),
        }
    }

    fn schedule(
        heap: &mut BinaryHeap<Reverse<(Instant, u64, StreamId)>>,
        s: &mut Paced<B>,
        stats: &mut PacerStats,
    ) {
        let (Some((_, block)), Some(cursor), Some(anchor)) = (s.blocks.front(), s.cursor, s.anchor)
        else {
            if s.playing && s.anchor.is_some() {
                stats.underruns += 1;
            }
            return;
        };
        let t = block.packet(cursor).send_time;
        let due = anchor.wall + s.pace.wall_span(t.saturating_duration_since(anchor.media));
        s.generation += 1;
        s.scheduled = true;
        heap.push(Reverse((due, s.generation, s.setup.stream)));
    }

    fn take_packet(&mut self, now: Instant, stream: StreamId, due: Instant) -> Option<Transmit<B>> {
        let interval = self.config.rtcp_interval;
        let s = self.streams.get_mut(&stream)?;
        let (index, block) = s.blocks.front().map(|(i, b)| (*i, Arc::clone(b)))?;
        let cursor = s.cursor?;
        let pkt = block.packet(cursor);
        let (gsn, time, marker, len) =
            (pkt.gsn, pkt.send_time, pkt.discontinuity, pkt.payload.len() as u64);
        if s.end.is_some_and(|end| time > end) {
            self.finish(now, stream);
            return self.pending.pop_front();
        }
        let transmit = Transmit::Rtp {
            stream,
            block: Arc::clone(&block),
            packet: cursor,
            seq: rtp_seq(s.setup.seq_offset, gsn),
            timestamp: rtp_timestamp(s.setup.rtp_ts_offset, time),
            marker,
        };
        s.sent_packets += 1;
        s.sent_bytes += len;
        s.last_sent = Some(Position { gsn, time });
        s.next_seq = rtp_seq(s.setup.seq_offset, gsn).wrapping_add(1);
        let late = now.saturating_duration_since(due).as_micros() as u64;
        self.stats.packets += 1;
        self.stats.payload_bytes += len;
        self.stats.lateness_us_sum += late;
        self.stats.lateness_us_max = self.stats.lateness_us_max.max(late);

        // Advance.
        let mut ended = false;
        if cursor + 1 < block.packet_count() {
            s.cursor = Some(cursor + 1);
        } else {
            s.blocks.pop_front();
            self.events.push_back(PacerEvent::BlockDone { stream, run: s.run, index });
            s.cursor = if s.blocks.is_empty() { None } else { Some(0) };
            ended = index >= s.setup.last_block;
        }
        // RTCP: an SR right after the first packet of a run, then every interval.
        let sr_due = s.next_sr.is_none_or(|t| now >= t);
        if sr_due && !ended {
            s.next_sr = Some(now + interval);
            self.pending.push_back(Self::rtcp(s, now, false));
        }
        if ended {
            self.finish(now, stream);
        } else if let Some(s) = self.streams.get_mut(&stream) {
            Self::schedule(&mut self.heap, s, &mut self.stats);
        }
        Some(transmit)
    }

    fn finish(&mut self, now: Instant, stream: StreamId) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let at = Self::position(s);
        let due = now + self.config.bye_delay;
        self.byes.push_back((due, Self::rtcp(s, due, true)));
        s.playing = false;
        s.blocks.clear();
        s.cursor = None;
        s.generation += 1;
        s.scheduled = false;
        self.events.push_back(PacerEvent::EndOfStream { stream, at, next_seq: s.next_seq });
    }

    fn rtcp(s: &Paced<B>, now: Instant, bye: bool) -> Transmit<B> {
        let media = s.anchor.map_or(s.start.time, |a| {
            a.media + s.pace.media_span(now.saturating_duration_since(a.wall))
        });
        Transmit::Rtcp {
            stream: s.setup.stream,
            rtp_timestamp: rtp_timestamp(s.setup.rtp_ts_offset, media),
            // The SR's counts wrap at 32 bits (RFC 3550 §6.4.1): the low bits of the totals.
            packets: s.sent_packets as u32,
            octets: s.sent_bytes as u32,
            bye,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isochron_base::{BlockKey, Bytes, ObjectId};
    use isochron_store::block::{BlockBuilder, PacketMeta};

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
        p.handle_add(StreamSetup {
            stream: StreamId(1),
            ssrc: 9,
            seq_offset: 65_530,
            rtp_ts_offset: 100,
            last_block: BlockIndex(last),
        });
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

    #[test]
    fn paces_by_send_time_and_ends_with_bye() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        p.handle_play(
            StreamId(1),
            1,
            Position { gsn: Gsn(0), time: MediaTime::ZERO },
            None,
            65_530,
        );
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 5), Some(anchor));
        p.handle_block(StreamId(1), 1, BlockIndex(1), block(1, 5, 5), None);
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
                PacerEvent::BlockDone { stream: StreamId(1), run: 1, index: BlockIndex(0) },
                PacerEvent::BlockDone { stream: StreamId(1), run: 1, index: BlockIndex(1) },
                PacerEvent::EndOfStream {
                    stream: StreamId(1),
                    at: Position { gsn: Gsn(10), time: MediaTime::from_nanos(90_000_000) },
                    next_seq: 4,
                },
            ]
        );
    }

    #[test]
    fn progress_counts_packets_and_bytes_across_runs() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        let start = Position { gsn: Gsn(0), time: MediaTime::ZERO };
        p.handle_play(StreamId(1), 1, start, None, 0);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 5), Some(anchor));
        drive(&mut p, ms(25));
        let got: Vec<_> = p.progress().collect();
        assert_eq!(got.len(), 1);
        assert_eq!((got[0].packets, got[0].bytes), (3, 3 * 188), "packets at 0, 10 and 20 ms");
        assert_eq!(got[0].position, MediaTime::from_nanos(20_000_000));
        assert!(got[0].playing);
        let _ = p.handle_pause(StreamId(1));
        p.handle_play(StreamId(1), 2, start, None, 0);
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 2, BlockIndex(0), block(0, 0, 5), Some(anchor));
        drive(&mut p, ms(115));
        let got = p.progress().next().unwrap();
        assert_eq!(got.packets, 5, "counts keep growing over runs");
    }

    #[test]
    fn seek_start_inside_a_block_and_stale_runs_ignored() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        p.handle_play(
            StreamId(1),
            1,
            Position { gsn: Gsn(0), time: MediaTime::ZERO },
            None,
            65_530,
        );
        // Run 2 starts at GSN 3; a block delivered for run 1 arrives late and is dropped.
        let start = Position { gsn: Gsn(3), time: MediaTime::from_nanos(30_000_000) };
        p.handle_play(StreamId(1), 2, start, None, 65_530);
        let anchor = Anchor { wall: ms(0), media: start.time };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 5), Some(anchor));
        assert!(p.poll_timeout().is_none());
        p.handle_block(StreamId(1), 2, BlockIndex(0), block(0, 0, 5), Some(anchor));
        let (rtp, ..) = drive(&mut p, ms(100));
        assert_eq!(rtp, vec![(0, 65_533), (10, 65_534)]);
    }

    #[test]
    fn pause_reports_the_next_packet_and_resume_has_no_gap() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        p.handle_play(
            StreamId(1),
            1,
            Position { gsn: Gsn(0), time: MediaTime::ZERO },
            None,
            65_530,
        );
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 5), Some(anchor));
        let mut sent = Vec::new();
        while let Some(t) = p.poll_transmit(ms(15), |_| true) {
            if let Transmit::Rtp { seq, .. } = t {
                sent.push(seq);
            }
        }
        assert_eq!(sent, vec![65_530, 65_531]);
        let (at, next_seq) = p.handle_pause(StreamId(1)).unwrap();
        assert_eq!(at, Position { gsn: Gsn(2), time: MediaTime::from_nanos(20_000_000) });
        assert_eq!(next_seq, 65_532);
        assert!(p.poll_transmit(ms(1_000), |_| true).is_none());
        p.handle_play(StreamId(1), 2, at, None, 65_530);
        let anchor = Anchor { wall: ms(2_000), media: at.time };
        p.handle_block(StreamId(1), 2, BlockIndex(0), block(0, 0, 5), Some(anchor));
        let (rtp, ..) = drive(&mut p, ms(3_000));
        assert_eq!(rtp.iter().map(|r| r.1).collect::<Vec<_>>(), vec![65_532, 65_533, 65_534]);
        assert_eq!(rtp[0].0, 2_000);
    }

    #[test]
    fn backpressure_keeps_the_packet() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        p.handle_play(
            StreamId(1),
            1,
            Position { gsn: Gsn(0), time: MediaTime::ZERO },
            None,
            65_530,
        );
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 2), Some(anchor));
        assert!(p.poll_transmit(ms(0), |_| false).is_none());
        assert_eq!(p.poll_timeout(), Some(ms(2)));
        match p.poll_transmit(ms(2), |_| true) {
            Some(Transmit::Rtp { seq, .. }) => assert_eq!(seq, 65_530),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn pace_change_reanchors_at_the_current_packet() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 1);
        p.handle_play(
            StreamId(1),
            1,
            Position { gsn: Gsn(0), time: MediaTime::ZERO },
            None,
            65_530,
        );
        let anchor = Anchor { wall: ms(100), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 5), Some(anchor));
        p.handle_block(StreamId(1), 1, BlockIndex(1), block(1, 5, 5), None);
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
                run: 1,
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

    #[test]
    fn pace_set_before_the_anchor_applies_from_the_start() {
        let mut p = Pacer::new(PacerConfig::default());
        setup(&mut p, 0);
        let half = Pace::from_multiplier(0.5).unwrap();
        p.handle_pace(StreamId(1), half);
        p.handle_play(
            StreamId(1),
            1,
            Position { gsn: Gsn(0), time: MediaTime::ZERO },
            None,
            65_530,
        );
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 3), Some(anchor));
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
        p.handle_play(StreamId(1), 1, Position { gsn: Gsn(0), time: MediaTime::ZERO }, end, 65_530);
        let anchor = Anchor { wall: ms(0), media: MediaTime::ZERO };
        p.handle_block(StreamId(1), 1, BlockIndex(0), block(0, 0, 2), Some(anchor));
        let (rtp, ..) = drive(&mut p, ms(100));
        assert_eq!(rtp.len(), 2);
        assert_eq!(p.stats().underruns, 1, "block 1 was not there when due");
        p.handle_block(StreamId(1), 1, BlockIndex(1), block(1, 2, 3), None);
        let (rtp, _, bye) = drive(&mut p, ms(1_000));
        assert_eq!(rtp.len(), 1, "packets at 20 ms only; 30 ms is past the range end");
        assert_eq!(bye.len(), 1);
    }
}
