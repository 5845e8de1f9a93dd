//! The session description for a stored MPEG-TS presentation (RFC 8866 syntax; RFC 2326
//! Appendix C).
//!
//! One fixed template, checked against ffmpeg, GStreamer, VLC/live555 and gst-rtsp-server:
//! session-level `a=control:*` and a relative `a=control:trackID=0` (resolved against the
//! `Content-Base` with its trailing slash, RFC 3986 §5.2), a finite `a=range:npt=0-<duration>`
//! starting at 0 (clients echo the start back), `c=IN IP4 0.0.0.0` (a multicast address would
//! make VLC/live555 ask for multicast), and static payload type 33 `MP2T/90000` (RFC 3551 §6)
//! under `m=video` (GStreamer's `rtpmp2tdepay` expects video).
//!
//! An object stored as native RTP payloads (from MP4 or Matroska) is described by
//! [`native_sdp`]: one `m=` line per track (RFC 8866 §5.14) with its dynamic payload type, its
//! `rtpmap` and `fmtp` (H.264 RFC 6184 §8.1, H.265 RFC 7798 §7.1, AAC RFC 3640 §4.1, Opus
//! RFC 7587 §7) and `a=control:trackID=N`, under the same session-level lines.
//!
//! With feedback ([`SdpParams::rtx_time`]) the media line offers the AVPF profile (RFC 4585 §7.1)
//! with generic NACK (`a=rtcp-fb:33 nack`, §4.2) and an RFC 4588 retransmission payload type
//! (`a=rtpmap:97 rtx/90000`, `a=fmtp:97 apt=33;rtx-time=…`, §8.6): how a standard player that
//! can repair loss (GStreamer's `rtspsrc do-retransmission=true`) learns that it may ask. A
//! native presentation (when its URL asks, `?rtx=1`) offers the same on each media line, each track's RTX payload type the
//! first dynamic one from 97 that no track and no earlier RTX stream uses
//! ([`rtx_payload_types`]); GStreamer enables retransmission only for a stream whose
//! description maps an RTX payload type to it.

pub mod parse;

use std::fmt::Write as _;
use std::net::IpAddr;

use isochron_base::{BitRate, MediaTime};

use crate::headers::range::npt_ceil;

/// What goes into an MPEG-TS description.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SdpParams<'a> {
    /// The `o=` session id (RFC 8866 §5.2); any number unique enough for the presentation.
    pub session_id: u64,
    /// The `o=` session version; change it when the description of the same id changes.
    pub session_version: u64,
    /// The server address for `o=` (`IN IP4` or `IN IP6` follows the address family).
    pub origin: IpAddr,
    /// The `s=` session name; control characters are replaced, and an empty name becomes `-`.
    pub name: &'a str,
    /// The presentation's duration, for `a=range:npt=0-<duration>` (rounded up to ms).
    pub duration: MediaTime,
    /// The average bit rate for `b=AS:` in kbit/s (rounded up); zero means unknown and omits
    /// the line.
    pub bitrate: BitRate,
    /// Offer feedback and retransmission, keeping packets this long (`rtx-time`); `None`: the
    /// plain `RTP/AVP` description.
    pub rtx_time: Option<std::time::Duration>,
    /// A live feed: `a=range:npt=now-` (RFC 2326 §3.6) instead of the duration.
    pub live: bool,
}

/// The RTP payload type of the RFC 4588 retransmission stream offered with feedback.
pub const RTX_PAYLOAD_TYPE: u8 = 97;

/// The RTX payload type of each track whose media payload types are `media` (in track order):
/// the first dynamic type from [`RTX_PAYLOAD_TYPE`] up that no track and no earlier track's RTX
/// stream uses (`[33]` → `[97]`; `[96, 97]` → `[98, 99]`). `None` once 127 is passed.
#[must_use]
pub fn rtx_payload_types(media: &[u8]) -> Vec<Option<u8>> {
    let mut taken: Vec<u8> = media.to_vec();
    media
        .iter()
        .map(|_| {
            let pt = (RTX_PAYLOAD_TYPE..=127).find(|p| !taken.contains(p))?;
            taken.push(pt);
            Some(pt)
        })
        .collect()
}

/// One native track of a presentation, as its `m=` section describes it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MediaTrack {
    /// The media type: `video` or `audio`.
    pub kind: String,
    /// The RTP payload type.
    pub payload_type: u8,
    /// The `rtpmap` encoding name (`H264`, `H265`, `mpeg4-generic`, `opus`, …).
    pub encoding: String,
    /// The RTP clock rate, Hz.
    pub clock_rate: u32,
    /// The `rtpmap` encoding parameters (audio channels); 0 for none.
    pub channels: u8,
    /// The `fmtp` parameters; empty for none.
    pub fmtp: String,
}

/// The SDP body for a presentation of native tracks: the session-level lines of [`mp2t_sdp`],
/// then for each track `i`:
///
/// ```text
/// m=<kind> 0 RTP/AVP <pt>
/// a=rtpmap:<pt> <encoding>/<clock_rate>[/<channels>]
/// a=fmtp:<pt> <fmtp>            (when there are parameters)
/// a=control:trackID=<i>
/// ```
///
/// With feedback ([`SdpParams::rtx_time`]) the profile is `RTP/AVPF <pt> <rtx>`, and
/// `a=rtcp-fb:<pt> nack`, `a=rtpmap:<rtx> rtx/<clock_rate>` and
/// `a=fmtp:<rtx> apt=<pt>;rtx-time=<ms>` follow the track's own lines (`<rtx>` from
/// [`rtx_payload_types`]).
///
/// `b=AS:` (the whole presentation's rate) goes at session level.
#[must_use]
pub fn native_sdp(p: &SdpParams<'_>, tracks: &[MediaTrack]) -> String {
    let mut s = session_lines(p, true);
    let pts: Vec<u8> = tracks.iter().map(|t| t.payload_type).collect();
    let rtx_pts = rtx_payload_types(&pts);
    for (i, t) in tracks.iter().enumerate() {
        let kind = if t.kind == "audio" { "audio" } else { "video" };
        // With feedback: AVPF, and this track's RTX stream (RFC 4588 §8.6).
        let rtx = p.rtx_time.zip(rtx_pts[i]);
        match rtx {
            Some((_, rtx_pt)) => {
                let _ = write!(s, "m={kind} 0 RTP/AVPF {} {rtx_pt}\r\n", t.payload_type);
            }
            None => {
                let _ = write!(s, "m={kind} 0 RTP/AVP {}\r\n", t.payload_type);
            }
        }
        let _ = write!(s, "a=rtpmap:{} {}/{}", t.payload_type, t.encoding, t.clock_rate);
        if t.channels > 0 {
            let _ = write!(s, "/{}", t.channels);
        }
        s.push_str("\r\n");
        // Parameters never carry line breaks (they come from our own packetizers).
        let fmtp: String = t.fmtp.chars().filter(|c| !c.is_control()).collect();
        if !fmtp.is_empty() {
            let _ = write!(s, "a=fmtp:{} {fmtp}\r\n", t.payload_type);
        }
        if let Some((time, rtx_pt)) = rtx {
            let _ = write!(
                s,
                "a=rtcp-fb:{pt} nack\r\n\
                 a=rtpmap:{rtx_pt} rtx/{}\r\n\
                 a=fmtp:{rtx_pt} apt={pt};rtx-time={}\r\n",
                t.clock_rate,
                time.as_millis(),
                pt = t.payload_type,
            );
        }
        let _ = write!(s, "a=control:trackID={i}\r\n");
    }
    s
}

/// The session-level lines, with `b=AS` among them when `with_bitrate`.
fn session_lines(p: &SdpParams<'_>, with_bitrate: bool) -> String {
    let family = if p.origin.is_ipv4() { "IP4" } else { "IP6" };
    let name: String =
        p.name.chars().map(|c| if c.is_control() { ' ' } else { c }).collect::<String>();
    let name = if name.trim().is_empty() { "-" } else { name.as_str() };
    let mut s = String::with_capacity(512);
    // Writing into a String cannot fail.
    let _ = write!(
        s,
        "v=0\r\n\
         o=- {} {} IN {family} {}\r\n\
         s={name}\r\n\
         c=IN IP4 0.0.0.0\r\n\
         t=0 0\r\n",
        p.session_id, p.session_version, p.origin,
    );
    if with_bitrate && p.bitrate.0 > 0 {
        let _ = write!(s, "b=AS:{}\r\n", p.bitrate.0.div_ceil(1000));
    }
    s.push_str("a=tool:isochron\r\na=control:*\r\n");
    if p.live {
        s.push_str("a=range:npt=now-\r\n");
    } else {
        let _ = write!(s, "a=range:npt=0-{}\r\n", npt_ceil(p.duration));
    }
    s
}

/// The SDP body for one MP2T track, CRLF line endings, in RFC 8866 §5's line order:
///
/// ```text
/// v=0
/// o=- <session_id> <session_version> IN IP4 <origin>
/// s=<name>
/// c=IN IP4 0.0.0.0
/// t=0 0
/// a=tool:isochron
/// a=control:*
/// a=range:npt=0-<duration>
/// m=video 0 RTP/AVP 33
/// b=AS:<kbit/s>
/// a=rtpmap:33 MP2T/90000
/// a=control:trackID=0
/// ```
#[must_use]
pub fn mp2t_sdp(p: &SdpParams<'_>) -> String {
    let mut s = session_lines(p, false);
    match p.rtx_time {
        None => s.push_str("m=video 0 RTP/AVP 33\r\n"),
        Some(_) => {
            let _ = write!(s, "m=video 0 RTP/AVPF 33 {RTX_PAYLOAD_TYPE}\r\n");
        }
    }
    if p.bitrate.0 > 0 {
        let _ = write!(s, "b=AS:{}\r\n", p.bitrate.0.div_ceil(1000));
    }
    s.push_str("a=rtpmap:33 MP2T/90000\r\n");
    if let Some(t) = p.rtx_time {
        let _ = write!(
            s,
            "a=rtcp-fb:33 nack\r\n\
             a=rtpmap:{RTX_PAYLOAD_TYPE} rtx/90000\r\n\
             a=fmtp:{RTX_PAYLOAD_TYPE} apt=33;rtx-time={}\r\n",
            t.as_millis()
        );
    }
    s.push_str("a=control:trackID=0\r\n");
    s
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    #[test]
    fn matches_interop_template_exactly() {
        let sdp = mp2t_sdp(&SdpParams {
            session_id: 7,
            session_version: 1,
            origin: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            name: "a.ts",
            duration: MediaTime::from_nanos(5_400_120_000_000),
            bitrate: BitRate(4_000_001),
            rtx_time: None,
            live: false,
        });
        assert_eq!(
            sdp,
            "v=0\r\n\
             o=- 7 1 IN IP4 127.0.0.1\r\n\
             s=a.ts\r\n\
             c=IN IP4 0.0.0.0\r\n\
             t=0 0\r\n\
             a=tool:isochron\r\n\
             a=control:*\r\n\
             a=range:npt=0-5400.120\r\n\
             m=video 0 RTP/AVP 33\r\n\
             b=AS:4001\r\n\
             a=rtpmap:33 MP2T/90000\r\n\
             a=control:trackID=0\r\n"
        );
    }

    fn params_of_empty() -> SdpParams<'static> {
        SdpParams {
            session_id: 1,
            session_version: 1,
            origin: IpAddr::V4(Ipv4Addr::LOCALHOST),
            name: "",
            duration: MediaTime::ZERO,
            bitrate: BitRate(0),
            rtx_time: None,
            live: false,
        }
    }

    #[test]
    fn unknown_bitrate_ipv6_and_odd_names() {
        let sdp = mp2t_sdp(&SdpParams {
            session_id: 1,
            session_version: 2,
            origin: IpAddr::V6(Ipv6Addr::LOCALHOST),
            name: "a\r\nb=evil",
            duration: MediaTime::from_nanos(9_991_000_001),
            bitrate: BitRate(0),
            rtx_time: None,
            live: false,
        });
        assert!(sdp.contains("o=- 1 2 IN IP6 ::1\r\n"));
        assert!(sdp.contains("s=a  b=evil\r\n"));
        assert!(sdp.contains("a=range:npt=0-9.992\r\n"));
        assert!(!sdp.contains("b=AS"));
        assert!(sdp.lines().all(|l| !l.is_empty()));
        let empty = mp2t_sdp(&params_of_empty());
        assert!(empty.contains("\r\ns=-\r\n"));
        // A live feed has no duration: its range is open from now (RFC 2326 §3.6).
        let live = mp2t_sdp(&SdpParams { live: true, name: "cam", ..params_of_empty() });
        assert!(live.contains("a=range:npt=now-\r\n"), "{live}");
        assert!(!live.contains("npt=0-"));
    }

    #[test]
    fn feedback_offers_avpf_nack_and_rtx() {
        let sdp = mp2t_sdp(&SdpParams {
            session_id: 7,
            session_version: 1,
            origin: IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1)),
            name: "a.ts",
            duration: MediaTime::from_nanos(1_000_000_000),
            bitrate: BitRate(0),
            rtx_time: Some(std::time::Duration::from_millis(1000)),
            live: false,
        });
        assert!(
            sdp.ends_with(
                "a=range:npt=0-1.000\r\n\
                 m=video 0 RTP/AVPF 33 97\r\n\
                 a=rtpmap:33 MP2T/90000\r\n\
                 a=rtcp-fb:33 nack\r\n\
                 a=rtpmap:97 rtx/90000\r\n\
                 a=fmtp:97 apt=33;rtx-time=1000\r\n\
                 a=control:trackID=0\r\n"
            ),
            "{sdp}"
        );
    }

    #[test]
    fn native_tracks_one_media_section_each() {
        let tracks = [
            MediaTrack {
                kind: "video".into(),
                payload_type: 96,
                encoding: "H264".into(),
                clock_rate: 90_000,
                channels: 0,
                fmtp: "packetization-mode=1;profile-level-id=64001f".into(),
            },
            MediaTrack {
                kind: "audio".into(),
                payload_type: 97,
                encoding: "mpeg4-generic".into(),
                clock_rate: 48_000,
                channels: 2,
                fmtp: "streamtype=5;config=1190".into(),
            },
            MediaTrack {
                kind: "audio".into(),
                payload_type: 98,
                encoding: "opus".into(),
                clock_rate: 48_000,
                channels: 2,
                fmtp: String::new(),
            },
        ];
        let params = SdpParams {
            session_id: 9,
            session_version: 1,
            origin: IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            name: "movie",
            duration: MediaTime::from_secs_f64(90.5),
            bitrate: BitRate(4_000_000),
            rtx_time: None,
            live: false,
        };
        let sdp = native_sdp(&params, &tracks);
        assert_eq!(
            sdp,
            "v=0\r\n\
             o=- 9 1 IN IP4 10.0.0.1\r\n\
             s=movie\r\n\
             c=IN IP4 0.0.0.0\r\n\
             t=0 0\r\n\
             b=AS:4000\r\n\
             a=tool:isochron\r\n\
             a=control:*\r\n\
             a=range:npt=0-90.500\r\n\
             m=video 0 RTP/AVP 96\r\n\
             a=rtpmap:96 H264/90000\r\n\
             a=fmtp:96 packetization-mode=1;profile-level-id=64001f\r\n\
             a=control:trackID=0\r\n\
             m=audio 0 RTP/AVP 97\r\n\
             a=rtpmap:97 mpeg4-generic/48000/2\r\n\
             a=fmtp:97 streamtype=5;config=1190\r\n\
             a=control:trackID=1\r\n\
             m=audio 0 RTP/AVP 98\r\n\
             a=rtpmap:98 opus/48000/2\r\n\
             a=control:trackID=2\r\n"
        );
        // With feedback, each track its own RTX payload type, none taken twice.
        let params = SdpParams { rtx_time: Some(std::time::Duration::from_millis(1000)), ..params };
        let sdp = native_sdp(&params, &tracks[..2]);
        let media = &sdp[sdp.find("m=").unwrap()..];
        assert_eq!(
            media,
            "m=video 0 RTP/AVPF 96 98\r\n\
             a=rtpmap:96 H264/90000\r\n\
             a=fmtp:96 packetization-mode=1;profile-level-id=64001f\r\n\
             a=rtcp-fb:96 nack\r\n\
             a=rtpmap:98 rtx/90000\r\n\
             a=fmtp:98 apt=96;rtx-time=1000\r\n\
             a=control:trackID=0\r\n\
             m=audio 0 RTP/AVPF 97 99\r\n\
             a=rtpmap:97 mpeg4-generic/48000/2\r\n\
             a=fmtp:97 streamtype=5;config=1190\r\n\
             a=rtcp-fb:97 nack\r\n\
             a=rtpmap:99 rtx/48000\r\n\
             a=fmtp:99 apt=97;rtx-time=1000\r\n\
             a=control:trackID=1\r\n"
        );
    }

    #[test]
    fn rtx_payload_types_are_the_first_free_from_97() {
        assert_eq!(rtx_payload_types(&[33]), vec![Some(97)]);
        assert_eq!(rtx_payload_types(&[96, 97, 98]), vec![Some(99), Some(100), Some(101)]);
        assert_eq!(rtx_payload_types(&[100, 96]), vec![Some(97), Some(98)]);
        let all: Vec<u8> = (97..=126).collect();
        assert_eq!(rtx_payload_types(&all)[..2], [Some(127), None]);
    }
}
