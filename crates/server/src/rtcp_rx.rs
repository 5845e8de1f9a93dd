//! The RTCP receiver thread: liveness, reports and retransmission requests from UDP clients.
//!
//! RTCP from every UDP session arrives on the one shared RTCP socket (an interleaved session's
//! comes on its RTSP connection and is read by [`parse`] there). Receiver reports name the
//! SSRC of the stream they report on (RFC 3550 §6.4.2), which is how a report is matched to its
//! session and keeps it alive (RFC 7826 §10.5). Clients' NAT "punch" packets (ffmpeg's empty
//! RR, live555's 4-byte dummies) parse to nothing useful and are dropped silently.
//!
//! Each reception report block also says what the path does to the stream: the fraction lost,
//! and the round-trip time from its LSR and DLSR against our clock now (RFC 3550 §6.4.1: our
//! sender reports carry the system clock's NTP time). The session manager gives them to the
//! node core, which may switch a session to another rendition on them
//! ([`isochron_node::abr`]).
//!
//! A generic NACK (RFC 4585 §6.2.1) goes straight to the sender thread, which holds what this
//! node sent ([`isochron_dataplane::rtx`]): in a cluster a client asks the node that sent the lost
//! packet (RBEC, Yima §2.3), which need not be the session's origin, so the request must not wait
//! on the session manager.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use isochron_dataplane::sender::SenderCommand;
use isochron_dataplane::shards::Senders;
use isochron_node::abr::ReceiverFeedback;
use isochron_rtp::rtcp::{NtpTimestamp, ReportBlock, RtcpPacket, nack_seqs, parse_compound};
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
        let Parsed { media_ssrcs, reports, nacks } = parse(&buf[..n]);
        if media_ssrcs.is_empty() && nacks.is_empty() {
            trace!(%from, "RTCP naming no stream dropped");
        }
        // What each asks for again is also the loss adaptive bit rate judges.
        let nacked = if media_ssrcs.is_empty() { Vec::new() } else { nacks.clone() };
        for (ssrc, seqs) in nacks {
            if sender.send(SenderCommand::Nack { ssrc, seqs }).is_err() {
                return;
            }
        }
        if !media_ssrcs.is_empty()
            && sessions.send(SessionCommand::Rtcp { media_ssrcs, reports, nacked }).is_err()
        {
            return;
        }
    }
}

/// What a compound RTCP packet from a client says.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Parsed {
    /// The media SSRCs its packets name.
    pub(crate) media_ssrcs: Vec<u32>,
    /// Its reception report blocks, read on arrival.
    pub(crate) reports: Vec<ReceiverFeedback>,
    /// Its generic NACKs: the media SSRC and the sequence numbers asked for.
    pub(crate) nacks: Vec<(u32, Vec<u16>)>,
}

/// Parses a compound RTCP packet that has just arrived (over UDP, or interleaved on an RTSP
/// connection); what follows a packet that does not parse is ignored.
pub(crate) fn parse(pkt: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    for p in parse_compound(pkt) {
        let Ok(p) = p else { break };
        out.media_ssrcs.extend(p.media_ssrcs());
        if let RtcpPacket::ReceiverReport { reports: blocks, .. }
        | RtcpPacket::SenderReport { reports: blocks, .. } = &p
        {
            let now = NtpTimestamp::from_unix_nanos(unix_now_ns()).middle32();
            out.reports.extend(blocks.iter().map(|b| feedback(b, now)));
        }
        if let RtcpPacket::Nack { media_ssrc, pairs, .. } = p {
            out.nacks.push((media_ssrc, nack_seqs(&pairs).collect()));
        }
    }
    out
}

/// The system clock's time since the Unix epoch, ns (what our sender reports carry).
fn unix_now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

/// What block `b` says, `now` being the middle 32 bits of our NTP time on arrival: the round
/// trip is `now - LSR - DLSR` (RFC 3550 §6.4.1), when the block echoes a sender report.
fn feedback(b: &ReportBlock, now: u32) -> ReceiverFeedback {
    let rtt = (b.lsr != 0).then(|| {
        let units = now.wrapping_sub(b.lsr).wrapping_sub(b.dlsr);
        // A negative round trip (clock steps, a report from before a restart) is no sample.
        (units < 1 << 31).then(|| Duration::from_nanos((u64::from(units) * 1_000_000_000) >> 16))
    });
    ReceiverFeedback {
        ssrc: b.ssrc,
        fraction_lost: b.fraction_lost,
        rtt: rtt.flatten(),
        highest_seq: Some(b.highest_seq),
        jitter: b.jitter,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_round_trip_is_arrival_less_lsr_less_dlsr() {
        let block = |lsr, dlsr| ReportBlock {
            ssrc: 7,
            fraction_lost: 13,
            cumulative_lost: 0,
            highest_seq: 0,
            jitter: 0,
            lsr,
            dlsr,
        };
        // Sent at 0x1000_0000, held 1 s (65536 units) by the receiver, back 1.25 s after.
        let fb = feedback(&block(0x1000_0000, 65_536), 0x1000_0000 + 65_536 + 16_384);
        assert_eq!(
            fb,
            ReceiverFeedback {
                ssrc: 7,
                fraction_lost: 13,
                rtt: Some(Duration::from_millis(250)),
                highest_seq: Some(0),
                jitter: 0,
            }
        );
        assert_eq!(feedback(&block(0, 0), 5).rtt, None, "no sender report echoed");
        assert_eq!(feedback(&block(100, 0), 50).rtt, None, "a negative round trip");
    }
}
