//! Reading a session description (RFC 8866): each media section's payload type, encoding, RTP
//! clock and channels (`a=rtpmap`, RFC 8866 §6.6), its format parameters (`a=fmtp`, §6.15) and
//! control URL (`a=control`, RFC 2326 Appendix C.1.1), the presentation's length
//! (`a=range:npt`, C.1.5) and its bandwidth (`b=AS`, RFC 8866 §5.8).
//!
//! Why: a client learns from a DESCRIBE's answer how to set up and time each stream (an MPEG-TS
//! object is one MP2T stream, payload type 33, RFC 2250 and RFC 3551 §6; an object from MP4 or
//! Matroska one RTP stream per track, each on its own control URL and clock), and a server
//! learns the same of a publisher's feed from its ANNOUNCE (RFC 2326 §10.3). One parser for
//! both.
//!
//! Not here: the rest of SDP (connection lines, formats after a section's first). Sans-IO.

use std::time::Duration;

use thiserror::Error;

/// One media section (`m=` line and its attributes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MediaDesc {
    /// The media type (`video`, `audio`, …).
    pub kind: String,
    /// The section's first payload type.
    pub payload_type: u8,
    /// The `rtpmap` encoding name (`MP2T`, `H264`, `mpeg4-generic`, …); for a static payload
    /// type without `rtpmap`, RFC 3551's name (`MP2T` for 33), else empty.
    pub encoding: String,
    /// The RTP clock rate, Hz (from `rtpmap`; 90 kHz for payload type 33 without one).
    pub clock_rate: u32,
    /// The `rtpmap` encoding parameters (audio channels); 0 for none.
    pub channels: u8,
    /// The `fmtp` parameters of the payload type; empty for none.
    pub fmtp: String,
    /// The section's `a=control` value (relative, or an absolute URL), if any.
    pub control: Option<String>,
}

/// A parsed description: its media sections in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Presentation {
    /// The SDP text as received.
    pub sdp: String,
    /// The media sections.
    pub media: Vec<MediaDesc>,
    /// The length in `a=range:npt=0-D`, when given.
    pub duration: Option<Duration>,
    /// The session's `b=AS:` bandwidth, kb/s, when given (else the sum of the sections' own).
    pub bandwidth_kbps: Option<u64>,
}

/// Why a description could not be used.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum SdpError {
    /// A media line without a payload type.
    #[error("SDP line {line}: m= line without a payload type: {text:?}")]
    BadMediaLine {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// An `rtpmap` whose clock rate is not a positive number.
    #[error("SDP line {line}: rtpmap without a clock rate: {text:?}")]
    BadRtpmap {
        /// 1-based line number.
        line: usize,
        /// The line.
        text: String,
    },
    /// No media section, or one whose clock is unknown (a dynamic payload type without
    /// `rtpmap`).
    #[error("SDP: media section {index} (payload type {payload_type}) has no RTP clock")]
    NoClock {
        /// 0-based section index.
        index: usize,
        /// Its payload type.
        payload_type: u8,
    },
    /// No `m=` line at all.
    #[error("SDP: no media section")]
    NoMedia,
}

impl Presentation {
    /// Parses `sdp`.
    ///
    /// # Errors
    ///
    /// [`SdpError`] names the line or the section at fault.
    pub fn parse(sdp: &str) -> Result<Self, SdpError> {
        let mut media: Vec<MediaDesc> = Vec::new();
        let mut duration = None;
        let (mut session_as, mut media_as) = (None, None::<u64>);
        for (i, raw) in sdp.lines().enumerate() {
            let l = raw.trim();
            if let Some(rest) = l.strip_prefix("m=") {
                let mut f = rest.split_whitespace();
                let kind = f.next().unwrap_or_default().to_string();
                let pt = f
                    .nth(2)
                    .and_then(|p| p.parse::<u8>().ok())
                    .ok_or_else(|| SdpError::BadMediaLine { line: i + 1, text: l.to_string() })?;
                let (encoding, clock_rate) =
                    if pt == 33 { ("MP2T".to_string(), 90_000) } else { (String::new(), 0) };
                media.push(MediaDesc {
                    kind,
                    payload_type: pt,
                    encoding,
                    clock_rate,
                    channels: 0,
                    fmtp: String::new(),
                    control: None,
                });
            } else if let Some(rest) = l.strip_prefix("a=rtpmap:") {
                let Some(m) = media.last_mut() else { continue };
                let (pt, map) = rest.split_once(' ').unwrap_or((rest, ""));
                if pt.trim().parse::<u8>().ok() != Some(m.payload_type) {
                    continue;
                }
                let mut parts = map.trim().split('/');
                let name = parts.next().unwrap_or_default();
                let clock = parts.next().and_then(|c| c.trim().parse::<u32>().ok());
                let channels = parts.next().map(|c| c.trim().parse::<u8>().ok());
                match (clock, channels) {
                    (Some(c), None | Some(Some(_))) if c > 0 => {
                        m.encoding = name.to_string();
                        m.clock_rate = c;
                        m.channels = channels.flatten().unwrap_or(0);
                    }
                    _ => return Err(SdpError::BadRtpmap { line: i + 1, text: l.to_string() }),
                }
            } else if let Some(rest) = l.strip_prefix("a=fmtp:") {
                let Some(m) = media.last_mut() else { continue };
                let (pt, params) = rest.split_once(' ').unwrap_or((rest, ""));
                if pt.trim().parse::<u8>().ok() == Some(m.payload_type) {
                    m.fmtp = params.trim().to_string();
                }
            } else if let Some(rest) = l.strip_prefix("b=AS:") {
                let kbps = rest.trim().parse::<u64>().ok();
                if media.is_empty() {
                    session_as = session_as.or(kbps);
                } else if let Some(k) = kbps {
                    media_as = Some(media_as.unwrap_or(0).saturating_add(k));
                }
            } else if let Some(rest) = l.strip_prefix("a=control:") {
                if let Some(m) = media.last_mut() {
                    m.control = Some(rest.trim().to_string());
                }
            } else if let Some(rest) = l.strip_prefix("a=range:") {
                duration = duration.or_else(|| range_length(rest));
            }
        }
        if media.is_empty() {
            return Err(SdpError::NoMedia);
        }
        if let Some((index, m)) = media.iter().enumerate().find(|(_, m)| m.clock_rate == 0) {
            return Err(SdpError::NoClock { index, payload_type: m.payload_type });
        }
        let bandwidth_kbps = session_as.or(media_as);
        Ok(Self { sdp: sdp.to_string(), media, duration, bandwidth_kbps })
    }

    /// Whether this is an MP2T presentation (RFC 2250: its first media section is MP2T; a
    /// client of one sets up that section only), not native tracks.
    #[must_use]
    pub fn is_mp2t(&self) -> bool {
        self.media.first().is_some_and(|m| m.encoding.eq_ignore_ascii_case("MP2T"))
    }

    /// The encodings, for messages (`H264, mpeg4-generic`).
    #[must_use]
    pub fn encodings(&self) -> String {
        self.media.iter().map(|m| m.encoding.as_str()).collect::<Vec<_>>().join(", ")
    }
}

/// The span of an NPT range `npt=A-B` (RFC 2326 §3.6), if both ends are given (parsed by
/// [`NptRange`](crate::headers::NptRange), as the server parses it).
#[must_use]
pub fn range_length(range: &str) -> Option<Duration> {
    use crate::headers::{NptRange, NptTime};
    let r = NptRange::parse(range).ok()?;
    let start = match r.start {
        None | Some(NptTime::Now) => 0,
        Some(NptTime::At(t)) => t.as_nanos(),
    };
    let end = r.end?.as_nanos();
    (end >= start).then(|| Duration::from_nanos(end - start))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_mp2t_description_is_one_stream_at_90_khz() {
        let sdp = "v=0\r\no=- 7 1 IN IP4 127.0.0.1\r\ns=a.ts\r\nc=IN IP4 0.0.0.0\r\nt=0 0\r\n\
                   a=control:*\r\na=range:npt=0-12.021\r\nm=video 0 RTP/AVP 33\r\n\
                   b=AS:4001\r\na=rtpmap:33 MP2T/90000\r\na=control:trackID=0\r\n";
        let p = Presentation::parse(sdp).unwrap();
        assert!(p.is_mp2t());
        assert_eq!(p.duration, Some(Duration::from_millis(12_021)));
        assert_eq!(
            p.media,
            [MediaDesc {
                kind: "video".into(),
                payload_type: 33,
                encoding: "MP2T".into(),
                clock_rate: 90_000,
                channels: 0,
                fmtp: String::new(),
                control: Some("trackID=0".into()),
            }]
        );
        assert_eq!(p.bandwidth_kbps, Some(4001), "the section's own, with none for the session");
        // Without rtpmap, the static type says it.
        let p = Presentation::parse("m=video 0 RTP/AVP 33\r\n").unwrap();
        assert!(p.is_mp2t());
    }

    #[test]
    fn native_tracks_each_have_their_clock_and_control() {
        let sdp = "v=0\r\na=control:*\r\na=range:npt=0-10.000\r\n\
                   m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
                   a=fmtp:96 packetization-mode=1\r\na=control:trackID=0\r\n\
                   m=audio 0 RTP/AVP 97\r\na=rtpmap:97 mpeg4-generic/48000/2\r\n\
                   a=control:trackID=1\r\n";
        let p = Presentation::parse(sdp).unwrap();
        assert!(!p.is_mp2t());
        assert_eq!(p.encodings(), "H264, mpeg4-generic");
        let clocks: Vec<u32> = p.media.iter().map(|m| m.clock_rate).collect();
        assert_eq!(clocks, [90_000, 48_000]);
        assert_eq!(p.media[1].control.as_deref(), Some("trackID=1"));
        assert_eq!(p.media[1].kind, "audio");
        assert_eq!((p.media[0].channels, p.media[1].channels), (0, 2));
        assert_eq!(p.media[0].fmtp, "packetization-mode=1");
        assert_eq!(p.bandwidth_kbps, None);
    }

    /// What ffmpeg announces when it publishes (`-f rtsp`): the session's bandwidth, and each
    /// track's parameters as the server needs them to store and serve it.
    #[test]
    fn a_publishers_announcement_gives_every_tracks_parameters() {
        let sdp = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=No Name\r\nc=IN IP4 127.0.0.1\r\n\
                   t=0 0\r\na=tool:libavformat 59.27.100\r\nb=AS:1700\r\n\
                   m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264/90000\r\n\
                   a=fmtp:96 packetization-mode=1; sprop-parameter-sets=Z2QAHqzZ,aO+8sA==; \
                   profile-level-id=64001E\r\na=control:streamid=0\r\n\
                   m=audio 0 RTP/AVP 97\r\nb=AS:128\r\na=rtpmap:97 MPEG4-GENERIC/48000/2\r\n\
                   a=fmtp:97 profile-level-id=1;mode=AAC-hbr;sizelength=13;indexlength=3;\
                   indexdeltalength=3; config=1190\r\na=control:streamid=1\r\n";
        let p = Presentation::parse(sdp).unwrap();
        assert_eq!(p.bandwidth_kbps, Some(1700), "the session's, not the sections' sum");
        assert_eq!(p.encodings(), "H264, MPEG4-GENERIC");
        assert!(p.media[0].fmtp.starts_with("packetization-mode=1; sprop-parameter-sets="));
        assert_eq!((p.media[1].clock_rate, p.media[1].channels), (48_000, 2));
        assert_eq!(p.media[1].control.as_deref(), Some("streamid=1"));
    }

    #[test]
    fn broken_descriptions_are_named() {
        assert_eq!(Presentation::parse("v=0\r\n"), Err(SdpError::NoMedia));
        assert_eq!(
            Presentation::parse("m=video 0 RTP/AVP 96\r\n"),
            Err(SdpError::NoClock { index: 0, payload_type: 96 })
        );
        assert!(matches!(
            Presentation::parse("m=video 0 RTP/AVP 96\r\na=rtpmap:96 H264\r\n"),
            Err(SdpError::BadRtpmap { line: 2, .. })
        ));
        assert!(matches!(
            Presentation::parse("m=video 0\r\n"),
            Err(SdpError::BadMediaLine { line: 1, .. })
        ));
        assert!(matches!(
            Presentation::parse("m=audio 0 RTP/AVP 97\r\na=rtpmap:97 opus/48000/two\r\n"),
            Err(SdpError::BadRtpmap { line: 2, .. })
        ));
    }
}
