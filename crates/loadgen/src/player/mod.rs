//! The player core: one session's packets back in order, played by their PCR, counted per
//! source. `isochron play` drives it over sockets (what openRTSP is to LIVE555); it is sans-IO, so
//! the tests drive it with packets they build.
//!
//! Why: a cluster sends one session from several nodes (Yima §2.2), each pacing its own packets
//! on a shared clock and stamping its local sequence number (LSN, §2.6). A client therefore
//! needs (1) a jitter buffer that restores the global order, the RTP sequence number extended to
//! 64 bits ([`reorder`]); (2) a player that consumes the stream by its own clock, the MPEG-TS
//! PCR, to tell whether the order was restored in time ([`crate::bench::playout`]: starvations);
//! (3) per-source counts, and per-source LSN gaps to say which node lost what ([`lsn`]).
//!
//! Input: [`Player::handle_play`] (RTP-Info `seq` and the PLAY range), [`Player::handle_rtp`] or
//! [`Player::handle_packet`] per packet with its arrival time and source address,
//! [`Player::handle_rtcp`] (a BYE ends the input). Output: [`Player::poll_payload`] (payloads in
//! order, for `--out`), [`Player::poll_timeout`] (when to call again without a packet),
//! [`Player::is_done`] (the input ended and a grace of the buffer passed for stragglers), and
//! after [`Player::finish`] the [`Summary`].
//!
//! With [`Player::with_repairs`] it also asks for lost packets again (RBEC, Yima §2.3): which
//! numbers are missing and which node sent them ([`repair`]), as requests from
//! [`Player::poll_requests`] that the caller sends as RTCP generic NACKs (RFC 4585 §6.2.1) to
//! each node's RTCP port. A repaired packet that comes in time is played and counted
//! *recovered*; one that comes after its slot was released is counted late, not played.
//!
//! With [`Player::with_mtfc`] it smooths the server's rate (Yima §2.5, [`crate::bench::mtfc`]):
//! it samples its buffer level every 100 ms and [`Player::poll_rate`] says when to ask the server
//! for a new pace (RTSP `SET_PARAMETER x-isochron-rate`, [`crate::Client::set_rate`]).
//!
//! Not here: sockets and RTSP (the binary's `play` command, with [`crate::Client`]).

pub mod lsn;
pub mod reorder;
pub mod repair;

use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use isochron_base::Pace;
use isochron_rtp::RtpHeader;
use isochron_rtp::rtcp::{RtcpPacket, parse_compound};
use isochron_rtsp::server::BufferLevel;
use serde::Serialize;

pub use self::lsn::LsnTracker;
pub use self::reorder::{Arrival, ReorderBuffer, ReorderStats};
pub use self::repair::{Ask, RepairConfig, RepairStats, Repairs, Request};
use crate::bench::mtfc::{Mtfc, MtfcConfig};
use crate::bench::playout::{PlayState, Playout};
use crate::sources::{SourceTable, Traffic};

/// How often the MTFC player samples its buffer level.
const MTFC_SAMPLE: Duration = Duration::from_millis(100);

/// The least time the player waits for stragglers after the input ended.
pub const MIN_GRACE: Duration = Duration::from_millis(500);
/// Payload buffers kept for reuse.
const POOL: usize = 256;

/// Why a session's input ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// The server sent an RTCP BYE (RFC 3550 §6.6).
    Bye,
    /// The media announced by the PLAY `Range` arrived (for servers that send no BYE).
    RangeEnd,
    /// Neither: the session was cut short (a timeout, a closed connection).
    Incomplete,
}

impl EndReason {
    /// The name used in the summary.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Bye => "bye",
            Self::RangeEnd => "range_end",
            Self::Incomplete => "incomplete",
        }
    }
}

/// What an RTP packet's header extension carried (an isochron node's, `isochron_rtp::lsn`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Ext {
    /// The sending node's local sequence number.
    pub lsn: Option<u16>,
    /// The sequence number of the last packet of its block.
    pub block_end: Option<u16>,
}

/// What one source delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SourceStats {
    /// Every packet received from it (duplicates and late ones included).
    pub traffic: Traffic,
    /// Its LSNs (packets carrying the extension, each counted once).
    pub lsn: LsnTracker,
    /// Retransmissions asked of it (sequence numbers, each try counted).
    pub nacked: u64,
    /// Lost packets it sent again in time.
    pub recovered: u64,
}

/// One source in the [`Summary`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SourceSummary {
    /// Its address (for interleaved TCP, the RTSP server's).
    pub address: SocketAddr,
    /// Packets received from it.
    pub packets: u64,
    /// Payload bytes received from it.
    pub bytes: u64,
    /// Packets carrying an LSN, counted once.
    pub lsn_packets: u64,
    /// LSNs missing between its first and its highest: packets it sent that the network lost.
    pub lsn_gaps: u64,
    /// Retransmissions asked of it (sequence numbers in NACKs, each try counted).
    pub nacked: u64,
    /// Lost packets it sent again in time to be played.
    pub recovered: u64,
}

/// A session's account (`isochron play --json` prints it).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Why the input ended.
    pub ended: EndReason,
    /// The reason the server's BYE gave, when it gave one: the stream could not go on.
    pub bye_reason: Option<String>,
    /// RTP packets received (duplicates and late ones included).
    pub packets: u64,
    /// Packets received more than once (the copies).
    pub duplicates: u64,
    /// Packets never received: gaps skipped at release and not filled since.
    pub lost: u64,
    /// Packets found missing and asked for again (RTCP generic NACK).
    pub requested: u64,
    /// NACK requests sent (a number asked twice counts twice; one sent to every node, once).
    pub nacks: u64,
    /// Packets asked for that came in time and were played (repaired losses).
    pub recovered: u64,
    /// Second copies of packets recovered: requests that were not needed (the packet was only
    /// late, or its first retransmission was); the waits grew on them.
    pub spurious: u64,
    /// The reorder wait at the end, ms (grown from the configuration's by spurious requests).
    pub reorder_wait_ms: u64,
    /// MTFC rate requests made (pace changes asked of the server).
    pub rate_requests: u64,
    /// Packets received after their slot was released (not written).
    pub late: u64,
    /// Packets received after one numbered above them, in time to be put back in order.
    pub reordered: u64,
    /// Packets released in order (written to `--out`).
    pub written_packets: u64,
    /// Payload bytes released in order.
    pub written_bytes: u64,
    /// Times the player's clock found no data (the PCR playout clock).
    pub starvations: u64,
    /// Time the player spent starved, ms.
    pub stall_ms: u64,
    /// Media time received, s (by the PCR).
    pub media_s: f64,
    /// First packet received → the end, s.
    pub duration_s: f64,
    /// The RTP sequence number of the first packet released.
    pub first_seq: Option<u16>,
    /// Per source address, in the order first heard from.
    pub sources: Vec<SourceSummary>,
}

/// The player of one session (see the module docs).
#[derive(Debug)]
pub struct Player {
    grace: Duration,
    reorder: ReorderBuffer<Vec<u8>>,
    playout: Playout,
    sources: SourceTable<SocketAddr, SourceStats>,
    packets: u64,
    written: Traffic,
    first_seq: Option<u16>,
    first_at: Option<Instant>,
    last_at: Option<Instant>,
    ended: Option<(Instant, EndReason)>,
    bye_reason: Option<String>,
    finished_at: Option<Instant>,
    /// The payload [`Self::poll_payload`] returned last.
    current: Vec<u8>,
    pool: Vec<Vec<u8>>,
    repairs: Option<Repairs>,
    mtfc: Option<(Mtfc, Option<Instant>)>,
    rate_requests: u64,
}

impl Player {
    /// A player whose jitter buffer holds a packet at most `buffer` for those before it, and
    /// whose clock starts (and restarts after a starvation) with `buffer` of media buffered.
    #[must_use]
    pub fn new(buffer: Duration) -> Self {
        Self {
            grace: buffer.max(MIN_GRACE),
            reorder: ReorderBuffer::new(buffer),
            playout: Playout::new(buffer),
            sources: SourceTable::new(),
            packets: 0,
            written: Traffic::default(),
            first_seq: None,
            first_at: None,
            last_at: None,
            ended: None,
            bye_reason: None,
            finished_at: None,
            current: Vec::new(),
            pool: Vec::with_capacity(POOL),
            repairs: None,
            mtfc: None,
            rate_requests: 0,
        }
    }

    /// The player also asks the server to pace faster or slower to keep its buffer level
    /// ([`Self::poll_rate`]).
    #[must_use]
    pub fn with_mtfc(mut self, config: MtfcConfig) -> Self {
        self.mtfc = Some((Mtfc::new(config), None));
        self
    }

    /// The pace to ask the server for now, if MTFC wants a change (with [`Self::with_mtfc`]),
    /// with what to say of the buffer ([`Mtfc::buffer_level`]).
    pub fn poll_rate(&mut self, now: Instant) -> Option<(Pace, Option<BufferLevel>)> {
        let (m, next) = self.mtfc.as_mut()?;
        let state = self.playout.state();
        if matches!(state, PlayState::Paused | PlayState::Finished) || next.is_some_and(|t| now < t)
        {
            return None;
        }
        *next = Some(now + MTFC_SAMPLE);
        let level = self.playout.level(now);
        let pace = m.handle_level(now, level)?;
        self.rate_requests += 1;
        Some((pace, m.buffer_level(state, level)))
    }

    /// The player also finds lost packets and says whom to ask for them
    /// ([`Self::poll_requests`]).
    #[must_use]
    pub fn with_repairs(mut self, config: RepairConfig) -> Self {
        self.repairs = Some(Repairs::new(config));
        self
    }

    /// The PLAY response: the first packet's RTP sequence number (RTP-Info `seq`) and the media
    /// length announced (the span of its `Range`), when the server said.
    pub fn handle_play(&mut self, first_seq: Option<u16>, length: Option<Duration>) {
        if let Some(s) = first_seq {
            self.reorder.set_start(s);
            if let (Some(r), Some(first)) = (&mut self.repairs, self.reorder.next()) {
                r.expect_first(first);
            }
        }
        if let Some(l) = length {
            self.playout.handle_length(l);
        }
    }

    /// An RTP packet (header included) arrived at `at` from `from`. Not RTP: ignored.
    pub fn handle_rtp(&mut self, at: Instant, from: SocketAddr, packet: &[u8]) {
        let Ok((header, range)) = RtpHeader::parse(packet) else { return };
        let ext =
            Ext { lsn: isochron_rtp::lsn(packet), block_end: isochron_rtp::block_end(packet) };
        self.handle_packet(at, from, header.sequence, ext, &packet[range]);
    }

    /// An RTP packet, already parsed: its sequence number, what its header extension carried,
    /// and its payload.
    pub fn handle_packet(
        &mut self,
        at: Instant,
        from: SocketAddr,
        seq: u16,
        ext: Ext,
        payload: &[u8],
    ) {
        self.packets += 1;
        self.first_at.get_or_insert(at);
        self.last_at = Some(at);
        let number = self.reorder.extend(seq);
        let mut buf = self.pool.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(payload);
        let (duplicate, held) = match self.reorder.push(at, seq, buf) {
            Arrival::Held { .. } => (false, true),
            Arrival::Duplicate(b) => {
                self.recycle(b);
                (true, false)
            }
            Arrival::Late(b) => {
                self.recycle(b);
                (false, false)
            }
        };
        // Sources past the table's size are counted in the totals only.
        let Some((index, s)) = self.sources.entry(from) else { return };
        s.traffic.add(payload.len());
        if let (false, Some(l)) = (duplicate, ext.lsn) {
            s.lsn.handle(l);
        }
        if let Some(r) = &mut self.repairs {
            // The block end is the same kind of number as the sequence number, just ahead.
            let end = ext.block_end.map(|e| number + u64::from(e.wrapping_sub(seq)));
            if r.handle_packet(at, number, index, end, held) {
                s.recovered += 1;
            }
        }
    }

    /// The retransmission requests due at `now` (with [`Self::with_repairs`]): each source's
    /// address and the RTP sequence numbers to ask it for.
    pub fn poll_requests(&mut self, now: Instant) -> Vec<(SocketAddr, Vec<u16>)> {
        let Some(r) = &mut self.repairs else { return Vec::new() };
        let mut out = Vec::new();
        for req in r.poll_requests(now, self.reorder.next()) {
            for (i, (address, s)) in self.sources.iter_mut().enumerate() {
                if matches!(req.to, Ask::Source(j) if j != i) {
                    continue;
                }
                s.nacked += req.seqs.len() as u64;
                out.push((*address, req.seqs.clone()));
            }
        }
        out
    }

    /// An RTCP compound packet arrived at `at`; a BYE ends the input.
    pub fn handle_rtcp(&mut self, at: Instant, packet: &[u8]) {
        for p in parse_compound(packet).flatten() {
            if let RtcpPacket::Bye { reason, .. } = p {
                self.handle_bye(at, reason.map(str::to_owned));
            }
        }
    }

    /// The server said the stream ended (RTCP BYE): nothing more is due, so the player's clock
    /// plays out what it has without starving; packets still on their way (from other nodes, or
    /// through the RTP socket while the BYE took the RTCP one) have a grace of the buffer.
    /// `reason`: the BYE's reason for leaving, if it gave one.
    pub fn handle_bye(&mut self, at: Instant, reason: Option<String>) {
        self.playout.handle_end(at);
        if self.ended.is_none() {
            self.ended = Some((at, EndReason::Bye));
        }
        if reason.is_some() {
            self.bye_reason = reason;
        }
    }

    /// The next payload in order that may go at `now`, valid until the next call; `None` when
    /// nothing may go yet (then [`Self::poll_timeout`] says when to ask again).
    pub fn poll_payload(&mut self, now: Instant) -> Option<&[u8]> {
        let Some((ext, buf)) = self.reorder.pop(now) else {
            self.playout.advance(now);
            self.note_range_end(now);
            return None;
        };
        // The extended number's low 16 bits are the packet's RTP sequence number.
        self.first_seq.get_or_insert(ext as u16);
        self.playout.handle_payload(now, &buf);
        self.written.add(buf.len());
        let old = std::mem::replace(&mut self.current, buf);
        self.recycle(old);
        self.note_range_end(now);
        Some(&self.current)
    }

    /// When to call [`Self::poll_payload`] (and [`Self::is_done`], [`Self::poll_requests`])
    /// again if no packet comes.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let end = self.ended.map(|(at, _)| at + self.grace);
        let repair = self.repairs.as_ref().and_then(Repairs::poll_timeout);
        let rate = self.mtfc.as_ref().and_then(|(_, next)| *next);
        [self.reorder.poll_timeout(), end, repair, rate].into_iter().flatten().min()
    }

    /// Why the input ended, once it has.
    #[must_use]
    pub fn ended(&self) -> Option<EndReason> {
        self.ended.map(|(_, r)| r)
    }

    /// Whether the input ended and the grace for stragglers passed: time to [`Self::finish`].
    #[must_use]
    pub fn is_done(&self, now: Instant) -> bool {
        self.ended.is_some_and(|(at, _)| now >= at + self.grace)
    }

    /// Ends the session at `now`: everything held is released by the next calls to
    /// [`Self::poll_payload`] without waiting (what is missing between is lost), and the player's
    /// clock plays out the rest without starving.
    pub fn finish(&mut self, now: Instant) {
        self.reorder.flush();
        self.playout.handle_end(now);
        self.finished_at = Some(now);
    }

    /// The account so far.
    #[must_use]
    pub fn summary(&self) -> Summary {
        let r = self.reorder.stats();
        let p = self.playout.stats();
        let end = self.finished_at.or(self.last_at);
        let duration_s = match (self.first_at, end) {
            (Some(a), Some(b)) => b.saturating_duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let rs = self.repairs.as_ref().map(Repairs::stats).unwrap_or_default();
        Summary {
            ended: self.ended().unwrap_or(EndReason::Incomplete),
            bye_reason: self.bye_reason.clone(),
            packets: self.packets,
            duplicates: r.duplicates,
            lost: r.lost,
            requested: rs.requested,
            nacks: rs.requests,
            recovered: rs.recovered,
            spurious: rs.spurious,
            reorder_wait_ms: self
                .repairs
                .as_ref()
                .map_or(0, |r| r.waits().0.as_millis().try_into().unwrap_or(u64::MAX)),
            rate_requests: self.rate_requests,
            late: r.late,
            reordered: r.reordered,
            written_packets: self.written.packets,
            written_bytes: self.written.bytes,
            starvations: p.starvations,
            stall_ms: p.stall_ns / 1_000_000,
            media_s: p.media_ns as f64 / 1e9,
            duration_s,
            first_seq: self.first_seq,
            sources: self
                .sources
                .iter()
                .map(|(address, s)| SourceSummary {
                    address: *address,
                    packets: s.traffic.packets,
                    bytes: s.traffic.bytes,
                    lsn_packets: s.lsn.received(),
                    lsn_gaps: s.lsn.gaps(),
                    nacked: s.nacked,
                    recovered: s.recovered,
                })
                .collect(),
        }
    }

    fn note_range_end(&mut self, now: Instant) {
        // After `finish` the player's clock ends its input itself: not a range end.
        if self.ended.is_none() && self.finished_at.is_none() && self.playout.input_ended() {
            self.ended = Some((now, EndReason::RangeEnd));
        }
    }

    fn recycle(&mut self, buf: Vec<u8>) {
        if self.pool.len() < POOL && buf.capacity() > 0 {
            self.pool.push(buf);
        }
    }
}

impl fmt::Display for Summary {
    /// A short table for people: the counts, then one line per source.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "ended: {}   duration {:.1} s   media {:.1} s",
            self.ended.as_str(),
            self.duration_s,
            self.media_s
        )?;
        if let Some(reason) = &self.bye_reason {
            writeln!(f, "the server ended the stream: {reason}")?;
        }
        writeln!(
            f,
            "packets {}   written {} ({} bytes)   lost {}   recovered {} (of {} asked for, {} \
             NACKs, {} not needed)   late {}   duplicates {}   reordered {}   starvations {} ({} ms stalled)   \
             rate requests {}",
            self.packets,
            self.written_packets,
            self.written_bytes,
            self.lost,
            self.recovered,
            self.requested,
            self.nacks,
            self.spurious,
            self.late,
            self.duplicates,
            self.reordered,
            self.starvations,
            self.stall_ms,
            self.rate_requests
        )?;
        writeln!(
            f,
            "{:<40} {:>10} {:>14} {:>10} {:>9} {:>8} {:>10}",
            "source", "packets", "bytes", "lsn", "lsn gaps", "nacked", "recovered"
        )?;
        for s in &self.sources {
            let lsn = if s.lsn_packets > 0 { s.lsn_packets.to_string() } else { "-".into() };
            let gaps = if s.lsn_packets > 0 { s.lsn_gaps.to_string() } else { "-".into() };
            let address = s.address.to_string();
            writeln!(
                f,
                "{:<40} {:>10} {:>14} {:>10} {:>9} {:>8} {:>10}",
                address, s.packets, s.bytes, lsn, gaps, s.nacked, s.recovered
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use isochron_rtp::{PT_MP2T, RTP_HEADER_LSN_LEN};

    use super::*;

    /// One RTP packet: sequence `seq`, LSN `lsn` if given, and one TS packet whose bytes say
    /// `seq` (so the output's order can be checked).
    fn packet(seq: u16, lsn: Option<u16>) -> Vec<u8> {
        let h = RtpHeader {
            marker: false,
            payload_type: PT_MP2T,
            sequence: seq,
            timestamp: 0,
            ssrc: 9,
        };
        let mut p = match lsn {
            Some(l) => {
                let mut head = [0; RTP_HEADER_LSN_LEN];
                h.write_lsn(l, seq, &mut head);
                head.to_vec()
            }
            None => h.to_bytes().to_vec(),
        };
        p.extend_from_slice(&ts(seq));
        p
    }

    fn ts(seq: u16) -> [u8; 188] {
        let mut t = [0xffu8; 188];
        t[0] = 0x47;
        t[3] = 0x10;
        t[4..6].copy_from_slice(&seq.to_be_bytes());
        t
    }

    /// A player with a `buffer_ms` buffer told by PLAY that packet `first` comes first (and
    /// `length` of media), and the time origin.
    fn started(buffer_ms: u64, first: u16, length: Option<Duration>) -> (Player, Instant) {
        let mut p = Player::new(Duration::from_millis(buffer_ms));
        p.handle_play(Some(first), length);
        (p, Instant::now())
    }

    fn ms(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// The address of a single server.
    fn server() -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], 6970))
    }

    fn drain(p: &mut Player, now: Instant, out: &mut Vec<u16>) {
        while let Some(pl) = p.poll_payload(now) {
            out.push(u16::from_be_bytes([pl[4], pl[5]]));
        }
    }

    #[test]
    fn three_nodes_interleaved_and_one_loss_is_attributed_to_its_node() {
        // Blocks of 4 packets placed over three nodes (Yima's random placement, here fixed);
        // each node numbers its own packets (LSN) and paces them on the shared clock, so they
        // arrive nearly in global order, neighbours swapped now and then.
        let nodes: [SocketAddr; 3] =
            ["10.0.0.1:5000", "10.0.0.2:5000", "10.0.0.3:5000"].map(|a| a.parse().unwrap());
        let placement = [0usize, 2, 1, 1, 0, 2, 2, 1, 0, 1];
        let first: u16 = 65_530; // the global numbers wrap on the way
        let mut lsn = [100u16, 7, 65_534];
        let mut sent = Vec::new();
        for (b, &node) in placement.iter().enumerate() {
            for k in 0..4 {
                let gsn = (b * 4 + k) as u16;
                sent.push((first.wrapping_add(gsn), node, lsn[node]));
                lsn[node] = lsn[node].wrapping_add(1);
            }
        }
        let mut arrivals = sent.clone();
        for i in (1..arrivals.len() - 1).step_by(5) {
            arrivals.swap(i, i + 1);
        }
        // Node 2's third packet is lost on the way.
        let lost = sent.iter().filter(|s| s.1 == 2).nth(2).unwrap().0;
        arrivals.retain(|s| s.0 != lost);

        let (mut p, t0) = started(200, first, None);
        let mut out = Vec::new();
        for (i, &(seq, node, l)) in arrivals.iter().enumerate() {
            let at = ms(t0, i as u64);
            p.handle_rtp(at, nodes[node], &packet(seq, Some(l)));
            drain(&mut p, at, &mut out);
        }
        let mut bye = Vec::new();
        isochron_rtp::rtcp::write_bye(&mut bye, 9, None);
        let end = ms(t0, 50);
        p.handle_rtcp(end, &bye);
        assert!(!p.is_done(end));
        assert_eq!(p.poll_timeout(), Some(ms(t0, 206)), "the gap's hold");
        let done = end + MIN_GRACE;
        assert!(p.is_done(done));
        drain(&mut p, done, &mut out);
        p.finish(done);
        drain(&mut p, done, &mut out);

        let want: Vec<u16> = sent.iter().map(|s| s.0).filter(|&s| s != lost).collect();
        assert_eq!(out, want, "global order, the lost one skipped");
        let s = p.summary();
        assert_eq!(s.ended, EndReason::Bye);
        assert_eq!((s.packets, s.written_packets, s.written_bytes), (39, 39, 39 * 188));
        assert_eq!((s.lost, s.late, s.duplicates), (1, 0, 0));
        assert_eq!(s.reordered, 7, "the swaps but the one with the lost packet");
        assert_eq!(s.first_seq, Some(first));
        let by_node: Vec<(SocketAddr, u64, u64, u64)> =
            s.sources.iter().map(|x| (x.address, x.packets, x.lsn_packets, x.lsn_gaps)).collect();
        assert_eq!(
            by_node,
            [(nodes[0], 12, 12, 0), (nodes[2], 11, 11, 1), (nodes[1], 16, 16, 0)],
            "in order first heard from; the loss is node 3's"
        );
        assert_eq!(s.sources[1].bytes, 11 * 188);
        let table = s.to_string();
        assert!(table.contains("10.0.0.3:5000") && table.contains("lost 1"), "{table}");
    }

    #[test]
    fn duplicates_and_late_packets_are_counted_not_written() {
        let (mut p, t0) = started(100, 1, None);
        let (from, at) = (server(), |n: u64| ms(t0, n));
        let mut out = Vec::new();
        for (ms, seq) in [(0, 1u16), (1, 2), (2, 2), (3, 4), (4, 5)] {
            p.handle_rtp(at(ms), from, &packet(seq, None));
            drain(&mut p, at(ms), &mut out);
        }
        drain(&mut p, at(103), &mut out);
        assert_eq!(out, [1, 2, 4, 5], "3 skipped once 4 waited 100 ms");
        p.handle_rtp(at(110), from, &packet(3, None));
        p.handle_rtp(at(111), from, &packet(5, None));
        p.finish(at(120));
        drain(&mut p, at(120), &mut out);
        let s = p.summary();
        assert_eq!(s.ended, EndReason::Incomplete);
        assert_eq!((s.packets, s.written_packets), (7, 4));
        assert_eq!((s.lost, s.late, s.duplicates), (0, 1, 2));
        assert_eq!(s.sources.len(), 1);
        assert_eq!((s.sources[0].packets, s.sources[0].lsn_packets), (7, 0));
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["ended"], "incomplete");
        assert_eq!(json["sources"][0]["address"], "127.0.0.1:6970");
    }

    /// A TS packet on PID 256 carrying PCR `ms` milliseconds.
    fn pcr_ts(ms: u64) -> [u8; 188] {
        let mut p = [0xffu8; 188];
        let base = ms * 90;
        p[..6].copy_from_slice(&[0x47, 0x01, 0x00, 0x30, 7, 0x10]);
        p[6] = (base >> 25) as u8;
        p[7] = (base >> 17) as u8;
        p[8] = (base >> 9) as u8;
        p[9] = (base >> 1) as u8;
        p[10] = (((base & 1) << 7) as u8) | 0x7e;
        p[11] = 0;
        p
    }

    #[test]
    fn the_announced_range_ends_the_input_and_the_clock_counts_a_starvation() {
        let (mut p, t0) = started(200, 0, Some(Duration::from_millis(2_000)));
        let (from, at) = (server(), |n: u64| ms(t0, n));
        let send = |p: &mut Player, seq: u16, arrive: u64, media: u64| {
            let h =
                RtpHeader { marker: false, payload_type: 33, sequence: seq, timestamp: 0, ssrc: 1 };
            let mut pkt = h.to_bytes().to_vec();
            pkt.extend_from_slice(&pcr_ts(media));
            p.handle_rtp(at(arrive), from, &pkt);
            while p.poll_payload(at(arrive)).is_some() {}
        };
        // 100 ms of media per packet in real time up to 1 s, then nothing for 1 s: a starvation.
        for i in 0..=10 {
            send(&mut p, i, u64::from(i) * 100, u64::from(i) * 100);
        }
        assert!(p.poll_payload(at(2_000)).is_none());
        assert_eq!(p.summary().starvations, 1);
        for i in 11..=20 {
            send(&mut p, i, 1_000 + u64::from(i) * 100, u64::from(i) * 100);
        }
        // Media reaches the announced 2 s (within the 300 ms slack): the input ended.
        assert_eq!(p.ended(), Some(EndReason::RangeEnd));
        let s = p.summary();
        assert_eq!((s.written_packets, s.lost, s.starvations), (21, 0, 1));
        assert!((s.media_s - 2.0).abs() < 1e-9, "{}", s.media_s);
    }
}
