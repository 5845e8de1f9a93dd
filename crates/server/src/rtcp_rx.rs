//! The RTCP receiver thread: liveness and reports from UDP clients.
//!
//! RTCP from every UDP session arrives on the one shared RTCP socket. Receiver reports name the
//! SSRC of the stream they report on (RFC 3550 §6.4.2), which is how a report is matched to its
//! session and keeps it alive (rtsp-interop §2.6). Clients' NAT "punch" packets (ffmpeg's empty
//! RR, live555's 4-byte dummies) parse to nothing useful and are dropped silently.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use isochron_rtp::rtcp::parse_compound;
use tokio::sync::mpsc;
use tracing::trace;

use crate::sessions::SessionCommand;

/// Receives on `socket` until `stop` is set (checked every 500 ms).
pub(crate) fn run(
    socket: UdpSocket,
    stop: Arc<AtomicBool>,
    sessions: mpsc::UnboundedSender<SessionCommand>,
) {
    let _ = socket.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = vec![0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = socket.recv_from(&mut buf) else { continue };
        let mut media_ssrcs = Vec::new();
        for p in parse_compound(&buf[..n]) {
            match p {
                Ok(p) => media_ssrcs.extend(p.media_ssrcs()),
                Err(e) => {
                    trace!(%from, error = %e, "unparseable RTCP dropped");
                    break;
                }
            }
        }
        if !media_ssrcs.is_empty() && sessions.send(SessionCommand::Rtcp { media_ssrcs }).is_err() {
            return;
        }
    }
}
