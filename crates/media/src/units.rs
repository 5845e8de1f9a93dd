//! RTP payload units: runs of up to seven TS packets (RFC 2250 §2), and where seeks may start.
//!
//! Why: RFC 2250 §2 carries an integral number of 188-byte TS packets per RTP packet; seven
//! (1316 bytes, 1328 with the RTP header) is the most that fits an Ethernet MTU with IP and UDP
//! headers, and is what every MP2T sender uses. isochron fixes the cut at ingest: each unit is one
//! future RTP packet, numbered by its GSN, stored whole in one block. Concatenating the units
//! gives back the file byte for byte.
//!
//! A unit never spans a PAT packet, so that a seek can start with the PAT (and the PMT that
//! follows it) and a client's demultiplexer can lock on at once (ISO/IEC 13818-1 §2.4.4). It never
//! spans a timing discontinuity either, so the RTP marker bit (RFC 2250 §2) can be set on the
//! unit that starts one.
//!
//! # Random access
//!
//! A random-access point is a TS packet with `payload_unit_start_indicator` and the adaptation
//! field's `random_access_indicator` set (§2.4.3.4; ffmpeg sets it on keyframes) on a video PID:
//! one the PMT in force when the packet arrives lists as video. If no PMT has described the PID
//! yet, the packet waits for the first PMT that does, for at most
//! [`RANDOM_ACCESS_HORIZON_TICKS`] (10 s) of send time, and at most
//! [`MAX_UNRESOLVED_RANDOM_ACCESS`] packets wait at once; one that waits in vain does not count.
//!
//! The seek point for a random-access point is the unit starting at the last PAT (section start)
//! at or before it, as long as that PAT comes after the previous random-access point; otherwise
//! (no PAT since, e.g. a file with a single PAT at its head) a unit is cut at the random-access
//! packet itself, and the sender has to supply PAT and PMT. A PAT that no random-access point
//! follows before the next PAT is a seek point only while the stream shows no video: when no
//! random-access point came before it and none comes within [`RANDOM_ACCESS_HORIZON_TICKS`] after
//! it (by the PCRs in between; so in an audio-only stream every PAT is a seek point). The first
//! unit is always one.
//!
//! # Bounded lookahead
//!
//! `CutBuilder` takes the file's events in packet order and decides every cut and flag as soon
//! as it cannot change any more: a PAT's seek flag at the next random-access point or PAT (before
//! the stream's first keyframe, within 10 s of send time), a random-access point on an
//! undescribed PID when its PMT comes (within 10 s). The batch index is made of exactly these
//! decisions, so [`UnitStream`](crate::stream::UnitStream) can hand out units while a recording is
//! still arriving and be sure they match. (The rules used to look at the whole file: a PID's
//! *final* stream type, "no random-access point anywhere" for PAT seek points, waiting for a late
//! PMT until the end. The bounded rules agree with them on every stream whose PMT comes within
//! 10 s of its first keyframe, whose PIDs keep their stream types, and whose first keyframe comes
//! within 10 s of its start, which is every stream ffmpeg writes.)
//!
//! Storage is one `Cut` per forced unit start (PATs, discontinuities, random-access cuts), not
//! one entry per packet or per unit; the units between cuts are implied (every seven packets).
//!
//! What this module does not do: look inside PES packets (e.g. for H.264 IDR NAL units).

use std::collections::VecDeque;
use std::iter::FusedIterator;
use std::ops::Range;

use isochron_base::{Bytes, MediaTime};

use crate::packet::PCR_HZ;
use crate::psi::StreamKind;
use crate::timing::{Timeline, TimelineBuilder, ticks_to_time};
use crate::{MAX_TS_PER_UNIT, TS_PACKET_SIZE};

/// How long (27 MHz ticks of send time, 10 s: the longest GOP expected) a random-access decision
/// may wait: for the PMT that describes a random-access candidate's PID, and, before the first
/// keyframe, for a keyframe after a PAT.
pub const RANDOM_ACCESS_HORIZON_TICKS: u64 = 10 * PCR_HZ;

/// Random-access candidates that may wait at once for a PMT to describe their PID (beyond this,
/// a file with no PMT would grow without bound; such a file has no video PID anyway).
pub const MAX_UNRESOLVED_RANDOM_ACCESS: usize = 1 << 16;

/// One RTP payload unit: a run of 1..=7 whole TS packets sent in one RTP packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Unit {
    /// The index of its first TS packet in the file.
    pub first_packet: u64,
    /// The number of TS packets, `1..=`[`MAX_TS_PER_UNIT`].
    pub ts_packets: u8,
    /// The send time of its first TS packet.
    pub send_time: MediaTime,
    /// A seek may start here (see the [`units`](crate::units) module docs).
    pub random_access: bool,
    /// A PCR discontinuity starts at this unit's first packet (RFC 2250 §2: set the marker bit).
    pub discontinuity: bool,
}

impl Unit {
    /// The TS packet indices it covers.
    #[must_use]
    pub fn packets(&self) -> Range<u64> {
        self.first_packet..self.first_packet + u64::from(self.ts_packets)
    }

    /// The file offset of its first byte.
    #[must_use]
    pub fn byte_offset(&self) -> Bytes {
        Bytes(self.first_packet * TS_PACKET_SIZE as u64)
    }

    /// Its size: `ts_packets` × 188 bytes.
    #[must_use]
    pub fn byte_len(&self) -> Bytes {
        Bytes(u64::from(self.ts_packets) * TS_PACKET_SIZE as u64)
    }
}

/// A packet where a new unit must start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cut {
    /// The packet the unit starts at.
    pub(crate) packet: u64,
    /// The index (GSN) of that unit.
    pub(crate) first_unit: u64,
    pub(crate) random_access: bool,
    pub(crate) discontinuity: bool,
}

/// What a random-access candidate counts as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Candidate {
    /// A random-access point on a video PID.
    Counted,
    /// Not one (its PID turned out not to be video, or its PMT never came).
    Dropped,
    /// Its PID waits for a PMT.
    Waiting,
}

/// Something that forces or marks a unit start, or moves the random-access horizon.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// A cut with fixed flags: the first packet, PAT continuations, discontinuities.
    Mark { packet: u64, random_access: bool, discontinuity: bool },
    /// A PID-0 packet with `payload_unit_start_indicator`: a PAT section starts there.
    PatStart { packet: u64 },
    /// A random-access candidate.
    RandomAccess { packet: u64, candidate: Candidate },
    /// A PCR whose time is known.
    Pcr { ticks: u64 },
}

impl Event {
    fn packet(&self) -> Option<u64> {
        match *self {
            Self::Mark { packet, .. }
            | Self::PatStart { packet }
            | Self::RandomAccess { packet, .. } => Some(packet),
            Self::Pcr { .. } => None,
        }
    }
}

/// Decides the cuts and their flags incrementally, in packet order, each as soon as it is final
/// (see the module docs, "Bounded lookahead").
///
/// Events are applied in packet order. A random-access candidate whose PID waits for its PMT
/// holds up the events after it in a queue (whether it counts decides where the next ones cut);
/// everything else is applied at once. A cut, once in [`cuts`](Self::cuts), never moves; its
/// flags are final below [`flags_final_below`](Self::flags_final_below).
#[derive(Clone, Debug, Default)]
pub(crate) struct CutBuilder {
    cuts: Vec<Cut>,
    /// Events not applied yet; when not empty, its front is a waiting candidate.
    queue: VecDeque<Event>,
    /// How many events have left the queue: the sequence number of its front.
    dequeued: u64,
    /// The waiting candidates, in packet order: `(sequence number, packet, pid)`.
    waiting: VecDeque<(u64, u64, u16)>,
    /// The cut at the last PAT start, while no random-access point has come since.
    open_pat: Option<usize>,
    /// Before the first random-access point: the PAT cuts not yet known to be seek points.
    awaiting: VecDeque<usize>,
    /// Whether a random-access point has been applied.
    seen_random_access: bool,
}

impl CutBuilder {
    /// A cut at `packet` with the given flags (the caller's packets never go back).
    pub(crate) fn mark(
        &mut self,
        packet: u64,
        random_access: bool,
        discontinuity: bool,
        timeline: &TimelineBuilder,
    ) {
        self.push(Event::Mark { packet, random_access, discontinuity }, timeline);
    }

    /// A PAT section starts at `packet`.
    pub(crate) fn pat_start(&mut self, packet: u64, timeline: &TimelineBuilder) {
        self.push(Event::PatStart { packet }, timeline);
    }

    /// A random-access candidate at `packet` on `pid`, whose stream kind is `kind` now (`None`
    /// if no PMT has described the PID yet).
    pub(crate) fn random_access(
        &mut self,
        packet: u64,
        pid: u16,
        kind: Option<StreamKind>,
        timeline: &TimelineBuilder,
    ) {
        let candidate = match kind {
            Some(StreamKind::Video) => Candidate::Counted,
            Some(_) => return,
            None if self.waiting.len() < MAX_UNRESOLVED_RANDOM_ACCESS => Candidate::Waiting,
            None => return,
        };
        if candidate == Candidate::Waiting {
            let seq = self.dequeued + self.queue.len() as u64;
            self.waiting.push_back((seq, packet, pid));
        }
        self.push(Event::RandomAccess { packet, candidate }, timeline);
    }

    /// A PCR was taken in and its time is `ticks` (if the timeline knows it): waiting
    /// candidates whose horizon it passes stop waiting, and PATs before the first keyframe whose
    /// horizon it passes become seek points.
    pub(crate) fn pcr(&mut self, ticks: Option<u64>, timeline: &TimelineBuilder) {
        let Some(now) = ticks else {
            return;
        };
        let mut expired = false;
        while let Some(&(seq, packet, _)) = self.waiting.front() {
            let Some(at) = timeline.known_ticks(packet) else {
                break;
            };
            if at.saturating_add(RANDOM_ACCESS_HORIZON_TICKS) >= now {
                break;
            }
            self.decide(seq, Candidate::Dropped);
            self.waiting.pop_front();
            expired = true;
        }
        if expired {
            self.drain(timeline);
        }
        // Only PATs before the first keyframe care about the time.
        if !self.seen_random_access && (!self.queue.is_empty() || !self.awaiting.is_empty()) {
            self.push(Event::Pcr { ticks: now }, timeline);
        }
    }

    /// The PSI changed: decides the waiting candidates whose PID `kind` now describes.
    pub(crate) fn resolve(
        &mut self,
        kind: impl Fn(u16) -> Option<StreamKind>,
        timeline: &TimelineBuilder,
    ) {
        if self.waiting.is_empty() {
            return;
        }
        let mut waiting = std::mem::take(&mut self.waiting);
        waiting.retain(|&(seq, _, pid)| match kind(pid) {
            None => true,
            Some(kind) => {
                let counted = kind == StreamKind::Video;
                self.decide(seq, if counted { Candidate::Counted } else { Candidate::Dropped });
                false
            }
        });
        self.waiting = waiting;
        self.drain(timeline);
    }

    /// The cuts so far, in packet order: their positions are final, their flags below
    /// [`flags_final_below`](Self::flags_final_below).
    pub(crate) fn cuts(&self) -> &[Cut] {
        &self.cuts
    }

    /// No cut will be added before this packet; `packets` is how many packets the caller has
    /// fed (later events are at those packets or after).
    pub(crate) fn cuts_final_below(&self, packets: u64) -> u64 {
        self.queue.front().and_then(Event::packet).map_or(packets, |p| p.min(packets))
    }

    /// Every cut before this packet has its final flags (and no cut will be added there).
    pub(crate) fn flags_final_below(&self, packets: u64) -> u64 {
        let undecided_pat = |i: &usize| {
            self.cuts.get(*i).filter(|c| !c.random_access).map_or(u64::MAX, |c| c.packet)
        };
        let open = self.open_pat.as_ref().map_or(u64::MAX, undecided_pat);
        let awaiting = self.awaiting.front().map_or(u64::MAX, undecided_pat);
        self.cuts_final_below(packets).min(open).min(awaiting)
    }

    /// Ends the file after `packet_count` packets: waiting candidates do not count, PATs still
    /// awaiting a keyframe are seek points (there is none). Returns the cuts with their first
    /// units, and the number of units.
    pub(crate) fn finish(
        mut self,
        packet_count: u64,
        timeline: &TimelineBuilder,
    ) -> (Vec<Cut>, u64) {
        for (seq, _, _) in std::mem::take(&mut self.waiting) {
            self.decide(seq, Candidate::Dropped);
        }
        self.drain(timeline);
        if !self.seen_random_access {
            for i in std::mem::take(&mut self.awaiting) {
                if let Some(cut) = self.cuts.get_mut(i) {
                    cut.random_access = true;
                }
            }
        }
        let mut cuts = self.cuts;
        cuts.retain(|c| c.packet < packet_count);
        let mut units = 0;
        for i in 0..cuts.len() {
            let end = cuts.get(i + 1).map_or(packet_count, |c| c.packet);
            let cut = &mut cuts[i];
            cut.first_unit = units;
            units += (end - cut.packet).div_ceil(u64::from(MAX_TS_PER_UNIT));
        }
        cuts.shrink_to_fit();
        (cuts, units)
    }

    /// Sets the waiting candidate with sequence number `seq` to `candidate`.
    fn decide(&mut self, seq: u64, candidate: Candidate) {
        let at = seq.checked_sub(self.dequeued).and_then(|i| usize::try_from(i).ok());
        if let Some(Event::RandomAccess { candidate: c, .. }) =
            at.and_then(|i| self.queue.get_mut(i))
        {
            *c = candidate;
        }
    }

    fn push(&mut self, event: Event, timeline: &TimelineBuilder) {
        self.queue.push_back(event);
        self.drain(timeline);
    }

    /// Applies the queued events up to the first waiting candidate.
    fn drain(&mut self, timeline: &TimelineBuilder) {
        while let Some(&event) = self.queue.front() {
            if matches!(event, Event::RandomAccess { candidate: Candidate::Waiting, .. }) {
                return;
            }
            self.queue.pop_front();
            self.dequeued += 1;
            self.apply(event, timeline);
        }
    }

    fn apply(&mut self, event: Event, timeline: &TimelineBuilder) {
        match event {
            Event::Mark { packet, random_access, discontinuity } => {
                let cut = self.cut_at(packet);
                cut.random_access |= random_access;
                cut.discontinuity |= discontinuity;
            }
            Event::PatStart { packet } => {
                self.cut_at(packet);
                let i = self.cuts.len() - 1;
                // The previous open PAT had no random-access point after it: it stays a seek
                // point candidate only in `awaiting` (before the first keyframe).
                self.open_pat = Some(i);
                if !self.seen_random_access && !self.cuts[i].random_access {
                    self.awaiting.push_back(i);
                }
            }
            Event::RandomAccess { packet, candidate: Candidate::Counted } => {
                if !self.seen_random_access {
                    // The stream has video: PATs before this keyframe were not seek points
                    // (except the open one, just below).
                    self.seen_random_access = true;
                    self.awaiting.clear();
                }
                match self.open_pat.take().and_then(|i| self.cuts.get_mut(i)) {
                    Some(pat) => pat.random_access = true,
                    None => self.cut_at(packet).random_access = true,
                }
            }
            Event::RandomAccess { .. } => {}
            Event::Pcr { ticks } => {
                while let Some(&i) = self.awaiting.front() {
                    let Some(cut) = self.cuts.get_mut(i) else {
                        break;
                    };
                    let horizon_passed = timeline
                        .known_ticks(cut.packet)
                        .is_some_and(|at| at.saturating_add(RANDOM_ACCESS_HORIZON_TICKS) < ticks);
                    if !horizon_passed {
                        break;
                    }
                    cut.random_access = true;
                    self.awaiting.pop_front();
                }
            }
        }
    }

    /// The cut at `packet`, added if the last cut is before it.
    fn cut_at(&mut self, packet: u64) -> &mut Cut {
        if self.cuts.last().is_none_or(|c| c.packet < packet) {
            self.cuts.push(Cut {
                packet,
                first_unit: 0,
                random_access: false,
                discontinuity: false,
            });
        }
        debug_assert_eq!(self.cuts.last().map(|c| c.packet), Some(packet), "cuts go forward");
        let last = self.cuts.len() - 1;
        &mut self.cuts[last]
    }
}

/// What a scan found that forces or marks unit starts, each list sorted by packet index: a way to
/// drive [`CutBuilder`] in tests.
#[cfg(test)]
#[derive(Clone, Debug, Default)]
pub(crate) struct CutSources<'a> {
    /// PID-0 packets with `payload_unit_start_indicator` (a PAT section starts there).
    pub(crate) pat_starts: &'a [u64],
    /// Other PID-0 packets (continuations of a PAT that spans packets).
    pub(crate) pat_others: &'a [u64],
    /// Random-access points on video PIDs.
    pub(crate) random_access: &'a [u64],
    /// Packets where a new PCR segment starts.
    pub(crate) discontinuities: &'a [u64],
}

/// Computes the cut list for a file of `packet_count` packets (`packet_count > 0`) and the total
/// number of units, feeding `src` to a [`CutBuilder`] in packet order (no PCRs).
#[cfg(test)]
pub(crate) fn build_cuts(packet_count: u64, src: &CutSources<'_>) -> (Vec<Cut>, u64) {
    const PAT: u8 = 0;
    const OTHER: u8 = 1;
    const DISC: u8 = 2;
    const RAP: u8 = 3;
    let mut events: Vec<(u64, u8)> = Vec::new();
    events.extend(src.pat_starts.iter().map(|&p| (p, PAT)));
    events.extend(src.pat_others.iter().map(|&p| (p, OTHER)));
    events.extend(src.discontinuities.iter().map(|&p| (p, DISC)));
    events.extend(src.random_access.iter().map(|&p| (p, RAP)));
    events.sort_unstable();
    let timeline = TimelineBuilder::default();
    let mut b = CutBuilder::default();
    b.mark(0, true, false, &timeline);
    for (packet, what) in events {
        match what {
            PAT => b.pat_start(packet, &timeline),
            OTHER => b.mark(packet, false, false, &timeline),
            DISC => b.mark(packet, false, true, &timeline),
            _ => b.random_access(packet, 0x100, Some(StreamKind::Video), &timeline),
        }
    }
    b.finish(packet_count, &timeline)
}

/// The index of the cut whose run holds unit `unit` (`cuts` non-empty, starting at unit 0).
fn cut_of_unit(cuts: &[Cut], unit: u64) -> usize {
    cuts.partition_point(|c| c.first_unit <= unit).saturating_sub(1)
}

/// The payload units of a file in order; see [`TsIndex::units`](crate::TsIndex::units).
///
/// Walks the cut list, so it allocates nothing, and computes send times with a moving search
/// position, so a full pass is linear.
#[derive(Clone, Debug)]
pub struct Units<'a> {
    cuts: &'a [Cut],
    timeline: &'a Timeline,
    packet_count: u64,
    /// The cut whose run holds `packet`.
    cut: usize,
    /// The first packet of the next unit.
    packet: u64,
    /// Units not yet returned.
    remaining: u64,
    hint: usize,
}

impl<'a> Units<'a> {
    /// The units from unit `first` (a GSN) on; empty if `first >= unit_count`.
    pub(crate) fn new(
        cuts: &'a [Cut],
        timeline: &'a Timeline,
        packet_count: u64,
        unit_count: u64,
        first: u64,
    ) -> Self {
        let cut = cut_of_unit(cuts, first);
        let packet = match cuts.get(cut) {
            Some(c) if first < unit_count => {
                c.packet + (first - c.first_unit) * u64::from(MAX_TS_PER_UNIT)
            }
            _ => packet_count,
        };
        Self {
            cuts,
            timeline,
            packet_count,
            cut,
            packet,
            remaining: unit_count.saturating_sub(first),
            hint: 0,
        }
    }
}

impl Iterator for Units<'_> {
    type Item = Unit;

    fn next(&mut self) -> Option<Unit> {
        if self.packet >= self.packet_count {
            return None;
        }
        let cut = self.cuts.get(self.cut)?;
        let end = self.cuts.get(self.cut + 1).map_or(self.packet_count, |c| c.packet);
        // Cuts are strictly increasing and `packet` lies in [cut.packet, end), so n is 1..=7.
        let n = (end - self.packet).min(u64::from(MAX_TS_PER_UNIT));
        let starts_run = self.packet == cut.packet;
        let unit = Unit {
            first_packet: self.packet,
            ts_packets: n as u8,
            send_time: ticks_to_time(self.timeline.ticks_with_hint(self.packet, &mut self.hint)),
            random_access: starts_run && cut.random_access,
            discontinuity: starts_run && cut.discontinuity,
        };
        self.packet += n;
        if self.packet >= end {
            self.cut += 1;
        }
        self.remaining = self.remaining.saturating_sub(1);
        Some(unit)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        match usize::try_from(self.remaining) {
            Ok(n) => (n, Some(n)),
            Err(_) => (usize::MAX, None),
        }
    }
}

impl FusedIterator for Units<'_> {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timing::TimelineBuilder;

    fn timeline() -> Timeline {
        let mut b = TimelineBuilder::default();
        b.push_pcr(0, 0, false);
        b.push_pcr(10, 10_000, false);
        b.finish().expect("two PCRs").0
    }

    fn cuts(n: u64, src: CutSources<'_>) -> Vec<(u64, bool, bool)> {
        build_cuts(n, &src).0.iter().map(|c| (c.packet, c.random_access, c.discontinuity)).collect()
    }

    #[test]
    fn units_between_cuts_are_sevens() {
        let t = timeline();
        let (c, count) = build_cuts(
            30,
            &CutSources { pat_starts: &[10], discontinuities: &[12], ..Default::default() },
        );
        // [0,10): 7+3, [10,12): 2, [12,30): 7+7+4.
        assert_eq!(count, 6);
        let units: Vec<_> = Units::new(&c, &t, 30, count, 0).collect();
        let shape: Vec<_> = units.iter().map(|u| (u.first_packet, u.ts_packets)).collect();
        assert_eq!(shape, vec![(0, 7), (7, 3), (10, 2), (12, 7), (19, 7), (26, 4)]);
        assert!(units[0].random_access);
        assert!(units[2].random_access, "no random-access points at all: PATs are seek points");
        assert!(units[3].discontinuity && !units[3].random_access);
        assert!(!units[4].discontinuity);
        assert_eq!(units[1].send_time, MediaTime::from_nanos(7000 * 1000 / 27));
        assert_eq!(units[5].byte_offset(), Bytes(26 * 188));
        assert_eq!(units[5].byte_len(), Bytes(4 * 188));
        assert_eq!(units[5].packets(), 26..30);
    }

    #[test]
    fn random_access_goes_to_the_preceding_pat() {
        let got = cuts(
            100,
            CutSources {
                pat_starts: &[20, 40, 60],
                random_access: &[22, 45, 50],
                ..Default::default()
            },
        );
        assert_eq!(
            got,
            vec![
                (0, true, false),
                (20, true, false),
                (40, true, false),
                // 50: PAT 40 came before the previous RAP (45), so cut at the RAP.
                (50, true, false),
                // 60: a PAT without a RAP after it is a cut but no seek point.
                (60, false, false),
            ]
        );
    }

    #[test]
    fn random_access_without_pat_cuts_at_itself() {
        let got = cuts(100, CutSources { random_access: &[5, 30], ..Default::default() });
        assert_eq!(got, vec![(0, true, false), (5, true, false), (30, true, false)]);
        let got = cuts(
            100,
            CutSources { pat_starts: &[0], random_access: &[3, 30], ..Default::default() },
        );
        assert_eq!(got, vec![(0, true, false), (30, true, false)]);
    }

    #[test]
    fn pat_continuations_cut_but_never_seek() {
        let got =
            cuts(50, CutSources { pat_starts: &[10], pat_others: &[11], ..Default::default() });
        assert_eq!(got, vec![(0, true, false), (10, true, false), (11, false, false)]);
    }

    #[test]
    fn units_from_and_size_hint() {
        let t = timeline();
        let (c, count) = build_cuts(
            40,
            &CutSources { pat_starts: &[9, 23], discontinuities: &[30], ..Default::default() },
        );
        let all: Vec<_> = Units::new(&c, &t, 40, count, 0).collect();
        assert_eq!(all.len() as u64, count);
        for i in 0..=count + 1 {
            let from: Vec<_> = Units::new(&c, &t, 40, count, i).collect();
            assert_eq!(from, all[(i as usize).min(all.len())..], "from {i}");
            assert_eq!(Units::new(&c, &t, 40, count, i).size_hint().0, from.len());
        }
    }

    #[test]
    fn single_packet_file() {
        let t = timeline();
        let (c, count) = build_cuts(1, &CutSources { pat_starts: &[0], ..Default::default() });
        assert_eq!(count, 1);
        let units: Vec<_> = Units::new(&c, &t, 1, count, 0).collect();
        assert_eq!(units.len(), 1);
        assert!(units[0].random_access);
        assert_eq!(units[0].ts_packets, 1);
    }
}
