//! Send times from the program clock reference (ISO/IEC 13818-1 §2.4.2.2, §2.4.3.5; RFC 2250 §2).
//!
//! Why: a stored transport stream must leave the server at the rate it was multiplexed for, or the
//! client's decoder buffers under- or overflow. The PCR samples the encoder's 27 MHz system clock
//! at the byte where it sits, and the standard defines the arrival time of every other byte by
//! linear interpolation between PCRs (§2.4.2.2). RFC 2250 §2 makes the same time the RTP timestamp
//! of an MP2T payload. This module turns the PCRs of one PID into a monotonic timeline: for a TS
//! packet index it gives 27 MHz ticks since the first PCR.
//!
//! # Rules
//!
//! - **Interpolation** between consecutive PCRs is linear in packet index (up to the thinning
//!   below). Before the first PCR the timeline would extrapolate backwards from time 0, so it is
//!   clamped to 0; after the last one it extrapolates at the *recent rate* (below).
//! - **Wrap-around**: PCR steps are taken modulo 2^33 × 300, so a small forward step across the
//!   wrap is an ordinary step.
//! - **Discontinuities** start a new segment. A step from one PCR to the next (`d` ticks over
//!   `n` packets, `d` taken modulo the wrap) is a discontinuity when
//!   1. a `discontinuity_indicator` was set on the PCR PID since the previous PCR, or on the new
//!      PCR's own packet (§2.4.3.5: the next PCR samples a new system time base), or
//!   2. `d` exceeds [`MAX_PCR_STEP_TICKS`] = 10 s. A backward step (a PCR lower than its
//!      predecessor) shows up here as a step of almost a whole wrap period (~26.5 h), so it is
//!      caught too. Conforming streams carry a PCR at least every 100 ms (§2.7.2), a hundred
//!      times less, or
//!   3. `d` exceeds [`SUSPECT_PCR_STEP_TICKS`] = 1 s *and* the step carries packets more than
//!      [`RATE_COLLAPSE`] = 16 times more slowly than the recent rate: a splice of two streams
//!      whose clocks happen to be a few seconds apart, not a quiet passage.
//!
//!   Unusually *fast* steps (many packets, a tiny or zero `d`) are never discontinuities: VBR
//!   multiplexers that stamp all PCRs of one PES packet with the same value produce them.
//!
//!   A new segment's first PCR is placed at the previous PCR's time plus the packet distance at
//!   the recent rate, so send times stay continuous and monotonic. When the very first step of the
//!   stream is a discontinuity there is no rate yet: the lone earlier PCR is dropped and the
//!   timeline restarts at the new one (packets before it are at time 0).
//! - The **recent rate** is the rate, in ticks per packet, over the last one to two seconds of the
//!   current segment (from the segment's start while it is shorter than that). It equals the
//!   last interval's rate on a constant-rate stream, and unlike that interval it is not zero when
//!   consecutive PCRs repeat.
//!
//! # Storage and thinning
//!
//! The timeline is a list of *pieces* `(packet, ticks, rate)`: from its packet until the next
//! piece, each packet is `rate` later than the previous one, with ticks already unwrapped and
//! offset by their segment, so a lookup is one binary search and no per-packet state is kept.
//! PCRs are merged into *runs* as they arrive: a run starts at a PCR with a slope fixed there —
//! the slope from the previous run's start to this PCR (the longest recent baseline), or, for the
//! first run of a segment, the slope of its first interval — and takes in every following PCR
//! that lies within [`THIN_TOLERANCE_TICKS`] (13 ticks, under 0.5 µs, inside the ±500 ns PCR
//! tolerance the standard allows a remultiplexer) of that line. The first PCR that does not
//! starts the next run; the packets between the last PCR taken in and it are interpolated
//! linearly. A run starts at its PCR's own time, or where the previous run left off if that is
//! later (by at most the tolerance), so times never go backwards.
//!
//! Because a run's line is fixed when the run starts, **the time of every packet up to the
//! latest PCR is final**: later PCRs never change it (`TimelineBuilder::known_ticks`). That is
//! what lets [`UnitStream`](crate::stream::UnitStream) release units one PCR interval after they
//! arrive. (The runs used to be a "swing filter" that chose a run's line only when the run ended,
//! so one late PCR could move thousands of earlier packets by a few ticks: unbounded lookahead.
//! The fixed-slope runs keep the same tolerance.)
//!
//! A constant-rate stream keeps a handful of pieces (ffmpeg `-muxrate`: 4 pieces for 1500 PCRs,
//! as the baselines double), a VBR stream one per PCR, i.e. 32 bytes every 20–100 ms.

use isochron_base::MediaTime;

use crate::packet::{PCR_HZ, PCR_WRAP};

/// A PCR step above this many ticks (10 s) is a discontinuity.
pub const MAX_PCR_STEP_TICKS: u64 = 10 * PCR_HZ;
/// A PCR step above this many ticks (1 s) is a discontinuity if it also carries packets
/// [`RATE_COLLAPSE`] times more slowly than the recent rate.
pub const SUSPECT_PCR_STEP_TICKS: u64 = PCR_HZ;
/// How many times slower than the recent rate a suspect step must be to be a discontinuity.
pub const RATE_COLLAPSE: u64 = 16;
/// The recent rate is measured over at least this many ticks (1 s) once a segment is that long.
const RATE_WINDOW: u64 = PCR_HZ;
/// A PCR this close (in ticks) to the line of the run it follows is merged into the run.
pub const THIN_TOLERANCE_TICKS: u64 = 13;

/// A point of the timeline: packet `packet` is sent at `ticks` (27 MHz) after the first PCR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Anchor {
    pub(crate) packet: u64,
    pub(crate) ticks: u64,
}

/// A rate of `ticks` per `packets` packets; `packets` is never 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rate {
    ticks: u64,
    packets: u64,
}

impl Rate {
    /// The ticks `packets` packets take at this rate, rounded down and saturating.
    fn span(self, packets: u64) -> u64 {
        let t = u128::from(packets) * u128::from(self.ticks) / u128::from(self.packets.max(1));
        u64::try_from(t).unwrap_or(u64::MAX)
    }

    /// The rate from `a` to `b` (`b` after `a`; a tick count that would go back is 0).
    fn between(a: Anchor, b: Anchor) -> Self {
        Self { ticks: b.ticks.saturating_sub(a.ticks), packets: b.packet.saturating_sub(a.packet) }
    }

    /// Whether `at` lies within [`THIN_TOLERANCE_TICKS`] of the line through `from` at this rate
    /// (false if the exact comparison would overflow).
    fn passes_near(self, from: Anchor, at: Anchor) -> bool {
        let dp = i128::from(at.packet) - i128::from(from.packet);
        let dt = i128::from(at.ticks) - i128::from(from.ticks);
        let den = i128::from(self.packets);
        // |ticks × dp / den − dt| ≤ tol  ⇔  |ticks × dp − dt × den| ≤ tol × den.
        let (Some(line), Some(actual)) =
            (i128::from(self.ticks).checked_mul(dp), dt.checked_mul(den))
        else {
            return false;
        };
        line.checked_sub(actual).is_some_and(|d| {
            d.unsigned_abs() <= u128::from(THIN_TOLERANCE_TICKS) * u128::from(self.packets)
        })
    }
}

/// One piece of the timeline: from `packet` on, packet `packet + k` is at `ticks + rate.span(k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Piece {
    packet: u64,
    ticks: u64,
    rate: Rate,
}

impl Piece {
    fn ticks_at(&self, packet: u64) -> u64 {
        self.ticks.saturating_add(self.rate.span(packet.saturating_sub(self.packet)))
    }
}

/// The run of PCRs being merged: a line from `start`, and the last PCR taken in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Run {
    /// Where the run starts on the timeline (its first PCR).
    start: Anchor,
    /// The first PCR's own placement (the unclamped chain of PCR steps), for the next baseline.
    start_pcr_ticks: u64,
    /// The run's slope; `None` for the first run of a segment until its second PCR.
    slope: Option<Rate>,
    /// The last PCR taken in, at its time on the line.
    end: Anchor,
}

impl Run {
    /// A run of one PCR placed at `at` (its own placement `pcr_ticks`).
    fn new(at: Anchor, pcr_ticks: u64, slope: Option<Rate>) -> Self {
        Self { start: at, start_pcr_ticks: pcr_ticks, slope, end: at }
    }

    /// The time of `packet`, for `start.packet <= packet <= end.packet`.
    fn ticks_at(&self, packet: u64) -> u64 {
        match self.slope {
            Some(slope) => self
                .start
                .ticks
                .saturating_add(slope.span(packet.saturating_sub(self.start.packet))),
            None => self.start.ticks,
        }
    }
}

/// The last PCR seen, raw and placed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct LastPcr {
    packet: u64,
    /// The PCR value, in `0..PCR_WRAP`.
    pcr: u64,
    /// Its placement: the previous placement plus the PCR step (before any clamping to the
    /// timeline), or the bridged time of a discontinuity.
    ticks: u64,
}

/// Builds a [`Timeline`] from the PCRs of one PID, in packet order.
#[derive(Clone, Debug, Default)]
pub(crate) struct TimelineBuilder {
    /// Closed pieces, up to the start of `run`.
    pieces: Vec<Piece>,
    run: Option<Run>,
    last: Option<LastPcr>,
    /// The start of the window the recent rate is measured over.
    rate_ref: Option<Anchor>,
    /// The anchor that becomes `rate_ref` once the window is a second long.
    next_ref: Option<Anchor>,
    /// The recent rate of the latest segment with at least two PCRs.
    rate: Option<Rate>,
    pending_discontinuity: bool,
    discontinuities: Vec<u64>,
    pcr_count: u64,
}

impl TimelineBuilder {
    /// Notes a `discontinuity_indicator` on a packet of the PCR PID that carries no PCR: the next
    /// PCR starts a new time base.
    pub(crate) fn mark_discontinuity(&mut self) {
        self.pending_discontinuity = true;
    }

    /// Adds the PCR `pcr` (27 MHz ticks, below the wrap) carried by packet `packet`; `indicator`
    /// is that packet's `discontinuity_indicator`. Packets must come in increasing order. Returns
    /// whether the PCR starts a new segment (a discontinuity).
    pub(crate) fn push_pcr(&mut self, packet: u64, pcr: u64, indicator: bool) -> bool {
        let pcr = pcr % PCR_WRAP;
        let indicator = std::mem::take(&mut self.pending_discontinuity) || indicator;
        let (Some(last), Some(run)) = (self.last, self.run) else {
            self.pcr_count += 1;
            self.start_segment(Anchor { packet, ticks: 0 });
            self.last = Some(LastPcr { packet, pcr, ticks: 0 });
            return false;
        };
        let Some(packets) = packet.checked_sub(last.packet).filter(|&n| n > 0) else {
            // Not after the previous PCR: the caller broke the contract; ignore the PCR.
            return false;
        };
        self.pcr_count += 1;
        let step = (pcr + PCR_WRAP - last.pcr) % PCR_WRAP;
        if self.is_discontinuity(indicator, step, packets) {
            self.discontinuities.push(packet);
            let at = match self.rate {
                Some(rate) => {
                    // Bridge the gap at the recent rate from where the timeline is.
                    let at =
                        Anchor { packet, ticks: run.end.ticks.saturating_add(rate.span(packets)) };
                    self.close_run(run, at);
                    at
                }
                None => {
                    // No rate to bridge the gap with: the lone earlier PCR is useless.
                    self.pieces.clear();
                    Anchor { packet, ticks: 0 }
                }
            };
            self.start_segment(at);
            self.last = Some(LastPcr { packet, pcr, ticks: at.ticks });
            return true;
        }
        let at = Anchor { packet, ticks: last.ticks.saturating_add(step) };
        self.extend_run(run, at);
        self.update_rate(at);
        self.last = Some(LastPcr { packet, pcr, ticks: at.ticks });
        false
    }

    /// How many PCRs were taken in.
    pub(crate) fn pcr_count(&self) -> u64 {
        self.pcr_count
    }

    /// The final time of `packet`, if it is known already: the timeline has a rate and `packet`
    /// is at or before the latest PCR. Later PCRs never change a value this returns, and
    /// [`finish`](Self::finish) gives the same.
    pub(crate) fn known_ticks(&self, packet: u64) -> Option<u64> {
        // Before the first rate, a discontinuity may still restart the timeline at 0.
        self.rate?;
        let run = self.run?;
        if packet > run.end.packet {
            return None;
        }
        if packet >= run.start.packet {
            return Some(run.ticks_at(packet));
        }
        let i = self.pieces.partition_point(|p| p.packet <= packet);
        Some(i.checked_sub(1).and_then(|i| self.pieces.get(i)).map_or(0, |p| p.ticks_at(packet)))
    }

    /// The timeline and the packet indices where discontinuities start, or `None` if no two
    /// PCRs of one segment gave a rate.
    pub(crate) fn finish(self) -> Option<(Timeline, Vec<u64>)> {
        let tail = self.rate?;
        let run = self.run?;
        let mut pieces = self.pieces;
        if let Some(slope) = run.slope
            && run.end.packet > run.start.packet
        {
            pieces.push(Piece { packet: run.start.packet, ticks: run.start.ticks, rate: slope });
        }
        pieces.push(Piece { packet: run.end.packet, ticks: run.end.ticks, rate: tail });
        Some((Timeline { pieces }, self.discontinuities))
    }

    fn is_discontinuity(&self, indicator: bool, step: u64, packets: u64) -> bool {
        if indicator || step > MAX_PCR_STEP_TICKS {
            return true;
        }
        if step <= SUSPECT_PCR_STEP_TICKS {
            return false;
        }
        // Slower than rate / RATE_COLLAPSE: packets / step < rate.packets / (rate.ticks × 16).
        self.rate.is_some_and(|r| {
            u128::from(packets) * u128::from(r.ticks) * u128::from(RATE_COLLAPSE)
                < u128::from(r.packets) * u128::from(step)
        })
    }

    /// Starts a segment (the first run of a time base) at `at`.
    fn start_segment(&mut self, at: Anchor) {
        self.run = Some(Run::new(at, at.ticks, None));
        self.rate_ref = Some(at);
        self.next_ref = Some(at);
    }

    /// Takes in the PCR placed at `at` (not a discontinuity): merges it into `run` or starts the
    /// next run at it.
    fn extend_run(&mut self, mut run: Run, at: Anchor) {
        match run.slope {
            None => {
                // The second PCR of a segment gives its first run's slope.
                run.slope = Some(Rate::between(run.start, at));
                run.end = Anchor { packet: at.packet, ticks: run.ticks_at(at.packet) };
                self.run = Some(run);
            }
            Some(slope) if slope.passes_near(run.start, at) => {
                run.end = Anchor { packet: at.packet, ticks: run.ticks_at(at.packet) };
                self.run = Some(run);
            }
            Some(_) => {
                let next = Anchor { packet: at.packet, ticks: at.ticks.max(run.end.ticks) };
                self.close_run(run, next);
                let baseline = Rate::between(
                    Anchor { packet: run.start.packet, ticks: run.start_pcr_ticks },
                    at,
                );
                self.run = Some(Run::new(next, at.ticks, Some(baseline)));
            }
        }
    }

    /// Closes `run` with pieces up to `next` (after the run's end, not earlier in time): the
    /// run's line up to its last PCR, then a straight line to `next`.
    fn close_run(&mut self, run: Run, next: Anchor) {
        if let Some(slope) = run.slope
            && run.end.packet > run.start.packet
        {
            self.pieces.push(Piece {
                packet: run.start.packet,
                ticks: run.start.ticks,
                rate: slope,
            });
        }
        self.pieces.push(Piece {
            packet: run.end.packet,
            ticks: run.end.ticks,
            rate: Rate::between(run.end, next),
        });
    }

    /// Moves the rate window forward and measures the recent rate up to `at`.
    fn update_rate(&mut self, at: Anchor) {
        let (Some(mut rate_ref), Some(next_ref)) = (self.rate_ref, self.next_ref) else {
            return;
        };
        if at.ticks.saturating_sub(next_ref.ticks) >= RATE_WINDOW {
            rate_ref = next_ref;
            self.rate_ref = Some(next_ref);
            self.next_ref = Some(at);
        }
        if let Some(packets) = at.packet.checked_sub(rate_ref.packet).filter(|&n| n > 0) {
            self.rate = Some(Rate { ticks: at.ticks.saturating_sub(rate_ref.ticks), packets });
        }
    }
}

/// Send times of a stream's packets: pieces of straight lines, the last one extrapolating past
/// the last PCR at the recent rate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Timeline {
    /// At least one piece; the first starts at the first PCR at tick 0; packet indices increase
    /// and times never decrease, within a piece or from one to the next.
    pieces: Vec<Piece>,
}

impl Timeline {
    /// Ticks since the first PCR at which `packet` is sent.
    pub(crate) fn ticks(&self, packet: u64) -> u64 {
        let i = self.pieces.partition_point(|a| a.packet <= packet);
        self.ticks_after(i, packet)
    }

    /// [`Self::ticks`] for packets asked in increasing order: `hint` carries the search position
    /// from one call to the next, making a sweep over all packets linear.
    pub(crate) fn ticks_with_hint(&self, packet: u64, hint: &mut usize) -> u64 {
        let stale = *hint > self.pieces.len()
            || (*hint > 0 && self.pieces.get(*hint - 1).is_some_and(|a| a.packet > packet));
        if stale {
            *hint = self.pieces.partition_point(|a| a.packet <= packet);
        }
        while self.pieces.get(*hint).is_some_and(|a| a.packet <= packet) {
            *hint += 1;
        }
        self.ticks_after(*hint, packet)
    }

    /// The ticks of `packet`, given `i` = the number of pieces starting at or before it.
    fn ticks_after(&self, i: usize, packet: u64) -> u64 {
        // Before the first PCR: extrapolating backwards from 0 clamps to 0.
        i.checked_sub(1).and_then(|i| self.pieces.get(i)).map_or(0, |p| p.ticks_at(packet))
    }

    /// The first packet whose ticks are at least `ticks` (`u64::MAX` if none ever is).
    pub(crate) fn first_packet_at(&self, ticks: u64) -> u64 {
        if ticks == 0 {
            return 0;
        }
        let j = self.pieces.partition_point(|a| a.ticks < ticks);
        let Some(a) = j.checked_sub(1).and_then(|i| self.pieces.get(i)) else {
            // Only reachable if the first piece were above 0.
            return 0;
        };
        // The next piece starts at or after `ticks`, so its first packet is the answer if `a`
        // never gets there.
        let next = self.pieces.get(j).map_or(u64::MAX, |b| b.packet);
        if a.rate.ticks == 0 {
            return next;
        }
        // a.ticks + floor(k × rate.ticks / rate.packets) ≥ ticks ⇔ k ≥ ⌈behind × packets / ticks⌉.
        let behind = u128::from(ticks - a.ticks);
        let k = (behind * u128::from(a.rate.packets)).div_ceil(u128::from(a.rate.ticks));
        a.packet.saturating_add(u64::try_from(k).unwrap_or(u64::MAX)).min(next)
    }

    /// How many pieces are stored.
    pub(crate) fn anchor_count(&self) -> usize {
        self.pieces.len()
    }
}

/// 27 MHz ticks as a [`MediaTime`] (rounded down to the nanosecond).
pub(crate) fn ticks_to_time(ticks: u64) -> MediaTime {
    MediaTime::from_nanos(u64::try_from(u128::from(ticks) * 1000 / 27).unwrap_or(u64::MAX))
}

/// The fewest ticks whose [`ticks_to_time`] is at least `t`.
pub(crate) fn time_to_ticks_ceil(t: MediaTime) -> u64 {
    // t × 27 / 1000 < 2^64 for every t.
    (u128::from(t.as_nanos()) * 27).div_ceil(1000) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Builds a timeline from `(packet, pcr, indicator)` triples.
    fn timeline(pcrs: &[(u64, u64, bool)]) -> (Timeline, Vec<u64>) {
        let mut b = TimelineBuilder::default();
        for &(p, pcr, d) in pcrs {
            b.push_pcr(p, pcr, d);
        }
        b.finish().expect("at least two PCRs")
    }

    fn assert_monotonic(t: &Timeline, packets: u64) {
        let mut prev = 0;
        let mut hint = 0;
        for p in 0..packets {
            let x = t.ticks(p);
            assert!(x >= prev, "ticks({p}) = {x} < {prev}");
            assert_eq!(t.ticks_with_hint(p, &mut hint), x);
            prev = x;
        }
    }

    #[test]
    fn constant_rate_is_exact_and_thinned() {
        // A PCR every 10 packets, 100 ticks per packet, starting at an arbitrary PCR.
        let base = 123_456_789;
        let pcrs: Vec<_> = (0..1000).map(|i| (5 + i * 10, base + i * 1000, false)).collect();
        let (t, disc) = timeline(&pcrs);
        assert!(disc.is_empty());
        assert_eq!(t.anchor_count(), 2, "collinear anchors are merged");
        for p in 5..20_000 {
            assert_eq!(t.ticks(p), (p - 5) * 100, "packet {p}");
        }
        // Before the first PCR: clamped to 0.
        for p in 0..5 {
            assert_eq!(t.ticks(p), 0);
        }
    }

    #[test]
    fn fractional_rate_interpolates_exactly() {
        // 1000 ticks over 7 packets: ticks(p) = floor(1000 × p / 7).
        let pcrs: Vec<_> = (0..50).map(|i| (i * 7, i * 1000, false)).collect();
        let (t, _) = timeline(&pcrs);
        for p in 0..400 {
            assert_eq!(t.ticks(p), 1000 * p / 7);
        }
    }

    #[test]
    fn wrap_around_is_continuous() {
        let start = PCR_WRAP - 5_500;
        let pcrs: Vec<_> =
            (0..20).map(|i| (i * 10, (start + i * 1000) % PCR_WRAP, false)).collect();
        let (t, disc) = timeline(&pcrs);
        assert!(disc.is_empty(), "wrap is not a discontinuity");
        for p in 0..300 {
            assert_eq!(t.ticks(p), p * 100);
        }
    }

    #[test]
    fn indicator_starts_a_segment_at_the_recent_rate() {
        let mut pcrs: Vec<_> = (0..4).map(|i| (i * 10, 1_000_000 + i * 1000, false)).collect();
        // Packet 40 carries a brand-new time base.
        pcrs.push((40, 5_000_000_000, true));
        pcrs.push((50, 5_000_002_000, false));
        let (t, disc) = timeline(&pcrs);
        assert_eq!(disc, vec![40]);
        assert_eq!(t.ticks(30), 3000);
        assert_eq!(t.ticks(35), 3500);
        assert_eq!(t.ticks(40), 4000, "placed at previous + 10 packets × 100");
        assert_eq!(t.ticks(45), 5000);
        assert_eq!(t.ticks(50), 6000, "then follows the new clock");
        assert_monotonic(&t, 100);
    }

    #[test]
    fn pending_indicator_applies_to_next_pcr() {
        let mut b = TimelineBuilder::default();
        b.push_pcr(0, 0, false);
        b.push_pcr(10, 1000, false);
        b.mark_discontinuity();
        b.push_pcr(20, 2000, false);
        let (t, disc) = b.finish().expect("rate");
        assert_eq!(disc, vec![20]);
        assert_eq!(t.ticks(20), 2000);
    }

    #[test]
    fn backward_step_is_a_discontinuity() {
        let pcrs = [
            (0, 90_000_000, false),
            (10, 90_001_000, false),
            (20, 1_000, false),
            (30, 2_000, false),
        ];
        let (t, disc) = timeline(&pcrs);
        assert_eq!(disc, vec![20]);
        assert_eq!(t.ticks(20), 2000);
        assert_eq!(t.ticks(30), 3000);
        assert_monotonic(&t, 60);
    }

    #[test]
    fn large_forward_step_is_a_discontinuity() {
        let pcrs = [(0, 0, false), (10, 1000, false), (20, 1000 + MAX_PCR_STEP_TICKS + 1, false)];
        let (t, disc) = timeline(&pcrs);
        assert_eq!(disc, vec![20]);
        assert_eq!(t.ticks(20), 2000);
        // Exactly the limit is still an ordinary step.
        // (over enough packets not to look like a rate collapse).
        let packets = 10 + MAX_PCR_STEP_TICKS / 1000;
        let pcrs = [(0, 0, false), (10, 1000, false), (packets, 1000 + MAX_PCR_STEP_TICKS, false)];
        let (_, disc) = timeline(&pcrs);
        assert!(disc.is_empty());
    }

    #[test]
    fn rate_collapse_over_a_suspect_step() {
        // 100 ticks/packet, then 2 s over 10 packets: 54,000 times slower.
        let pcrs = [(0, 0, false), (10, 1000, false), (20, 1000 + 2 * PCR_HZ, false)];
        let (_, disc) = timeline(&pcrs);
        assert_eq!(disc, vec![20]);
        // 2 s at a rate only 10× slower than before is kept.
        let rate_packets = 2 * PCR_HZ / 1000; // 1000 ticks/packet
        let pcrs =
            [(0, 0, false), (10, 1000, false), (10 + rate_packets, 1000 + 2 * PCR_HZ, false)];
        let (_, disc) = timeline(&pcrs);
        assert!(disc.is_empty());
        // Half a second at any rate is kept (below the suspect threshold).
        let pcrs = [(0, 0, false), (10, 1000, false), (11, 1000 + PCR_HZ / 2, false)];
        let (_, disc) = timeline(&pcrs);
        assert!(disc.is_empty());
    }

    #[test]
    fn repeated_pcrs_are_not_discontinuities() {
        // ffmpeg VBR: PCRs inside one PES repeat, then jump by a frame.
        let pcrs = [
            (0, 0, false),
            (5, 0, false),
            (9, 0, false),
            (12, 1_080_000, false),
            (30, 1_080_000, false),
            (33, 2_160_000, false),
        ];
        let (t, disc) = timeline(&pcrs);
        assert!(disc.is_empty());
        assert_eq!(t.ticks(9), 0);
        assert_eq!(t.ticks(12), 1_080_000);
        assert_monotonic(&t, 100);
        // The tail uses the recent rate (2,160,000 ticks over 33 packets), not the last interval.
        assert_eq!(t.ticks(33 + 33), 2 * 2_160_000);
    }

    #[test]
    fn lone_pcr_then_discontinuity_restarts() {
        let pcrs = [(3, 5_000, false), (10, 9_000_000_000, true), (20, 9_000_001_000, false)];
        let (t, disc) = timeline(&pcrs);
        assert_eq!(disc, vec![10]);
        assert_eq!(t.ticks(3), 0);
        assert_eq!(t.ticks(10), 0);
        assert_eq!(t.ticks(15), 500);
        assert_eq!(t.ticks(20), 1000);
    }

    #[test]
    fn one_pcr_is_not_enough() {
        let mut b = TimelineBuilder::default();
        b.push_pcr(0, 100, false);
        assert_eq!(b.pcr_count(), 1);
        assert!(b.finish().is_none());
        assert!(TimelineBuilder::default().finish().is_none());
    }

    #[test]
    fn tail_extrapolates_at_recent_rate() {
        let (t, _) = timeline(&[(0, 0, false), (10, 1000, false), (20, 2000, false)]);
        assert_eq!(t.ticks(25), 2500);
        assert_eq!(t.ticks(1_000_000), 100_000_000);
    }

    #[test]
    fn recent_rate_follows_the_last_seconds() {
        // 1 s at 100 ticks/packet, then 3 s at 1000 ticks/packet; the tail uses the latter.
        let mut pcrs = Vec::new();
        let mut p = 0;
        let mut pcr = 0;
        while pcr < PCR_HZ {
            pcrs.push((p, pcr, false));
            p += 1000;
            pcr += 100_000;
        }
        while pcr < 4 * PCR_HZ {
            pcrs.push((p, pcr, false));
            p += 100;
            pcr += 100_000;
        }
        let &(lp, lpcr, _) = pcrs.last().expect("pcrs");
        let (t, _) = timeline(&pcrs);
        assert_eq!(t.ticks(lp + 10), lpcr + 10_000);
    }

    #[test]
    fn thinning_stays_within_tolerance() {
        let mut b = TimelineBuilder::default();
        let mut raw = Vec::new();
        let mut pcr = 0u64;
        let mut g = isochron_base::mix::SplitMix64::new(7);
        for i in 0..5000u64 {
            let p = i * 20;
            // 20 packets of 2000 ticks, plus 0..=12 ticks of jitter.
            let jitter = g.next_u64() % 13;
            let at = pcr + jitter;
            b.push_pcr(p, at, false);
            raw.push((p, at));
            pcr += 40_000;
        }
        let (t, disc) = b.finish().expect("rate");
        assert!(disc.is_empty());
        assert!(t.anchor_count() < raw.len() / 2, "{} anchors", t.anchor_count());
        // Times count from the first PCR, which has jitter of its own (11 ticks here): compare
        // against the PCRs relative to it. (Comparing against the raw values only ever passed
        // because the swing filter's line happened to run near the top of the jitter band for
        // this seed; for seeds 2, 3, 5 and 8 it did not.)
        let first = raw[0].1;
        for &(p, at) in &raw {
            let got = t.ticks(p);
            let want = at - first;
            assert!(got.abs_diff(want) <= THIN_TOLERANCE_TICKS, "packet {p}: {got} vs {want}");
        }
        assert_monotonic(&t, 100_500);
    }

    #[test]
    fn first_packet_at_inverts_ticks() {
        let mut g = isochron_base::mix::SplitMix64::new(11);
        let mut b = TimelineBuilder::default();
        let mut p = 3;
        let mut pcr = 7_000;
        for _ in 0..200 {
            b.push_pcr(p, pcr, g.next_u64().is_multiple_of(50));
            p += 1 + g.next_u64() % 30;
            pcr += g.next_u64() % 50_000;
        }
        let (t, _) = b.finish().expect("rate");
        let n = p + 100;
        let ticks: Vec<u64> = (0..n).map(|p| t.ticks(p)).collect();
        let last = *ticks.last().expect("packets");
        for target in (0..last + 5).step_by(997).chain([1, last, last + 1]) {
            let want = ticks.iter().position(|&x| x >= target).map_or(n, |i| i as u64);
            assert_eq!(t.first_packet_at(target).min(n), want, "target {target}");
        }
    }

    #[test]
    fn time_conversions() {
        assert_eq!(ticks_to_time(27), MediaTime::from_nanos(1000));
        assert_eq!(ticks_to_time(PCR_HZ), MediaTime::from_nanos(1_000_000_000));
        assert_eq!(ticks_to_time(1), MediaTime::from_nanos(37));
        assert_eq!(time_to_ticks_ceil(MediaTime::from_nanos(37)), 1);
        assert_eq!(time_to_ticks_ceil(MediaTime::from_nanos(38)), 2);
        for ticks in 0..500 {
            let t = ticks_to_time(ticks);
            assert!(time_to_ticks_ceil(t) <= ticks);
            assert!(ticks_to_time(time_to_ticks_ceil(t)) >= t);
        }
    }
}
