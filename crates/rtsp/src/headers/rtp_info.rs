//! The `RTP-Info` header of a PLAY response (RFC 2326 §12.33).
//!
//! One entry per set-up track, in SDP order (live555 reads them by position), each with an
//! absolute `url` that string-equals the URL the client used in SETUP (ffmpeg compares it
//! literally) and both `seq` and `rtptime` (live555 needs both, or its NPT stays at 0).
//! The values themselves come from the sender contract in [`crate::server::rtp_seq`] and
//! [`crate::server::rtp_timestamp`].

use std::fmt::Write as _;

/// One `RTP-Info` entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RtpInfo<'a> {
    /// The absolute track URL, as the client sent it in SETUP.
    pub url: &'a str,
    /// The sequence number of the first RTP packet sent after the response.
    pub seq: u16,
    /// The RTP timestamp of that packet.
    pub rtptime: u32,
}

/// The `RTP-Info` value: `url=<url>;seq=<seq>;rtptime=<rtptime>` entries joined by `,`.
#[must_use]
pub fn format_rtp_info(entries: &[RtpInfo<'_>]) -> String {
    let mut out = String::new();
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        // Writing into a String cannot fail.
        let _ = write!(out, "url={};seq={};rtptime={}", e.url, e.seq, e.rtptime);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_entries_in_order() {
        let one =
            RtpInfo { url: "rtsp://h:8554/a.ts/trackID=0", seq: 28365, rtptime: 3_302_556_183 };
        assert_eq!(
            format_rtp_info(&[one]),
            "url=rtsp://h:8554/a.ts/trackID=0;seq=28365;rtptime=3302556183"
        );
        let two = RtpInfo { url: "rtsp://h/a/trackID=1", seq: 0, rtptime: 0 };
        assert_eq!(
            format_rtp_info(&[one, two]),
            "url=rtsp://h:8554/a.ts/trackID=0;seq=28365;rtptime=3302556183,url=rtsp://h/a/trackID=1;seq=0;rtptime=0"
        );
        assert_eq!(format_rtp_info(&[]), "");
    }
}
