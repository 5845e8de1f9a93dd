//! Adaptive bit rate over RTSP: which rendition of a title a session should play, from what
//! its player's receiver reports say of the path (sans-IO).
//!
//! A player reports on each stream it receives (RFC 3550 §6.4.1): the fraction of packets lost
//! since its last report, and — through LSR and DLSR, which echo our last sender report — the
//! round-trip time, whose growth over the least seen is the queue our packets wait in on the
//! way (RFC 3550 §6.4.1, "round-trip propagation delay"). A path that cannot carry the
//! rendition shows one or both: a shallow bottleneck drops, a deep one delays.
//!
//! [`Chooser`] steps down **fast** (the first report that shows loss over
//! [`AbrConfig::down_loss`] or a queue over [`AbrConfig::down_delay`]) and up **slowly**, with
//! hysteresis: only after [`AbrConfig::up_after`] of clean reports, and when a step up is
//! followed by a step down within [`AbrConfig::probe`] (the higher rate did not fit), the wait
//! before the next attempt doubles, up to [`AbrConfig::max_up_after`]. Reports that come within
//! [`AbrConfig::settle`] of a switch describe the rate before it and are not judged.
//!
//! A report's interarrival jitter (RFC 3550 §6.4.1, A.8) is the smoothed variation of the
//! packets' transit. It stands in for the round trip only when a report gives none (a player
//! that does not echo our sender reports): then jitter over the least its stream reported since
//! the last switch by more than [`AbrConfig::clean_jitter`] makes a report not clean — no step
//! up into a path whose delay varies more and more — though alone it never steps down. With a
//! round trip it is not judged: a paced stream's jitter is mostly its own frame bursts, which a
//! full bottleneck queue smooths out and an empty one passes (GStreamer reported a 240p stream's
//! jitter at 23 ms while an 8 s queue was full and 50–57 ms once it had drained, so the judged
//! jitter rose just as the path cleared). The least is taken afresh at a switch: a rung's
//! packets per frame, and so the jitter its pacing alone gives, differ.
//!
//! Over RTSP/TCP some players send no report at all (ffmpeg), and every byte is delivered, so
//! no loss is ever reported: there the server reads the path from its own side. The
//! connection's socket holds every byte its client has not acknowledged (sent or not); those
//! bytes over the rate at which the client acknowledges them is the time a byte written now
//! waits before it arrives: the queue a receiver report's round trip would show.
//! [`QueueDelay`] makes that a report of the same kind, judged by the same [`Chooser`].
//!
//! A player that asks for lost packets again (generic NACKs, RFC 4585 §6.2.1) counts what
//! comes back as received: its reports' fraction lost is then what retransmission did not
//! repair, not what the path dropped. The packets it asked for over the span of sequence numbers
//! its reports cover ([`Chooser::handle_nack`], [`ReceiverFeedback::highest_seq`]) is the path's
//! loss, judged as the reported one is (the higher of the two). A player may ask for a packet
//! only after the report whose span holds it (GStreamer waits out its jitter first): each
//! number asked for is charged to the span it falls in, and a span is judged once
//! [`NACK_SETTLE`] has passed since its report, together with those before it up to
//! [`NACK_WINDOW`] packets. A switch starts the spans afresh (those before it describe another
//! rate).
//!
//! isochron's own players say more: with MTFC (`docs/design/mtfc.md`) each rate request
//! carries the player's buffer — the media it holds and the depth it plays at
//! ([`Chooser::handle_buffer`]). What the receiver reports show of the path, the buffer shows of
//! its outcome, whatever the cause (a path, a slow node, a relay): one under a quarter of its
//! depth and falling steps down at once, and one under half its depth keeps every report from
//! counting as clean, so no step up is made into a draining buffer.
//!
//! It decides only *which* rung; the node core carries a switch out at the next key frame the
//! renditions share (`docs/design/renditions.md`, *Switching over RTSP*).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use isochron_base::Instant;

/// What one receiver report says of a stream's path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiverFeedback {
    /// The SSRC of our stream the report is on.
    pub ssrc: u32,
    /// The fraction of packets lost since the previous report, in 1/256.
    pub fraction_lost: u8,
    /// The round-trip time its LSR and DLSR give, if it echoed a sender report.
    pub rtt: Option<Duration>,
    /// The extended highest sequence number received (RFC 3550 §6.4.1), if a report said.
    pub highest_seq: Option<u32>,
    /// The interarrival jitter, in the stream's timestamp units (RFC 3550 §6.4.1; 0 when not
    /// reported).
    pub jitter: u32,
}

/// The queue ahead of an interleaved client, measured at the server's socket (see the module
/// docs): sampled about once a second with the bytes written to the socket so far and the
/// bytes it holds unacknowledged (`SIOCOUTQ`).
#[derive(Clone, Copy, Debug, Default)]
pub struct QueueDelay {
    last: Option<(u64, usize)>,
}

/// The longest queue [`QueueDelay`] reports (a client that acknowledges nothing at all).
pub const MAX_QUEUE_DELAY: Duration = Duration::from_secs(30);

impl QueueDelay {
    /// A sample `elapsed` after the previous one: `written` bytes written to the socket since it
    /// opened, `unacked` held now. The queue's delay: `None` for the first sample and while
    /// nothing is written or held (no stream: nothing to say).
    pub fn sample(&mut self, elapsed: Duration, written: u64, unacked: usize) -> Option<Duration> {
        let (w0, q0) = self.last.replace((written, unacked))?;
        if written == w0 && unacked == 0 {
            return None;
        }
        if unacked == 0 {
            return Some(Duration::ZERO);
        }
        // Acknowledged in the interval: what was held or written then, less what is held now.
        let acked = (written.saturating_sub(w0) + q0 as u64).saturating_sub(unacked as u64);
        let secs = elapsed.as_secs_f64();
        if acked == 0 || secs <= 0.0 {
            return Some(MAX_QUEUE_DELAY);
        }
        let delay = unacked as f64 / (acked as f64 / secs);
        Some(Duration::from_secs_f64(delay.min(MAX_QUEUE_DELAY.as_secs_f64())))
    }
}

/// When to step down and up.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AbrConfig {
    /// A report losing more than this fraction steps down. Default 5 %.
    pub down_loss: f64,
    /// A round trip this much over the least seen (a queue on the path) steps down. Default
    /// 400 ms.
    pub down_delay: Duration,
    /// A report is clean when it loses at most this fraction and its queue is at most a
    /// quarter of `down_delay`. Default 1 %.
    pub clean_loss: f64,
    /// A report without a round trip whose jitter exceeds the least since the last switch by
    /// more than this is not clean. Default 30 ms.
    pub clean_jitter: Duration,
    /// Clean reports for this long step up. Default 10 s.
    pub up_after: Duration,
    /// A step down this soon after a step up doubles `up_after`. Default 10 s.
    pub probe: Duration,
    /// The longest `up_after` grows to. Default 80 s.
    pub max_up_after: Duration,
    /// Reports this soon after a switch are not judged. Default 2 s.
    pub settle: Duration,
}

impl Default for AbrConfig {
    fn default() -> Self {
        Self {
            down_loss: 0.05,
            down_delay: Duration::from_millis(400),
            clean_loss: 0.01,
            clean_jitter: Duration::from_millis(30),
            up_after: Duration::from_secs(10),
            probe: Duration::from_secs(10),
            max_up_after: Duration::from_secs(80),
            settle: Duration::from_secs(2),
        }
    }
}

/// How long after a report a player may still ask for a packet of the span it covers: a span
/// is judged once this has passed since its report.
pub const NACK_SETTLE: Duration = Duration::from_millis(500);

/// The fewest packets a share asked for again is judged over: reports may come every few
/// packets (RTP/AVPF lifts RTCP's 5 s minimum, RFC 4585 §3.4), and a NACK of three packets in
/// a span of ten is not 30 % loss.
pub const NACK_WINDOW: u32 = 256;

/// Report marks kept at most (a stream too slow to fill [`NACK_WINDOW`] over them is judged
/// over what they cover).
const MAX_MARKS: usize = 256;

/// The packets one stream's player asked for again, charged to the spans of sequence numbers
/// its reports mark.
#[derive(Clone, Debug, Default)]
struct NackSpans {
    /// When each of the last reports came and the extended highest sequence number it gave,
    /// oldest first; a span runs from one mark (excluded) to the next.
    marks: VecDeque<(Instant, u32)>,
    /// The numbers asked for (extended), each once, above the oldest mark.
    asked: BTreeSet<u32>,
}

impl NackSpans {
    /// Whether `n` is a number ahead of `base` (within 2^24: a report's span, not a reset).
    fn ahead(n: u32, base: u32) -> bool {
        (1..1 << 24).contains(&n.wrapping_sub(base))
    }

    /// A report at `now` marks `highest`. Returns the share asked for again over the latest
    /// spans judged (their reports [`NACK_SETTLE`] old) that cover [`NACK_WINDOW`] packets, once
    /// there are such.
    fn handle_report(&mut self, now: Instant, highest: u32) -> Option<f64> {
        match self.marks.back() {
            Some(&(_, last)) if Self::ahead(highest, last) => {
                self.marks.push_back((now, highest));
                if self.marks.len() > MAX_MARKS {
                    self.marks.pop_front();
                }
            }
            Some(&(_, last)) if highest == last => {}
            _ => {
                // The first report, or the numbers jumped (a new stream): start afresh.
                self.restart(now, highest);
                return None;
            }
        }
        let settled = self.marks.iter().rposition(|&(t, _)| now >= t + NACK_SETTLE)?;
        let hi = self.marks[settled].1;
        let lo = (0..settled).rev().find(|&i| hi.wrapping_sub(self.marks[i].1) >= NACK_WINDOW);
        let lo = match lo {
            Some(lo) => lo,
            None if self.marks.len() >= MAX_MARKS => 0,
            None => return None,
        };
        self.marks.drain(..lo);
        let oldest = self.marks.front()?.1;
        self.asked.retain(|&n| Self::ahead(n, oldest));
        let asked = self.asked.iter().filter(|&&n| !Self::ahead(n, hi)).count();
        Some(asked as f64 / f64::from(hi.wrapping_sub(oldest)))
    }

    /// Packets `seqs` were asked for: charged to the span each falls in (numbers before the
    /// spans kept are dropped).
    fn handle_nack(&mut self, seqs: &[u16]) {
        let (Some(&(_, oldest)), Some(&(_, last))) = (self.marks.front(), self.marks.back()) else {
            return;
        };
        for &seq in seqs.iter().take(1 << 16) {
            // The extended number nearest the last mark (a NACK may name a number past it).
            let n = last.wrapping_add_signed(i32::from(seq.wrapping_sub(last as u16) as i16));
            if Self::ahead(n, oldest) {
                self.asked.insert(n);
            }
        }
    }

    /// Spans start afresh at `mark`, made at `at`.
    fn restart(&mut self, at: Instant, mark: u32) {
        self.marks.clear();
        self.marks.push_back((at, mark));
        self.asked.retain(|&n| Self::ahead(n, mark));
    }
}

/// What one piece of feedback says of the rung playing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// It does not fit: step down.
    Down,
    /// Neither: no step down, and the wait for a step up starts again.
    Unclear,
    /// It fits with room to spare.
    Clean,
}

/// One session's choice of rung (0 is the highest), from its receiver reports.
#[derive(Clone, Debug)]
pub struct Chooser {
    config: AbrConfig,
    rungs: usize,
    current: usize,
    /// The rung a switch was decided to and not yet carried out.
    pending: Option<usize>,
    /// Per SSRC: the packets its player asked for again, by report span.
    nacks: BTreeMap<u32, NackSpans>,
    /// The loss the last report's spans showed in NACKs, if it could be told.
    nack_loss: Option<f64>,
    /// The player's buffer as it last reported it (MTFC), if it does.
    buffer: Option<Duration>,
    /// That buffer is under half its depth: nothing is clean.
    buffer_low: bool,
    min_rtt: Option<Duration>,
    /// Per SSRC: the least jitter reported since the last switch.
    min_jitter: BTreeMap<u32, Duration>,
    clean_since: Option<Instant>,
    switched_at: Option<Instant>,
    /// When the last step up took effect, while it is still on probation.
    last_up: Option<Instant>,
    up_after: Duration,
}

impl Chooser {
    /// A session on rung `current` of a ladder of `rungs`.
    #[must_use]
    pub fn new(config: AbrConfig, rungs: usize, current: usize) -> Self {
        Self {
            config,
            rungs,
            current,
            pending: None,
            nacks: BTreeMap::new(),
            nack_loss: None,
            buffer: None,
            buffer_low: false,
            min_rtt: None,
            min_jitter: BTreeMap::new(),
            clean_since: None,
            switched_at: None,
            last_up: None,
            up_after: config.up_after,
        }
    }

    /// The rung being played.
    #[must_use]
    pub fn current(&self) -> usize {
        self.current
    }

    /// The share of packets the player asked for again over the last report spans judged (none
    /// until a stream's spans cover [`NACK_WINDOW`] packets, [`NACK_SETTLE`] after a report).
    #[must_use]
    pub fn nack_loss(&self) -> Option<f64> {
        self.nack_loss
    }

    /// How long clean reports must last before the next step up.
    #[must_use]
    pub fn up_after(&self) -> Duration {
        self.up_after
    }

    /// A receiver report arrived at `now` on a stream whose RTP clock runs at `clock_rate` Hz.
    /// Returns the rung to switch to, when the session should switch; then
    /// [`Chooser::handle_switched`] once it has (or has not).
    pub fn handle_report(
        &mut self,
        now: Instant,
        fb: ReceiverFeedback,
        clock_rate: u32,
    ) -> Option<usize> {
        let queue = fb.rtt.map(|rtt| {
            let min = self.min_rtt.map_or(rtt, |m| m.min(rtt));
            self.min_rtt = Some(min);
            rtt.saturating_sub(min)
        });
        // The packets asked for again over those the reports' spans cover.
        let nack_loss = fb
            .highest_seq
            .and_then(|h| self.nacks.entry(fb.ssrc).or_default().handle_report(now, h));
        self.nack_loss = nack_loss.or(self.nack_loss);
        // Jitter only stands in for a round trip the player does not give (see the module docs).
        let jitter_grew = clock_rate > 0 && fb.rtt.is_none() && {
            let jitter = Duration::from_secs_f64(f64::from(fb.jitter) / f64::from(clock_rate));
            let min = self.min_jitter.entry(fb.ssrc).or_insert(jitter);
            *min = (*min).min(jitter);
            jitter.saturating_sub(*min) > self.config.clean_jitter
        };
        let loss = (f64::from(fb.fraction_lost) / 256.0).max(nack_loss.unwrap_or(0.0));
        let verdict =
            if loss > self.config.down_loss || queue.is_some_and(|q| q > self.config.down_delay) {
                Verdict::Down
            } else if loss <= self.config.clean_loss
                && queue.is_none_or(|q| q <= self.config.down_delay / 4)
                && !jitter_grew
                && !self.buffer_low
            {
                Verdict::Clean
            } else {
                Verdict::Unclear
            };
        self.judge(now, verdict)
    }

    /// The player asked for packets `seqs` of the stream with SSRC `ssrc` again (a generic
    /// NACK): each number counted once (a player asks again until the packet comes) against
    /// the report span it falls in, whether that report came already or is still to come.
    pub fn handle_nack(&mut self, ssrc: u32, seqs: &[u16]) {
        self.nacks.entry(ssrc).or_default().handle_nack(seqs);
    }

    /// The player reported at `now` that it holds `level` of media and plays at a depth of
    /// `depth` (MTFC). Under a quarter of the depth and lower than its last report (draining,
    /// not refilling after a stall or a seek): step down. Under half: nothing is clean until a
    /// report over half. Returns the rung to switch to, as [`Chooser::handle_report`] does.
    pub fn handle_buffer(
        &mut self,
        now: Instant,
        level: Duration,
        depth: Duration,
    ) -> Option<usize> {
        let falling = self.buffer.is_some_and(|last| level < last);
        self.buffer = Some(level);
        self.buffer_low = level < depth / 2;
        let verdict = if level < depth / 4 && falling {
            Verdict::Down
        } else if self.buffer_low {
            Verdict::Unclear
        } else {
            Verdict::Clean
        };
        self.judge(now, verdict)
    }

    /// Acts on one verdict: down at once, up after `up_after` of clean ones.
    fn judge(&mut self, now: Instant, verdict: Verdict) -> Option<usize> {
        if self.pending.is_some() {
            return None;
        }
        if self.switched_at.is_some_and(|t| now < t + self.config.settle) {
            return None;
        }
        match verdict {
            Verdict::Down => {
                self.clean_since = None;
                if self.last_up.is_some_and(|t| now < t + self.config.probe) {
                    // The step up did not fit: wait longer before the next.
                    self.up_after = (self.up_after * 2).min(self.config.max_up_after);
                    self.last_up = None;
                }
                self.decide(self.current + 1 < self.rungs, self.current + 1)
            }
            Verdict::Unclear => {
                self.clean_since = None;
                None
            }
            Verdict::Clean => {
                if self.last_up.is_some_and(|t| now >= t + self.config.probe) {
                    // The last step up held: the next may come as soon as the first did.
                    self.last_up = None;
                    self.up_after = self.config.up_after;
                }
                let since = *self.clean_since.get_or_insert(now);
                self.decide(
                    self.current > 0 && now >= since + self.up_after,
                    self.current.wrapping_sub(1),
                )
            }
        }
    }

    fn decide(&mut self, go: bool, to: usize) -> Option<usize> {
        go.then(|| {
            self.pending = Some(to);
            to
        })
    }

    /// Admission refused the step up decided (the node or cluster has no room for the higher
    /// rate): the session stays on its rung, and waits twice as long before the next try, as
    /// after a step up that did not fit the path.
    pub fn handle_refused(&mut self, now: Instant) {
        self.up_after = (self.up_after * 2).min(self.config.max_up_after);
        self.last_up = None;
        let current = self.current;
        self.handle_switched(now, current);
    }

    /// The session plays rung `rung` from `now` on: the switch decided was carried out, or
    /// (`rung` the current one) could not be.
    pub fn handle_switched(&mut self, now: Instant, rung: usize) {
        if rung < self.current {
            self.last_up = Some(now);
        }
        if rung != self.current {
            self.switched_at = Some(now);
            self.min_jitter.clear();
            for spans in self.nacks.values_mut() {
                if let Some(&(_, last)) = spans.marks.back() {
                    spans.restart(now, last);
                }
            }
            self.nack_loss = None;
        }
        self.current = rung;
        self.pending = None;
        self.clean_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    fn report(lost_percent: u32, rtt_ms: u64) -> ReceiverFeedback {
        ReceiverFeedback {
            ssrc: 1,
            fraction_lost: (lost_percent * 256 / 100).min(255) as u8,
            rtt: Some(Duration::from_millis(rtt_ms)),
            highest_seq: None,
            jitter: 0,
        }
    }

    /// A report on SSRC 1 that marks `seq` and says nothing else.
    fn at(seq: u32) -> ReceiverFeedback {
        ReceiverFeedback { ssrc: 1, fraction_lost: 0, rtt: None, highest_seq: Some(seq), jitter: 0 }
    }

    /// The numbers `from..from + n` as a NACK gives them: their low 16 bits.
    fn seqs(from: u32, n: u32) -> Vec<u16> {
        (from..from + n).map(|n| n as u16).collect()
    }

    /// Reports every second from `from` for `secs` seconds; the switches decided (carried out
    /// at once), with their times.
    fn run(
        c: &mut Chooser,
        from: Instant,
        secs: u64,
        fb: impl Fn(u64, usize) -> ReceiverFeedback,
    ) -> Vec<(u64, usize)> {
        let mut switches = Vec::new();
        for s in 0..secs {
            let now = from + S * s as u32;
            if let Some(to) = c.handle_report(now, fb(s, c.current()), 90_000) {
                c.handle_switched(now, to);
                switches.push((s, to));
            }
        }
        switches
    }

    #[test]
    fn loss_steps_down_at_once_and_a_clean_path_steps_up_after_the_wait() {
        let mut c = Chooser::new(AbrConfig::default(), 3, 0);
        let t0 = Instant::ZERO;
        // 5 s clean, then 30 % loss from 5 s to 20 s, then clean.
        let s = run(&mut c, t0, 60, |s, _| report(if (5..20).contains(&s) { 30 } else { 0 }, 20));
        // Down at 5 s, again after the 2 s settle (still lossy), then up 10 s after the path
        // cleared (at 20 s), and again 10 s after the settle that follows.
        assert_eq!(s, vec![(5, 1), (7, 2), (30, 1), (42, 0)]);
    }

    #[test]
    fn a_growing_queue_steps_down_without_loss() {
        let mut c = Chooser::new(AbrConfig::default(), 2, 0);
        let s =
            run(&mut c, Instant::ZERO, 12, |s, _| report(0, if s < 4 { 20 } else { 20 + 150 * s }));
        assert_eq!(s.first(), Some(&(4, 1)), "{s:?}");
    }

    #[test]
    fn a_step_up_that_does_not_fit_doubles_the_wait_and_one_that_holds_resets_it() {
        let mut c = Chooser::new(AbrConfig::default(), 2, 1);
        // The path fits rung 1 only for the first 60 s: rung 0 loses 20 %.
        let s =
            run(&mut c, Instant::ZERO, 60, |_, rung| report(if rung == 0 { 20 } else { 0 }, 20));
        // Up after 10 s, down after the settle, and each next attempt waits twice as long.
        assert_eq!(s, vec![(10, 0), (12, 1), (34, 0), (36, 1)]);
        assert_eq!(c.up_after(), Duration::from_secs(40));
        // Now rung 0 fits: up 40 s after the clean reports began (at 38 s), then it holds and
        // the wait resets.
        let t = Instant::ZERO + S * 60;
        let s = run(&mut c, t, 60, |_, _| report(0, 20));
        assert_eq!(s, vec![(18, 0)]);
        assert_eq!(c.up_after(), Duration::from_secs(10));
    }

    #[test]
    fn nothing_switches_past_either_end_or_while_a_switch_is_pending() {
        let mut c = Chooser::new(AbrConfig::default(), 2, 1);
        let t0 = Instant::ZERO;
        assert_eq!(c.handle_report(t0, report(50, 20), 90_000), None, "already at the lowest");
        let mut c = Chooser::new(AbrConfig::default(), 2, 0);
        assert_eq!(c.handle_report(t0, report(50, 20), 90_000), Some(1));
        assert_eq!(c.handle_report(t0 + S, report(50, 20), 90_000), None, "pending");
        c.handle_switched(t0 + S, 0);
        // Not carried out (still rung 0): judged again at once.
        assert_eq!(c.handle_report(t0 + S * 2, report(50, 20), 90_000), Some(1));
        let mut c = Chooser::new(AbrConfig::default(), 2, 0);
        assert_eq!(run(&mut c, t0, 30, |_, _| report(0, 20)), vec![], "already at the highest");
    }

    /// A player that asks for lost packets again reports the loss retransmission left (here
    /// none); what it asked for over the span its reports cover is the path's: 10 % steps down,
    /// 0.5 % does not. Another stream's requests count against that stream's reports.
    #[test]
    fn the_packets_asked_for_again_are_loss_too() {
        let mut c = Chooser::new(AbrConfig::default(), 2, 0);
        let t0 = Instant::ZERO;
        assert_eq!(c.handle_report(t0, at(70_000), 90_000), None, "no span yet");
        c.handle_nack(1, &seqs(70_100, 5));
        c.handle_nack(1, &seqs(70_100, 5));
        c.handle_nack(2, &seqs(70_100, 500));
        assert_eq!(c.handle_report(t0 + S, at(71_000), 90_000), None, "each asked for twice");
        c.handle_nack(1, &seqs(71_200, 60));
        c.handle_nack(1, &seqs(71_300, 40));
        assert_eq!(c.handle_report(t0 + S * 2, at(72_000), 90_000), None, "0.5 %, judged now");
        assert_eq!(c.nack_loss(), Some(0.005));
        assert_eq!(c.handle_report(t0 + S * 3, at(73_000), 90_000), Some(1), "10 %");
    }

    /// Reports every ten packets (RTP/AVPF): three packets asked for in one span are judged
    /// over the last 256 packets or more, not as 30 % of the span.
    #[test]
    fn a_share_is_judged_over_enough_packets() {
        let mut c = Chooser::new(AbrConfig::default(), 2, 0);
        let t0 = Instant::ZERO;
        let ms = Duration::from_millis;
        let mut most = 0.0_f64;
        for k in 0..100u32 {
            if k == 20 {
                c.handle_nack(1, &[1_195, 1_196, 1_197]);
            }
            assert_eq!(c.handle_report(t0 + ms(100) * k, at(1_000 + 10 * k), 90_000), None);
            most = most.max(c.nack_loss().unwrap_or_default());
        }
        assert!(most > 0.0 && most <= 3.0 / 256.0, "{most}");
    }

    /// A player that asks for a packet only after the report whose span holds it (as GStreamer
    /// does) has it charged to that span: the share shows at the next report. A switch starts
    /// afresh: the loss before it is not judged again.
    #[test]
    fn a_packet_asked_for_after_its_report_is_charged_to_its_span() {
        let mut c = Chooser::new(AbrConfig::default(), 3, 0);
        let t0 = Instant::ZERO;
        // Across the 16-bit wrap: 65_000..=66_000, then 66_000..=67_000.
        assert_eq!(c.handle_report(t0, at(65_000), 90_000), None);
        assert_eq!(c.handle_report(t0 + S, at(66_000), 90_000), None, "nothing asked yet");
        // 6 % of the first span, asked after its report, and 1 % of the next one so far.
        c.handle_nack(1, &seqs(65_400, 60));
        c.handle_nack(1, &seqs(66_100, 10));
        assert_eq!(c.handle_report(t0 + S * 2, at(67_000), 90_000), Some(1));
        assert_eq!(c.nack_loss(), Some(0.06));
        c.handle_switched(t0 + S * 2, 1);
        assert_eq!(c.nack_loss(), None);
        // After the settle, clean spans: the 6 % before the switch is not judged again, nor is
        // a late request for a number before it.
        c.handle_nack(1, &seqs(66_500, 100));
        for k in 3..6 {
            assert_eq!(c.handle_report(t0 + S * (2 * k), at(64_000 + 1_000 * k), 90_000), None);
        }
        assert_eq!(c.nack_loss(), Some(0.0));
    }

    /// In reports without a round trip, jitter growing over the least since the switch keeps
    /// them from being clean (no step up) but never steps down; a path whose jitter is high but
    /// steady steps up as any other. With a round trip, jitter is not judged.
    #[test]
    fn growing_jitter_holds_a_step_up_and_steady_jitter_does_not() {
        let with_jitter =
            |ms: u64| ReceiverFeedback { jitter: (ms * 90) as u32, rtt: None, ..report(0, 20) };
        let growing = |s: u64| if s < 5 { 5 } else { 5 + 10 * (s - 4) };
        let mut c = Chooser::new(AbrConfig::default(), 2, 1);
        let with_rtt =
            |s, _| ReceiverFeedback { jitter: (growing(s) * 90) as u32, ..report(0, 20) };
        assert_eq!(run(&mut c, Instant::ZERO, 30, with_rtt), vec![(10, 0)], "the round trip rules");
        // Rung 1 of 2; jitter 5 ms, then from 5 s on it grows by 10 ms a second.
        let mut c = Chooser::new(AbrConfig::default(), 2, 1);
        let without_rtt = |s, _| with_jitter(growing(s));
        assert_eq!(run(&mut c, Instant::ZERO, 30, without_rtt), vec![], "from 8 s on: not clean");
        // Steady at 60 ms from the first report: the least is 60 ms, up after 10 s.
        let mut c = Chooser::new(AbrConfig::default(), 2, 1);
        assert_eq!(run(&mut c, Instant::ZERO, 30, |_, _| with_jitter(60)), vec![(10, 0)]);
        // Jitter alone never steps down.
        let t = Instant::ZERO + S * 30;
        assert_eq!(c.handle_report(t, with_jitter(200), 90_000), None);
        // A switch takes the least afresh: the rung's own jitter is its baseline.
        c.handle_switched(t, 1);
        let s = run(&mut c, t + S * 3, 12, |_, _| with_jitter(150));
        assert_eq!(s, vec![(10, 0)], "150 ms steady after the switch is clean");
    }

    /// MTFC's buffer reports: a buffer falling under a quarter of its depth steps down at once,
    /// one refilling there does not; under half its depth no receiver report is clean, so no
    /// step up is made into it.
    #[test]
    fn a_draining_buffer_steps_down_and_a_low_one_holds_every_step_up() {
        let depth = S * 2;
        let ms = Duration::from_millis;
        let mut c = Chooser::new(AbrConfig::default(), 3, 1);
        let t0 = Instant::ZERO;
        // Refilling after a stall: low, but rising.
        assert_eq!(c.handle_buffer(t0, ms(300), depth), None);
        assert_eq!(c.handle_buffer(t0 + S, ms(450), depth), None);
        // Clean reports for 30 s while the buffer stays under half its depth: no step up.
        assert_eq!(run(&mut c, t0 + S * 2, 30, |_, _| report(0, 20)), vec![]);
        // Over half at 32 s: clean from then on, up 10 s later.
        assert_eq!(c.handle_buffer(t0 + S * 32, ms(1500), depth), None);
        assert_eq!(run(&mut c, t0 + S * 33, 12, |_, _| report(0, 20)), vec![(9, 0)]);
        // On rung 0 it drains: under half holds, falling under a quarter steps down.
        let t = t0 + S * 60;
        assert_eq!(c.handle_buffer(t, ms(900), depth), None);
        assert_eq!(c.handle_buffer(t + S, ms(400), depth), Some(1));
    }

    /// A step up admission refused keeps the rung and doubles the wait, to the cap.
    #[test]
    fn a_refused_step_up_doubles_the_wait() {
        let mut c = Chooser::new(AbrConfig::default(), 2, 1);
        let now = Instant::from_nanos(0);
        for want in [20, 40, 80, 80] {
            c.handle_refused(now);
            assert_eq!((c.current(), c.up_after()), (1, S * want));
        }
    }

    #[test]
    fn the_queue_is_what_the_socket_holds_over_the_rate_it_drains() {
        let mut q = QueueDelay::default();
        let s = Duration::from_secs(1);
        assert_eq!(q.sample(s, 0, 0), None, "the first sample");
        assert_eq!(q.sample(s, 0, 0), None, "nothing written, nothing held");
        // 200 kB/s written and acknowledged, 20 kB in flight: 100 ms.
        assert_eq!(q.sample(s, 220_000, 20_000), Some(Duration::from_millis(100)));
        // The link narrows: 200 kB written, 125 kB acknowledged, 95 kB held: 760 ms.
        assert_eq!(q.sample(s, 420_000, 95_000), Some(Duration::from_millis(760)));
        // Nothing acknowledged in a second: as long as it gets.
        assert_eq!(q.sample(s, 420_000, 95_000), Some(MAX_QUEUE_DELAY));
        assert_eq!(q.sample(s, 500_000, 0), Some(Duration::ZERO), "drained");
    }
}
