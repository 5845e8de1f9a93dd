//! SRT publishing: a caller sends MPEG-TS over SRT (draft-sharabayko-srt-01, live mode) to
//! `live.srt_listen` with `streamid=publish:NAME`, and it is a live feed like one published over
//! RTSP RECORD: recorded as it arrives on an admitted write stream, watched live over RTSP and
//! HLS, kept as an object (`docs/design/live.md`).
//!
//! Why `srt-tokio`: it is SRT in Rust on tokio (the handshake, the receiver's retransmission
//! and its latency buffer), maintained, and tested by its authors against libsrt, which
//! ffmpeg and GStreamer's `srtsink` use; libsrt itself would bring a C library and its own
//! threads into the server.
//!
//! Each caller's handshake is decided before it is answered, so that a refusal changes nothing
//! and the publisher sees why (SRT's reject codes, §3.2.1.1; the reason in the log):
//!
//! 1. the stream id is read ([`StreamRequest::parse`]: `2400` when it asks for nothing isochron
//!    does);
//! 2. access is checked as for RTSP ANNOUNCE: the `record` (`publish`) permission on the name,
//!    with the token of the stream id as a bearer token (`2401` without it when it is needed,
//!    `2403` when the user may not);
//! 3. the feed is admitted as a write stream at `live.default_rate_kbps` and its peak
//!    ([`Recorders::record_live`]: `2409` when the name is taken, `2402` when the disks cannot
//!    take it).
//!
//! Then the connection is accepted and its messages, cut into payloads of whole TS packets
//! ([`TsPacketizer`]), go to the recording as RFC 2250 RTP packets of one `MP2T/90000` track,
//! numbered in order and stamped with their arrival on the 90 kHz clock. The feed ends when the
//! caller shuts the connection down; a caller gone silent (SRT's idle timeout) has dropped, and
//! the feed waits `live.grace_s` for a caller of the same name to go on with it
//! (`docs/design/live.md`, *Grace*).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures_util::{FutureExt as _, StreamExt as _};
use isochron_auth::{Access, Authority, Credentials, Decision, Permission};
use isochron_live::srt::{StreamRequest, TsPacketizer};
use isochron_media::live::{Announced, MP2T_PT, announced_track};
use srt_tokio::SrtListener;
use srt_tokio::access::{RejectReason, ServerRejectReason};
use srt_tokio::options::StreamId;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::LiveSettings;
use crate::publisher::FEED_QUEUE;
use crate::recorder::live::{FeedPacket, LiveFeed, Rejoin};
use crate::recorder::{RecordError, RecordParams, Recorders};

/// What every SRT caller's feed shares.
#[derive(Debug)]
pub(crate) struct SrtPublishing {
    pub(crate) recorders: Arc<Recorders>,
    pub(crate) live: LiveSettings,
    pub(crate) auth: Arc<Authority>,
}

/// Binds the SRT listener on `addr` (a UDP socket): its address, and the task that takes its
/// callers.
///
/// Every caller's datagrams come to this one socket, so it asks for a large receive buffer
/// ([`isochron_dataplane::net::receive_socket`]): a burst the kernel drops while the listener's
/// task waits for a core is a hole SRT repairs only within its latency (120 ms by default),
/// and a hole it gives up is a gap in the recording.
pub(crate) async fn bind(
    addr: SocketAddr,
    shared: Arc<SrtPublishing>,
) -> std::io::Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    let (socket, buffer) = isochron_dataplane::net::receive_socket(addr)?;
    if buffer < isochron_dataplane::net::RECEIVE_BUFFER {
        warn!(
            bytes = buffer,
            "the SRT listener's receive buffer is small (net.core.rmem_max): a burst may be lost \
             and, past SRT's latency, missing from the recording"
        );
    }
    socket.set_nonblocking(true)?;
    let socket = tokio::net::UdpSocket::from_std(socket)?;
    let local = socket.local_addr()?;
    let (listener, mut incoming) = SrtListener::builder().socket(socket).bind(local).await?;
    Ok((local, async move {
        // Held for as long as callers are taken.
        let _listener = listener;
        while let Some(request) = incoming.incoming().next().await {
            tokio::spawn(caller(request, Arc::clone(&shared)));
        }
    }))
}

/// Why a caller is refused: its reject code and what to log.
struct Refused(ServerRejectReason, String);

/// One caller: decided, then its feed taken until it ends.
async fn caller(request: srt_tokio::ConnectionRequest, shared: Arc<SrtPublishing>) {
    let peer = request.remote();
    let id = request.stream_id().map_or_else(String::new, |s: &StreamId| s.to_string());
    let ended = Arc::new(AtomicBool::new(false));
    let decided = decide(&id, peer, &shared, &ended).await;
    let (name, queue) = match decided {
        Ok(admitted) => admitted,
        Err(Refused(code, why)) => {
            warn!(%peer, stream_id = %id, code = code as i32, %why, "SRT caller refused");
            let _ = request.reject(RejectReason::Server(code)).await;
            return;
        }
    };
    let mut socket = match request.accept(None).await {
        Ok(s) => s,
        Err(e) => {
            warn!(%peer, object = %name, error = %e, "SRT connection lost while accepted");
            ended.store(true, Ordering::Relaxed);
            return;
        }
    };
    info!(%peer, object = %name, "SRT publisher connected");
    let mut ts = TsPacketizer::new();
    let mut statistics = socket.statistics().clone();
    let (start, ssrc) = (tokio::time::Instant::now(), rand::random::<u32>());
    let mut seq = 0u16;
    let mut last = start;
    while let Some(message) = socket.next().await {
        let Ok((_, bytes)) = message else { break };
        let at = tokio::time::Instant::now();
        last = at;
        let ticks = at.duration_since(start).as_micros() * 9 / 100;
        ts.push_message(&bytes);
        while let Some(payload) = ts.poll_payload() {
            let packet = rtp_packet((seq, ticks as u32, ssrc), &payload);
            seq = seq.wrapping_add(1);
            if queue.send(FeedPacket { at, track: 0, packet }).await.is_err() {
                warn!(%peer, object = %name, "the recording of the SRT feed ended; closing");
                return;
            }
        }
    }
    // A caller's shutdown ends the connection at once; a caller gone silent, only after SRT's
    // idle timeout (5 s): that is a drop, which the feed waits out.
    let shut_down = last.elapsed() < SHUTDOWN_WITHIN;
    ended.store(shut_down, Ordering::Relaxed);
    let how = if shut_down { "closed the connection" } else { "went silent" };
    info!(%peer, object = %name, skipped_bytes = ts.skipped(), "SRT publisher {how}");
    // What SRT itself gave up (packets that came after the latency, or never): the feed has
    // gaps there, which the recording keeps.
    let mut last_stats = None;
    while let Some(Some(s)) = statistics.next().now_or_never() {
        last_stats = Some(s);
    }
    match last_stats {
        Some(s) if s.rx_dropped_data > 0 || s.rx_loss_data > 0 => {
            warn!(%peer, object = %name, received = s.rx_unique_data, dropped = s.rx_dropped_data,
                lost = s.rx_loss_data, retransmitted = s.rx_retransmit_data,
                "SRT packets of the feed were given up");
        }
        Some(s) => info!(%peer, object = %name, received = s.rx_unique_data,
            retransmitted = s.rx_retransmit_data, "SRT receiver: nothing given up"),
        None => {}
    }
}

/// A connection that ends within this of its last message was shut down by its caller.
const SHUTDOWN_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// An RFC 2250 RTP packet: version 2, payload type 33, no marker.
fn rtp_packet((seq, timestamp, ssrc): (u16, u32, u32), payload: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(12 + payload.len());
    p.extend_from_slice(&[0x80, MP2T_PT]);
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&timestamp.to_be_bytes());
    p.extend_from_slice(&ssrc.to_be_bytes());
    p.extend_from_slice(payload);
    p
}

/// Steps 1 to 3 of the module docs: the feed's name and the queue to its admitted recording.
async fn decide(
    id: &str,
    peer: SocketAddr,
    shared: &SrtPublishing,
    ended: &Arc<AtomicBool>,
) -> Result<(String, mpsc::Sender<FeedPacket>), Refused> {
    let asked = StreamRequest::parse(id)
        .map_err(|e| Refused(ServerRejectReason::BadRequest, e.to_string()))?;
    let credentials = asked.token.clone().map(Credentials::Bearer);
    let now_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let access = Access {
        permission: Permission::Record,
        object: Some(&asked.name),
        credentials: credentials.as_ref(),
        trusted_peer: peer.ip().is_loopback(),
        secure: false,
        method: "SRT",
        now_unix_s,
    };
    match shared.auth.check(&access) {
        Decision::Allow { .. } => {}
        Decision::Unauthorized(why) => return Err(Refused(ServerRejectReason::Unauthorized, why)),
        Decision::Forbidden(why) => return Err(Refused(ServerRejectReason::Forbidden, why)),
    }
    let track = announced_track(
        0,
        &Announced { encoding: "MP2T", clock_rate: 90_000, channels: 0, fmtp: "" },
    )
    .map_err(|e| Refused(ServerRejectReason::InternalServerError, e.to_string()))?;
    let (rate, peak) = shared.live.rates(None);
    let (queue, packets) = mpsc::channel(FEED_QUEUE);
    let rejoin = Rejoin { packets, ended: Arc::clone(ended), publisher: peer };
    let given_back = shared
        .recorders
        .rejoin(&asked.name, (std::slice::from_ref(&track), &[MP2T_PT]), rejoin)
        .map_err(|e| Refused(ServerRejectReason::Conflict, e.to_string()))?;
    let Some(Rejoin { packets, .. }) = given_back else {
        info!(%peer, object = %asked.name, "an SRT publisher came back to its feed");
        return Ok((asked.name, queue));
    };
    let feed = LiveFeed {
        name: asked.name.clone(),
        tracks: vec![track],
        payload_types: vec![MP2T_PT],
        params: RecordParams { rate, peak },
        source: format!("SRT from {peer}"),
        publisher: peer,
        transport: "srt".to_owned(),
        ended: Arc::clone(ended),
        grace: shared.live.grace,
    };
    match shared.recorders.start_live(feed, packets).await {
        Ok(()) => {
            info!(%peer, object = %asked.name, %rate, %peak, "SRT feed admitted");
            Ok((asked.name, queue))
        }
        Err(RecordError::Rejected { reason, .. }) => Err(Refused(
            ServerRejectReason::Overload,
            format!("recording at {rate} (peak {peak}): {reason}"),
        )),
        Err(RecordError::Conflict(m)) => Err(Refused(ServerRejectReason::Conflict, m)),
        Err(RecordError::BadRequest(m)) => Err(Refused(ServerRejectReason::BadRequest, m)),
        Err(e) => Err(Refused(ServerRejectReason::InternalServerError, e.to_string())),
    }
}
