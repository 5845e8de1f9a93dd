//! The RTP fixed header (RFC 3550 §5.1).
//!
//! isochron sends MPEG-2 TS over RTP (RFC 2250 §2): payload type 33, a 90 kHz timestamp, and the
//! marker bit only on timestamp discontinuities. The header is written into a caller-provided
//! 12-byte array so the sender thread can keep one array per packet in flight and never allocate.

use thiserror::Error;

/// Static payload type of MPEG-2 transport streams (RFC 3551 §6, Table 5).
pub const PT_MP2T: u8 = 33;
/// Length of the RTP fixed header with no CSRCs.
pub const RTP_HEADER_LEN: usize = 12;

/// Length of the RTP fixed header followed by the LSN and block-end header extension
/// ([`RtpHeader::write_lsn`]): 4 bytes of extension header, two 3-byte elements, 2 of padding.
pub const RTP_HEADER_LSN_LEN: usize = RTP_HEADER_LEN + 12;

/// The one-byte header-extension element id of the sending node's local sequence number (LSN),
/// as the SDP declares it (`a=extmap:1 urn:x-isochron:rtp-hdrext:lsn`, RFC 8285 §5).
pub const LSN_EXT_ID: u8 = 1;

/// The URI naming the LSN extension in SDP.
pub const LSN_EXT_URI: &str = "urn:x-isochron:rtp-hdrext:lsn";

/// The one-byte header-extension element id of the block end: the RTP sequence number of the
/// last packet of the block this packet belongs to (`a=extmap:2
/// urn:x-isochron:rtp-hdrext:block-end`). A client that lost the last packets of a block knows
/// from any packet of that block that they exist, and which node sent them (RBEC's tail losses:
/// without it, that node's next LSN may only come with its next block, seconds later).
pub const BLOCK_END_EXT_ID: u8 = 2;

/// The URI naming the block-end extension in SDP.
pub const BLOCK_END_EXT_URI: &str = "urn:x-isochron:rtp-hdrext:block-end";

/// The "defined by profile" value of RFC 8285's one-byte header form (§4.2).
const ONE_BYTE_PROFILE: u16 = 0xBEDE;

/// An RTP fixed header with no CSRCs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RtpHeader {
    /// The marker bit; for MP2T, set on a timestamp discontinuity (RFC 2250 §2).
    pub marker: bool,
    /// The payload type (7 bits).
    pub payload_type: u8,
    /// The sequence number.
    pub sequence: u16,
    /// The timestamp, 90 kHz for MP2T.
    pub timestamp: u32,
    /// The synchronisation source.
    pub ssrc: u32,
}

/// Why bytes are not an RTP packet.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum RtpError {
    /// Fewer bytes than the header needs.
    #[error("RTP packet too short: {len} bytes, need at least {need}")]
    TooShort {
        /// Bytes available.
        len: usize,
        /// Bytes the header (with its CSRCs and extension) needs.
        need: usize,
    },
    /// The version field is not 2.
    #[error("RTP version {0}, expected 2")]
    Version(u8),
    /// The padding length exceeds the payload.
    #[error("RTP padding of {padding} bytes exceeds the {payload}-byte payload")]
    Padding {
        /// Padding length from the last byte.
        padding: usize,
        /// Payload length before removing padding.
        payload: usize,
    },
}

impl RtpHeader {
    /// Writes the header (V=2, P=0, X=0, CC=0).
    pub fn write(&self, out: &mut [u8; RTP_HEADER_LEN]) {
        out[0] = 0x80;
        out[1] = (u8::from(self.marker) << 7) | (self.payload_type & 0x7f);
        out[2..4].copy_from_slice(&self.sequence.to_be_bytes());
        out[4..8].copy_from_slice(&self.timestamp.to_be_bytes());
        out[8..12].copy_from_slice(&self.ssrc.to_be_bytes());
    }

    /// Writes the header with X=1 and an RFC 8285 one-byte header extension carrying `lsn`, the
    /// sending node's local sequence number for this session (Yima §2.6: a client that receives
    /// from several nodes finds which node lost a packet by the gaps in that node's LSNs), and
    /// `block_end`, the sequence number of the last packet of this packet's block (so a client
    /// knows which node owes it the packets up to there). Players that do not know the
    /// extension skip it by its length (RFC 3550 §5.3.1).
    pub fn write_lsn(&self, lsn: u16, block_end: u16, out: &mut [u8; RTP_HEADER_LSN_LEN]) {
        let mut fixed = [0; RTP_HEADER_LEN];
        self.write(&mut fixed);
        fixed[0] |= 0x10;
        out[..RTP_HEADER_LEN].copy_from_slice(&fixed);
        let ext = &mut out[RTP_HEADER_LEN..];
        ext[..2].copy_from_slice(&ONE_BYTE_PROFILE.to_be_bytes());
        ext[2..4].copy_from_slice(&2u16.to_be_bytes()); // two 32-bit words of elements
        ext[4] = (LSN_EXT_ID << 4) | 1; // id, length − 1 = 1: two bytes
        ext[5..7].copy_from_slice(&lsn.to_be_bytes());
        ext[7] = (BLOCK_END_EXT_ID << 4) | 1;
        ext[8..10].copy_from_slice(&block_end.to_be_bytes());
        ext[10..12].fill(0); // padding
    }

    /// The header as a new array.
    #[must_use]
    pub fn to_bytes(&self) -> [u8; RTP_HEADER_LEN] {
        let mut b = [0; RTP_HEADER_LEN];
        self.write(&mut b);
        b
    }

    /// Parses a packet and returns its header and the payload's byte range, skipping CSRCs, a
    /// header extension (RFC 3550 §5.3.1, RFC 8285) and padding.
    pub fn parse(pkt: &[u8]) -> Result<(Self, std::ops::Range<usize>), RtpError> {
        if pkt.len() < RTP_HEADER_LEN {
            return Err(RtpError::TooShort { len: pkt.len(), need: RTP_HEADER_LEN });
        }
        let version = pkt[0] >> 6;
        if version != 2 {
            return Err(RtpError::Version(version));
        }
        let csrc = usize::from(pkt[0] & 0x0f);
        let mut start = RTP_HEADER_LEN + 4 * csrc;
        if pkt[0] & 0x10 != 0 {
            if pkt.len() < start + 4 {
                return Err(RtpError::TooShort { len: pkt.len(), need: start + 4 });
            }
            let words = usize::from(u16::from_be_bytes([pkt[start + 2], pkt[start + 3]]));
            start += 4 + 4 * words;
        }
        if pkt.len() < start {
            return Err(RtpError::TooShort { len: pkt.len(), need: start });
        }
        let mut end = pkt.len();
        if pkt[0] & 0x20 != 0 {
            let padding = usize::from(pkt[end - 1]);
            if padding == 0 || padding > end - start {
                return Err(RtpError::Padding { padding, payload: end - start });
            }
            end -= padding;
        }
        let header = Self {
            marker: pkt[1] & 0x80 != 0,
            payload_type: pkt[1] & 0x7f,
            sequence: u16::from_be_bytes([pkt[2], pkt[3]]),
            timestamp: u32::from_be_bytes([pkt[4], pkt[5], pkt[6], pkt[7]]),
            ssrc: u32::from_be_bytes([pkt[8], pkt[9], pkt[10], pkt[11]]),
        };
        Ok((header, start..end))
    }
}

/// Appends an RFC 4588 retransmission packet (§4) of the packet with header `original` and
/// `payload` to `out`: the header of the RTX stream (its own payload type, SSRC and sequence
/// number; the original's timestamp and marker), then the original sequence number (OSN), then
/// the original payload.
pub fn rtx_packet(
    out: &mut Vec<u8>,
    original: &RtpHeader,
    payload: &[u8],
    rtx_payload_type: u8,
    rtx_ssrc: u32,
    rtx_seq: u16,
) {
    let h = RtpHeader {
        marker: original.marker,
        payload_type: rtx_payload_type,
        sequence: rtx_seq,
        timestamp: original.timestamp,
        ssrc: rtx_ssrc,
    };
    out.extend_from_slice(&h.to_bytes());
    out.extend_from_slice(&original.sequence.to_be_bytes());
    out.extend_from_slice(payload);
}

/// The LSN of a packet written by [`RtpHeader::write_lsn`] (any RFC 8285 one-byte extension
/// holding element [`LSN_EXT_ID`] of two bytes), or `None`.
#[must_use]
pub fn lsn(pkt: &[u8]) -> Option<u16> {
    ext_u16(pkt, LSN_EXT_ID)
}

/// The block end of a packet written by [`RtpHeader::write_lsn`] (element
/// [`BLOCK_END_EXT_ID`] of two bytes), or `None`.
#[must_use]
pub fn block_end(pkt: &[u8]) -> Option<u16> {
    ext_u16(pkt, BLOCK_END_EXT_ID)
}

/// The value of two-byte element `want` of an RFC 8285 one-byte header extension.
fn ext_u16(pkt: &[u8], want: u8) -> Option<u16> {
    if pkt.len() < RTP_HEADER_LEN || pkt[0] >> 6 != 2 || pkt[0] & 0x10 == 0 {
        return None;
    }
    let start = RTP_HEADER_LEN + 4 * usize::from(pkt[0] & 0x0f);
    let head = pkt.get(start..start + 4)?;
    if u16::from_be_bytes([head[0], head[1]]) != ONE_BYTE_PROFILE {
        return None;
    }
    let words = usize::from(u16::from_be_bytes([head[2], head[3]]));
    let mut elems = pkt.get(start + 4..start + 4 + 4 * words)?;
    while let Some((&b, rest)) = elems.split_first() {
        let (id, len) = (b >> 4, usize::from(b & 0x0f) + 1);
        match id {
            0 => elems = rest, // padding
            15 => return None, // reserved: stop (RFC 8285 §4.2)
            _ => {
                let data = rest.get(..len)?;
                if id == want && len == 2 {
                    return Some(u16::from_be_bytes([data[0], data[1]]));
                }
                elems = &rest[len..];
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_parse_round_trip() {
        let h = RtpHeader {
            marker: true,
            payload_type: PT_MP2T,
            sequence: 0xBEEF,
            timestamp: 0xDEAD_BEEF,
            ssrc: 0x1234_5678,
        };
        let mut pkt = h.to_bytes().to_vec();
        pkt.extend_from_slice(&[0x47; 188]);
        let (p, range) = RtpHeader::parse(&pkt).unwrap();
        assert_eq!(p, h);
        assert_eq!(range, 12..200);
        assert_eq!(pkt[0], 0x80);
        assert_eq!(pkt[1], 0x80 | 33);
    }

    #[test]
    fn parse_skips_extension_and_padding() {
        let mut pkt =
            RtpHeader { marker: false, payload_type: 33, sequence: 1, timestamp: 2, ssrc: 3 }
                .to_bytes()
                .to_vec();
        pkt[0] |= 0x10 | 0x20; // X and P
        pkt.extend_from_slice(&[0xBE, 0xDE, 0, 1, 0x10, 0xAA, 0, 0]); // one-word extension
        pkt.extend_from_slice(&[1, 2, 3]);
        pkt.extend_from_slice(&[0, 2]); // two bytes of padding
        let (_, range) = RtpHeader::parse(&pkt).unwrap();
        assert_eq!(&pkt[range], &[1, 2, 3]);
    }

    #[test]
    fn parse_rejects_garbage() {
        assert!(matches!(RtpHeader::parse(&[0x80; 5]), Err(RtpError::TooShort { .. })));
        assert_eq!(RtpHeader::parse(&[0x40; 12]), Err(RtpError::Version(1)));
        let mut pkt = [0u8; 13];
        pkt[0] = 0xA0;
        pkt[12] = 9;
        assert!(matches!(RtpHeader::parse(&pkt), Err(RtpError::Padding { .. })));
    }

    #[test]
    fn rtx_packets_carry_the_osn_then_the_payload() {
        let h = RtpHeader { marker: true, payload_type: 33, sequence: 513, timestamp: 7, ssrc: 1 };
        let mut out = Vec::new();
        rtx_packet(&mut out, &h, &[0x47, 1, 2], 97, 0xabc, 9);
        let (r, range) = RtpHeader::parse(&out).unwrap();
        assert_eq!(
            r,
            RtpHeader { marker: true, payload_type: 97, sequence: 9, timestamp: 7, ssrc: 0xabc }
        );
        assert_eq!(&out[range], &[2, 1, 0x47, 1, 2]);
    }

    #[test]
    fn the_lsn_extension_is_skipped_by_the_parser_and_read_back() {
        let h = RtpHeader {
            marker: false,
            payload_type: PT_MP2T,
            sequence: 7,
            timestamp: 9,
            ssrc: 0xabcd,
        };
        let mut head = [0; RTP_HEADER_LSN_LEN];
        h.write_lsn(0xbeef, 0x1234, &mut head);
        let mut pkt = head.to_vec();
        pkt.extend_from_slice(&[0x47; 188]);
        let (parsed, payload) = RtpHeader::parse(&pkt).unwrap();
        assert_eq!(parsed, h);
        assert_eq!(payload, RTP_HEADER_LSN_LEN..pkt.len());
        assert_eq!(lsn(&pkt), Some(0xbeef));
        assert_eq!(block_end(&pkt), Some(0x1234));
        assert_eq!(lsn(&h.to_bytes()), None);
        assert_eq!(block_end(&h.to_bytes()), None);
        // Byte for byte: X set, 0xBEDE, two words, id 1 length 2, the LSN, id 2 length 2, the
        // block end, padding.
        assert_eq!(&head[..1], &[0x90]);
        assert_eq!(&head[12..], &[0xbe, 0xde, 0, 2, 0x11, 0xbe, 0xef, 0x21, 0x12, 0x34, 0, 0]);
        // Truncated extensions are not read past.
        assert_eq!(lsn(&pkt[..17]), None);
        assert_eq!(block_end(&pkt[..21]), None);
    }
}
