//! Live latency, measured from outside: how long after the publisher sends a packet of a live
//! feed a viewer of that feed receives it.
//!
//! Why from outside: the server's own clocks say when it read a packet and when it wrote it
//! again, not what a publisher and a viewer see; a queue in its socket buffers, a blocked write or
//! a late wake-up would go unnoticed. Here both ends are observed on their sockets, on one clock
//! (`Instant`, the same process), with nothing of the server's in between.
//!
//! How: a [`Tap`] is a TCP proxy between the publisher and the server (the publisher is pointed
//! at the tap's port, so it must publish interleaved over its RTSP connection, RFC 2326 §10.12).
//! It forwards every byte as soon as it reads it and, on the way, follows the interleaved framing
//! of what the publisher sends: for each RTP frame (an even channel) it notes when it read the
//! frame's last byte, under a hash of the frame's RTP payload. The server forwards each payload
//! to its viewers byte for byte (it rewrites only the 12-byte RTP header: SSRC, sequence number,
//! timestamp), so the payload identifies the packet on the viewer's side: [`retina_live`] plays
//! the feed with retina, a strict RTSP client, takes the time each RTP packet comes out of it and
//! looks its payload's hash up among the tap's sightings. The difference is the packet's latency
//! through the server, loopback included.
//!
//! A payload the publisher sent more than once (an encoder's repeated silent audio frame, say)
//! cannot tell which of its sendings a viewer received: such packets are counted apart
//! ([`LiveReceipt::ambiguous`]), never measured.

use crate::common::read_some;

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hasher as _};
use std::io::Write as _;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The hash under which a payload is noted by the [`Tap`] and looked up by [`retina_live`]:
/// `DefaultHasher` (SipHash with fixed keys, the same in every process) over the payload's bytes.
pub(crate) fn payload_hash(payload: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    h.write(payload);
    h.finish()
}

/// The payload of an RTP packet (RFC 3550 §5.1): after the fixed 12-byte header, the CSRC list
/// and the header extension (if the X bit is set), and before the padding (if the P bit is set).
/// `None` for what is not a well-formed RTP packet. retina (`PacketHeader::validate`) delimits
/// the payload the same way.
pub(crate) fn rtp_payload(packet: &[u8]) -> Option<&[u8]> {
    let first = *packet.first()?;
    if packet.len() < 12 || first >> 6 != 2 {
        return None;
    }
    let mut start = 12 + 4 * usize::from(first & 0x0f);
    if first & 0x10 != 0 {
        let words = packet.get(start + 2..start + 4)?;
        start += 4 + 4 * usize::from(u16::from_be_bytes([words[0], words[1]]));
    }
    let mut end = packet.len();
    if first & 0x20 != 0 {
        let padding = usize::from(*packet.last()?);
        if padding == 0 {
            return None;
        }
        end = end.checked_sub(padding)?;
    }
    packet.get(start..end)
}

/// When a payload was first seen on its way to the server, and how many times it was seen.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Sighting {
    /// When the tap read the last byte of the first frame that carried it.
    pub(crate) at: Instant,
    /// How many frames carried it (more than one: the payload does not identify a packet).
    pub(crate) count: u32,
}

/// A tap's sightings by [`payload_hash`], shared with whoever looks them up.
pub(crate) type Sent = Arc<Mutex<HashMap<u64, Sighting>>>;

/// What the parser of a client's byte stream is in the middle of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Between messages.
    Idle,
    /// After a frame's `$`: `have` of its channel and two length bytes read so far.
    FrameHeader { have: usize, bytes: [u8; 3] },
    /// Inside the data of a frame on `channel`, `left` bytes to go (collected in the buffer).
    Frame { channel: u8, left: usize },
    /// Inside the header of an RTSP message (collected in the buffer up to its empty line).
    Text,
    /// Inside an RTSP message body, `left` bytes to go.
    Body { left: usize },
    /// Lost the framing (an endless header): bytes are forwarded, no longer parsed.
    Lost,
}

/// The longest RTSP message header the parser collects before it gives up on the framing.
const MAX_HEADER: usize = 64 * 1024;

/// A parser of RTSP with interleaved binary data (RFC 2326 §10.12), fed as bytes arrive, in
/// pieces of any size: `$`, a channel, a 16-bit big-endian length and that many bytes of data;
/// otherwise an RTSP message, its header up to an empty line and a body of `Content-Length`
/// bytes.
#[derive(Debug)]
struct Interleaved {
    state: State,
    buf: Vec<u8>,
}

impl Default for Interleaved {
    fn default() -> Self {
        Self { state: State::Idle, buf: Vec::new() }
    }
}

/// The `Content-Length` of an RTSP message header (0 without one).
fn content_length(header: &[u8]) -> usize {
    String::from_utf8_lossy(header)
        .split("\r\n")
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, value)| value.trim().parse().ok())
        .unwrap_or(0)
}

impl Interleaved {
    /// Takes the next bytes of the stream, calling `frame(channel, data)` for each interleaved
    /// frame they complete.
    fn feed(&mut self, mut data: &[u8], mut frame: impl FnMut(u8, &[u8])) {
        while !data.is_empty() {
            match self.state {
                State::Idle => match data[0] {
                    b'$' => {
                        self.state = State::FrameHeader { have: 0, bytes: [0; 3] };
                        data = &data[1..];
                    }
                    // Line ends between messages (some clients send a CRLF keep-alive).
                    b'\r' | b'\n' => data = &data[1..],
                    _ => self.state = State::Text,
                },
                State::FrameHeader { mut have, mut bytes } => {
                    let n = (3 - have).min(data.len());
                    bytes[have..have + n].copy_from_slice(&data[..n]);
                    have += n;
                    data = &data[n..];
                    self.state = if have < 3 {
                        State::FrameHeader { have, bytes }
                    } else {
                        let left = usize::from(u16::from_be_bytes([bytes[1], bytes[2]]));
                        State::Frame { channel: bytes[0], left }
                    };
                }
                State::Frame { channel, left } => {
                    let n = left.min(data.len());
                    self.buf.extend_from_slice(&data[..n]);
                    data = &data[n..];
                    self.state = State::Frame { channel, left: left - n };
                }
                State::Text => {
                    // The empty line may straddle the previous piece and this one.
                    let old = self.buf.len();
                    let from = old.saturating_sub(3);
                    self.buf.extend_from_slice(data);
                    match self.buf[from..].windows(4).position(|w| w == b"\r\n\r\n") {
                        Some(i) => {
                            let end = from + i + 4;
                            data = &data[end - old..];
                            let left = content_length(&self.buf[..end]);
                            self.buf.clear();
                            self.state = if left > 0 { State::Body { left } } else { State::Idle };
                        }
                        None => {
                            data = &[];
                            if self.buf.len() > MAX_HEADER {
                                self.buf = Vec::new();
                                self.state = State::Lost;
                            }
                        }
                    }
                }
                State::Body { left } => {
                    let n = left.min(data.len());
                    data = &data[n..];
                    self.state =
                        if left > n { State::Body { left: left - n } } else { State::Idle };
                }
                State::Lost => data = &[],
            }
            // A frame ends as soon as its last byte is in (a frame of no bytes at once).
            if let State::Frame { channel, left: 0 } = self.state {
                frame(channel, &self.buf);
                self.buf.clear();
                self.state = State::Idle;
            }
        }
    }

    /// Whether the parser lost the framing.
    fn lost(&self) -> bool {
        self.state == State::Lost
    }
}

/// A TCP proxy on loopback between an RTSP publisher and the server that notes when each RTP
/// payload the publisher sends interleaved passes (see the [module](self) docs).
///
/// It accepts any number of connections and relays each to `upstream` in both directions, each
/// read forwarded at once (`TCP_NODELAY` on both sides). It stops accepting when dropped;
/// connections in progress go on until either end closes.
pub(crate) struct Tap {
    addr: SocketAddr,
    sent: Sent,
    frames: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    acceptor: Option<JoinHandle<()>>,
}

impl Tap {
    /// Listens on an ephemeral port of 127.0.0.1 and relays what connects there to `upstream`.
    pub(crate) fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("tap: bind");
        let addr = listener.local_addr().expect("tap: local address");
        let sent = Sent::default();
        let frames = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let acceptor = {
            let (sent, frames, stop) = (Arc::clone(&sent), Arc::clone(&frames), Arc::clone(&stop));
            std::thread::spawn(move || {
                for client in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(client) = client else { continue };
                    let (sent, frames) = (Arc::clone(&sent), Arc::clone(&frames));
                    std::thread::spawn(move || relay(client, upstream, &sent, &frames));
                }
            })
        };
        Self { addr, sent, frames, stop, acceptor: Some(acceptor) }
    }

    /// The port publishers connect to instead of the server's.
    pub(crate) fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The sightings so far, and those to come: for [`retina_live`].
    pub(crate) fn sent(&self) -> Sent {
        Arc::clone(&self.sent)
    }

    /// When `payload` was first seen on its way to the server, if it was.
    pub(crate) fn sent_at(&self, payload: &[u8]) -> Option<Instant> {
        let sent = self.sent.lock().unwrap_or_else(PoisonError::into_inner);
        sent.get(&payload_hash(payload)).map(|s| s.at)
    }

    /// How many RTP frames (well-formed RTP packets on an even channel) passed so far.
    pub(crate) fn frames(&self) -> usize {
        self.frames.load(Ordering::SeqCst)
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wakes the acceptor, which sees the flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(acceptor) = self.acceptor.take() {
            let _ = acceptor.join();
        }
    }
}

/// Relays one connection: the server's bytes back as they come on a thread of their own, the
/// client's to the server on this one, noting its RTP frames in `sent`.
fn relay(client: TcpStream, upstream: SocketAddr, sent: &Sent, frames: &AtomicUsize) {
    let server = match TcpStream::connect(upstream) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("tap: connecting to {upstream}: {e}");
            return;
        }
    };
    for s in [&client, &server] {
        s.set_nodelay(true).expect("tap: TCP_NODELAY");
    }
    let (Ok(mut back_from), Ok(mut back_to)) = (server.try_clone(), client.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 * 1024];
        while let Ok(n @ 1..) = read_some(&mut back_from, &mut buf) {
            if back_to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = back_to.shutdown(Shutdown::Write);
    });
    let (mut from, mut to) = (client, server);
    let mut parser = Interleaved::default();
    let mut buf = vec![0; 64 * 1024];
    while let Ok(n @ 1..) = read_some(&mut from, &mut buf) {
        let at = Instant::now();
        // Forwarded before it is parsed: the tap delays nothing by looking.
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        parser.feed(&buf[..n], |channel, data| {
            let Some(payload) = rtp_payload(data).filter(|_| channel % 2 == 0) else { return };
            let hash = payload_hash(payload);
            frames.fetch_add(1, Ordering::SeqCst);
            let mut sent = sent.lock().unwrap_or_else(PoisonError::into_inner);
            sent.entry(hash).or_insert(Sighting { at, count: 0 }).count += 1;
        });
        if parser.lost() {
            eprintln!("tap: an RTSP header longer than {MAX_HEADER} bytes; no longer parsing");
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// What a viewer of a live feed received, and how late.
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveReceipt {
    /// The latency of each matched packet, in the order received: from when the tap saw its
    /// payload on the way to the server to when retina handed it over.
    pub(crate) latencies: Vec<Duration>,
    /// RTP packets received, all streams.
    pub(crate) received: usize,
    /// Of those, packets the publisher sent before the PLAY was answered: the viewer's start
    /// (from the seek point it joins at, sent at once), not measured.
    pub(crate) before_play: usize,
    /// Of those, packets the publisher sent after, whose payload the tap saw once: measured.
    pub(crate) matched: usize,
    /// Of those, packets whose payload the tap never saw (not from the publisher, or altered).
    pub(crate) unmatched: usize,
    /// Of those, packets whose payload the tap saw more than once: not measured.
    pub(crate) ambiguous: usize,
    /// Sequence numbers skipped, all streams: packets lost (or dropped by retina as out of
    /// order) between the first and the last each stream received.
    pub(crate) gaps: u64,
    /// RTP packets received by stream, in the order of the SDP's media.
    pub(crate) per_stream: Vec<usize>,
}

impl LiveReceipt {
    /// The `q` quantile (0–1) of the latencies, by nearest rank: the smallest latency at least
    /// a fraction `q` of them do not exceed. Panics without latencies.
    pub(crate) fn quantile(&self, q: f64) -> Duration {
        assert!(!self.latencies.is_empty(), "the quantile of no latencies: {self:?}");
        let mut sorted = self.latencies.clone();
        sorted.sort_unstable();
        let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1]
    }
}

/// Plays the live feed at `url` with retina over `transport` (`tcp` or `udp`) for `for_`, and
/// measures each RTP packet's latency against the tap's sightings `sent` ([`Tap::sent`]).
///
/// It takes raw RTP packets, not depacketized frames: a frame leaves retina only when its last
/// packet is in, which would add the frame's own spread to its first packets' latency. A feed
/// joined in progress has no RTP-Info `rtptime` to give, so retina is told to start each
/// stream's timeline at its first packet when it lacks one (`Permissive`).
pub(crate) async fn retina_live(
    url: &str,
    transport: &str,
    for_: Duration,
    sent: Sent,
) -> LiveReceipt {
    use futures_util::StreamExt as _;
    use retina::client::{
        InitialTimestampPolicy, PacketItem, PlayOptions, Session, SessionGroup, SessionOptions,
        SetupOptions,
    };
    let url = url::Url::parse(url).expect("a URL");
    let group = Arc::new(SessionGroup::default());
    let mut session = Session::describe(url, SessionOptions::default().session_group(group))
        .await
        .expect("retina: DESCRIBE");
    let streams = session.streams().len();
    for i in 0..streams {
        let t = transport.parse().expect("a transport: tcp or udp");
        session.setup(i, SetupOptions::default().transport(t)).await.expect("retina: SETUP");
    }
    let options = PlayOptions::default().initial_timestamp(InitialTimestampPolicy::Permissive);
    let mut playing = session.play(options).await.expect("retina: PLAY");
    // What the publisher sent before the PLAY was answered is the viewer's start (from the
    // seek point it joins at): counted apart, its latency is not the live edge's.
    let played = Instant::now();
    let mut receipt = LiveReceipt { per_stream: vec![0; streams], ..LiveReceipt::default() };
    let mut last_seq: Vec<Option<u16>> = vec![None; streams];
    let deadline = tokio::time::Instant::now() + for_;
    loop {
        let pkt = match tokio::time::timeout_at(deadline, playing.next()).await {
            Err(_) | Ok(None) => break,
            Ok(Some(Err(e))) => panic!("retina: {e}"),
            Ok(Some(Ok(PacketItem::Rtp(pkt)))) => pkt,
            Ok(Some(Ok(_))) => continue,
        };
        let now = Instant::now();
        let sighting = {
            let sent = sent.lock().unwrap_or_else(PoisonError::into_inner);
            sent.get(&payload_hash(pkt.payload())).copied()
        };
        receipt.received += 1;
        match sighting {
            Some(Sighting { at, count: 1 }) if at < played => receipt.before_play += 1,
            Some(Sighting { at, count: 1 }) => {
                receipt.matched += 1;
                receipt.latencies.push(now.saturating_duration_since(at));
            }
            Some(_) => receipt.ambiguous += 1,
            None => receipt.unmatched += 1,
        }
        let stream = pkt.stream_id();
        receipt.per_stream[stream] += 1;
        let seq = pkt.sequence_number();
        if let Some(last) = last_seq[stream] {
            // One ahead is the next; further ahead (mod 2^16), packets missed. retina passes no
            // packet behind the last (it drops or refuses those).
            receipt.gaps += u64::from(seq.wrapping_sub(last).saturating_sub(1));
        }
        last_seq[stream] = Some(seq);
    }
    receipt
}

/// An RTP packet: version 2, `csrcs` contributing sources, a header extension of `ext_words`
/// 32-bit words when `Some`, `payload`, and `padding` bytes of padding when non-zero.
fn rtp_packet(
    seq: u16,
    csrcs: &[u32],
    ext_words: Option<u16>,
    payload: &[u8],
    padding: u8,
) -> Vec<u8> {
    let mut p = vec![0x80 | csrcs.len() as u8, 96];
    if ext_words.is_some() {
        p[0] |= 0x10;
    }
    if padding > 0 {
        p[0] |= 0x20;
    }
    p.extend_from_slice(&seq.to_be_bytes());
    p.extend_from_slice(&90_000u32.to_be_bytes());
    p.extend_from_slice(&0x1234_5678u32.to_be_bytes());
    for c in csrcs {
        p.extend_from_slice(&c.to_be_bytes());
    }
    if let Some(words) = ext_words {
        p.extend_from_slice(&[0xbe, 0xde]);
        p.extend_from_slice(&words.to_be_bytes());
        p.extend((0..words * 4).map(|i| i as u8 ^ 0x5a));
    }
    p.extend_from_slice(payload);
    if padding > 0 {
        p.extend(std::iter::repeat_n(0, usize::from(padding - 1)));
        p.push(padding);
    }
    p
}

/// `$`, `channel`, the length of `data` and `data`.
fn interleaved(channel: u8, data: &[u8]) -> Vec<u8> {
    let mut f = vec![b'$', channel];
    f.extend_from_slice(&u16::try_from(data.len()).unwrap().to_be_bytes());
    f.extend_from_slice(data);
    f
}

/// What a publisher sends on its RTSP connection, and the two RTP payloads in it: an ANNOUNCE
/// whose SDP body holds a `$` and an empty line (only `Content-Length` says where it ends), a
/// keep-alive CRLF, an RTP frame on channel 0 with a CSRC, a header extension and padding, an
/// RTCP frame on channel 1 (whose bytes would parse as RTP), a request without a body, and a
/// plain RTP frame on channel 2.
fn publisher_bytes() -> (Vec<u8>, [Vec<u8>; 2]) {
    let payloads = [b"\x65first access unit".to_vec(), b"\x41second, on channel 2".to_vec()];
    let sdp = "v=0\r\no=- 0 0 IN IP4 127.0.0.1\r\ns=$ not a frame\r\n\r\n$\r\n";
    let mut bytes = format!(
        "ANNOUNCE rtsp://127.0.0.1/cam RTSP/1.0\r\nCSeq: 1\r\ncontent-length:  {}\r\n\r\n{sdp}",
        sdp.len()
    )
    .into_bytes();
    bytes.extend_from_slice(b"\r\n");
    bytes.extend(interleaved(0, &rtp_packet(7, &[0xdead_beef], Some(2), &payloads[0], 3)));
    let rtcp = rtp_packet(1, &[], None, b"\x81\xc8 an RTCP sender report", 0);
    bytes.extend(interleaved(1, &rtcp));
    bytes.extend_from_slice(b"GET_PARAMETER rtsp://127.0.0.1/cam RTSP/1.0\r\nCSeq: 2\r\n\r\n");
    bytes.extend(interleaved(2, &rtp_packet(8, &[], None, &payloads[1], 0)));
    (bytes, payloads)
}

/// The parser finds the same two RTP frames and the RTCP frame however the publisher's bytes
/// are cut into reads, and the payloads come out of them as they went in.
#[test]
fn the_parser_finds_every_frame_however_the_bytes_arrive() {
    let (bytes, payloads) = publisher_bytes();
    for piece in 1..=bytes.len() {
        let mut parser = Interleaved::default();
        let mut got = Vec::new();
        for chunk in bytes.chunks(piece) {
            parser.feed(chunk, |channel, data| got.push((channel, data.to_vec())));
        }
        let channels: Vec<u8> = got.iter().map(|(c, _)| *c).collect();
        assert_eq!(channels, [0, 1, 2], "in pieces of {piece}");
        assert_eq!(rtp_payload(&got[0].1), Some(&payloads[0][..]), "in pieces of {piece}");
        assert_eq!(rtp_payload(&got[2].1), Some(&payloads[1][..]), "in pieces of {piece}");
        assert_eq!(parser.state, State::Idle, "in pieces of {piece}");
    }
    // Not RTP: too short, version 1, an extension or padding beyond the packet.
    let mut v1 = rtp_packet(1, &[], None, b"x", 0);
    v1[0] = 0x40 | (v1[0] & 0x3f);
    let mut ext_beyond = rtp_packet(1, &[], Some(1), b"", 0);
    ext_beyond.truncate(ext_beyond.len() - 1);
    let mut pad_beyond = rtp_packet(1, &[], None, b"ab", 4);
    *pad_beyond.last_mut().unwrap() = 20;
    for bad in [&b"\x80\x60\0\0"[..], &v1, &ext_beyond, &pad_beyond] {
        assert_eq!(rtp_payload(bad), None, "{bad:02x?}");
    }
}

/// Through the tap, the server receives exactly what the publisher sent (and the publisher what
/// the server answers), and the tap notes the two RTP payloads, not the RTCP one, each with the
/// time it passed.
#[test]
fn the_tap_relays_every_byte_and_notes_each_rtp_payload() {
    use std::io::Read as _;
    let upstream = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = upstream.local_addr().unwrap();
    let fake = std::thread::spawn(move || {
        let (mut conn, _) = upstream.accept().unwrap();
        conn.write_all(b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n").unwrap();
        let mut got = Vec::new();
        conn.read_to_end(&mut got).unwrap();
        got
    });
    let tap = Tap::start(server);
    let (bytes, payloads) = publisher_bytes();
    let before = Instant::now();
    let mut client = TcpStream::connect(("127.0.0.1", tap.port())).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    for chunk in bytes.chunks(50) {
        client.write_all(chunk).unwrap();
    }
    client.shutdown(Shutdown::Write).unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).unwrap();
    let got = fake.join().unwrap();
    let after = Instant::now();

    assert_eq!(got, bytes, "the server received other bytes than the publisher sent");
    assert_eq!(answer, b"RTSP/1.0 200 OK\r\nCSeq: 1\r\n\r\n");
    assert_eq!(tap.frames(), 2);
    let sent = tap.sent().lock().unwrap().clone();
    let mut noted: Vec<u64> = sent.keys().copied().collect();
    let mut want: Vec<u64> = payloads.iter().map(|p| payload_hash(p)).collect();
    noted.sort_unstable();
    want.sort_unstable();
    assert_eq!(noted, want);
    for p in &payloads {
        let at = tap.sent_at(p).unwrap();
        assert!(before <= at && at <= after);
        assert_eq!(sent[&payload_hash(p)].count, 1);
    }
    assert_eq!(tap.sent_at(b"\x81\xc8 an RTCP sender report"), None);
}

/// Nearest rank: of 1..=10 ms, the median is 5 ms, the 0.91 quantile 10 ms.
#[test]
fn a_receipt_quantile_is_by_nearest_rank() {
    let receipt = LiveReceipt {
        latencies: (1..=10).rev().map(Duration::from_millis).collect(),
        ..LiveReceipt::default()
    };
    let q = |q| receipt.quantile(q).as_millis();
    assert_eq!([q(0.0), q(0.1), q(0.5), q(0.51), q(0.91), q(1.0)], [1, 1, 5, 6, 10, 10]);
}
