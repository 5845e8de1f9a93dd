//! The emulation client's player for a native presentation: one RTP stream per track
//! (RFC 3550; H.264 RFC 6184, AAC RFC 3640, H.265 RFC 7798, Opus RFC 7587, …), consumed by the
//! tracks' own timestamps.
//!
//! Why: an object ingested from MP4 or Matroska carries no PCR; each track's RTP timestamps are
//! its presentation times on the track's clock (`a=rtpmap`), and the PLAY response's `RTP-Info`
//! (RFC 2326 §12.33) names, for every track, the `rtptime` of the play range's start, so all
//! tracks share one media timeline (NPT): a packet with timestamp `ts` on track `k` is due at
//! media time `m = (ts − rtptime_k) / clock_k` after the start, timestamps unwrapped across
//! 2^32 against the track's previous packet (B-frames go backwards a little).
//!
//! The model is [`super::playout`]'s with the track timestamps in place of the PCR:
//!
//! * **Clock.** The media clock starts `depth` after the first packet's arrival (`t0`), at media
//!   time 0: packet `m` is due at `t0 + depth + m` (media before the start, such as audio just
//!   before a seek's key frame, is due at once). It runs at one media second per wall second.
//! * **Starvation.** Each track has the newest media time received on it. When the clock reaches
//!   it on a track whose input has not ended, everything received on that track has been played
//!   and what follows is due and not there (the MP2T player's "the clock reaches the newest PCR
//!   received"): one *starvation* event. The player stalls, as a real one does, and resumes when
//!   every track again holds `depth` beyond the playout position (or the input has ended); the
//!   clock then runs on from where it stopped, so every later deadline moves by the stall.
//! * **Late.** A packet arriving after its deadline (its media time behind the playout position
//!   at its arrival), or while the player is stalled, was late.
//! * **End.** A track's input ends with its RTCP BYE, or once its newest media time comes within
//!   300 ms of the announced length (the PLAY `Range`); when every track has ended, the buffer
//!   plays out and the player finishes without a starvation.
//!
//! Packets that arrive before the PLAY response's `RTP-Info` reaches the player (the response
//! and the first packets race) are kept, with their arrival times, and played into the model
//! when it comes. A track for which `RTP-Info` names no `rtptime` takes its first packet's
//! timestamp as its start.
//!
//! The buffer level ([`NativePlayout::level`], what MTFC watches) is the least media time
//! buffered ahead of the playout position over the tracks still receiving.
//!
//! Not here: sockets, RTP sequence numbers and loss (the caller), rate requests.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::playout::{LatenessMeter, PlayState, PlayoutStats};

/// How close to the announced length a track's newest media time must come for its input to
/// count as ended (as [`super::playout`]).
const LENGTH_SLACK_NS: u64 = 300_000_000;
/// At most this many packets wait for `RTP-Info`; past it, tracks start at their first packet.
const MAX_PENDING: usize = 16_384;

/// A packet waiting for its track's `rtptime`.
#[derive(Clone, Copy, Debug)]
struct Pending {
    at: Instant,
    track: usize,
    ts: u32,
}

/// One track's timeline.
#[derive(Clone, Copy, Debug)]
struct Track {
    /// RTP clock rate, Hz.
    clock: u32,
    /// The `rtptime` of the start (media time 0), once known.
    origin: Option<u32>,
    /// Take the first packet's timestamp as the origin (RTP-Info named none).
    origin_from_first: bool,
    /// The previous packet's timestamp and its unwrapped offset from the origin, in ticks.
    last: Option<(u32, i64)>,
    /// Newest media time received, ns.
    newest: Option<u64>,
    /// The input of this track ended (BYE, or the announced length reached).
    ended: bool,
}

impl Track {
    fn new(clock: u32) -> Self {
        Self {
            clock: clock.max(1),
            origin: None,
            origin_from_first: false,
            last: None,
            newest: None,
            ended: false,
        }
    }

    /// The media time (ns, at least 0) of timestamp `ts`; the origin must be known.
    fn media_ns(&mut self, ts: u32) -> u64 {
        let ticks = match (self.last, self.origin) {
            (Some((last_ts, last_ticks)), _) => {
                last_ticks + i64::from(ts.wrapping_sub(last_ts).cast_signed())
            }
            (None, Some(origin)) => i64::from(ts.wrapping_sub(origin).cast_signed()),
            // Callers set the origin first; without one the packet is at the start.
            (None, None) => 0,
        };
        self.last = Some((ts, ticks));
        let ns = i128::from(ticks) * 1_000_000_000 / i128::from(self.clock);
        u64::try_from(ns.max(0)).unwrap_or(u64::MAX)
    }

    /// Still receiving: heard from and not ended.
    fn active(&self) -> bool {
        self.newest.is_some() && !self.ended
    }
}

/// The player of a native presentation (see the module docs).
#[derive(Clone, Debug)]
pub struct NativePlayout {
    depth: Duration,
    tracks: Vec<Track>,
    state: PlayState,
    /// While buffering for a (re)started timeline: when the clock starts (`depth` after the
    /// first packet); `None` with `timed` set: no packet yet.
    start_at: Option<Instant>,
    /// Whether the next start is `depth` after the first packet (a new timeline), rather than
    /// once `depth` is buffered (after a pause).
    timed: bool,
    /// Playout position (ns) while not playing.
    position: u64,
    /// Newest media time received on any track.
    newest: Option<u64>,
    /// Media length announced by the server (PLAY `Range`).
    length: Option<u64>,
    /// Packets waiting for `RTP-Info`.
    pending: VecDeque<Pending>,
    /// `RTP-Info` has been applied to the current timeline.
    info: bool,
    lateness: LatenessMeter,
    stats: PlayoutStats,
}

impl NativePlayout {
    /// A player of tracks with these RTP clock rates (Hz, in the order the tracks were set up),
    /// whose clock starts `depth` after the first packet and restarts after a stall once every
    /// track holds `depth`.
    #[must_use]
    pub fn new(depth: Duration, clocks: &[u32]) -> Self {
        Self {
            depth,
            tracks: clocks.iter().map(|&c| Track::new(c)).collect(),
            state: PlayState::Buffering,
            start_at: None,
            timed: true,
            position: 0,
            newest: None,
            length: None,
            pending: VecDeque::new(),
            info: false,
            lateness: LatenessMeter::default(),
            stats: PlayoutStats::default(),
        }
    }

    /// Counters so far (`bytes`: RTP payload bytes of every track).
    #[must_use]
    pub fn stats(&self) -> PlayoutStats {
        self.stats
    }

    /// The state.
    #[must_use]
    pub fn state(&self) -> PlayState {
        self.state
    }

    /// Whether every track's input has ended: what is left plays out of the buffer.
    #[must_use]
    pub fn input_ended(&self) -> bool {
        !self.tracks.is_empty() && self.tracks.iter().all(|t| t.ended)
    }

    /// The PLAY response's `RTP-Info`: each track's `rtptime` (`None`: not named; the track's
    /// first packet then starts it). Packets kept meanwhile are played into the model, each at
    /// its arrival time, then the model is brought to `now`. Only the first call after the
    /// creation or a [`Self::handle_seek`] counts: a resumed PLAY continues the timeline.
    pub fn handle_start(&mut self, now: Instant, rtptimes: &[Option<u32>]) {
        if self.info {
            return;
        }
        for (i, t) in self.tracks.iter_mut().enumerate() {
            match rtptimes.get(i).copied().flatten() {
                Some(r) => t.origin = Some(r),
                None => t.origin_from_first = true,
            }
        }
        self.info = true;
        self.replay_pending();
        self.advance(now);
    }

    /// The server announced that `length` of media follows (the span of the PLAY `Range`).
    pub fn handle_length(&mut self, length: Duration) {
        self.length = Some(u64::try_from(length.as_nanos()).unwrap_or(u64::MAX));
    }

    /// An RTP packet of `track` with timestamp `ts` and `bytes` of payload arrived at `now`.
    pub fn handle_packet(&mut self, now: Instant, track: usize, ts: u32, bytes: usize) {
        self.stats.bytes += bytes as u64;
        if track >= self.tracks.len() {
            return;
        }
        if self.timed && self.start_at.is_none() && self.state == PlayState::Buffering {
            self.start_at = Some(now + self.depth);
        }
        let t = &mut self.tracks[track];
        if t.origin.is_none() && t.origin_from_first {
            t.origin = Some(ts);
        }
        if t.origin.is_none() {
            self.pending.push_back(Pending { at: now, track, ts });
            if self.pending.len() > MAX_PENDING {
                // No RTP-Info in all this time: every track starts at its first packet.
                for t in &mut self.tracks {
                    t.origin_from_first = true;
                }
                self.replay_pending();
            }
            self.advance(now);
            return;
        }
        self.apply(now, track, ts);
    }

    /// The server said `track` ended (RTCP BYE).
    pub fn handle_track_end(&mut self, now: Instant, track: usize) {
        if let Some(t) = self.tracks.get_mut(track) {
            t.ended = true;
        }
        self.advance(now);
    }

    /// The user paused (the player freezes its clock).
    pub fn handle_pause(&mut self, now: Instant) {
        self.advance(now);
        self.lateness.reset();
        if let PlayState::Playing { .. } | PlayState::Buffering | PlayState::Stalled { .. } =
            self.state
        {
            self.position = self.position_at(now);
            self.close_stall(now);
            self.state = PlayState::Paused;
            self.start_at = None;
            self.timed = false;
        }
    }

    /// The user resumed: play on from the buffer (or refill it to `depth` first).
    pub fn handle_resume(&mut self, now: Instant) {
        if self.state == PlayState::Paused {
            self.lateness.reset();
            self.state = PlayState::Buffering;
            self.advance(now);
        }
    }

    /// The user sought: the buffer is flushed, and a new timeline starts with the next packet
    /// and the next [`Self::handle_start`].
    pub fn handle_seek(&mut self, now: Instant) {
        self.advance(now);
        self.lateness.reset();
        self.close_stall(now);
        for t in &mut self.tracks {
            *t = Track::new(t.clock);
        }
        self.pending.clear();
        self.info = false;
        self.newest = None;
        self.position = 0;
        self.length = None;
        self.start_at = None;
        self.timed = true;
        self.stats.started = false;
        self.state = PlayState::Buffering;
    }

    /// Time passed: starts the clock, detects starvation, restarts after a stall, finishes
    /// after the end.
    pub fn advance(&mut self, now: Instant) {
        if let Some(len) = self.length {
            for t in &mut self.tracks {
                if t.newest.is_some_and(|n| n + LENGTH_SLACK_NS >= len) {
                    t.ended = true;
                }
            }
        }
        // A start can be followed by a starvation in the same step: two rounds at most.
        for _ in 0..2 {
            match self.state {
                PlayState::Buffering if self.timed => {
                    let Some(at) = self.start_at else { return };
                    if now < at {
                        return;
                    }
                    self.start(at);
                }
                PlayState::Buffering | PlayState::Stalled { .. } => {
                    let refilled = self.tracks.iter().filter(|t| t.active()).all(|t| {
                        t.newest.unwrap_or(0).saturating_sub(self.position) >= self.depth_ns()
                    });
                    let any = self.tracks.iter().any(|t| t.newest.is_some());
                    if !((any && refilled) || self.input_ended()) {
                        return;
                    }
                    self.close_stall(now);
                    self.start(now);
                }
                PlayState::Playing { wall0, media0 } => {
                    let pos = media0 + ns_between(wall0, now);
                    if self.input_ended() {
                        let end = self.newest.unwrap_or(0);
                        if pos >= end {
                            self.position = end;
                            self.state = PlayState::Finished;
                        }
                        return;
                    }
                    // The track whose buffer ran out first.
                    let starved = self
                        .tracks
                        .iter()
                        .filter(|t| t.active())
                        .filter_map(|t| t.newest)
                        .filter(|&n| pos >= n)
                        .min();
                    if let Some(h) = starved {
                        let h = h.max(media0);
                        self.position = h;
                        self.stats.starvations += 1;
                        self.state =
                            PlayState::Stalled { since: wall0 + Duration::from_nanos(h - media0) };
                    }
                    return;
                }
                PlayState::Paused | PlayState::Finished => return,
            }
        }
    }

    /// The media buffered ahead of the playout position at `now`: the least over the tracks
    /// still receiving (after the end, over all).
    #[must_use]
    pub fn level(&self, now: Instant) -> Duration {
        let pos = self.position_at(now);
        let active = self.tracks.iter().filter(|t| t.active()).filter_map(|t| t.newest).min();
        let ahead = active.or(self.newest).map_or(0, |n| n.saturating_sub(pos));
        Duration::from_nanos(ahead)
    }

    /// Stall time so far, including a stall in progress at `now`.
    #[must_use]
    pub fn stall_ns(&self, now: Instant) -> u64 {
        match self.state {
            PlayState::Stalled { since } => self.stats.stall_ns + ns_between(since, now),
            _ => self.stats.stall_ns,
        }
    }

    /// The playout position (media ns) at `now`.
    #[must_use]
    pub fn position_at(&self, now: Instant) -> u64 {
        match self.state {
            PlayState::Playing { wall0, media0 } => media0 + ns_between(wall0, now),
            _ => self.position,
        }
    }

    fn depth_ns(&self) -> u64 {
        u64::try_from(self.depth.as_nanos()).unwrap_or(u64::MAX)
    }

    fn start(&mut self, wall0: Instant) {
        self.stats.started = true;
        self.start_at = None;
        self.timed = false;
        self.state = PlayState::Playing { wall0, media0: self.position };
    }

    /// A packet whose track's origin is known.
    fn apply(&mut self, at: Instant, track: usize, ts: u32) {
        self.advance(at);
        let Some(t) = self.tracks.get_mut(track) else { return };
        let m = t.media_ns(ts);
        let late = match self.state {
            PlayState::Stalled { .. } => true,
            PlayState::Playing { wall0, media0 } => m < media0 + ns_between(wall0, at),
            PlayState::Buffering => m < self.position,
            PlayState::Paused | PlayState::Finished => false,
        };
        if late {
            self.stats.late_packets += 1;
        }
        // Paused: what the server sent before the PAUSE took effect says nothing of its
        // schedule (the meter restarts at the resume).
        if self.state != PlayState::Paused {
            let behind = self.lateness.handle(at, m);
            self.stats.lateness_max_ns = self.stats.lateness_max_ns.max(behind);
        }
        if t.newest.is_none_or(|n| m > n) {
            t.newest = Some(m);
        }
        match self.newest {
            None => self.newest = Some(m),
            Some(n) if m > n => {
                self.stats.media_ns += m - n;
                self.newest = Some(m);
            }
            Some(_) => {}
        }
        self.advance(at);
    }

    /// Plays the kept packets whose tracks now have an origin into the model, in arrival order.
    fn replay_pending(&mut self) {
        let waiting = std::mem::take(&mut self.pending);
        for p in waiting {
            let t = &mut self.tracks[p.track];
            if t.origin.is_none() && t.origin_from_first {
                t.origin = Some(p.ts);
            }
            if t.origin.is_some() {
                self.apply(p.at, p.track, p.ts);
            } else {
                self.pending.push_back(p);
            }
        }
    }

    fn close_stall(&mut self, now: Instant) {
        if let PlayState::Stalled { since } = self.state {
            self.stats.stall_ns += ns_between(since, now);
        }
    }
}

/// Nanoseconds from `a` to `b` (0 if `b` is earlier).
fn ns_between(a: Instant, b: Instant) -> u64 {
    u64::try_from(b.saturating_duration_since(a).as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VIDEO: usize = 0;
    const AUDIO: usize = 1;
    /// The tracks' `rtptime`s: anywhere on the 32-bit circle.
    const V0: u32 = 3_000_000_000;
    const A0: u32 = 17;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// Video (90 kHz) and audio (48 kHz).
    fn player(depth_ms: u64) -> NativePlayout {
        NativePlayout::new(Duration::from_millis(depth_ms), &[90_000, 48_000])
    }

    /// A packet of media time `ms` on `track`, arriving at `arrival` ms.
    fn feed(p: &mut NativePlayout, t0: Instant, track: usize, ms: u64, arrival: u64) {
        let ts = match track {
            VIDEO => V0.wrapping_add((ms * 90) as u32),
            _ => A0.wrapping_add((ms * 48) as u32),
        };
        p.handle_packet(at(t0, arrival), track, ts, 100);
    }

    #[test]
    fn two_tracks_on_time_play_through_without_a_starvation() {
        let t0 = Instant::now();
        let mut p = player(500);
        p.handle_start(t0, &[Some(V0), Some(A0)]);
        // 3 s of media sent in real time: video every 40 ms, audio every 20 ms.
        for ms in (0..3_000).step_by(20) {
            if ms % 40 == 0 {
                feed(&mut p, t0, VIDEO, ms, ms);
            }
            feed(&mut p, t0, AUDIO, ms, ms);
            p.advance(at(t0, ms + 10));
            if ms == 480 {
                assert_eq!(p.state(), PlayState::Buffering, "the clock starts at t0 + depth");
            }
        }
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 500), media0: 0 });
        // The least buffered track: video's newest is 2960 ms, the position 2490 ms.
        assert_eq!(p.level(at(t0, 2_990)), Duration::from_millis(470));
        let st = p.stats();
        assert_eq!((st.starvations, st.late_packets), (0, 0));
        assert_eq!(st.bytes, (75 + 150) * 100);
        assert_eq!(st.media_ns, 2_980_000_000);
        // One BYE is not the end; both are. Then the buffer plays out.
        p.handle_track_end(at(t0, 2_990), VIDEO);
        assert!(!p.input_ended());
        p.handle_track_end(at(t0, 2_990), AUDIO);
        assert!(p.input_ended());
        p.advance(at(t0, 3_479));
        assert!(matches!(p.state(), PlayState::Playing { .. }));
        p.advance(at(t0, 3_480));
        assert_eq!(p.state(), PlayState::Finished);
        assert_eq!(p.stats().starvations, 0, "the end is not a starvation");
    }

    #[test]
    fn a_pause_is_not_lateness() {
        let t0 = Instant::now();
        let mut p = player(500);
        p.handle_start(t0, &[Some(V0), Some(A0)]);
        for ms in (0..1_000).step_by(20) {
            feed(&mut p, t0, VIDEO, ms, ms);
            feed(&mut p, t0, AUDIO, ms, ms);
        }
        // PAUSE at 990 ms; media 1 000 was on its way and lands after it.
        p.handle_pause(at(t0, 990));
        feed(&mut p, t0, VIDEO, 1_000, 1_000);
        // Two seconds later PLAY resumes at media 1 020, on the resumed schedule.
        p.handle_resume(at(t0, 3_000));
        for ms in (1_020..2_000).step_by(20) {
            feed(&mut p, t0, VIDEO, ms, ms + 1_980);
            feed(&mut p, t0, AUDIO, ms, ms + 1_980);
        }
        let late = p.stats().lateness_max_ns;
        assert!(late < 1_000_000, "a 2 s pause counted as {late} ns of lateness");
    }

    #[test]
    fn a_packet_after_its_deadline_is_late_on_either_clock() {
        let t0 = Instant::now();
        let mut p = player(500);
        p.handle_start(t0, &[Some(V0), Some(A0)]);
        for ms in (0..=1_500).step_by(20) {
            feed(&mut p, t0, VIDEO, ms, ms);
            feed(&mut p, t0, AUDIO, ms, ms);
        }
        // At 1 501 ms the position is 1 001 ms: media 1 001 is due now, 1 000 was due 1 ms ago
        // (90 000 and 48 000 ticks after the start on the two clocks).
        feed(&mut p, t0, VIDEO, 1_001, 1_501);
        feed(&mut p, t0, AUDIO, 1_001, 1_501);
        assert_eq!(p.stats().late_packets, 0, "arrived at their deadlines");
        feed(&mut p, t0, VIDEO, 1_000, 1_501);
        feed(&mut p, t0, AUDIO, 1_000, 1_501);
        assert_eq!(p.stats().late_packets, 2, "a millisecond after theirs");
        // Late but not starving: both tracks still hold about half a second.
        assert_eq!(p.stats().starvations, 0);
        assert!(matches!(p.state(), PlayState::Playing { .. }));
    }

    #[test]
    fn a_lost_packet_is_no_starvation_while_later_ones_come() {
        let t0 = Instant::now();
        let mut p = player(300);
        p.handle_start(t0, &[Some(V0), Some(A0)]);
        for ms in (0..2_000).step_by(40) {
            // Video 1 000 ms and audio 1 200 ms never come.
            if ms != 1_000 {
                feed(&mut p, t0, VIDEO, ms, ms);
            }
            if ms != 1_200 {
                feed(&mut p, t0, AUDIO, ms, ms);
            }
            p.advance(at(t0, ms + 20));
        }
        let st = p.stats();
        assert_eq!((st.starvations, st.late_packets), (0, 0));
        assert_eq!(st.bytes, (50 + 50 - 2) * 100);
    }

    #[test]
    fn timestamps_unwrap_across_2_pow_32() {
        let t0 = Instant::now();
        let mut p = NativePlayout::new(Duration::from_millis(500), &[90_000]);
        // The start half a second before the wrap.
        let r = u32::MAX - 44_999;
        p.handle_start(t0, &[Some(r)]);
        let ts = |ms: u64| r.wrapping_add((ms * 90) as u32);
        for ms in (0..=2_000).step_by(40) {
            p.handle_packet(at(t0, ms), 0, ts(ms), 100);
            p.advance(at(t0, ms + 20));
        }
        assert!(ts(1_000) < r, "the timestamps wrapped");
        let st = p.stats();
        assert_eq!((st.starvations, st.late_packets), (0, 0));
        assert_eq!(st.media_ns, 2_000_000_000);
        assert_eq!(p.level(at(t0, 2_020)), Duration::from_millis(480));
        // Behind its deadline after the wrap (a B-frame going backwards across it).
        p.handle_packet(at(t0, 2_021), 0, ts(1_520), 100);
        assert_eq!(p.stats().late_packets, 1);
        p.handle_packet(at(t0, 2_021), 0, ts(1_521), 100);
        assert_eq!(p.stats().late_packets, 1);
    }

    #[test]
    fn a_gap_longer_than_the_buffer_starves_once_and_rebuffers_every_track() {
        let t0 = Instant::now();
        let mut p = player(300);
        p.handle_start(t0, &[Some(V0), Some(A0)]);
        for ms in (0..=300).step_by(50) {
            feed(&mut p, t0, VIDEO, ms, ms);
            feed(&mut p, t0, AUDIO, ms, ms);
        }
        // Playing from 300 ms (media 0). Data stops at media 300: due at wall 600.
        p.advance(at(t0, 599));
        assert_eq!(p.stats().starvations, 0);
        p.advance(at(t0, 650));
        assert_eq!(p.stats().starvations, 1);
        assert_eq!(p.state(), PlayState::Stalled { since: at(t0, 600) });
        p.advance(at(t0, 700));
        assert_eq!(p.stats().starvations, 1, "one event per stall");
        // Data resumes at 1 000 ms: late until both tracks hold 300 ms again (media 600).
        for ms in (350..=600).step_by(50) {
            feed(&mut p, t0, VIDEO, ms, ms + 650);
            if ms == 600 {
                assert!(matches!(p.state(), PlayState::Stalled { .. }), "audio is still short");
            }
            feed(&mut p, t0, AUDIO, ms, ms + 650);
        }
        assert_eq!(p.stats().late_packets, 12);
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 1_250), media0: 300_000_000 });
        assert_eq!(p.stall_ns(at(t0, 1_250)), 650_000_000);
        feed(&mut p, t0, VIDEO, 650, 1_260);
        feed(&mut p, t0, AUDIO, 650, 1_260);
        assert_eq!(p.level(at(t0, 1_300)), Duration::from_millis(300));
        // Every deadline moved by the stall: media 351 is due at 1 301 ms, not at 651 ms.
        feed(&mut p, t0, VIDEO, 351, 1_301);
        assert_eq!(p.stats().late_packets, 12);
        feed(&mut p, t0, AUDIO, 350, 1_301);
        assert_eq!(p.stats().late_packets, 13);
        assert_eq!(p.stats().starvations, 1);
    }

    #[test]
    fn packets_before_rtp_info_wait_for_it_and_the_clock_starts_at_the_first() {
        let t0 = Instant::now();
        let mut p = player(200);
        // The first packets beat the PLAY response; audio's rtptime is not named.
        feed(&mut p, t0, VIDEO, 0, 10);
        feed(&mut p, t0, AUDIO, 0, 10);
        feed(&mut p, t0, VIDEO, 40, 50);
        assert_eq!(p.level(at(t0, 50)), Duration::ZERO);
        p.handle_start(at(t0, 60), &[Some(V0), None]);
        assert_eq!(p.stats().media_ns, 40_000_000);
        for ms in (80..=400).step_by(40) {
            feed(&mut p, t0, VIDEO, ms, ms + 10);
            feed(&mut p, t0, AUDIO, ms, ms + 10);
        }
        // The clock started 200 ms after the first arrival (10 ms).
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 210), media0: 0 });
        assert_eq!((p.stats().starvations, p.stats().late_packets), (0, 0));
        // A second RTP-Info (a resumed PLAY) does not move the timeline.
        p.handle_start(at(t0, 420), &[Some(V0.wrapping_add(9_000)), Some(99)]);
        assert_eq!(p.level(at(t0, 420)), Duration::from_millis(190));
    }

    #[test]
    fn the_announced_length_ends_the_input_without_a_bye() {
        let t0 = Instant::now();
        let mut p = player(200);
        p.handle_start(t0, &[Some(V0), Some(A0)]);
        p.handle_length(Duration::from_millis(1_000));
        for ms in (0..=720).step_by(40) {
            feed(&mut p, t0, VIDEO, ms, ms);
            feed(&mut p, t0, AUDIO, ms, ms);
        }
        p.advance(at(t0, 5_000));
        assert_eq!(p.state(), PlayState::Finished);
        assert_eq!(p.stats().starvations, 0);
    }

    #[test]
    fn pause_freezes_the_clock_and_seek_starts_a_new_timeline() {
        let t0 = Instant::now();
        let mut p = player(200);
        p.handle_start(t0, &[Some(V0), Some(A0)]);
        for ms in (0..=400).step_by(40) {
            feed(&mut p, t0, VIDEO, ms, ms);
            feed(&mut p, t0, AUDIO, ms, ms);
        }
        // Playing since 200 ms; at 400 ms the position is 200 ms.
        p.handle_pause(at(t0, 400));
        p.advance(at(t0, 5_000));
        assert_eq!(p.stats().starvations, 0, "no consumption while paused");
        assert_eq!(p.level(at(t0, 5_000)), Duration::from_millis(200));
        p.handle_resume(at(t0, 5_000));
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 5_000), media0: 200_000_000 });
        p.handle_seek(at(t0, 5_100));
        assert_eq!(p.level(at(t0, 5_100)), Duration::ZERO);
        // The seek's stream: new rtptimes, the clock 200 ms after its first packet.
        let (v1, a1) = (5u32, 4_000_000_000u32);
        p.handle_start(at(t0, 5_150), &[Some(v1), Some(a1)]);
        for ms in (0..=300).step_by(40) {
            let arrival = at(t0, 5_160 + ms);
            p.handle_packet(arrival, VIDEO, v1 + (ms * 90) as u32, 100);
            p.handle_packet(arrival, AUDIO, a1.wrapping_add((ms * 48) as u32), 100);
        }
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 5_360), media0: 0 });
        assert_eq!((p.stats().starvations, p.stats().late_packets), (0, 0));
    }
}
