//! RTP and RTCP wire formats for isochron.
//!
//! What this crate does: writes the 12-byte RTP fixed header (RFC 3550 §5.1) for the MP2T payload
//! type (PT 33, RFC 3551 §6 and RFC 2250 §2) with, in a cluster, the sending node's local
//! sequence number in an RFC 8285 header extension (Yima §2.6), builds RTCP compound packets (SR + SDES CNAME, and
//! BYE; RFC 3550 §6.1, §6.4.1, §6.5.1, §6.6), and parses the RTCP that clients send back
//! (receiver reports, generic NACK from RFC 4585 §6.2.1, anything else skipped by length).
//! [`payload`] holds the codecs' native payload formats (H.264 RFC 6184, H.265 RFC 7798, AAC
//! RFC 3640, Opus RFC 7587, AC-3 RFC 4184, MPEG audio RFC 2250 §3.5): packetizers,
//! depacketizers and the SDP `fmtp` and `rtpmap` values.
//!
//! What it does not do: pacing, sockets, sessions or clocks. Callers pass wall-clock values in
//! (an SR needs the NTP time of "now"), which keeps the crate usable from the sender thread, the
//! simulator and tests alike.

pub mod payload;
pub mod rtcp;
pub mod rtp;

pub use payload::{
    AacDepacketizer, AacPacketizer, Ac3Depacketizer, Ac3Packetizer, Codec, Depacketizer,
    H264Depacketizer, H264Packetizer, H265Depacketizer, H265Packetizer, MpaDepacketizer,
    MpaPacketizer, OpusDepacketizer, OpusPacketizer, Packetizer, Payload, PayloadError, aac_fmtp,
    h264_fmtp, h265_fmtp, opus_fmtp, rtpmap,
};
pub use rtcp::{NtpTimestamp, ReportBlock, RtcpError, RtcpPacket, SenderReport};
pub use rtp::{
    BLOCK_END_EXT_ID, BLOCK_END_EXT_URI, LSN_EXT_ID, LSN_EXT_URI, PT_MP2T, RTP_HEADER_LEN,
    RTP_HEADER_LSN_LEN, RtpError, RtpHeader, block_end, lsn, rtx_packet,
};

/// The 4-byte prefix of an RTP or RTCP packet sent interleaved on the RTSP connection
/// (RFC 2326 §10.12): `$`, the channel, and the packet length big-endian.
#[must_use]
pub fn interleaved_prefix(channel: u8, len: u16) -> [u8; 4] {
    let l = len.to_be_bytes();
    [b'$', channel, l[0], l[1]]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_prefix_layout() {
        assert_eq!(interleaved_prefix(1, 1328), [0x24, 1, 0x05, 0x30]);
    }
}
