//! A publishing RTSP connection (RFC 2326 §10.3 ANNOUNCE, §10.11 RECORD): the glue between the
//! connection, its [`Publish`] core, and the recorder the feed goes into.
//!
//! Why apart from the play sessions: a publisher sends media instead of receiving it, so none
//! of the session manager's state applies to it; its dialog and its feed belong to its
//! connection, which owns one [`Publisher`] from its first ANNOUNCE (`docs/design/live.md`).
//!
//! - **ANNOUNCE**: the description's tracks must each be storable
//!   ([`isochron_media::live::announced_track`]: `415`, the reason in the log) and the name free
//!   ([`Recorders::check`]: `403` when an object or another feed has it, `400` when it is not a
//!   valid name).
//! - **RECORD**: the feed is admitted as a write stream at the announced bandwidth (`b=AS`,
//!   else `live.default_rate_kbps`) with its peak (`live.peak_percent`), times the store's
//!   copies: a refusal is `453` and creates nothing. Admitted, its recording task starts
//!   ([`Recorders::record_live`]) and RECORD is answered `200`.
//! - **Media**: each `$` frame on a set-up track's RTP channel goes to the recording over a
//!   bounded queue; a full queue holds the connection's reader back (TCP slows the publisher).
//!   A track set up over UDP gets a port pair of its own on the connection's local address
//!   (RTP even, RTCP the next; a large receive buffer), and a task that queues the datagrams
//!   from the publisher's address (others are dropped: nobody else may inject into a feed).
//!   RTCP from the publisher (its sender reports) is read and dropped for now.
//! - **The end**: TEARDOWN, or the connection closing, closes the queue: the recording commits
//!   what arrived.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use isochron_media::live::{Announced, announced_track};
use isochron_media::native::NativeTrack;
use isochron_rtsp::rtsp_types::{Request, Response};
use isochron_rtsp::server::publish::{Publish, PublishState, PublishStep, refuse_announce};
use isochron_rtsp::status::Refusal;
use tokio::sync::mpsc;
use tokio::sync::watch;
use tracing::{info, warn};

use crate::config::LiveSettings;
use crate::recorder::live::{FeedPacket, LiveFeed, Rejoin};
use crate::recorder::{RecordError, RecordParams, Recorders};

/// The `Server` header of a publisher's responses.
const SERVER_NAME: &str = "isochron";

/// Packets of a feed queued for its recording before the connection's reader waits.
pub(crate) const FEED_QUEUE: usize = 1024;

/// What every publishing connection needs.
#[derive(Debug)]
pub(crate) struct Publishing {
    pub(crate) recorders: Arc<Recorders>,
    pub(crate) live: LiveSettings,
}

/// One connection's publisher (see the module docs).
#[derive(Debug)]
pub(crate) struct Publisher {
    core: Publish,
    peer: SocketAddr,
    /// The connection's local address, where UDP tracks get their ports.
    local: IpAddr,
    /// Per announced track set up over UDP: its RTP and RTCP sockets, until RECORD hands them
    /// to their reader.
    udp: Vec<Option<(std::net::UdpSocket, std::net::UdpSocket)>>,
    /// Dropped when the feed ends: the UDP readers then take what is left in their sockets
    /// and stop.
    readers: Option<watch::Sender<()>>,
    /// The queue to the recording, while it runs, and for each announced track its index among
    /// the recorded ones (the tracks set up).
    feed: Option<(mpsc::Sender<FeedPacket>, Vec<Option<usize>>)>,
    /// Set at TEARDOWN: the feed ends for good (a connection closed without it is a drop,
    /// which the feed waits out for `live.grace_s`).
    ended: Arc<AtomicBool>,
}

impl Publisher {
    /// An ANNOUNCE from `peer`: the publisher, if it is accepted, and the response.
    pub(crate) fn announce(
        req: &Request<Vec<u8>>,
        shared: &Publishing,
        (peer, local): (SocketAddr, SocketAddr),
    ) -> (Option<Self>, Response<Vec<u8>>) {
        let mut core = match Publish::announce(req, SERVER_NAME) {
            Ok(core) => core,
            Err(refusal) => {
                info!(%peer, %refusal, "ANNOUNCE refused");
                return (None, refuse_announce(req, &refusal, SERVER_NAME));
            }
        };
        let name = core.name().to_owned();
        // A feed waiting for its publisher to come back takes this one (checked at RECORD).
        let waits = shared.recorders.awaits_publisher(&name);
        let checked = tracks(&core, None).map(|_| ()).and_then(|()| {
            if waits {
                return Ok(());
            }
            shared.recorders.check(&name).map_err(|e| match e {
                RecordError::Conflict(m) => Refusal::Forbidden(m),
                other => Refusal::BadRequest(other.to_string()),
            })
        });
        if let Err(refusal) = checked {
            info!(%peer, object = %name, %refusal, "ANNOUNCE refused");
            let resp = core.refuse(&refusal);
            return (None, resp);
        }
        info!(%peer, object = %name, tracks = core.presentation().media.len(), "ANNOUNCE");
        let resp = core.accept();
        let udp = (0..core.presentation().media.len()).map(|_| None).collect();
        let ended = Arc::new(AtomicBool::new(false));
        let publisher =
            Self { core, peer, local: local.ip(), udp, readers: None, feed: None, ended };
        (Some(publisher), resp)
    }

    /// A request after the ANNOUNCE; `new_session` is the id a first SETUP gives the session.
    pub(crate) async fn handle_request(
        &mut self,
        req: &Request<Vec<u8>>,
        new_session: &str,
        shared: &Publishing,
    ) -> Response<Vec<u8>> {
        match self.core.handle_request(req, new_session) {
            PublishStep::Respond(resp) => resp,
            PublishStep::End(resp) => {
                // The queue closed, for good: the recording commits what it has.
                self.ended.store(true, Ordering::Relaxed);
                self.stop_feed();
                info!(peer = %self.peer, object = %self.core.name(), "TEARDOWN of the feed");
                resp
            }
            PublishStep::SetupUdp { track, client_ports } => {
                let bound = bind_pair(self.local).map_err(|e| {
                    warn!(peer = %self.peer, object = %self.core.name(), track, error = %e,
                        "no UDP ports for a published track");
                    Refusal::Unavailable(format!("binding UDP ports for track {track}: {e}"))
                });
                let ports = bound.and_then(|(rtp, rtcp)| {
                    let port = |s: &std::net::UdpSocket| {
                        s.local_addr()
                            .map(|a| a.port())
                            .map_err(|e| Refusal::Internal(e.to_string()))
                    };
                    let ports = (port(&rtp)?, port(&rtcp)?);
                    self.udp[track] = Some((rtp, rtcp));
                    Ok(ports)
                });
                if let Ok(server) = ports {
                    info!(peer = %self.peer, object = %self.core.name(), track,
                        client = ?client_ports, ?server, "SETUP of a published track over UDP");
                }
                self.core.finish_setup_udp(ports)
            }
            PublishStep::Record => {
                let admitted = self.start(shared).await;
                if let Err(refusal) = &admitted {
                    warn!(peer = %self.peer, object = %self.core.name(), %refusal,
                        "RECORD refused");
                }
                self.core.finish_record(admitted)
            }
        }
    }

    /// Whether the dialog is over (TEARDOWN, or a refused RECORD): the connection may announce
    /// again.
    pub(crate) fn is_over(&self) -> bool {
        self.core.state() == PublishState::Ended
    }

    /// A `$` frame on `channel`: a set-up track's RTP goes to the recording (waiting while its
    /// queue is full). `false` once the recording has ended on its own (a failed write, no
    /// data for its idle timeout): the connection should close.
    pub(crate) async fn handle_data(&mut self, channel: u8, payload: Vec<u8>) -> bool {
        let Some(track) = self.core.track_of_channel(channel) else { return true };
        let Some((queue, recorded)) = &self.feed else { return true };
        let Some(track) = recorded.get(track).copied().flatten() else { return true };
        let packet = FeedPacket { at: tokio::time::Instant::now(), track, packet: payload };
        if queue.send(packet).await.is_err() {
            warn!(peer = %self.peer, object = %self.core.name(),
                "the recording of the feed ended; closing the publisher's connection");
            self.stop_feed();
            return false;
        }
        true
    }

    /// How the tracks `set_up` come: `tcp`, `udp` or `tcp+udp`.
    fn transport(&self, set_up: &[usize]) -> String {
        let udp = |t: &usize| self.udp.get(*t).is_some_and(Option::is_some);
        match (set_up.iter().any(|t| !udp(t)), set_up.iter().any(udp)) {
            (true, true) => "tcp+udp",
            (false, true) => "udp",
            _ => "tcp",
        }
        .to_owned()
    }

    /// Closes the queue to the recording (which commits once the UDP readers, told to stop,
    /// have queued what was left in their sockets).
    fn stop_feed(&mut self) {
        self.feed = None;
        self.readers = None;
    }

    /// RECORD: admits the feed of the tracks set up and starts its recording.
    async fn start(&mut self, shared: &Publishing) -> Result<(), Refusal> {
        let set_up = self.core.tracks_set_up();
        let (recorded, payload_types) = tracks(&self.core, Some(&set_up))?;
        let announced = self.core.presentation().media.len();
        let mut index = vec![None; announced];
        for (k, &t) in set_up.iter().enumerate() {
            index[t] = Some(k);
        }
        let (rate, peak) = shared.live.rates(self.core.presentation().bandwidth_kbps);
        let (queue, packets) = mpsc::channel(FEED_QUEUE);
        let name = self.core.name().to_owned();
        let rejoin = Rejoin { packets, ended: Arc::clone(&self.ended), publisher: self.peer };
        let given_back = shared
            .recorders
            .rejoin(&name, (&recorded, &payload_types), rejoin)
            .map_err(|e| match e {
                RecordError::Conflict(m) => Refusal::Forbidden(m),
                other => Refusal::Internal(other.to_string()),
            })?;
        let Some(Rejoin { packets, .. }) = given_back else {
            // The feed that waited for its publisher goes on with this one.
            info!(peer = %self.peer, object = %name, "a publisher came back to its feed");
            self.start_readers(&index, &queue);
            self.feed = Some((queue, index));
            return Ok(());
        };
        let feed = LiveFeed {
            name,
            tracks: recorded,
            payload_types,
            params: RecordParams { rate, peak },
            source: format!("RTSP RECORD from {}", self.peer),
            publisher: self.peer,
            transport: self.transport(&set_up),
            ended: Arc::clone(&self.ended),
            grace: shared.live.grace,
        };
        match shared.recorders.start_live(feed, packets).await {
            Ok(()) => {
                self.start_readers(&index, &queue);
                self.feed = Some((queue, index));
                Ok(())
            }
            Err(RecordError::Rejected { reason, .. }) => Err(Refusal::NotEnoughBandwidth(format!(
                "recording at {rate} (peak {peak}): {reason}"
            ))),
            Err(RecordError::Conflict(m)) => Err(Refusal::Forbidden(m)),
            Err(RecordError::BadRequest(m)) => Err(Refusal::BadRequest(m)),
            Err(RecordError::Unavailable) => {
                Err(Refusal::Unavailable("the server is shutting down".into()))
            }
            Err(e) => Err(Refusal::Internal(e.to_string())),
        }
    }
}

impl Publisher {
    /// A task reading each track set up over UDP into `queue` (`index`: the recorded track of
    /// each announced one).
    fn start_readers(&mut self, index: &[Option<usize>], queue: &mpsc::Sender<FeedPacket>) {
        let (stop, stopped) = watch::channel(());
        for (t, pair) in self.udp.iter_mut().enumerate() {
            let (Some((rtp, rtcp)), Some(track)) = (pair.take(), index[t]) else { continue };
            let to = (track, queue.clone(), stopped.clone());
            match read_udp((rtp, rtcp), self.peer.ip(), to) {
                Ok(r) => drop(tokio::spawn(r)),
                Err(e) => warn!(peer = %self.peer, object = %self.core.name(), track,
                    error = %e, "a published track's UDP socket could not be read"),
            }
        }
        self.readers = Some(stop);
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.stop_feed();
    }
}

/// An even RTP port and the next for RTCP on `ip`, the RTP socket with a receive buffer for
/// bursts (a key frame arrives at once).
fn bind_pair(ip: IpAddr) -> std::io::Result<(std::net::UdpSocket, std::net::UdpSocket)> {
    for _ in 0..64 {
        let (rtp, _) = isochron_dataplane::net::receive_socket(SocketAddr::new(ip, 0))?;
        let port = rtp.local_addr()?.port();
        if port % 2 == 1 || port == u16::MAX {
            continue;
        }
        if let Ok(rtcp) = std::net::UdpSocket::bind(SocketAddr::new(ip, port + 1)) {
            return Ok((rtp, rtcp));
        }
    }
    Err(std::io::Error::new(std::io::ErrorKind::AddrInUse, "no free even and odd port pair"))
}

/// After the feed ends, how long a UDP reader still waits for a datagram: the last ones may
/// come after the TEARDOWN, which took the other path.
const LINGER: std::time::Duration = std::time::Duration::from_millis(200);

/// The task that queues a UDP track's RTP from `from` for the recording (as recorded track
/// `track`) until `stop` is dropped, then what comes within [`LINGER`] of each other; its
/// RTCP is read and dropped.
fn read_udp(
    (rtp, rtcp): (std::net::UdpSocket, std::net::UdpSocket),
    from: IpAddr,
    (track, queue, mut stop): (usize, mpsc::Sender<FeedPacket>, watch::Receiver<()>),
) -> std::io::Result<impl Future<Output = ()> + Send + 'static> {
    rtp.set_nonblocking(true)?;
    rtcp.set_nonblocking(true)?;
    let rtp = tokio::net::UdpSocket::from_std(rtp)?;
    let rtcp = tokio::net::UdpSocket::from_std(rtcp)?;
    Ok(async move {
        let mut buf = vec![0u8; 65_536];
        let mut control = vec![0u8; 2048];
        let mut strangers = 0u64;
        let mut stopping = false;
        loop {
            tokio::select! {
                r = stop.changed(), if !stopping => {
                    // Dropped (the feed ended), not changed.
                    stopping = r.is_err();
                }
                got = tokio::time::timeout(LINGER, rtp.recv_from(&mut buf)) => {
                    let got = match got {
                        Ok(got) => got,
                        Err(_) if stopping => return,
                        Err(_) => continue,
                    };
                    let Ok((n, src)) = got else { continue };
                    if src.ip() != from {
                        strangers += 1;
                        if strangers.is_power_of_two() {
                            warn!(%src, publisher = %from, strangers,
                                "datagrams to a published track from another address; dropped");
                        }
                        continue;
                    }
                    let packet = FeedPacket {
                        at: tokio::time::Instant::now(),
                        track,
                        packet: buf[..n].to_vec(),
                    };
                    if queue.send(packet).await.is_err() {
                        return;
                    }
                }
                _ = rtcp.recv_from(&mut control) => {}
            }
        }
    })
}

/// The announced tracks `only` names (all of them with `None`), as the object's tracks
/// (numbered in that order) and the payload type each one's packets carry.
fn tracks(core: &Publish, only: Option<&[usize]>) -> Result<(Vec<NativeTrack>, Vec<u8>), Refusal> {
    let media = &core.presentation().media;
    let all: Vec<usize> = (0..media.len()).collect();
    let only = only.unwrap_or(&all);
    if only.is_empty() {
        return Err(Refusal::BadRequest(format!(
            "the description of {} has no track",
            core.name()
        )));
    }
    let mut tracks = Vec::with_capacity(only.len());
    let mut payload_types = Vec::with_capacity(only.len());
    for (k, &i) in only.iter().enumerate() {
        let m = &media[i];
        let a = Announced {
            encoding: &m.encoding,
            clock_rate: m.clock_rate,
            channels: m.channels,
            fmtp: &m.fmtp,
        };
        let track = announced_track(k, &a)
            .map_err(|e| Refusal::UnsupportedMedia(format!("ANNOUNCE of {}: {e}", core.name())))?;
        tracks.push(track);
        payload_types.push(m.payload_type);
    }
    Ok((tracks, payload_types))
}
