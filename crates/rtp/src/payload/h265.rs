//! H.265 over RTP, RFC 7798, without decoding-order numbers (sprop-max-don-diff = 0).
//!
//! The packetizer sends each NAL unit of an access unit as a single NAL unit packet (§4.4.1) if
//! it fits `max_payload`, else as fragmentation units (FU, type 49, §4.4.3), and sets the marker
//! bit on the access unit's last packet (§4.1). Before every IRAP access unit (NAL unit types
//! 16..=23: BLA, IDR, CRA) that does not carry them it sends the VPS, SPS and PPS in-band, so a
//! player can start at any random access point. It does not aggregate (AP) and never sends
//! DONL fields or PACI packets.
//!
//! The depacketizer takes single NAL unit packets, APs and FUs without DONL (§4.4.1–§4.4.3);
//! PACI packets (§4.4.4) are refused.
//!
//! [`h265_fmtp`] writes the `a=fmtp` parameters (§7.1): `sprop-vps`, `sprop-sps`, `sprop-pps`
//! (ExoPlayer needs all three), and `profile-id`, `tier-flag` and `level-id` read from the
//! fixed-size head of the `profile_tier_level()` syntax (H.265 §7.3.3).

use super::nal::{NalDepacketizer, NalPacketizer, Syntax, nal_format};
use super::{
    Depacketizer, Packetizer, Payload, PayloadError, base64, depacketizer, impl_depacketizer,
    impl_packetizer, unescape_prefix,
};

nal_format! {
    Syntax::H265;
    /// H.265, RFC 7798: single NAL unit packets and FUs (type 49), no APs; VPS, SPS and PPS in-band
    /// before IRAP pictures; access unit delimiters dropped.
    packetizer H265Packetizer;
    /// A packetizer for access units whose NAL units carry `nal_length_size`-byte lengths
    /// (hvcC's lengthSizeMinusOne + 1: 1, 2 or 4), with the parameter sets from the hvcC (any
    /// list may be empty), sending payloads of at most `max_payload` bytes (at least 4).
    ///
    /// Errors: another length size, a `max_payload` below 4, or a parameter set that is not a
    /// VPS (type 32), SPS (33) or PPS (34) NAL unit of at least two bytes with
    /// forbidden_zero_bit clear.
    fn new(vps, sps, pps);
    /// Appends the payloads of one access unit in hvcC form (length-prefixed NAL units, as MP4
    /// and Matroska store them) to `out`, in order.
    ///
    /// - The marker bit is set on the access unit's last payload (RFC 7798 §4.1).
    /// - Before an IRAP access unit (one holding a NAL unit of type 16..=23) the VPS, SPS and
    ///   PPS given to [`Self::new`] are sent in-band as their own packets, each kind only if the
    ///   access unit carries none of that kind, in the order VPS, SPS, PPS and before anything
    ///   else that is not a parameter set.
    /// - Access unit delimiters (type 35) and filler data (38) are dropped, as are the types
    ///   RFC 7798 takes for its packets (48..=63); SEI and everything else are kept.
    /// - A NAL unit longer than `max_payload` goes as FUs (§4.4.3): the payload header is the
    ///   NAL unit header with type 49, the FU header holds the S and E bits and the NAL unit's
    ///   type, and the NAL unit header itself is not repeated.
    ///
    /// Errors (and nothing appended): a length prefix cut off or running past the end, a
    /// zero-length NAL unit, one shorter than its two-byte header, or one with
    /// forbidden_zero_bit set, naming the byte offset.
    fn packetize;
    /// Reassembles H.265 access units from RFC 7798 payloads (single NAL unit, AP and FU, without
    /// DONL).
    ///
    /// What comes out is every NAL unit received for the access unit, in order, each prefixed with
    /// its 4-byte big-endian length (hvcC with lengthSizeMinusOne = 3) — including the in-band
    /// VPS, SPS and PPS that [`H265Packetizer`] sends before an IRAP picture; nothing is added or
    /// dropped.
    depacketizer H265Depacketizer;
    /// Feeds the next payload of the track and its marker bit; returns the access unit the
    /// marker bit ends, if it holds any NAL unit.
    ///
    /// Errors: a payload cut short, a malformed AP, fragments out of order, a PACI packet, or
    /// an access unit beyond [`super::MAX_ACCESS_UNIT_BYTES`]. The access unit being assembled
    /// is then dropped, and so is the rest of it up to the next marker bit.
    fn push;
}

/// The general profile, tier and level of an H.265 stream, from the head of its
/// `profile_tier_level()` (H.265 §7.3.3), as RFC 7798 §7.1 names them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct H265Profile {
    /// general_profile_space (`profile-space`, 0 for every profile H.265 defines).
    pub profile_space: u8,
    /// general_tier_flag (`tier-flag`: false Main tier, true High tier).
    pub tier_flag: bool,
    /// general_profile_idc (`profile-id`: 1 Main, 2 Main 10, 3 Main Still Picture, 4 RExt…).
    pub profile_id: u8,
    /// general_profile_compatibility_flag[0..32] (`profile-compatibility-indicator`).
    pub compatibility_flags: u32,
    /// The 48 bits from general_progressive_source_flag on (`interop-constraints`).
    pub constraint_flags: [u8; 6],
    /// general_level_idc (`level-id`: 30 × the level number, e.g. 93 for level 3.1).
    pub level_id: u8,
}

/// The profile, tier and level in a VPS (NAL type 32) or SPS (type 33) NAL unit, or `None` if
/// it is neither or too short. Emulation prevention bytes are taken out first.
#[must_use]
pub fn h265_profile(nal: &[u8]) -> Option<H265Profile> {
    // Bits before profile_tier_level() after the 2-byte NAL header: the VPS has 4 bytes
    // (vps_video_parameter_set_id … vps_reserved_0xffff_16bits, §7.3.2.1), the SPS 1 byte
    // (sps_video_parameter_set_id, sps_max_sub_layers_minus1, sps_temporal_id_nesting_flag,
    // §7.3.2.2).
    let skip = match Syntax::H265.nal_type(*nal.first()?) {
        32 => 4,
        33 => 1,
        _ => return None,
    };
    let rbsp = unescape_prefix(nal.get(2..)?, skip + 12);
    let ptl = rbsp.get(skip..skip + 12)?;
    Some(H265Profile {
        profile_space: ptl[0] >> 6,
        tier_flag: ptl[0] & 0x20 != 0,
        profile_id: ptl[0] & 0x1f,
        compatibility_flags: u32::from_be_bytes([ptl[1], ptl[2], ptl[3], ptl[4]]),
        constraint_flags: [ptl[5], ptl[6], ptl[7], ptl[8], ptl[9], ptl[10]],
        level_id: ptl[11],
    })
}

/// The `a=fmtp` value (what follows `a=fmtp:<pt> `) for an H.265 stream with these parameter
/// sets: `sprop-vps=<b64>;sprop-sps=<b64>;sprop-pps=<b64>;profile-id=1;tier-flag=0;level-id=93`
/// (RFC 7798 §7.1), no spaces and no trailing `;`. An empty parameter set is left out; the
/// profile, tier and level come from the SPS (else the VPS) and are left out if neither holds
/// them; `profile-space` is written only when it is not 0.
#[must_use]
pub fn h265_fmtp(vps: &[u8], sps: &[u8], pps: &[u8]) -> String {
    let mut params: Vec<String> = [("sprop-vps", vps), ("sprop-sps", sps), ("sprop-pps", pps)]
        .into_iter()
        .filter(|(_, set)| !set.is_empty())
        .map(|(name, set)| format!("{name}={}", base64(set)))
        .collect();
    if let Some(p) = h265_profile(sps).or_else(|| h265_profile(vps)) {
        if p.profile_space != 0 {
            params.push(format!("profile-space={}", p.profile_space));
        }
        params.push(format!("profile-id={}", p.profile_id));
        params.push(format!("tier-flag={}", u8::from(p.tier_flag)));
        params.push(format!("level-id={}", p.level_id));
    }
    params.join(";")
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{Rng, annexb_to_avcc, avcc, fixture_packets, round_trip};
    use super::*;

    /// x265's parameter sets for Main 160x120 (`ffmpeg -f lavfi -i testsrc=s=160x120
    /// -pix_fmt yuv420p -c:v libx265`).
    const VPS: &[u8] = &[
        0x40, 0x01, 0x0c, 0x01, 0xff, 0xff, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x90, 0x00, 0x00,
        0x03, 0x00, 0x00, 0x03, 0x00, 0x1e, 0x95, 0x98, 0x09,
    ];
    const SPS: &[u8] = &[
        0x42, 0x01, 0x01, 0x01, 0x60, 0x00, 0x00, 0x03, 0x00, 0x90, 0x00, 0x00, 0x03, 0x00, 0x00,
        0x03, 0x00, 0x1e, 0xa0, 0x14, 0x20, 0x79, 0x65, 0x95, 0x9a, 0x49, 0x32, 0xbc, 0x05, 0xa0,
        0x20, 0x00, 0x00, 0x03, 0x00, 0x20, 0x00, 0x00, 0x03, 0x03, 0x21,
    ];
    const PPS: &[u8] = &[0x44, 0x01, 0xc1, 0x72, 0xb4, 0x62, 0x40];

    fn packetizer(len_size: u8, max_payload: usize) -> H265Packetizer {
        let sets = |s: &[u8]| vec![s.to_vec()];
        H265Packetizer::new(len_size, sets(VPS), sets(SPS), sets(PPS), max_payload).unwrap()
    }

    /// A NAL unit of type `t` (layer 0, TID 1) and `len` bytes in all (at least 2).
    fn nal(t: u8, len: usize, rng: &mut Rng) -> Vec<u8> {
        let mut n = vec![t << 1, 0x01];
        n.extend((2..len).map(|_| rng.byte()));
        n
    }

    #[test]
    fn fmtp_and_profile_for_x265_main() {
        assert_eq!(
            h265_fmtp(VPS, SPS, PPS),
            "sprop-vps=QAEMAf//AWAAAAMAkAAAAwAAAwAelZgJ;\
             sprop-sps=QgEBAWAAAAMAkAAAAwAAAwAeoBQgeWWVmkkyvAWgIAAAAwAgAAADAyE=;\
             sprop-pps=RAHBcrRiQA==;profile-id=1;tier-flag=0;level-id=30"
        );
        let main = H265Profile {
            profile_space: 0,
            tier_flag: false,
            profile_id: 1,
            compatibility_flags: 0x6000_0000,
            constraint_flags: [0x90, 0, 0, 0, 0, 0],
            level_id: 30,
        };
        assert_eq!(h265_profile(SPS), Some(main));
        assert_eq!(h265_profile(VPS), Some(main));
        assert_eq!(h265_profile(PPS), None);
        assert_eq!(h265_profile(&SPS[..10]), None);
        assert_eq!(h265_fmtp(VPS, &[], PPS).split(';').count(), 5);
        assert_eq!(h265_fmtp(&[], &[], &[]), "");
        // High tier, level 5.1, profile space 1.
        let mut sps = vec![0x42, 0x01, 0x01, 0x62, 0x40, 0, 0, 0];
        sps.extend_from_slice(&[0x11; 6]);
        sps.push(153);
        assert_eq!(
            h265_fmtp(&[], &sps, &[]).split_once(";profile").unwrap().1,
            "-space=1;profile-id=2;tier-flag=1;level-id=153"
        );
    }

    #[test]
    fn fu_bytes_follow_rfc_7798_section_4_4_3() {
        // An IDR_W_RADL NAL unit (type 19), LayerId 0, TID 1, of 12 bytes; payloads of at most
        // 7 bytes hold 4 bytes of NAL payload after the payload header and FU header.
        let idr: Vec<u8> = [0x26, 0x01].into_iter().chain(1..=10).collect();
        let mut p = H265Packetizer::new(4, vec![], vec![], vec![], 7).unwrap();
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&idr]), &mut out).unwrap();
        let want: [(&[u8], bool); 3] = [
            (&[0x62, 0x01, 0x93, 1, 2, 3, 4], false), // type 49 << 1; S=1, type 19
            (&[0x62, 0x01, 0x13, 5, 6, 7, 8], false),
            (&[0x62, 0x01, 0x53, 9, 10], true), // E=1
        ];
        assert_eq!(out.len(), want.len());
        for (got, (bytes, marker)) in out.iter().zip(want) {
            assert_eq!(got.bytes, bytes);
            assert_eq!(got.marker, marker);
        }
        // LayerId's top bit and the TID are kept: header 0x03 0x0b (type 1, LayerId 33, TID 3).
        let slice: Vec<u8> = [0x03, 0x0b].into_iter().chain(1..=8).collect();
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&slice]), &mut out).unwrap();
        assert_eq!(out[0].bytes, [0x63, 0x0b, 0x81, 1, 2, 3, 4]);
        assert_eq!(out[1].bytes, [0x63, 0x0b, 0x41, 5, 6, 7, 8]);
        let mut d = H265Depacketizer::new();
        let mut got = Vec::new();
        for pl in &out {
            d.push_into(&pl.bytes, pl.marker, &mut got).unwrap();
        }
        assert_eq!(got, [avcc(4, &[&slice])]);
    }

    #[test]
    fn round_trips_at_every_interesting_size() {
        let mut rng = Rng::new(11);
        for (len_size, m) in [(1u8, 60usize), (2, 1316), (4, 1316), (4, 4)] {
            for size in [2, 3, m - 1, m, m + 1, 3 * m] {
                for t in [1u8, 19, 21, 39] {
                    if len_size == 1 && size > 255 {
                        continue;
                    }
                    let n = nal(t, size, &mut rng);
                    let other = nal(1, 2 + size / 2, &mut rng);
                    let mut p = packetizer(len_size, m);
                    let mut d = H265Depacketizer::new();
                    let got = round_trip(&mut p, &mut d, &avcc(len_size, &[&n, &other]), m);
                    let want = if (16..=23).contains(&t) {
                        avcc(4, &[VPS, SPS, PPS, &n, &other])
                    } else {
                        avcc(4, &[&n, &other])
                    };
                    assert_eq!(got, [want], "len_size {len_size} max {m} size {size} type {t}");
                }
            }
        }
    }

    #[test]
    fn parameter_sets_go_before_each_irap_exactly_once() {
        let mut rng = Rng::new(2);
        let mut p = packetizer(4, 1316);
        let aud = [0x46, 0x01, 0x50];
        let sei = nal(39, 30, &mut rng);
        let cra = nal(21, 2000, &mut rng);
        let trail = nal(1, 300, &mut rng);
        let types = |out: &[Payload]| -> Vec<u8> { out.iter().map(|p| p.bytes[0] >> 1).collect() };
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&aud, &sei, &cra]), &mut out).unwrap();
        assert_eq!(types(&out), [32, 33, 34, 39, 49, 49]);
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&trail, &aud]), &mut out).unwrap();
        assert_eq!(types(&out), [1]);
        assert!(out[0].marker);
        // Its own VPS and SPS but not PPS: ours goes after its SPS.
        let own_vps = [0x40, 0x01, 7];
        let own_sps = [0x42, 0x01, 8];
        let mut out = Vec::new();
        p.packetize(&avcc(4, &[&own_vps, &own_sps, &cra]), &mut out).unwrap();
        assert_eq!(types(&out), [32, 33, 34, 49, 49]);
        assert_eq!(out[0].bytes, own_vps);
        assert_eq!(out[1].bytes, own_sps);
        assert_eq!(out[2].bytes, PPS);
        // Every IRAP type gets them.
        for t in 16..=23 {
            let mut out = Vec::new();
            p.packetize(&avcc(4, &[&nal(t, 40, &mut rng)]), &mut out).unwrap();
            assert_eq!(types(&out), [32, 33, 34, t]);
        }
    }

    #[test]
    fn malformed_access_units_are_refused() {
        let mut p = packetizer(4, 1316);
        let mut out = Vec::new();
        assert_eq!(
            p.packetize(&[0, 0, 0, 2, 0x02, 0x01, 0, 0, 0, 1, 0x02], &mut out),
            Err(PayloadError::NalTooShort { format: "H.265", offset: 10, len: 1, need: 2 })
        );
        assert_eq!(
            p.packetize(&[0, 0, 0, 2, 0x82, 0x01], &mut out),
            Err(PayloadError::ForbiddenBit { offset: 4 })
        );
        assert!(out.is_empty());
        assert!(matches!(
            H265Packetizer::new(4, vec![], vec![], vec![], 3),
            Err(PayloadError::MaxPayloadTooSmall { min: 4, .. })
        ));
        assert!(matches!(
            H265Packetizer::new(4, vec![SPS.to_vec()], vec![], vec![], 1316),
            Err(PayloadError::ParameterSet { kind: "VPS", .. })
        ));
    }

    #[test]
    fn depacketizer_takes_aggregation_packets() {
        let mut d = H265Depacketizer::new();
        let mut ap = vec![48 << 1, 0x01];
        for n in [VPS, SPS, PPS] {
            ap.extend_from_slice(&(n.len() as u16).to_be_bytes());
            ap.extend_from_slice(n);
        }
        let idr = [0x26, 0x01, 0xaf, 0x01];
        assert_eq!(d.push(&ap, false), Ok(None));
        assert_eq!(d.push(&idr, true), Ok(Some(avcc(4, &[VPS, SPS, PPS, &idr]))));
        for bad in [&[0x60, 0x01, 0, 1, 0x26][..], &[0x60, 0x01, 0, 5, 0x26], &[0x60, 0x01]] {
            assert!(d.push(bad, true).is_err(), "{bad:?}");
        }
        assert!(matches!(
            d.push(&[50 << 1, 0x01, 0, 0], true),
            Err(PayloadError::Unsupported { packet_type: 50, .. })
        ));
        assert_eq!(d.push(&[55 << 1, 0x01, 0, 0], true), Ok(None));
        assert!(matches!(d.push(&[0x26], true), Err(PayloadError::Truncated { .. })));
        assert!(matches!(d.push(&[0x62, 0x01], true), Err(PayloadError::Truncated { .. })));
    }

    /// ffmpeg's own RTP packetizer (`-f rtp -pkt_size 300`) sending ten frames of x265 Main at
    /// 160x120: ten access units holding exactly the NAL units of the elementary stream.
    #[test]
    fn depacketizes_ffmpeg() {
        let packets = fixture_packets(include_bytes!("testdata/h265_ffmpeg.rtp"));
        let stream = include_bytes!("testdata/h265_ffmpeg.h265");
        let mut d = H265Depacketizer::new();
        let mut aus = Vec::new();
        for (marker, payload) in &packets {
            aus.extend(d.push(payload, *marker).unwrap());
        }
        assert_eq!(aus.len(), 10);
        // ffmpeg leaves the zero byte of a 4-byte start code at the end of the NAL unit before
        // it (as trailing_zero_8bits), which the Annex B splitting here does not.
        assert_eq!(trim_zeros(&aus.concat()), annexb_to_avcc(stream));
    }

    /// NAL units with 4-byte lengths, each without trailing zero bytes.
    fn trim_zeros(mut au: &[u8]) -> Vec<u8> {
        let mut nals = Vec::new();
        while let Some((len, rest)) = au.split_first_chunk::<4>() {
            let (nal, rest) = rest.split_at(u32::from_be_bytes(*len) as usize);
            let end = nal.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
            nals.push(&nal[..end]);
            au = rest;
        }
        avcc(4, &nals)
    }
}
