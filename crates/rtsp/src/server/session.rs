//! One RTSP session: its identity, its data-plane parameters and its state (RFC 2326 §12.37,
//! Appendix A.2).
//!
//! The state machine is RFC 2326 Appendix A.2 reduced to what a VOD server needs: a session is
//! created `Ready` by SETUP, `Playing` once the data plane has started, and `Paused` with a
//! saved position after PAUSE or at the end of the media. There is no `Recording`. `Init` is
//! "no session". The transitions themselves are made by [`super::ServerCore`]; this module
//! holds the record and its read-only view.

use std::fmt;
use std::net::SocketAddr;

use isochron_base::mix::SplitMix64;
use isochron_base::{Gsn, Instant, MediaTime, ObjectId, StreamId};

use super::{ConnId, Presentation};
use crate::headers::session::parse_session_id;
use crate::headers::transport::Transport;

/// A session identifier: 16 upper-case hex digits drawn from the core's seeded generator
/// (opaque and at least 8 characters, interop §2.6).
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// A fresh id from `rng`.
    pub(crate) fn generate(rng: &mut SplitMix64) -> Self {
        Self(format!("{:016X}", rng.next_u64()))
    }

    /// The id named by a `Session` header value (parameters such as `;timeout=` stripped).
    #[must_use]
    pub fn from_header(value: &str) -> Self {
        Self(parse_session_id(value).to_owned())
    }

    /// The id as sent in `Session` headers.
    #[must_use]
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a session's media goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionTransport {
    /// RTP/RTCP over UDP to the RTSP peer's IP and the client's ports (never to a
    /// `destination=`, interop §2.9).
    Udp {
        /// Where RTP goes.
        client_rtp: SocketAddr,
        /// Where RTCP goes.
        client_rtcp: SocketAddr,
        /// The player chose the AVPF profile (RFC 4585): it sends generic NACKs early and takes
        /// retransmissions in the RFC 4588 RTX stream the description offered.
        feedback: bool,
    },
    /// Interleaved on an RTSP connection (RFC 2326 §10.12).
    Interleaved {
        /// The connection that carries the frames.
        conn: ConnId,
        /// The channel for RTP.
        rtp_channel: u8,
        /// The channel for RTCP.
        rtcp_channel: u8,
    },
}

/// The state of a session (RFC 2326 Appendix A.2, without recording).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// Set up, never played: a PLAY without `Range` starts at the beginning.
    Ready,
    /// The data plane is sending.
    Playing,
    /// Stopped with a saved position: a PLAY without `Range` resumes there.
    Paused,
}

impl SessionState {
    /// The state's name, for logs and refusals.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ready => "Ready",
            Self::Playing => "Playing",
            Self::Paused => "Paused",
        }
    }
}

/// A point in a presentation as the sender sees it: the next packet to send and its send time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The packet's global sequence number within the object.
    pub gsn: Gsn,
    /// The packet's send time on the object's timeline.
    pub time: MediaTime,
}

impl Position {
    /// The first packet of an object.
    pub const START: Self = Self { gsn: Gsn(0), time: MediaTime::ZERO };
}

/// A read-only view of a session, for the glue and for tests.
#[derive(Debug, Clone, Copy)]
pub struct SessionView<'a>(&'a Session);

impl<'a> SessionView<'a> {
    /// The session id.
    #[must_use]
    pub fn id(&self) -> &'a SessionId {
        &self.0.id
    }

    /// The session's data flow.
    #[must_use]
    pub fn stream(&self) -> StreamId {
        self.0.stream
    }

    /// The object being served.
    #[must_use]
    pub fn object(&self) -> ObjectId {
        self.0.presentation.object
    }

    /// The presentation name the client asked for.
    #[must_use]
    pub fn name(&self) -> &'a str {
        &self.0.name
    }

    /// Where media goes.
    #[must_use]
    pub fn transport(&self) -> &'a SessionTransport {
        &self.0.transport
    }

    /// The SSRC announced in `Transport: …;ssrc=` (random, never 0, unique among sessions).
    #[must_use]
    pub fn ssrc(&self) -> u32 {
        self.0.ssrc
    }

    /// Added to the GSN to give the RTP sequence number ([`super::rtp_seq`]).
    #[must_use]
    pub fn seq_offset(&self) -> u16 {
        self.0.seq_offset
    }

    /// Added to the 90 kHz media time to give the RTP timestamp ([`super::rtp_timestamp`]).
    #[must_use]
    pub fn rtp_ts_offset(&self) -> u32 {
        self.0.rtp_ts_offset
    }

    /// The session's state.
    #[must_use]
    pub fn state(&self) -> SessionState {
        self.0.state
    }

    /// The saved position while `Paused` (set by PAUSE or the end of the stream).
    #[must_use]
    pub fn position(&self) -> Option<Position> {
        self.0.position
    }

    /// The track URL as the client used it in SETUP (the `url=` of `RTP-Info`).
    #[must_use]
    pub fn track_url(&self) -> &'a str {
        &self.0.track_url
    }

    /// When the client last showed liveness.
    #[must_use]
    pub fn last_seen(&self) -> Instant {
        self.0.last_seen
    }

    /// When the session expires without further liveness; `None` for interleaved sessions,
    /// which live as long as their connection.
    #[must_use]
    pub fn expires(&self) -> Option<Instant> {
        self.0.deadline
    }
}

/// The core's record of one session.
#[derive(Debug, Clone)]
pub(crate) struct Session {
    pub(crate) id: SessionId,
    pub(crate) stream: StreamId,
    /// The name the client asked for (the library may spell its own differently).
    pub(crate) name: String,
    pub(crate) presentation: Presentation,
    pub(crate) transport: SessionTransport,
    /// The negotiated transport, kept for re-SETUP replies.
    pub(crate) negotiated: Transport,
    pub(crate) ssrc: u32,
    pub(crate) seq_offset: u16,
    pub(crate) rtp_ts_offset: u32,
    pub(crate) state: SessionState,
    pub(crate) position: Option<Position>,
    pub(crate) track_url: String,
    pub(crate) last_seen: Instant,
    /// When a UDP session expires without liveness; `None` for interleaved sessions.
    pub(crate) deadline: Option<Instant>,
    /// The address of the client that created it (`max_sessions_per_client`).
    pub(crate) client: std::net::IpAddr,
    /// The connection its last request came over, and whether that connection is still open.
    pub(crate) conn: Option<(ConnId, bool)>,
    /// Paused because its stream reached the end, not by the client.
    pub(crate) ended: bool,
    /// Its client has sent RTCP naming it (UDP): its silence then means it is gone.
    pub(crate) rtcp_seen: bool,
}

impl Session {
    pub(crate) fn view(&self) -> SessionView<'_> {
        SessionView(self)
    }

    /// The connection whose lifetime bounds this session, if interleaved.
    pub(crate) fn interleaved_conn(&self) -> Option<ConnId> {
        match self.transport {
            SessionTransport::Interleaved { conn, .. } => Some(conn),
            SessionTransport::Udp { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_16_hex_digits_and_parse_back() {
        let mut rng = SplitMix64::new(1);
        let id = SessionId::generate(&mut rng);
        assert_eq!(id.as_str().len(), 16);
        assert!(id.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(SessionId::from_header(&format!("{id};timeout=60")), id);
        assert_ne!(SessionId::generate(&mut rng), id);
    }
}
