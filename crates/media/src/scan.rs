//! Pass 1 of ingest: scan a transport stream once and keep what pacing and seeking need.
//!
//! Why: the server must know, before it stores a single block, each TS packet's send time, where
//! each RTP payload unit starts, and which units a seek may start at. [`TsScanner`] takes the
//! file in chunks of any size (a packet may straddle chunks) and never does IO itself; it checks
//! the sync byte at every 188-byte boundary (ISO/IEC 13818-1 §2.4.3.2), follows PAT and PMT
//! (§2.4.4), collects the PCRs of one PID (§2.4.3.5) and notes PATs and random-access points.
//! [`TsScanner::finish`] turns that into a [`TsIndex`].
//!
//! The PCR PID is the `PCR_PID` of the first PMT, if that PMT comes before the first PCR;
//! otherwise the first PID that carries a PCR. Either way it is fixed once chosen, so two
//! programs' clocks are never mixed.
//!
//! Every decision is made in packet order with bounded lookahead (see the
//! [`timing`](crate::timing) and [`units`](crate::units) module docs), which is what lets
//! [`UnitStream`](crate::stream::UnitStream) hand out final units while a recording arrives; it
//! drives this same scanner. Memory is bounded by the number of PCR pieces and cut points (PATs
//! and random-access points), never by the number of packets; random-access candidates waiting
//! for their PMT are few and short-lived (at most
//! [`MAX_UNRESOLVED_RANDOM_ACCESS`](crate::MAX_UNRESOLVED_RANDOM_ACCESS), for at most
//! [`RANDOM_ACCESS_HORIZON_TICKS`](crate::units::RANDOM_ACCESS_HORIZON_TICKS)).

use isochron_base::{BitRate, Bytes, MediaTime};

use crate::error::TsError;
use crate::packet::{self, NULL_PID, PAT_PID, PCR_HZ, SYNC_BYTE};
use crate::psi::{PsiTracker, StreamInfo};
use crate::timing::{Timeline, TimelineBuilder, ticks_to_time, time_to_ticks_ceil};
use crate::units::{Cut, CutBuilder, Unit, Units};
use crate::{MAX_TS_PER_UNIT, TS_PACKET_SIZE};

const PACKET_BYTES: u64 = TS_PACKET_SIZE as u64;

/// Pass 1 of ingest: fed the file in chunks of any size, it builds a [`TsIndex`].
///
/// ```
/// # use isochron_media::{TsError, TsScanner};
/// let mut scanner = TsScanner::new();
/// assert_eq!(
///     scanner.push(b"#EXTM3U\n"),
///     Err(TsError::NotTransportStream { offset: 0, byte: b'#' })
/// );
/// ```
#[derive(Clone, Debug)]
pub struct TsScanner {
    /// The start of a packet that straddles two chunks.
    partial: [u8; TS_PACKET_SIZE],
    partial_len: usize,
    /// Whole packets seen.
    packets: u64,
    /// The first error; later calls repeat it.
    error: Option<TsError>,
    psi: PsiTracker,
    /// The PSI generation the cut builder last saw.
    psi_generation: u64,
    timeline: TimelineBuilder,
    pcr_pid: Option<u16>,
    cuts: CutBuilder,
}

impl Default for TsScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl TsScanner {
    /// A scanner at the start of a file.
    #[must_use]
    pub fn new() -> Self {
        Self {
            partial: [0; TS_PACKET_SIZE],
            partial_len: 0,
            packets: 0,
            error: None,
            psi: PsiTracker::default(),
            psi_generation: 0,
            timeline: TimelineBuilder::default(),
            pcr_pid: None,
            cuts: CutBuilder::default(),
        }
    }

    /// Feeds the next `data` bytes of the file; chunks may split packets anywhere.
    ///
    /// # Errors
    ///
    /// [`TsError::NotTransportStream`] as soon as a byte at a 188-byte boundary is not the sync
    /// byte. After an error the scanner is spent: every later call returns the same error.
    pub fn push(&mut self, mut data: &[u8]) -> Result<(), TsError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        if self.partial_len > 0 {
            let take = (TS_PACKET_SIZE - self.partial_len).min(data.len());
            let (head, rest) = data.split_at(take);
            self.partial[self.partial_len..self.partial_len + take].copy_from_slice(head);
            self.partial_len += take;
            data = rest;
            if self.partial_len < TS_PACKET_SIZE {
                return Ok(());
            }
            self.partial_len = 0;
            let whole = self.partial;
            self.packet(&whole);
        }
        let mut chunks = data.chunks_exact(TS_PACKET_SIZE);
        for chunk in &mut chunks {
            self.check_sync(chunk[0])?;
            self.packet(chunk);
        }
        let rest = chunks.remainder();
        if let Some(&first) = rest.first() {
            self.check_sync(first)?;
            self.partial[..rest.len()].copy_from_slice(rest);
            self.partial_len = rest.len();
        }
        Ok(())
    }

    /// Ends the scan and builds the index. Bytes of an incomplete last packet are not an error:
    /// they are counted in [`TsIndex::trailing_bytes`] and left out of the units.
    ///
    /// # Errors
    ///
    /// The error an earlier [`push`](Self::push) returned; [`TsError::Empty`] if nothing was
    /// pushed; [`TsError::TooShort`] if not even one whole packet was; [`TsError::NoPcr`] if the
    /// PCR PID did not yield two PCRs to pace by.
    pub fn finish(self) -> Result<TsIndex, TsError> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let trailing_bytes = self.partial_len as u64;
        if self.packets == 0 {
            return Err(if trailing_bytes == 0 {
                TsError::Empty
            } else {
                TsError::TooShort { len: trailing_bytes }
            });
        }
        let pcr_count = self.timeline.pcr_count();
        let (cuts, unit_count) = self.cuts.finish(self.packets, &self.timeline);
        let (timeline, discontinuities) = self.timeline.finish().ok_or(TsError::NoPcr)?;
        let psi = self.psi;
        let peak_bitrate = peak_bitrate(&timeline, self.packets);
        Ok(TsIndex {
            packet_count: self.packets,
            trailing_bytes,
            timeline,
            cuts,
            unit_count,
            streams: psi.streams().to_vec(),
            pcr_pid: self.pcr_pid,
            pcr_count,
            discontinuity_count: discontinuities.len() as u64,
            psi_crc_errors: psi.crc_errors(),
            peak_bitrate,
        })
    }

    fn check_sync(&mut self, byte: u8) -> Result<(), TsError> {
        if byte == SYNC_BYTE {
            return Ok(());
        }
        let e = TsError::NotTransportStream { offset: self.packets * PACKET_BYTES, byte };
        self.error = Some(e.clone());
        Err(e)
    }

    /// Takes in one whole packet whose sync byte was checked.
    fn packet(&mut self, bytes: &[u8]) {
        let index = self.packets;
        self.packets += 1;
        if index == 0 {
            // The first unit is always a seek point.
            self.cuts.mark(0, true, false, &self.timeline);
        }
        let p = packet::parse(bytes);
        if p.pid == PAT_PID {
            // Cut at every PID-0 packet, even a corrupt one: a unit never holds a PAT packet
            // after its first.
            if p.payload_unit_start && !p.transport_error {
                self.cuts.pat_start(index, &self.timeline);
            } else {
                self.cuts.mark(index, false, false, &self.timeline);
            }
        }
        if p.transport_error || p.pid == NULL_PID {
            return;
        }
        if let Some(af) = p.adaptation {
            self.adaptation(index, &p, af);
        }
        self.psi.handle(&p);
        if self.psi.generation() != self.psi_generation {
            self.psi_generation = self.psi.generation();
            let psi = &self.psi;
            self.cuts.resolve(|pid| psi.kind(pid), &self.timeline);
        }
        if self.pcr_pid.is_none() {
            // A PMT seen before any PCR designates the PCR PID.
            self.pcr_pid = self.psi.pcr_pid();
        }
    }

    fn adaptation(&mut self, index: u64, p: &packet::Packet<'_>, af: packet::AdaptationField) {
        if let Some(pcr) = af.pcr {
            let pid = *self.pcr_pid.get_or_insert(p.pid);
            if pid == p.pid {
                if self.timeline.push_pcr(index, pcr, af.discontinuity) {
                    self.cuts.mark(index, false, true, &self.timeline);
                }
                self.cuts.pcr(self.timeline.known_ticks(index), &self.timeline);
            }
        } else if af.discontinuity && self.pcr_pid == Some(p.pid) {
            self.timeline.mark_discontinuity();
        }
        if af.random_access && p.payload_unit_start && p.pid != PAT_PID {
            self.cuts.random_access(index, p.pid, self.psi.kind(p.pid), &self.timeline);
        }
    }

    /// Whole packets taken in so far.
    pub(crate) fn packets(&self) -> u64 {
        self.packets
    }

    /// The error that spent the scanner, if any.
    pub(crate) fn error(&self) -> Option<&TsError> {
        self.error.as_ref()
    }

    /// The final send time (ticks) of `packet`, if it is known already.
    pub(crate) fn known_ticks(&self, packet: u64) -> Option<u64> {
        self.timeline.known_ticks(packet)
    }

    /// The cuts decided so far.
    pub(crate) fn cut_builder(&self) -> &CutBuilder {
        &self.cuts
    }
}

/// The most bits sent in any one-second window `[k, k+1)` s of send time.
fn peak_bitrate(timeline: &Timeline, packets: u64) -> BitRate {
    let mut peak = 0;
    let mut p = 0;
    while p < packets {
        let second = timeline.ticks(p) / PCR_HZ;
        let end = timeline.first_packet_at(second.saturating_add(1).saturating_mul(PCR_HZ));
        // `end > p` unless the window bound saturated; step at least one packet regardless.
        let end = end.min(packets).max(p + 1);
        peak = peak.max(end - p);
        p = end;
    }
    BitRate(peak.saturating_mul(PACKET_BYTES * 8))
}

/// Everything ingest needs to know about a transport stream, from one pass over it.
///
/// Holds PCR anchors and cut points, not per-packet entries: about 3 MB for a two-hour 2.6 Mb/s
/// ffmpeg file (see the [`timing`](crate::timing) and [`units`](crate::units) module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TsIndex {
    packet_count: u64,
    trailing_bytes: u64,
    timeline: Timeline,
    cuts: Vec<Cut>,
    unit_count: u64,
    streams: Vec<StreamInfo>,
    pcr_pid: Option<u16>,
    pcr_count: u64,
    discontinuity_count: u64,
    psi_crc_errors: u64,
    peak_bitrate: BitRate,
}

impl TsIndex {
    /// The number of whole 188-byte packets.
    #[must_use]
    pub fn packet_count(&self) -> u64 {
        self.packet_count
    }

    /// The bytes of an incomplete last packet (0 for a well-formed file). They belong to no unit.
    #[must_use]
    pub fn trailing_bytes(&self) -> u64 {
        self.trailing_bytes
    }

    /// The size of the whole packets: what the units cover.
    #[must_use]
    pub fn bytes(&self) -> Bytes {
        Bytes(self.packet_count * PACKET_BYTES)
    }

    /// When TS packet `packet` is due on the wire, relative to the first PCR (see the
    /// [`timing`](crate::timing) module docs for the rules). Non-decreasing in `packet`;
    /// O(log anchors). Indices past the end are extrapolated.
    #[must_use]
    pub fn send_time(&self, packet: u64) -> MediaTime {
        ticks_to_time(self.timeline.ticks(packet))
    }

    /// The first packet whose send time is at least `t`, or [`packet_count`](Self::packet_count)
    /// if there is none.
    #[must_use]
    pub fn packet_at(&self, t: MediaTime) -> u64 {
        self.timeline.first_packet_at(time_to_ticks_ceil(t)).min(self.packet_count)
    }

    /// The send time of the last packet.
    #[must_use]
    pub fn duration(&self) -> MediaTime {
        self.send_time(self.packet_count.saturating_sub(1))
    }

    /// The whole packets' bits over [`duration`](Self::duration); 0 if the duration is 0.
    #[must_use]
    pub fn avg_bitrate(&self) -> BitRate {
        let nanos = self.duration().as_nanos();
        if nanos == 0 {
            return BitRate(0);
        }
        let bits = u128::from(self.bytes().0) * 8 * 1_000_000_000;
        BitRate(
            u64::try_from((bits + u128::from(nanos) / 2) / u128::from(nanos)).unwrap_or(u64::MAX),
        )
    }

    /// The most bits whose send times fall in one window `[k, k+1)` seconds: what a sender must
    /// sustain over a second.
    #[must_use]
    pub fn peak_bitrate(&self) -> BitRate {
        self.peak_bitrate
    }

    /// The elementary streams announced by the PMT(s), in order of first appearance.
    #[must_use]
    pub fn streams(&self) -> &[StreamInfo] {
        &self.streams
    }

    /// The PID whose PCRs give the send times.
    #[must_use]
    pub fn pcr_pid(&self) -> Option<u16> {
        self.pcr_pid
    }

    /// How many PCRs were read on the PCR PID.
    #[must_use]
    pub fn pcr_count(&self) -> u64 {
        self.pcr_count
    }

    /// How many PCR discontinuities started a new timeline segment.
    #[must_use]
    pub fn discontinuity_count(&self) -> u64 {
        self.discontinuity_count
    }

    /// How many PAT/PMT sections failed their CRC and were skipped.
    #[must_use]
    pub fn psi_crc_errors(&self) -> u64 {
        self.psi_crc_errors
    }

    /// The payload units in order: deterministic from the index, and allocation-free.
    #[must_use]
    pub fn units(&self) -> Units<'_> {
        self.units_from(0)
    }

    /// The payload units from index (GSN) `first` on.
    #[must_use]
    pub fn units_from(&self, first: u64) -> Units<'_> {
        Units::new(&self.cuts, &self.timeline, self.packet_count, self.unit_count, first)
    }

    /// Unit `index`, if there is one.
    #[must_use]
    pub fn unit(&self, index: u64) -> Option<Unit> {
        self.units_from(index).next()
    }

    /// The number of payload units.
    #[must_use]
    pub fn unit_count(&self) -> u64 {
        self.unit_count
    }

    /// The random-access units with their indices, in order. The first unit is always one.
    pub fn random_access_units(&self) -> impl Iterator<Item = (u64, Unit)> + '_ {
        (0..self.cuts.len())
            .filter(|&i| self.cuts[i].random_access)
            .map(|i| (self.cuts[i].first_unit, self.cut_unit(i)))
    }

    /// Where playback from `t` starts (RTSP `Range: npt=t-`, RFC 2326 §12.29): the last
    /// random-access unit whose send time is at most `t`, with its index. Of several seek points
    /// sent at the same instant the earliest is taken, so `npt=0-` starts at the first byte even
    /// when the file opens with an SDT before its PAT. It always exists: the first unit is a
    /// random-access unit at time 0.
    #[must_use]
    pub fn seek(&self, t: MediaTime) -> (u64, Unit) {
        // Send times never decrease, so the cuts at or before t are a prefix; cut 0 is in it.
        let upto = self.cuts.partition_point(|c| self.send_time(c.packet) <= t);
        let last = self.cuts[..upto].iter().rposition(|c| c.random_access).unwrap_or(0);
        let at = self.cuts.get(last).map_or(MediaTime::ZERO, |c| self.send_time(c.packet));
        let same_time = self.cuts.partition_point(|c| self.send_time(c.packet) < at);
        let i = (same_time..last)
            .find(|&i| self.cuts.get(i).is_some_and(|c| c.random_access))
            .unwrap_or(last);
        (self.cuts.get(i).map_or(0, |c| c.first_unit), self.cut_unit(i))
    }

    /// The index of the unit holding TS packet `packet`, if it is in the file.
    #[must_use]
    pub fn unit_of_packet(&self, packet: u64) -> Option<u64> {
        if packet >= self.packet_count {
            return None;
        }
        let i = self.cuts.partition_point(|c| c.packet <= packet).checked_sub(1)?;
        let cut = self.cuts.get(i)?;
        Some(cut.first_unit + (packet - cut.packet) / u64::from(MAX_TS_PER_UNIT))
    }

    /// How many PCR anchors the index stores (for memory accounting).
    #[must_use]
    pub fn anchor_count(&self) -> usize {
        self.timeline.anchor_count()
    }

    /// How many cut points the index stores (for memory accounting).
    #[must_use]
    pub fn cut_count(&self) -> usize {
        self.cuts.len()
    }

    /// The unit that starts at cut `i` (the first unit if there is no such cut).
    fn cut_unit(&self, i: usize) -> Unit {
        let (packet, random_access, discontinuity) = self
            .cuts
            .get(i)
            .map_or((0, true, false), |c| (c.packet, c.random_access, c.discontinuity));
        let end = self.cuts.get(i + 1).map_or(self.packet_count, |c| c.packet);
        Unit {
            first_packet: packet,
            // Cuts lie inside the file and strictly increase, so this is 1..=7.
            ts_packets: end.saturating_sub(packet).min(u64::from(MAX_TS_PER_UNIT)) as u8,
            send_time: self.send_time(packet),
            random_access,
            discontinuity,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::packet::PCR_WRAP;
    use crate::psi::StreamKind;
    use crate::testutil::{
        AUDIO_PID, Es, PMT_PID, TsBuilder, VIDEO_PID, check_units, constant_rate, jittery_stream,
        scan, small_file,
    };

    /// 1000 ticks per packet: 27,000 packets per second.
    const TPP: u64 = 1000;

    #[test]
    fn every_split_point_gives_the_same_index() {
        let data = small_file();
        let whole = scan(&data).expect("valid");
        assert_eq!(whole.discontinuity_count(), 1);
        for split in 0..=data.len() {
            let mut s = TsScanner::new();
            s.push(&data[..split]).expect("valid head");
            s.push(&data[split..]).expect("valid tail");
            assert_eq!(s.finish().as_ref(), Ok(&whole), "split at {split}");
        }
        // Byte by byte, and with a truncated last packet at every length.
        let mut s = TsScanner::new();
        for b in &data {
            s.push(std::slice::from_ref(b)).expect("valid");
        }
        assert_eq!(s.finish().as_ref(), Ok(&whole));
        for cut in data.len() - 187..data.len() {
            let idx = scan(&data[..cut]).expect("whole packets suffice");
            assert_eq!(idx.trailing_bytes(), (cut % 188) as u64);
            assert_eq!(idx.packet_count(), whole.packet_count() - 1);
            check_units(&idx, &data);
        }
    }

    #[test]
    fn small_file_index() {
        let data = small_file();
        let idx = scan(&data).expect("valid");
        assert_eq!(idx.packet_count(), 28);
        assert_eq!(idx.trailing_bytes(), 0);
        assert_eq!(idx.pcr_pid(), Some(VIDEO_PID));
        assert_eq!(idx.pcr_count(), 4);
        let kinds: Vec<_> = idx.streams().iter().map(|s| (s.pid, s.kind, s.codec)).collect();
        assert_eq!(
            kinds,
            vec![(VIDEO_PID, StreamKind::Video, "h264"), (AUDIO_PID, StreamKind::Audio, "aac")]
        );
        // PAT 0, PMT 1, key+PCR 2, …, PCR 19, PAT 20, PMT 21, key 22, audio 23, disc PCR 24.
        let t = |p: u64| idx.send_time(p).as_nanos();
        assert_eq!(t(0), 0);
        assert_eq!(t(2), 0);
        assert_eq!(t(19), 17 * TPP * 1000 / 27);
        assert_eq!(t(24), 22 * TPP * 1000 / 27, "continuous across the discontinuity");
        assert_eq!(t(27), 25 * TPP * 1000 / 27);
        let units: Vec<_> = idx
            .units()
            .map(|u| (u.first_packet, u.ts_packets, u.random_access, u.discontinuity))
            .collect();
        assert_eq!(
            units,
            vec![
                (0, 7, true, false),
                (7, 7, false, false),
                (14, 6, false, false),
                (20, 4, true, false),
                (24, 4, false, true),
            ]
        );
        check_units(&idx, &data);
    }

    #[test]
    fn constant_rate_interpolation_is_exact() {
        let data = constant_rate(3000, 50, 1_000_000, TPP);
        let idx = scan(&data).expect("valid");
        for p in 0..3000u64 {
            let ticks = p.saturating_sub(2) * TPP;
            assert_eq!(idx.send_time(p), ticks_to_time(ticks), "packet {p}");
        }
        assert_eq!(idx.duration(), ticks_to_time(2997 * TPP));
        assert_eq!(idx.discontinuity_count(), 0);
        assert!(idx.anchor_count() <= 3, "{} anchors", idx.anchor_count());
        check_units(&idx, &data);
        // One seek point per GOP, at its PAT.
        let seeks: Vec<_> = idx.random_access_units().map(|(_, u)| u.first_packet).collect();
        assert_eq!(seeks, (0..3000).step_by(50).collect::<Vec<_>>());
    }

    #[test]
    fn wrap_around_gives_continuous_times() {
        // Start 0.5 s before the 2^33 wrap; the stream lasts about 1.1 s.
        let first = PCR_WRAP - PCR_HZ / 2;
        let data = constant_rate(30_000, 500, first, TPP);
        let idx = scan(&data).expect("valid");
        assert_eq!(idx.discontinuity_count(), 0);
        for p in (0..30_000u64).step_by(7) {
            assert_eq!(idx.send_time(p), ticks_to_time(p.saturating_sub(2) * TPP), "packet {p}");
        }
        assert!(idx.duration() > MediaTime::from_secs_f64(1.1));
    }

    #[test]
    fn discontinuity_keeps_times_monotonic_and_continuous() {
        let mut b = TsBuilder::new();
        b.psi();
        for i in 0..100 {
            b.pcr(VIDEO_PID, 50_000_000 + i * 10 * TPP);
            for _ in 0..9 {
                b.data(VIDEO_PID);
            }
        }
        // The clock jumps back by 1.5 s without an indicator, later forward by an hour with one.
        let mut i = 0;
        for (base, flag) in [(48_000_000, false), (48_000_000 + 3600 * PCR_HZ, true)] {
            for k in 0..100 {
                b.es(
                    VIDEO_PID,
                    Es {
                        pcr: Some(base + k * 10 * TPP),
                        discontinuity: flag && k == 0,
                        ..Es::default()
                    },
                );
                for _ in 0..9 {
                    b.data(AUDIO_PID);
                }
                i += 1;
            }
        }
        assert_eq!(i, 200);
        let data = b.into_bytes();
        let idx = scan(&data).expect("valid");
        assert_eq!(idx.discontinuity_count(), 2);
        // 2 PSI packets, then 3 × 100 × 10 packets at TPP each: perfectly continuous.
        for p in 2..idx.packet_count() {
            assert_eq!(idx.send_time(p), ticks_to_time((p - 2) * TPP), "packet {p}");
        }
        let disc: Vec<_> =
            idx.units().filter(|u| u.discontinuity).map(|u| u.first_packet).collect();
        assert_eq!(disc, vec![1002, 2002]);
        check_units(&idx, &data);
    }

    #[test]
    fn packets_before_first_pcr_clamp_to_zero() {
        let mut b = TsBuilder::new();
        b.psi();
        for _ in 0..40 {
            b.data(VIDEO_PID);
        }
        for k in 0..5 {
            b.pcr(VIDEO_PID, 7_777 + k * 10 * TPP);
            for _ in 0..9 {
                b.data(VIDEO_PID);
            }
        }
        let idx = scan(b.bytes()).expect("valid");
        // PAT, PMT, 40 packets, then the first PCR at packet 42.
        for p in 0..=42 {
            assert_eq!(idx.send_time(p), MediaTime::ZERO, "packet {p}");
        }
        assert_eq!(idx.send_time(43), ticks_to_time(TPP));
        // After the last PCR (packet 82): extrapolated at the same rate.
        assert_eq!(idx.send_time(92), ticks_to_time(50 * TPP));
    }

    #[test]
    fn bitrates() {
        // 27,000 packets per second for 2.5 s.
        let data = constant_rate(67_502, 1000, 0, TPP);
        let idx = scan(&data).expect("valid");
        assert_eq!(idx.duration(), ticks_to_time(67_499 * TPP));
        // [0, 1 s) holds packets 0..27_002: 27,000 intervals plus the two PSI packets at time 0.
        assert_eq!(idx.peak_bitrate(), BitRate(27_002 * 188 * 8));
        let avg = idx.avg_bitrate().0 as f64;
        let want = 67_502.0 * 188.0 * 8.0 / idx.duration().as_secs_f64();
        assert!((avg - want).abs() / want < 1e-6, "{avg} vs {want}");
        assert_eq!(idx.bytes(), Bytes(67_502 * 188));
    }

    /// The peak by brute force: bucket every packet by its send time's whole second.
    fn brute_peak(idx: &TsIndex) -> BitRate {
        let mut buckets = std::collections::BTreeMap::<u64, u64>::new();
        for p in 0..idx.packet_count() {
            *buckets.entry(idx.send_time(p).as_nanos() / 1_000_000_000).or_default() += 1;
        }
        BitRate(buckets.values().max().copied().unwrap_or(0) * 188 * 8)
    }

    #[test]
    fn peak_bitrate_matches_brute_force_on_vbr() {
        let mut g = isochron_base::mix::SplitMix64::new(3);
        let mut b = TsBuilder::new();
        b.psi();
        let mut pcr = 0;
        for _ in 0..400 {
            b.pcr(VIDEO_PID, pcr);
            for _ in 0..g.next_u64() % 40 {
                b.data(VIDEO_PID);
            }
            pcr += g.next_u64() % (PCR_HZ / 10);
        }
        let idx = scan(b.bytes()).expect("valid");
        assert!(idx.duration() > MediaTime::from_secs_f64(5.0));
        assert_eq!(idx.peak_bitrate(), brute_peak(&idx));
        for t in (0..idx.duration().as_nanos()).step_by(12_345_679) {
            let t = MediaTime::from_nanos(t);
            let p = idx.packet_at(t);
            assert!(p == idx.packet_count() || idx.send_time(p) >= t);
            assert!(p == 0 || idx.send_time(p - 1) < t);
        }
    }

    #[test]
    fn errors() {
        assert_eq!(scan(&[]), Err(TsError::Empty));
        assert_eq!(scan(&[0x47; 100]), Err(TsError::TooShort { len: 100 }));
        assert_eq!(
            scan(b"#EXTM3U\n#EXT-X-VERSION:3\n"),
            Err(TsError::NotTransportStream { offset: 0, byte: b'#' })
        );
        let mut g = isochron_base::mix::SplitMix64::new(1);
        let random: Vec<u8> = (0..100_000).map(|_| g.next_u64() as u8).collect();
        assert!(matches!(scan(&random), Err(TsError::NotTransportStream { offset: 0, .. })));
        // One bad sync byte in the middle: its offset is reported, even when split.
        let mut data = constant_rate(100, 50, 0, TPP);
        data[37 * 188] = 0x46;
        let want = Err(TsError::NotTransportStream { offset: 37 * 188, byte: 0x46 });
        assert_eq!(scan(&data), want);
        let mut s = TsScanner::new();
        s.push(&data[..37 * 188 - 1]).expect("fine so far");
        assert_eq!(s.push(&data[37 * 188 - 1..]), want.clone().map(|_| ()));
        // Spent: the same error again.
        assert_eq!(s.push(&[0x47]), want.clone().map(|_| ()));
        assert_eq!(s.finish(), want);
        // A trailing partial packet must still start with the sync byte.
        let mut data = constant_rate(100, 50, 0, TPP);
        data.extend_from_slice(b"garbage");
        assert_eq!(scan(&data), Err(TsError::NotTransportStream { offset: 100 * 188, byte: b'g' }));
    }

    #[test]
    fn no_pcr() {
        let mut b = TsBuilder::new();
        b.psi();
        for _ in 0..100 {
            b.data(VIDEO_PID);
        }
        assert_eq!(scan(b.bytes()), Err(TsError::NoPcr));
        b.pcr(VIDEO_PID, 1234);
        assert_eq!(scan(b.bytes()), Err(TsError::NoPcr), "one PCR is not enough");
        b.pcr(VIDEO_PID, 5678);
        assert!(scan(b.bytes()).is_ok());
    }

    #[test]
    fn pcr_pid_from_pmt_ignores_other_pids() {
        let mut b = TsBuilder::new();
        b.psi();
        for k in 0..10 {
            // The audio PID carries a PCR too, on a different clock: it must be ignored.
            b.pcr(AUDIO_PID, 999_000_000 - k * 77_777);
            b.pcr(VIDEO_PID, k * 10 * TPP);
            for _ in 0..8 {
                b.data(VIDEO_PID);
            }
        }
        let idx = scan(b.bytes()).expect("valid");
        assert_eq!(idx.pcr_pid(), Some(VIDEO_PID));
        assert_eq!(idx.pcr_count(), 10);
        assert_eq!(idx.discontinuity_count(), 0);
        // Video PCR k is packet 3 + 10k.
        assert_eq!(idx.send_time(14), ticks_to_time(11 * TPP));
    }

    #[test]
    fn pcr_pid_without_pmt_is_the_first_carrier() {
        let mut b = TsBuilder::new();
        for k in 0..5 {
            b.pcr(0x200, k * 10 * TPP);
            b.pcr(0x300, 5_000_000_000 - k);
            for _ in 0..8 {
                b.data(0x200);
            }
        }
        // A PMT naming another PCR PID arrives too late to change the choice.
        b.psi();
        for k in 5..10 {
            b.pcr(0x200, k * 10 * TPP);
            b.pcr(VIDEO_PID, 1);
            for _ in 0..8 {
                b.data(0x200);
            }
        }
        let idx = scan(b.bytes()).expect("valid");
        assert_eq!(idx.pcr_pid(), Some(0x200));
        assert_eq!(idx.pcr_count(), 10);
    }

    #[test]
    fn random_access_rules() {
        let mut b = TsBuilder::new();
        // A keyframe before any PSI: its PID is only known to be video once the PMT comes.
        b.es(VIDEO_PID, Es { pusi: true, random_access: true, pcr: Some(0), ..Es::default() });
        for _ in 0..10 {
            b.data(VIDEO_PID);
        }
        b.psi(); // 11, 12
        b.data(AUDIO_PID);
        b.es(
            VIDEO_PID,
            Es { pusi: true, random_access: true, pcr: Some(14 * TPP), ..Es::default() },
        );
        // Audio with RAI (ffmpeg sets it on every audio PES) is not a seek point.
        for _ in 0..3 {
            b.es(AUDIO_PID, Es { pusi: true, random_access: true, ..Es::default() });
            b.data(VIDEO_PID);
        }
        // A keyframe with no PAT since the previous one: cut at the keyframe itself (26).
        for _ in 0..5 {
            b.data(VIDEO_PID);
        }
        b.es(VIDEO_PID, Es { pusi: true, random_access: true, ..Es::default() });
        // RAI without PUSI does not count.
        b.es(VIDEO_PID, Es { random_access: true, ..Es::default() });
        for _ in 0..10 {
            b.data(VIDEO_PID);
        }
        b.psi(); // 38, 39: a PAT not followed by a keyframe
        b.pcr(VIDEO_PID, 40 * TPP);
        let data = b.into_bytes();
        let idx = scan(&data).expect("valid");
        let seeks: Vec<_> = idx.random_access_units().map(|(_, u)| u.first_packet).collect();
        assert_eq!(seeks, vec![0, 11, 26]);
        let starts: Vec<_> = idx.units().map(|u| u.first_packet).collect();
        assert_eq!(starts, vec![0, 7, 11, 18, 25, 26, 33, 38]);
        check_units(&idx, &data);
        // Seeking lands on the last seek point at or before the time.
        assert_eq!(idx.seek(MediaTime::ZERO).1.first_packet, 0);
        assert_eq!(idx.seek(idx.send_time(11)).1.first_packet, 11);
        assert_eq!(idx.seek(idx.send_time(20)).1.first_packet, 11);
        assert_eq!(idx.seek(MediaTime::from_secs_f64(100.0)), (5, idx.unit(5).expect("unit 5")));
        assert_eq!(idx.unit_of_packet(22), Some(3));
        assert_eq!(idx.unit_of_packet(40), Some(7));
        assert_eq!(idx.unit_of_packet(41), None);
    }

    #[test]
    fn seek_prefers_the_earliest_of_simultaneous_seek_points() {
        // ffmpeg's layout: SDT, PAT, PMT, keyframe with the first PCR.
        let mut b = TsBuilder::new();
        b.data(0x11);
        b.psi();
        b.es(VIDEO_PID, Es { pusi: true, random_access: true, pcr: Some(0), ..Es::default() });
        for k in 1..20 {
            b.pcr(VIDEO_PID, k * TPP);
        }
        let idx = scan(b.bytes()).expect("valid");
        let seeks: Vec<_> =
            idx.random_access_units().map(|(gsn, u)| (gsn, u.first_packet)).collect();
        assert_eq!(seeks, vec![(0, 0), (1, 1)]);
        assert_eq!(idx.seek(MediaTime::ZERO).0, 0);
        assert_eq!(idx.seek(MediaTime::from_secs_f64(1.0)).0, 0);
    }

    #[test]
    fn without_video_every_pat_is_a_seek_point() {
        let mut b = TsBuilder::new();
        b.pat().pmt(AUDIO_PID, &[(0x0F, AUDIO_PID)]);
        for k in 0..30 {
            if k % 10 == 5 {
                b.pat().pmt(AUDIO_PID, &[(0x0F, AUDIO_PID)]);
            }
            b.es(
                AUDIO_PID,
                Es { pusi: true, random_access: true, pcr: Some(k * TPP), ..Es::default() },
            );
        }
        let data = b.into_bytes();
        let idx = scan(&data).expect("valid");
        let seeks: Vec<_> = idx.random_access_units().map(|(_, u)| u.first_packet).collect();
        assert_eq!(seeks, vec![0, 7, 19, 31]);
        assert_eq!(idx.streams().len(), 1);
        check_units(&idx, &data);
    }

    #[test]
    fn pmt_pid_is_not_mistaken_for_a_stream() {
        let mut b = TsBuilder::new();
        b.psi();
        b.pcr(VIDEO_PID, 0).pcr(VIDEO_PID, 10);
        let idx = scan(b.bytes()).expect("valid");
        assert!(idx.streams().iter().all(|s| s.pid != PMT_PID));
        assert_eq!(idx.psi_crc_errors(), 0);
    }

    #[test]
    fn jittery_streams_keep_invariants() {
        for seed in 0..20 {
            let data = jittery_stream(seed, 300);
            let idx = scan(&data).expect("valid");
            let mut prev = MediaTime::ZERO;
            for p in 0..idx.packet_count() + 10 {
                let t = idx.send_time(p);
                assert!(t >= prev, "seed {seed}: packet {p} goes back");
                prev = t;
            }
            assert_eq!(idx.peak_bitrate(), brute_peak(&idx), "seed {seed}");
            check_units(&idx, &data);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn arbitrary_bytes_never_panic(
            data in proptest::collection::vec(any::<u8>(), 0..2000),
            split in 0usize..2000,
        ) {
            let split = split.min(data.len());
            let mut s = TsScanner::new();
            let r = s.push(&data[..split]).and_then(|()| s.push(&data[split..]));
            if r.is_ok() && let Ok(idx) = s.finish() {
                check_units(&idx, &data);
            }
        }

        #[test]
        fn synced_garbage_never_panics(
            mut data in proptest::collection::vec(any::<u8>(), 0..188 * 30),
            split in 0usize..188 * 30,
        ) {
            for chunk in data.chunks_mut(188) {
                chunk[0] = 0x47;
            }
            let split = split.min(data.len());
            let mut s = TsScanner::new();
            s.push(&data[..split]).expect("synced");
            s.push(&data[split..]).expect("synced");
            if let Ok(idx) = s.finish() {
                check_units(&idx, &data);
                prop_assert_eq!(idx.peak_bitrate(), brute_peak(&idx));
            }
        }

        #[test]
        fn corrupted_streams_keep_invariants(
            seed in any::<u64>(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..40),
            split in any::<usize>(),
        ) {
            let mut data = jittery_stream(seed, 60);
            for (at, byte) in flips {
                let at = at % data.len();
                if !at.is_multiple_of(188) {
                    data[at] = byte;
                }
            }
            let split = split % (data.len() + 1);
            let mut s = TsScanner::new();
            s.push(&data[..split]).expect("synced");
            s.push(&data[split..]).expect("synced");
            if let Ok(idx) = s.finish() {
                check_units(&idx, &data);
                prop_assert_eq!(idx.peak_bitrate(), brute_peak(&idx));
            }
        }

        #[test]
        fn send_time_is_monotonic_under_jitter(seed in any::<u64>(), pcrs in 2usize..200) {
            let data = jittery_stream(seed, pcrs);
            // A discontinuity on the second of only two PCRs leaves no rate: NoPcr is right.
            let idx = match scan(&data) {
                Ok(idx) => idx,
                Err(e) => {
                    prop_assert_eq!(e, TsError::NoPcr);
                    return Ok(());
                }
            };
            let mut prev = MediaTime::ZERO;
            for p in 0..idx.packet_count() {
                let t = idx.send_time(p);
                prop_assert!(t >= prev);
                prev = t;
            }
            check_units(&idx, &data);
        }
    }
}
