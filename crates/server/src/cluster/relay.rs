//! The relay port (`docs/design/cluster.md`): RTP that other nodes send for a relayed session
//! this node is the origin of, and the NACKs such an origin sends back.

use std::net::UdpSocket;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use isochron_dataplane::sender::SenderCommand;

use crate::cluster_view::ClusterView;

/// Receives on the relay port until `stop`: RTP that other nodes relay through this node (the
/// origin of their relayed sessions) goes to the sender thread to be resequenced and forwarded;
/// an RTCP generic NACK from such an origin (RFC 4585 §6.2.1, told from RTP by its packet type,
/// RFC 5761 §4) asks this node to resend what it relayed there, from its retransmission buffer.
pub fn receive_relay(
    socket: UdpSocket,
    sender: isochron_dataplane::shards::Senders,
    view: Arc<ClusterView>,
    stop: Arc<AtomicBool>,
) {
    use isochron_rtp::rtcp::{RtcpPacket, nack_seqs, parse_compound};
    let _ = socket.set_read_timeout(Some(Duration::from_millis(200)));
    // Larger than any datagram: a relayed packet is never cut short.
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let Ok(n) = socket.recv(&mut buf) else { continue };
        if n < 12 {
            continue;
        }
        if (192..=223).contains(&buf[1]) {
            for p in parse_compound(&buf[..n]).map_while(Result::ok) {
                if let RtcpPacket::Nack { media_ssrc, pairs, .. } = p {
                    let seqs = nack_seqs(&pairs).collect();
                    view.relay_nacks_in.fetch_add(1, Ordering::Relaxed);
                    let _ = sender.send(SenderCommand::Nack { ssrc: media_ssrc, seqs });
                }
            }
            continue;
        }
        view.relay_packets_in.fetch_add(1, Ordering::Relaxed);
        view.relay_bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        let _ = sender.send(SenderCommand::Relayed { datagram: buf[..n].to_vec() });
    }
}
