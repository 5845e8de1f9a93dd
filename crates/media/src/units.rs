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
//! unit that starts one. A random-access point is a video TS packet with
//! `payload_unit_start_indicator` and the adaptation field's `random_access_indicator` set
//! (§2.4.3.4; ffmpeg sets it on keyframes). The seek point for it is the unit starting at the
//! last PAT (section start) at or before it, as long as that PAT comes after the previous
//! random-access point; otherwise (no PAT since, e.g. a file with a single PAT at its head) a unit
//! is cut at the random-access packet itself, and the sender has to supply PAT and PMT. If the
//! file has no random-access points on video PIDs at all, every unit starting at a PAT is a seek
//! point. The first unit is always one.
//!
//! Storage is one `Cut` per forced unit start (PATs, discontinuities, random-access cuts), not
//! one entry per packet or per unit; the units between cuts are implied (every seven packets).
//!
//! What this module does not do: look inside PES packets (e.g. for H.264 IDR NAL units).

use std::iter::FusedIterator;
use std::ops::Range;

use isochron_base::{Bytes, MediaTime};

use crate::timing::{Timeline, ticks_to_time};
use crate::{MAX_TS_PER_UNIT, TS_PACKET_SIZE};

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

/// What the scan found that forces or marks unit starts, each list sorted by packet index.
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
/// number of units.
pub(crate) fn build_cuts(packet_count: u64, src: &CutSources<'_>) -> (Vec<Cut>, u64) {
    const RA: u8 = 1;
    const DISC: u8 = 2;
    let mut marks: Vec<(u64, u8)> = Vec::with_capacity(
        1 + src.pat_starts.len() + src.pat_others.len() + src.random_access.len(),
    );
    marks.push((0, RA));
    let pats_are_seek_points = src.random_access.is_empty();
    marks.extend(src.pat_starts.iter().map(|&p| (p, if pats_are_seek_points { RA } else { 0 })));
    marks.extend(src.pat_others.iter().map(|&p| (p, 0)));
    marks.extend(src.discontinuities.iter().map(|&p| (p, DISC)));
    let mut previous: Option<u64> = None;
    for &rap in src.random_access {
        let before = src.pat_starts.partition_point(|&p| p <= rap);
        let pat = before
            .checked_sub(1)
            .and_then(|i| src.pat_starts.get(i))
            .copied()
            .filter(|&pat| previous.is_none_or(|prev| pat > prev));
        marks.push((pat.unwrap_or(rap), RA));
        previous = Some(rap);
    }
    marks.retain(|&(p, _)| p < packet_count);
    marks.sort_unstable_by_key(|&(p, _)| p);

    let mut cuts: Vec<Cut> = Vec::with_capacity(marks.len());
    for (packet, flags) in marks {
        match cuts.last_mut() {
            Some(last) if last.packet == packet => {
                last.random_access |= flags & RA != 0;
                last.discontinuity |= flags & DISC != 0;
            }
            _ => cuts.push(Cut {
                packet,
                first_unit: 0,
                random_access: flags & RA != 0,
                discontinuity: flags & DISC != 0,
            }),
        }
    }
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
