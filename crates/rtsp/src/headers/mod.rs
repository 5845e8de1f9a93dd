//! RTSP header helpers with the leniency real clients need (RFC 2326 §12).
//!
//! rtsp-types parses and writes messages, but its typed headers follow RFC 7826 strictly. Here are
//! the RTSP 1.0 headers whose exact spelling matters to ffmpeg, GStreamer, VLC and live555 (RFC
//! 2326 §12.29, §12.33, §12.37, §12.39): what we accept from them and the precise form we answer
//! with. Nothing here knows about sessions or addresses; `server` combines these.

pub mod range;
pub mod rtp_info;
pub mod session;
pub mod transport;

pub use range::{NptRange, NptTime, RangeError, format_npt_range, npt_ceil, npt_floor};
pub use rtp_info::{RtpInfo, format_rtp_info};
pub use session::{format_session, parse_session_id};
pub use transport::{Transport, TransportError, TransportSpec, UdpProfile, negotiate};
