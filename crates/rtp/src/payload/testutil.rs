//! Helpers shared by the payload formats' tests.

use super::{Depacketizer, Packetizer};
use crate::RtpHeader;

/// A small deterministic generator (xorshift64*), so tests need no `rand`.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(super) fn byte(&mut self) -> u8 {
        (self.next() >> 56) as u8
    }

    /// Uniform in `0..n`.
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub(super) fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.byte()).collect()
    }
}

/// NAL units with `len_size`-byte big-endian length prefixes.
pub(super) fn avcc(len_size: u8, nals: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for n in nals {
        let len = (n.len() as u64).to_be_bytes();
        out.extend_from_slice(&len[8 - usize::from(len_size)..]);
        out.extend_from_slice(n);
    }
    out
}

/// Every NAL unit of an Annex B byte stream, with 4-byte lengths.
pub(super) fn annexb_to_avcc(stream: &[u8]) -> Vec<u8> {
    let mut starts = Vec::new();
    let mut i = 0;
    while i + 3 <= stream.len() {
        if stream[i..i + 3] == [0, 0, 1] {
            starts.push(i + 3);
            i += 3;
        } else {
            i += 1;
        }
    }
    let mut nals: Vec<&[u8]> = Vec::new();
    for (k, &s) in starts.iter().enumerate() {
        let mut end = starts.get(k + 1).map_or(stream.len(), |&n| n - 3);
        while end > s && stream[end - 1] == 0 {
            end -= 1;
        }
        nals.push(&stream[s..end]);
    }
    avcc(4, &nals)
}

/// The marker bits and payloads of a capture: RTP packets each after a 2-byte length.
pub(super) fn fixture_packets(mut bytes: &[u8]) -> Vec<(bool, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
        let pkt = &bytes[2..2 + len];
        let (h, range) = RtpHeader::parse(pkt).unwrap();
        out.push((h.marker, pkt[range].to_vec()));
        bytes = &bytes[2 + len..];
    }
    out
}

/// How a format sets the marker bit on the payloads of one access unit.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Marker {
    /// On the last payload only.
    Last,
    /// On none.
    Never,
}

/// Packetizes one access unit, checks the payload sizes and marker bits, feeds the payloads to
/// `d` and returns what it gives back (which must come with the last payload).
pub(super) fn round_trip_with(
    p: &mut dyn Packetizer,
    d: &mut dyn Depacketizer,
    au: &[u8],
    max_payload: usize,
    marker: Marker,
) -> Vec<Vec<u8>> {
    let mut payloads = Vec::new();
    p.packetize(au, &mut payloads).unwrap();
    let n = payloads.len();
    let mut got = Vec::new();
    for (i, pl) in payloads.iter().enumerate() {
        assert!(pl.bytes.len() <= max_payload, "payload {i} of {n}: {} bytes", pl.bytes.len());
        let want_marker = marker == Marker::Last && i + 1 == n;
        assert_eq!(pl.marker, want_marker, "marker of payload {i} of {n}");
        d.push_into(&pl.bytes, pl.marker, &mut got).unwrap();
        if i + 1 < n {
            assert!(got.is_empty(), "an access unit before the last payload");
        }
    }
    got
}

/// [`round_trip_with`] for formats that mark the last payload of each access unit.
pub(super) fn round_trip(
    p: &mut dyn Packetizer,
    d: &mut dyn Depacketizer,
    au: &[u8],
    max_payload: usize,
) -> Vec<Vec<u8>> {
    round_trip_with(p, d, au, max_payload, Marker::Last)
}
