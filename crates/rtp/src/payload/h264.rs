//! H.264 over RTP, RFC 6184, packetization-mode=1 (non-interleaved).
//!
//! The packetizer sends each NAL unit of an access unit as a Single NAL Unit packet (§5.6) if it
//! fits `max_payload`, else as FU-A fragments (§5.8), and sets the marker bit on the access
//! unit's last packet (§5.1). It sends the SPS and PPS in-band before every IDR access unit that
//! does not carry them itself, so a player that joins, seeks or lost the SDP's
//! `sprop-parameter-sets` can still decode from the next IDR. It does not aggregate (STAP-A),
//! which players need not support to play mode 1 and which saves nothing worth the complexity
//! at our payload sizes.
//!
//! The depacketizer takes Single NAL Unit, STAP-A and FU-A packets (all of mode 1, §6.3); the
//! interleaved mode's STAP-B, MTAP and FU-B are refused.
//!
//! [`h264_fmtp`] writes the `a=fmtp` parameters (§8.1): `packetization-mode`,
//! `profile-level-id` and `sprop-parameter-sets`.

use super::nal::{NalDepacketizer, NalPacketizer, Syntax, nal_format};
use super::{
    Depacketizer, Packetizer, Payload, PayloadError, base64, depacketizer, impl_depacketizer,
    impl_packetizer, unescape_prefix,
};

nal_format! {
    Syntax::H264;
    /// H.264, RFC 6184 packetization-mode=1: Single NAL Unit packets and FU-A (no STAP-A, no
    /// interleaving).
    packetizer H264Packetizer;
    /// A packetizer for access units whose NAL units carry `nal_length_size`-byte lengths
    /// (avcC's lengthSizeMinusOne + 1: 1, 2 or 4), with the SPS and PPS from the avcC (either
    /// list may be empty: then nothing of that kind is sent in-band), sending payloads of at
    /// most `max_payload` bytes (at least 3).
    ///
    /// Errors: another length size, a `max_payload` below 3, or a parameter set that is not an
    /// SPS (type 7) or PPS (type 8) NAL unit with forbidden_zero_bit clear.
    fn new(sps, pps);
    /// Appends the payloads of one access unit in AVCC form (length-prefixed NAL units, as MP4
    /// and Matroska store them) to `out`, in order.
    ///
    /// - The marker bit is set on the access unit's last payload (RFC 6184 §5.1).
    /// - Before an IDR access unit (one holding a NAL unit of type 5), the SPS and PPS given to
    ///   [`Self::new`] are sent in-band as their own packets, each kind only if the access unit
    ///   carries none of that kind: the SPS first, the PPS after the access unit's own SPS if it
    ///   has one, both before anything else.
    /// - Access unit delimiters (type 9) and filler data (12) are dropped, as are the types
    ///   RFC 6184 takes for its packets (0, 24..=31); SEI and everything else are kept.
    /// - A NAL unit longer than `max_payload` goes as FU-A fragments (§5.8): the FU indicator
    ///   holds the NAL unit's F and NRI bits and type 28, the FU header the S and E bits and the
    ///   NAL unit's type, and the NAL unit header itself is not repeated.
    ///
    /// An access unit of nothing but dropped NAL units yields no payload.
    ///
    /// Errors (and nothing appended): a length prefix cut off or running past the end, a
    /// zero-length NAL unit, or one with forbidden_zero_bit set, naming the byte offset.
    fn packetize;
    /// Reassembles H.264 access units from RFC 6184 payloads (Single NAL Unit, STAP-A, FU-A).
    ///
    /// What comes out is every NAL unit received for the access unit, in order, each prefixed with
    /// its 4-byte big-endian length (AVCC with lengthSizeMinusOne = 3) — including the in-band
    /// SPS and PPS that [`H264Packetizer`] sends before an IDR; nothing is added or dropped.
    depacketizer H264Depacketizer;
    /// Feeds the next payload of the track and its marker bit; returns the access unit the
    /// marker bit ends, if it holds any NAL unit.
    ///
    /// Errors: a payload cut short, a malformed STAP-A, fragments out of order (a continuation
    /// without its start, a start or another packet before the end), STAP-B/MTAP/FU-B, or an
    /// access unit beyond [`super::MAX_ACCESS_UNIT_BYTES`]. The access unit being assembled is
    /// then dropped, and so is the rest of it up to the next marker bit.
    fn push;
}

/// The `profile-level-id` of an SPS NAL unit (RFC 6184 §8.1): profile_idc, the constraint flags
/// byte and level_idc, which are the three bytes after the NAL unit header. `None` if the SPS
/// is shorter.
#[must_use]
pub fn h264_profile_level_id(sps: &[u8]) -> Option<[u8; 3]> {
    match unescape_prefix(sps.get(1..)?, 3)[..] {
        [p, c, l] => Some([p, c, l]),
        _ => None,
    }
}

/// The `a=fmtp` value (what follows `a=fmtp:<pt> `) for an H.264 stream with this SPS and these
/// PPS NAL units: `packetization-mode=1;profile-level-id=42C00B;sprop-parameter-sets=<SPS>,<PPS>`
/// (RFC 6184 §8.1), with the parameter sets in base64, no spaces and no trailing `;`.
/// `profile-level-id` is left out if the SPS is too short to hold it, `sprop-parameter-sets` if
/// there are no parameter sets at all.
#[must_use]
pub fn h264_fmtp(sps: &[u8], pps: &[Vec<u8>]) -> String {
    let mut fmtp = String::from("packetization-mode=1");
    if let Some(id) = h264_profile_level_id(sps) {
        fmtp.push_str(&format!(";profile-level-id={:02X}{:02X}{:02X}", id[0], id[1], id[2]));
    }
    let sets: Vec<String> = std::iter::once(sps)
        .filter(|s| !s.is_empty())
        .chain(pps.iter().map(Vec::as_slice))
        .map(base64)
        .collect();
    if !sets.is_empty() {
        fmtp.push_str(";sprop-parameter-sets=");
        fmtp.push_str(&sets.join(","));
    }
    fmtp
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Rng, avcc, fixture_packets, round_trip};
    use super::*;

    /// x264's SPS and PPS for Baseline 160x120 (`ffmpeg -f lavfi -i testsrc=s=160x120
    /// -pix_fmt yuv420p -profile:v baseline -c:v libx264`).
    const SPS: &[u8] = &[
        0x67, 0x42, 0xc0, 0x0b, 0xd9, 0x02, 0x84, 0x7e, 0x5c, 0x04, 0x40, 0x00, 0x00, 0x03, 0x00,
        0x40, 0x00, 0x00, 0x0c, 0x83, 0xc5, 0x0a, 0x92,
    ];
    const PPS: &[u8] = &[0x68, 0xcb, 0x83, 0xcb, 0x20];

    fn packetizer(len_size: u8, max_payload: usize) -> H264Packetizer {
        H264Packetizer::new(len_size, vec![SPS.to_vec()], vec![PPS.to_vec()], max_payload).unwrap()
    }

    /// A NAL unit of type `t` (NRI 3) and `len` bytes in all.
    fn nal(t: u8, len: usize, rng: &mut Rng) -> Vec<u8> {
        let mut n = vec![0x60 | t];
        n.extend((1..len).map(|_| rng.byte()));
        n
    }

    #[test]
    fn fmtp_for_x264_baseline() {
        assert_eq!(
            h264_fmtp(SPS, &[PPS.to_vec()]),
            "packetization-mode=1;profile-level-id=42C00B;\
             sprop-parameter-sets=Z0LAC9kChH5cBEAAAAMAQAAADIPFCpI=,aMuDyyA="
        );
        assert_eq!(h264_profile_level_id(SPS), Some([0x42, 0xc0, 0x0b]));
        assert_eq!(h264_profile_level_id(&SPS[..3]), None);
        assert_eq!(h264_fmtp(&[], &[]), "packetization-mode=1");
        assert_eq!(
            h264_fmtp(&[], &[PPS.to_vec()]),
            "packetization-mode=1;sprop-parameter-sets=aMuDyyA="
        );
    }

    #[test]
    fn fu_a_bytes_follow_rfc_6184_section_5_8() {
        // An IDR slice NAL unit, F=0 NRI=3 type 5, of 11 bytes; payloads of at most 6 bytes
        // hold 4 bytes of NAL payload after the FU indicator and FU header.
        let idr: Vec<u8> = std::iter::once(0x65).chain(1..=10).collect();
        let mut p = H264Packetizer::new(4, vec![], vec![], 6).unwrap();
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&idr]), &mut out).unwrap();
        let want: [(&[u8], bool); 3] = [
            (&[0x7c, 0x85, 1, 2, 3, 4], false), // FU indicator 0x60|28; S=1, type 5
            (&[0x7c, 0x05, 5, 6, 7, 8], false), // neither S nor E
            (&[0x7c, 0x45, 9, 10], true),       // E=1, and the AU's last packet
        ];
        assert_eq!(out.len(), want.len());
        for (got, (bytes, marker)) in out.iter().zip(want) {
            assert_eq!(got.bytes, bytes);
            assert_eq!(got.marker, marker);
        }
        // The F bit and NRI come from the NAL unit: NRI 1, type 1.
        let mut out = Vec::new();
        let slice: Vec<u8> = std::iter::once(0x21).chain(1..=6).collect();
        p.packetize(&avcc(4, &[&slice]), &mut out).unwrap();
        assert_eq!(out[0].bytes, [0x3c, 0x81, 1, 2, 3, 4]);
        assert_eq!(out[1].bytes, [0x3c, 0x41, 5, 6]);
    }

    #[test]
    fn round_trips_at_every_interesting_size() {
        let mut rng = Rng::new(1);
        for (len_size, m) in [(1u8, 60usize), (2, 1316), (4, 1316), (4, 3)] {
            let sizes = [1, m - 1, m, m + 1, 3 * m, 2, 7];
            for &size in &sizes {
                for t in [1u8, 5, 6] {
                    if len_size == 1 && size > 255 {
                        continue;
                    }
                    let n = nal(t, size, &mut rng);
                    let other = nal(1, 1 + size / 2, &mut rng);
                    let mut p = packetizer(len_size, m);
                    let mut d = H264Depacketizer::new();
                    let got = round_trip(&mut p, &mut d, &avcc(len_size, &[&n, &other]), m);
                    let expected = if t == 5 {
                        avcc(4, &[SPS, PPS, &n, &other])
                    } else {
                        avcc(4, &[&n, &other])
                    };
                    assert_eq!(
                        got,
                        vec![expected],
                        "len_size {len_size} max {m} size {size} type {t}"
                    );
                }
            }
        }
    }

    #[test]
    fn random_access_units_round_trip() {
        let mut rng = Rng::new(7);
        let mut d = H264Depacketizer::new();
        for i in 0..300 {
            let m = 3 + rng.below(1400);
            let mut p = packetizer(4, m);
            let count = 1 + rng.below(6);
            let nals: Vec<Vec<u8>> = (0..count)
                .map(|_| {
                    let t = [1, 1, 5, 6, 7, 8][rng.below(6)];
                    nal(t, 1 + rng.below(4000), &mut rng)
                })
                .collect();
            let refs: Vec<&[u8]> = nals.iter().map(Vec::as_slice).collect();
            let got = round_trip(&mut p, &mut d, &avcc(4, &refs), m);
            let types: Vec<u8> = nals.iter().map(|n| n[0] & 0x1f).collect();
            let idr = types.contains(&5);
            let mut want: Vec<&[u8]> = Vec::new();
            let (has_sps, has_pps) = (types.contains(&7), types.contains(&8));
            let mut settled = 0;
            for n in &refs {
                let kind = match n[0] & 0x1f {
                    7 => 0,
                    8 => 1,
                    _ => 2,
                };
                if idr {
                    while settled < kind {
                        if settled == 0 && !has_sps {
                            want.push(SPS);
                        }
                        if settled == 1 && !has_pps {
                            want.push(PPS);
                        }
                        settled += 1;
                    }
                }
                want.push(n);
            }
            assert_eq!(got, vec![avcc(4, &want)], "access unit {i}");
        }
    }

    #[test]
    fn parameter_sets_go_before_each_idr_exactly_once() {
        let mut rng = Rng::new(3);
        let mut p = packetizer(4, 1316);
        let idr = nal(5, 3000, &mut rng);
        let sei = nal(6, 20, &mut rng);
        let slice = nal(1, 500, &mut rng);
        let aud = [0x09, 0xf0];
        let filler = [0x0c, 0xff, 0xff, 0x80];
        let first_bytes = |out: &[Payload]| -> Vec<u8> { out.iter().map(|p| p.bytes[0]).collect() };

        // AUD, SEI, IDR: AUD dropped, SPS and PPS first, once.
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&aud, &sei, &idr]), &mut out).unwrap();
        assert_eq!(first_bytes(&out), [0x67, 0x68, 0x66, 0x7c, 0x7c, 0x7c]);
        assert_eq!(out[0].bytes, SPS);
        assert_eq!(out[1].bytes, PPS);
        // A non-IDR access unit: nothing in-band, filler dropped.
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&slice, &filler]), &mut out).unwrap();
        assert_eq!(first_bytes(&out), [0x61]);
        assert!(out[0].marker);
        // The next IDR gets them again.
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&idr]), &mut out).unwrap();
        assert_eq!(first_bytes(&out)[..3], [0x67, 0x68, 0x7c]);
        // An IDR that carries its own SPS and PPS: not duplicated.
        let own_sps = [0x67, 0x42, 0x00, 0x1e, 0xaa];
        let own_pps = [0x68, 0xee];
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&own_sps, &own_pps, &idr]), &mut out).unwrap();
        assert_eq!(first_bytes(&out), [0x67, 0x68, 0x7c, 0x7c, 0x7c]);
        assert_eq!(out[0].bytes, own_sps);
        assert_eq!(out[1].bytes, own_pps);
        // One that carries only its SPS: our PPS goes after it.
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&own_sps, &sei, &idr]), &mut out).unwrap();
        assert_eq!(first_bytes(&out), [0x67, 0x68, 0x66, 0x7c, 0x7c, 0x7c]);
        assert_eq!(out[0].bytes, own_sps);
        assert_eq!(out[1].bytes, PPS);
        // One that carries only its PPS: our SPS goes before it.
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&own_pps, &idr]), &mut out).unwrap();
        assert_eq!(out[0].bytes, SPS);
        assert_eq!(out[1].bytes, own_pps);
        assert_eq!(out.iter().filter(|p| p.marker).count(), 1);
        // Without parameter sets from the avcC, nothing is inserted.
        let mut bare = H264Packetizer::new(4, vec![], vec![], 1316).unwrap();
        let mut out = Vec::new();
        bare.packetize(&avcc(4, &[&idr]), &mut out).unwrap();
        assert_eq!(first_bytes(&out), [0x7c, 0x7c, 0x7c]);
        // Only dropped NAL units: no payload at all.
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&aud]), &mut out).unwrap();
        assert!(out.is_empty());
        p.packetize(&[], &mut out).unwrap();
        assert!(out.is_empty());
    }

    #[test]
    fn malformed_access_units_name_the_offset() {
        let mut p = packetizer(4, 1316);
        let mut out = vec![Payload { bytes: vec![1], marker: true }];
        let cases: [(&[u8], PayloadError); 5] = [
            (
                &[0, 0, 0, 2, 0x65, 1, 0, 0, 0, 9, 0x41],
                PayloadError::NalPastEnd { offset: 6, len: 9, remaining: 1 },
            ),
            (&[0, 0, 0, 1, 0x65, 0, 0, 0, 0], PayloadError::EmptyNal { offset: 5 }),
            (&[0, 0, 0, 1, 0x65, 0, 0, 0, 1, 0xe5], PayloadError::ForbiddenBit { offset: 9 }),
            (
                &[0, 0, 0, 1, 0x65, 0, 0],
                PayloadError::TruncatedLength { offset: 5, len_size: 4, remaining: 2 },
            ),
            (
                &[0xff, 0xff, 0xff, 0xff, 1],
                PayloadError::NalPastEnd { offset: 0, len: 0xffff_ffff, remaining: 1 },
            ),
        ];
        for (au, err) in cases {
            assert_eq!(p.packetize(au, &mut out), Err(err.clone()));
            assert_eq!(out.len(), 1, "nothing appended on {err}");
        }
        assert_eq!(
            p.packetize(&[0, 0, 0, 2, 0x65, 1, 0, 0, 0, 9, 0x41], &mut out)
                .unwrap_err()
                .to_string(),
            "NAL length prefix at byte 6 announces 9 bytes, only 1 follow in the access unit"
        );
        assert!(matches!(
            H264Packetizer::new(3, vec![], vec![], 1316),
            Err(PayloadError::NalLengthSize(3))
        ));
        assert!(matches!(
            H264Packetizer::new(4, vec![], vec![], 2),
            Err(PayloadError::MaxPayloadTooSmall { min: 3, .. })
        ));
        assert!(matches!(
            H264Packetizer::new(4, vec![PPS.to_vec()], vec![], 1316),
            Err(PayloadError::ParameterSet { kind: "SPS", index: 0, .. })
        ));
        assert!(matches!(
            H264Packetizer::new(4, vec![], vec![vec![]], 1316),
            Err(PayloadError::ParameterSet { kind: "PPS", index: 0, .. })
        ));
    }

    #[test]
    fn depacketizer_takes_stap_a() {
        let mut d = H264Depacketizer::new();
        // STAP-A (NRI 3, type 24) with the SPS and PPS, then an IDR slice alone.
        let mut stap = vec![0x78];
        for n in [SPS, PPS] {
            stap.extend_from_slice(&(n.len() as u16).to_be_bytes());
            stap.extend_from_slice(n);
        }
        assert_eq!(d.push(&stap, false), Ok(None));
        let idr = [0x65, 0x88, 0x84];
        assert_eq!(d.push(&idr, true), Ok(Some(avcc(4, &[SPS, PPS, &idr]))));
        // Malformed aggregates: a size past the end, a cut size, an empty one, a zero size.
        for bad in [&[0x78, 0, 9, 0x67][..], &[0x78, 0, 1, 0x67, 0], &[0x78], &[0x78, 0, 0]] {
            assert!(d.push(bad, true).is_err(), "{bad:?}");
            assert_eq!(d.push(&idr, true), Ok(Some(avcc(4, &[&idr]))));
        }
    }

    #[test]
    fn depacketizer_recovers_from_loss() {
        let mut rng = Rng::new(5);
        let big = nal(1, 5000, &mut rng);
        let small = nal(1, 100, &mut rng);
        let mut p = packetizer(4, 1316);
        let mut a = Vec::new();
        p.packetize(&avcc(4, &[&big]), &mut a).unwrap();
        assert_eq!(a.len(), 4);
        let mut d = H264Depacketizer::new();
        // Lose the second fragment: the caller says so, the rest of the AU is dropped.
        assert_eq!(d.push(&a[0].bytes, false), Ok(None));
        d.lost();
        assert_eq!(d.push(&a[2].bytes, false), Ok(None));
        assert_eq!(d.push(&a[3].bytes, true), Ok(None));
        assert_eq!(d.push(&small, true), Ok(Some(avcc(4, &[&small]))));
        // Without being told: the continuation without its start is an error, then the rest of
        // the AU up to the marker is dropped.
        assert!(matches!(d.push(&a[1].bytes, false), Err(PayloadError::Fragment { .. })));
        assert_eq!(d.push(&a[2].bytes, false), Ok(None));
        assert_eq!(d.push(&a[3].bytes, true), Ok(None));
        assert_eq!(d.push(&small, true), Ok(Some(avcc(4, &[&small]))));
        // Lose the end: a new start before the end is an error.
        assert_eq!(d.push(&a[0].bytes, false), Ok(None));
        assert!(d.push(&a[0].bytes, false).is_err());
        assert_eq!(d.push(&a[3].bytes, true), Ok(None));
        // A marker inside a fragmented NAL unit drops the AU.
        assert_eq!(d.push(&a[0].bytes, false), Ok(None));
        assert!(d.push(&a[1].bytes, true).is_err());
        // A lost marker packet: flush on the next timestamp returns the whole AU before it.
        assert_eq!(d.push(&small, false), Ok(None));
        assert_eq!(d.flush(), Some(avcc(4, &[&small])));
        assert_eq!(d.flush(), None);
        // Loss, then a new timestamp: flush stops the dropping, the next AU comes whole.
        assert_eq!(d.push(&a[0].bytes, false), Ok(None));
        d.lost();
        assert_eq!(d.flush(), None);
        for (i, pl) in a.iter().enumerate() {
            let got = d.push(&pl.bytes, pl.marker).unwrap();
            assert_eq!(got.is_some(), i == 3);
        }
        // Interleaved-mode packets and undefined types.
        assert!(matches!(
            d.push(&[0x7d, 0x85, 1], true),
            Err(PayloadError::Unsupported { packet_type: 29, .. })
        ));
        assert_eq!(d.push(&[0x1e, 1, 2], true), Ok(None));
        assert!(matches!(d.push(&[], true), Err(PayloadError::Truncated { .. })));
        assert!(matches!(d.push(&[0x7c], true), Err(PayloadError::Truncated { .. })));
    }

    /// ffmpeg's own RTP packetizer (`-f rtp -pkt_size 300`) sending ten frames of x264 Baseline
    /// at 160x120: the depacketizer gives back ten access units holding exactly the NAL units
    /// of the elementary stream.
    #[test]
    fn depacketizes_ffmpeg() {
        let packets = fixture_packets(include_bytes!("testdata/h264_ffmpeg.rtp"));
        let stream = include_bytes!("testdata/h264_ffmpeg.h264");
        let mut d = H264Depacketizer::new();
        let mut aus = Vec::new();
        let mut kinds = [false; 32];
        for (marker, payload) in &packets {
            kinds[usize::from(payload[0] & 0x1f)] = true;
            aus.extend(d.push(payload, *marker).unwrap());
        }
        assert!(kinds[28], "ffmpeg sent FU-A");
        assert_eq!(aus.len(), 10);
        let want: Vec<u8> = aus.concat();
        assert_eq!(want, super::super::testutil::annexb_to_avcc(stream));
    }
}
