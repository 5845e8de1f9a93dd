//! The RTSP session core: a sans-IO state machine for a VOD server (RFC 2326 §10, Appendix A.2;
//! the players' dialogs it is checked against are in `src/server/testdata/`).
//!
//! Shaped like quinn-proto: the glue (crate `server`) owns sockets and clocks and feeds events
//! in with `handle_*(now, …)`; the core answers with values and queues outputs for `poll_*()`.
//! It never reads a clock, never touches a socket, and draws randomness (session ids, SSRCs,
//! sequence and timestamp offsets) from a generator seeded by the caller, so a test or the
//! simulator replays it exactly.
//!
//! # Requests and actions
//!
//! [`ServerCore::handle_request`] either answers at once ([`Handled::Respond`]) or, when the data
//! plane must act first, hands the glue a [`PlayAction`] or [`PauseAction`]. The glue starts,
//! seeks or stops the sender and reports back with [`ServerCore::finish_play`] /
//! [`ServerCore::finish_pause`], which produce the response. The glue must send that response
//! before the first RTP packet of the new play (RFC 2326 §12.33), and must finish an action before
//! handling the next request of the same connection (answers go out in order, RFC 2326 §9.1).
//!
//! # The sender contract
//!
//! The `RTP-Info` of a PLAY response promises the sequence number and timestamp of the first
//! packet sent after it (RFC 2326 §12.33). The core and the sender compute both with the same two
//! functions, [`rtp_seq`] and [`rtp_timestamp`], from the session's random offsets
//! ([`SessionView::seq_offset`], [`SessionView::rtp_ts_offset`]) and the packet's [`Position`].
//!
//! # Behaviour, by rule
//!
//! - `CSeq` is echoed verbatim, `0` included; missing or not `1*DIGIT` → 400 (RFC 2326 §12.17;
//!   Debian's VLC starts at 0). Every response carries `CSeq` and `Server`, `Session` when the
//!   request is in a live session, and `Content-Length` with a body. `Date` is left to the glue
//!   (the core has no clock): it may `insert_header(DATE, …)` before encoding.
//! - RTSP/2.0 → 505 (GStreamer then retries with 1.0). A non-empty `Require` →
//!   551 with `Unsupported` (RFC 2326 §12.32). Methods other than the eight in `Public` → 501
//!   with `Public` (RFC 2326 §12.28).
//! - OPTIONS (`*` or any URL) → 200 with `Public`, which lists GET_PARAMETER and
//!   SET_PARAMETER because clients pick their keep-alive from it (mediamtx#1066).
//! - DESCRIBE → the SDP of [`crate::sdp`], `Content-Type: application/sdp`, and a
//!   `Content-Base` with exactly one trailing slash ([`crate::url::presentation_base`]); unknown
//!   name → 404.
//! - SETUP (RFC 2326 §10.4) on a track URL, the aggregate URL, or the bare presentation URL
//!   without DESCRIBE (ffmpeg `satip://`, Debian VLC; RFC 2326 §C.3). Without `Session` it
//!   creates a session; when `max_sessions` are live, or the client's network (its address,
//!   an IPv6 /64: `client_prefix`) already holds `max_sessions_per_client` sessions whose
//!   streams have not ended, it refuses with 503 (the latter with `Retry-After`; the session table is
//!   a server limit, not bandwidth: 453 is kept for the data plane's admission decision at PLAY,
//!   so the two causes stay apart in logs). With an unknown `Session` → 454; on a playing
//!   session → 455; naming another presentation → 459. Transport per
//!   [`crate::headers::transport`]; 461 when nothing offered is served (on a TLS connection,
//!   [`ConnInfo::secure`], only interleaved transports are served). A SETUP on the bare
//!   presentation URL also gets `com.ses.streamID` and `Content-Base`, from which Debian's VLC
//!   builds its PLAY URL.
//! - PLAY (RFC 2326 §10.5, §12.29): a `Range` start seeks ([`PlayStart::Seek`]), also
//!   while playing (an immediate seek); without a start it resumes when paused
//!   ([`PlayStart::Resume`]) and begins when ready ([`PlayStart::Beginning`]); `npt=now-` is
//!   "no start". While playing without a new start → 200 and nothing to do. Bad `Range`, or a
//!   start beyond the duration → 457. A live feed ([`Presentation::live`]) has no duration:
//!   any start is handed on, an end is dropped, and `npt=now-` is its live edge
//!   ([`PlayStart::Beginning`]), also while playing; so is `npt=0-`, which players send with
//!   their first PLAY whatever the stream. `Scale` (RFC 2326 §12.34, trick play) above 1 and up to
//!   10 and `Speed` (§12.35, faster or slower delivery) from 0.1 to 10 are handed to the data
//!   plane ([`PlayAction::scale`], [`PlayAction::speed`]), which says what it applied
//!   ([`PlayOutcome::Started`]'s `rates`); the response carries the applied `Scale` (1 for
//!   normal play, e.g. for a reverse scale) and `Speed` whenever the request had one. A value
//!   that is not a number → 400.
//! - PAUSE (RFC 2326 §10.6): while playing the data plane stops and reports the position; in
//!   Ready or Paused → 200 at once.
//! - TEARDOWN (RFC 2326 §10.7) → 200, the session is gone and [`Event::Closed`] is queued.
//!   The connection stays open: the client closes it.
//! - GET_PARAMETER → 200 whatever its body: it is a keep-alive ping for every client we know,
//!   and answering a ping with an error breaks clients (mediamtx#842). SET_PARAMETER → 200 with
//!   an empty body; 451 with parameters we do not know (RFC 2326 §10.9). The one parameter we
//!   know is isochron's MTFC rate request (Yima §2.5; `docs/design/mtfc.md`):
//!   `Content-Type: text/parameters` with the line `x-isochron-rate: 1.05` (a multiplier of the
//!   session's nominal pace, 0.1 to 10) → [`Handled::Rate`], answered by
//!   [`ServerCore::finish_rate`] with 200 and the pace applied, echoed in the same form. A value
//!   that is not a number in range → 400; without `Session` → 455. The player may add its
//!   buffer (`x-isochron-buffer: 0.42/2`, [`BUFFER_PARAMETER`]), which adaptive bit rate reads,
//!   and ask for a delivery that smooths (`x-isochron-pacing: rate`, [`PACING_PARAMETER`]):
//!   the answer says which [`Pacing`] is in force.
//! - PLAY, PAUSE and TEARDOWN without `Session` → 455 (Appendix A.2: not valid in Init). With
//!   a `Session` that is not live → 454 (OPTIONS and GET/SET_PARAMETER included, so a
//!   keep-alive on an expired session is told so).
//! - A request naming a session that is not its own → 454, as if the session did not exist,
//!   and nothing changes (its liveness included): an interleaved session is its connection's,
//!   a UDP one its client address's and its user's ([`ConnInfo::user`]) (RFC 2326 §16, session
//!   hijacking). Session ids are 64 bits of a ChaCha20 stream ([`ServerCore::with_id_key`]).
//! - Requests in a session are routed by `Session`; the request-URI is not checked for
//!   PLAY, PAUSE, TEARDOWN, GET/SET_PARAMETER (clients build those URLs differently), which is
//!   what makes `rtsp://h/stream=0`, `rtsp://h/name`, `rtsp://h/name/` and track URLs all work.
//! - Liveness (RFC 7826 §10.5): any request naming the session, RTCP naming its
//!   SSRC ([`ServerCore::handle_rtcp`]), or interleaved RTCP on its channels refreshes it. UDP
//!   sessions expire `session_timeout` after the last sign of life, or
//!   `paused_session_timeout` while paused (ffmpeg sends nothing while paused), except a session
//!   whose stream ended and whose RTSP connection closed: nobody will resume it, so it gets
//!   `session_timeout` (a crowd of players that play to the end and vanish frees its slots in a
//!   minute, not five). A *playing* UDP session whose client has sent RTCP and then falls silent
//!   expires after `silence_timeout` (20 s), well before `session_timeout`: a client that
//!   reported and stopped is gone (RFC 3550 §6.3.5 times a member out after five reporting
//!   intervals), and the server stops sending to it ([`CloseReason::Silence`]). Clients that
//!   never send RTCP keep the plain timeout. A session of any transport set up and never played
//!   ends `setup_timeout` (20 s) after its SETUP ([`CloseReason::Timeout`]). Interleaved
//!   sessions never expire while their connection is open and close with it. UDP sessions
//!   outlive their RTSP connection (RFC 2326 §1.3: sessions are not tied to connections), which
//!   also lets the session that ffmpeg abandons on UDP→TCP fallback (PAUSE, then a new SETUP
//!   without `Session`) be reaped by timeout.

pub mod publish;
mod session;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::Duration;

use isochron_base::mix::SplitMix64;
use isochron_base::{BitRate, Gsn, Instant, MediaTime, ObjectId, Pace, StreamId};
use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng as _;
use rtsp_types::headers::{
    CONNECTION, CONTENT_BASE, CONTENT_TYPE, CSEQ, PUBLIC, RANGE, REQUIRE, RETRY_AFTER, RTP_INFO,
    SCALE, SERVER, SESSION, SPEED, TRANSPORT, UNSUPPORTED, USER_AGENT,
};
use rtsp_types::{HeaderName, Method, Request, Response, StatusCode, Version};

use self::session::Session;
use self::session::TrackSession;
pub use self::session::{
    Position, SessionId, SessionState, SessionTransport, SessionView, TrackView,
};
use crate::codec::ParseError;
use crate::headers::range::{NptRange, NptTime, RangeError, format_npt_range};
use crate::headers::rtp_info::{RtpInfo, format_rtp_info};
use crate::headers::session::format_session;
use crate::headers::transport::{Transport, TransportError, negotiate};
use crate::sdp::{MediaTrack, SdpParams, mp2t_sdp, native_sdp};
use crate::status::{Refusal, reason_phrase};
use crate::url::{Target, parse_target, presentation_base};

/// The methods we implement, as advertised in `Public` (RFC 2326 §12.28).
pub const PUBLIC_METHODS: &str =
    "OPTIONS, DESCRIBE, SETUP, PLAY, PAUSE, TEARDOWN, GET_PARAMETER, SET_PARAMETER";

/// Seconds a 503 asks the client to wait before it tries again (`Retry-After`).
const RETRY_AFTER_S: &str = "5";

/// The SAT>IP stream id header of a SETUP reply: Debian's VLC (SAT>IP module) sends PLAY and
/// TEARDOWN to `stream=<id>`.
pub const COM_SES_STREAM_ID: &str = "com.ses.streamID";

/// The RTP sequence number of the packet with global sequence number `gsn`:
/// `(seq_offset + gsn) mod 2^16`.
///
/// **Contract with the sender.** The `seq` of `RTP-Info` is computed with this function, so the
/// sender must stamp every RTP packet with exactly this value (RFC 2326 §12.33).
#[must_use]
pub fn rtp_seq(seq_offset: u16, gsn: Gsn) -> u16 {
    // Truncation is the reduction mod 2^16.
    seq_offset.wrapping_add(gsn.0 as u16)
}

/// The RTP timestamp on a `clock_rate` Hz clock of media time `t`:
/// `(ts_offset + t in ticks, rounded to the nearest tick) mod 2^32`. For a native track this is
/// the timestamp that `RTP-Info` pairs with the `Range` start (RFC 2326 §12.33), on the same
/// scale as its packets' stored timestamps (presentation times from the object's zero).
#[must_use]
pub fn rtp_timestamp_at(ts_offset: u32, t: MediaTime, clock_rate: u32) -> u32 {
    let ticks = (u128::from(t.as_nanos()) * u128::from(clock_rate) + 500_000_000) / 1_000_000_000;
    // Truncation is the reduction mod 2^32.
    ts_offset.wrapping_add(ticks as u32)
}

/// The RTP timestamp of a packet sent at media time `t`:
/// `(ts_offset + t in 90 kHz ticks, rounded to the nearest tick) mod 2^32` (RFC 2250 §2: MP2T
/// timestamps are 90 kHz send times).
///
/// Rounding (rather than `MediaTime::as_90khz`, which truncates) makes the mapping exact for
/// times taken from the 90 kHz clock: `rtp_timestamp(o, MediaTime::from_90khz(x))` is
/// `o + x mod 2^32` for every `x`, whereas truncation loses a tick for two thirds of them.
///
/// **Contract with the sender.** The `rtptime` of `RTP-Info` is computed with this function,
/// so the sender must stamp every RTP packet with exactly this value.
#[must_use]
pub fn rtp_timestamp(ts_offset: u32, t: MediaTime) -> u32 {
    let ticks = (u128::from(t.as_nanos()) * 9 + 50_000) / 100_000;
    // Truncation is the reduction mod 2^32.
    ts_offset.wrapping_add(ticks as u32)
}

/// Configuration of a [`ServerCore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerConfig {
    /// How long a UDP session lives without a sign of life; advertised as `;timeout=` (whole
    /// seconds, at least 1). Default 60 s, RFC 2326 §12.37's default.
    pub session_timeout: Duration,
    /// The `Server` header. Must not start with `WMServer` (ffmpeg then switches to a Windows
    /// Media dialect) nor contain control characters; [`ServerCore::new`] uses
    /// the default instead of such a name. Default `isochron/0.1`.
    pub server_name: String,
    /// The advertised UDP `server_port` pair (RTP, RTCP); the sender must send from the first
    /// (`ffmpeg -rtsp_flags filter_src` drops packets from any other port). Default (6970, 6971).
    pub server_ports: (u16, u16),
    /// The most sessions alive at once (a session whose stream ended no longer counts); SETUP
    /// beyond it → 503. Default 1024.
    pub max_sessions: usize,
    /// The last slots of `max_sessions`, kept for clients that proved something: a new session
    /// from an authenticated user ([`ConnInfo::user`]) or a loopback client may take them, an
    /// anonymous one only while fewer than `max_sessions - reserved_sessions` are alive. A crowd
    /// of anonymous SETUPs then cannot lock the operator and the subscribers out. Default 0.
    pub reserved_sessions: usize,
    /// The most sessions one client (IP address) may hold; SETUP beyond it → 503 with
    /// `Retry-After`, so one client cannot fill the table for the others. Loopback clients (local
    /// tools and benches) are exempt. Default 256.
    pub max_sessions_per_client: usize,
    /// How long a *paused* UDP session lives without a sign of life. ffmpeg sends nothing while
    /// paused (no keep-alive, no RTCP), so a paused ffplay would find its session gone on resume
    /// after `session_timeout`: paused sessions are kept longer. Never less than `session_timeout`.
    /// Default 300 s.
    pub paused_session_timeout: Duration,
    /// How long a *playing* UDP session whose client has sent RTCP lives after its last sign of
    /// life: a client that reported and fell silent is gone, so its stream stops well before
    /// `session_timeout`. Capped at `session_timeout`. Default 20 s (four missed reports at
    /// RFC 3550's 5 s minimum interval).
    pub silence_timeout: Duration,
    /// How long the server keeps sent packets for retransmission; `None` (or zero) offers no
    /// feedback. With it, DESCRIBE offers AVPF with generic NACK and RFC 4588 RTX
    /// ([`crate::sdp::SdpParams::rtx_time`]) to players known to use it (GStreamer), or to any
    /// that asks with `?rtx=1` on the URL (`?rtx=0` never); for native tracks only with
    /// `?rtx=1`. Default 1 s.
    pub retransmit: Option<Duration>,
    /// How long a session may stay set up but never played: then it ends
    /// ([`CloseReason::Timeout`]) and frees its slot, whatever its transport. Players send PLAY
    /// right after SETUP; a crowd of SETUPs that never play is an attempt to fill the table.
    /// Default `None` (no limit); the server sets `rtsp.setup_timeout_s` (20).
    pub setup_timeout: Option<Duration>,
    /// The prefix lengths by which clients are counted against `max_sessions_per_client`
    /// (IPv4, IPv6): one IPv6 client holds a /64 and could otherwise take millions of
    /// addresses. Default (32, 64): an IPv4 address, an IPv6 /64.
    pub client_prefix: (u8, u8),
}

/// The network `ip` counts in, at prefix lengths `(v4, v6)`: its address with the host bits
/// cleared (an IPv4-mapped IPv6 address counts as the IPv4 one).
#[must_use]
pub fn client_network(ip: std::net::IpAddr, (v4, v6): (u8, u8)) -> std::net::IpAddr {
    use std::net::IpAddr;
    match ip.to_canonical() {
        IpAddr::V4(a) => {
            let bits = u32::from(a);
            let mask = u32::MAX.checked_shl(32 - u32::from(v4.min(32))).unwrap_or(0);
            IpAddr::V4((bits & mask).into())
        }
        IpAddr::V6(a) => {
            let bits = u128::from(a);
            let mask = u128::MAX.checked_shl(128 - u32::from(v6.min(128))).unwrap_or(0);
            IpAddr::V6((bits & mask).into())
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            session_timeout: Duration::from_secs(60),
            server_name: "isochron/0.1".to_owned(),
            server_ports: (6970, 6971),
            max_sessions: 1024,
            reserved_sessions: 0,
            max_sessions_per_client: 256,
            paused_session_timeout: Duration::from_secs(300),
            silence_timeout: Duration::from_secs(20),
            retransmit: Some(Duration::from_secs(1)),
            setup_timeout: None,
            client_prefix: (32, 64),
        }
    }
}

/// Identifies one RTSP connection; assigned by the glue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId(pub u64);

/// The connection a request arrived on, and who sent the request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ConnInfo {
    /// The connection.
    pub id: ConnId,
    /// The client's address: UDP media goes to its IP.
    pub peer: SocketAddr,
    /// Our address on this connection: the SDP `o=` line names its IP.
    pub local: SocketAddr,
    /// The connection is TLS (RTSPS): its media may only be interleaved on it, never plain UDP
    /// beside it, so a SETUP offering only UDP gets 461.
    pub secure: bool,
    /// The user the request authenticated as (`[auth]`), if it carried credentials: a session
    /// created by a user answers only that user's requests.
    pub user: Option<std::sync::Arc<str>>,
}

/// What the library knows about a presentation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Presentation {
    /// The stored object.
    pub object: ObjectId,
    /// The presentation's name (the SDP `s=` line).
    pub name: String,
    /// Its duration, from the first to the last packet's send time.
    pub duration: MediaTime,
    /// Its average bit rate; zero if unknown.
    pub avg_bitrate: BitRate,
    /// Its native tracks (MP4, Matroska), each its own RTP stream; empty for one MP2T stream.
    pub tracks: Vec<MediaTrack>,
    /// The renditions a session of it may switch between (adaptive bit rate), highest mean
    /// rate first, `object` among them; all with the same tracks (kinds, payload types,
    /// encodings, clock rates). Empty: one encoding, played as it is.
    pub ladder: Vec<ObjectId>,
    /// A live feed being published (`docs/design/live.md`): described with an open range
    /// (`a=range:npt=now-`, RFC 2326 §3.6), played from its live edge.
    pub live: bool,
}

impl Presentation {
    /// The number of RTP streams: its native tracks, or the one MP2T stream.
    #[must_use]
    pub fn track_count(&self) -> usize {
        self.tracks.len().max(1)
    }

    /// The clock rate of track `i`'s RTP timestamps (90 kHz for MP2T).
    #[must_use]
    pub fn clock_rate(&self, i: usize) -> u32 {
        self.tracks.get(i).map_or(90_000, |t| t.clock_rate)
    }
}

/// The catalog as the core sees it.
pub trait Library {
    /// The presentation called `name` (a valid object name, see [`crate::url`]), if any.
    fn lookup(&self, name: &str) -> Option<Presentation>;
}

/// What [`ServerCore::handle_request`] asks of the glue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Handled {
    /// Send this response now.
    Respond(Response<Vec<u8>>),
    /// Start or seek the session's stream, then call [`ServerCore::finish_play`].
    Play(PlayAction),
    /// Stop the session's stream, then call [`ServerCore::finish_pause`] with where it stopped.
    Pause(PauseAction),
    /// Pace the session's stream at a new speed (MTFC, SET_PARAMETER `x-isochron-rate`), then
    /// call [`ServerCore::finish_rate`].
    Rate(RateAction),
}

/// The name of isochron's MTFC rate parameter in a `text/parameters` SET_PARAMETER body.
pub const RATE_PARAMETER: &str = "x-isochron-rate";

/// The name of the parameter that may come with [`RATE_PARAMETER`]: the player's buffer, as
/// `LEVEL/DEPTH` in seconds (`x-isochron-buffer: 0.42/2`: 0.42 s of media held by a player
/// that plays 2 s behind what it receives).
pub const BUFFER_PARAMETER: &str = "x-isochron-buffer";

/// The name of the parameter that may come with [`RATE_PARAMETER`]: the session's [`Pacing`],
/// `x-isochron-pacing: rate` (smoothed) or `content` (each packet at its own time).
pub const PACING_PARAMETER: &str = "x-isochron-pacing";

/// A player's buffer, as it reports it with a rate request ([`BUFFER_PARAMETER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BufferLevel {
    /// The media it holds, not yet played.
    pub level: Duration,
    /// The depth it plays at: what it holds when all is well.
    pub depth: Duration,
}

/// A pace change the data plane must carry out (MTFC, Yima §2.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateAction {
    /// The session.
    pub session: SessionId,
    /// Its stream.
    pub stream: StreamId,
    /// The pace asked for.
    pub pace: Pace,
    /// The player's buffer, if it said.
    pub buffer: Option<BufferLevel>,
    /// The pacing it asked for, if it said ([`PACING_PARAMETER`]).
    pub pacing: Option<Pacing>,
    cseq: String,
}

/// How a session's packets are timed ([`PACING_PARAMETER`]; `docs/design/mtfc.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pacing {
    /// Each packet at its own send time (the file's PCR, or the track's timestamps), times the
    /// pace: a VBR stream's bursts leave as bursts. Every session starts so.
    Content,
    /// At a rate: the object's mean byte rate times the pace, each packet due when the bytes
    /// before it have gone at that rate, never more than a bounded time off its own send time
    /// (MTFC's server sends at the rate its client steers, Yima §2.5).
    Rate,
}

impl Pacing {
    /// The parameter's value: `content` or `rate`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Content => "content",
            Self::Rate => "rate",
        }
    }
}

/// Where a PLAY starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PlayStart {
    /// A `Range` start was given: start at the last random-access point at or before it
    /// and report that in [`PlayOutcome::Started`].
    Seek(MediaTime),
    /// No `Range` start while paused: continue exactly at the saved position.
    Resume(Position),
    /// No `Range` start while ready: start at the first packet.
    Beginning,
}

/// A PLAY the data plane must carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlayAction {
    /// The session.
    pub session: SessionId,
    /// Its stream.
    pub stream: StreamId,
    /// The object to send.
    pub object: ObjectId,
    /// Where to start.
    pub start: PlayStart,
    /// Where to stop (a `Range` end, clipped to the duration); `None` means the end of media.
    pub end: Option<MediaTime>,
    /// The renditions the session may switch between, highest first (see
    /// [`Presentation::ladder`]); empty for one encoding.
    pub ladder: Vec<ObjectId>,
    /// A `Scale` above 1 (at most 10): fast forward by key frames (RFC 2326 §12.34). A scale
    /// of 1 or below (reverse, slow motion) is answered with normal play.
    pub scale: Option<Pace>,
    /// A `Speed` (RFC 2326 §12.35): deliver the data this much faster (or slower).
    pub speed: Option<Pace>,
    cseq: String,
    asked: AskedRates,
}

/// Which rate headers a PLAY carried (each is answered with what was applied).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct AskedRates {
    scale: bool,
    speed: bool,
}

/// The trick play and delivery speed a PLAY was carried out with.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rates {
    /// Fast forward by key frames at this scale; `None`: normal play (`Scale: 1`).
    pub scale: Option<Pace>,
    /// Delivery this much faster; `None`: nominal (`Speed: 1`).
    pub speed: Option<Pace>,
}

impl Rates {
    /// Normal play at nominal speed.
    pub const NORMAL: Self = Self { scale: None, speed: None };
}

/// How the data plane carried out a [`PlayAction`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlayOutcome {
    /// Sending starts at `first` (the first packet that will be sent).
    Started {
        /// The first packet that will be sent.
        first: Position,
        /// Where sending stops, when that is before the end of the media: the response's
        /// `Range` then carries it. `None` answers an open range (`npt=X-`), as gst-rtsp-server
        /// does: the client ends on RTCP BYE rather than on a timer armed from the range end
        /// (GStreamer's jitterbuffer fires that timer from arrival-time estimates and can cut
        /// the last packets).
        end: Option<MediaTime>,
        /// Each track's sequence-number offset from now on, by track index: RTP seq = offset +
        /// the packet's `track_seq` (the GSN for MPEG-TS). The data plane chooses them so
        /// numbering continues across seeks (one counter per track for the whole session; the
        /// `seq` of `RTP-Info` after a seek is simply the next value).
        seq_offsets: Vec<u16>,
        /// The trick play and speed applied (answered in `Scale` and `Speed`).
        rates: Rates,
    },
    /// Admission control refused the stream → 453 Not Enough Bandwidth.
    Rejected {
        /// Why, for logs.
        reason: String,
    },
    /// The stream could not be started → 500.
    Failed {
        /// Why, for logs.
        reason: String,
    },
    /// The server takes no new streams for now → 503 with `Retry-After`.
    Unavailable {
        /// Why, for logs.
        reason: String,
    },
}

/// A PAUSE the data plane must carry out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PauseAction {
    /// The session.
    pub session: SessionId,
    /// Its stream.
    pub stream: StreamId,
    cseq: String,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseReason {
    /// The client sent TEARDOWN.
    Teardown,
    /// A UDP session showed no liveness for `session_timeout`.
    Timeout,
    /// A playing UDP session whose client had sent RTCP fell silent for `silence_timeout`.
    Silence,
    /// The connection carrying an interleaved session closed.
    ConnectionClosed,
}

/// Something the glue must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A session is gone: stop its stream and release what it holds.
    Closed {
        /// The session.
        session: SessionId,
        /// Its stream.
        stream: StreamId,
        /// Why it ended.
        reason: CloseReason,
    },
}

/// The RTSP session core. See the module docs for the behaviour.
#[derive(Debug)]
pub struct ServerCore {
    config: ServerConfig,
    rng: SplitMix64,
    /// Session ids: a cipher stream, so that ids seen reveal nothing of the next ones
    /// (SplitMix64's state is its last output).
    ids: ChaCha20Rng,
    last_stream: u64,
    sessions: BTreeMap<SessionId, Session>,
    by_stream: HashMap<StreamId, SessionId>,
    by_ssrc: HashMap<u32, SessionId>,
    /// Interleaved sessions by the connection that carries them.
    by_conn: BTreeMap<ConnId, BTreeSet<SessionId>>,
    /// UDP session expiry times.
    deadlines: BTreeSet<(Instant, SessionId)>,
    /// When each session set up but not yet played ends (`setup_timeout`); a session leaves
    /// it when it first plays or ends.
    unplayed: BTreeSet<(Instant, SessionId)>,
    events: VecDeque<Event>,
}

impl ServerCore {
    /// A core with no sessions, whose random choices all follow from `seed`.
    #[must_use]
    pub fn new(mut config: ServerConfig, seed: u64) -> Self {
        let name = &config.server_name;
        if name.is_empty()
            || name.get(..8).is_some_and(|p| p.eq_ignore_ascii_case("WMServer"))
            || name.chars().any(char::is_control)
        {
            config.server_name = ServerConfig::default().server_name;
        }
        config.session_timeout = config.session_timeout.max(Duration::from_secs(1));
        Self {
            config,
            rng: SplitMix64::new(seed),
            ids: ChaCha20Rng::seed_from_u64(seed),
            last_stream: 0,
            sessions: BTreeMap::new(),
            by_stream: HashMap::new(),
            by_ssrc: HashMap::new(),
            by_conn: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            unplayed: BTreeSet::new(),
            events: VecDeque::new(),
        }
    }

    /// Session ids drawn from `key` rather than from the seed: give it 32 bytes of the
    /// operating system's randomness and ids cannot be guessed, even by someone who knows the
    /// seed and has seen other ids (64 bits of a ChaCha20 key stream each).
    #[must_use]
    pub fn with_id_key(mut self, key: [u8; 32]) -> Self {
        self.ids = ChaCha20Rng::from_seed(key);
        self
    }

    /// The configuration in force.
    #[must_use]
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// Handles one request from connection `conn`. See the module docs for each method.
    pub fn handle_request(
        &mut self,
        now: Instant,
        conn: &ConnInfo,
        req: &Request<Vec<u8>>,
        lib: &dyn Library,
    ) -> Handled {
        let Some(cseq) = cseq_of(req) else {
            return Handled::Respond(self.refuse("", None, &Refusal::BadCSeq));
        };
        let session = req.header(&SESSION).map(|v| SessionId::from_header(v.as_str()));
        if let Some(id) = &session {
            match self.sessions.get_mut(id) {
                // Someone else's session is, to this client, a session that does not exist: it
                // is neither refreshed nor changed, and its existence is not confirmed.
                Some(s) if !s.belongs_to(conn) => {
                    let refusal = Refusal::SessionNotFound(id.to_string());
                    return Handled::Respond(self.refuse(&cseq, None, &refusal));
                }
                Some(s) => s.conn = Some((conn.id, true)),
                None => {}
            }
            self.touch(now, id);
        }
        match self.dispatch(now, conn, req, lib, &cseq, session.as_ref()) {
            Ok(handled) => handled,
            Err(refusal) => Handled::Respond(self.refuse(&cseq, session.as_ref(), &refusal)),
        }
    }

    /// Completes a [`PlayAction`]: `Started` → 200 with `Range` and `RTP-Info`, the session
    /// `Playing`; `Rejected` → 453 and `Failed` → 500, the session unchanged. If the session
    /// ended meanwhile → 454 (its [`Event::Closed`] is already queued: stop the stream).
    pub fn finish_play(
        &mut self,
        now: Instant,
        play: PlayAction,
        outcome: PlayOutcome,
    ) -> Response<Vec<u8>> {
        self.touch(now, &play.session);
        let refusal = match outcome {
            PlayOutcome::Started { first, end, seq_offsets, rates } => {
                let Some(s) = self.sessions.get_mut(&play.session) else {
                    let refusal = Refusal::SessionNotFound(play.session.to_string());
                    return self.refuse(&play.cseq, None, &refusal);
                };
                s.state = SessionState::Playing;
                s.ended = false;
                s.position = None;
                if let Some(until) = s.unplayed_until.take() {
                    self.unplayed.remove(&(until, play.session.clone()));
                }
                let mut entries = Vec::with_capacity(s.tracks.len());
                for (i, t) in s.tracks.iter_mut().enumerate() {
                    let Some(t) = t else { continue };
                    if let Some(&o) = seq_offsets.get(i) {
                        t.seq_offset = o;
                    }
                    let clock = s.presentation.clock_rate(i);
                    let seq = t.seq_offset.wrapping_add(first.track_seq(i) as u16);
                    let rtptime = rtp_timestamp_at(t.rtp_ts_offset, first.time, clock);
                    entries.push((t.url.clone(), seq, rtptime));
                }
                let info: Vec<RtpInfo<'_>> = entries
                    .iter()
                    .map(|(url, seq, rtptime)| RtpInfo { url, seq: *seq, rtptime: *rtptime })
                    .collect();
                let rtp_info = format_rtp_info(&info);
                self.rearm(&play.session);
                let mut b = self
                    .ok(&play.cseq)
                    .header(SESSION, self.session_header(&play.session))
                    .header(RANGE, format_npt_range(first.time, end))
                    .header(RTP_INFO, rtp_info);
                if play.asked.scale {
                    b = b.header(SCALE, rates.scale.unwrap_or(Pace::NOMINAL).to_string());
                }
                if play.asked.speed {
                    b = b.header(SPEED, rates.speed.unwrap_or(Pace::NOMINAL).to_string());
                }
                return b.build(Vec::new());
            }
            PlayOutcome::Rejected { reason } => Refusal::NotEnoughBandwidth(reason),
            PlayOutcome::Failed { reason } => Refusal::Internal(reason),
            PlayOutcome::Unavailable { reason } => Refusal::Unavailable(reason),
        };
        self.refuse(&play.cseq, Some(&play.session), &refusal)
    }

    /// Completes a [`PauseAction`]: the session is `Paused` at `at` (the next packet that
    /// would have been sent) → 200. If the session ended meanwhile → 454.
    pub fn finish_pause(
        &mut self,
        now: Instant,
        pause: PauseAction,
        at: Position,
    ) -> Response<Vec<u8>> {
        self.touch(now, &pause.session);
        let Some(s) = self.sessions.get_mut(&pause.session) else {
            let refusal = Refusal::SessionNotFound(pause.session.to_string());
            return self.refuse(&pause.cseq, None, &refusal);
        };
        s.state = SessionState::Paused;
        s.position = Some(at);
        self.rearm(&pause.session);
        self.ok(&pause.cseq).header(SESSION, self.session_header(&pause.session)).build(Vec::new())
    }

    /// Completes a [`Handled::Rate`]: 200 with the pace now in force (`applied`), in the
    /// request's own `text/parameters` form, and the pacing in force (`pacing`) when the
    /// request asked for one.
    pub fn finish_rate(
        &mut self,
        now: Instant,
        rate: RateAction,
        applied: Pace,
        pacing: Pacing,
    ) -> Response<Vec<u8>> {
        self.touch(now, &rate.session);
        if !self.sessions.contains_key(&rate.session) {
            let refusal = Refusal::SessionNotFound(rate.session.to_string());
            return self.refuse(&rate.cseq, None, &refusal);
        }
        let mut body = format!("{RATE_PARAMETER}: {applied}\r\n");
        if rate.pacing.is_some() {
            body += &format!("{PACING_PARAMETER}: {}\r\n", pacing.as_str());
        }
        self.ok(&rate.cseq)
            .header(SESSION, self.session_header(&rate.session))
            .header(CONTENT_TYPE, "text/parameters")
            .build(body.into_bytes())
    }

    /// An RTCP packet (a receiver report, or any RTCP) named our SSRC `ssrc_of_media`: the
    /// session is alive (RFC 7826 §10.5). Returns `false` if no session has that SSRC.
    pub fn handle_rtcp(&mut self, now: Instant, ssrc_of_media: u32) -> bool {
        let Some(id) = self.by_ssrc.get(&ssrc_of_media).cloned() else { return false };
        if let Some(s) = self.sessions.get_mut(&id) {
            s.rtcp_seen = true;
        }
        self.touch(now, &id);
        true
    }

    /// The stream of the session one of whose tracks has SSRC `ssrc`.
    #[must_use]
    pub fn stream_of_ssrc(&self, ssrc: u32) -> Option<StreamId> {
        self.sessions.get(self.by_ssrc.get(&ssrc)?).map(|s| s.stream)
    }

    /// The stream of the session one of whose tracks has SSRC `ssrc`, and which track.
    #[must_use]
    pub fn track_of_ssrc(&self, ssrc: u32) -> Option<(StreamId, usize)> {
        let s = self.sessions.get(self.by_ssrc.get(&ssrc)?)?;
        let track = s.tracks.iter().position(|t| t.as_ref().is_some_and(|t| t.ssrc == ssrc))?;
        Some((s.stream, track))
    }

    /// Whether the stream whose SSRC is `ssrc` belongs to a session on connection `conn`.
    #[must_use]
    pub fn ssrc_is_on(&self, ssrc: u32, conn: ConnId) -> bool {
        self.by_ssrc
            .get(&ssrc)
            .is_some_and(|id| self.by_conn.get(&conn).is_some_and(|ids| ids.contains(id)))
    }

    /// One SSRC of each session on connection `conn` (any of a session's tracks names its
    /// stream).
    #[must_use]
    pub fn ssrcs_on(&self, conn: ConnId) -> Vec<u32> {
        let Some(ids) = self.by_conn.get(&conn) else { return Vec::new() };
        let mut first: BTreeMap<&SessionId, u32> = BTreeMap::new();
        for (ssrc, id) in self.by_ssrc.iter().filter(|(_, id)| ids.contains(*id)) {
            let e = first.entry(id).or_insert(*ssrc);
            *e = (*e).min(*ssrc);
        }
        first.into_values().collect()
    }

    /// An interleaved frame arrived on `channel` of `conn` (GStreamer sends RTCP receiver
    /// reports on the odd channel): the session using that channel is alive.
    pub fn handle_interleaved_rtcp(&mut self, now: Instant, conn: ConnId, channel: u8) {
        let ids: Vec<SessionId> = self
            .by_conn
            .get(&conn)
            .into_iter()
            .flatten()
            .filter(|id| {
                self.sessions.get(*id).is_some_and(|s| {
                    s.set_up().any(|t| match t.transport {
                        SessionTransport::Interleaved { rtp_channel, rtcp_channel, .. } => {
                            channel == rtp_channel || channel == rtcp_channel
                        }
                        SessionTransport::Udp { .. } => false,
                    })
                })
            })
            .cloned()
            .collect();
        for id in ids {
            self.touch(now, &id);
        }
    }

    /// Connection `conn` closed: its interleaved sessions end with
    /// [`CloseReason::ConnectionClosed`] (as in MediaMTX, mediamtx#149). UDP sessions set up on it
    /// live on until they time out.
    pub fn handle_conn_closed(&mut self, now: Instant, conn: ConnId) {
        let _ = now;
        let ids = self.by_conn.remove(&conn).unwrap_or_default();
        for id in ids {
            self.close(&id, CloseReason::ConnectionClosed);
        }
        // UDP sessions outlive their connection; one whose stream ended and whose client is
        // gone now lives only `session_timeout` more.
        let orphaned: Vec<SessionId> = self
            .sessions
            .values_mut()
            .filter_map(|s| match &mut s.conn {
                Some((c, open)) if *c == conn && *open => {
                    *open = false;
                    Some(s.id.clone())
                }
                _ => None,
            })
            .collect();
        for id in orphaned {
            self.rearm(&id);
        }
    }

    /// The sender of `stream` reached the end (or the PLAY's `Range` end): the session is
    /// `Paused` at `at`, the position after the last packet. The session stays: clients send
    /// PAUSE and/or TEARDOWN afterwards, and a PLAY with a `Range` may seek
    /// back.
    pub fn handle_end_of_stream(&mut self, now: Instant, stream: StreamId, at: Position) {
        let _ = now;
        let Some(id) = self.by_stream.get(&stream).cloned() else { return };
        if let Some(s) = self.sessions.get_mut(&id)
            && s.state == SessionState::Playing
        {
            s.state = SessionState::Paused;
            s.position = Some(at);
            s.ended = true;
            self.rearm(&id);
        }
    }

    /// Expires UDP sessions whose last sign of life is `session_timeout` or more before `now`
    /// ([`CloseReason::Timeout`]), or `silence_timeout` for a playing one whose client had sent
    /// RTCP ([`CloseReason::Silence`]).
    pub fn handle_timeout(&mut self, now: Instant) {
        while self.deadlines.first().is_some_and(|(deadline, _)| *deadline <= now) {
            // Popped here, so the loop ends even if the session record were already gone.
            if let Some((_, id)) = self.deadlines.pop_first() {
                let silent = self
                    .sessions
                    .get(&id)
                    .is_some_and(|s| s.state == SessionState::Playing && s.rtcp_seen && !s.ended);
                let reason = if silent { CloseReason::Silence } else { CloseReason::Timeout };
                self.close(&id, reason);
            }
        }
        while self.unplayed.first().is_some_and(|(deadline, _)| *deadline <= now) {
            if let Some((_, id)) = self.unplayed.pop_first() {
                self.close(&id, CloseReason::Timeout);
            }
        }
    }

    /// A fresh stream id for a stream no session owns (a recording). Sessions and such streams
    /// share one sequence, so the scheduler, which keys every stream by id, never sees two
    /// streams with the same one.
    pub fn allocate_stream(&mut self) -> StreamId {
        self.last_stream += 1;
        StreamId(self.last_stream)
    }

    /// When [`ServerCore::handle_timeout`] next has work: the earliest UDP session expiry, or
    /// the end of a session never played.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let udp = self.deadlines.first().map(|(t, _)| *t);
        let unplayed = self.unplayed.first().map(|(t, _)| *t);
        match (udp, unplayed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next queued event.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// A view of session `id`.
    #[must_use]
    pub fn session(&self, id: &SessionId) -> Option<SessionView<'_>> {
        self.sessions.get(id).map(Session::view)
    }

    /// A view of the session that owns `stream`.
    #[must_use]
    pub fn session_by_stream(&self, stream: StreamId) -> Option<SessionView<'_>> {
        self.session(self.by_stream.get(&stream)?)
    }

    /// Every live session, in session-id order.
    pub fn sessions(&self) -> impl Iterator<Item = SessionView<'_>> {
        self.sessions.values().map(Session::view)
    }

    /// How many sessions are alive.
    #[must_use]
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// The response to send before closing a connection whose bytes did not parse: see
    /// [`invalid_response`], with this core's `Server` name.
    #[must_use]
    pub fn invalid_response(&self, err: &ParseError) -> Response<Vec<u8>> {
        invalid_response(err, &self.config.server_name)
    }

    fn dispatch(
        &mut self,
        now: Instant,
        conn: &ConnInfo,
        req: &Request<Vec<u8>>,
        lib: &dyn Library,
        cseq: &str,
        session: Option<&SessionId>,
    ) -> Result<Handled, Refusal> {
        if req.version() != Version::V1_0 {
            return Err(Refusal::VersionNotSupported("RTSP/2.0".to_owned()));
        }
        if let Some(require) = req.header(&REQUIRE) {
            let tags: Vec<&str> =
                require.as_str().split(',').map(str::trim).filter(|t| !t.is_empty()).collect();
            if !tags.is_empty() {
                return Err(Refusal::OptionNotSupported(tags.join(", ")));
            }
        }
        fn respond(r: Response<Vec<u8>>) -> Result<Handled, Refusal> {
            Ok(Handled::Respond(r))
        }
        match req.method() {
            Method::Options => {
                self.live(session)?;
                let b = self.ok(cseq).header(PUBLIC, PUBLIC_METHODS);
                respond(self.with_session(b, session).build(Vec::new()))
            }
            Method::Describe => respond(self.describe(conn, req, lib, cseq, session)?),
            Method::Setup => respond(self.setup(now, conn, req, lib, cseq, session)?),
            Method::Play => self.play(req, cseq, session),
            Method::Pause => self.pause(cseq, session),
            Method::Teardown => {
                let id = self.require_session(session, "TEARDOWN")?;
                let header = self.session_header(id);
                self.close(id, CloseReason::Teardown);
                respond(self.ok(cseq).header(SESSION, header).build(Vec::new()))
            }
            Method::GetParameter => {
                self.live(session)?;
                respond(self.with_session(self.ok(cseq), session).build(Vec::new()))
            }
            Method::SetParameter => {
                self.live(session)?;
                if req.body().trim_ascii().is_empty() {
                    return respond(self.with_session(self.ok(cseq), session).build(Vec::new()));
                }
                let (pace, buffer, pacing) = parse_rate_parameter(req.body())?;
                let id = self.require_session(session, "SET_PARAMETER")?;
                let s = self
                    .sessions
                    .get(id)
                    .ok_or_else(|| Refusal::SessionNotFound(id.to_string()))?;
                Ok(Handled::Rate(RateAction {
                    session: id.clone(),
                    stream: s.stream,
                    pace,
                    buffer,
                    pacing,
                    cseq: cseq.to_owned(),
                }))
            }
            other => Err(Refusal::NotImplemented(<&str>::from(other).to_owned())),
        }
    }

    /// DESCRIBE (RFC 2326 §10.2, §12.11, Appendix C).
    fn describe(
        &self,
        conn: &ConnInfo,
        req: &Request<Vec<u8>>,
        lib: &dyn Library,
        cseq: &str,
        session: Option<&SessionId>,
    ) -> Result<Response<Vec<u8>>, Refusal> {
        let (url, name, p) = resolve_presentation(req, lib)?;
        let rtx_time = self.config.retransmit.filter(|t| !t.is_zero() && offers_feedback(req));
        let params = SdpParams {
            session_id: p.object.0,
            session_version: 1,
            // A dual-stack socket reports IPv4 peers as ::ffff:a.b.c.d; the SDP says IP4 then.
            origin: conn.local.ip().to_canonical(),
            name: &p.name,
            duration: p.duration,
            bitrate: p.avg_bitrate,
            rtx_time,
            live: p.live,
        };
        // Native tracks get RTX only when the URL asks (`?rtx=1`): GStreamer, which takes it by
        // default, also asks for packets merely late on its schedule, which adaptive bit rate
        // would read as loss (docs/design/renditions.md, *NACKs*).
        let sdp = if p.tracks.is_empty() {
            mp2t_sdp(&params)
        } else {
            let rtx_time = params.rtx_time.filter(|_| rtx_query(req) == Some(true));
            native_sdp(&SdpParams { rtx_time, ..params }, &p.tracks)
        };
        let b = self
            .ok(cseq)
            .header(CONTENT_TYPE, "application/sdp")
            .header(CONTENT_BASE, presentation_base(url, &name));
        Ok(self.with_session(b, session).build(sdp.into_bytes()))
    }

    /// SETUP (RFC 2326 §10.4, §12.39, §C.3).
    fn setup(
        &mut self,
        now: Instant,
        conn: &ConnInfo,
        req: &Request<Vec<u8>>,
        lib: &dyn Library,
        cseq: &str,
        session: Option<&SessionId>,
    ) -> Result<Response<Vec<u8>>, Refusal> {
        let target = parse_target(req.request_uri());
        let offer = req.header(&TRANSPORT).ok_or(Refusal::Transport(TransportError::Missing))?;
        let (id, track) = match session {
            Some(id) => {
                let s = self
                    .sessions
                    .get(id)
                    .ok_or_else(|| Refusal::SessionNotFound(id.to_string()))?;
                if s.state == SessionState::Playing {
                    return Err(Refusal::NotValidInState {
                        method: "SETUP".to_owned(),
                        state: s.state.as_str(),
                    });
                }
                // A nameless target (`rtsp://h/stream=N`, `*`) re-SETUPs the primary track.
                let primary = s.tracks.iter().position(Option::is_some).unwrap_or(0);
                let (track, url) = match target.as_ref().ok().and_then(|t| Some((t, t.name()?))) {
                    Some((t, name)) => {
                        if name != s.name {
                            return Err(Refusal::AggregateNotAllowed {
                                session: s.name.clone(),
                                requested: name.to_owned(),
                            });
                        }
                        let track = track_index(t, &s.presentation)?;
                        let url = match (req.request_uri(), &s.tracks[track]) {
                            (Some(u), _) => u.to_string(),
                            (None, Some(t)) => t.url.clone(),
                            (None, None) => s.primary().url.clone(),
                        };
                        (track, url)
                    }
                    _ => (primary, s.primary().url.clone()),
                };
                let negotiated =
                    negotiate(offer.as_str(), conn.secure).map_err(Refusal::Transport)?;
                let transport = self.resolve_transport(conn, negotiated, Some((id, track)))?;
                self.set_track(now, id, track, transport, negotiated, url)?;
                (id.clone(), track)
            }
            None => {
                let (url, name, p) = resolve_presentation(req, lib)?;
                let track = match &target {
                    Ok(t) => track_index(t, &p)?,
                    Err(_) => 0,
                };
                let negotiated =
                    negotiate(offer.as_str(), conn.secure).map_err(Refusal::Transport)?;
                let transport = self.resolve_transport(conn, negotiated, None)?;
                let client = conn.peer.ip();
                let alive = self.sessions.values().filter(|s| !s.ended).count();
                let trusted = conn.user.is_some() || client.is_loopback();
                let room = if trusted {
                    self.config.max_sessions
                } else {
                    self.config.max_sessions.saturating_sub(self.config.reserved_sessions)
                };
                if alive >= room {
                    return Err(Refusal::TooManySessions(room));
                }
                // Counted by network (`client_prefix`); a session whose stream ended no longer
                // counts (a crowd behind one address that played to the end and vanished frees
                // its share at once, not at its timeout).
                let limit = self.config.max_sessions_per_client;
                let network = client_network(client, self.config.client_prefix);
                let held = self
                    .sessions
                    .values()
                    .filter(|s| {
                        !s.ended && client_network(s.client, self.config.client_prefix) == network
                    })
                    .count();
                if !client.is_loopback() && held >= limit {
                    return Err(Refusal::TooManyFromClient { client, limit });
                }
                let url = url.to_string();
                let id = self.create(now, name, p, track, transport, negotiated, url);
                if let Some(s) = self.sessions.get_mut(&id) {
                    s.client = client;
                    s.user.clone_from(&conn.user);
                    s.conn = Some((conn.id, true));
                }
                (id, track)
            }
        };
        let Some(t) = self.sessions.get(&id).and_then(|s| s.tracks[track].as_ref()) else {
            return Err(Refusal::Internal("session vanished during SETUP".to_owned()));
        };
        let mut b = self
            .ok(cseq)
            .header(TRANSPORT, t.negotiated.to_reply(self.config.server_ports, t.ssrc))
            .header(SESSION, self.session_header(&id));
        // SETUP on the bare presentation URL, as SAT>IP-style clients do (ffmpeg `satip://`,
        // Debian's VLC).
        if let (Ok(Target::Presentation(name)), Some(url)) = (&target, req.request_uri()) {
            let stream = self.sessions.get(&id).map_or(0, |s| s.stream.0);
            b = b
                .header(stream_id_header(), stream.to_string())
                .header(CONTENT_BASE, presentation_base(url, name));
        }
        Ok(b.build(Vec::new()))
    }

    /// PLAY (RFC 2326 §10.5, §12.29, §12.33, §12.34).
    fn play(
        &mut self,
        req: &Request<Vec<u8>>,
        cseq: &str,
        session: Option<&SessionId>,
    ) -> Result<Handled, Refusal> {
        let id = self.require_session(session, "PLAY")?;
        let s = self.sessions.get(id).ok_or_else(|| Refusal::SessionNotFound(id.to_string()))?;
        let number = |v: &str, what: &str| {
            v.trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite() && *x != 0.0)
                .ok_or_else(|| Refusal::BadRequest(format!("{what}: {v:?} is not a number")))
        };
        let scale = req.header(&SCALE).map(|v| number(v.as_str(), "Scale")).transpose()?;
        let speed = req.header(&SPEED).map(|v| number(v.as_str(), "Speed")).transpose()?;
        let asked = AskedRates { scale: scale.is_some(), speed: speed.is_some() };
        let scale = scale.filter(|x| *x > 1.0).and_then(Pace::from_multiplier);
        let speed = speed.and_then(Pace::from_multiplier);
        let range = match req.header(&RANGE) {
            Some(v) => Some(NptRange::parse(v.as_str()).map_err(Refusal::InvalidRange)?),
            None => None,
        };
        let duration = s.presentation.duration;
        // A live feed has no end yet: any start goes (the data plane starts at what it holds),
        // an end is not kept, and `now` is its live edge (RFC 2326 §3.6), even while playing.
        let live = s.presentation.live;
        let (start, end) = range.map_or((None, None), |r| (r.start, r.end));
        if let Some(NptTime::At(t)) = start
            && t > duration
            && !live
        {
            return Err(Refusal::InvalidRange(RangeError::StartBeyondEnd { start: t, duration }));
        }
        let end = end.filter(|_| !live).map(|e| e.min(duration));
        let start = match (start, s.state) {
            // ffmpeg, GStreamer and retina all send `npt=0.000-` with a first PLAY: for a live
            // feed that is its edge, as `now` is; a later start goes back into it.
            (Some(NptTime::Now), _) if live => PlayStart::Beginning,
            (Some(NptTime::At(t)), _) if live && t == MediaTime::ZERO => PlayStart::Beginning,
            (Some(NptTime::At(t)), _) => PlayStart::Seek(t),
            (_, SessionState::Playing) => {
                let mut b = self.ok(cseq).header(SESSION, self.session_header(id));
                if asked.scale {
                    b = b.header(SCALE, "1");
                }
                return Ok(Handled::Respond(b.build(Vec::new())));
            }
            (_, SessionState::Paused) => s.position.map_or(PlayStart::Beginning, PlayStart::Resume),
            (_, SessionState::Ready) => PlayStart::Beginning,
        };
        let from = match start {
            PlayStart::Seek(t) => t,
            PlayStart::Resume(p) => p.time,
            PlayStart::Beginning => MediaTime::ZERO,
        };
        if let Some(e) = end
            && e < from
        {
            return Err(Refusal::InvalidRange(RangeError::Reversed { start: from, end: e }));
        }
        Ok(Handled::Play(PlayAction {
            session: id.clone(),
            stream: s.stream,
            object: s.presentation.object,
            start,
            end,
            ladder: s.presentation.ladder.clone(),
            scale,
            speed,
            cseq: cseq.to_owned(),
            asked,
        }))
    }

    /// PAUSE (RFC 2326 §10.6).
    fn pause(&self, cseq: &str, session: Option<&SessionId>) -> Result<Handled, Refusal> {
        let id = self.require_session(session, "PAUSE")?;
        let s = self.sessions.get(id).ok_or_else(|| Refusal::SessionNotFound(id.to_string()))?;
        if s.state == SessionState::Playing {
            return Ok(Handled::Pause(PauseAction {
                session: id.clone(),
                stream: s.stream,
                cseq: cseq.to_owned(),
            }));
        }
        let b = self.ok(cseq).header(SESSION, self.session_header(id));
        Ok(Handled::Respond(b.build(Vec::new())))
    }

    fn require_session<'a>(
        &self,
        session: Option<&'a SessionId>,
        method: &str,
    ) -> Result<&'a SessionId, Refusal> {
        let id = session
            .ok_or_else(|| Refusal::NotValidInState { method: method.to_owned(), state: "Init" })?;
        self.live(Some(id))?;
        Ok(id)
    }

    /// `Ok` if `session` is absent or alive, 454 otherwise.
    fn live(&self, session: Option<&SessionId>) -> Result<(), Refusal> {
        match session {
            Some(id) if !self.sessions.contains_key(id) => {
                Err(Refusal::SessionNotFound(id.to_string()))
            }
            _ => Ok(()),
        }
    }

    /// The session transport for `negotiated` on `conn`: UDP goes to the peer's IP (never to a
    /// `destination=`); interleaved channels must not collide with another session's, or
    /// another track's of the same session, on the same connection (`except`: the session and
    /// track being set up again).
    fn resolve_transport(
        &self,
        conn: &ConnInfo,
        negotiated: Transport,
        except: Option<(&SessionId, usize)>,
    ) -> Result<SessionTransport, Refusal> {
        match negotiated {
            Transport::Udp { client_rtp, client_rtcp, profile } => Ok(SessionTransport::Udp {
                client_rtp: SocketAddr::new(conn.peer.ip(), client_rtp),
                client_rtcp: SocketAddr::new(conn.peer.ip(), client_rtcp),
                feedback: profile.feedback(),
            }),
            Transport::Interleaved { rtp_channel, rtcp_channel, .. } => {
                let mine = [rtp_channel, rtcp_channel];
                let clash = self
                    .by_conn
                    .get(&conn.id)
                    .into_iter()
                    .flatten()
                    .filter_map(|id| self.sessions.get(id))
                    .flat_map(|s| {
                        s.tracks.iter().enumerate().filter_map(move |(i, t)| {
                            let same = except.is_some_and(|(id, track)| *id == s.id && track == i);
                            t.as_ref().filter(|_| !same)
                        })
                    })
                    .any(|t| match t.transport {
                        SessionTransport::Interleaved {
                            rtp_channel: a, rtcp_channel: b, ..
                        } => mine.contains(&a) || mine.contains(&b),
                        SessionTransport::Udp { .. } => false,
                    });
                if clash {
                    return Err(Refusal::Transport(TransportError::ChannelsInUse(
                        rtp_channel,
                        rtcp_channel,
                    )));
                }
                Ok(SessionTransport::Interleaved { conn: conn.id, rtp_channel, rtcp_channel })
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn create(
        &mut self,
        now: Instant,
        name: String,
        presentation: Presentation,
        track: usize,
        transport: SessionTransport,
        negotiated: Transport,
        url: String,
    ) -> SessionId {
        // Unique with overwhelming probability; the loop is a guard, not an expected path.
        let id = loop {
            let id = SessionId::generate(&mut self.ids);
            if !self.sessions.contains_key(&id) {
                break id;
            }
        };
        let stream = self.allocate_stream();
        let mut tracks = vec![None; presentation.track_count()];
        tracks[track] = Some(self.new_track(transport, negotiated, url));
        let session = Session {
            id: id.clone(),
            stream,
            name,
            presentation,
            tracks,
            state: SessionState::Ready,
            position: None,
            last_seen: now,
            deadline: None,
            // Set by the SETUP that creates it.
            client: std::net::Ipv4Addr::UNSPECIFIED.into(),
            user: None,
            unplayed_until: None,
            conn: None,
            ended: false,
            rtcp_seen: false,
        };
        if let Some(t) = &session.tracks[track] {
            self.by_ssrc.insert(t.ssrc, id.clone());
        }
        self.sessions.insert(id.clone(), session);
        self.by_stream.insert(stream, id.clone());
        self.index_transport(&id, now);
        if let Some(limit) = self.config.setup_timeout
            && let Some(s) = self.sessions.get_mut(&id)
        {
            s.unplayed_until = Some(now + limit);
            self.unplayed.insert((now + limit, id.clone()));
        }
        id
    }

    /// A track's random SSRC and offsets, with its transport.
    fn new_track(
        &mut self,
        transport: SessionTransport,
        negotiated: Transport,
        url: String,
    ) -> TrackSession {
        // SSRC 0 is what ffmpeg's punch packets carry; avoid it and duplicates.
        let ssrc = loop {
            let ssrc = (self.rng.next_u64() >> 32) as u32;
            if ssrc != 0 && !self.by_ssrc.contains_key(&ssrc) {
                break ssrc;
            }
        };
        let seq_offset = (self.rng.next_u64() >> 48) as u16;
        let rtp_ts_offset = (self.rng.next_u64() >> 32) as u32;
        TrackSession { transport, negotiated, ssrc, seq_offset, rtp_ts_offset, url }
    }

    /// SETUP of one track of an existing session: a new transport for a set-up track, or a
    /// track set up for the first time. Every track of a session goes the same way: all UDP,
    /// or all interleaved on one connection (461 otherwise).
    fn set_track(
        &mut self,
        now: Instant,
        id: &SessionId,
        track: usize,
        transport: SessionTransport,
        negotiated: Transport,
        url: String,
    ) -> Result<(), Refusal> {
        let Some(s) = self.sessions.get(id) else {
            return Err(Refusal::SessionNotFound(id.to_string()));
        };
        let others = s.tracks.iter().enumerate().filter(|(i, _)| *i != track);
        let mixed =
            others.filter_map(|(_, t)| t.as_ref()).any(|t| match (&t.transport, &transport) {
                (SessionTransport::Udp { .. }, SessionTransport::Udp { .. }) => false,
                (
                    SessionTransport::Interleaved { conn: a, .. },
                    SessionTransport::Interleaved { conn: b, .. },
                ) => a != b,
                _ => true,
            });
        if mixed {
            return Err(Refusal::Transport(TransportError::MixedTracks));
        }
        self.unindex_transport(id);
        let fresh = match self.sessions.get(id).and_then(|s| s.tracks[track].as_ref()) {
            Some(_) => None,
            None => Some(self.new_track(transport, negotiated, url.clone())),
        };
        if let Some(s) = self.sessions.get_mut(id) {
            match (&mut s.tracks[track], fresh) {
                (slot, Some(new)) => {
                    self.by_ssrc.insert(new.ssrc, id.clone());
                    *slot = Some(new);
                }
                (Some(t), None) => {
                    t.transport = transport;
                    t.negotiated = negotiated;
                    t.url = url;
                }
                (None, None) => {}
            }
        }
        self.index_transport(id, now);
        Ok(())
    }

    /// Adds `id` to the connection index (interleaved) or the deadline set (UDP).
    fn index_transport(&mut self, id: &SessionId, now: Instant) {
        let timeout = self.config.session_timeout;
        let Some(s) = self.sessions.get_mut(id) else { return };
        s.last_seen = now;
        match s.interleaved_conn() {
            Some(conn) => {
                s.deadline = None;
                self.by_conn.entry(conn).or_default().insert(id.clone());
            }
            None => {
                let deadline = now + timeout;
                s.deadline = Some(deadline);
                self.deadlines.insert((deadline, id.clone()));
            }
        }
    }

    fn unindex_transport(&mut self, id: &SessionId) {
        let Some(s) = self.sessions.get(id) else { return };
        if let Some(deadline) = s.deadline {
            self.deadlines.remove(&(deadline, id.clone()));
        }
        if let Some(conn) = s.interleaved_conn()
            && let Some(set) = self.by_conn.get_mut(&conn)
        {
            set.remove(id);
            if set.is_empty() {
                self.by_conn.remove(&conn);
            }
        }
    }

    /// A sign of life from session `id`, if it exists.
    fn touch(&mut self, now: Instant, id: &SessionId) {
        let Some(s) = self.sessions.get_mut(id) else { return };
        s.last_seen = s.last_seen.max(now);
        self.rearm(id);
    }

    /// Recomputes a UDP session's deadline from its last sign of life and its state's timeout
    /// (longer while paused). A state change is not a sign of life: `last_seen` stays.
    fn rearm(&mut self, id: &SessionId) {
        let timeout = match self.sessions.get(id) {
            // Ended with its client gone (connection closed): nobody will resume it.
            Some(s) if s.ended && matches!(s.conn, Some((_, false))) => self.config.session_timeout,
            Some(s) if s.state == SessionState::Paused => {
                self.config.paused_session_timeout.max(self.config.session_timeout)
            }
            // Reported, then fell silent while being sent to: gone.
            Some(s) if s.state == SessionState::Playing && s.rtcp_seen && !s.ended => {
                self.config.silence_timeout.min(self.config.session_timeout)
            }
            Some(_) => self.config.session_timeout,
            None => return,
        };
        let Some(s) = self.sessions.get_mut(id) else { return };
        if let Some(old) = s.deadline {
            let new = s.last_seen + timeout;
            if new != old {
                s.deadline = Some(new);
                self.deadlines.remove(&(old, id.clone()));
                self.deadlines.insert((new, id.clone()));
            }
        }
    }

    fn close(&mut self, id: &SessionId, reason: CloseReason) {
        self.unindex_transport(id);
        let Some(s) = self.sessions.remove(id) else { return };
        if let Some(until) = s.unplayed_until {
            self.unplayed.remove(&(until, id.clone()));
        }
        self.by_stream.remove(&s.stream);
        for t in s.set_up() {
            self.by_ssrc.remove(&t.ssrc);
        }
        self.events.push_back(Event::Closed { session: s.id, stream: s.stream, reason });
    }

    fn session_header(&self, id: &SessionId) -> String {
        format_session(id.as_str(), self.config.session_timeout.as_secs())
    }

    /// A 200 with `CSeq` and `Server`.
    fn ok(&self, cseq: &str) -> rtsp_types::ResponseBuilder {
        self.builder(StatusCode::Ok, cseq)
    }

    fn builder(&self, status: StatusCode, cseq: &str) -> rtsp_types::ResponseBuilder {
        response_builder(status, cseq, &self.config.server_name)
    }

    /// Adds `Session` if `session` names a live session.
    fn with_session(
        &self,
        b: rtsp_types::ResponseBuilder,
        session: Option<&SessionId>,
    ) -> rtsp_types::ResponseBuilder {
        match session {
            Some(id) if self.sessions.contains_key(id) => {
                b.header(SESSION, self.session_header(id))
            }
            _ => b,
        }
    }

    /// The response for `refusal`, with the headers its status calls for.
    fn refuse(
        &self,
        cseq: &str,
        session: Option<&SessionId>,
        refusal: &Refusal,
    ) -> Response<Vec<u8>> {
        let mut b = self.builder(refusal.status(), cseq);
        match refusal {
            Refusal::OptionNotSupported(tags) => b = b.header(UNSUPPORTED, tags.as_str()),
            Refusal::NotImplemented(_) => b = b.header(PUBLIC, PUBLIC_METHODS),
            Refusal::Unavailable(_) | Refusal::TooManyFromClient { .. } => {
                b = b.header(RETRY_AFTER, RETRY_AFTER_S);
            }
            _ => {}
        }
        self.with_session(b, session).build(Vec::new())
    }
}

/// The response to send before closing a connection whose bytes did not parse
/// ([`crate::codec::Decoded::Invalid`]): 400, 413 or 505 per [`ParseError::status`], with
/// `Connection: close` (RFC 2326 §12.10), `Server: server_name`, and the `CSeq` echoed when one
/// could be read. A free function so that a connection task can answer without the core.
#[must_use]
pub fn invalid_response(err: &ParseError, server_name: &str) -> Response<Vec<u8>> {
    let status = err.status();
    let mut b = Response::builder(Version::V1_0, status)
        .reason_phrase(reason_phrase(status))
        .header(SERVER, server_name)
        .header(CONNECTION, "close");
    if let Some(cseq) = &err.cseq {
        b = b.header(CSEQ, cseq.as_str());
    }
    b.build(Vec::new())
}

/// The header name `com.ses.streamID`.
/// Whether DESCRIBE offers feedback and retransmission (RFC 4585, RFC 4588) to this request:
/// `rtx=1` or `rtx=0` in the URL's query decides; otherwise players shown to repair loss with it
/// get it (GStreamer's `rtspsrc`, which asks for AVPF and RTX when offered). Others get the plain
/// description: ffmpeg would ask for AVPF and send NACKs but has no RTX receiver, and live555
/// knows neither.
fn offers_feedback(req: &Request<Vec<u8>>) -> bool {
    rtx_query(req).unwrap_or_else(|| {
        req.header(&USER_AGENT)
            .is_some_and(|ua| ua.as_str().to_ascii_lowercase().starts_with("gstreamer"))
    })
}

/// What the request's URL says of retransmission: `rtx=1`, `rtx=0`, or nothing.
fn rtx_query(req: &Request<Vec<u8>>) -> Option<bool> {
    let query = req.request_uri().and_then(|u| u.query()).unwrap_or_default();
    query.split('&').find_map(|kv| match kv {
        "rtx=1" => Some(true),
        "rtx=0" => Some(false),
        _ => None,
    })
}

fn stream_id_header() -> HeaderName {
    // The literal is ASCII, the only condition `from_static_str` checks.
    HeaderName::from_static_str(COM_SES_STREAM_ID).expect("ASCII header name")
}

/// A response of `status` with its reason phrase, `Server: server_name` and the `CSeq` echoed
/// (none when `cseq` is empty: a request without a valid one).
fn response_builder(
    status: StatusCode,
    cseq: &str,
    server_name: &str,
) -> rtsp_types::ResponseBuilder {
    let b = Response::builder(Version::V1_0, status)
        .reason_phrase(reason_phrase(status))
        .header(SERVER, server_name);
    if cseq.is_empty() { b } else { b.header(CSEQ, cseq) }
}

/// `CSeq` as sent, if it is `1*DIGIT` (RFC 2326 §12.17). At most 19 digits, so it fits a u64.
fn cseq_of(req: &Request<Vec<u8>>) -> Option<String> {
    let v = req.header(&CSEQ)?.as_str().trim();
    let ok = !v.is_empty() && v.len() <= 19 && v.bytes().all(|b| b.is_ascii_digit());
    ok.then(|| v.to_owned())
}

/// The track a SETUP target names in `p`: `trackID=N` below its track count, or the bare
/// presentation URL, which means track 0 (the one MP2T track; for native tracks, the first,
/// as SAT>IP-style clients that SETUP the presentation itself expect one stream).
fn track_index(target: &Target, p: &Presentation) -> Result<usize, Refusal> {
    match target {
        Target::Track(name, n) if *n as usize >= p.track_count() => {
            Err(Refusal::NotFound(format!("{name}/trackID={n}")))
        }
        Target::Track(_, n) => Ok(*n as usize),
        _ => Ok(0),
    }
}

/// The presentation a DESCRIBE or session-creating SETUP names: its URL, the name as asked and
/// the library's record. 404 for anything else.
fn resolve_presentation<'r>(
    req: &'r Request<Vec<u8>>,
    lib: &dyn Library,
) -> Result<(&'r rtsp_types::Url, String, Presentation), Refusal> {
    let uri = || req.request_uri().map_or_else(|| "*".to_owned(), ToString::to_string);
    let target = parse_target(req.request_uri()).map_err(|e| Refusal::NotFound(e.to_string()))?;
    let (Some(url), Some(name)) = (req.request_uri(), target.name()) else {
        return Err(Refusal::NotFound(uri()));
    };
    // `?rendition=RUNG` pins one rendition of a title (`source`: the file it was made from):
    // the presentation is then named `TITLE~RUNG`, which its Content-Base carries on to the
    // SETUPs (a query does not survive `Content-Base`).
    let name = match rendition_query(url.query()) {
        Some(rung) if !name.contains('~') => format!("{name}~{rung}"),
        _ => name.to_owned(),
    };
    if !crate::url::is_valid_name(&name) {
        return Err(Refusal::NotFound(uri()));
    }
    let p = lib.lookup(&name).ok_or_else(|| Refusal::NotFound(uri()))?;
    track_index(&target, &p)?;
    Ok((url, name, p))
}

/// The `rendition=` of a request-URI's query (up to a `/`: ffmpeg appends the control there).
fn rendition_query(query: Option<&str>) -> Option<&str> {
    query?.split('&').find_map(|kv| {
        let v = kv.strip_prefix("rendition=")?;
        let v = v.split('/').next().unwrap_or_default();
        (!v.is_empty()).then_some(v)
    })
}

/// The pace of a SET_PARAMETER body (`text/parameters`, RFC 2326 §10.9), and the buffer it
/// reports: the [`RATE_PARAMETER`] line, and optionally the [`BUFFER_PARAMETER`] one; any other
/// parameter → 451, a bad value (or a buffer without a rate) → 400.
fn parse_rate_parameter(
    body: &[u8],
) -> Result<(Pace, Option<BufferLevel>, Option<Pacing>), Refusal> {
    let text = std::str::from_utf8(body).map_err(|_| Refusal::ParameterNotUnderstood)?;
    let (mut pace, mut buffer, mut pacing) = (None, None, None);
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':').ok_or(Refusal::ParameterNotUnderstood)?;
        let (name, value) = (name.trim(), value.trim());
        if name.eq_ignore_ascii_case(RATE_PARAMETER) {
            let p = value.parse::<f64>().ok().and_then(Pace::from_multiplier).ok_or_else(|| {
                Refusal::BadRequest(format!(
                    "{RATE_PARAMETER}: {value:?} is not a number in 0.1..=10"
                ))
            })?;
            pace = Some(p);
        } else if name.eq_ignore_ascii_case(BUFFER_PARAMETER) {
            buffer = Some(parse_buffer_level(value).ok_or_else(|| {
                Refusal::BadRequest(format!(
                    "{BUFFER_PARAMETER}: {value:?} is not LEVEL/DEPTH in seconds (0.42/2)"
                ))
            })?);
        } else if name.eq_ignore_ascii_case(PACING_PARAMETER) {
            pacing = Some(match value {
                v if v.eq_ignore_ascii_case("rate") => Pacing::Rate,
                v if v.eq_ignore_ascii_case("content") => Pacing::Content,
                v => {
                    return Err(Refusal::BadRequest(format!(
                        "{PACING_PARAMETER}: {v:?} is neither \"rate\" nor \"content\""
                    )));
                }
            });
        } else {
            return Err(Refusal::ParameterNotUnderstood);
        }
    }
    match (pace, buffer, pacing) {
        (Some(p), b, m) => Ok((p, b, m)),
        (None, Some(_), _) => {
            Err(Refusal::BadRequest(format!("{BUFFER_PARAMETER} comes with {RATE_PARAMETER}")))
        }
        (None, None, Some(_)) => {
            Err(Refusal::BadRequest(format!("{PACING_PARAMETER} comes with {RATE_PARAMETER}")))
        }
        (None, None, None) => Err(Refusal::ParameterNotUnderstood),
    }
}

/// `LEVEL/DEPTH`: two finite numbers of seconds, neither negative, the depth under an hour.
fn parse_buffer_level(value: &str) -> Option<BufferLevel> {
    let (level, depth) = value.split_once('/')?;
    let secs = |v: &str| {
        let s = v.trim().parse::<f64>().ok()?;
        (s.is_finite() && (0.0..3600.0).contains(&s)).then(|| Duration::from_secs_f64(s))
    };
    Some(BufferLevel { level: secs(level)?, depth: secs(depth)? })
}

#[cfg(test)]
mod tests;
