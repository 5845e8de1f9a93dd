//! An RTSP/RTP client: one session, over UDP or interleaved TCP.
//!
//! Used by the integration tests as an independent oracle (contiguous sequence numbers, RTP-Info
//! matching the first packet (RFC 2326 §12.33), SR and BYE present (RFC 3550 §6.4.1, §6.6),
//! payloads of whole TS packets (RFC 2250 §2)), and by `isochron bench` as the emulation client. It
//! speaks to any RTSP server, not just isochron.
//!
//! Responses and interleaved frames share the TCP connection: a reader task demultiplexes them
//! with the same codec the server uses (`isochron_rtsp::codec`), sending responses to the request
//! in progress and packets to the [`Incoming`] queue. UDP packets are received by a task per
//! socket. Every packet is stamped with its arrival time on receipt.
//!
//! `isochron bench` cannot afford a queued, copied packet per arrival: [`Client::setup_sink`]
//! hands the session's packets to a [`MediaSink`] in place instead, from the receive path
//! itself: for UDP a task per session taking batches with `recvmmsg` ([`crate::recv`]), for TCP
//! the connection's reader, which then parses `$` frames without copying them. The sink is also
//! ticked every [`SINK_TICK`] so it can notice that data it expects has not come.
//!
//! A presentation of native tracks (from MP4 or Matroska: one RTP stream per track, each with
//! its own `m=` line and control URL) is set up as a standard player does it
//! ([`Client::setup_sink_tracks`]): one SETUP per track into one session (RFC 2326 §10.4,
//! aggregate control), over UDP a local RTP/RTCP port pair per track, over TCP the channels
//! 2k/2k+1 for track k on the session's connection; the sink hears every packet with its
//! track's index, and each track's RTCP receiver reports go to the server under its own SSRC.
//!
//! Every RTP packet comes with its source address: in a cluster each node sends its own blocks
//! from its own address under the session's one SSRC (Yima §2.2), so a session has several
//! sources over UDP; over TCP the source is the RTSP server.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail, ensure};
use isochron_rtp::RtpHeader;
use isochron_rtp::rtcp::{RtcpPacket, parse_compound};
use isochron_rtsp::codec::{self, Decoded, Frame, Limits};
use isochron_rtsp::rtsp_types::Response;
use tokio::io::{AsyncReadExt, AsyncWriteExt, Interest};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::reception::Reception;
use isochron_rtsp::sdp::parse::Presentation;

/// How often a [`MediaSink`] is ticked when no packet arrives.
pub const SINK_TICK: Duration = Duration::from_millis(20);

/// Where a session's packets go when received in place (see the module docs). Called from one
/// task only, in arrival order.
pub trait MediaSink: Send + 'static {
    /// An RTP packet (header included) of track `track` (its index among the tracks set up; 0
    /// for an MP2T session) arrived at `at` from `from` (over TCP, the RTSP server's address;
    /// over UDP, the sender's, which in a cluster is the node that sent it).
    fn on_rtp(&mut self, at: Instant, from: SocketAddr, track: usize, packet: &[u8]);
    /// An RTCP compound packet of track `track` arrived at `at`.
    fn on_rtcp(&mut self, at: Instant, track: usize, packet: &[u8]);
    /// Time passed (every [`SINK_TICK`]).
    fn on_tick(&mut self, at: Instant);
}

/// The lower transport to set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// RTP/AVP over UDP unicast.
    Udp,
    /// RTP/AVP/TCP interleaved on the RTSP connection.
    Tcp,
}

impl Transport {
    /// `udp` or `tcp`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Udp => "udp",
            Self::Tcp => "tcp",
        }
    }
}

impl std::str::FromStr for Transport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "udp" => Ok(Self::Udp),
            "tcp" => Ok(Self::Tcp),
            _ => Err(format!("{s:?}: expected udp or tcp")),
        }
    }
}

/// One received RTP packet.
#[derive(Clone, Debug)]
pub struct RtpPacket {
    /// Arrival time: the kernel's receive time over UDP, the read time over TCP.
    pub at: Instant,
    /// Where it came from: the sender's address over UDP (in a cluster, the node that sent
    /// it), the RTSP server's over interleaved TCP.
    pub from: SocketAddr,
    /// The header.
    pub header: RtpHeader,
    /// The sending node's local sequence number, if the packet carries the LSN header
    /// extension (`isochron_rtp::lsn`).
    pub lsn: Option<u16>,
    /// The sequence number of the last packet of its block, if the extension carries it
    /// (`isochron_rtp::block_end`).
    pub block_end: Option<u16>,
    /// The payload.
    pub payload: Vec<u8>,
}

/// Something that arrived from the server outside request/response.
#[derive(Clone, Debug)]
pub enum Incoming {
    /// An RTP packet.
    Rtp(RtpPacket),
    /// An RTCP compound packet; `bye` if it carries a BYE.
    Rtcp {
        /// Arrival time.
        at: Instant,
        /// Whether it had a BYE.
        bye: bool,
        /// The BYE's reason for leaving, when it gave one (RFC 3550 §6.6).
        bye_reason: Option<String>,
        /// Whether it had a sender report.
        sr: bool,
    },
}

/// What a PLAY response said.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PlayInfo {
    /// `seq` from RTP-Info's first entry.
    pub seq: Option<u16>,
    /// `rtptime` from RTP-Info's first entry.
    pub rtptime: Option<u32>,
    /// The `Range` header.
    pub range: Option<String>,
    /// The `url` of RTP-Info's first entry.
    pub url: Option<String>,
    /// Every RTP-Info entry, in order (one per track set up, RFC 2326 §12.33).
    pub entries: Vec<RtpInfoEntry>,
}

/// One entry of an `RTP-Info` header (RFC 2326 §12.33).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RtpInfoEntry {
    /// The track's URL, as the client sent it in SETUP.
    pub url: Option<String>,
    /// The sequence number of the track's first packet.
    pub seq: Option<u16>,
    /// That packet's RTP timestamp.
    pub rtptime: Option<u32>,
}

impl PlayInfo {
    /// The entry of the track set up on `url` (the `i`-th track set up): the entry naming
    /// that URL, else the `i`-th entry.
    #[must_use]
    pub fn entry_for(&self, url: &str, i: usize) -> Option<&RtpInfoEntry> {
        self.entries.iter().find(|e| e.url.as_deref() == Some(url)).or_else(|| self.entries.get(i))
    }
}

/// An RTSP client session.
#[derive(Debug)]
pub struct Client {
    url: String,
    writer: OwnedWriteHalf,
    responses: mpsc::UnboundedReceiver<Response<Vec<u8>>>,
    incoming_tx: mpsc::UnboundedSender<Incoming>,
    incoming: mpsc::UnboundedReceiver<Incoming>,
    cseq: u32,
    session: Option<String>,
    base: Option<String>,
    control: String,
    tasks: Vec<JoinHandle<()>>,
    peer: SocketAddr,
    timeout: Duration,
    rtcp_socket: Option<std::sync::Arc<UdpSocket>>,
    send_rtcp: bool,
    sink_tx: mpsc::UnboundedSender<Box<dyn MediaSink>>,
}

impl Drop for Client {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl Client {
    /// Sends an RTCP packet from the session's RTCP socket to `to` (a UDP session, after
    /// SETUP; an error otherwise).
    pub async fn send_rtcp_to(&self, to: SocketAddr, packet: &[u8]) -> std::io::Result<()> {
        let Some(sock) = &self.rtcp_socket else {
            return Err(std::io::Error::other("no UDP session: nothing to send RTCP from"));
        };
        sock.send_to(packet, to).await.map(|_| ())
    }

    /// Asks the node that sends RTP from `node` for packets `seqs` of the stream `media_ssrc`
    /// again: an RTCP generic NACK (RFC 4585 §6.2.1) to the node's RTCP port, the one after its
    /// RTP port.
    pub async fn send_nack(
        &self,
        node: SocketAddr,
        media_ssrc: u32,
        seqs: &[u16],
    ) -> std::io::Result<()> {
        let mut pkt = Vec::with_capacity(16 + 4 * seqs.len().min(255));
        isochron_rtp::rtcp::write_nack(&mut pkt, own_ssrc(media_ssrc), media_ssrc, seqs);
        let to = SocketAddr::new(node.ip(), node.port().wrapping_add(1));
        self.send_rtcp_to(to, &pkt).await
    }

    /// Asks the server to pace the session at `pace` (MTFC, Yima §2.5: RTSP `SET_PARAMETER` with
    /// `x-isochron-rate`), saying how full the player's buffer is (`x-isochron-buffer`) if
    /// `buffer`; `Ok(false)` if the server refused it.
    pub async fn set_rate(
        &mut self,
        pace: isochron_base::Pace,
        buffer: Option<isochron_rtsp::server::BufferLevel>,
    ) -> anyhow::Result<bool> {
        use isochron_rtsp::server::{BUFFER_PARAMETER, RATE_PARAMETER};
        let url = self.aggregate_url();
        let mut body = format!("{RATE_PARAMETER}: {pace}\r\n");
        if let Some(b) = buffer {
            let (level, depth) = (b.level.as_secs_f64(), b.depth.as_secs_f64());
            body += &format!("{BUFFER_PARAMETER}: {level:.3}/{depth:.3}\r\n");
        }
        let r = self
            .request_with_body("SET_PARAMETER", &url, &[("Content-Type", "text/parameters")], &body)
            .await
            .context("SET_PARAMETER")?;
        Ok(u16::from(r.status()) == 200)
    }

    /// Asks the server to pace the session by bytes at its object's mean rate rather than by
    /// its packets' own times (`x-isochron-pacing: rate` with the nominal pace,
    /// `docs/design/mtfc.md`); `Ok(true)` if the answer says rate pacing is in force.
    pub async fn ask_rate_pacing(&mut self) -> anyhow::Result<bool> {
        use isochron_rtsp::server::{PACING_PARAMETER, RATE_PARAMETER};
        let url = self.aggregate_url();
        let body = format!("{RATE_PARAMETER}: 1\r\n{PACING_PARAMETER}: rate\r\n");
        let r = self
            .request_with_body("SET_PARAMETER", &url, &[("Content-Type", "text/parameters")], &body)
            .await
            .context("SET_PARAMETER")?;
        let text = String::from_utf8_lossy(r.body());
        let rate = text.lines().filter_map(|l| l.split_once(':')).any(|(k, v)| {
            k.trim().eq_ignore_ascii_case(PACING_PARAMETER) && v.trim().eq_ignore_ascii_case("rate")
        });
        Ok(u16::from(r.status()) == 200 && rate)
    }

    /// Connects to the server of `url` (`rtsp://host:port/path`).
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        let rest =
            url.strip_prefix("rtsp://").ok_or_else(|| anyhow!("not an rtsp:// URL: {url}"))?;
        let hostport = rest.split('/').next().unwrap_or(rest);
        let stream = TcpStream::connect(hostport)
            .await
            .with_context(|| format!("connecting to {hostport}"))?;
        stream.set_nodelay(true)?;
        let peer = stream.peer_addr()?;
        let (mut rd, writer) = stream.into_split();
        let (resp_tx, responses) = mpsc::unbounded_channel();
        let (incoming_tx, incoming) = mpsc::unbounded_channel();
        let data_tx = incoming_tx.clone();
        let (sink_tx, mut sink_rx) = mpsc::unbounded_channel::<Box<dyn MediaSink>>();
        let reader = tokio::spawn(async move {
            let mut buf = Vec::with_capacity(64 * 1024);
            let mut chunk = vec![0u8; 64 * 1024];
            let limits = Limits { max_message_bytes: 1 << 20 };
            let mut sink: Option<Box<dyn MediaSink>> = None;
            let mut tick = tokio::time::interval(SINK_TICK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                // Frames are taken from `buf[start..]`; the used prefix goes once per read.
                let mut start = 0;
                loop {
                    let avail = &buf[start..];
                    if let (Some(sink), Some(b'$')) = (sink.as_mut(), avail.first()) {
                        // Interleaved data for the sink, handled in place (RFC 2326 §10.12).
                        if avail.len() < 4 {
                            break;
                        }
                        let len = usize::from(u16::from_be_bytes([avail[2], avail[3]]));
                        if avail.len() < 4 + len {
                            break;
                        }
                        // Track k is on channels 2k (RTP) and 2k + 1 (RTCP).
                        let (at, track) = (Instant::now(), usize::from(avail[1] / 2));
                        if avail[1] % 2 == 0 {
                            sink.on_rtp(at, peer, track, &avail[4..4 + len]);
                        } else {
                            sink.on_rtcp(at, track, &avail[4..4 + len]);
                        }
                        start += 4 + len;
                        continue;
                    }
                    match codec::decode(avail, &limits) {
                        Decoded::Frame(f, used) => {
                            start += used;
                            let at = Instant::now();
                            match f {
                                Frame::Response(r) => {
                                    let _ = resp_tx.send(r);
                                }
                                Frame::Data { channel, payload } => {
                                    let _ = data_tx.send(if channel % 2 == 0 {
                                        match rtp(at, peer, &payload) {
                                            Some(p) => p,
                                            None => continue,
                                        }
                                    } else {
                                        rtcp(at, &payload)
                                    });
                                }
                                Frame::Request(_) => {}
                            }
                        }
                        Decoded::Incomplete => break,
                        Decoded::Invalid(_) => return,
                    }
                }
                buf.drain(..start);
                tokio::select! {
                    biased;
                    installed = sink_rx.recv() => {
                        if let Some(s) = installed {
                            sink = Some(s);
                        }
                    }
                    r = rd.read(&mut chunk) => match r {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    },
                    _ = tick.tick(), if sink.is_some() => {
                        if let Some(s) = sink.as_mut() {
                            s.on_tick(Instant::now());
                        }
                    }
                }
            }
        });
        Ok(Self {
            url: url.to_string(),
            writer,
            responses,
            incoming_tx,
            incoming,
            cseq: 0,
            session: None,
            base: None,
            control: "trackID=0".into(),
            tasks: vec![reader],
            peer,
            timeout: Duration::from_secs(10),
            rtcp_socket: None,
            send_rtcp: true,
            sink_tx,
        })
    }

    /// Stops this client from sending RTCP receiver reports on UDP sessions set up after this
    /// call (a silent client, for testing session reaping).
    pub fn without_rtcp(&mut self) {
        self.send_rtcp = false;
    }

    /// The session id, once set up.
    #[must_use]
    pub fn session(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Sends a request and waits for its response. `extra` is raw header lines.
    pub async fn request(
        &mut self,
        method: &str,
        uri: &str,
        extra: &[(&str, &str)],
    ) -> anyhow::Result<Response<Vec<u8>>> {
        self.request_with_body(method, uri, extra, "").await
    }

    /// Sends a request with a body (`Content-Length` is added) and waits for its response.
    pub async fn request_with_body(
        &mut self,
        method: &str,
        uri: &str,
        extra: &[(&str, &str)],
        body: &str,
    ) -> anyhow::Result<Response<Vec<u8>>> {
        self.cseq += 1;
        let mut req = format!(
            "{method} {uri} RTSP/1.0\r\nCSeq: {}\r\nUser-Agent: isochron-loadgen\r\n",
            self.cseq
        );
        if let Some(s) = &self.session {
            req.push_str(&format!("Session: {s}\r\n"));
        }
        for (k, v) in extra {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if !body.is_empty() {
            req.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        req.push_str("\r\n");
        req.push_str(body);
        self.writer.write_all(req.as_bytes()).await?;
        let resp = tokio::time::timeout(self.timeout, self.responses.recv())
            .await
            .map_err(|_| anyhow!("{method}: no response within {:?}", self.timeout))?
            .ok_or_else(|| anyhow!("{method}: connection closed"))?;
        Ok(resp)
    }

    /// DESCRIBE of an MP2T presentation; returns the SDP and remembers Content-Base and the
    /// track control. A presentation of native tracks is refused by name: the session paths of
    /// this client other than [`Self::setup_sink_tracks`] play MP2T only.
    pub async fn describe(&mut self) -> anyhow::Result<String> {
        let p = self.describe_presentation().await?;
        // This client's collecting and player paths take MP2T (RFC 2250): an object served as
        // native RTP streams (one per track, from MP4 or Matroska) is for other players.
        ensure!(
            p.is_mp2t(),
            "{} is served as native RTP ({}), not MP2T: this client plays MPEG-TS objects \
             only; use ffplay, gst-play-1.0 or retina, or its HLS",
            self.url,
            p.encodings()
        );
        Ok(p.sdp)
    }

    /// DESCRIBE; returns the parsed description (MP2T or native tracks) and remembers
    /// Content-Base and the first track's control.
    pub async fn describe_presentation(&mut self) -> anyhow::Result<Presentation> {
        let url = self.url.clone();
        let r = self.request("DESCRIBE", &url, &[("Accept", "application/sdp")]).await?;
        ensure!(u16::from(r.status()) == 200, "DESCRIBE: {}", status_line(&r));
        self.base = header(&r, "Content-Base");
        let sdp = String::from_utf8_lossy(r.body()).into_owned();
        let p = Presentation::parse(&sdp).with_context(|| format!("DESCRIBE {url}"))?;
        if let Some(c) = p.media.first().and_then(|m| m.control.clone()) {
            self.control = c;
        }
        Ok(p)
    }

    /// The track URL SETUP uses: Content-Base (or the URL) + control.
    #[must_use]
    pub fn track_url(&self) -> String {
        self.control_url(&self.control)
    }

    /// The URL of a media section with `a=control:control`: the control itself if absolute,
    /// else Content-Base (or the URL) + control (RFC 2326 §C.1.1).
    #[must_use]
    pub fn control_url(&self, control: &str) -> String {
        if control.starts_with("rtsp://") || control.starts_with("rtsps://") {
            return control.to_string();
        }
        let mut base = self.base.clone().unwrap_or_else(|| self.url.clone());
        if !base.ends_with('/') {
            base.push('/');
        }
        base + control
    }

    /// The aggregate URL PLAY/PAUSE/TEARDOWN use.
    #[must_use]
    pub fn aggregate_url(&self) -> String {
        self.base.clone().unwrap_or_else(|| self.url.clone())
    }

    /// SETUP with the given transport (UDP binds a local port pair first).
    pub async fn setup(&mut self, transport: Transport) -> anyhow::Result<Response<Vec<u8>>> {
        let mut received = None;
        let spec = match transport {
            Transport::Tcp => "RTP/AVP/TCP;unicast;interleaved=0-1".to_string(),
            Transport::Udp => {
                let local = match self.peer.ip() {
                    IpAddr::V4(_) => IpAddr::from([0u8, 0, 0, 0]),
                    IpAddr::V6(_) => IpAddr::from([0u16; 8]),
                };
                let (rtp_sock, rtcp_sock) = udp_pair(local).await?;
                let port = rtp_sock.local_addr()?.port();
                let (a, b) = (self.incoming_tx.clone(), self.incoming_tx.clone());
                let rtcp_sock = std::sync::Arc::new(rtcp_sock);
                self.rtcp_socket = Some(std::sync::Arc::clone(&rtcp_sock));
                let reception = std::sync::Arc::new(Reception::default());
                received = Some(std::sync::Arc::clone(&reception));
                let r = std::sync::Arc::clone(&reception);
                self.tasks.push(tokio::spawn(rtp_recv_loop(rtp_sock, a, r)));
                self.tasks.push(tokio::spawn(recv_loop_shared(rtcp_sock, b, reception)));
                format!("RTP/AVP;unicast;client_port={}-{}", port, port + 1)
            }
        };
        let url = self.track_url();
        let rtcp = self.rtcp_socket.clone().zip(received);
        self.finish_setup(&url, transport, &spec, rtcp).await
    }

    /// Sends the SETUP of `url` and, for UDP, starts the receiver reports from `rtcp`.
    async fn finish_setup(
        &mut self,
        url: &str,
        transport: Transport,
        spec: &str,
        rtcp: Option<(std::sync::Arc<UdpSocket>, std::sync::Arc<Reception>)>,
    ) -> anyhow::Result<Response<Vec<u8>>> {
        let r = self.request("SETUP", url, &[("Transport", spec)]).await?;
        if u16::from(r.status()) == 200 {
            let s = header(&r, "Session").ok_or_else(|| anyhow!("SETUP: no Session header"))?;
            self.session = Some(s.split(';').next().unwrap_or(&s).trim().to_string());
            let reply = header(&r, "Transport").unwrap_or_default();
            let udp = transport == Transport::Udp;
            if let (true, Some((sock, reception)), Some(ports)) =
                (self.send_rtcp && udp, rtcp, transport_param(&reply, "server_port"))
            {
                // RTCP goes to the server's second port (RFC 2326 §12.39).
                let rtcp_port = match ports.split_once('-') {
                    Some((_, b)) => b.parse().ok(),
                    None => ports.parse::<u16>().ok().map(|p| p + 1),
                };
                let ssrc =
                    transport_param(&reply, "ssrc").and_then(|v| u32::from_str_radix(v, 16).ok());
                if let Some(rtcp_port) = rtcp_port {
                    let to = SocketAddr::new(self.peer.ip(), rtcp_port);
                    self.tasks.push(tokio::spawn(send_receiver_reports(
                        sock,
                        to,
                        ssrc.unwrap_or(0),
                        reception,
                    )));
                }
            }
        }
        Ok(r)
    }

    /// SETUP like [`Self::setup`], but the session's RTP and RTCP go to `sink`, in place, from the
    /// receive path (see the module docs); [`Self::next`] then sees nothing of this session.
    pub async fn setup_sink(
        &mut self,
        transport: Transport,
        sink: Box<dyn MediaSink>,
    ) -> anyhow::Result<Response<Vec<u8>>> {
        let url = self.track_url();
        self.setup_sink_tracks(transport, sink, &[url]).await
    }

    /// SETUP of every track in `urls` (in order, track k = `urls[k]`) into one session, as a
    /// player of a native presentation does: over UDP a local RTP/RTCP port pair per track,
    /// over TCP channels 2k/2k+1; the packets of all tracks go to `sink` with their track's
    /// index, and each track sends its own receiver reports. Returns the first response that
    /// is not 200, else the last one.
    pub async fn setup_sink_tracks(
        &mut self,
        transport: Transport,
        sink: Box<dyn MediaSink>,
        urls: &[String],
    ) -> anyhow::Result<Response<Vec<u8>>> {
        ensure!(!urls.is_empty(), "SETUP: no track to set up");
        ensure!(urls.len() <= 127, "SETUP: {} tracks: at most 127 fit the channels", urls.len());
        let mut sink = Some(sink);
        let mut sockets = Vec::with_capacity(urls.len());
        let mut last = None;
        for (k, url) in urls.iter().enumerate() {
            let (spec, rtcp) = match transport {
                Transport::Tcp => {
                    if let Some(s) = sink.take() {
                        self.sink_tx.send(s).map_err(|_| anyhow!("SETUP: connection closed"))?;
                    }
                    (format!("RTP/AVP/TCP;unicast;interleaved={}-{}", 2 * k, 2 * k + 1), None)
                }
                Transport::Udp => {
                    let local = match self.peer.ip() {
                        IpAddr::V4(_) => IpAddr::from([0u8, 0, 0, 0]),
                        IpAddr::V6(_) => IpAddr::from([0u16; 8]),
                    };
                    let (rtp_sock, rtcp_sock) = udp_pair(local).await?;
                    let port = rtp_sock.local_addr()?.port();
                    let rtcp_sock = std::sync::Arc::new(rtcp_sock);
                    if k == 0 {
                        self.rtcp_socket = Some(std::sync::Arc::clone(&rtcp_sock));
                    }
                    let reception = std::sync::Arc::new(Reception::default());
                    let r = std::sync::Arc::clone(&reception);
                    sockets.push((rtp_sock, std::sync::Arc::clone(&rtcp_sock), r));
                    let spec = format!("RTP/AVP;unicast;client_port={}-{}", port, port + 1);
                    (spec, Some((rtcp_sock, reception)))
                }
            };
            let r = self.finish_setup(url, transport, &spec, rtcp).await?;
            if u16::from(r.status()) != 200 {
                return Ok(r);
            }
            last = Some(r);
        }
        if let Some(s) = sink.take() {
            self.tasks.push(tokio::spawn(udp_sink_loop(sockets, s)));
        }
        last.ok_or_else(|| anyhow!("SETUP: no track to set up"))
    }

    /// PLAY, optionally with a `Range` value such as `npt=5-`.
    pub async fn play(&mut self, range: Option<&str>) -> anyhow::Result<PlayInfo> {
        let url = self.aggregate_url();
        let extra: Vec<(&str, &str)> = range.map(|r| ("Range", r)).into_iter().collect();
        let r = self.request("PLAY", &url, &extra).await?;
        ensure!(u16::from(r.status()) == 200, "PLAY: {}", status_line(&r));
        let mut info = PlayInfo { range: header(&r, "Range"), ..PlayInfo::default() };
        if let Some(ri) = header(&r, "RTP-Info") {
            info.entries = parse_rtp_info(&ri);
            if let Some(first) = info.entries.first() {
                info.seq = first.seq;
                info.rtptime = first.rtptime;
                info.url.clone_from(&first.url);
            }
        }
        Ok(info)
    }

    /// PAUSE.
    pub async fn pause(&mut self) -> anyhow::Result<()> {
        let url = self.aggregate_url();
        let r = self.request("PAUSE", &url, &[]).await?;
        ensure!(u16::from(r.status()) == 200, "PAUSE: {}", status_line(&r));
        Ok(())
    }

    /// TEARDOWN.
    pub async fn teardown(&mut self) -> anyhow::Result<()> {
        let url = self.aggregate_url();
        let r = self.request("TEARDOWN", &url, &[]).await?;
        ensure!(u16::from(r.status()) == 200, "TEARDOWN: {}", status_line(&r));
        self.session = None;
        Ok(())
    }

    /// The next packet, or `None` after `timeout` without one.
    pub async fn next(&mut self, timeout: Duration) -> Option<Incoming> {
        tokio::time::timeout(timeout, self.incoming.recv()).await.ok().flatten()
    }

    /// Receives until an RTCP BYE (or `idle` without any packet, or `limit` overall); returns the
    /// RTP packets in arrival order and whether a BYE and an SR were seen.
    pub async fn collect(&mut self, idle: Duration, limit: Duration) -> anyhow::Result<Collected> {
        let deadline = tokio::time::Instant::now() + limit;
        let mut c = Collected::default();
        loop {
            let wait = idle.min(deadline.saturating_duration_since(tokio::time::Instant::now()));
            match self.next(wait).await {
                Some(Incoming::Rtp(p)) => c.packets.push(p),
                Some(Incoming::Rtcp { bye, sr, .. }) => {
                    c.sr |= sr;
                    if bye {
                        // Over UDP, RTP and RTCP come through different sockets: packets sent
                        // just before the BYE may still be on their way through the RTP one.
                        c.bye = true;
                        while let Some(i) = self.next(Duration::from_millis(200)).await {
                            if let Incoming::Rtp(p) = i {
                                c.packets.push(p);
                            }
                        }
                        return Ok(c);
                    }
                }
                None => {
                    if tokio::time::Instant::now() >= deadline {
                        bail!("no BYE within {limit:?} ({} packets)", c.packets.len());
                    }
                    return Ok(c);
                }
            }
        }
    }
}

/// What [`Client::collect`] received.
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// RTP packets in arrival order.
    pub packets: Vec<RtpPacket>,
    /// Whether an RTCP BYE arrived.
    pub bye: bool,
    /// Whether an RTCP SR arrived.
    pub sr: bool,
}

impl Collected {
    /// The payloads concatenated (for MP2T: the transport stream).
    #[must_use]
    pub fn payload(&self) -> Vec<u8> {
        self.packets.iter().flat_map(|p| p.payload.iter().copied()).collect()
    }

    /// Checks that sequence numbers are contiguous; returns the first gap.
    pub fn check_contiguous(&self) -> Result<(), String> {
        for w in self.packets.windows(2) {
            let (a, b) = (w[0].header.sequence, w[1].header.sequence);
            if b != a.wrapping_add(1) {
                return Err(format!("sequence jumps from {a} to {b}"));
            }
        }
        Ok(())
    }
}

/// A response's status code and reason phrase (`453 Not Enough Bandwidth`), and its body when it
/// is short text (some servers explain a refusal there).
#[must_use]
pub fn status_line(r: &Response<Vec<u8>>) -> String {
    let mut line = format!("{} {}", u16::from(r.status()), r.reason_phrase());
    let body = String::from_utf8_lossy(r.body());
    let body = body.trim();
    if !body.is_empty() && body.len() <= 200 && !body.contains('\n') {
        line.push_str(": ");
        line.push_str(body);
    }
    line
}

/// The entries of an `RTP-Info` value (RFC 2326 §12.33): `url=…;seq=…;rtptime=…` joined by
/// commas. A URL may itself hold a comma only percent-encoded, so commas separate entries.
#[must_use]
pub fn parse_rtp_info(value: &str) -> Vec<RtpInfoEntry> {
    value
        .split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let mut entry = RtpInfoEntry::default();
            for part in e.split(';') {
                let part = part.trim();
                if let Some(v) = part.strip_prefix("seq=") {
                    entry.seq = v.parse().ok();
                } else if let Some(v) = part.strip_prefix("rtptime=") {
                    entry.rtptime = v.parse().ok();
                } else if let Some(v) = part.strip_prefix("url=") {
                    entry.url = Some(v.to_string());
                }
            }
            entry
        })
        .collect()
}

fn header(r: &Response<Vec<u8>>, name: &str) -> Option<String> {
    let name = isochron_rtsp::rtsp_types::HeaderName::try_from(name).ok()?;
    r.header(&name).map(|v| v.as_str().to_string())
}

fn rtp(at: Instant, from: SocketAddr, pkt: &[u8]) -> Option<Incoming> {
    let (header, range) = RtpHeader::parse(pkt).ok()?;
    let lsn = isochron_rtp::lsn(pkt);
    let block_end = isochron_rtp::block_end(pkt);
    Some(Incoming::Rtp(RtpPacket {
        at,
        from,
        header,
        lsn,
        block_end,
        payload: pkt[range].to_vec(),
    }))
}

fn rtcp(at: Instant, pkt: &[u8]) -> Incoming {
    let (mut bye, mut bye_reason, mut sr) = (false, None, false);
    for p in parse_compound(pkt).flatten() {
        match p {
            RtcpPacket::Bye { reason, .. } => {
                bye = true;
                bye_reason = reason.map(str::to_owned);
            }
            RtcpPacket::SenderReport { .. } => sr = true,
            _ => {}
        }
    }
    Incoming::Rtcp { at, bye, bye_reason, sr }
}

/// What a UDP sink loop woke up for.
enum UdpReady {
    /// Track k's RTP socket is readable.
    Rtp(usize),
    /// Track k's RTCP socket is readable.
    Rtcp(usize),
    /// The sink's tick.
    Tick,
}

/// A UDP session's receive path in sink mode, for its tracks' socket pairs (track k =
/// `tracks[k]`): RTP in `recvmmsg` batches (each datagram dated by the kernel), RTCP one
/// datagram at a time, and the sink's tick. One task for all the tracks, so the sink has one
/// owner.
async fn udp_sink_loop(
    tracks: Vec<(UdpSocket, std::sync::Arc<UdpSocket>, std::sync::Arc<Reception>)>,
    mut sink: Box<dyn MediaSink>,
) {
    use std::os::fd::AsRawFd as _;
    use std::task::Poll;
    let Some(unknown) = tracks.first().map(|(rtp, ..)| unspecified(rtp)) else { return };
    let mut batch = crate::recv::RecvBatch::new();
    let mut rtcp_buf = vec![0u8; 2048];
    let mut tick = tokio::time::interval(SINK_TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let ready = std::future::poll_fn(|cx| {
            if tick.poll_tick(cx).is_ready() {
                return Poll::Ready(Ok(UdpReady::Tick));
            }
            for (k, (rtp, rtcp, _)) in tracks.iter().enumerate() {
                if let Poll::Ready(r) = rtp.poll_recv_ready(cx) {
                    return Poll::Ready(r.map(|()| UdpReady::Rtp(k)));
                }
                if let Poll::Ready(r) = rtcp.poll_recv_ready(cx) {
                    return Poll::Ready(r.map(|()| UdpReady::Rtcp(k)));
                }
            }
            Poll::Pending
        })
        .await;
        match ready {
            Err(_) => return,
            Ok(UdpReady::Tick) => sink.on_tick(Instant::now()),
            Ok(UdpReady::Rtp(k)) => {
                let rtp = &tracks[k].0;
                let fd = rtp.as_raw_fd();
                loop {
                    match rtp.try_io(Interest::READABLE, || batch.recv(fd)) {
                        Ok(n) => {
                            for i in 0..n {
                                let from = batch.source(i).unwrap_or(unknown);
                                tracks[k].2.on_rtp_packet(batch.packet(i));
                                sink.on_rtp(batch.arrival(i), from, k, batch.packet(i));
                            }
                        }
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(_) => return,
                    }
                }
            }
            Ok(UdpReady::Rtcp(k)) => loop {
                match tracks[k].1.try_recv(&mut rtcp_buf) {
                    Ok(n) => {
                        let at = Instant::now();
                        tracks[k].2.on_rtcp(at, &rtcp_buf[..n]);
                        sink.on_rtcp(at, k, &rtcp_buf[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(_) => return,
                }
            },
        }
    }
}

/// A UDP session's RTP receive path in collecting mode: `recvmmsg` batches, each datagram dated
/// by the kernel so that pacing measurements do not include this process's scheduling delay.
async fn rtp_recv_loop(
    sock: UdpSocket,
    tx: mpsc::UnboundedSender<Incoming>,
    reception: std::sync::Arc<Reception>,
) {
    use std::os::fd::AsRawFd as _;
    let fd = sock.as_raw_fd();
    let mut batch = crate::recv::RecvBatch::new();
    let unknown = unspecified(&sock);
    loop {
        if sock.readable().await.is_err() {
            return;
        }
        loop {
            match sock.try_io(Interest::READABLE, || batch.recv(fd)) {
                Ok(n) => {
                    for i in 0..n {
                        let from = batch.source(i).unwrap_or(unknown);
                        reception.on_rtp_packet(batch.packet(i));
                        if let Some(item) = rtp(batch.arrival(i), from, batch.packet(i))
                            && tx.send(item).is_err()
                        {
                            return;
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return,
            }
        }
    }
}

/// The address reported for a datagram whose source is not IPv4 or IPv6 (never on these
/// sockets): the unspecified address of the socket's family.
fn unspecified(sock: &UdpSocket) -> SocketAddr {
    match sock.local_addr() {
        Ok(SocketAddr::V6(_)) => SocketAddr::from(([0u16; 8], 0)),
        _ => SocketAddr::from(([0u8; 4], 0)),
    }
}

async fn recv_loop_shared(
    sock: std::sync::Arc<UdpSocket>,
    tx: mpsc::UnboundedSender<Incoming>,
    reception: std::sync::Arc<Reception>,
) {
    let mut buf = vec![0u8; 65_536];
    loop {
        let Ok(n) = sock.recv(&mut buf).await else { return };
        let at = Instant::now();
        reception.on_rtcp(at, &buf[..n]);
        if tx.send(rtcp(at, &buf[..n])).is_err() {
            return;
        }
    }
}

/// Sends an RTCP receiver report on `media_ssrc` every 2 s, as players do (ffmpeg every ~2 s,
/// GStreamer every ~5 s): it keeps a UDP session alive on the server (RFC 2326 §12.37; RFC 7826
/// §10.5 counts RTCP as a sign of life), and says what the path did ([`Reception`]: the
/// fraction lost, the last sender report echoed), which a server adapting the session's rate
/// reads.
async fn send_receiver_reports(
    sock: std::sync::Arc<UdpSocket>,
    to: SocketAddr,
    media_ssrc: u32,
    reception: std::sync::Arc<Reception>,
) {
    let own_ssrc = own_ssrc(media_ssrc);
    let mut tick = tokio::time::interval(Duration::from_secs(2));
    loop {
        tick.tick().await;
        let block = reception.report(media_ssrc, Instant::now());
        let mut pkt = Vec::with_capacity(64);
        isochron_rtp::rtcp::write_receiver_report(&mut pkt, own_ssrc, &[block]);
        isochron_rtp::rtcp::write_sdes_cname(&mut pkt, own_ssrc, "isochron-loadgen");
        if sock.send_to(&pkt, to).await.is_err() {
            return;
        }
    }
}

/// The SSRC this client reports under for a stream with `media_ssrc` (RTCP RR, NACK).
#[must_use]
pub fn own_ssrc(media_ssrc: u32) -> u32 {
    0x1500_C4A5 ^ media_ssrc.rotate_left(7)
}

/// A parameter of a Transport header (`server_port=6970-6971` → `6970-6971`).
fn transport_param<'a>(transport: &'a str, name: &str) -> Option<&'a str> {
    transport.split(';').find_map(|p| p.trim().strip_prefix(name)?.strip_prefix('='))
}

/// Binds an even/odd UDP port pair with large receive buffers.
async fn udp_pair(ip: IpAddr) -> anyhow::Result<(UdpSocket, UdpSocket)> {
    for _ in 0..64 {
        let probe = std::net::UdpSocket::bind((ip, 0))?;
        let p = probe.local_addr()?.port() & !1;
        drop(probe);
        if p == 0 || p == u16::MAX - 1 {
            continue;
        }
        let (Ok(a), Ok(b)) = (bind_udp(ip, p), bind_udp(ip, p + 1)) else { continue };
        return Ok((a, b));
    }
    bail!("no free UDP port pair")
}

fn bind_udp(ip: IpAddr, port: u16) -> std::io::Result<UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let addr = SocketAddr::new(ip, port);
    let s = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    let _ = s.set_recv_buffer_size(8 << 20);
    crate::recv::enable_timestamps(std::os::fd::AsRawFd::as_raw_fd(&s))?;
    s.bind(&addr.into())?;
    s.set_nonblocking(true)?;
    UdpSocket::from_std(s.into())
}
