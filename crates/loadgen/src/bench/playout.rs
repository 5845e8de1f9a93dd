//! The emulation client's player: consumes a received MPEG-TS by the stream's own clock.
//!
//! Yima §3.1's emulation clients do not decode; they consume the data "according to a movie
//! trace". Ours reads the trace from the stream itself: the PCR (ISO/IEC 13818-1 §2.4.2.2, a
//! 27 MHz clock carried in adaptation fields) says when each byte is due at the decoder. The
//! player keeps a *media clock*: it starts when the playout buffer first holds `depth` of media
//! (the newest PCR received minus the playout position), and runs at one media second per wall
//! second from then on. The bytes up to a packet carrying PCR `t` are due when the media clock
//! reaches `t`. If the clock reaches the newest PCR received, data is due and not there: a
//! *starvation* event; the player then stalls, as a real one does, and resumes when the buffer
//! holds `depth` again (or the stream has ended). Packets arriving during a stall were late.
//!
//! The buffer level ([`Playout::level`]) is in media time, which is what MTFC watches
//! ([`super::mtfc`]).
//!
//! Not here: sockets, RTP sequence numbers (the caller), rate requests.

use std::time::{Duration, Instant};

/// TS packet size.
pub const TS_PACKET: usize = 188;
/// The PCR clock's rate.
pub const PCR_HZ: u64 = 27_000_000;
/// PCRs wrap at 2^33 × 300 ticks.
const PCR_WRAP: u64 = (1 << 33) * 300;
/// A PCR step larger than this (or backwards) is a discontinuity, not elapsed time.
const MAX_PCR_STEP: u64 = 10 * PCR_HZ;

/// The PCR of a TS packet, if it carries one: `(pid, pcr in 27 MHz ticks, discontinuity)`.
#[must_use]
pub fn packet_pcr(p: &[u8]) -> Option<(u16, u64, bool)> {
    if p.len() < 12 || p[0] != 0x47 {
        return None;
    }
    let pid = (u16::from(p[1] & 0x1f) << 8) | u16::from(p[2]);
    let has_adaptation = p[3] & 0x20 != 0;
    if !has_adaptation || p[4] < 7 || p[5] & 0x10 == 0 {
        return None;
    }
    let base = (u64::from(p[6]) << 25)
        | (u64::from(p[7]) << 17)
        | (u64::from(p[8]) << 9)
        | (u64::from(p[9]) << 1)
        | (u64::from(p[10]) >> 7);
    let ext = (u64::from(p[10] & 1) << 8) | u64::from(p[11]);
    Some((pid, base * 300 + ext, p[5] & 0x80 != 0))
}

/// Maps the PCRs of one program onto a continuous media timeline (ns from the first PCR),
/// across wrap-around and discontinuities (which add no time).
#[derive(Clone, Debug, Default)]
pub struct PcrTimeline {
    pid: Option<u16>,
    last: Option<(u64, u64)>,
}

impl PcrTimeline {
    /// The media time (ns) of a TS packet if it carries the program's PCR. The first PID seen
    /// with a PCR is the program's.
    pub fn handle_packet(&mut self, p: &[u8]) -> Option<u64> {
        let (pid, pcr, disc) = packet_pcr(p)?;
        if *self.pid.get_or_insert(pid) != pid {
            return None;
        }
        let media = match self.last {
            None => 0,
            Some((last_pcr, last_media)) => {
                let step = (pcr + PCR_WRAP - last_pcr) % PCR_WRAP;
                if disc || step > MAX_PCR_STEP {
                    last_media
                } else {
                    last_media + step * 1_000 / 27
                }
            }
        };
        self.last = Some((pcr, media));
        Some(media)
    }
}

/// Where the player is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlayState {
    /// Filling the buffer before the clock (re)starts.
    Buffering,
    /// The media clock runs: media `media0` was played at `wall0`.
    Playing {
        /// Wall time of `media0`.
        wall0: Instant,
        /// Media time (ns) at `wall0`.
        media0: u64,
    },
    /// Starved since `since`, refilling.
    Stalled {
        /// When the data ran out.
        since: Instant,
    },
    /// Paused by the user (PAUSE sent).
    Paused,
    /// Everything received was played after the end of the stream.
    Finished,
}

/// What the player counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlayoutStats {
    /// Times data was due and not there.
    pub starvations: u64,
    /// Time spent stalled (ns), stalls in progress included up to the last call.
    pub stall_ns: u64,
    /// Packets that arrived while the player was stalled for want of them.
    pub late_packets: u64,
    /// The most a packet carrying a PCR arrived behind the stream's own schedule (ns): its
    /// arrival minus its media time, less the least such difference of the run (the
    /// best-served packet sets the schedule, so a late first packet does not hide lateness).
    /// A player whose buffer is shallower than this starves. Reset by a pause or a seek.
    pub lateness_max_ns: u64,
    /// TS bytes received.
    pub bytes: u64,
    /// Media time (ns) spanned by the PCRs received.
    pub media_ns: u64,
    /// Whether playback has started at least once.
    pub started: bool,
}

/// The player.
#[derive(Clone, Debug)]
pub struct Playout {
    depth: Duration,
    timeline: PcrTimeline,
    state: PlayState,
    /// Playout position (ns) while not playing.
    position: u64,
    /// Newest PCR media time received.
    received: Option<u64>,
    input_ended: bool,
    /// Media length announced by the server (PLAY `Range`), for servers that send no BYE.
    length: Option<u64>,
    lateness: LatenessMeter,
    stats: PlayoutStats,
}

/// How late packets arrive behind their stream's own schedule ([`PlayoutStats::lateness_max_ns`]):
/// the schedule is the least (arrival − media time) seen since the last reset.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LatenessMeter {
    schedule: Option<i128>,
}

impl LatenessMeter {
    /// A packet of media time `media_ns` arrived at `at`: how late it is, ns.
    pub(crate) fn handle(&mut self, at: Instant, media_ns: u64) -> u64 {
        static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        let epoch = *EPOCH.get_or_init(Instant::now);
        let at_ns = match at.checked_duration_since(epoch) {
            Some(d) => d.as_nanos() as i128,
            None => -(epoch.duration_since(at).as_nanos() as i128),
        };
        let off = at_ns - i128::from(media_ns);
        let schedule = self.schedule.map_or(off, |s| s.min(off));
        self.schedule = Some(schedule);
        u64::try_from(off - schedule).unwrap_or(u64::MAX)
    }

    /// The stream's timing restarts (a pause, a seek): forget the schedule.
    pub(crate) fn reset(&mut self) {
        self.schedule = None;
    }
}

/// How close to the announced length the newest PCR must come for the input to count as ended.
const LENGTH_SLACK_NS: u64 = 300_000_000;

impl Playout {
    /// A player that starts (and restarts after a stall) once `depth` of media is buffered.
    #[must_use]
    pub fn new(depth: Duration) -> Self {
        Self {
            depth,
            timeline: PcrTimeline::default(),
            state: PlayState::Buffering,
            position: 0,
            received: None,
            input_ended: false,
            length: None,
            lateness: LatenessMeter::default(),
            stats: PlayoutStats::default(),
        }
    }

    /// The server announced that `length` of media follows (the span of the PLAY `Range`): once
    /// the newest PCR is within 300 ms of it, the input has ended even without a BYE.
    pub fn handle_length(&mut self, length: Duration) {
        self.length = Some(length.as_nanos() as u64);
    }

    /// Counters so far.
    #[must_use]
    pub fn stats(&self) -> PlayoutStats {
        self.stats
    }

    /// The state.
    #[must_use]
    pub fn state(&self) -> PlayState {
        self.state
    }

    /// Whether the stream's end has been received (BYE, or the announced length reached):
    /// what is left plays out of the buffer.
    #[must_use]
    pub fn input_ended(&self) -> bool {
        self.input_ended
    }

    /// The RTP payload of one packet (whole TS packets) arrived at `now`.
    pub fn handle_payload(&mut self, now: Instant, payload: &[u8]) {
        self.advance(now);
        if matches!(self.state, PlayState::Stalled { .. }) {
            self.stats.late_packets += 1;
        }
        self.stats.bytes += payload.len() as u64;
        for p in payload.chunks_exact(TS_PACKET) {
            let media = self.timeline.handle_packet(p);
            // Paused: what the server sent before the PAUSE took effect says nothing of its
            // schedule (the meter restarts at the resume).
            if let Some(t) = media.filter(|_| self.state != PlayState::Paused) {
                let late = self.lateness.handle(now, t);
                self.stats.lateness_max_ns = self.stats.lateness_max_ns.max(late);
            }
            match (media, self.received) {
                (Some(t), None) => self.received = Some(t),
                (Some(t), Some(r)) if t > r => {
                    self.stats.media_ns += t - r;
                    self.received = Some(t);
                }
                _ => {}
            }
        }
        self.advance(now);
    }

    /// The server said the stream ended (RTCP BYE): whatever is buffered plays out, then the
    /// player finishes without counting a starvation.
    pub fn handle_end(&mut self, now: Instant) {
        self.input_ended = true;
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
            self.state = PlayState::Paused;
        }
    }

    /// The user resumed: play on from the buffer (or refill it first if it ran low).
    pub fn handle_resume(&mut self, now: Instant) {
        if self.state == PlayState::Paused {
            self.lateness.reset();
            self.state = PlayState::Buffering;
            self.advance(now);
        }
    }

    /// The user sought: the buffer is flushed and the timeline restarts with the new data.
    pub fn handle_seek(&mut self, now: Instant) {
        self.advance(now);
        self.close_stall(now);
        self.timeline = PcrTimeline::default();
        self.lateness.reset();
        self.received = None;
        self.position = 0;
        self.input_ended = false;
        self.length = None;
        self.stats.started = false;
        self.state = PlayState::Buffering;
    }

    /// Time passed: detects starvation, restarts after buffering, finishes after the end.
    pub fn advance(&mut self, now: Instant) {
        if let (Some(len), Some(r)) = (self.length, self.received)
            && r + LENGTH_SLACK_NS >= len
        {
            self.input_ended = true;
        }
        let Some(received) = self.received else {
            if self.input_ended {
                self.state = PlayState::Finished;
            }
            return;
        };
        match self.state {
            PlayState::Playing { wall0, media0 } => {
                let pos = media0 + now.saturating_duration_since(wall0).as_nanos() as u64;
                if pos >= received {
                    self.position = received;
                    if self.input_ended {
                        self.state = PlayState::Finished;
                    } else {
                        let since = wall0 + Duration::from_nanos(received - media0);
                        self.stats.starvations += 1;
                        self.state = PlayState::Stalled { since };
                    }
                }
            }
            PlayState::Buffering | PlayState::Stalled { .. } => {
                let buffered = received.saturating_sub(self.position);
                if buffered >= self.depth.as_nanos() as u64 || self.input_ended {
                    self.close_stall(now);
                    self.stats.started = true;
                    self.state = PlayState::Playing { wall0: now, media0: self.position };
                }
            }
            PlayState::Paused | PlayState::Finished => {}
        }
    }

    /// The media buffered ahead of the playout position at `now`.
    #[must_use]
    pub fn level(&self, now: Instant) -> Duration {
        let Some(received) = self.received else { return Duration::ZERO };
        Duration::from_nanos(received.saturating_sub(self.position_at(now)))
    }

    /// Stall time so far, including a stall in progress at `now`.
    #[must_use]
    pub fn stall_ns(&self, now: Instant) -> u64 {
        match self.state {
            PlayState::Stalled { since } => {
                self.stats.stall_ns + now.saturating_duration_since(since).as_nanos() as u64
            }
            _ => self.stats.stall_ns,
        }
    }

    fn close_stall(&mut self, now: Instant) {
        if let PlayState::Stalled { since } = self.state {
            self.stats.stall_ns += now.saturating_duration_since(since).as_nanos() as u64;
        }
    }

    fn position_at(&self, now: Instant) -> u64 {
        match self.state {
            PlayState::Playing { wall0, media0 } => {
                let pos = media0 + now.saturating_duration_since(wall0).as_nanos() as u64;
                pos.min(self.received.unwrap_or(pos))
            }
            _ => self.position,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TS packet on PID 256 carrying PCR `ms` milliseconds (or no PCR).
    fn ts(ms: Option<u64>) -> [u8; TS_PACKET] {
        let mut p = [0xffu8; TS_PACKET];
        p[0] = 0x47;
        p[1] = 0x01;
        p[2] = 0x00;
        match ms {
            Some(ms) => {
                let pcr = ms * 27_000;
                let (base, ext) = (pcr / 300, pcr % 300);
                p[3] = 0x30;
                p[4] = 7;
                p[5] = 0x10;
                p[6] = (base >> 25) as u8;
                p[7] = (base >> 17) as u8;
                p[8] = (base >> 9) as u8;
                p[9] = (base >> 1) as u8;
                p[10] = (((base & 1) << 7) as u8) | 0x7e | ((ext >> 8) as u8);
                p[11] = ext as u8;
            }
            None => p[3] = 0x10,
        }
        p
    }

    /// One RTP payload: a PCR packet at `ms` and six more.
    fn unit(ms: u64) -> Vec<u8> {
        let mut v = ts(Some(ms)).to_vec();
        for _ in 0..6 {
            v.extend_from_slice(&ts(None));
        }
        v
    }

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    #[test]
    fn pcr_is_parsed_and_unwrapped() {
        let p = ts(Some(1234));
        assert_eq!(packet_pcr(&p), Some((256, 1234 * 27_000, false)));
        assert_eq!(packet_pcr(&ts(None)), None);
        let mut tl = PcrTimeline::default();
        // Just before the wrap, then just after it: 10 ms apart.
        let mut a = [0u8; TS_PACKET];
        a.copy_from_slice(&ts(Some(0)));
        let set = |p: &mut [u8; TS_PACKET], pcr: u64| {
            let (base, ext) = (pcr / 300, pcr % 300);
            p[6] = (base >> 25) as u8;
            p[7] = (base >> 17) as u8;
            p[8] = (base >> 9) as u8;
            p[9] = (base >> 1) as u8;
            p[10] = (((base & 1) << 7) as u8) | 0x7e | ((ext >> 8) as u8);
            p[11] = ext as u8;
        };
        set(&mut a, PCR_WRAP - 135_000);
        assert_eq!(tl.handle_packet(&a), Some(0));
        set(&mut a, 135_000);
        assert_eq!(tl.handle_packet(&a), Some(10_000_000));
        // A jump backwards is a discontinuity: no time added.
        set(&mut a, 27_000);
        assert_eq!(tl.handle_packet(&a), Some(10_000_000));
    }

    #[test]
    fn clock_starts_at_depth_and_data_on_time_never_starves() {
        let t0 = Instant::now();
        let mut p = Playout::new(Duration::from_millis(500));
        // Units 100 ms of media apart, arriving in real time.
        for i in 0..=5 {
            p.handle_payload(at(t0, i * 100), &unit(i * 100));
        }
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 500), media0: 0 });
        for i in 6..30 {
            p.handle_payload(at(t0, i * 100), &unit(i * 100));
            p.advance(at(t0, i * 100 + 50));
        }
        assert_eq!(p.stats().starvations, 0);
        assert_eq!(p.level(at(t0, 2_950)), Duration::from_millis(450));
        p.handle_end(at(t0, 2_950));
        p.advance(at(t0, 3_399));
        assert!(matches!(p.state(), PlayState::Playing { .. }));
        p.advance(at(t0, 3_400));
        assert_eq!(p.state(), PlayState::Finished);
        assert_eq!(p.stats().starvations, 0, "the end is not a starvation");
        assert_eq!(p.stats().bytes, 30 * 7 * 188);
        assert_eq!(p.stats().media_ns, 2_900_000_000);
    }

    #[test]
    fn the_announced_length_ends_the_input_without_a_bye() {
        let t0 = Instant::now();
        let mut p = Playout::new(Duration::from_millis(200));
        p.handle_length(Duration::from_millis(1_000));
        for i in 0..=7 {
            p.handle_payload(at(t0, i * 100), &unit(i * 100));
        }
        p.advance(at(t0, 5_000));
        assert_eq!(p.state(), PlayState::Finished);
        assert_eq!(p.stats().starvations, 0);
    }

    #[test]
    fn lateness_is_measured_against_the_best_served_packet() {
        let t0 = Instant::now();
        let mut p = Playout::new(Duration::from_secs(2));
        // PCR every 100 ms of media; the packet of 1.0 s arrives 1.5 s late, the rest on time
        // (the first one 200 ms late: the schedule follows the best-served packet).
        for i in 0..30u64 {
            let mut at = t0 + Duration::from_millis(100 * i);
            if i == 0 {
                at += Duration::from_millis(200);
            }
            if i == 10 {
                at += Duration::from_millis(1500);
            }
            p.handle_payload(at, &unit(i * 100));
        }
        let late = p.stats().lateness_max_ns;
        assert!((1_499_000_000..=1_501_000_000).contains(&late), "{late}");
    }

    #[test]
    fn a_pause_is_not_lateness() {
        let t0 = Instant::now();
        let mut p = Playout::new(Duration::from_millis(500));
        for i in 0..10u64 {
            p.handle_payload(at(t0, i * 100), &unit(i * 100));
        }
        // PAUSE at 950 ms; the server's packet of 1.0 s was on its way and lands after it.
        p.handle_pause(at(t0, 950));
        p.handle_payload(at(t0, 1_000), &unit(1_000));
        // Two seconds later PLAY resumes from 1.1 s of media: on the resumed schedule.
        p.handle_resume(at(t0, 3_000));
        for i in 11..20u64 {
            p.handle_payload(at(t0, 3_000 + (i - 11) * 100), &unit(i * 100));
        }
        let late = p.stats().lateness_max_ns;
        assert!(late < 1_000_000, "a 2 s pause counted as {late} ns of lateness");
    }

    #[test]
    fn a_gap_longer_than_the_buffer_starves_once_and_rebuffers() {
        let t0 = Instant::now();
        let mut p = Playout::new(Duration::from_millis(300));
        for i in 0..=3 {
            p.handle_payload(at(t0, i * 100), &unit(i * 100));
        }
        // Playing from 300 ms (media 0). Data stops at media 300: due at wall 600.
        p.advance(at(t0, 599));
        assert_eq!(p.stats().starvations, 0);
        p.advance(at(t0, 650));
        assert_eq!(p.stats().starvations, 1);
        assert_eq!(p.state(), PlayState::Stalled { since: at(t0, 600) });
        p.advance(at(t0, 700));
        assert_eq!(p.stats().starvations, 1, "one event per stall");
        // Data resumes at 1000 ms: late packets until the buffer holds 300 ms again.
        for i in 4..=6 {
            p.handle_payload(at(t0, 600 + i * 100), &unit(i * 100));
        }
        assert_eq!(p.stats().late_packets, 3);
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 1_200), media0: 300_000_000 });
        assert_eq!(p.stall_ns(at(t0, 1_200)), 600_000_000);
        assert_eq!(p.level(at(t0, 1_250)), Duration::from_millis(250));
    }

    #[test]
    fn pause_freezes_the_clock_and_seek_flushes() {
        let t0 = Instant::now();
        let mut p = Playout::new(Duration::from_millis(200));
        for i in 0..=4 {
            p.handle_payload(at(t0, i * 100), &unit(i * 100));
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
        // New data on a new timeline (PCR far away) buffers again without a starvation.
        for i in 0..=2 {
            p.handle_payload(at(t0, 5_200 + i * 100), &unit(90_000 + i * 100));
        }
        assert_eq!(p.state(), PlayState::Playing { wall0: at(t0, 5_400), media0: 0 });
        assert_eq!(p.stats().starvations, 0);
    }
}
