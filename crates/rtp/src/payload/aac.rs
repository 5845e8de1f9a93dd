//! AAC over RTP, RFC 3640 `mpeg4-generic` in mode AAC-hbr (§3.3.6).
//!
//! Each payload is a 16-bit AU-headers-length (in bits), the AU headers, then the access units
//! (raw AAC frames, without ADTS header) back to back (§3.2). In AAC-hbr an AU header is 16 bits:
//! a 13-bit AU-size and a 3-bit AU-Index (AU-Index-delta after the first), so an AU is at most
//! 8191 bytes.
//!
//! The packetizer sends one AU a packet (AU-Index 0): an AU that does not fit `max_payload` is
//! fragmented (§3.2.3), every fragment carrying the one AU header with the whole AU's size, and
//! the marker bit is set on every packet that ends an AU (§3.1: a whole AU, or a last fragment).
//! The depacketizer takes several AUs a packet as well, and also other `sizelength`,
//! `indexlength` and `indexdeltalength` (AAC-lbr's 6/2/2) through
//! [`AacDepacketizer::with_lengths`]; it does not de-interleave (a non-zero AU-Index-delta is
//! refused) and takes no CTS, DTS or auxiliary sections (which AAC-hbr does not use).
//!
//! The RTP timestamp of a packet is that of its first AU; with several AUs a packet, the i-th
//! AU's is that plus i frame durations (1024 samples for AAC-LC).

use super::frame::{Frames, Framing, frame_packetizer};
use super::{
    Depacketizer, Packetizer, Payload, PayloadError, check_max_payload, depacketizer, fragment,
    hex, impl_depacketizer, impl_packetizer, non_empty, split_header,
};

/// The largest AU AAC-hbr's 13-bit AU-size can describe.
const MAX_AU: usize = (1 << 13) - 1;

frame_packetizer! {
    /// AAC in RFC 3640 mpeg4-generic mode AAC-hbr (sizelength=13, indexlength=3,
    /// indexdeltalength=3), one AU a packet, fragmented when larger than a payload.
    packetizer AacPacketizer("AAC", 4-byte header, at least 5 bytes);
    /// A packetizer sending payloads of at most `max_payload` bytes (at least 5: the 4 bytes of
    /// AU-headers-length and AU header, and one byte of the AU).
    fn new;
    /// Appends the payloads of one raw AAC frame (no ADTS header) to `out`: one payload if it
    /// fits, else fragments (RFC 3640 §3.2.3) each with the AU header giving the frame's whole
    /// size. The marker bit is set on the last (or only) payload.
    ///
    /// Errors (and nothing appended): an empty frame, or one over 8191 bytes.
    fn packetize = cut;
}

/// [`AacPacketizer::packetize`] of a frame that is not empty, `chunk` bytes of it a payload.
fn cut(frame: &[u8], chunk: usize, out: &mut Vec<Payload>) -> Result<(), PayloadError> {
    if frame.len() > MAX_AU {
        return Err(PayloadError::TooLarge { format: "AAC", len: frame.len(), max: MAX_AU });
    }
    // AU-headers-length 16 bits; AU-size << 3 | AU-Index 0.
    let size = frame.len() as u16;
    let header = [0x00, 0x10, (size >> 5) as u8, ((size & 0x1f) << 3) as u8];
    fragment(out, frame, chunk, true, |_, _| header);
    Ok(())
}

depacketizer! {
    /// Reassembles raw AAC frames (no ADTS header) from RFC 3640 payloads: several AUs a packet,
    /// or one AU in fragments.
    pub struct AacDepacketizer(Frames<AuHeaderLengths>) -> Vec<Vec<u8>>, push_into;
    /// A depacketizer for AAC-hbr: sizelength=13, indexlength=3, indexdeltalength=3.
    pub const fn new() = Frames::new(AuHeaderLengths { size: 13, index: 3, index_delta: 3 });
    /// Feeds the next payload and its marker bit; returns the AUs it completes, in order.
    ///
    /// Errors: a payload cut short, AU headers that do not add up, a non-zero AU-Index-delta
    /// (interleaving), or fragments that disagree on the AU size or overrun it. A fragment being
    /// reassembled is then dropped.
    fn push;
    /// Packets were lost before the next payload: drops a fragmented AU being reassembled, and
    /// fragments up to the next one with the marker bit.
    fn lost;
    /// A new RTP timestamp began: drops a fragmented AU whose end never came. AUs are complete
    /// when their packet arrives, so this never returns one.
    fn flush;
}

/// The bit lengths of an AU header's fields (RFC 3640 §3.2.1): `sizelength`, `indexlength` and
/// `indexdeltalength`.
#[derive(Clone, Copy, Debug)]
struct AuHeaderLengths {
    size: u32,
    index: u32,
    index_delta: u32,
}

impl AacDepacketizer {
    /// A depacketizer for the `sizelength`, `indexlength` and `indexdeltalength` an SDP gives
    /// (AAC-lbr: 6, 2, 2). Errors unless `size_length` is 1..=16 and the others 0..=16.
    pub fn with_lengths(
        size_length: u8,
        index_length: u8,
        index_delta_length: u8,
    ) -> Result<Self, PayloadError> {
        let bad = |what| Err(PayloadError::InvalidConfig { format: "AAC", what });
        if !(1..=16).contains(&size_length) {
            return bad("sizelength must be 1..=16");
        }
        if index_length > 16 || index_delta_length > 16 {
            return bad("indexlength and indexdeltalength must be 0..=16");
        }
        let lengths = AuHeaderLengths {
            size: u32::from(size_length),
            index: u32::from(index_length),
            index_delta: u32::from(index_delta_length),
        };
        Ok(Self { inner: Frames::new(lengths) })
    }
}

impl AuHeaderLengths {
    /// The AU sizes in `bits` bits of AU headers.
    fn au_sizes(self, headers: &[u8], bits: usize) -> Result<Vec<usize>, PayloadError> {
        let malformed = |offset, what| PayloadError::Malformed { format: "AAC", offset, what };
        let mut r = BitReader { bytes: headers, pos: 0 };
        let mut sizes = Vec::new();
        while r.pos < bits {
            let index_bits = if sizes.is_empty() { self.index } else { self.index_delta };
            let need = (self.size + index_bits) as usize;
            if bits - r.pos < need {
                return Err(malformed(2 + r.pos / 8, "AU-headers-length is not whole AU headers"));
            }
            let size = r.read(self.size) as usize;
            let index = r.read(index_bits);
            if size == 0 {
                return Err(malformed(2 + r.pos / 8, "an AU-size of 0"));
            }
            if !sizes.is_empty() && index != 0 {
                return Err(PayloadError::UnsupportedFeature {
                    format: "AAC",
                    what: "interleaving (a non-zero AU-Index-delta)",
                });
            }
            sizes.push(size);
        }
        if sizes.is_empty() {
            return Err(malformed(0, "no AU header"));
        }
        Ok(sizes)
    }
}

/// The fragmented AU being reassembled has its whole size `expected`. After a loss, fragments are
/// dropped until one with the marker bit (the end of an AU whose start may be lost), since a
/// continuation looks like a start.
impl Framing for Frames<AuHeaderLengths> {
    const RESYNC_AT_MARKER: bool = true;

    fn take(&mut self, payload: &[u8], marker: bool) -> Result<Vec<Vec<u8>>, PayloadError> {
        let (&[hi, lo], _) = split_header("AAC", "the AU-headers-length", payload)?;
        let bits = usize::from(u16::from_be_bytes([hi, lo]));
        let data_start = 2 + bits.div_ceil(8);
        let Some(data) = payload.get(data_start..) else {
            return Err(PayloadError::Truncated {
                format: "AAC",
                what: "the AU headers",
                len: payload.len(),
                need: data_start,
            });
        };
        let sizes = self.format.au_sizes(&payload[2..data_start], bits)?;
        let malformed = |what| PayloadError::Malformed { format: "AAC", offset: data_start, what };
        let fragment = |what| PayloadError::Fragment { format: "AAC", what };
        let partial = &mut self.partial;
        if partial.active() {
            if sizes != [partial.expected] {
                return Err(fragment("a fragment's AU header differs from its first fragment's"));
            }
            if partial.bytes.len() + data.len() > partial.expected {
                return Err(fragment("fragments overrun the AU size"));
            }
            partial.bytes.extend_from_slice(data);
            let whole = partial.bytes.len() == partial.expected;
            if !whole && marker {
                return Err(fragment("the marker bit came before the AU was whole"));
            }
            return Ok(partial.finish_if(whole));
        }
        if let [size] = sizes[..]
            && size > data.len()
        {
            // The first fragment of an AU, or after a loss maybe a later one.
            if partial.resync {
                partial.resync = !marker;
                return Ok(Vec::new());
            }
            if marker {
                return Err(fragment("an AU cut short in a packet with the marker bit"));
            }
            partial.begin(data, size);
            return Ok(Vec::new());
        }
        partial.resync = false;
        if sizes.iter().sum::<usize>() != data.len() {
            return Err(malformed("the AU sizes do not add up to the data"));
        }
        let mut rest = data;
        let mut aus = Vec::with_capacity(sizes.len());
        for size in sizes {
            let (au, tail) = rest.split_at(size);
            aus.push(au.to_vec());
            rest = tail;
        }
        Ok(aus)
    }
}

/// Reads big-endian bit fields; bits past the end read as 0 (callers check lengths first).
struct BitReader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl BitReader<'_> {
    /// The next `n` (≤ 32) bits.
    fn read(&mut self, n: u32) -> u32 {
        let mut v = 0u32;
        for _ in 0..n {
            let bit = self.bytes.get(self.pos / 8).map_or(0, |b| (b >> (7 - self.pos % 8)) & 1);
            v = (v << 1) | u32::from(bit);
            self.pos += 1;
        }
        v
    }
}

/// The `a=fmtp` value (what follows `a=fmtp:<pt> `) for AAC in mode AAC-hbr with this
/// AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1), as RFC 3640 §4.1 defines it:
/// `streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;indexdeltalength=3;config=<hex>`.
#[must_use]
pub fn aac_fmtp(audio_specific_config: &[u8]) -> String {
    format!(
        "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;\
         indexdeltalength=3;config={}",
        hex(audio_specific_config)
    )
}

/// What an AudioSpecificConfig says about the stream, for the SDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AscInfo {
    /// audioObjectType (2 for AAC-LC, 5 SBR, 29 PS).
    pub object_type: u8,
    /// The sampling frequency, which is the RTP clock rate.
    pub sample_rate: u32,
    /// channelConfiguration (1..=6 channels, 7 for 7.1 i.e. 8 channels; 0 means given in a
    /// program_config_element).
    pub channel_config: u8,
}

impl AscInfo {
    /// The channel count `channel_config` stands for (ISO/IEC 14496-3 Table 1.19), or `None`
    /// for 0 (a program_config_element says) and reserved values.
    #[must_use]
    pub fn channels(self) -> Option<u8> {
        match self.channel_config {
            1..=6 => Some(self.channel_config),
            7 => Some(8),
            _ => None,
        }
    }
}

/// Reads audioObjectType, the sampling frequency and channelConfiguration from the head of an
/// AudioSpecificConfig (ISO/IEC 14496-3 §1.6.2.1); `None` if it is too short or its frequency
/// index is reserved.
#[must_use]
pub fn aac_asc_info(asc: &[u8]) -> Option<AscInfo> {
    const RATES: [u32; 13] = [
        96_000, 88_200, 64_000, 48_000, 44_100, 32_000, 24_000, 22_050, 16_000, 12_000, 11_025,
        8_000, 7_350,
    ];
    let mut r = BitReader { bytes: asc, pos: 0 };
    let mut object_type = r.read(5);
    if object_type == 31 {
        object_type = 32 + r.read(6);
    }
    let index = r.read(4);
    let sample_rate = if index == 15 { r.read(24) } else { *RATES.get(index as usize)? };
    let channel_config = r.read(4);
    if r.pos > 8 * asc.len() {
        return None;
    }
    Some(AscInfo {
        object_type: object_type as u8,
        sample_rate,
        channel_config: channel_config as u8,
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Rng, fixture_packets, round_trip};
    use super::*;

    #[test]
    fn fmtp_and_config() {
        assert_eq!(
            aac_fmtp(&[0x11, 0x90]),
            "streamtype=5;profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;\
             indexdeltalength=3;config=1190"
        );
        let lc = aac_asc_info(&[0x11, 0x90]).unwrap();
        assert_eq!(lc, AscInfo { object_type: 2, sample_rate: 48_000, channel_config: 2 });
        assert_eq!(lc.channels(), Some(2));
        assert_eq!(aac_asc_info(&[0x12, 0x10]).map(|a| a.sample_rate), Some(44_100));
        assert_eq!(aac_asc_info(&[0x11]), None);
        assert_eq!(aac_asc_info(&[0x16, 0x90]), None); // index 13 is reserved
        // An escaped object type and an explicit frequency.
        let esc = [0xf8, 0x1e, 0x01, 0x58, 0x88, 0x40];
        let info = aac_asc_info(&esc).unwrap();
        assert_eq!((info.object_type, info.sample_rate, info.channel_config), (32, 44_100, 2));
    }

    #[test]
    fn au_header_bits() {
        // A 1000-byte AU: AU-headers-length 16, then AU-size 1000 << 3 | AU-Index 0.
        let au = vec![0xaa; 1000];
        let mut p = AacPacketizer::new(1316).unwrap();
        let mut out = Vec::new();
        p.packetize(&au, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].bytes[..4], [0x00, 0x10, 0x1f, 0x40]);
        assert_eq!(out[0].bytes[4..], au[..]);
        assert!(out[0].marker);
        // The largest AU: 8191 = 0x1fff → 0xff 0xf8.
        let mut out = Vec::new();
        p.packetize(&[0; MAX_AU], &mut out).unwrap();
        assert_eq!(out.len(), 7);
        for (i, pl) in out.iter().enumerate() {
            assert_eq!(pl.bytes[..4], [0x00, 0x10, 0xff, 0xf8]);
            assert_eq!(pl.marker, i == 6);
        }
        assert_eq!(out.iter().map(|p| p.bytes.len() - 4).sum::<usize>(), MAX_AU);
        assert!(matches!(
            p.packetize(&[0; MAX_AU + 1], &mut out),
            Err(PayloadError::TooLarge { .. })
        ));
        assert!(matches!(p.packetize(&[], &mut out), Err(PayloadError::Empty { .. })));
        assert_eq!(out.len(), 7);
        assert!(AacPacketizer::new(4).is_err());
    }

    #[test]
    fn fragments_round_trip() {
        let mut rng = Rng::new(4);
        for m in [5, 6, 100, 1316] {
            let mut p = AacPacketizer::new(m).unwrap();
            let mut d = AacDepacketizer::new();
            for size in [1, m - 5, m - 4, m - 3, m, 3 * m, 2 * m + 1, 8191] {
                if size == 0 || (m < 100 && size > 600) {
                    continue;
                }
                let au = rng.bytes(size);
                let got = round_trip(&mut p, &mut d, &au, m);
                assert_eq!(got, [au], "max {m} size {size}");
            }
        }
    }

    #[test]
    fn several_aus_a_packet() {
        // Three AUs of 3, 1 and 2 bytes: 48 bits of headers.
        let payload = [0x00, 0x30, 0x00, 0x18, 0x00, 0x08, 0x00, 0x10, 1, 2, 3, 4, 5, 6];
        let mut d = AacDepacketizer::new();
        assert_eq!(d.push(&payload, true), Ok(vec![vec![1, 2, 3], vec![4], vec![5, 6]]));
        // The sizes must add up to the data.
        assert!(matches!(d.push(&payload[..13], true), Err(PayloadError::Malformed { .. })));
        assert!(matches!(
            d.push(&[0x00, 0x30, 0x00, 0x18, 0x00, 0x08, 0x00, 0x10, 1, 2, 3, 4, 5, 6, 7], true),
            Err(PayloadError::Malformed { .. })
        ));
        // A non-zero AU-Index-delta means interleaving.
        assert!(matches!(
            d.push(&[0x00, 0x20, 0x00, 0x08, 0x00, 0x09, 1, 2], true),
            Err(PayloadError::UnsupportedFeature { .. })
        ));
        // Headers length not a multiple of 16, cut short, zero headers, a zero AU-size.
        for bad in
            [&[0x00, 0x11, 0, 8, 0, 1][..], &[0x00, 0x10, 0], &[0x00], &[0, 0, 1], &[0, 0x10, 0, 0]]
        {
            assert!(d.push(bad, true).is_err(), "{bad:?}");
        }
        // AAC-lbr: 6-bit sizes, 2-bit indexes: two AUs of 2 and 3 bytes.
        let mut lbr = AacDepacketizer::with_lengths(6, 2, 2).unwrap();
        assert_eq!(
            lbr.push(&[0x00, 0x10, 0x08, 0x0c, 7, 7, 9, 9, 9], true),
            Ok(vec![vec![7, 7], vec![9, 9, 9]])
        );
        assert!(AacDepacketizer::with_lengths(0, 3, 3).is_err());
        assert!(AacDepacketizer::with_lengths(13, 17, 3).is_err());
    }

    #[test]
    fn fragment_loss_and_errors() {
        let mut p = AacPacketizer::new(104).unwrap();
        let big = vec![5u8; 350];
        let small = vec![6u8; 50];
        let mut frags = Vec::new();
        p.packetize(&big, &mut frags).unwrap();
        assert_eq!(frags.len(), 4);
        let mut one = Vec::new();
        p.packetize(&small, &mut one).unwrap();
        let mut d = AacDepacketizer::new();
        // The first fragment lost: the others are dropped, up to the marker.
        d.lost();
        for f in &frags[1..] {
            assert_eq!(d.push(&f.bytes, f.marker), Ok(vec![]));
        }
        assert_eq!(d.push(&one[0].bytes, true), Ok(vec![small.clone()]));
        // A middle fragment lost: the AU is dropped, a whole AU after it comes through at once.
        d.push(&frags[0].bytes, false).unwrap();
        d.lost();
        assert_eq!(d.push(&one[0].bytes, true), Ok(vec![small.clone()]));
        // A whole AU in the middle of fragments is an error.
        d.push(&frags[0].bytes, false).unwrap();
        assert!(d.push(&one[0].bytes, true).is_err());
        // A marker before the end.
        d.push(&frags[0].bytes, false).unwrap();
        assert!(d.push(&frags[1].bytes, true).is_err());
        // Overrun: the first fragment twice, then again.
        d.push(&frags[0].bytes, false).unwrap();
        d.push(&frags[0].bytes, false).unwrap();
        d.push(&frags[0].bytes, false).unwrap();
        assert!(d.push(&frags[0].bytes, false).is_err());
        // After an error without the marker, fragments are dropped up to the marker.
        assert_eq!(d.push(&frags[3].bytes, true), Ok(vec![]));
        // A new timestamp ends the damage.
        d.push(&frags[0].bytes, false).unwrap();
        assert_eq!(d.flush(), None);
        for (i, f) in frags.iter().enumerate() {
            let got = d.push(&f.bytes, f.marker).unwrap();
            assert_eq!(got.len(), usize::from(i == 3));
        }
    }

    /// ffmpeg's RTP packetizer (`-f rtp`, `mpeg4-generic` AAC-hbr) sending its native AAC
    /// encoder's frames, several a packet: the depacketizer splits them.
    #[test]
    fn depacketizes_ffmpeg() {
        let packets = fixture_packets(include_bytes!("testdata/aac_ffmpeg.rtp"));
        let mut d = AacDepacketizer::new();
        let mut aus = Vec::new();
        for (marker, payload) in &packets {
            aus.extend(d.push(payload, *marker).unwrap());
        }
        assert!(aus.len() > packets.len(), "{} AUs in {} packets", aus.len(), packets.len());
        let adts = include_bytes!("testdata/aac_ffmpeg.adts");
        let mut frames = Vec::new();
        let mut rest = &adts[..];
        while rest.len() >= 7 {
            let len = (usize::from(rest[3] & 3) << 11)
                | (usize::from(rest[4]) << 3)
                | usize::from(rest[5] >> 5);
            let header = if rest[1] & 1 == 1 { 7 } else { 9 };
            frames.push(rest[header..len].to_vec());
            rest = &rest[len..];
        }
        // ffmpeg does not send the AUs still buffered when the input ends.
        assert!(aus.len() + 8 > frames.len());
        assert_eq!(aus[..], frames[..aus.len()]);
    }
}
