//! The RTCP receiver thread: liveness, reports and retransmission requests from UDP clients.
//!
//! RTCP from every UDP session arrives on the one shared RTCP socket. Receiver reports name the
//! SSRC of the stream they report on (RFC 3550 §6.4.2), which is how a report is matched to its
//! session and keeps it alive (RFC 7826 §10.5). Clients' NAT "punch" packets (ffmpeg's empty
//! RR, live555's 4-byte dummies) parse to nothing useful and are dropped silently.
//!
//! A generic NACK (RFC 4585 §6.2.1) goes straight to the sender thread, which holds what this
//! node sent ([`isochron_dataplane::rtx`]): in a cluster a client asks the node that sent the lost
//! packet (RBEC, Yima §2.3), which need not be the session's origin, so the request must not wait
//! on the session manager.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use isochron_dataplane::sender::SenderCommand;
use isochron_dataplane::shards::Senders;
use isochron_rtp::rtcp::{RtcpPacket, nack_seqs, parse_compound};
use tokio::sync::mpsc;
use tracing::trace;

use crate::sessions::SessionCommand;

/// Receives on `socket` until `stop` is set (checked every 500 ms).
pub(crate) fn run(
    socket: UdpSocket,
    stop: Arc<AtomicBool>,
    sessions: mpsc::UnboundedSender<SessionCommand>,
    sender: Senders,
) {
    let _ = socket.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = vec![0u8; 2048];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = socket.recv_from(&mut buf) else { continue };
        let mut media_ssrcs = Vec::new();
        for p in parse_compound(&buf[..n]) {
            match p {
                Ok(p) => {
                    media_ssrcs.extend(p.media_ssrcs());
                    if let RtcpPacket::Nack { media_ssrc, pairs, .. } = p {
                        let seqs = nack_seqs(&pairs).collect();
                        if sender.send(SenderCommand::Nack { ssrc: media_ssrc, seqs }).is_err() {
                            return;
                        }
                    }
                }
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
