//! AC-3 over RTP, RFC 4184.
//!
//! Each payload starts with a 2-byte header (§4.1.1): six zero bits, the frame type FT (0: one
//! or more whole frames; 1: the first fragment of a frame, holding at least its first 5/8;
//! 2: a first fragment holding less; 3: a later fragment) and NF (the number of frames, or of
//! fragments the frame was cut into). The marker bit is set on a packet holding whole frames or
//! a frame's last fragment (§4.1).
//!
//! The packetizer sends one frame a packet, fragmented when it does not fit. The depacketizer
//! takes several frames a packet, splitting them by the frame size in each frame's `syncinfo`
//! (ATSC A/52 §5.4.1, Table 5.18); E-AC-3 (RFC 4598) is another format and is not taken.

use super::frame::{Frames, Framing, frame_depacketizer, frame_packetizer};
use super::{
    Depacketizer, MAX_ACCESS_UNIT_BYTES, Packetizer, Payload, PayloadError, check_max_payload,
    depacketizer, fragment, impl_depacketizer, impl_packetizer, non_empty, split_header,
};

frame_packetizer! {
    /// AC-3, RFC 4184: one frame a packet, fragmented if larger than a payload.
    packetizer Ac3Packetizer("AC-3", 2-byte header, at least 3 bytes);
    /// A packetizer sending payloads of at most `max_payload` bytes (at least 3).
    fn new;
    /// Appends the payloads of one AC-3 frame (a syncframe) to `out`: FT 0 and NF 1 if it fits,
    /// else NF fragments, the first with FT 1 (or 2 if it holds less than 5/8 of the frame),
    /// the others FT 3. The marker bit is set on the last (or only) payload.
    ///
    /// Errors (and nothing appended): an empty frame, or one needing more than 255 fragments.
    fn packetize = cut;
}

/// [`Ac3Packetizer::packetize`] of a frame that is not empty, `chunk` bytes of it a payload.
fn cut(frame: &[u8], chunk: usize, out: &mut Vec<Payload>) -> Result<(), PayloadError> {
    let Ok(nf) = u8::try_from(frame.len().div_ceil(chunk)) else {
        return Err(PayloadError::TooLarge { format: "AC-3", len: frame.len(), max: 255 * chunk });
    };
    fragment(out, frame, chunk, true, |i, n| {
        // With several fragments, every one but the last holds `chunk` bytes.
        let ft = match (n, i) {
            (1, _) => 0,
            (_, 0) if chunk * 8 >= frame.len() * 5 => 1,
            (_, 0) => 2,
            _ => 3,
        };
        [ft, nf]
    });
    Ok(())
}

/// The size in bytes of the AC-3 syncframe starting at `frame`, from its sample rate code and
/// frame size code (A/52 Table 5.18), or `None` if it does not start with a syncword, is
/// E-AC-3 (bsid above 10) or uses a reserved code.
#[must_use]
pub fn ac3_frame_len(frame: &[u8]) -> Option<usize> {
    const KBPS: [usize; 19] =
        [32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512, 576, 640];
    let h = frame.get(..6)?;
    if h[0] != 0x0b || h[1] != 0x77 || h[5] >> 3 > 10 {
        return None;
    }
    let (fscod, frmsizecod) = (h[4] >> 6, usize::from(h[4] & 0x3f));
    let kbps = *KBPS.get(frmsizecod / 2)?;
    // 1536 samples a frame, in 16-bit words: kbps × 1000 × 1536 / (16 × rate); at 44.1 kHz
    // that is not whole, and odd codes add the padding word.
    let words = match fscod {
        0 => 2 * kbps,
        1 => kbps * 96_000 / 44_100 + (frmsizecod & 1),
        2 => 3 * kbps,
        _ => return None,
    };
    Some(2 * words)
}

frame_depacketizer! {
    /// AC-3 frames from RFC 4184 payloads: several whole frames a packet, or one in fragments.
    pub struct Ac3Depacketizer(Ac3);
    /// Feeds the next payload and its marker bit; returns the frames it completes, in order.
    ///
    /// Errors: a payload cut short, whole frames that do not split by their sizes or number
    /// other than NF, fragments out of order or disagreeing on NF. A frame being reassembled is
    /// then dropped.
    fn push;
}

/// The fragmented frame being reassembled has NF `expected` and counts its fragments. After a
/// loss, later fragments without their first are dropped silently.
impl Framing for Frames<Ac3> {
    fn take(&mut self, payload: &[u8], _marker: bool) -> Result<Vec<Vec<u8>>, PayloadError> {
        let (&[ft, nf], data) = split_header("AC-3", "the payload header", payload)?;
        let ft = ft & 3;
        let malformed = |offset, what| PayloadError::Malformed { format: "AC-3", offset, what };
        let fragment = |what| PayloadError::Fragment { format: "AC-3", what };
        if nf == 0 {
            return Err(malformed(1, "NF is 0"));
        }
        let data = non_empty("AC-3", "payload", data)?;
        let partial = &mut self.partial;
        match ft {
            0..=2 if partial.active() => {
                Err(fragment("a new frame before the fragmented one's last fragment"))
            }
            0 => {
                partial.resync = false;
                if nf == 1 {
                    return Ok(vec![data.to_vec()]);
                }
                let mut frames = Vec::with_capacity(usize::from(nf));
                let mut rest = data;
                while !rest.is_empty() {
                    let offset = payload.len() - rest.len();
                    let Some(len) = ac3_frame_len(rest).filter(|&l| l <= rest.len()) else {
                        return Err(malformed(offset, "a frame with no syncinfo or cut off"));
                    };
                    let (frame, tail) = rest.split_at(len);
                    frames.push(frame.to_vec());
                    rest = tail;
                }
                if frames.len() != usize::from(nf) {
                    return Err(malformed(1, "NF differs from the frames in the payload"));
                }
                Ok(frames)
            }
            1 | 2 => {
                partial.resync = false;
                partial.begin(data, usize::from(nf));
                Ok(partial.finish_if(partial.fragments >= partial.expected))
            }
            _ => {
                if !partial.active() {
                    return partial.orphan("AC-3");
                }
                if usize::from(nf) != partial.expected {
                    return Err(fragment("NF changed between fragments of a frame"));
                }
                if partial.bytes.len() + data.len() > MAX_ACCESS_UNIT_BYTES {
                    return Err(PayloadError::TooLarge {
                        format: "AC-3",
                        len: partial.bytes.len() + data.len(),
                        max: MAX_ACCESS_UNIT_BYTES,
                    });
                }
                partial.bytes.extend_from_slice(data);
                partial.fragments += 1;
                Ok(partial.finish_if(partial.fragments >= partial.expected))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Rng, round_trip};
    use super::*;

    /// A fake syncframe of `len` bytes at 48 kHz: syncword, CRC, fscod 0 and the frame size
    /// code giving that length, bsid 8.
    fn frame(kbps_index: u8, rng: &mut Rng) -> Vec<u8> {
        let mut f = vec![0x0b, 0x77, 0, 0, kbps_index << 1, 8 << 3];
        let len = ac3_frame_len(&f).unwrap();
        f.extend(rng.bytes(len - f.len()));
        f
    }

    #[test]
    fn frame_sizes_follow_table_5_18() {
        let len = |code: u8| ac3_frame_len(&[0x0b, 0x77, 0, 0, code, 0x40]);
        assert_eq!(len(0x00), Some(128)); // 48 kHz 32 kbps: 64 words
        assert_eq!(len(0x25), Some(2560)); // 48 kHz 640 kbps
        assert_eq!(len(0x40), Some(138)); // 44.1 kHz 32 kbps: 69 words
        assert_eq!(len(0x41), Some(140)); // … and the padded one, 70
        assert_eq!(len(0x65), Some(2788)); // 44.1 kHz 640 kbps padded: 1394 words
        assert_eq!(len(0x80 | 0x14), Some(1152)); // 32 kHz 192 kbps: 576 words
        assert_eq!(len(0x26), None); // code 38 is reserved
        assert_eq!(len(0xc0), None); // fscod 3 is reserved
        assert_eq!(ac3_frame_len(&[0x0b, 0x77, 0, 0, 0, 16 << 3]), None); // E-AC-3
        assert_eq!(ac3_frame_len(&[0x0b, 0x78, 0, 0, 0, 0]), None);
    }

    #[test]
    fn payload_headers() {
        let mut rng = Rng::new(8);
        let f = frame(8, &mut rng); // 128 kbps: 512 bytes
        assert_eq!(f.len(), 512);
        let mut p = Ac3Packetizer::new(1316).unwrap();
        let mut out = Vec::new();
        p.packetize(&f, &mut out).unwrap();
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].bytes[..2], [0, 1]);
        assert!(out[0].marker);
        // 5/8 of 512 is 320: a first fragment of 330 bytes is FT 1, of 200 bytes FT 2.
        let mut out = Vec::new();
        Ac3Packetizer::new(332).unwrap().packetize(&f, &mut out).unwrap();
        let headers: Vec<[u8; 2]> = out.iter().map(|p| [p.bytes[0], p.bytes[1]]).collect();
        assert_eq!(headers, [[1, 2], [3, 2]]);
        let mut out = Vec::new();
        Ac3Packetizer::new(202).unwrap().packetize(&f, &mut out).unwrap();
        let headers: Vec<[u8; 2]> = out.iter().map(|p| [p.bytes[0], p.bytes[1]]).collect();
        assert_eq!(headers, [[2, 3], [3, 3], [3, 3]]);
        assert_eq!(out.iter().map(|p| p.marker).collect::<Vec<_>>(), [false, false, true]);
        assert!(Ac3Packetizer::new(3).unwrap().packetize(&f, &mut out).is_err());
        assert!(Ac3Packetizer::new(2).is_err());
    }

    #[test]
    fn round_trips_and_several_frames() {
        let mut rng = Rng::new(6);
        let mut d = Ac3Depacketizer::new();
        for m in [3, 50, 321, 1316] {
            let mut p = Ac3Packetizer::new(m).unwrap();
            for code in [0, 8, 18] {
                let f = frame(code, &mut rng);
                if f.len().div_ceil(m - 2) > 255 {
                    continue;
                }
                assert_eq!(round_trip(&mut p, &mut d, &f, m), [f]);
            }
        }
        let (a, b) = (frame(0, &mut rng), frame(2, &mut rng));
        let mut two = vec![0, 2];
        two.extend_from_slice(&a);
        two.extend_from_slice(&b);
        assert_eq!(d.push(&two, true), Ok(vec![a.clone(), b.clone()]));
        two[1] = 3;
        assert!(matches!(d.push(&two, true), Err(PayloadError::Malformed { .. })));
        two[1] = 2;
        assert!(d.push(&two[..two.len() - 1], true).is_err());
        assert!(d.push(&[0, 0, 1], true).is_err());
        assert!(d.push(&[0, 1], true).is_err());
        assert!(d.push(&[0], true).is_err());
    }

    #[test]
    fn fragment_loss() {
        let mut rng = Rng::new(12);
        let f = frame(10, &mut rng);
        let mut frags = Vec::new();
        Ac3Packetizer::new(202).unwrap().packetize(&f, &mut frags).unwrap();
        assert_eq!(frags.len(), 4);
        let mut d = Ac3Depacketizer::new();
        assert!(d.push(&frags[1].bytes, false).is_err());
        d.lost();
        assert_eq!(d.push(&frags[2].bytes, false), Ok(vec![]));
        assert_eq!(d.push(&frags[0].bytes, false), Ok(vec![]));
        assert!(d.push(&frags[0].bytes, false).is_err());
        let mut bad = frags[1].bytes.clone();
        bad[1] = 9;
        d.push(&frags[0].bytes, false).unwrap();
        assert!(d.push(&bad, false).is_err());
        for (i, fr) in frags.iter().enumerate() {
            assert_eq!(d.push(&fr.bytes, fr.marker).unwrap().len(), usize::from(i == 3));
        }
    }

    /// Frames from ffmpeg's AC-3 encoder (its RTP muxer does not send AC-3): split by their
    /// syncinfo, they round trip one a packet and several a packet.
    #[test]
    fn real_frames() {
        let stream = include_bytes!("testdata/ac3_ffmpeg.ac3");
        let mut frames = Vec::new();
        let mut rest = &stream[..];
        while let Some(len) = ac3_frame_len(rest) {
            frames.push(rest[..len].to_vec());
            rest = &rest[len..];
        }
        assert!(rest.is_empty());
        assert!(frames.len() > 5);
        let mut d = Ac3Depacketizer::new();
        for m in [100, 1316] {
            let mut p = Ac3Packetizer::new(m).unwrap();
            for f in &frames {
                assert_eq!(round_trip(&mut p, &mut d, f, m), std::slice::from_ref(f));
            }
        }
        let mut three = vec![0, 3];
        three.extend(frames[..3].concat());
        assert_eq!(d.push(&three, true), Ok(frames[..3].to_vec()));
    }
}
