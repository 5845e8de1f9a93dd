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

use isochron_base::{Instant, ObjectId, StreamId};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::RngCore as _;

use super::{ConnId, ConnInfo, Presentation};
use crate::headers::session::parse_session_id;
use crate::headers::transport::Transport;

/// A session identifier: 16 upper-case hex digits, 64 bits of the core's ChaCha20 id stream
/// (opaque and at least 8 characters, RFC 2326 §3.4; unguessable when the core has an id key,
/// [`super::ServerCore::with_id_key`]).
#[derive(Clone, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
pub struct SessionId(String);

impl SessionId {
    /// A fresh id from `rng`.
    pub(crate) fn generate(rng: &mut ChaCha20Rng) -> Self {
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
    /// `destination=`, RFC 2326 §12.39, §16).
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

pub use isochron_base::Position;

/// One set-up track of a session, for the glue.
#[derive(Debug, Clone, Copy)]
pub struct TrackView<'a> {
    index: usize,
    track: &'a TrackSession,
}

impl<'a> TrackView<'a> {
    /// The track's index in the presentation (`trackID=N`).
    #[must_use]
    pub fn index(&self) -> usize {
        self.index
    }

    /// Where its media goes.
    #[must_use]
    pub fn transport(&self) -> &'a SessionTransport {
        &self.track.transport
    }

    /// Its SSRC (random, never 0, unique among sessions and tracks).
    #[must_use]
    pub fn ssrc(&self) -> u32 {
        self.track.ssrc
    }

    /// Added to a packet's `track_seq` to give its RTP sequence number ([`super::rtp_seq`]).
    #[must_use]
    pub fn seq_offset(&self) -> u16 {
        self.track.seq_offset
    }

    /// Added to a packet's timestamp on the track's clock to give its RTP timestamp.
    #[must_use]
    pub fn rtp_ts_offset(&self) -> u32 {
        self.track.rtp_ts_offset
    }

    /// The track URL as the client used it in SETUP (the `url=` of `RTP-Info`).
    #[must_use]
    pub fn url(&self) -> &'a str {
        &self.track.url
    }
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

    /// The RTSP connection the session was last asked on (for an interleaved session, the one
    /// that carries it), if still open.
    #[must_use]
    pub fn conn(&self) -> Option<ConnId> {
        self.0.conn.map(|(c, _)| c)
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

    /// Where media goes (the first set-up track's transport; every track of a session uses
    /// the same kind, over the same connection when interleaved).
    #[must_use]
    pub fn transport(&self) -> &'a SessionTransport {
        &self.0.primary().transport
    }

    /// The SSRC of the first set-up track, announced in `Transport: …;ssrc=` (random, never 0,
    /// unique among sessions).
    #[must_use]
    pub fn ssrc(&self) -> u32 {
        self.0.primary().ssrc
    }

    /// The first set-up track's sequence offset: added to the GSN (MPEG-TS) to give the RTP
    /// sequence number ([`super::rtp_seq`]).
    #[must_use]
    pub fn seq_offset(&self) -> u16 {
        self.0.primary().seq_offset
    }

    /// The first set-up track's timestamp offset: added to the 90 kHz media time (MPEG-TS) to
    /// give the RTP timestamp ([`super::rtp_timestamp`]).
    #[must_use]
    pub fn rtp_ts_offset(&self) -> u32 {
        self.0.primary().rtp_ts_offset
    }

    /// The number of tracks of the presentation (1 for MPEG-TS), set up or not.
    #[must_use]
    pub fn track_count(&self) -> usize {
        self.0.tracks.len()
    }

    /// The set-up tracks, in index order.
    pub fn tracks(&self) -> impl Iterator<Item = TrackView<'a>> + 'a {
        let tracks: &'a [Option<TrackSession>] = &self.0.tracks;
        tracks
            .iter()
            .enumerate()
            .filter_map(|(index, t)| t.as_ref().map(|track| TrackView { index, track }))
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

    /// The first set-up track's URL as the client used it in SETUP (the `url=` of `RTP-Info`).
    #[must_use]
    pub fn track_url(&self) -> &'a str {
        &self.0.primary().url
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
    /// One slot per track of the presentation (one for MPEG-TS); at least one is set up (the
    /// SETUP that created the session), and its first is the *primary* track.
    pub(crate) tracks: Vec<Option<TrackSession>>,
    pub(crate) state: SessionState,
    pub(crate) position: Option<Position>,
    pub(crate) last_seen: Instant,
    /// When a UDP session expires without liveness; `None` for interleaved sessions.
    pub(crate) deadline: Option<Instant>,
    /// The address of the client that created it (`max_sessions_per_client`).
    pub(crate) client: std::net::IpAddr,
    /// The user that created it, when its SETUP carried credentials.
    pub(crate) user: Option<std::sync::Arc<str>>,
    /// When it ends if it has not played by then (`setup_timeout`).
    pub(crate) unplayed_until: Option<Instant>,
    /// The connection its last request came over, and whether that connection is still open.
    pub(crate) conn: Option<(ConnId, bool)>,
    /// Paused because its stream reached the end, not by the client.
    pub(crate) ended: bool,
    /// Its client has sent RTCP naming it (UDP): its silence then means it is gone.
    pub(crate) rtcp_seen: bool,
}

/// One set-up track of a session.
#[derive(Debug, Clone)]
pub(crate) struct TrackSession {
    pub(crate) transport: SessionTransport,
    /// The negotiated transport, kept for re-SETUP replies.
    pub(crate) negotiated: Transport,
    pub(crate) ssrc: u32,
    pub(crate) seq_offset: u16,
    pub(crate) rtp_ts_offset: u32,
    pub(crate) url: String,
}

impl Session {
    pub(crate) fn view(&self) -> SessionView<'_> {
        SessionView(self)
    }

    /// Whether a request that came over `conn` may act on this session: an interleaved
    /// session answers only the connection that carries it; a UDP one only its client's
    /// address, with the same credentials (a user's session only that user's). Knowing a
    /// session's id is not enough (RFC 2326 §16, "Session hijacking": sessions are not tied to
    /// connections, so the server must bind them itself).
    pub(crate) fn belongs_to(&self, conn: &ConnInfo) -> bool {
        let carried_by = self.set_up().find_map(|t| match t.transport {
            SessionTransport::Interleaved { conn, .. } => Some(conn),
            SessionTransport::Udp { .. } => None,
        });
        match carried_by {
            Some(carrier) => carrier == conn.id,
            None => conn.peer.ip() == self.client && self.user == conn.user,
        }
    }

    /// The first set-up track. A session is created by the SETUP of one of its tracks and never
    /// loses it, so there is one.
    pub(crate) fn primary(&self) -> &TrackSession {
        // Invariant: `create` sets up one track and nothing clears a track slot.
        self.tracks.iter().flatten().next().expect("a session has a set-up track")
    }

    /// The set-up tracks.
    pub(crate) fn set_up(&self) -> impl Iterator<Item = &TrackSession> {
        self.tracks.iter().flatten()
    }

    /// The connection whose lifetime bounds this session, if interleaved.
    pub(crate) fn interleaved_conn(&self) -> Option<ConnId> {
        match self.primary().transport {
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
        use rand_chacha::rand_core::SeedableRng as _;
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let id = SessionId::generate(&mut rng);
        assert_eq!(id.as_str().len(), 16);
        assert!(id.as_str().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(SessionId::from_header(&format!("{id};timeout=60")), id);
        assert_ne!(SessionId::generate(&mut rng), id);
    }
}
