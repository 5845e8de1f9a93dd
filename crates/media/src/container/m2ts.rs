//! 192-byte M2TS (BDAV) packets to 188-byte MPEG-TS packets.
//!
//! Why: Blu-ray and AVCHD cameras write transport streams whose packets carry a 4-byte
//! `TP_extra_header` (2 bits copy permission, 30 bits arrival time stamp; defined by the Blu-ray
//! BDAV format, not by ISO/IEC 13818-1) in front of each 188-byte packet. The TS analyser
//! ([`TsScanner`](crate::TsScanner)) and RFC 2250 both want plain 188-byte packets, and the
//! arrival time stamps are redundant with the PCRs we pace by, so the adapter drops the header.
//!
//! It does not check sync bytes — [`TsScanner`](crate::TsScanner) does, on the output — nor
//! keep the arrival times.

use crate::TS_PACKET_SIZE;

/// The size of an M2TS packet: a 4-byte `TP_extra_header` and a TS packet.
pub const M2TS_PACKET_SIZE: usize = 4 + TS_PACKET_SIZE;

/// Strips the 4-byte header from each 192-byte packet of a byte stream fed in any chunking.
///
/// ```
/// # use isochron_media::M2tsToTs;
/// let mut packet = vec![0u8; 4];
/// packet.extend_from_slice(&[0x47; 188]);
/// let mut adapter = M2tsToTs::new();
/// let mut out = Vec::new();
/// adapter.push(&packet[..100], &mut out);
/// adapter.push(&packet[100..], &mut out);
/// assert_eq!(out, vec![0x47; 188]);
/// assert_eq!(adapter.finish(), 0);
/// ```
#[derive(Clone, Debug)]
pub struct M2tsToTs {
    partial: [u8; M2TS_PACKET_SIZE],
    filled: usize,
    packets: u64,
}

impl Default for M2tsToTs {
    fn default() -> Self {
        Self::new()
    }
}

impl M2tsToTs {
    /// An adapter at the start of a stream.
    pub fn new() -> Self {
        Self { partial: [0; M2TS_PACKET_SIZE], filled: 0, packets: 0 }
    }

    /// Appends to `out` the 188-byte packets completed by `input`.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) {
        if self.filled > 0 {
            let n = (M2TS_PACKET_SIZE - self.filled).min(input.len());
            self.partial[self.filled..self.filled + n].copy_from_slice(&input[..n]);
            self.filled += n;
            input = &input[n..];
            if self.filled < M2TS_PACKET_SIZE {
                return;
            }
            out.extend_from_slice(&self.partial[4..]);
            self.filled = 0;
            self.packets += 1;
        }
        let mut whole = input.chunks_exact(M2TS_PACKET_SIZE);
        for packet in whole.by_ref() {
            out.extend_from_slice(&packet[4..]);
            self.packets += 1;
        }
        let rest = whole.remainder();
        self.partial[..rest.len()].copy_from_slice(rest);
        self.filled = rest.len();
    }

    /// The number of packets converted so far.
    pub fn packets(&self) -> u64 {
        self.packets
    }

    /// Ends the stream; returns how many trailing bytes (an incomplete packet) were dropped.
    pub fn finish(self) -> u64 {
        self.filled as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m2ts(packets: u8) -> (Vec<u8>, Vec<u8>) {
        let (mut input, mut ts) = (Vec::new(), Vec::new());
        for i in 0..packets {
            input.extend_from_slice(&[0x40, 0, 0, i]);
            let mut p = [i; TS_PACKET_SIZE];
            p[0] = 0x47;
            input.extend_from_slice(&p);
            ts.extend_from_slice(&p);
        }
        (input, ts)
    }

    #[test]
    fn every_split_gives_the_same_packets() {
        let (input, ts) = m2ts(3);
        for a in 0..=input.len() {
            for b in [a, (a + 1).min(input.len()), (a + 191).min(input.len()), input.len()] {
                let mut adapter = M2tsToTs::new();
                let mut out = Vec::new();
                adapter.push(&input[..a], &mut out);
                adapter.push(&input[a..b], &mut out);
                adapter.push(&input[b..], &mut out);
                assert_eq!(out, ts, "split at {a}, {b}");
                assert_eq!(adapter.packets(), 3);
                assert_eq!(adapter.finish(), 0);
            }
        }
    }

    #[test]
    fn trailing_bytes_are_reported() {
        let (input, ts) = m2ts(2);
        let mut adapter = M2tsToTs::default();
        let mut out = Vec::new();
        adapter.push(&input[..300], &mut out);
        assert_eq!(out, &ts[..188]);
        assert_eq!(adapter.finish(), 300 - 192);
    }
}
