//! One emulation client (Yima §3.1): a real RTSP session whose player consumes the stream by
//! its own timing, counts what went wrong, and asks for rate changes (MTFC).
//!
//! Two owners, two roles. The *sink* ([`BenchSink`], a [`MediaSink`]) lives on the session's
//! receive path and owns the player ([`Playout`]), the MTFC state and the RTP sequence check; it
//! publishes its counts into the session's [`SessionCounters`] (atomics, read by the sampler)
//! every tick. The *controller* ([`run_client`]) owns the RTSP connection: it sets up and plays
//! the session, carries out the sink's rate requests with SET_PARAMETER, seeks and pauses when
//! the load shape says so, tears down at the end, and starts the next session. They talk over
//! two channels: [`SinkEvent`] up, [`SinkControl`] down.
//!
//! A session plays an MP2T object (one RTP stream, consumed by its PCR: [`Playout`]) or a native
//! one (one RTP stream per track, all SET UP into the session and consumed by their RTP
//! timestamps from `RTP-Info`'s start: [`NativePlayout`]); the sink checks each track's
//! sequence numbers on its own (a gap is loss on that track) and counts each track's packets
//! and bytes ([`SessionCounters::tracks`]). MTFC, seeks, pauses and loops work alike: the
//! server paces the session as a whole.
//!
//! The sink also counts packets and payload bytes per source IP ([`SessionCounters::sources`]):
//! a cluster's nodes each send their own blocks from their own address (Yima §2.2), and the
//! bench reports each node's share of the bandwidth (Yima Figure 4). The table is fixed-size
//! ([`crate::sources`]), so a packet costs no allocation.
//!
//! A server that answers a rate request with anything but 200 (a server without MTFC) is
//! left at nominal pacing: the controller stops sending and tells the sink to stop asking.
//!
//! Not here: the load shape (which URL, when to start, when to stop), sampling, reports.

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use anyhow::bail;
use isochron_base::Pace;
use isochron_base::mix::SplitMix64;
use isochron_rtp::RtpHeader;
use isochron_rtp::rtcp::{RtcpPacket, parse_compound};
use serde::Serialize;
use tokio::sync::{mpsc, watch};

use super::digest::{Seen, TS_PACKET, ts_packet_hash};
use super::mtfc::{Mtfc, MtfcConfig};
use super::native_playout::NativePlayout;
use super::playout::{PlayState, Playout, PlayoutStats};
use crate::client::{Client, MediaSink, PlayInfo, Transport};
use crate::sources::{MAX_SOURCES, SourceTable, Traffic};

/// How often the sink gives MTFC a buffer sample.
const MTFC_SAMPLE: Duration = Duration::from_millis(100);
/// How long after a seek's PLAY response packets numbered before its RTP-Info `seq` are dropped
/// (a server whose RTP-Info does not match its packets must not silence the client).
const SEEK_WAIT: Duration = Duration::from_millis(500);
/// How often the controller sends a keep-alive (OPTIONS) to the server.
const KEEPALIVE: Duration = Duration::from_secs(25);
/// How long a TEARDOWN may take at the end.
const TEARDOWN_WAIT: Duration = Duration::from_secs(2);

/// Player states as published in [`SessionCounters::state`].
pub mod state {
    /// Not set up yet, or torn down.
    pub const IDLE: u8 = 0;
    /// Filling the playout buffer.
    pub const BUFFERING: u8 = 1;
    /// Playing.
    pub const PLAYING: u8 = 2;
    /// Starved, refilling.
    pub const STALLED: u8 = 3;
    /// Paused by the client.
    pub const PAUSED: u8 = 4;
    /// Played to the end.
    pub const FINISHED: u8 = 5;
    /// Received to the end, playing out the buffer (no longer served).
    pub const DRAINING: u8 = 6;
}

/// Tracks of a session counted one by one in [`SessionCounters::tracks`]; further tracks are
/// in the totals only.
pub const MAX_TRACKS: usize = 8;

/// A session's counts, written by its sink and controller, read by the sampler.
#[derive(Debug, Default)]
pub struct SessionCounters {
    /// RTP payload bytes received (the TS bytes of an MP2T session), all tracks.
    pub bytes: AtomicU64,
    /// RTP packets received.
    pub packets: AtomicU64,
    /// Packets missing (sequence gaps not filled later).
    pub lost: AtomicU64,
    /// Packets that arrived while the player was starved for them.
    pub late: AtomicU64,
    /// Packets that arrived out of order.
    pub reordered: AtomicU64,
    /// MP2T: the digest of the distinct TS packets received ([`super::digest`]), once
    /// `has_digest`.
    pub digest: AtomicU64,
    /// Whether `digest` is kept (an MP2T session).
    pub has_digest: AtomicBool,
    /// Starvation events.
    pub starvations: AtomicU64,
    /// Time stalled, ns.
    pub stall_ns: AtomicU64,
    /// The most a packet arrived behind the stream's schedule, ns
    /// ([`PlayoutStats::lateness_max_ns`]).
    pub lateness_max_ns: AtomicU64,
    /// Media time received, ns.
    pub media_ns: AtomicU64,
    /// Rate changes the server accepted.
    pub rate_changes: AtomicU64,
    /// Seeks done (written by the controller).
    pub seeks: AtomicU64,
    /// Pauses done (written by the controller).
    pub pauses: AtomicU64,
    /// Times a looping session played its object again from the start (written by the
    /// controller).
    pub loops: AtomicU64,
    /// Buffer level, ms.
    pub level_ms: AtomicU64,
    /// Player state ([`state`]).
    pub state: AtomicU8,
    /// Set up and not torn down (written by the controller).
    pub open: AtomicBool,
    /// Arrival of the first packet, ns after the bench's epoch (0 = none yet).
    pub first_ns: AtomicU64,
    /// When the first PLAY was sent, ns after the bench's epoch (0 = not yet; written by the
    /// controller). With `first_ns`, the start latency a viewer sees.
    pub play_ns: AtomicU64,
    /// Arrival of the last packet, ns after the bench's epoch.
    pub last_ns: AtomicU64,
    /// Packets and payload bytes per source IP, in the order first heard from (sources past
    /// [`MAX_SOURCES`] are in the totals only).
    pub sources: [SourceCounter; MAX_SOURCES],
    /// Tracks set up (1 for MP2T), written by the sink.
    pub track_count: AtomicU8,
    /// Per track, in the order set up (the first [`MAX_TRACKS`]).
    pub tracks: [TrackCounter; MAX_TRACKS],
}

/// What one track (RTP stream) of a session received, as published by its sink.
#[derive(Debug, Default)]
pub struct TrackCounter {
    /// RTP packets received.
    pub packets: AtomicU64,
    /// Payload bytes received.
    pub bytes: AtomicU64,
    /// Packets missing from its sequence (gaps not filled later).
    pub lost: AtomicU64,
}

/// What one source IP sent a session, as published by its sink.
#[derive(Debug, Default)]
pub struct SourceCounter {
    /// The source, once heard from.
    pub ip: OnceLock<IpAddr>,
    /// RTP packets received from it.
    pub packets: AtomicU64,
    /// Payload (TS) bytes received from it.
    pub bytes: AtomicU64,
}

impl SessionCounters {
    /// The sources heard from so far, with what each sent.
    pub fn source_traffic(&self) -> impl Iterator<Item = (IpAddr, Traffic)> + '_ {
        self.sources.iter().map_while(|s| {
            let r = Ordering::Relaxed;
            Some((*s.ip.get()?, Traffic { packets: s.packets.load(r), bytes: s.bytes.load(r) }))
        })
    }

    /// Whether the session is set up and receiving (not paused or finished).
    #[must_use]
    pub fn receiving(&self) -> bool {
        self.open.load(Ordering::Relaxed)
            && !matches!(
                self.state.load(Ordering::Relaxed),
                state::PAUSED | state::FINISHED | state::DRAINING
            )
    }
}

/// From the sink to its controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkEvent {
    /// MTFC asks for this pace.
    Rate(Pace),
    /// The player played the stream to its end.
    Finished,
    /// A looping sink's input ended (RTCP BYE): play it again.
    InputEnded,
}

/// One track's start, from a PLAY response's `RTP-Info` (RFC 2326 §12.33).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrackStart {
    /// The sequence number of the track's first packet.
    pub seq: Option<u16>,
    /// Its RTP timestamp: media time 0 of the play range on the track's clock.
    pub rtptime: Option<u32>,
}

/// From the controller to its sink.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SinkControl {
    /// PAUSE is being sent.
    Pause,
    /// PLAY (resume) is being sent.
    Resume,
    /// PLAY with a new start is being sent: flush, and drop packets until [`Self::SeekStart`].
    Seek,
    /// The seek's PLAY response: its first packet has this RTP sequence number (RTP-Info), if
    /// the server said; packets before it (in flight from the old position) are dropped.
    SeekStart(Option<u16>),
    /// A native session's PLAY response (the first, or a seek's): each track's start, in the
    /// order set up. It gives the player its timeline; after a [`Self::Seek`] it also plays
    /// [`Self::SeekStart`]'s part for every track.
    Tracks(Vec<TrackStart>),
    /// The PLAY response announced this much media.
    Length(Duration),
    /// The server refused a rate request: stop asking.
    MtfcOff,
}

/// The player a sink drives.
#[derive(Clone, Debug)]
enum Player {
    /// One MP2T stream, by its PCR.
    Ts(Playout),
    /// Native tracks, by their RTP timestamps.
    Native(NativePlayout),
}

impl Player {
    fn stats(&self) -> PlayoutStats {
        match self {
            Self::Ts(p) => p.stats(),
            Self::Native(p) => p.stats(),
        }
    }

    fn state(&self) -> PlayState {
        match self {
            Self::Ts(p) => p.state(),
            Self::Native(p) => p.state(),
        }
    }

    fn input_ended(&self) -> bool {
        match self {
            Self::Ts(p) => p.input_ended(),
            Self::Native(p) => p.input_ended(),
        }
    }

    fn level(&self, now: Instant) -> Duration {
        match self {
            Self::Ts(p) => p.level(now),
            Self::Native(p) => p.level(now),
        }
    }

    fn stall_ns(&self, now: Instant) -> u64 {
        match self {
            Self::Ts(p) => p.stall_ns(now),
            Self::Native(p) => p.stall_ns(now),
        }
    }

    fn advance(&mut self, now: Instant) {
        match self {
            Self::Ts(p) => p.advance(now),
            Self::Native(p) => p.advance(now),
        }
    }

    fn handle_pause(&mut self, now: Instant) {
        match self {
            Self::Ts(p) => p.handle_pause(now),
            Self::Native(p) => p.handle_pause(now),
        }
    }

    fn handle_resume(&mut self, now: Instant) {
        match self {
            Self::Ts(p) => p.handle_resume(now),
            Self::Native(p) => p.handle_resume(now),
        }
    }

    fn handle_seek(&mut self, now: Instant) {
        match self {
            Self::Ts(p) => p.handle_seek(now),
            Self::Native(p) => p.handle_seek(now),
        }
    }

    fn handle_length(&mut self, length: Duration) {
        match self {
            Self::Ts(p) => p.handle_length(length),
            Self::Native(p) => p.handle_length(length),
        }
    }
}

/// One track's sequence check and counts (RFC 3550 §A.1: a gap is loss until the packet comes).
#[derive(Clone, Debug, Default)]
struct TrackCheck {
    expected: Option<u16>,
    /// After a seek: drop packets numbered before this one (`Some(None)`: every packet until the
    /// PLAY response), for at most [`SEEK_WAIT`] after the response.
    awaiting: Option<Option<u16>>,
    /// An RTCP BYE came for this track (since the last seek).
    bye: bool,
    packets: u64,
    bytes: u64,
    lost: u64,
    reordered: u64,
    /// The sequence numbers that came, to count each packet once in `digest`.
    seen: Seen,
    /// MP2T: the content received ([`super::digest`]).
    digest: u64,
}

/// The receive-path half of an emulation client.
pub struct BenchSink {
    epoch: Instant,
    player: Player,
    mtfc: Option<Mtfc>,
    counters: Arc<SessionCounters>,
    events: mpsc::UnboundedSender<SinkEvent>,
    control: mpsc::UnboundedReceiver<SinkControl>,
    /// Per track (one for MP2T).
    tracks: Vec<TrackCheck>,
    awaiting_since: Option<Instant>,
    next_mtfc: Option<Instant>,
    finished_sent: bool,
    /// Looping: at the end of the input (RTCP BYE) ask the controller to play again, instead
    /// of playing the buffer out and finishing.
    pub looping: bool,
    /// Looping: the input's end was reported, and no seek has followed yet.
    loop_asked: bool,
    counts: LocalCounts,
    sources: SourceTable<IpAddr, Traffic>,
}

#[derive(Default)]
struct LocalCounts {
    first_ns: u64,
    last_ns: u64,
}

impl BenchSink {
    /// A sink of an MP2T session whose player buffers `depth`, with MTFC if `mtfc` is given.
    #[must_use]
    pub fn new(
        epoch: Instant,
        depth: Duration,
        mtfc: Option<MtfcConfig>,
        counters: Arc<SessionCounters>,
        events: mpsc::UnboundedSender<SinkEvent>,
        control: mpsc::UnboundedReceiver<SinkControl>,
    ) -> Self {
        Self::with_player(
            Player::Ts(Playout::new(depth)),
            1,
            epoch,
            mtfc,
            counters,
            events,
            control,
        )
    }

    /// A sink of a native session of tracks with these RTP clock rates (Hz, in the order set
    /// up), whose player buffers `depth`, with MTFC if `mtfc` is given.
    #[must_use]
    pub fn native(
        epoch: Instant,
        depth: Duration,
        clocks: &[u32],
        mtfc: Option<MtfcConfig>,
        counters: Arc<SessionCounters>,
        events: mpsc::UnboundedSender<SinkEvent>,
        control: mpsc::UnboundedReceiver<SinkControl>,
    ) -> Self {
        let player = Player::Native(NativePlayout::new(depth, clocks));
        Self::with_player(player, clocks.len(), epoch, mtfc, counters, events, control)
    }

    fn with_player(
        player: Player,
        tracks: usize,
        epoch: Instant,
        mtfc: Option<MtfcConfig>,
        counters: Arc<SessionCounters>,
        events: mpsc::UnboundedSender<SinkEvent>,
        control: mpsc::UnboundedReceiver<SinkControl>,
    ) -> Self {
        counters.track_count.store(u8::try_from(tracks).unwrap_or(u8::MAX), Ordering::Relaxed);
        Self {
            epoch,
            player,
            mtfc: mtfc.map(Mtfc::new),
            counters,
            events,
            control,
            tracks: vec![TrackCheck::default(); tracks.max(1)],
            awaiting_since: None,
            next_mtfc: None,
            finished_sent: false,
            looping: false,
            loop_asked: false,
            counts: LocalCounts::default(),
            sources: SourceTable::new(),
        }
    }

    fn apply_controls(&mut self, now: Instant) {
        while let Ok(c) = self.control.try_recv() {
            match c {
                SinkControl::Pause => self.player.handle_pause(now),
                SinkControl::Resume => self.player.handle_resume(now),
                SinkControl::Seek => {
                    self.loop_asked = false;
                    self.player.handle_seek(now);
                    for t in &mut self.tracks {
                        t.awaiting = Some(None);
                        t.bye = false;
                    }
                }
                SinkControl::SeekStart(seq) => {
                    // Other servers may renumber after a seek: learn the sequence anew.
                    if let Some(t) = self.tracks.first_mut() {
                        t.expected = None;
                        t.awaiting = seq.map(Some);
                        t.seen.clear();
                    }
                    self.awaiting_since = Some(now);
                }
                SinkControl::Tracks(starts) => {
                    if let Player::Native(p) = &mut self.player {
                        let rtptimes: Vec<Option<u32>> = starts.iter().map(|s| s.rtptime).collect();
                        p.handle_start(now, &rtptimes);
                    }
                    if self.tracks.iter().any(|t| t.awaiting.is_some()) {
                        // A seek's response: each track from its own first packet.
                        for (i, t) in self.tracks.iter_mut().enumerate() {
                            t.expected = None;
                            t.awaiting = starts.get(i).and_then(|s| s.seq).map(Some);
                            t.seen.clear();
                        }
                        self.awaiting_since = Some(now);
                    }
                }
                SinkControl::Length(d) => self.player.handle_length(d),
                SinkControl::MtfcOff => self.mtfc = None,
            }
        }
    }

    fn publish(&mut self, now: Instant) {
        let c = &self.counters;
        let st = self.player.stats();
        let r = Ordering::Relaxed;
        let sum = |f: fn(&TrackCheck) -> u64| self.tracks.iter().map(f).sum::<u64>();
        c.bytes.store(st.bytes, r);
        c.packets.store(sum(|t| t.packets), r);
        c.lost.store(sum(|t| t.lost), r);
        c.reordered.store(sum(|t| t.reordered), r);
        if matches!(self.player, Player::Ts(_)) {
            let digest = self.tracks.iter().fold(0u64, |d, t| d.wrapping_add(t.digest));
            c.digest.store(digest, r);
            c.has_digest.store(true, r);
        }
        for (t, slot) in self.tracks.iter().zip(&c.tracks) {
            slot.packets.store(t.packets, r);
            slot.bytes.store(t.bytes, r);
            slot.lost.store(t.lost, r);
        }
        c.late.store(st.late_packets, r);
        c.lateness_max_ns.store(st.lateness_max_ns, r);
        c.starvations.store(st.starvations, r);
        c.stall_ns.store(self.player.stall_ns(now), r);
        c.media_ns.store(st.media_ns, r);
        c.level_ms.store(self.player.level(now).as_millis() as u64, r);
        c.first_ns.store(self.counts.first_ns, r);
        c.last_ns.store(self.counts.last_ns, r);
        for ((ip, t), slot) in self.sources.iter().zip(&c.sources) {
            // The sink is the only writer: the slot's IP is set once, here.
            let _ = slot.ip.set(*ip);
            slot.packets.store(t.packets, r);
            slot.bytes.store(t.bytes, r);
        }
        c.state.store(
            match self.player.state() {
                PlayState::Buffering => state::BUFFERING,
                PlayState::Playing { .. } if self.player.input_ended() => state::DRAINING,
                PlayState::Playing { .. } => state::PLAYING,
                PlayState::Stalled { .. } => state::STALLED,
                PlayState::Paused => state::PAUSED,
                PlayState::Finished => state::FINISHED,
            },
            r,
        );
    }
}

impl MediaSink for BenchSink {
    fn on_rtp(&mut self, at: Instant, from: SocketAddr, track: usize, packet: &[u8]) {
        self.apply_controls(at);
        let Ok((header, range)) = RtpHeader::parse(packet) else { return };
        let waited =
            self.awaiting_since.is_some_and(|t| at.saturating_duration_since(t) > SEEK_WAIT);
        // A channel or socket of no track set up: not this session's.
        let Some(t) = self.tracks.get_mut(track) else { return };
        let seq = header.sequence;
        if let Some(first) = t.awaiting {
            match first {
                // Numbered before the seek's first packet: still from the old position.
                Some(f) if (seq.wrapping_sub(f) as i16) < 0 && !waited => return,
                None => return,
                Some(_) => t.awaiting = None,
            }
        }
        match t.expected {
            None => t.expected = Some(seq.wrapping_add(1)),
            Some(exp) => {
                let d = seq.wrapping_sub(exp) as i16;
                if d >= 0 {
                    t.lost += d as u64;
                    t.expected = Some(seq.wrapping_add(1));
                } else {
                    // A packet counted lost came after all (or a duplicate).
                    t.reordered += 1;
                    t.lost = t.lost.saturating_sub(1);
                }
            }
        }
        t.packets += 1;
        t.bytes += range.len() as u64;
        let fresh = t.seen.insert(seq);
        if fresh && matches!(self.player, Player::Ts(_)) {
            for p in packet[range.clone()].chunks_exact(TS_PACKET) {
                t.digest = t.digest.wrapping_add(ts_packet_hash(p));
            }
        }
        let ns = at.saturating_duration_since(self.epoch).as_nanos() as u64;
        if self.counts.first_ns == 0 {
            self.counts.first_ns = ns.max(1);
        }
        self.counts.last_ns = ns;
        if let Some((_, t)) = self.sources.entry(from.ip()) {
            t.add(range.len());
        }
        match &mut self.player {
            Player::Ts(p) => p.handle_payload(at, &packet[range]),
            Player::Native(p) => p.handle_packet(at, track, header.timestamp, range.len()),
        }
    }

    fn on_rtcp(&mut self, at: Instant, track: usize, packet: &[u8]) {
        if !parse_compound(packet).flatten().any(|p| matches!(p, RtcpPacket::Bye { .. })) {
            return;
        }
        if let Some(t) = self.tracks.get_mut(track) {
            t.bye = true;
        }
        // The input has ended when every track has said so (ffmpeg waits for each BYE too).
        let all = self.tracks.iter().all(|t| t.bye);
        if self.looping {
            if all && !self.loop_asked {
                self.loop_asked = true;
                let _ = self.events.send(SinkEvent::InputEnded);
            }
            return;
        }
        match &mut self.player {
            Player::Ts(p) => p.handle_end(at),
            Player::Native(p) => p.handle_track_end(at, track),
        }
    }

    fn on_tick(&mut self, at: Instant) {
        self.apply_controls(at);
        self.player.advance(at);
        let st = self.player.state();
        if let Some(m) = self.mtfc.as_mut()
            && !matches!(st, PlayState::Paused | PlayState::Finished)
            && (m.config().steer_while_filling || st != PlayState::Buffering)
            && self.next_mtfc.is_none_or(|t| at >= t)
        {
            self.next_mtfc = Some(at + MTFC_SAMPLE);
            if let Some(p) = m.handle_level(at, self.player.level(at)) {
                let _ = self.events.send(SinkEvent::Rate(p));
            }
        }
        self.publish(at);
        if st == PlayState::Finished && !self.finished_sent {
            self.finished_sent = true;
            let _ = self.events.send(SinkEvent::Finished);
        }
    }
}

/// Which object a new session plays.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Popularity {
    /// Every URL equally likely.
    Uniform,
    /// URL `i` (from 1) with probability ∝ 1 / i^s.
    Zipf(f64),
    /// Client `k` plays URL `k mod n`, every session (a cluster's nodes taken in turn as the
    /// sessions' RTSP server, Yima §2.4's round-robin DNS).
    RoundRobin,
}

impl std::str::FromStr for Popularity {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "uniform" => Ok(Self::Uniform),
            "round-robin" => Ok(Self::RoundRobin),
            _ => match s.strip_prefix("zipf:").map(str::parse::<f64>) {
                Some(Ok(v)) if v >= 0.0 && v.is_finite() => Ok(Self::Zipf(v)),
                _ => Err(format!("{s:?}: expected uniform, round-robin or zipf:S (S ≥ 0)")),
            },
        }
    }
}

impl Popularity {
    /// Picks an index in `0..n` for client `client` with `rng`.
    pub fn pick(self, n: usize, client: usize, rng: &mut SplitMix64) -> usize {
        let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        match self {
            Self::RoundRobin => client % n.max(1),
            Self::Uniform => ((u * n as f64) as usize).min(n.saturating_sub(1)),
            Self::Zipf(s) => {
                let w: Vec<f64> = (1..=n).map(|i| 1.0 / (i as f64).powf(s)).collect();
                let total: f64 = w.iter().sum();
                let mut acc = 0.0;
                for (i, wi) in w.iter().enumerate() {
                    acc += wi / total;
                    if u < acc {
                        return i;
                    }
                }
                n.saturating_sub(1)
            }
        }
    }
}

/// What every client of a run shares.
#[derive(Clone, Debug)]
pub struct ClientSettings {
    /// The objects.
    pub urls: Vec<String>,
    /// How sessions are set up: client `k` uses entry `k` mod the length (never empty).
    pub transports: Vec<Transport>,
    /// Playout buffer depth.
    pub buffer: Duration,
    /// MTFC thresholds (`None`: no rate requests).
    pub mtfc: Option<MtfcConfig>,
    /// A pace asked for once, right after SETUP, with MTFC off (to emulate a slow or fast
    /// server).
    pub force_pace: Option<Pace>,
    /// With MTFC: ask the server to pace by bytes at the object's mean rate, which smooths
    /// a VBR stream's traffic (`docs/design/mtfc.md`), right after SETUP.
    pub rate_paced: bool,
    /// Which URL a session plays.
    pub popularity: Popularity,
    /// Mean interval between seeks, per client.
    pub seek_every: Option<Duration>,
    /// Mean interval between pauses, per client.
    pub pause_every: Option<Duration>,
    /// How long a pause lasts.
    pub pause_for: Duration,
    /// The share of clients that seek and pause: client `k` does when
    /// [`stagger_phase`]`(k)` is below it (1: every client).
    pub interactive_share: f64,
    /// Start a new session when one ends (keeps the load at N until the run stops).
    pub repeat: bool,
    /// Staggered looping clients: client `k`'s first session starts at the fraction
    /// [`stagger_phase`]`(k)` of the object (a PLAY with `Range: npt=…`), and every session
    /// plays its object in a loop (a PLAY from 0 when its input ends, on the same session), so
    /// that N clients play N parts of the object spread over all of it and none leaves: the
    /// load of clients that arrived at different times (Yima §3.1), without the churn of
    /// sessions ending and starting.
    pub stagger: bool,
    /// The run's epoch (arrival times are ns after it).
    pub epoch: Instant,
}

/// How a session ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Played to the end of the stream.
    Complete,
    /// Stopped by the run (its end, or a step of the load shape).
    Stopped,
    /// The server refused the session: 453 Not Enough Bandwidth (admission) or 503 Service
    /// Unavailable (a full session table) to SETUP or PLAY.
    Refused,
    /// Something failed (connection, protocol).
    Error,
}

/// One session, for the report.
#[derive(Clone, Debug, Serialize)]
pub struct SessionRecord {
    /// The client.
    pub client: usize,
    /// The session's number within the client.
    pub session: usize,
    /// The URL played.
    pub url: String,
    /// The lower transport: `udp` or `tcp`.
    pub transport: &'static str,
    /// Start, s after the run's epoch.
    pub start_s: f64,
    /// End, s after the run's epoch.
    pub end_s: f64,
    /// How it ended.
    pub outcome: Outcome,
    /// What went wrong, if anything.
    pub error: Option<String>,
    /// RTP payload bytes received (TS bytes for MP2T), all tracks.
    pub bytes: u64,
    /// RTP packets received, all tracks.
    pub packets: u64,
    /// Packets lost, all tracks.
    pub lost: u64,
    /// MP2T: the digest of the distinct TS packets received, hex ([`super::digest`]): the
    /// object's, [`super::digest::ts_digest`] of its file, if the session received all of it
    /// once (and did not seek).
    pub ts_digest: Option<String>,
    /// Packets late.
    pub late: u64,
    /// Packets reordered.
    pub reordered: u64,
    /// Starvation events.
    pub starvations: u64,
    /// Time stalled, ms.
    pub stall_ms: u64,
    /// The most a packet arrived behind the stream's own schedule, ms (against the
    /// best-served packet; a player with a shallower buffer starves).
    pub lateness_max_ms: f64,
    /// Rate changes accepted by the server.
    pub rate_changes: u64,
    /// Whether the server refused a rate request (no MTFC there).
    pub rate_refused: bool,
    /// Seeks done.
    pub seeks: u64,
    /// Pauses done.
    pub pauses: u64,
    /// Times a looping session started its object again.
    pub loops: u64,
    /// Start latency: the first PLAY sent → the first RTP packet received (kernel receive
    /// time over UDP), ms; `None` if no packet came.
    pub start_latency_ms: Option<f64>,
    /// Mean received rate between the first and the last packet, bits/s.
    pub received_bits_s: f64,
    /// Media received, s.
    pub media_s: f64,
    /// The content's own rate (bytes per media second × 8), bits/s.
    pub content_bits_s: f64,
    /// Packets and payload bytes per source IP (per node of a cluster).
    pub per_source: BTreeMap<IpAddr, Traffic>,
    /// Per track, in the order set up (one for an MP2T session).
    pub tracks: Vec<TrackRecord>,
}

/// What one track of a session received, for the report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TrackRecord {
    /// RTP packets received.
    pub packets: u64,
    /// Payload bytes received.
    pub bytes: u64,
    /// Packets lost (sequence gaps not filled later).
    pub lost: u64,
}

/// Runs client `id`: sessions one after another until `stop` (or, without `repeat`, after
/// one). Every session's counters are announced on `registry` as it starts.
pub async fn run_client(
    settings: Arc<ClientSettings>,
    id: usize,
    seed: u64,
    mut stop: watch::Receiver<bool>,
    registry: mpsc::UnboundedSender<Arc<SessionCounters>>,
) -> Vec<SessionRecord> {
    let mut rng = SplitMix64::new(seed ^ (id as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut records = Vec::new();
    for n in 0.. {
        if *stop.borrow() {
            break;
        }
        let url =
            settings.urls[settings.popularity.pick(settings.urls.len(), id, &mut rng)].clone();
        let counters = Arc::new(SessionCounters::default());
        let _ = registry.send(Arc::clone(&counters));
        let start = settings.epoch.elapsed().as_secs_f64();
        let mut rate_refused = false;
        let phase = (settings.stagger && n == 0).then(|| stagger_phase(id));
        let how = How {
            transport: settings
                .transports
                .get(id % settings.transports.len().max(1))
                .copied()
                .unwrap_or(Transport::Udp),
            phase,
            interactive: stagger_phase(id) < settings.interactive_share,
        };
        let result =
            session(&settings, &url, how, &counters, &mut rng, &mut stop, &mut rate_refused).await;
        counters.open.store(false, Ordering::Relaxed);
        let (outcome, error) = match result {
            Ok(o) => (o, None),
            Err(e) => {
                let msg = format!("{e:#}");
                let refused = ["PLAY: 453", "SETUP: 453", "PLAY: 503", "SETUP: 503"]
                    .iter()
                    .any(|m| msg.contains(m));
                (if refused { Outcome::Refused } else { Outcome::Error }, Some(msg))
            }
        };
        records.push(record(
            id,
            n,
            url,
            how.transport,
            start,
            &settings,
            &counters,
            outcome,
            error,
            rate_refused,
        ));
        if !settings.repeat {
            break;
        }
        if outcome != Outcome::Complete && outcome != Outcome::Stopped {
            // Do not hammer a server that refuses: back off a little before the next try.
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => {}
            }
        }
    }
    records
}

#[allow(clippy::too_many_arguments)]
fn record(
    client: usize,
    session: usize,
    url: String,
    transport: Transport,
    start_s: f64,
    settings: &ClientSettings,
    c: &SessionCounters,
    outcome: Outcome,
    error: Option<String>,
    rate_refused: bool,
) -> SessionRecord {
    let r = Ordering::Relaxed;
    let bytes = c.bytes.load(r);
    let span_ns = c.last_ns.load(r).saturating_sub(c.first_ns.load(r));
    let media_s = c.media_ns.load(r) as f64 / 1e9;
    SessionRecord {
        client,
        session,
        url,
        transport: transport.as_str(),
        start_s,
        end_s: settings.epoch.elapsed().as_secs_f64(),
        outcome,
        error,
        bytes,
        packets: c.packets.load(r),
        lost: c.lost.load(r),
        ts_digest: c.has_digest.load(r).then(|| format!("{:016x}", c.digest.load(r))),
        late: c.late.load(r),
        reordered: c.reordered.load(r),
        starvations: c.starvations.load(r),
        stall_ms: c.stall_ns.load(r) / 1_000_000,
        lateness_max_ms: c.lateness_max_ns.load(r) as f64 / 1e6,
        rate_changes: c.rate_changes.load(r),
        rate_refused,
        seeks: c.seeks.load(r),
        pauses: c.pauses.load(r),
        loops: c.loops.load(r),
        start_latency_ms: start_latency_ms(c.play_ns.load(r), c.first_ns.load(r)),
        received_bits_s: if span_ns > 0 { bytes as f64 * 8e9 / span_ns as f64 } else { 0.0 },
        media_s,
        content_bits_s: if media_s > 0.0 { bytes as f64 * 8.0 / media_s } else { 0.0 },
        per_source: c.source_traffic().collect(),
        tracks: c
            .tracks
            .iter()
            .take(usize::from(c.track_count.load(r)))
            .map(|t| TrackRecord {
                packets: t.packets.load(r),
                bytes: t.bytes.load(r),
                lost: t.lost.load(r),
            })
            .collect(),
    }
}

/// Nanoseconds from `epoch` to now, at least 1 (0 means "not yet" in the counters).
fn nanos_since(epoch: Instant) -> u64 {
    u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// PLAY sent at `play_ns` → first packet at `first_ns` (both after the epoch, 0 = never), ms.
/// A packet can beat PLAY's timestamp only by clock granularity: clamped to 0.
fn start_latency_ms(play_ns: u64, first_ns: u64) -> Option<f64> {
    (play_ns > 0 && first_ns > 0).then(|| first_ns.saturating_sub(play_ns) as f64 / 1e6)
}

/// Where client `k` of a staggered load starts, as a fraction of the object: the fractional
/// part of `k` × the golden ratio (a Weyl sequence), so the first N clients, for any N, are
/// spread evenly over the object, each gap at most about 2.6 / N of it.
#[must_use]
pub fn stagger_phase(k: usize) -> f64 {
    const PHI: f64 = 0.618_033_988_749_894_9;
    (k as f64 * PHI).fract()
}

/// The duration in an SDP's `a=range:npt=0-D` line.
fn sdp_duration(sdp: &str) -> Option<Duration> {
    sdp.lines().find_map(|l| l.trim().strip_prefix("a=range:").and_then(range_length))
}

/// How one client's sessions go, from its number.
#[derive(Clone, Copy, Debug)]
struct How {
    /// The lower transport.
    transport: Transport,
    /// Start at this fraction of the object.
    phase: Option<f64>,
    /// Seek and pause (the settings' intervals).
    interactive: bool,
}

/// One session from DESCRIBE to TEARDOWN.
#[allow(clippy::too_many_arguments)]
async fn session(
    settings: &ClientSettings,
    url: &str,
    how: How,
    counters: &Arc<SessionCounters>,
    rng: &mut SplitMix64,
    stop: &mut watch::Receiver<bool>,
    rate_refused: &mut bool,
) -> anyhow::Result<Outcome> {
    let mut client = Client::connect(url).await?;
    let presentation = client.describe_presentation().await?;
    let sdp = presentation.sdp.clone();
    let (ev_tx, mut events) = mpsc::unbounded_channel();
    let (ctl, ctl_rx) = mpsc::unbounded_channel();
    let mtfc = if settings.force_pace.is_some() { None } else { settings.mtfc };
    let (epoch, buffer, counters_rc) = (settings.epoch, settings.buffer, Arc::clone(counters));
    // Native tracks: every one SET UP on its own control URL (aggregate control).
    let track_urls: Vec<String> = if presentation.is_mp2t() {
        Vec::new()
    } else {
        presentation
            .media
            .iter()
            .enumerate()
            .map(|(i, m)| {
                client.control_url(m.control.as_deref().unwrap_or(&format!("trackID={i}")))
            })
            .collect()
    };
    let native = !track_urls.is_empty();
    let mut sink = if native {
        let clocks: Vec<u32> = presentation.media.iter().map(|m| m.clock_rate).collect();
        BenchSink::native(epoch, buffer, &clocks, mtfc, counters_rc, ev_tx, ctl_rx)
    } else {
        BenchSink::new(epoch, buffer, mtfc, counters_rc, ev_tx, ctl_rx)
    };
    sink.looping = settings.stagger;
    let r = if native {
        client.setup_sink_tracks(how.transport, Box::new(sink), &track_urls).await?
    } else {
        client.setup_sink(how.transport, Box::new(sink)).await?
    };
    let status = u16::from(r.status());
    if status != 200 {
        bail!("SETUP: {status}");
    }
    // What a seek's (or the first) PLAY response tells the sink about where the stream starts.
    let started = |info: &PlayInfo| {
        if native {
            SinkControl::Tracks(track_starts(&track_urls, info))
        } else {
            SinkControl::SeekStart(info.seq)
        }
    };
    counters.open.store(true, Ordering::Relaxed);
    if let Some(p) = settings.force_pace
        && !client.set_rate(p, None).await?
    {
        *rate_refused = true;
    }
    if mtfc.is_some() && settings.rate_paced && !client.ask_rate_pacing().await? {
        *rate_refused = true;
    }
    counters.play_ns.store(nanos_since(settings.epoch), Ordering::Relaxed);
    let start = how
        .phase
        .zip(sdp_duration(&sdp))
        .map(|(f, len)| format!("npt={:.3}-", f * len.as_secs_f64()));
    let info = client.play(start.as_deref()).await?;
    if native {
        let _ = ctl.send(started(&info));
    }
    if let Some(len) = info.range.as_deref().and_then(range_length) {
        let _ = ctl.send(SinkControl::Length(len));
    }
    let mut mtfc_on = mtfc.is_some();
    let next = |every: Option<Duration>, rng: &mut SplitMix64| {
        every.map(|e| {
            // Uniform in [0.5, 1.5] × the mean interval.
            let f = 0.5 + (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
            tokio::time::Instant::now() + e.mul_f64(f)
        })
    };
    let far = || tokio::time::Instant::now() + Duration::from_secs(86_400 * 365);
    let (seek_every, pause_every) =
        if how.interactive { (settings.seek_every, settings.pause_every) } else { (None, None) };
    let mut seek_at = next(seek_every, rng);
    let mut pause_at = next(pause_every, rng);
    let mut keepalive = tokio::time::interval(KEEPALIVE);
    keepalive.tick().await;
    let length = info.range.as_deref().and_then(range_length);
    let outcome = loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(SinkEvent::Rate(mut p)) => {
                    // Coalesce requests queued meanwhile: only the newest matters.
                    while let Ok(SinkEvent::Rate(q)) = events.try_recv() {
                        p = q;
                    }
                    if mtfc_on {
                        if client.set_rate(p, None).await? {
                            counters.rate_changes.fetch_add(1, Ordering::Relaxed);
                        } else {
                            mtfc_on = false;
                            *rate_refused = true;
                            let _ = ctl.send(SinkControl::MtfcOff);
                        }
                    }
                }
                Some(SinkEvent::Finished) => break Outcome::Complete,
                Some(SinkEvent::InputEnded) => {
                    // Looping: the same session again from the start, at once.
                    let _ = ctl.send(SinkControl::Seek);
                    let info = client.play(Some("npt=0-")).await?;
                    let _ = ctl.send(started(&info));
                    if let Some(len) = info.range.as_deref().and_then(range_length) {
                        let _ = ctl.send(SinkControl::Length(len));
                    }
                    counters.loops.fetch_add(1, Ordering::Relaxed);
                }
                None => bail!("the receive path ended"),
            },
            _ = tokio::time::sleep_until(seek_at.unwrap_or_else(far)) => {
                let to = length.map_or(0.0, |l| l.as_secs_f64() * 0.8)
                    * ((rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64);
                let _ = ctl.send(SinkControl::Seek);
                let info = client.play(Some(&format!("npt={to:.3}-"))).await?;
                let _ = ctl.send(started(&info));
                if let Some(len) = info.range.as_deref().and_then(range_length) {
                    let _ = ctl.send(SinkControl::Length(len));
                }
                counters.seeks.fetch_add(1, Ordering::Relaxed);
                seek_at = next(seek_every, rng);
            }
            _ = tokio::time::sleep_until(pause_at.unwrap_or_else(far)) => {
                let _ = ctl.send(SinkControl::Pause);
                client.pause().await?;
                tokio::select! {
                    _ = tokio::time::sleep(settings.pause_for) => {}
                    _ = stop.changed() => {}
                }
                let _ = ctl.send(SinkControl::Resume);
                client.play(None).await?;
                counters.pauses.fetch_add(1, Ordering::Relaxed);
                pause_at = next(pause_every, rng);
            }
            _ = keepalive.tick() => {
                let url = client.aggregate_url();
                client.request("OPTIONS", &url, &[]).await?;
            }
            _ = stop.changed() => break Outcome::Stopped,
        }
        if *stop.borrow() {
            break Outcome::Stopped;
        }
    };
    let _ = tokio::time::timeout(TEARDOWN_WAIT, client.teardown()).await;
    Ok(outcome)
}

/// Each track's start from a PLAY response, for the tracks set up on `urls` in that order (the
/// `RTP-Info` entry naming the track's URL, else the entry in the track's position).
#[must_use]
pub fn track_starts(urls: &[String], info: &PlayInfo) -> Vec<TrackStart> {
    urls.iter()
        .enumerate()
        .map(|(i, url)| {
            info.entry_for(url, i)
                .map(|e| TrackStart { seq: e.seq, rtptime: e.rtptime })
                .unwrap_or_default()
        })
        .collect()
}

pub use isochron_rtsp::sdp::parse::range_length;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn popularity_parses_and_zipf_prefers_the_first() {
        assert_eq!("uniform".parse::<Popularity>(), Ok(Popularity::Uniform));
        assert_eq!("zipf:1.2".parse::<Popularity>(), Ok(Popularity::Zipf(1.2)));
        assert!("zipf:x".parse::<Popularity>().is_err());
        let mut rng = SplitMix64::new(7);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            counts[Popularity::Zipf(1.0).pick(4, 0, &mut rng)] += 1;
        }
        // 1 : 1/2 : 1/3 : 1/4 → 48 %, 24 %, 16 %, 12 %.
        assert!((1750..2100).contains(&counts[0]), "{counts:?}");
        assert!(counts[0] > counts[1] && counts[1] > counts[2] && counts[2] > counts[3]);
        let mut counts = [0usize; 4];
        for _ in 0..4000 {
            counts[Popularity::Uniform.pick(4, 0, &mut rng)] += 1;
        }
        assert!(counts.iter().all(|c| (850..1150).contains(c)), "{counts:?}");
        assert_eq!("round-robin".parse::<Popularity>(), Ok(Popularity::RoundRobin));
        let picks: Vec<usize> =
            (0..7).map(|k| Popularity::RoundRobin.pick(3, k, &mut rng)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }

    fn rtp(seq: u16) -> Vec<u8> {
        let h = RtpHeader { marker: false, payload_type: 33, sequence: seq, timestamp: 0, ssrc: 7 };
        let mut p = h.to_bytes().to_vec();
        let mut ts = [0xffu8; 188];
        ts[0] = 0x47;
        ts[3] = 0x10;
        p.extend_from_slice(&ts);
        p
    }

    #[test]
    fn the_sink_counts_gaps_reordering_and_drops_the_old_position_after_a_seek() {
        let (ev_tx, _ev_rx) = mpsc::unbounded_channel();
        let (ctl, ctl_rx) = mpsc::unbounded_channel();
        let counters = Arc::new(SessionCounters::default());
        let t0 = Instant::now();
        let mut sink =
            BenchSink::new(t0, Duration::from_secs(1), None, Arc::clone(&counters), ev_tx, ctl_rx);
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let node = |i: u8| SocketAddr::from(([10, 0, 0, i], 6970));
        for (i, seq) in [10u16, 11, 13, 12, 16].into_iter().enumerate() {
            sink.on_rtp(at(i as u64 + 1), node(1 + seq as u8 % 2), 0, &rtp(seq));
        }
        sink.on_tick(at(10));
        let r = Ordering::Relaxed;
        assert_eq!(counters.packets.load(r), 5);
        assert_eq!(counters.lost.load(r), 2, "14 and 15; 12 came late");
        assert_eq!(counters.reordered.load(r), 1);
        assert_eq!(counters.bytes.load(r), 5 * 188);
        let by_source: Vec<(IpAddr, Traffic)> = counters.source_traffic().collect();
        assert_eq!(
            by_source,
            [
                (node(1).ip(), Traffic { packets: 3, bytes: 3 * 188 }),
                (node(2).ip(), Traffic { packets: 2, bytes: 2 * 188 }),
            ],
            "even numbers from node 1, odd from node 2"
        );
        // A seek: packets of the old position (17) are dropped until RTP-Info's seq (100).
        ctl.send(SinkControl::Seek).unwrap();
        sink.on_rtp(at(20), node(1), 0, &rtp(17));
        ctl.send(SinkControl::SeekStart(Some(100))).unwrap();
        sink.on_rtp(at(21), node(1), 0, &rtp(18));
        sink.on_rtp(at(22), node(1), 0, &rtp(100));
        sink.on_rtp(at(23), node(1), 0, &rtp(101));
        sink.on_tick(at(30));
        assert_eq!(counters.packets.load(r), 7);
        assert_eq!(counters.lost.load(r), 2, "no gap counted across the seek");
        assert_eq!(counters.source_traffic().next().map(|(_, t)| t.packets), Some(5));
        // RTCP BYE ends the input; the (never started) player finishes.
        let mut bye = Vec::new();
        isochron_rtp::rtcp::write_bye(&mut bye, 7, None);
        sink.on_rtcp(at(40), 0, &bye);
        sink.on_tick(at(41));
        assert_eq!(counters.state.load(r), state::FINISHED);
    }

    /// A native packet: payload type 96, `len` bytes of payload.
    fn native_rtp(seq: u16, timestamp: u32, len: usize) -> Vec<u8> {
        let h = RtpHeader { marker: false, payload_type: 96, sequence: seq, timestamp, ssrc: 9 };
        let mut p = h.to_bytes().to_vec();
        p.resize(p.len() + len, 0);
        p
    }

    #[test]
    fn a_native_sink_checks_each_track_and_ends_after_every_bye() {
        let (ev_tx, _ev_rx) = mpsc::unbounded_channel();
        let (ctl, ctl_rx) = mpsc::unbounded_channel();
        let counters = Arc::new(SessionCounters::default());
        let t0 = Instant::now();
        let depth = Duration::from_millis(200);
        let mut sink = BenchSink::native(
            t0,
            depth,
            &[90_000, 48_000],
            None,
            Arc::clone(&counters),
            ev_tx,
            ctl_rx,
        );
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let server = SocketAddr::from(([127, 0, 0, 1], 8554));
        let (v0, a0) = (9_000u32, u32::MAX - 10_000);
        // Two seconds of both tracks in real time; the PLAY response comes after the first
        // packet; video packet 510 is lost.
        for ms in (0..2_000u64).step_by(20) {
            if ms % 40 == 0 && ms != 400 {
                let seq = 500 + (ms / 40) as u16;
                sink.on_rtp(at(ms + 1), server, 0, &native_rtp(seq, v0 + ms as u32 * 90, 1000));
            }
            sink.on_rtp(
                at(ms + 1),
                server,
                1,
                &native_rtp(70 + (ms / 20) as u16, a0.wrapping_add(ms as u32 * 48), 200),
            );
            if ms == 0 {
                let starts = vec![
                    TrackStart { seq: Some(500), rtptime: Some(v0) },
                    TrackStart { seq: Some(70), rtptime: Some(a0) },
                ];
                ctl.send(SinkControl::Tracks(starts)).unwrap();
            }
            sink.on_tick(at(ms + 10));
        }
        let r = Ordering::Relaxed;
        assert_eq!(counters.track_count.load(r), 2);
        let track = |i: usize| {
            let t = &counters.tracks[i];
            (t.packets.load(r), t.bytes.load(r), t.lost.load(r))
        };
        assert_eq!(track(0), (49, 49_000, 1));
        assert_eq!(track(1), (100, 20_000, 0));
        assert_eq!(counters.packets.load(r), 149);
        assert_eq!(counters.lost.load(r), 1);
        assert_eq!(counters.bytes.load(r), 69_000);
        assert_eq!(counters.starvations.load(r), 0);
        assert_eq!(counters.late.load(r), 0);
        assert_eq!(counters.state.load(r), state::PLAYING);
        assert_eq!(counters.media_ns.load(r), 1_980_000_000);
        // A packet on a channel of no track is not counted.
        sink.on_rtp(at(2_001), server, 5, &native_rtp(1, 0, 10));
        // One track's BYE is not the end; the second is, and the buffer plays out.
        let bye = |ssrc| {
            let mut b = Vec::new();
            isochron_rtp::rtcp::write_bye(&mut b, ssrc, None);
            b
        };
        sink.on_rtcp(at(2_005), 0, &bye(1));
        sink.on_tick(at(2_010));
        assert_eq!(counters.state.load(r), state::PLAYING);
        sink.on_rtcp(at(2_010), 1, &bye(2));
        sink.on_tick(at(2_020));
        assert_eq!(counters.state.load(r), state::DRAINING);
        sink.on_tick(at(2_500));
        assert_eq!(counters.state.load(r), state::FINISHED);
        assert_eq!(counters.packets.load(r), 149);
        assert_eq!(counters.starvations.load(r), 0);
    }

    #[test]
    fn rtp_info_entries_go_to_the_tracks_by_url_else_by_position() {
        let info = PlayInfo {
            entries: crate::client::parse_rtp_info(
                "url=rtsp://h/m/trackID=1;seq=7;rtptime=70,url=rtsp://h/m/trackID=0;seq=5;rtptime=50",
            ),
            ..PlayInfo::default()
        };
        let urls = ["rtsp://h/m/trackID=0".to_string(), "rtsp://h/m/trackID=1".to_string()];
        assert_eq!(
            track_starts(&urls, &info),
            [
                TrackStart { seq: Some(5), rtptime: Some(50) },
                TrackStart { seq: Some(7), rtptime: Some(70) },
            ]
        );
        let other = ["rtsp://x/0".to_string(), "rtsp://x/1".to_string(), "rtsp://x/2".to_string()];
        assert_eq!(
            track_starts(&other, &info),
            [
                TrackStart { seq: Some(7), rtptime: Some(70) },
                TrackStart { seq: Some(5), rtptime: Some(50) },
                TrackStart::default(),
            ]
        );
    }

    #[test]
    fn staggered_clients_spread_over_the_object() {
        for n in [1usize, 2, 4, 17, 65] {
            let mut at: Vec<f64> = (0..n).map(stagger_phase).collect();
            at.sort_by(f64::total_cmp);
            at.push(1.0 + at[0]);
            let widest = at.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
            assert!(widest <= 2.7 / n as f64, "n = {n}: a gap of {widest}");
        }
        assert_eq!(
            sdp_duration("v=0\r\na=range:npt=0-180.021\r\n"),
            Some(Duration::from_millis(180_021))
        );
        assert_eq!(sdp_duration("v=0\r\n"), None);
    }

    #[test]
    fn range_lengths() {
        assert_eq!(range_length("npt=0.000-12.021"), Some(Duration::from_millis(12_021)));
        assert_eq!(range_length("npt=5-"), None);
        assert_eq!(range_length("npt=now-10"), Some(Duration::from_secs(10)));
        assert_eq!(range_length("smpte=0:10:20-"), None);
    }
}
