//! RTSP 1.0 (RFC 2326) for a video-on-demand server, sans-IO.
//!
//! What lives here: framing of the RTSP byte stream including interleaved data
//! ([`codec`], RFC 2326 §4, §10.12), the headers whose exact form matters to real clients
//! ([`headers`], RFC 2326 §12), the MPEG-TS session description ([`sdp`], Appendix C),
//! lenient request-URI matching ([`url`], §3.2, Appendix C.1.1) and the session core
//! ([`server`], §10 and Appendix A) that turns requests into responses and data-plane actions.
//! Beyond the RFCs, the rules follow what ffmpeg, GStreamer, VLC and live555 actually need; each
//! such rule names the player it is for, and the dialogs in `src/server/testdata/` pin them.
//!
//! What does not live here: sockets, clocks, threads and tokio (the `server` crate owns the
//! connections and calls [`server::ServerCore`]), RTP/RTCP packets (`isochron-rtp`), and the
//! client side beyond message encoding (`loadgen`). Message parsing and serialization are
//! rtsp-types', re-exported as [`rtsp_types`] so that callers use the same types.
//!
//! RTSP 2.0 (RFC 7826) is recognised only to be refused with 505 (GStreamer then retries with
//! RTSP 1.0).

pub use rtsp_types;

pub mod codec;
pub mod headers;
pub mod sdp;
pub mod server;
pub mod status;
pub mod url;

pub use codec::{Decoded, Frame, Limits, ParseError, decode, encode_request, encode_response};
pub use server::{
    CloseReason, ConnId, ConnInfo, Event, Handled, Library, PauseAction, PlayAction, PlayOutcome,
    PlayStart, Position, Presentation, ServerConfig, ServerCore, SessionId, SessionState,
    SessionTransport, SessionView, invalid_response, rtp_seq, rtp_timestamp,
};
