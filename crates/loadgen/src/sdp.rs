//! What a client needs from a session description (RFC 8866): each media section's payload
//! type, encoding and RTP clock (`a=rtpmap`, RFC 8866 §6.6) and its control URL (`a=control`,
//! RFC 2326 Appendix C.1.1), and the presentation's length (`a=range:npt`, C.1.5).
//!
//! Why: an MPEG-TS object is one MP2T stream (payload type 33, RFC 2250 and RFC 3551 §6); an
//! object ingested from MP4 or Matroska is one RTP stream per track, each SET UP on its own
//! control URL and timed by its own clock. The client learns which from the `m=` lines.
//!
//! Not here: the rest of SDP (connection and bandwidth lines, formats after a section's first,
//! `fmtp` parameters). Sans-IO.

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
                match clock {
                    Some(c) if c > 0 => {
                        m.encoding = name.to_string();
                        m.clock_rate = c;
                    }
                    _ => return Err(SdpError::BadRtpmap { line: i + 1, text: l.to_string() }),
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
        Ok(Self { sdp: sdp.to_string(), media, duration })
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

/// The span of an NPT range `npt=A-B` (RFC 2326 §3.6), if both ends are given (parsed by the
/// RTSP crate's [`NptRange`](isochron_rtsp::headers::NptRange), as the server parses it).
#[must_use]
pub fn range_length(range: &str) -> Option<Duration> {
    use isochron_rtsp::headers::{NptRange, NptTime};
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
                control: Some("trackID=0".into()),
            }]
        );
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
    }
}
