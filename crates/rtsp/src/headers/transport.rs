//! The `Transport` header (RFC 2326 §12.39): parsing the client's offer, choosing one spec, and
//! writing the reply.
//!
//! Why our own parser rather than rtsp-types' typed header: the choice needs leniency the RFC
//! grammar does not give (a single `client_port`, a missing `interleaved`, `mode="PLAY"`, unknown
//! parameters) and the reply must keep the exact profile string the client used, because ffmpeg
//! rejects a reply whose lower transport differs from its request (mediamtx#1105).
//!
//! What we offer: `RTP/AVP` or `RTP/AVP/UDP` unicast with `client_port`, and
//! `RTP/AVP/TCP` interleaved; the same with `RTP/AVPF` (RFC 4585 §7.1), which a player asks for
//! when the description offered feedback (retransmission requests, RFC 4588 RTX). Multicast is refused (461) because every VOD viewer has its own
//! timeline; every client then falls back on its own. `destination=` is ignored: media always
//! goes to the RTSP peer's address, so the server can never be used as a traffic reflector
//! (RFC 2326 §12.39, §16). This module does not know addresses; the session core adds them.

/// Why no transport spec could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// The SETUP carried no `Transport` header (RFC 2326 §12.39 makes it mandatory) → 400.
    #[error("no Transport header")]
    Missing,
    /// None of the offered specs is one we serve; holds the header as offered → 461.
    #[error("no supported transport in {0:?}")]
    Unsupported(String),
    /// The interleaved channels are already used by another session on the same connection
    /// (RFC 2326 §10.12) → 461.
    #[error("interleaved channels {0}-{1} already in use on this connection")]
    ChannelsInUse(u8, u8),
    /// The tracks of one session would go different ways (UDP and interleaved, or interleaved
    /// on two connections) → 461.
    #[error(
        "every track of a session must use the same transport (all UDP, or all interleaved on one connection)"
    )]
    MixedTracks,
}

/// The RTP profile string of a UDP spec, kept so that the reply repeats the client's spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpProfile {
    /// `RTP/AVP` (GStreamer, live555, VLC).
    Avp,
    /// `RTP/AVP/UDP` (ffmpeg).
    AvpUdp,
    /// `RTP/AVPF` (RFC 4585: with feedback; GStreamer when the description offers it).
    Avpf,
    /// `RTP/AVPF/UDP`.
    AvpfUdp,
}

impl UdpProfile {
    /// The profile as written in the header.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Avp => "RTP/AVP",
            Self::AvpUdp => "RTP/AVP/UDP",
            Self::Avpf => "RTP/AVPF",
            Self::AvpfUdp => "RTP/AVPF/UDP",
        }
    }

    /// Whether the profile is AVPF: the player sends feedback (generic NACKs) early.
    #[must_use]
    pub fn feedback(self) -> bool {
        matches!(self, Self::Avpf | Self::AvpfUdp)
    }
}

/// The transport chosen from a client's offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// RTP over UDP unicast to the client's `client_port` pair.
    Udp {
        /// The profile string the client used.
        profile: UdpProfile,
        /// The client's RTP port.
        client_rtp: u16,
        /// The client's RTCP port.
        client_rtcp: u16,
    },
    /// RTP interleaved on the RTSP connection (RFC 2326 §10.12), on the client's channels.
    Interleaved {
        /// The channel carrying RTP.
        rtp_channel: u8,
        /// The channel carrying RTCP.
        rtcp_channel: u8,
        /// The client asked for `RTP/AVPF/TCP` (the reply repeats it).
        avpf: bool,
    },
}

impl Transport {
    /// The `Transport` value of the SETUP reply: exactly one spec, the same lower transport as
    /// requested, `unicast` (live555 assumes multicast without it), `ssrc` as 8 hex digits and
    /// `mode=play` (RFC 2326 §12.39).
    ///
    /// UDP: `RTP/AVP;unicast;client_port=C-D;server_port=S-T;ssrc=XXXXXXXX;mode=play`, with the
    /// profile string as the client wrote it and `server_ports` the advertised RTP/RTCP pair.
    /// TCP: `RTP/AVP/TCP;unicast;interleaved=N-M;ssrc=XXXXXXXX;mode=play`; `server_ports` is not
    /// used.
    #[must_use]
    pub fn to_reply(&self, server_ports: (u16, u16), ssrc: u32) -> String {
        match *self {
            Self::Udp { profile, client_rtp, client_rtcp } => format!(
                "{};unicast;client_port={client_rtp}-{client_rtcp};server_port={}-{};ssrc={ssrc:08X};mode=play",
                profile.as_str(),
                server_ports.0,
                server_ports.1,
            ),
            Self::Interleaved { rtp_channel, rtcp_channel, avpf } => format!(
                "{};unicast;interleaved={rtp_channel}-{rtcp_channel};ssrc={ssrc:08X};mode=play",
                if avpf { "RTP/AVPF/TCP" } else { "RTP/AVP/TCP" }
            ),
        }
    }
}

/// The lower transport of a spec's protocol string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lower {
    /// `RTP/AVP` or `RTP/AVP/UDP`.
    Udp(UdpProfile),
    /// `RTP/AVP/TCP`, or `RTP/AVPF/TCP` when `avpf`.
    Tcp {
        /// `RTP/AVPF/TCP`.
        avpf: bool,
    },
}

/// One parsed transport spec, before we decide whether we serve it. Unknown parameters are
/// dropped (RFC 7826 §18.54 says to ignore them; RFC 2326 clients send `ssrc`, `ttl`, `layers`,
/// `append`, `source`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportSpec {
    /// The lower transport, or `None` for a protocol we do not speak (`RTP/SAVP`,
    /// `RAW/RAW/UDP`, ...).
    pub lower: Option<Lower>,
    /// `multicast` was given. Neither keyword means unicast here: RFC 2326's default is
    /// multicast, but none of ffmpeg, GStreamer, VLC or live555 omits the keyword when it wants
    /// multicast.
    pub multicast: bool,
    /// `client_port=a-b`, or `a` alone meaning `a, a+1`. `None` if absent or invalid.
    pub client_port: Option<(u16, u16)>,
    /// `interleaved=n-m`, or `n` alone meaning `n, n+1`. `None` if absent or invalid.
    pub interleaved: Option<(u8, u8)>,
    /// `mode=` lower-cased and unquoted; `None` means the default, `play`.
    pub mode: Option<String>,
    /// A parameter was present but malformed (a port of 0, `client_port=x`, ...).
    pub malformed: bool,
}

impl TransportSpec {
    /// Parses one comma-free spec, `protocol *(";" parameter)`.
    #[must_use]
    pub fn parse(spec: &str) -> Self {
        let mut parts = spec.split(';').map(str::trim);
        let protocol = parts.next().unwrap_or_default();
        let lower = if protocol.eq_ignore_ascii_case("RTP/AVP") {
            Some(Lower::Udp(UdpProfile::Avp))
        } else if protocol.eq_ignore_ascii_case("RTP/AVP/UDP") {
            Some(Lower::Udp(UdpProfile::AvpUdp))
        } else if protocol.eq_ignore_ascii_case("RTP/AVP/TCP") {
            Some(Lower::Tcp { avpf: false })
        } else if protocol.eq_ignore_ascii_case("RTP/AVPF") {
            Some(Lower::Udp(UdpProfile::Avpf))
        } else if protocol.eq_ignore_ascii_case("RTP/AVPF/UDP") {
            Some(Lower::Udp(UdpProfile::AvpfUdp))
        } else if protocol.eq_ignore_ascii_case("RTP/AVPF/TCP") {
            Some(Lower::Tcp { avpf: true })
        } else {
            None
        };
        let mut out = Self {
            lower,
            multicast: false,
            client_port: None,
            interleaved: None,
            mode: None,
            malformed: false,
        };
        for param in parts {
            let (name, value) = match param.split_once('=') {
                Some((n, v)) => (n.trim(), Some(unquote(v.trim()))),
                None => (param, None),
            };
            if name.eq_ignore_ascii_case("multicast") {
                out.multicast = true;
            } else if name.eq_ignore_ascii_case("unicast") {
                out.multicast = false;
            } else if name.eq_ignore_ascii_case("client_port") {
                out.client_port = value.and_then(parse_u16_pair);
                out.malformed |= out.client_port.is_none();
            } else if name.eq_ignore_ascii_case("interleaved") {
                out.interleaved = value.and_then(parse_u8_pair);
                out.malformed |= out.interleaved.is_none();
            } else if name.eq_ignore_ascii_case("mode") {
                out.mode = value.map(str::to_ascii_lowercase);
            }
            // destination, source, ssrc, ttl, layers, port, append and unknown parameters are
            // ignored: see the module docs.
        }
        out
    }

    /// The transport this spec asks for, if it is one we serve (see [`negotiate`]).
    #[must_use]
    pub fn supported(&self) -> Option<Transport> {
        if self.multicast || self.malformed {
            return None;
        }
        if self.mode.as_deref().is_some_and(|m| m != "play") {
            return None;
        }
        match self.lower? {
            Lower::Udp(profile) => {
                let (client_rtp, client_rtcp) = self.client_port?;
                Some(Transport::Udp { profile, client_rtp, client_rtcp })
            }
            Lower::Tcp { avpf } => {
                let (rtp_channel, rtcp_channel) = self.interleaved.unwrap_or((0, 1));
                Some(Transport::Interleaved { rtp_channel, rtcp_channel, avpf })
            }
        }
    }
}

/// Parses a `Transport` value into its specs, in the client's order of preference (RFC 2326
/// §12.39: comma-separated; several `Transport` headers arrive joined by `, `).
#[must_use]
pub fn parse_transports(value: &str) -> Vec<TransportSpec> {
    value.split(',').map(str::trim).filter(|s| !s.is_empty()).map(TransportSpec::parse).collect()
}

/// Chooses the first spec of `value` that we serve (RFC 2326 §12.39: "the server chooses the
/// first it supports"):
///
/// - `RTP/AVP` or `RTP/AVP/UDP`, not `multicast`, with `client_port=a-b` (or `a` → `a, a+1`);
/// - `RTP/AVP/TCP` with `interleaved=n-m` (or `n` → `n, n+1`; absent → `0-1`);
/// - `mode` absent or `play` (`record` is not served yet).
///
/// With `interleaved_only` (an RTSPS connection) UDP specs are passed over: media must stay
/// inside the TLS connection.
///
/// # Errors
///
/// [`TransportError::Unsupported`] if no spec qualifies, e.g. a multicast-only offer.
pub fn negotiate(value: &str, interleaved_only: bool) -> Result<Transport, TransportError> {
    parse_transports(value)
        .iter()
        .filter_map(TransportSpec::supported)
        .find(|t| !interleaved_only || matches!(t, Transport::Interleaved { .. }))
        .ok_or_else(|| TransportError::Unsupported(value.to_owned()))
}

fn unquote(v: &str) -> &str {
    v.strip_prefix('"').and_then(|v| v.strip_suffix('"')).unwrap_or(v)
}

/// `a-b` or `a` (→ `a, a+1`); ports must be non-zero.
fn parse_u16_pair(v: &str) -> Option<(u16, u16)> {
    let (a, b) = match v.split_once('-') {
        Some((a, b)) => (a.trim().parse::<u16>().ok()?, b.trim().parse::<u16>().ok()?),
        None => {
            let a = v.trim().parse::<u16>().ok()?;
            (a, a.checked_add(1)?)
        }
    };
    (a != 0 && b != 0).then_some((a, b))
}

/// `n-m` or `n` (→ `n, n+1`).
fn parse_u8_pair(v: &str) -> Option<(u8, u8)> {
    match v.split_once('-') {
        Some((a, b)) => Some((a.trim().parse().ok()?, b.trim().parse().ok()?)),
        None => {
            let a = v.trim().parse::<u8>().ok()?;
            Some((a, a.checked_add(1)?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn udp(profile: UdpProfile, client_rtp: u16, client_rtcp: u16) -> Transport {
        Transport::Udp { profile, client_rtp, client_rtcp }
    }

    fn tcp(rtp_channel: u8, rtcp_channel: u8) -> Transport {
        Transport::Interleaved { rtp_channel, rtcp_channel, avpf: false }
    }

    /// The offers ffmpeg, GStreamer, live555 and VLC send, and the edge cases of the task, with
    /// the expected choice.
    #[test]
    fn negotiation_table() {
        use UdpProfile::{Avp, AvpUdp, Avpf, AvpfUdp};
        let ok: &[(&str, Transport)] = &[
            // ffmpeg 5.1
            ("RTP/AVP/UDP;unicast;client_port=28826-28827", udp(AvpUdp, 28826, 28827)),
            ("RTP/AVP/TCP;unicast;interleaved=0-1", tcp(0, 1)),
            // GStreamer 1.22, live555, VLC SAT>IP, ffmpeg satip://
            ("RTP/AVP;unicast;client_port=35466-35467", udp(Avp, 35466, 35467)),
            ("RTP/AVP;unicast;client_port=9312-9313", udp(Avp, 9312, 9313)),
            // second track of ffmpeg over TCP
            ("RTP/AVP/TCP;unicast;interleaved=2-3", tcp(2, 3)),
            // single values
            ("RTP/AVP;unicast;client_port=5000", udp(Avp, 5000, 5001)),
            ("RTP/AVP/TCP;unicast;interleaved=4", tcp(4, 5)),
            // missing interleaved: we choose 0-1
            ("RTP/AVP/TCP;unicast", tcp(0, 1)),
            ("RTP/AVP/TCP", tcp(0, 1)),
            // multicast first, then unicast: first supported wins
            ("RTP/AVP;multicast, RTP/AVP;unicast;client_port=6000-6001", udp(Avp, 6000, 6001)),
            ("RTP/AVP;multicast;port=5000-5001,RTP/AVP/TCP;unicast;interleaved=0-1", tcp(0, 1)),
            // unsupported profile first
            ("RTP/SAVP;unicast;client_port=1-2, RTP/AVP/TCP;interleaved=0-1", tcp(0, 1)),
            // destination is ignored: media goes to the RTSP peer
            ("RTP/AVP;unicast;destination=10.1.2.3;client_port=7000-7001", udp(Avp, 7000, 7001)),
            // unknown params, quoting, case and whitespace
            (
                "rtp/avp ; unicast ; client_port = 8000-8001 ; ssrc=1234ABCD ; x-foo=bar ; mode=\"PLAY\"",
                udp(Avp, 8000, 8001),
            ),
            ("RTP/AVP/TCP;unicast;interleaved=0-1;mode=play", tcp(0, 1)),
            // no unicast keyword at all: lenient
            ("RTP/AVP;client_port=4000-4001", udp(Avp, 4000, 4001)),
            // with feedback (RFC 4585), as GStreamer asks when the description offers it
            ("RTP/AVPF;unicast;client_port=5000-5001", udp(Avpf, 5000, 5001)),
            ("RTP/AVPF/UDP;unicast;client_port=5000-5001", udp(AvpfUdp, 5000, 5001)),
            (
                "RTP/AVPF/TCP;unicast;interleaved=0-1",
                Transport::Interleaved { rtp_channel: 0, rtcp_channel: 1, avpf: true },
            ),
        ];
        for (offer, want) in ok {
            assert_eq!(negotiate(offer, false).as_ref(), Ok(want), "{offer}");
        }
        let unsupported = [
            "RTP/AVP;multicast",
            "RTP/AVP/UDP;multicast",
            "RTP/AVP;multicast;port=5000-5001",
            "RTP/AVP;unicast",                       // UDP without client_port
            "RTP/AVP;unicast;client_port=0-1",       // port 0
            "RTP/AVP;unicast;client_port=65535",     // no room for RTCP
            "RTP/AVP;unicast;client_port=x-y",       // garbage
            "RTP/AVP/TCP;unicast;interleaved=255",   // no room for RTCP
            "RTP/AVP/TCP;unicast;interleaved=0-300", // not a channel
            "RTP/AVP;unicast;client_port=5000-5001;mode=record",
            "RTP/AVP/TCP;interleaved=0-1;mode=\"RECORD\"",
            "RTP/SAVPF;unicast;client_port=5000-5001",
            "RAW/RAW/UDP;unicast;client_port=5000-5001",
            "",
            ",,,",
        ];
        for offer in unsupported {
            assert_eq!(
                negotiate(offer, false),
                Err(TransportError::Unsupported(offer.to_owned())),
                "{offer}"
            );
        }
    }

    #[test]
    fn a_tls_connection_takes_interleaved_only() {
        let both = "RTP/AVP;unicast;client_port=5000-5001, RTP/AVP/TCP;unicast;interleaved=0-1";
        assert!(matches!(negotiate(both, false), Ok(Transport::Udp { .. })));
        assert!(matches!(negotiate(both, true), Ok(Transport::Interleaved { .. })));
        let udp = "RTP/AVP;unicast;client_port=5000-5001";
        assert_eq!(negotiate(udp, true), Err(TransportError::Unsupported(udp.to_owned())));
    }

    #[test]
    fn reply_keeps_profile_and_lower_transport() {
        let t = negotiate("RTP/AVP/UDP;unicast;client_port=28826-28827", false).unwrap();
        assert_eq!(
            t.to_reply((6970, 6971), 0x1A2B_3C4D),
            "RTP/AVP/UDP;unicast;client_port=28826-28827;server_port=6970-6971;ssrc=1A2B3C4D;mode=play"
        );
        let t = negotiate("RTP/AVP;unicast;client_port=5000", false).unwrap();
        assert_eq!(
            t.to_reply((6970, 6971), 0xAB),
            "RTP/AVP;unicast;client_port=5000-5001;server_port=6970-6971;ssrc=000000AB;mode=play"
        );
        let t = negotiate("RTP/AVP/TCP;unicast;interleaved=2-3", false).unwrap();
        assert_eq!(
            t.to_reply((6970, 6971), 0xFFFF_FFFF),
            "RTP/AVP/TCP;unicast;interleaved=2-3;ssrc=FFFFFFFF;mode=play"
        );
    }

    #[test]
    fn specs_are_split_in_order() {
        let specs = parse_transports("RTP/AVP;multicast, RTP/AVP/TCP;interleaved=0-1");
        assert_eq!(specs.len(), 2);
        assert!(specs[0].multicast);
        assert_eq!(specs[1].lower, Some(Lower::Tcp { avpf: false }));
        assert_eq!(specs[1].interleaved, Some((0, 1)));
    }
}
