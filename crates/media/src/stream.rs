//! Recording: cut a live MPEG-TS stream into final payload units as its bytes arrive.
//!
//! Why: a live recording (an HTTP PUT at the stream's own rate) is written block by block while it
//! arrives, on a guaranteed-rate write stream (XTREAM), so its payload units cannot wait for the
//! end of the file to be cut and timed. [`UnitStream`] drives the same [`TsScanner`] the batch
//! ingest uses and hands out each unit, with its bytes, as soon as nothing later in the stream can
//! change it. **The units [`UnitStream::poll_unit`] yields, followed by those
//! [`UnitStream::finish`] returns, are exactly [`TsIndex::units`] of a [`TsScanner`] over the same
//! bytes, for every chunking**, and `finish` returns that same index. This holds by construction:
//! the scanner makes every decision in packet order with bounded lookahead, and the batch index
//! is made of those decisions (see the [`timing`](crate::timing) and [`units`](crate::units)
//! module docs for the rules that needed restating).
//!
//! # When a unit is final
//!
//! - **Send time** (its first packet's): once a PCR at or after that packet has arrived, and the
//!   timeline has a rate (two PCRs of one segment; before that, a discontinuity could still
//!   restart the clock, and a stream that never gets one fails with [`TsError::NoPcr`]). After
//!   the last PCR the batch index extrapolates; here that waits for the next PCR or the end.
//! - **Length**: once the next cut after its first packet exists, or seven packets have arrived
//!   and no cut can come among them. A cut at a random-access point can come late only while a
//!   candidate waits for the PMT that says whether its PID is video.
//! - **Flags**: a PAT's seek flag is final at the next keyframe or PAT (before the stream's first
//!   keyframe, when a keyframe comes or 10 s of send time pass); a discontinuity's at once.
//!
//! Units leave in order, so one unit that waits holds back the ones after it.
//!
//! # Latency bound
//!
//! For a stream with a rate, whose PMT precedes its keyframes, a unit is released once
//! - a PCR at or after its first packet has arrived: at most one PCR interval (ffmpeg: 20 ms to
//!   100 ms), and
//! - the PAT before it has its seek flag: at most one PAT interval (ffmpeg: 100 ms), or one GOP
//!   if the stream repeats no PATs, or [`RANDOM_ACCESS_HORIZON_TICKS`](crate::RANDOM_ACCESS_HORIZON_TICKS) (10 s) before the first
//!   keyframe and in a stream without video, and
//! - seven packets after its start have arrived.
//!
//! So [`buffered_bytes`](UnitStream::buffered_bytes) stays below about the larger of one PCR and
//! one PAT interval of the stream's bytes, plus seven packets. A candidate on a PID no PMT has
//! described yet holds units back until its PMT comes, for at most 10 s. A stream that never
//! gets a rate is buffered whole (the batch index would be [`TsError::NoPcr`]):
//! [`has_clock`](UnitStream::has_clock) tells a recorder when to give up on it.
//!
//! # Errors
//!
//! Errors are [`TsScanner`]'s: a bad sync byte fails [`push`](UnitStream::push), and every later
//! call repeats it. The units yielded before are then a prefix of the batch units of the longest
//! whole-packet prefix of the input, since they were final whatever followed.
//!
//! What this module does not do: buffer whole recordings, or write anything; the caller takes
//! the units away.

use crate::error::TsError;
use crate::scan::{TsIndex, TsScanner};
use crate::timing::ticks_to_time;
use crate::units::Unit;
use crate::{MAX_TS_PER_UNIT, TS_PACKET_SIZE};

/// Handed-out bytes are dropped from the buffer once they are this many and at least half of it.
const COMPACT_BYTES: usize = 64 * 1024;

/// A final payload unit of a recording, with its bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StreamUnit {
    /// The unit, as [`TsIndex::units`] of the whole stream yields it.
    pub unit: Unit,
    /// Its `ts_packets` × 188 bytes.
    pub bytes: Vec<u8>,
}

/// Cuts a live MPEG-TS stream into final payload units as its bytes arrive (see the
/// [module docs](self)).
///
/// ```
/// # fn record(chunks: &[&[u8]]) -> Result<(), isochron_media::TsError> {
/// use isochron_media::UnitStream;
///
/// let mut stream = UnitStream::new();
/// for chunk in chunks {
///     stream.push(chunk)?;
///     while let Some(u) = stream.poll_unit() {
///         // Write u.bytes, with u.unit.send_time, as unit (GSN) u.unit's index.
///         let _ = (u.unit.send_time, u.bytes.len());
///     }
/// }
/// let (rest, index) = stream.finish()?;
/// # let _ = (rest, index);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct UnitStream {
    scanner: TsScanner,
    /// The bytes pushed from packet `next_packet` on, after `consumed` bytes already handed out.
    buf: Vec<u8>,
    consumed: usize,
    /// The first packet of the next unit.
    next_packet: u64,
    /// The index (GSN) of the next unit.
    next_gsn: u64,
    /// The last cut at or before `next_packet`, as an index into the scanner's cut list.
    cut: usize,
}

impl Default for UnitStream {
    fn default() -> Self {
        Self::new()
    }
}

impl UnitStream {
    /// A stream at its first byte.
    #[must_use]
    pub fn new() -> Self {
        Self {
            scanner: TsScanner::new(),
            buf: Vec::new(),
            consumed: 0,
            next_packet: 0,
            next_gsn: 0,
            cut: 0,
        }
    }

    /// Feeds the next `data` bytes; chunks may split packets anywhere.
    ///
    /// # Errors
    ///
    /// As [`TsScanner::push`]: [`TsError::NotTransportStream`] at the first byte at a 188-byte
    /// boundary that is not the sync byte; after that every call returns the same error.
    pub fn push(&mut self, data: &[u8]) -> Result<(), TsError> {
        if let Some(e) = self.scanner.error() {
            return Err(e.clone());
        }
        self.buf.extend_from_slice(data);
        let result = self.scanner.push(data);
        if result.is_err() {
            // Keep only the whole packets the scanner took in.
            let kept = self.scanner.packets().saturating_sub(self.next_packet);
            let kept = usize::try_from(kept).unwrap_or(usize::MAX).saturating_mul(TS_PACKET_SIZE);
            self.buf.truncate(self.consumed.saturating_add(kept));
        }
        result
    }

    /// The next unit, if it is final: its boundaries, flags and send time are those of the batch
    /// index of the whole stream, whatever comes later. Units come in order, from GSN 0.
    pub fn poll_unit(&mut self) -> Option<StreamUnit> {
        let start = self.next_packet;
        let seen = self.scanner.packets();
        if start >= seen {
            return None;
        }
        let ticks = self.scanner.known_ticks(start)?;
        let builder = self.scanner.cut_builder();
        let cuts = builder.cuts();
        while cuts.get(self.cut + 1).is_some_and(|c| c.packet <= start) {
            self.cut += 1;
        }
        let here = cuts.get(self.cut).filter(|c| c.packet == start);
        // A cut here must have its final flags; elsewhere, no cut may still come here.
        let final_below = match here {
            Some(_) => builder.flags_final_below(seen),
            None => builder.cuts_final_below(seen),
        };
        if start >= final_below {
            return None;
        }
        let max = u64::from(MAX_TS_PER_UNIT);
        let packets = match cuts.get(self.cut + 1) {
            // Cuts are only ever added after the last one, so the next cut stays the next.
            Some(next) => (next.packet - start).min(max),
            None if start + max <= builder.cuts_final_below(seen) => max,
            None => return None,
        };
        // `buf` holds packets `start..seen` from `consumed` on, and start + packets <= seen.
        let len = usize::from(packets as u8) * TS_PACKET_SIZE;
        let bytes = self.buf.get(self.consumed..self.consumed + len)?.to_vec();
        let unit = Unit {
            first_packet: start,
            ts_packets: packets as u8,
            send_time: ticks_to_time(ticks),
            random_access: here.is_some_and(|c| c.random_access),
            discontinuity: here.is_some_and(|c| c.discontinuity),
        };
        self.consumed += len;
        self.next_packet += packets;
        self.next_gsn += 1;
        if self.consumed >= COMPACT_BYTES && self.consumed >= self.buf.len() / 2 {
            self.buf.drain(..self.consumed);
            self.consumed = 0;
        }
        Some(StreamUnit { unit, bytes })
    }

    /// Ends the stream: the units not yet handed out become final (timed after the last PCR by
    /// extrapolation, as the batch index does), and the index of the whole stream is returned.
    ///
    /// # Errors
    ///
    /// As [`TsScanner::finish`]. Units were only handed out if the stream had a rate, so
    /// [`TsError::NoPcr`], [`TsError::Empty`] and [`TsError::TooShort`] come with none handed out.
    pub fn finish(self) -> Result<(Vec<StreamUnit>, TsIndex), TsError> {
        let index = self.scanner.finish()?;
        let pending = self.buf.get(self.consumed..).unwrap_or_default();
        let rest = index
            .units_from(self.next_gsn)
            .map(|unit| {
                debug_assert!(unit.first_packet >= self.next_packet, "units continue in order");
                let skip = unit.first_packet.saturating_sub(self.next_packet);
                let from = usize::try_from(skip).unwrap_or(usize::MAX) * TS_PACKET_SIZE;
                let len = usize::from(unit.ts_packets) * TS_PACKET_SIZE;
                // `pending` holds every whole packet from `next_packet` on.
                let bytes = pending.get(from..from + len).unwrap_or_default().to_vec();
                StreamUnit { unit, bytes }
            })
            .collect();
        Ok((rest, index))
    }

    /// Bytes pushed but not yet handed out in final units, an incomplete last packet included.
    /// Bounded for a stream with a clock: see the module docs.
    #[must_use]
    pub fn buffered_bytes(&self) -> usize {
        self.buf.len() - self.consumed
    }

    /// Whether the stream has a clock yet: two PCRs of one segment. Until it has, no unit is
    /// final and everything is buffered; a stream that never gets one fails at
    /// [`finish`](Self::finish) with [`TsError::NoPcr`].
    #[must_use]
    pub fn has_clock(&self) -> bool {
        self.scanner.known_ticks(0).is_some()
    }

    /// How many units have been handed out: the index (GSN) of the next one.
    #[must_use]
    pub fn units_polled(&self) -> u64 {
        self.next_gsn
    }

    /// How many whole packets have been pushed.
    #[must_use]
    pub fn packets(&self) -> u64 {
        self.scanner.packets()
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::packet::PCR_HZ;
    use crate::testutil::{
        AUDIO_PID, Es, Knobs, TsBuilder, VIDEO_PID, constant_rate, jittery_stream,
        recording_stream, scan, small_file,
    };

    /// What streaming one input gave.
    #[derive(Debug, Default)]
    struct Outcome {
        /// Units handed out by `poll_unit` before `finish`.
        polled: usize,
        /// The most bytes buffered after a push and its polls.
        max_buffered: usize,
        /// The most whole packets pushed beyond the end of the last unit handed out, after a
        /// push and its polls, while the stream had a clock.
        max_lag_packets: u64,
    }

    /// Streams `data` in chunks of `sizes` bytes (cycled), polling after every push, and checks
    /// the contract against the batch scan: same units with the same bytes, same index, same
    /// error; after a push error, the units handed out are a prefix of the valid prefix's.
    fn check(data: &[u8], sizes: &[usize]) -> Outcome {
        let mut s = UnitStream::new();
        let mut polled: Vec<StreamUnit> = Vec::new();
        let mut out = Outcome::default();
        let mut at = 0;
        let mut push_error = None;
        for &size in sizes.iter().cycle() {
            if at >= data.len() {
                break;
            }
            let n = size.clamp(1, data.len() - at);
            if let Err(e) = s.push(&data[at..at + n]) {
                push_error = Some(e);
                break;
            }
            at += n;
            while let Some(u) = s.poll_unit() {
                polled.push(u);
            }
            out.max_buffered = out.max_buffered.max(s.buffered_bytes());
            if s.has_clock() {
                let released = polled.last().map_or(0, |u| u.unit.packets().end);
                out.max_lag_packets = out.max_lag_packets.max(s.packets() - released);
            }
        }
        out.polled = polled.len();
        for u in &polled {
            let from = u.unit.byte_offset().0 as usize;
            assert_eq!(u.bytes, data[from..from + u.unit.byte_len().0 as usize], "{:?}", u.unit);
        }
        let batch = scan(data);
        if let Some(e) = push_error {
            assert_eq!(batch.as_ref().err(), Some(&e));
            let valid = s.packets() as usize * TS_PACKET_SIZE;
            assert_eq!(s.push(&[0x47]), Err(e.clone()), "errors are sticky");
            assert_eq!(s.finish().err(), Some(e));
            match scan(&data[..valid]) {
                Ok(idx) => {
                    let want: Vec<Unit> = idx.units().take(polled.len()).collect();
                    let got: Vec<Unit> = polled.iter().map(|u| u.unit).collect();
                    assert_eq!(got, want, "a prefix of the valid prefix's units");
                }
                Err(_) => assert!(polled.is_empty()),
            }
            return out;
        }
        match (s.finish(), batch) {
            (Ok((rest, idx)), Ok(want)) => {
                assert_eq!(idx, want, "the same index");
                let got: Vec<Unit> = polled.iter().chain(&rest).map(|u| u.unit).collect();
                let units: Vec<Unit> = want.units().collect();
                if got != units {
                    let i = got.iter().zip(&units).position(|(a, b)| a != b).unwrap_or(0);
                    panic!(
                        "unit {i} differs ({} polled): got {:?}, want {:?}",
                        polled.len(),
                        got.get(i),
                        units.get(i)
                    );
                }
                for u in &rest {
                    let from = u.unit.byte_offset().0 as usize;
                    assert_eq!(u.bytes, data[from..from + u.unit.byte_len().0 as usize]);
                }
            }
            (Err(e), Err(want)) => {
                assert_eq!(e, want);
                assert!(polled.is_empty(), "units handed out for a stream that fails");
            }
            (got, want) => panic!("stream {:?} vs batch {:?}", got.map(|_| ()), want.map(|_| ())),
        }
        out
    }

    /// Checks every two-chunk split of `data`, and a few regular chunkings.
    fn check_every_split(data: &[u8]) {
        for split in 0..=data.len() {
            check(data, &[split, data.len()]);
        }
        for sizes in [&[1][..], &[7], &[188], &[1316], &[100, 1, 2000, 187]] {
            check(data, sizes);
        }
    }

    /// A small stream whose first keyframe comes before any PSI and is resolved by a late PMT.
    fn late_pmt_file() -> Vec<u8> {
        let mut b = TsBuilder::new();
        b.es(VIDEO_PID, Es { pusi: true, random_access: true, pcr: Some(0), ..Es::default() });
        for k in 1..4 {
            b.data(VIDEO_PID).data(AUDIO_PID);
            b.pcr(VIDEO_PID, k * 100_000);
        }
        b.psi();
        for k in 4..8 {
            b.es(VIDEO_PID, Es { pusi: k == 6, random_access: k == 6, ..Es::default() });
            b.pcr(VIDEO_PID, k * 100_000);
        }
        b.psi();
        b.pcr(VIDEO_PID, 900_000);
        b.into_bytes()
    }

    #[test]
    fn every_split_of_small_files() {
        check_every_split(&small_file());
        check_every_split(&late_pmt_file());
        check_every_split(&constant_rate(40, 15, 123, 1000));
        let knobs = Knobs { pcrs: 8, psi_every: 2, key_every: 3, odd_every: 4, ..Knobs::default() };
        for seed in 0..4 {
            check_every_split(&recording_stream(seed, knobs));
            check_every_split(&recording_stream(seed, Knobs { psi_after: 5, ..knobs }));
            check_every_split(&recording_stream(seed, Knobs { audio_only: true, ..knobs }));
        }
    }

    #[test]
    fn jittery_and_recording_streams() {
        for seed in 0..20 {
            check(&jittery_stream(seed, 300), &[1000, 3, 188 * 5]);
            for knobs in [
                Knobs::default(),
                Knobs { psi_after: 40, flip_kind: true, ..Knobs::default() },
                Knobs { audio_only: true, step_ticks: PCR_HZ / 4, ..Knobs::default() },
                Knobs { pcrs: 400, step_ticks: PCR_HZ / 10, key_every: 200, ..Knobs::default() },
            ] {
                check(&recording_stream(seed, knobs), &[1316, 1, 4000]);
            }
        }
    }

    #[test]
    fn late_pmt_holds_units_until_it_comes() {
        let data = late_pmt_file();
        let mut s = UnitStream::new();
        // The keyframe at packet 0 waits for the PMT (packets 10, 11): nothing can be cut there
        // before it is known whether a random-access cut comes at packet 0's PAT... or not.
        s.push(&data[..10 * TS_PACKET_SIZE]).expect("valid");
        assert!(s.has_clock());
        assert_eq!(s.poll_unit().map(|u| u.unit.first_packet), None);
        s.push(&data[10 * TS_PACKET_SIZE..]).expect("valid");
        let first = s.poll_unit().expect("released by the PMT");
        assert!(first.unit.random_access);
        check_every_split(&data);
    }

    #[test]
    fn without_a_clock_nothing_is_released() {
        let mut b = TsBuilder::new();
        b.psi();
        for _ in 0..100 {
            b.data(VIDEO_PID);
        }
        b.pcr(VIDEO_PID, 1234);
        let mut s = UnitStream::new();
        s.push(b.bytes()).expect("valid");
        assert!(!s.has_clock());
        assert_eq!(s.poll_unit(), None);
        assert_eq!(s.buffered_bytes(), b.bytes().len());
        assert_eq!(s.finish().err(), Some(TsError::NoPcr));
        check(b.bytes(), &[500]);
    }

    #[test]
    fn errors_leave_a_valid_prefix() {
        let mut data = constant_rate(300, 50, 0, 1000);
        data[250 * TS_PACKET_SIZE] = 0x46;
        let out = check(&data, &[1000]);
        assert!(out.polled > 0);
        check(&data, &[250 * TS_PACKET_SIZE + 1]);
        check(&[], &[1]);
        check(&[0x47; 100], &[1]);
    }

    #[test]
    fn finish_right_after_new_gives_the_batch_error() {
        assert_eq!(UnitStream::default().finish().err(), Some(TsError::Empty));
    }

    /// An ffmpeg-like stream of `seconds`: 2 Mb/s VBR (about 1330 packets a second), a PCR every
    /// 20 ms, PAT and PMT every 100 ms, a keyframe every `gop` PSI periods, audio PES with RAI.
    fn ffmpeg_like(seconds: u64, gop: u64, seed: u64) -> Vec<u8> {
        let mut g = isochron_base::mix::SplitMix64::new(seed);
        let mut b = TsBuilder::new();
        let mut pcr = 1_000_000;
        for i in 0..seconds * 50 {
            if i % 5 == 0 {
                b.psi();
            }
            let key = i % (5 * gop) == 0;
            b.es(VIDEO_PID, Es { pusi: key, random_access: key, pcr: Some(pcr), ..Es::default() });
            // 27 packets on average per 20 ms; keyframes are bigger.
            let n = if key { 60 } else { 10 + g.next_u64() % 32 };
            for j in 0..n {
                if j % 9 == 4 {
                    b.es(AUDIO_PID, Es { pusi: true, random_access: true, ..Es::default() });
                } else {
                    b.data(VIDEO_PID);
                }
            }
            // 20 ms with a few ticks of jitter.
            pcr += PCR_HZ / 50 - 5 + g.next_u64() % 11;
        }
        b.into_bytes()
    }

    #[test]
    fn long_stream_stays_bounded() {
        // Two minutes at 2 Mb/s, a 2 s GOP, pushed in odd-sized chunks.
        let data = ffmpeg_like(120, 20, 1);
        let out = check(&data, &[1000, 4096, 333]);
        // Units are held for at most one PSI period (5 PCR intervals of at most 60 + 2 packets)
        // plus a unit, whatever the GOP.
        let bound_packets = 5 * 62 + 7;
        assert!(out.max_lag_packets <= bound_packets, "lag {} packets", out.max_lag_packets);
        assert!(
            out.max_buffered <= (bound_packets as usize + 1) * TS_PACKET_SIZE + 4096,
            "{} bytes buffered",
            out.max_buffered
        );
        // A long GOP changes nothing.
        let out = check(&ffmpeg_like(60, 100, 2), &[1316]);
        assert!(out.max_lag_packets <= bound_packets, "lag {} packets", out.max_lag_packets);
    }

    #[test]
    fn audio_only_holds_pats_for_the_horizon() {
        let mut b = TsBuilder::new();
        let mut pcr = 0;
        for i in 0..3000u64 {
            if i % 5 == 0 {
                b.pat().pmt(AUDIO_PID, &[(0x0F, AUDIO_PID)]);
            }
            b.es(
                AUDIO_PID,
                Es { pusi: true, random_access: true, pcr: Some(pcr), ..Es::default() },
            );
            b.data(AUDIO_PID);
            pcr += PCR_HZ / 50;
        }
        let data = b.into_bytes();
        let out = check(&data, &[1316]);
        // 60 s of audio; each PAT waits for 10 s of PCRs to pass: 500 intervals of 2.4 packets.
        assert!(out.polled > 0);
        assert!(out.max_lag_packets > 1150 && out.max_lag_packets < 1300, "{out:?}");
        let idx = scan(&data).expect("valid");
        assert_eq!(idx.random_access_units().count(), 600, "every PAT is a seek point");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn recordings_stream_like_the_batch(
            seed in any::<u64>(),
            pcrs in 2usize..120,
            step_ms in 1u64..600,
            psi_every in 0u64..12,
            key_every in 0u64..30,
            odd_every in 0u64..30,
            psi_after in 0u64..60,
            audio_only in any::<bool>(),
            flip_kind in any::<bool>(),
            sizes in proptest::collection::vec(1usize..3000, 1..6),
        ) {
            let knobs = Knobs {
                pcrs,
                step_ticks: step_ms * PCR_HZ / 1000,
                psi_every,
                key_every,
                odd_every,
                psi_after,
                audio_only,
                flip_kind,
            };
            check(&recording_stream(seed, knobs), &sizes);
        }

        #[test]
        fn jittery_streams_stream_like_the_batch(
            seed in any::<u64>(),
            pcrs in 2usize..200,
            sizes in proptest::collection::vec(1usize..3000, 1..6),
        ) {
            check(&jittery_stream(seed, pcrs), &sizes);
        }

        #[test]
        fn garbage_streams_like_the_batch(
            mut data in proptest::collection::vec(any::<u8>(), 0..188 * 30),
            synced in any::<bool>(),
            sizes in proptest::collection::vec(1usize..3000, 1..4),
        ) {
            if synced {
                for chunk in data.chunks_mut(TS_PACKET_SIZE) {
                    chunk[0] = 0x47;
                }
            }
            check(&data, &sizes);
        }

        #[test]
        fn corrupted_recordings_stream_like_the_batch(
            seed in any::<u64>(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..40),
            sizes in proptest::collection::vec(1usize..3000, 1..4),
        ) {
            let mut data = recording_stream(seed, Knobs { pcrs: 60, ..Knobs::default() });
            for (at, byte) in flips {
                let at = at % data.len();
                if !at.is_multiple_of(TS_PACKET_SIZE) {
                    data[at] = byte;
                }
            }
            check(&data, &sizes);
        }
    }
}
