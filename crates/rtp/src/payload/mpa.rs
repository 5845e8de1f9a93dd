//! MPEG-1 and MPEG-2 audio (layers I, II and III: MP2, MP3) over RTP, RFC 2250 §3.5.
//!
//! Each payload starts with a 4-byte header: 16 zero bits and Frag_offset, the byte offset in
//! the audio frame of the data that follows (§3.5). A payload holds whole frames, or one frame's
//! fragment when the frame does not fit. The payload type is the static 14 (`MPA`, RFC 3551 §6)
//! and the clock 90 kHz, whatever the sample rate. The marker bit is left clear: for audio it
//! marks the start of a talkspurt (RFC 3551 §4.1), and stored music has none.
//!
//! The packetizer sends one frame a packet, fragmented when it does not fit. The depacketizer
//! takes several frames a packet, splitting them by the frame length in each frame header
//! (ISO/IEC 11172-3 §2.4.2.3, 13818-3 §2.4.2.3); a free-format frame (no bit rate in its
//! header) can only come one to a packet and unfragmented.

use super::frame::{Frames, Framing, frame_depacketizer, frame_packetizer};
use super::{
    Depacketizer, MAX_ACCESS_UNIT_BYTES, Packetizer, Payload, PayloadError, check_max_payload,
    depacketizer, fragment, impl_depacketizer, impl_packetizer, non_empty, split_header,
};

/// The static RTP payload type of MPEG audio (RFC 3551 §6, Table 4).
pub const PT_MPA: u8 = 14;

frame_packetizer! {
    /// MPEG audio, RFC 2250 §3.5: one frame a packet, fragmented if larger than a payload.
    packetizer MpaPacketizer("MPA", 4-byte header, at least 8 bytes);
    /// A packetizer sending payloads of at most `max_payload` bytes (at least 8, so that a
    /// first fragment holds the whole frame header, which tells the frame's length).
    fn new;
    /// Appends the payloads of one MPEG audio frame (header included) to `out`: one if it fits,
    /// else fragments with increasing Frag_offset. The marker bit is clear.
    ///
    /// Errors (and nothing appended): an empty frame, or one too long for a 16-bit offset.
    fn packetize = cut;
}

/// [`MpaPacketizer::packetize`] of a frame that is not empty, `chunk` bytes of it a payload.
fn cut(frame: &[u8], chunk: usize, out: &mut Vec<Payload>) -> Result<(), PayloadError> {
    // The last fragment's offset must fit 16 bits.
    let max = usize::from(u16::MAX) / chunk * chunk + chunk;
    if frame.len() > max {
        return Err(PayloadError::TooLarge { format: "MPA", len: frame.len(), max });
    }
    fragment(out, frame, chunk, false, |i, _| {
        let [hi, lo] = ((i * chunk) as u16).to_be_bytes();
        [0, 0, hi, lo]
    });
    Ok(())
}

/// The length in bytes of the MPEG audio frame whose 4-byte header starts `frame`, or `None`
/// if there is no frame sync, a reserved field, or free format (bit rate index 0).
#[must_use]
pub fn mpa_frame_len(frame: &[u8]) -> Option<usize> {
    // Bit rates in kbit/s by bitrate_index 1..=14.
    const V1_L1: [u16; 14] = [32, 64, 96, 128, 160, 192, 224, 256, 288, 320, 352, 384, 416, 448];
    const V1_L2: [u16; 14] = [32, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384];
    const V1_L3: [u16; 14] = [32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320];
    const V2_L1: [u16; 14] = [32, 48, 56, 64, 80, 96, 112, 128, 144, 160, 176, 192, 224, 256];
    const V2_L23: [u16; 14] = [8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160];
    let h = frame.get(..4)?;
    if h[0] != 0xff || h[1] & 0xe0 != 0xe0 {
        return None;
    }
    // version: 0 MPEG-2.5, 1 reserved, 2 MPEG-2, 3 MPEG-1; layer: 1 III, 2 II, 3 I, 0 reserved.
    let (version, layer) = ((h[1] >> 3) & 3, (h[1] >> 1) & 3);
    let (rate_index, sr_index, padding) =
        (h[2] >> 4, (h[2] >> 2) & 3, usize::from((h[2] >> 1) & 1));
    if version == 1 || layer == 0 || !(1..=14).contains(&rate_index) || sr_index == 3 {
        return None;
    }
    let table = match (version, layer) {
        (3, 3) => &V1_L1,
        (3, 2) => &V1_L2,
        (3, _) => &V1_L3,
        (_, 3) => &V2_L1,
        _ => &V2_L23,
    };
    let bps = usize::from(table[usize::from(rate_index - 1)]) * 1000;
    let rate = [44_100, 48_000, 32_000][usize::from(sr_index)] >> (3 - version).min(2);
    Some(match (version, layer) {
        (_, 3) => (12 * bps / rate + padding) * 4,
        (3, _) | (_, 2) => 144 * bps / rate + padding,
        _ => 72 * bps / rate + padding,
    })
}

frame_depacketizer! {
    /// MPEG audio frames from RFC 2250 §3.5 payloads: several whole frames a packet, or one in
    /// fragments.
    pub struct MpaDepacketizer(Mpa);
    /// Feeds the next payload (the marker bit does not matter); returns the frames it completes.
    ///
    /// Errors: a payload cut short, data after whole frames that is no whole frame, a fragment
    /// whose offset does not follow on. A frame being reassembled is then dropped.
    fn push;
}

/// The fragmented frame being reassembled has length `expected`. After a loss, fragments
/// without their first are dropped silently.
impl Framing for Frames<Mpa> {
    fn take(&mut self, payload: &[u8], _marker: bool) -> Result<Vec<Vec<u8>>, PayloadError> {
        let (&[_, _, hi, lo], data) =
            split_header("MPA", "the MPEG audio-specific header", payload)?;
        let offset = usize::from(u16::from_be_bytes([hi, lo]));
        let fragment = |what| PayloadError::Fragment { format: "MPA", what };
        let data = non_empty("MPA", "payload", data)?;
        let partial = &mut self.partial;
        if offset > 0 {
            if !partial.active() {
                return partial.orphan("MPA");
            }
            if offset != partial.bytes.len() {
                return Err(fragment("Frag_offset does not follow on from the fragments so far"));
            }
            if offset + data.len() > partial.expected {
                return Err(fragment("fragments overrun the frame length"));
            }
            partial.bytes.extend_from_slice(data);
            return Ok(partial.finish_if(partial.bytes.len() == partial.expected));
        }
        if partial.active() {
            return Err(fragment("a new frame before the fragmented one ended"));
        }
        partial.resync = false;
        let mut frames = Vec::new();
        let mut rest = data;
        while !rest.is_empty() {
            match mpa_frame_len(rest) {
                Some(len) if len <= rest.len() => {
                    let (frame, tail) = rest.split_at(len);
                    frames.push(frame.to_vec());
                    rest = tail;
                }
                Some(len) if frames.is_empty() && len <= MAX_ACCESS_UNIT_BYTES => {
                    partial.begin(rest, len);
                    break;
                }
                // Free format, or something else: only as the whole payload.
                None if frames.is_empty() => {
                    frames.push(rest.to_vec());
                    break;
                }
                _ => {
                    return Err(PayloadError::Malformed {
                        format: "MPA",
                        offset: payload.len() - rest.len(),
                        what: "data after whole frames that is no whole frame",
                    });
                }
            }
        }
        Ok(frames)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Marker, Rng, fixture_packets, round_trip_with};
    use super::*;

    /// An MPEG-1 layer III frame at 128 kbit/s, 44.1 kHz (417 bytes, 418 padded).
    fn mp3_frame(padded: bool, rng: &mut Rng) -> Vec<u8> {
        let mut f = vec![0xff, 0xfb, 0x90 | if padded { 2 } else { 0 }, 0x64];
        let len = mpa_frame_len(&f).unwrap();
        f.extend(rng.bytes(len - 4));
        f
    }

    #[test]
    fn frame_lengths() {
        assert_eq!(mpa_frame_len(&[0xff, 0xfb, 0x90, 0x64]), Some(417));
        assert_eq!(mpa_frame_len(&[0xff, 0xfb, 0x92, 0x64]), Some(418));
        // MPEG-1 layer II, 192 kbit/s, 48 kHz: 576 bytes.
        assert_eq!(mpa_frame_len(&[0xff, 0xfd, 0xa4, 0x00]), Some(576));
        // MPEG-1 layer I, 384 kbit/s, 48 kHz: 12 × 8000 × 4 = 384 bytes.
        assert_eq!(mpa_frame_len(&[0xff, 0xff, 0xc4, 0x00]), Some(384));
        // MPEG-2 layer III, 64 kbit/s, 24 kHz: 72 × 64000 / 24000 = 192 bytes.
        assert_eq!(mpa_frame_len(&[0xff, 0xf3, 0x84, 0x00]), Some(192));
        // MPEG-2.5 layer III, 8 kbit/s, 8 kHz: 72 bytes.
        assert_eq!(mpa_frame_len(&[0xff, 0xe3, 0x18, 0x00]), Some(72));
        assert_eq!(mpa_frame_len(&[0xff, 0xfb, 0x00, 0x64]), None); // free format
        assert_eq!(mpa_frame_len(&[0xff, 0xfb, 0xf0, 0x64]), None); // bad bit rate
        assert_eq!(mpa_frame_len(&[0xff, 0xeb, 0x90, 0x64]), None); // reserved version
        assert_eq!(mpa_frame_len(&[0xff, 0xfb, 0x9c, 0x64]), None); // reserved rate
        assert_eq!(mpa_frame_len(&[0xff, 0xf9, 0x90, 0x64]), None); // reserved layer
        assert_eq!(mpa_frame_len(&[0xff, 0xfb]), None);
    }

    #[test]
    fn fragments_carry_their_offset() {
        let mut rng = Rng::new(13);
        let f = mp3_frame(true, &mut rng);
        let mut out = Vec::new();
        MpaPacketizer::new(204).unwrap().packetize(&f, &mut out).unwrap();
        let headers: Vec<&[u8]> = out.iter().map(|p| &p.bytes[..4]).collect();
        assert_eq!(headers, [[0, 0, 0, 0], [0, 0, 0, 200], [0, 0, 1, 144]]);
        assert!(out.iter().all(|p| !p.marker));
        assert_eq!(out[2].bytes.len(), 4 + 18);
        assert!(MpaPacketizer::new(7).is_err());
        // The last fragment's offset must fit 16 bits: with 4 bytes a fragment, 65,536 bytes
        // do (the last at offset 65,532), one more does not.
        let mut p = MpaPacketizer::new(8).unwrap();
        assert_eq!(
            p.packetize(&[0; 65_537], &mut out),
            Err(PayloadError::TooLarge { format: "MPA", len: 65_537, max: 65_536 })
        );
        assert!(p.packetize(&[], &mut out).is_err());
        assert_eq!(out.len(), 3);
        let mut ok = Vec::new();
        p.packetize(&[0; 65_536], &mut ok).unwrap();
        assert_eq!(ok.last().map(|p| p.bytes[..4].to_vec()), Some(vec![0, 0, 0xff, 0xfc]));
    }

    #[test]
    fn round_trips_and_several_frames() {
        let mut rng = Rng::new(14);
        let mut d = MpaDepacketizer::new();
        for m in [8, 9, 100, 421, 422, 1316] {
            let mut p = MpaPacketizer::new(m).unwrap();
            for padded in [false, true] {
                let f = mp3_frame(padded, &mut rng);
                assert_eq!(round_trip_with(&mut p, &mut d, &f, m, Marker::Never), [f]);
            }
        }
        let (a, b) = (mp3_frame(false, &mut rng), mp3_frame(true, &mut rng));
        let mut two = vec![0, 0, 0, 0];
        two.extend_from_slice(&a);
        two.extend_from_slice(&b);
        assert_eq!(d.push(&two, false), Ok(vec![a.clone(), b.clone()]));
        // A cut-off second frame, junk after a frame.
        assert!(d.push(&two[..two.len() - 1], false).is_err());
        let mut junk = two[..4 + a.len()].to_vec();
        junk.push(7);
        assert!(matches!(d.push(&junk, false), Err(PayloadError::Malformed { offset: 421, .. })));
        // Free format: the payload is the frame.
        assert_eq!(
            d.push(&[0, 0, 0, 0, 0xff, 0xfb, 0x00, 0x64, 1], false),
            Ok(vec![vec![0xff, 0xfb, 0x00, 0x64, 1]])
        );
        assert!(d.push(&[0, 0, 0, 0], false).is_err());
        assert!(d.push(&[0, 0, 0], false).is_err());
    }

    #[test]
    fn fragment_loss() {
        let mut rng = Rng::new(15);
        let f = mp3_frame(false, &mut rng);
        let mut frags = Vec::new();
        MpaPacketizer::new(104).unwrap().packetize(&f, &mut frags).unwrap();
        assert_eq!(frags.len(), 5);
        let mut d = MpaDepacketizer::new();
        assert!(d.push(&frags[1].bytes, false).is_err());
        d.lost();
        assert_eq!(d.push(&frags[2].bytes, false), Ok(vec![]));
        d.push(&frags[0].bytes, false).unwrap();
        assert!(d.push(&frags[2].bytes, false).is_err()); // frags[1] missing
        d.push(&frags[0].bytes, false).unwrap();
        assert!(d.push(&frags[0].bytes, false).is_err()); // a new frame before the end
        for (i, fr) in frags.iter().enumerate() {
            assert_eq!(d.push(&fr.bytes, false).unwrap().len(), usize::from(i == 4));
        }
    }

    /// ffmpeg's RTP packetizer (payload type 14) sending libmp3lame's frames.
    #[test]
    fn depacketizes_ffmpeg() {
        let packets = fixture_packets(include_bytes!("testdata/mp3_ffmpeg.rtp"));
        let stream = include_bytes!("testdata/mp3_ffmpeg.mp3");
        let mut d = MpaDepacketizer::new();
        let mut frames = Vec::new();
        for (marker, payload) in &packets {
            frames.extend(d.push(payload, *marker).unwrap());
        }
        assert!(frames.len() > packets.len());
        assert!(frames.iter().all(|f| mpa_frame_len(f) == Some(f.len())));
        // ffmpeg does not send the frames still buffered when the input ends.
        let sent = frames.concat();
        assert_eq!(sent, stream[..sent.len()]);
        assert!(stream.len() - sent.len() < 1300);
    }
}
