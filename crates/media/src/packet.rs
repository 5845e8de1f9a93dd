//! One 188-byte MPEG-TS packet: header, adaptation field and PCR (ISO/IEC 13818-1 §2.4.3.2,
//! §2.4.3.4, §2.4.3.5).
//!
//! Why: everything the analyser learns comes from a few header bits — the PID, the
//! `payload_unit_start_indicator` and the continuity counter (§2.4.3.2) — and from the adaptation
//! field (§2.4.3.4), which carries the `discontinuity_indicator`, the `random_access_indicator` and
//! the program clock reference. The PCR (§2.4.3.5) is a 33-bit base in 90 kHz units times 300 plus
//! a 9-bit extension in 27 MHz units, so one 27 MHz tick count that wraps at 2^33 × 300.
//!
//! What this module does not do: check the sync byte (the scanner does, because only it knows the
//! file offset), reassemble PSI sections, or interpret PES payloads. Parsing is total: any 188
//! bytes give a `Packet`; malformed lengths just mean "no adaptation field" or "no payload".

/// The sync byte that starts every MPEG-TS packet (§2.4.3.2).
pub(crate) const SYNC_BYTE: u8 = 0x47;
/// The PID of the program association table (§2.4.4.3, table 2-3).
pub(crate) const PAT_PID: u16 = 0x0000;
/// The PID of null packets (§2.4.3.3).
pub(crate) const NULL_PID: u16 = 0x1FFF;
/// The PCR clock rate: 27 MHz (§2.4.2.1).
pub(crate) const PCR_HZ: u64 = 27_000_000;
/// The PCR wraps after 2^33 ticks of its 90 kHz base, i.e. 2^33 × 300 ticks of 27 MHz (§2.4.3.5).
pub(crate) const PCR_WRAP: u64 = (1 << 33) * 300;

/// The fields of one TS packet that the analyser uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Packet<'a> {
    /// `transport_error_indicator`: the packet is known to be corrupt; nothing else in it can be
    /// trusted.
    pub(crate) transport_error: bool,
    /// `payload_unit_start_indicator`: a PES packet or a PSI section starts in this payload.
    pub(crate) payload_unit_start: bool,
    /// The 13-bit packet identifier.
    pub(crate) pid: u16,
    /// The 4-bit continuity counter.
    pub(crate) continuity_counter: u8,
    /// The adaptation field, when present and well-formed.
    pub(crate) adaptation: Option<AdaptationField>,
    /// Whether `adaptation_field_control` says the packet carries a payload.
    pub(crate) has_payload: bool,
    /// The payload bytes (empty if there is none or the adaptation field length is invalid).
    pub(crate) payload: &'a [u8],
}

/// The adaptation-field flags the analyser uses (§2.4.3.4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct AdaptationField {
    /// `discontinuity_indicator`: on the PCR PID, a new system time base starts (§2.4.3.5).
    pub(crate) discontinuity: bool,
    /// `random_access_indicator`: the next PES packet of this PID starts at an access point.
    pub(crate) random_access: bool,
    /// The PCR in 27 MHz ticks (base × 300 + extension), reduced modulo [`PCR_WRAP`].
    pub(crate) pcr: Option<u64>,
}

/// Parses one packet. The caller guarantees `buf` is one whole packet whose sync byte it checked;
/// shorter input parses as a packet without adaptation field or payload.
pub(crate) fn parse(buf: &[u8]) -> Packet<'_> {
    let b1 = buf.get(1).copied().unwrap_or(0);
    let b2 = buf.get(2).copied().unwrap_or(0);
    let b3 = buf.get(3).copied().unwrap_or(0);
    let afc = (b3 >> 4) & 0b11;
    let has_af = afc & 0b10 != 0;
    let has_payload = afc & 0b01 != 0;
    let mut packet = Packet {
        transport_error: b1 & 0x80 != 0,
        payload_unit_start: b1 & 0x40 != 0,
        pid: (u16::from(b1 & 0x1F) << 8) | u16::from(b2),
        continuity_counter: b3 & 0x0F,
        adaptation: None,
        has_payload,
        payload: &[],
    };
    let body = buf.get(4..).unwrap_or(&[]);
    let payload_start = if has_af {
        let Some((&af_len, rest)) = body.split_first() else {
            return packet;
        };
        let af_len = usize::from(af_len);
        // An adaptation field longer than the packet is corrupt: drop the field and the payload.
        let Some(af) = rest.get(..af_len) else {
            return packet;
        };
        packet.adaptation = Some(parse_adaptation(af));
        1 + af_len
    } else {
        0
    };
    if has_payload {
        packet.payload = body.get(payload_start..).unwrap_or(&[]);
    }
    packet
}

/// Parses the adaptation field bytes after `adaptation_field_length` (§2.4.3.4). A zero-length
/// field (a single stuffing byte) has no flags.
fn parse_adaptation(af: &[u8]) -> AdaptationField {
    let Some((&flags, rest)) = af.split_first() else {
        return AdaptationField::default();
    };
    let pcr = if flags & 0x10 != 0 { rest.get(..6).map(decode_pcr) } else { None };
    AdaptationField { discontinuity: flags & 0x80 != 0, random_access: flags & 0x40 != 0, pcr }
}

/// Decodes the 6-byte PCR field: 33-bit base, 6 reserved bits, 9-bit extension (§2.4.3.5).
///
/// The extension is meant to be below 300; a larger one is folded in anyway and the result
/// reduced modulo [`PCR_WRAP`], so the value is always on the 27 MHz circle.
fn decode_pcr(b: &[u8]) -> u64 {
    let byte = |i: usize| u64::from(b.get(i).copied().unwrap_or(0));
    let base = (byte(0) << 25) | (byte(1) << 17) | (byte(2) << 9) | (byte(3) << 1) | (byte(4) >> 7);
    let ext = ((byte(4) & 1) << 8) | byte(5);
    (base * 300 + ext) % PCR_WRAP
}

/// Encodes a 27 MHz PCR value as the 6-byte field (test fixtures and the inverse of
/// [`decode_pcr`]).
#[cfg(test)]
pub(crate) fn encode_pcr(pcr: u64) -> [u8; 6] {
    let pcr = pcr % PCR_WRAP;
    let base = pcr / 300;
    let ext = pcr % 300;
    [
        (base >> 25) as u8,
        (base >> 17) as u8,
        (base >> 9) as u8,
        (base >> 1) as u8,
        (((base & 1) << 7) as u8) | 0x7E | ((ext >> 8) as u8),
        ext as u8,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet_with(header: [u8; 4], rest: &[u8]) -> [u8; 188] {
        let mut p = [0xFF; 188];
        p[..4].copy_from_slice(&header);
        p[4..4 + rest.len()].copy_from_slice(rest);
        p
    }

    #[test]
    fn header_fields() {
        // TEI=0, PUSI=1, PID=0x0100, AFC=01 (payload only), CC=5.
        let p = packet_with([0x47, 0x41, 0x00, 0x15], &[0xAA]);
        let pk = parse(&p);
        assert!(!pk.transport_error);
        assert!(pk.payload_unit_start);
        assert_eq!(pk.pid, 0x100);
        assert_eq!(pk.continuity_counter, 5);
        assert!(pk.has_payload);
        assert_eq!(pk.adaptation, None);
        assert_eq!(pk.payload.len(), 184);
        assert_eq!(pk.payload[0], 0xAA);
    }

    #[test]
    fn adaptation_field_with_pcr() {
        let pcr = 0x1_2345_6789u64 * 300 + 299;
        let mut af = vec![7, 0x10 | 0x40 | 0x80];
        af.extend_from_slice(&encode_pcr(pcr));
        let p = packet_with([0x47, 0x1F, 0xFE, 0x30], &af);
        let pk = parse(&p);
        assert_eq!(pk.pid, 0x1FFE);
        let a = pk.adaptation.expect("adaptation field");
        assert!(a.discontinuity && a.random_access);
        assert_eq!(a.pcr, Some(pcr));
        assert_eq!(pk.payload.len(), 188 - 4 - 8);
    }

    #[test]
    fn pcr_round_trips_and_wraps() {
        for pcr in [0, 1, 299, 300, PCR_WRAP - 1, 27_000_000 * 3600] {
            assert_eq!(decode_pcr(&encode_pcr(pcr)), pcr);
        }
        // An out-of-range extension (511) with the largest base still lands on the circle.
        let raw = [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
        assert!(decode_pcr(&raw) < PCR_WRAP);
    }

    #[test]
    fn adaptation_only_packet_has_no_payload() {
        let p = packet_with([0x47, 0x01, 0x00, 0x20], &[183, 0x00]);
        let pk = parse(&p);
        assert!(!pk.has_payload);
        assert!(pk.payload.is_empty());
        assert_eq!(pk.adaptation, Some(AdaptationField::default()));
    }

    #[test]
    fn zero_length_adaptation_field_is_one_stuffing_byte() {
        let p = packet_with([0x47, 0x01, 0x00, 0x30], &[0]);
        let pk = parse(&p);
        assert_eq!(pk.adaptation, Some(AdaptationField::default()));
        assert_eq!(pk.payload.len(), 183);
    }

    #[test]
    fn oversized_adaptation_field_is_dropped() {
        let p = packet_with([0x47, 0x01, 0x00, 0x30], &[200, 0x10]);
        let pk = parse(&p);
        assert_eq!(pk.adaptation, None);
        assert!(pk.payload.is_empty());
    }

    #[test]
    fn truncated_pcr_is_ignored() {
        // PCR_flag set but the field holds only 3 bytes after the flags.
        let p = packet_with([0x47, 0x01, 0x00, 0x30], &[4, 0x10, 1, 2, 3]);
        assert_eq!(parse(&p).adaptation.and_then(|a| a.pcr), None);
    }

    #[test]
    fn short_input_does_not_panic() {
        for len in 0..8 {
            let buf = [0x47, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF];
            let _ = parse(&buf[..len]);
        }
    }
}
