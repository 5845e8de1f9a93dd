//! Synthetic transport streams for tests: PAT, PMT and PES-like packets with PCR, random-access
//! and discontinuity flags, so no test needs ffmpeg or fixture files.

use std::collections::BTreeMap;

use crate::packet::{PCR_HZ, PCR_WRAP, encode_pcr};
use crate::psi::build;
use crate::{TS_PACKET_SIZE, TsIndex, TsScanner};

/// The PMT PID of [`TsBuilder::psi`].
pub(crate) const PMT_PID: u16 = 0x1000;
/// The video PID of [`TsBuilder::psi`], which also carries the PCR.
pub(crate) const VIDEO_PID: u16 = 0x100;
/// The audio PID of [`TsBuilder::psi`].
pub(crate) const AUDIO_PID: u16 = 0x101;

/// Flags for one elementary-stream packet.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Es {
    pub(crate) pusi: bool,
    pub(crate) random_access: bool,
    pub(crate) discontinuity: bool,
    pub(crate) pcr: Option<u64>,
}

/// Appends 188-byte packets to a buffer, keeping per-PID continuity counters.
#[derive(Clone, Debug, Default)]
pub(crate) struct TsBuilder {
    out: Vec<u8>,
    cc: BTreeMap<u16, u8>,
}

impl TsBuilder {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The number of packets written.
    pub(crate) fn packets(&self) -> u64 {
        (self.out.len() / TS_PACKET_SIZE) as u64
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.out
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.out
    }

    /// A PAT naming program 1 at [`PMT_PID`].
    pub(crate) fn pat(&mut self) -> &mut Self {
        self.section(0, &build::pat(&[(1, PMT_PID)]))
    }

    /// A PMT for program 1 with the given `(stream_type, pid)` streams.
    pub(crate) fn pmt(&mut self, pcr_pid: u16, streams: &[(u8, u16)]) -> &mut Self {
        let entries: Vec<(u8, u16, &[u8])> =
            streams.iter().map(|&(t, p)| (t, p, &[][..])).collect();
        self.section(PMT_PID, &build::pmt(1, pcr_pid, &entries))
    }

    /// PAT then a PMT with H.264 video (PCR PID) and AAC audio.
    pub(crate) fn psi(&mut self) -> &mut Self {
        self.pat().pmt(VIDEO_PID, &[(0x1B, VIDEO_PID), (0x0F, AUDIO_PID)])
    }

    /// One section in one packet (pointer_field 0, 0xFF stuffing).
    pub(crate) fn section(&mut self, pid: u16, section: &[u8]) -> &mut Self {
        let mut payload = vec![0u8];
        payload.extend_from_slice(section);
        assert!(payload.len() <= 184, "section too long for one packet");
        self.raw(pid, true, None, &payload, 0xFF)
    }

    /// An elementary-stream packet.
    pub(crate) fn es(&mut self, pid: u16, es: Es) -> &mut Self {
        let needs_af = es.random_access || es.discontinuity || es.pcr.is_some();
        let af = needs_af.then(|| {
            let flags = (u8::from(es.discontinuity) << 7)
                | (u8::from(es.random_access) << 6)
                | (u8::from(es.pcr.is_some()) << 4);
            let mut af = vec![flags];
            if let Some(pcr) = es.pcr {
                af.extend_from_slice(&encode_pcr(pcr));
            }
            af
        });
        self.raw(pid, es.pusi, af.as_deref(), &[], 0xA5)
    }

    /// A plain payload packet.
    pub(crate) fn data(&mut self, pid: u16) -> &mut Self {
        self.es(pid, Es::default())
    }

    /// An ES packet carrying only a PCR.
    pub(crate) fn pcr(&mut self, pid: u16, pcr: u64) -> &mut Self {
        self.es(pid, Es { pcr: Some(pcr), ..Es::default() })
    }

    /// A packet with adaptation field bytes `af` (after the length byte), `payload`, and the
    /// rest of the payload filled with `fill`.
    fn raw(
        &mut self,
        pid: u16,
        pusi: bool,
        af: Option<&[u8]>,
        payload: &[u8],
        fill: u8,
    ) -> &mut Self {
        let cc = self.cc.entry(pid).or_insert(0);
        let afc = if af.is_some() { 0x30 } else { 0x10 };
        let mut p = Vec::with_capacity(TS_PACKET_SIZE);
        p.extend_from_slice(&[
            0x47,
            (u8::from(pusi) << 6) | (pid >> 8) as u8,
            pid as u8,
            afc | *cc,
        ]);
        *cc = (*cc + 1) & 0x0F;
        if let Some(af) = af {
            p.push(af.len() as u8);
            p.extend_from_slice(af);
        }
        p.extend_from_slice(payload);
        p.resize(TS_PACKET_SIZE, fill);
        self.out.extend_from_slice(&p);
        self
    }
}

/// A constant-rate stream of `packets` packets at `ticks_per_packet`: PAT + PMT every `gop`
/// packets followed by a video keyframe (PUSI + RAI + PCR), a PCR on the video PID at every
/// other packet index divisible by 10, and video/audio payload in between. Packet `i`'s PCR is
/// `first_pcr + i × ticks_per_packet`, so the first PCR is packet 2 and
/// `ticks(i) = (i − 2) × ticks_per_packet`.
pub(crate) fn constant_rate(
    packets: u64,
    gop: u64,
    first_pcr: u64,
    ticks_per_packet: u64,
) -> Vec<u8> {
    let pcr_at = |i: u64| first_pcr + i * ticks_per_packet;
    let mut b = TsBuilder::new();
    while b.packets() < packets {
        let i = b.packets();
        if i.is_multiple_of(gop) {
            b.psi();
            let i = b.packets();
            b.es(
                VIDEO_PID,
                Es { pusi: true, random_access: true, pcr: Some(pcr_at(i)), ..Es::default() },
            );
        } else if i.is_multiple_of(10) {
            b.pcr(VIDEO_PID, pcr_at(i));
        } else if i.is_multiple_of(3) {
            b.data(AUDIO_PID);
        } else {
            b.data(VIDEO_PID);
        }
    }
    let mut out = b.into_bytes();
    out.truncate(packets as usize * TS_PACKET_SIZE);
    out
}

/// A small file exercising everything: PSI, PCRs, random access, a discontinuity.
pub(crate) fn small_file() -> Vec<u8> {
    let mut b = TsBuilder::new();
    b.psi();
    b.es(VIDEO_PID, Es { pusi: true, random_access: true, pcr: Some(5_000), ..Es::default() });
    for _ in 0..8 {
        b.data(VIDEO_PID).data(AUDIO_PID);
    }
    b.pcr(VIDEO_PID, 5_000 + 17 * 1000);
    b.psi();
    b.es(VIDEO_PID, Es { pusi: true, random_access: true, ..Es::default() });
    b.data(AUDIO_PID);
    b.es(VIDEO_PID, Es { discontinuity: true, pcr: Some(9_999_999), ..Es::default() });
    b.data(VIDEO_PID).data(VIDEO_PID);
    b.pcr(VIDEO_PID, 9_999_999 + 3 * 1000);
    b.into_bytes()
}

/// A valid stream with random PCR jitter, gaps, wraps, repeats and discontinuities.
pub(crate) fn jittery_stream(seed: u64, pcrs: usize) -> Vec<u8> {
    let mut g = isochron_base::mix::SplitMix64::new(seed);
    let mut b = TsBuilder::new();
    let mut pcr = g.next_u64() % PCR_WRAP;
    for k in 0..pcrs {
        if g.next_u64().is_multiple_of(8) {
            b.psi();
        }
        let disc = g.next_u64().is_multiple_of(30);
        b.es(
            VIDEO_PID,
            Es {
                pusi: g.next_u64().is_multiple_of(4),
                random_access: g.next_u64().is_multiple_of(6),
                discontinuity: disc,
                pcr: Some(pcr % PCR_WRAP),
            },
        );
        for _ in 0..g.next_u64() % 12 {
            b.data(if k % 2 == 0 { VIDEO_PID } else { AUDIO_PID });
        }
        pcr = match g.next_u64() % 20 {
            0 => g.next_u64() % PCR_WRAP,                 // anywhere
            1 => pcr + 20 * PCR_HZ,                       // far ahead
            2 => pcr,                                     // repeated
            3 => pcr.saturating_sub(g.next_u64() % 1000), // slightly back
            _ => pcr + 5_000 + g.next_u64() % 500_000,    // jittery normal step
        };
    }
    b.into_bytes()
}

/// Scans `data` in one push.
pub(crate) fn scan(data: &[u8]) -> Result<TsIndex, crate::TsError> {
    let mut s = TsScanner::new();
    s.push(data)?;
    s.finish()
}

/// Checks the unit invariants against the raw file: units are 1..=7 packets, cover every whole
/// packet once in order, never hold a PID-0 packet after their first, the first is a seek point,
/// send times never decrease and match `send_time`, and the count matches `unit_count`.
pub(crate) fn check_units(index: &TsIndex, data: &[u8]) {
    let mut next = 0;
    let mut count = 0;
    let mut last_time = None;
    for (i, u) in index.units().enumerate() {
        assert_eq!(u.first_packet, next, "unit {i} starts where the previous ended");
        assert!((1..=7).contains(&u.ts_packets), "unit {i} has {} packets", u.ts_packets);
        if i == 0 {
            assert!(u.random_access, "first unit is a seek point");
        }
        for p in u.first_packet + 1..u.first_packet + u64::from(u.ts_packets) {
            let at = p as usize * TS_PACKET_SIZE;
            let pid = (u16::from(data[at + 1] & 0x1F) << 8) | u16::from(data[at + 2]);
            assert_ne!(pid, 0, "unit {i} holds a PAT packet ({p}) after its first");
        }
        assert_eq!(u.send_time, index.send_time(u.first_packet));
        if let Some(t) = last_time {
            assert!(u.send_time >= t, "unit {i} goes back in time");
        }
        last_time = Some(u.send_time);
        assert_eq!(index.unit(i as u64), Some(u));
        next += u64::from(u.ts_packets);
        count += 1;
    }
    assert_eq!(next, index.packet_count(), "units cover every packet");
    assert_eq!(count, index.unit_count());
}

/// Knobs for [`recording_stream`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Knobs {
    /// PCR intervals to write.
    pub(crate) pcrs: usize,
    /// The mean PCR step in ticks.
    pub(crate) step_ticks: u64,
    /// One interval in this many starts with PAT and PMT (and some with a PAT or PMT alone).
    pub(crate) psi_every: u64,
    /// One interval in this many holds a video keyframe.
    pub(crate) key_every: u64,
    /// One PCR in this many is irregular (a jump, a repeat, a flagged discontinuity).
    pub(crate) odd_every: u64,
    /// Packets before the first PSI.
    pub(crate) psi_after: u64,
    /// The PMT lists only audio, so video keyframes wait for a description that never comes.
    pub(crate) audio_only: bool,
    /// Some PMTs call the video PID audio.
    pub(crate) flip_kind: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            pcrs: 100,
            step_ticks: PCR_HZ / 25,
            psi_every: 5,
            key_every: 25,
            odd_every: 40,
            psi_after: 0,
            audio_only: false,
            flip_kind: false,
        }
    }
}

/// A valid stream shaped like a recording: PSI now and then (possibly late, possibly lying about
/// the video PID), keyframes, audio with `random_access_indicator` on every PES (as ffmpeg
/// writes), PCRs with jitter, repeats, jumps and flagged discontinuities.
pub(crate) fn recording_stream(seed: u64, k: Knobs) -> Vec<u8> {
    let mut g = isochron_base::mix::SplitMix64::new(seed);
    let mut b = TsBuilder::new();
    let mut roll = |n: u64| n > 0 && g.next_u64().is_multiple_of(n);
    let psi = |b: &mut TsBuilder, video: u8| {
        if k.audio_only {
            b.pat().pmt(VIDEO_PID, &[(0x0F, AUDIO_PID)]);
        } else {
            b.pat().pmt(VIDEO_PID, &[(video, VIDEO_PID), (0x0F, AUDIO_PID)]);
        }
    };
    let mut g2 = isochron_base::mix::SplitMix64::new(seed ^ 0x5EED);
    let mut pcr = g2.next_u64() % PCR_WRAP;
    let mut psi_done = false;
    for i in 0..k.pcrs {
        if b.packets() >= k.psi_after && (!psi_done || roll(k.psi_every)) {
            psi_done = true;
            let video = if k.flip_kind && roll(3) { 0x0F } else { 0x1B };
            match g2.next_u64() % 8 {
                0 => {
                    b.pat();
                }
                1 => {
                    b.pmt(VIDEO_PID, &[(video, VIDEO_PID), (0x0F, AUDIO_PID)]);
                }
                _ => psi(&mut b, video),
            }
        }
        let key = i == 0 || roll(k.key_every);
        let odd = roll(k.odd_every);
        let disc = odd && g2.next_u64().is_multiple_of(3);
        b.es(
            VIDEO_PID,
            Es {
                pusi: key || g2.next_u64().is_multiple_of(4),
                random_access: key && g2.next_u64().is_multiple_of(2),
                discontinuity: disc,
                pcr: Some(pcr % PCR_WRAP),
            },
        );
        for _ in 0..g2.next_u64() % 12 {
            match g2.next_u64() % 10 {
                0 => b.es(AUDIO_PID, Es { pusi: true, random_access: true, ..Es::default() }),
                1 if key => {
                    b.es(VIDEO_PID, Es { pusi: true, random_access: true, ..Es::default() })
                }
                2 if odd => b.es(VIDEO_PID, Es { discontinuity: true, ..Es::default() }),
                3 => b.data(0x1FFF),
                4..=6 => b.data(AUDIO_PID),
                _ => b.data(VIDEO_PID),
            };
        }
        let step = k.step_ticks / 2 + g2.next_u64() % k.step_ticks.max(1);
        pcr = if odd {
            match g2.next_u64() % 5 {
                0 => g2.next_u64() % PCR_WRAP,
                1 => pcr + 12 * PCR_HZ,
                2 => pcr,
                3 => pcr.saturating_sub(g2.next_u64() % 1000),
                _ => pcr + 3 * PCR_HZ,
            }
        } else {
            pcr + step
        };
    }
    b.into_bytes()
}
