//! RTCP compound packets (RFC 3550 §6).
//!
//! The server sends, per stream, an SR + SDES(CNAME) compound packet right after PLAY and then
//! every few seconds, and SR + SDES + BYE when the media ends (RFC 3550 §6.1, §6.4.1, §6.5.1,
//! §6.6). ffmpeg only reaches end of file on BYE, which is why BYE matters even for one track.
//!
//! From clients it parses receiver reports (liveness and statistics, §6.4.2) and generic NACKs
//! (RFC 4585 §6.2.1). Unknown packet types are skipped by their length field; a malformed packet
//! ends the iteration with an error, never a panic.

use thiserror::Error;

/// RTCP packet type of a sender report.
pub const PT_SR: u8 = 200;
/// RTCP packet type of a receiver report.
pub const PT_RR: u8 = 201;
/// RTCP packet type of source description items.
pub const PT_SDES: u8 = 202;
/// RTCP packet type of goodbye.
pub const PT_BYE: u8 = 203;
/// RTCP packet type of application-defined packets.
pub const PT_APP: u8 = 204;
/// RTCP packet type of transport-layer feedback (RFC 4585 §6.2).
pub const PT_RTPFB: u8 = 205;

/// Seconds from the NTP epoch (1900) to the Unix epoch (1970).
const NTP_UNIX_OFFSET_S: u64 = 2_208_988_800;

/// A 64-bit NTP timestamp: seconds since 1900 and a binary fraction (RFC 3550 §4).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NtpTimestamp {
    /// Whole seconds since 1900-01-01.
    pub seconds: u32,
    /// Fraction of a second in units of 2^-32 s.
    pub fraction: u32,
}

impl NtpTimestamp {
    /// The NTP time of a wall-clock instant given in nanoseconds since the Unix epoch.
    #[must_use]
    pub fn from_unix_nanos(nanos: u64) -> Self {
        let secs = nanos / 1_000_000_000 + NTP_UNIX_OFFSET_S;
        let frac = ((u128::from(nanos % 1_000_000_000) << 32) / 1_000_000_000) as u32;
        Self { seconds: secs as u32, fraction: frac }
    }

    /// The middle 32 bits, as used in LSR fields (RFC 3550 §6.4.1).
    #[must_use]
    pub fn middle32(self) -> u32 {
        (self.seconds << 16) | (self.fraction >> 16)
    }
}

/// The sender-info part of an SR (RFC 3550 §6.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SenderReport {
    /// The sender's SSRC.
    pub ssrc: u32,
    /// Wall-clock time of this report.
    pub ntp: NtpTimestamp,
    /// The RTP timestamp corresponding to `ntp`, on the same clock as the data packets.
    pub rtp_timestamp: u32,
    /// Packets sent so far.
    pub packet_count: u32,
    /// Payload octets sent so far.
    pub octet_count: u32,
}

/// One reception report block (RFC 3550 §6.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportBlock {
    /// The source this block reports on (for us: our stream's SSRC).
    pub ssrc: u32,
    /// Fraction lost since the last report, in 1/256.
    pub fraction_lost: u8,
    /// Cumulative packets lost (signed 24-bit).
    pub cumulative_lost: i32,
    /// Extended highest sequence number received.
    pub highest_seq: u32,
    /// Interarrival jitter in timestamp units.
    pub jitter: u32,
    /// Middle 32 bits of the last SR's NTP time.
    pub lsr: u32,
    /// Delay since the last SR, in 1/65536 s.
    pub dlsr: u32,
}

/// One packet of a compound RTCP packet, borrowed from the input.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtcpPacket<'a> {
    /// A sender report with its reception report blocks.
    SenderReport {
        /// The sender information.
        info: SenderReport,
        /// Reception reports.
        reports: Vec<ReportBlock>,
    },
    /// A receiver report.
    ReceiverReport {
        /// The SSRC of the reporting receiver.
        ssrc: u32,
        /// Reception reports.
        reports: Vec<ReportBlock>,
    },
    /// Source description items (not decoded further).
    SourceDescription(&'a [u8]),
    /// Goodbye from the listed sources.
    Bye {
        /// The sources leaving.
        ssrcs: Vec<u32>,
        /// The reason for leaving (RFC 3550 §6.6), when one is given and is UTF-8.
        reason: Option<&'a str>,
    },
    /// Generic NACK (RFC 4585 §6.2.1): lost sequence numbers of `media_ssrc`.
    Nack {
        /// The SSRC of the receiver sending the NACK.
        sender_ssrc: u32,
        /// The SSRC of the media source the losses are in.
        media_ssrc: u32,
        /// The (PID, BLP) pairs.
        pairs: Vec<(u16, u16)>,
    },
    /// Any other packet type, with its body after the 4-byte header.
    Other {
        /// The packet type.
        packet_type: u8,
        /// The count/format field.
        count: u8,
        /// The body.
        body: &'a [u8],
    },
}

impl RtcpPacket<'_> {
    /// SSRCs of *our* streams this packet refers to (the report blocks' sources, NACK media
    /// sources): what the server uses to find the session an RTCP packet keeps alive.
    #[must_use]
    pub fn media_ssrcs(&self) -> Vec<u32> {
        match self {
            Self::SenderReport { reports, .. } | Self::ReceiverReport { reports, .. } => {
                reports.iter().map(|r| r.ssrc).collect()
            }
            Self::Nack { media_ssrc, .. } => vec![*media_ssrc],
            _ => Vec::new(),
        }
    }
}

/// Why bytes are not a valid RTCP compound packet.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtcpError {
    /// The packet header is cut short.
    #[error("RTCP packet at offset {offset}: header truncated")]
    Truncated {
        /// Offset of the packet in the compound.
        offset: usize,
    },
    /// The version is not 2.
    #[error("RTCP packet at offset {offset}: version {version}, expected 2")]
    Version {
        /// Offset of the packet in the compound.
        offset: usize,
        /// The version found.
        version: u8,
    },
    /// The length field points past the end of the datagram.
    #[error("RTCP packet at offset {offset}: length {len} exceeds the {avail} bytes left")]
    Length {
        /// Offset of the packet in the compound.
        offset: usize,
        /// Length claimed by the header, in bytes.
        len: usize,
        /// Bytes left in the datagram.
        avail: usize,
    },
    /// The body is too short for the packet type's fixed fields.
    #[error("RTCP packet type {packet_type} at offset {offset}: body too short")]
    Body {
        /// Offset of the packet in the compound.
        offset: usize,
        /// The packet type.
        packet_type: u8,
    },
}

/// Iterates over the packets of a compound RTCP datagram.
#[must_use]
pub fn parse_compound(buf: &[u8]) -> CompoundIter<'_> {
    CompoundIter { buf, offset: 0, failed: false }
}

/// Iterator returned by [`parse_compound`]; yields an error at most once, then stops.
#[derive(Debug)]
pub struct CompoundIter<'a> {
    buf: &'a [u8],
    offset: usize,
    failed: bool,
}

impl<'a> Iterator for CompoundIter<'a> {
    type Item = Result<RtcpPacket<'a>, RtcpError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.offset >= self.buf.len() {
            return None;
        }
        let r = parse_one(self.buf, self.offset);
        match &r {
            Ok((_, next)) => self.offset = *next,
            Err(_) => self.failed = true,
        }
        Some(r.map(|(p, _)| p))
    }
}

fn parse_one(buf: &[u8], offset: usize) -> Result<(RtcpPacket<'_>, usize), RtcpError> {
    let rest = &buf[offset..];
    if rest.len() < 4 {
        return Err(RtcpError::Truncated { offset });
    }
    let version = rest[0] >> 6;
    if version != 2 {
        return Err(RtcpError::Version { offset, version });
    }
    let count = rest[0] & 0x1f;
    let packet_type = rest[1];
    let len = (usize::from(u16::from_be_bytes([rest[2], rest[3]])) + 1) * 4;
    if len > rest.len() {
        return Err(RtcpError::Length { offset, len, avail: rest.len() });
    }
    let mut body = &rest[4..len];
    if rest[0] & 0x20 != 0 {
        // Padding: the last octet counts the padding bytes (RFC 3550 §6.4.1).
        let pad = usize::from(*body.last().ok_or(RtcpError::Body { offset, packet_type })?);
        if pad > body.len() {
            return Err(RtcpError::Body { offset, packet_type });
        }
        body = &body[..body.len() - pad];
    }
    let short = || RtcpError::Body { offset, packet_type };
    let packet = match packet_type {
        PT_SR => {
            if body.len() < 24 {
                return Err(short());
            }
            let info = SenderReport {
                ssrc: be32(body, 0),
                ntp: NtpTimestamp { seconds: be32(body, 4), fraction: be32(body, 8) },
                rtp_timestamp: be32(body, 12),
                packet_count: be32(body, 16),
                octet_count: be32(body, 20),
            };
            let reports = report_blocks(&body[24..], count).ok_or_else(short)?;
            RtcpPacket::SenderReport { info, reports }
        }
        PT_RR => {
            if body.len() < 4 {
                return Err(short());
            }
            let reports = report_blocks(&body[4..], count).ok_or_else(short)?;
            RtcpPacket::ReceiverReport { ssrc: be32(body, 0), reports }
        }
        PT_SDES => RtcpPacket::SourceDescription(body),
        PT_BYE => {
            let n = usize::from(count);
            if body.len() < 4 * n {
                return Err(short());
            }
            let ssrcs = (0..n).map(|i| be32(body, 4 * i)).collect();
            // An optional length octet and text after the sources (RFC 3550 §6.6).
            let reason = body.get(4 * n).and_then(|&len| {
                let text = body.get(4 * n + 1..4 * n + 1 + usize::from(len))?;
                std::str::from_utf8(text).ok()
            });
            RtcpPacket::Bye { ssrcs, reason }
        }
        PT_RTPFB if count == 1 => {
            if body.len() < 8 {
                return Err(short());
            }
            let pairs = body[8..]
                .chunks_exact(4)
                .map(|c| (u16::from_be_bytes([c[0], c[1]]), u16::from_be_bytes([c[2], c[3]])))
                .collect();
            RtcpPacket::Nack { sender_ssrc: be32(body, 0), media_ssrc: be32(body, 4), pairs }
        }
        _ => RtcpPacket::Other { packet_type, count, body },
    };
    Ok((packet, offset + len))
}

fn report_blocks(mut b: &[u8], count: u8) -> Option<Vec<ReportBlock>> {
    let mut out = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        if b.len() < 24 {
            return None;
        }
        // Sign-extend the 24-bit cumulative loss.
        let cum = (i32::from_be_bytes([b[4], b[5], b[6], b[7]]) << 8) >> 8;
        out.push(ReportBlock {
            ssrc: be32(b, 0),
            fraction_lost: b[4],
            cumulative_lost: cum,
            highest_seq: be32(b, 8),
            jitter: be32(b, 12),
            lsr: be32(b, 16),
            dlsr: be32(b, 20),
        });
        b = &b[24..];
    }
    Some(out)
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

fn header(out: &mut Vec<u8>, count: u8, packet_type: u8, body_len: usize) {
    debug_assert_eq!(body_len % 4, 0);
    let words = u16::try_from(body_len / 4).unwrap_or(u16::MAX);
    out.push(0x80 | (count & 0x1f));
    out.push(packet_type);
    out.extend_from_slice(&words.to_be_bytes());
}

/// Appends an SR with no report blocks (we only send, we receive nothing from clients to report).
pub fn write_sender_report(out: &mut Vec<u8>, sr: &SenderReport) {
    header(out, 0, PT_SR, 24);
    for w in [
        sr.ssrc,
        sr.ntp.seconds,
        sr.ntp.fraction,
        sr.rtp_timestamp,
        sr.packet_count,
        sr.octet_count,
    ] {
        out.extend_from_slice(&w.to_be_bytes());
    }
}

/// Appends an SDES packet with one chunk carrying a CNAME item (RFC 3550 §6.5.1). The CNAME is
/// truncated to 255 bytes.
pub fn write_sdes_cname(out: &mut Vec<u8>, ssrc: u32, cname: &str) {
    let name = &cname.as_bytes()[..cname.len().min(255)];
    // SSRC + type + length + text + at least one END octet, padded to 32 bits.
    let chunk = 4 + 2 + name.len() + 1;
    let padded = chunk.div_ceil(4) * 4;
    header(out, 1, PT_SDES, padded);
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.push(1); // CNAME
    out.push(name.len() as u8);
    out.extend_from_slice(name);
    out.resize(out.len() + (padded - chunk) + 1, 0);
}

/// Appends a BYE for one source, with the reason for leaving when there is one (RFC 3550
/// §6.6: a length octet and UTF-8 text, cut to 255 bytes at a character boundary, padded to 32
/// bits).
pub fn write_bye(out: &mut Vec<u8>, ssrc: u32, reason: Option<&str>) {
    let Some(reason) = reason else {
        header(out, 1, PT_BYE, 4);
        out.extend_from_slice(&ssrc.to_be_bytes());
        return;
    };
    let mut end = reason.len().min(255);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let text = &reason.as_bytes()[..end];
    let padded = (1 + text.len()).div_ceil(4) * 4;
    header(out, 1, PT_BYE, 4 + padded);
    out.extend_from_slice(&ssrc.to_be_bytes());
    out.push(text.len() as u8);
    out.extend_from_slice(text);
    out.resize(out.len() + padded - 1 - text.len(), 0);
}

/// Appends a generic NACK (RFC 4585 §6.2.1: RTPFB, FMT 1) from `sender_ssrc` for the lost
/// sequence numbers `seqs` of `media_ssrc`, packed into (PID, BLP) pairs: each pair names one
/// lost number and, in its bitmask, which of the 16 after it are lost too. `seqs` in any order;
/// at most 255 pairs are written (the rest are left out).
pub fn write_nack(out: &mut Vec<u8>, sender_ssrc: u32, media_ssrc: u32, seqs: &[u16]) {
    let mut sorted = seqs.to_vec();
    // Order by distance from the first, so a run across the wrap stays one run.
    let base = seqs.first().copied().unwrap_or(0);
    sorted.sort_by_key(|s| s.wrapping_sub(base));
    sorted.dedup();
    let mut pairs: Vec<(u16, u16)> = Vec::new();
    for s in sorted {
        match pairs.last_mut() {
            Some((pid, blp)) if (1..=16).contains(&s.wrapping_sub(*pid)) => {
                *blp |= 1 << (s.wrapping_sub(*pid) - 1);
            }
            _ => pairs.push((s, 0)),
        }
    }
    pairs.truncate(255);
    if pairs.is_empty() {
        return;
    }
    header(out, 1, PT_RTPFB, 8 + 4 * pairs.len());
    out.extend_from_slice(&sender_ssrc.to_be_bytes());
    out.extend_from_slice(&media_ssrc.to_be_bytes());
    for (pid, blp) in pairs {
        out.extend_from_slice(&pid.to_be_bytes());
        out.extend_from_slice(&blp.to_be_bytes());
    }
}

/// The sequence numbers a generic NACK's (PID, BLP) pairs name, in pair order.
pub fn nack_seqs(pairs: &[(u16, u16)]) -> impl Iterator<Item = u16> + '_ {
    pairs.iter().flat_map(|&(pid, blp)| {
        std::iter::once(pid).chain(
            (0..16).filter(move |i| blp & (1 << i) != 0).map(move |i| pid.wrapping_add(i + 1)),
        )
    })
}

/// Appends a receiver report with the given blocks (used by isochron's own client).
pub fn write_receiver_report(out: &mut Vec<u8>, ssrc: u32, reports: &[ReportBlock]) {
    let n = reports.len().min(31);
    header(out, n as u8, PT_RR, 4 + 24 * n);
    out.extend_from_slice(&ssrc.to_be_bytes());
    for r in &reports[..n] {
        out.extend_from_slice(&r.ssrc.to_be_bytes());
        let cum = (r.cumulative_lost.clamp(-0x80_0000, 0x7f_ffff) as u32) & 0x00ff_ffff;
        out.extend_from_slice(&((u32::from(r.fraction_lost) << 24) | cum).to_be_bytes());
        for w in [r.highest_seq, r.jitter, r.lsr, r.dlsr] {
            out.extend_from_slice(&w.to_be_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sr() -> SenderReport {
        SenderReport {
            ssrc: 0xCAFE_F00D,
            ntp: NtpTimestamp::from_unix_nanos(1_700_000_000_500_000_000),
            rtp_timestamp: 90_000,
            packet_count: 10,
            octet_count: 13_160,
        }
    }

    #[test]
    fn ntp_conversion() {
        let t = NtpTimestamp::from_unix_nanos(1_500_000_000);
        assert_eq!(t.seconds, 2_208_988_801);
        assert_eq!(t.fraction, 1 << 31);
        assert_eq!(t.middle32(), ((2_208_988_801u32) << 16) | 0x8000);
    }

    #[test]
    fn a_bye_carries_its_reason() {
        for reason in ["", "x", "block 7 of demo failed its checksum", &"é".repeat(200)] {
            let mut out = Vec::new();
            write_bye(&mut out, 7, Some(reason));
            assert_eq!(out.len() % 4, 0);
            let pkts: Vec<_> = parse_compound(&out).collect::<Result<_, _>>().unwrap();
            let RtcpPacket::Bye { ssrcs, reason: Some(got) } = &pkts[0] else { panic!("{pkts:?}") };
            assert_eq!(ssrcs, &[7]);
            // Cut to 255 bytes at a character boundary.
            assert!(reason.starts_with(got) && got.len() == reason.len().min(254), "{got:?}");
        }
    }

    #[test]
    fn sr_sdes_bye_compound_round_trip() {
        let mut out = Vec::new();
        write_sender_report(&mut out, &sr());
        write_sdes_cname(&mut out, 0xCAFE_F00D, "isochron@host");
        write_bye(&mut out, 0xCAFE_F00D, None);
        assert_eq!(out.len() % 4, 0);
        let pkts: Vec<_> = parse_compound(&out).collect::<Result<_, _>>().unwrap();
        assert_eq!(pkts.len(), 3);
        assert_eq!(pkts[0], RtcpPacket::SenderReport { info: sr(), reports: vec![] });
        match &pkts[1] {
            RtcpPacket::SourceDescription(b) => {
                assert_eq!(&b[6..19], b"isochron@host");
            }
            p => panic!("unexpected {p:?}"),
        }
        assert_eq!(pkts[2], RtcpPacket::Bye { ssrcs: vec![0xCAFE_F00D], reason: None });
    }

    #[test]
    fn sdes_padding_for_every_name_length() {
        for n in 0..12 {
            let mut out = Vec::new();
            write_sdes_cname(&mut out, 1, &"x".repeat(n));
            assert_eq!(out.len() % 4, 0, "name length {n}");
            let p: Vec<_> = parse_compound(&out).collect();
            assert!(matches!(p[..], [Ok(RtcpPacket::SourceDescription(_))]));
        }
    }

    #[test]
    fn receiver_report_round_trip() {
        let block = ReportBlock {
            ssrc: 7,
            fraction_lost: 3,
            cumulative_lost: -2,
            highest_seq: 70_000,
            jitter: 12,
            lsr: 5,
            dlsr: 6,
        };
        let mut out = Vec::new();
        write_receiver_report(&mut out, 99, &[block]);
        let p: Vec<_> = parse_compound(&out).collect::<Result<_, _>>().unwrap();
        assert_eq!(p, vec![RtcpPacket::ReceiverReport { ssrc: 99, reports: vec![block] }]);
        assert_eq!(p[0].media_ssrcs(), vec![7]);
    }

    #[test]
    fn nacks_round_trip_through_pid_and_blp() {
        let lost = [65_534u16, 65_535, 0, 3, 17, 40, 3];
        let mut out = Vec::new();
        write_nack(&mut out, 7, 9, &lost);
        let parsed: Vec<_> = parse_compound(&out).collect::<Result<_, _>>().unwrap();
        let RtcpPacket::Nack { sender_ssrc: 7, media_ssrc: 9, pairs } = &parsed[0] else {
            panic!("{parsed:?}")
        };
        assert_eq!(pairs.len(), 3, "65534 covers up to 14; 17; 40: {pairs:?}");
        let seqs: Vec<u16> = nack_seqs(pairs).collect();
        assert_eq!(seqs, [65_534, 65_535, 0, 3, 17, 40]);
        let mut none = Vec::new();
        write_nack(&mut none, 7, 9, &[]);
        assert!(none.is_empty());
    }

    #[test]
    fn nack_parses() {
        let buf = [0x81, 205, 0, 3, 0, 0, 0, 1, 0, 0, 0, 2, 0x01, 0x00, 0x00, 0x05];
        let p: Vec<_> = parse_compound(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            p,
            vec![RtcpPacket::Nack { sender_ssrc: 1, media_ssrc: 2, pairs: vec![(256, 5)] }]
        );
    }

    #[test]
    fn malformed_input_is_an_error_not_a_panic() {
        // ffmpeg's 8-byte "punch" RR with no blocks is valid.
        let punch = [0x80, 201, 0, 1, 0, 0, 0, 0];
        assert_eq!(parse_compound(&punch).count(), 1);
        assert!(matches!(
            parse_compound(&[0x80, 200, 0, 9, 1, 2]).next(),
            Some(Err(RtcpError::Length { .. }))
        ));
        assert!(matches!(parse_compound(&[0x00; 8]).next(), Some(Err(RtcpError::Version { .. }))));
        assert!(matches!(
            parse_compound(&[0x80, 1]).next(),
            Some(Err(RtcpError::Truncated { .. }))
        ));
        // SR claiming report blocks it does not carry.
        let mut out = Vec::new();
        write_sender_report(&mut out, &sr());
        out[0] |= 2;
        assert!(matches!(parse_compound(&out).next(), Some(Err(RtcpError::Body { .. }))));
        // Exhaustive over short random-ish buffers: never panics.
        for n in 0..64u32 {
            let b: Vec<u8> = (0..n).map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8).collect();
            let _ = parse_compound(&b).count();
        }
    }
}
