//! One RTSP connection: framing in, responses and interleaved data out.
//!
//! The reader demultiplexes RTSP requests from `$`-framed interleaved data (RFC 2326 §10.12):
//! clients send requests between frames at any time (ffmpeg's keep-alives, GStreamer's RTCP on the
//! odd channel). Requests are answered strictly in order, which also covers pipelining (§9.1).
//!
//! One writer task owns the socket's write half, so a response never splits a frame. It takes
//! responses from one queue and interleaved frames from another, responses first: a PLAY response
//! queued before the stream starts is on the wire before its first packet. The frame queue is
//! bounded; when it is full the sender thread holds the stream back (backpressure).
//!
//! Malformed input gets `400 Bad Request` and the connection is closed; it cannot affect other
//! connections or sessions.
//!
//! Every request but OPTIONS passes the access policy first ([`authorize`], `[auth]`): playing
//! needs `read` on the object. A refusal is `401` with Digest challenges (RFC 7616 §3.3;
//! SHA-256 listed first as §3.7 prefers, MD5 last because ffmpeg, GStreamer and live555 each
//! answer the *last* Digest challenge they read and speak only MD5; both carry one nonce) or
//! `403`, and the connection stays open for the retry. On RTSPS (TLS) connections Basic is
//! offered too and accepted, and media is interleaved only (see [`crate::tls`]).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use isochron_auth::{Access, Authority, Credentials, Decision, Permission};

use isochron_dataplane::sender::OutFrame;
use isochron_node::abr::QueueDelay;
use isochron_rtsp::codec::{self, Decoded, Frame, Limits};
use isochron_rtsp::rtsp_types::{Method, Response, StatusCode, Version, headers};
use isochron_rtsp::server::{ConnId, ConnInfo};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot};
use tokio_rustls::TlsAcceptor;
use tracing::{debug, warn};

use crate::publisher::{Publisher, Publishing};
use crate::sessions::SessionCommand;

/// Per-connection settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnConfig {
    pub(crate) limits: Limits,
    pub(crate) queue_frames: usize,
    /// How long a whole request (the first one included) may take to arrive.
    pub(crate) request_timeout: Duration,
    /// How long a connection that has set up no session may stay quiet between requests.
    pub(crate) idle_timeout: Duration,
}

/// What every connection of the RTSP listeners shares.
pub(crate) struct Listening {
    pub(crate) config: ConnConfig,
    pub(crate) sessions: mpsc::UnboundedSender<SessionCommand>,
    pub(crate) auth: Arc<Authority>,
    pub(crate) limits: Arc<crate::conn_limits::ConnLimits>,
    /// The next connection id, shared by the RTSP and RTSPS listeners.
    pub(crate) next_id: AtomicU64,
    /// What a connection that publishes needs.
    pub(crate) publishing: Arc<Publishing>,
}

/// Accepts connections on `listener` until the task is aborted; with `tls` each is RTSPS. A
/// connection over a cap gets 503 and is closed; a TLS handshake must end within
/// `rtsp.request_timeout_s`.
pub(crate) async fn listen(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    shared: Arc<Listening>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                warn!(error = %e, "RTSP accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let permit = match shared.limits.admit(peer.ip()) {
            Ok(p) => p,
            Err(why) => {
                debug!(%peer, ?why, "RTSP connection refused");
                tokio::spawn(refuse(stream, tls.clone()));
                continue;
            }
        };
        let Ok(local) = stream.local_addr() else { continue };
        let socket = std::os::fd::AsRawFd::as_raw_fd(&stream);
        let _ = stream.set_nodelay(true);
        let id = ConnId(shared.next_id.fetch_add(1, Ordering::Relaxed));
        let conn = ConnInfo { id, peer, local, secure: tls.is_some(), user: None };
        let shared = Arc::clone(&shared);
        let tls = tls.clone();
        tokio::spawn(async move {
            let ends = Ends {
                config: shared.config,
                sessions: shared.sessions.clone(),
                auth: Arc::clone(&shared.auth),
                publishing: Arc::clone(&shared.publishing),
            };
            match tls {
                None => {
                    let (rd, wr) = stream.into_split();
                    serve(Accepted { rd, wr, conn, permit, socket }, ends).await;
                }
                Some(tls) => {
                    let handshake =
                        tokio::time::timeout(ends.config.request_timeout, tls.accept(stream));
                    match handshake.await {
                        Ok(Ok(stream)) => {
                            let (rd, wr) = tokio::io::split(stream);
                            serve(Accepted { rd, wr, conn, permit, socket }, ends).await;
                        }
                        Ok(Err(e)) => debug!(%peer, error = %e, "RTSPS handshake failed"),
                        Err(_) => debug!(%peer, "RTSPS handshake timed out"),
                    }
                }
            }
        });
    }
}

/// A `503` with `Retry-After` to a connection over a cap (over TLS on an RTSPS listener), then
/// the close.
async fn refuse(stream: TcpStream, tls: Option<TlsAcceptor>) {
    let bytes = simple_response("503 Service Unavailable");
    let _ = tokio::time::timeout(Duration::from_secs(2), async move {
        match tls {
            None => {
                let mut stream = stream;
                let _ = stream.write_all(&bytes).await;
            }
            Some(tls) => {
                if let Ok(mut stream) = tls.accept(stream).await {
                    let _ = stream.write_all(&bytes).await;
                    let _ = stream.shutdown().await;
                }
            }
        }
    })
    .await;
}

/// One accepted connection: its two halves and what is known about it.
pub(crate) struct Accepted<R, W> {
    pub(crate) rd: R,
    pub(crate) wr: W,
    pub(crate) conn: ConnInfo,
    /// The connection's slot, given back when it ends.
    pub(crate) permit: crate::conn_limits::ConnPermit,
    /// The descriptor of the TCP socket under `rd` and `wr`, to end the connection with a reset
    /// ([`OutFrame::Close`]); open as long as either half is.
    pub(crate) socket: std::os::fd::RawFd,
}

/// What one connection's task holds of [`Listening`].
pub(crate) struct Ends {
    pub(crate) config: ConnConfig,
    pub(crate) sessions: mpsc::UnboundedSender<SessionCommand>,
    pub(crate) auth: Arc<Authority>,
    pub(crate) publishing: Arc<Publishing>,
}

/// Serves one accepted connection (plain TCP or TLS) until it closes.
pub(crate) async fn serve<R, W>(accepted: Accepted<R, W>, ends: Ends)
where
    R: AsyncRead + Unpin + Send,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let Accepted { mut rd, wr, conn, permit, socket } = accepted;
    let Ends { config, sessions, auth, publishing } = ends;
    // From its first ANNOUNCE, the connection's publisher: its requests go there, not to the
    // session manager (`crate::publisher`).
    let mut publisher: Option<Publisher> = None;
    // A slot of the reserve: the first request must show credentials that verify, or be one
    // on a session of this client's own (a player already playing); anything else is answered
    // 503 and the connection closed (conn_limits, docs/design/security.md).
    // It must do so within `request_timeout` of its opening (a player answers a 401 challenge
    // at once), or the slot is given back.
    let mut probation = permit.on_probation;
    let probation_ends = tokio::time::Instant::now() + config.request_timeout;
    let (id, peer) = (conn.id, conn.peer);
    let (resp_tx, resp_rx) = mpsc::channel::<Vec<u8>>(64);
    let (frame_tx, frame_rx) = mpsc::channel::<OutFrame>(config.queue_frames);
    let _ = sessions.send(SessionCommand::ConnOpened { conn: id, frames: frame_tx });
    let queue = QueueReport { conn: id, sessions: sessions.clone() };
    let writer = tokio::spawn(write_loop(wr, resp_rx, frame_rx, (socket, queue)));

    // Buffers grow with use: an idle connection costs little (thousands may be open).
    let mut buf: Vec<u8> = Vec::new();
    let mut answered_any = false;
    // Whether a SETUP on this connection succeeded: a connection that never set up a session
    // holds a slot for nothing once it falls quiet, and is closed after `idle_timeout`.
    let mut set_up_any = false;
    // When the request under way must have arrived whole (set when it starts, cleared when a
    // frame completes): one deadline per request, however its bytes trickle in.
    let mut deadline: Option<tokio::time::Instant> = None;
    'conn: loop {
        // Handle every complete frame in the buffer.
        loop {
            match codec::decode(&buf, &config.limits) {
                Decoded::Incomplete => break,
                Decoded::Invalid(e) => {
                    debug!(%peer, error = %e, "malformed RTSP input; closing");
                    let _ = resp_tx.send(bad_request()).await;
                    break 'conn;
                }
                Decoded::Frame(frame, used) => {
                    buf.drain(..used);
                    deadline = None;
                    match frame {
                        Frame::Request(req) => {
                            answered_any = true;
                            // On probation, a request on no session must authenticate.
                            let on_a_session = req.header(&headers::SESSION).is_some();
                            let must_prove = probation && !on_a_session;
                            if must_prove && !auth.has_users() {
                                debug!(%peer, "a reserved slot for a request that proves nothing");
                                permit.refuse_on_probation();
                                let _ = resp_tx.send(reserved_for_others(&req)).await;
                                break 'conn;
                            }
                            // Publishing writes to the store: it needs `record` (`publish`).
                            let publishes =
                                publisher.is_some() || *req.method() == Method::Announce;
                            let permission =
                                if publishes { Permission::Record } else { Permission::Read };
                            let asked = Asked { peer, secure: conn.secure, must_prove, permission };
                            let user = match authorize(&auth, &req, asked).await {
                                Ok(user) => user,
                                Err(refusal) => {
                                    if resp_tx.send(refusal).await.is_err() {
                                        break 'conn;
                                    }
                                    continue;
                                }
                            };
                            if publishes {
                                probation = false;
                                let resp = match publisher.as_mut() {
                                    None => {
                                        let (p, resp) = Publisher::announce(
                                            &req,
                                            &publishing,
                                            (peer, conn.local),
                                        );
                                        publisher = p;
                                        resp
                                    }
                                    Some(p) => {
                                        let id = format!("{:016x}", rand::random::<u64>());
                                        p.handle_request(&req, &id, &publishing).await
                                    }
                                };
                                if *req.method() == Method::Setup && resp.status() == StatusCode::Ok
                                {
                                    set_up_any = true;
                                }
                                if publisher.as_ref().is_some_and(Publisher::is_over) {
                                    publisher = None;
                                }
                                let mut out = Vec::with_capacity(256);
                                codec::encode_response(&resp, &mut out);
                                if resp_tx.send(out).await.is_err() {
                                    break 'conn;
                                }
                                continue;
                            }
                            let (tx, rx) = oneshot::channel();
                            let method = String::from(<&str>::from(req.method()));
                            let user_less = user.is_none();
                            let conn = ConnInfo { user: user.map(Arc::from), ..conn.clone() };
                            let cmd =
                                SessionCommand::Request { conn, req: Box::new(req), reply: tx };
                            if sessions.send(cmd).is_err() {
                                break 'conn;
                            }
                            let Ok(resp) = rx.await else {
                                warn!(%peer, %method, "request dropped without an answer; closing");
                                break 'conn;
                            };
                            // On probation without credentials, the session must be ours.
                            let refused = probation && user_less && !resp.status().is_success();
                            probation = false;
                            if method == "SETUP" && resp.status() == StatusCode::Ok {
                                set_up_any = true;
                            }
                            if u16::from(resp.status()) >= 400 {
                                debug!(%peer, status = u16::from(resp.status()), "RTSP request refused");
                            }
                            let mut out = Vec::with_capacity(512);
                            codec::encode_response(&resp, &mut out);
                            if resp_tx.send(out).await.is_err() || refused {
                                if refused {
                                    permit.refuse_on_probation();
                                }
                                break 'conn;
                            }
                        }
                        Frame::Data { channel, payload } if publisher.is_some() => {
                            let feeding = match publisher.as_mut() {
                                Some(p) => p.handle_data(channel, payload).await,
                                None => true,
                            };
                            if !feeding {
                                break 'conn;
                            }
                        }
                        Frame::Data { channel, payload } => {
                            if channel % 2 == 1 {
                                // Its receiver reports, as over UDP: what the path does (the
                                // round trip grows with the queue ahead of the client).
                                let reports = crate::rtcp_rx::parse(&payload).reports;
                                debug!(%peer, channel, ?reports, "interleaved RTCP");
                                let cmd =
                                    SessionCommand::InterleavedRtcp { conn: id, channel, reports };
                                let _ = sessions.send(cmd);
                            }
                        }
                        Frame::Response(_) => {} // we send no requests; ignore stray responses
                    }
                }
            }
        }
        // A request under way (or the first one) must arrive whole within the timeout of its
        // first byte (the connection's opening, for the first), bytes trickling in or not;
        // between requests a connection that set up a session may be quiet as long as it likes
        // (its sessions live on RTCP), one that did not for `idle_timeout`.
        let waiting = !buf.is_empty() || !answered_any;
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        let read = if probation {
            match tokio::time::timeout_at(probation_ends, rd.read_buf(&mut buf)).await {
                Ok(r) => r,
                Err(_) => {
                    debug!(%peer, "a reserved slot not proven within the request timeout; closing");
                    permit.refuse_on_probation();
                    let _ = resp_tx.send(simple_response("503 Service Unavailable")).await;
                    break;
                }
            }
        } else if waiting {
            let deadline = *deadline
                .get_or_insert_with(|| tokio::time::Instant::now() + config.request_timeout);
            match tokio::time::timeout_at(deadline, rd.read_buf(&mut buf)).await {
                Ok(r) => r,
                Err(_) => {
                    debug!(%peer, "no whole request within the timeout; closing");
                    let _ = resp_tx.send(simple_response("408 Request Time-out")).await;
                    break;
                }
            }
        } else if !set_up_any {
            match tokio::time::timeout(config.idle_timeout, rd.read_buf(&mut buf)).await {
                Ok(r) => r,
                Err(_) => {
                    debug!(%peer, "quiet with no session for the idle timeout; closing");
                    break;
                }
            }
        } else {
            rd.read_buf(&mut buf).await
        };
        if matches!(read, Ok(0) | Err(_)) {
            break;
        }
    }
    let _ = sessions.send(SessionCommand::ConnClosed { conn: id });
    drop(resp_tx);
    // The writer ends once the response queue is closed and drained; the frame queue's other
    // senders (streams of this connection) are removed by ConnClosed.
    let _ = writer.await;
}

/// Writes responses and interleaved frames until the responses' queue closes, or until an
/// [`OutFrame::Close`]: then what was queued before it is written and the connection is reset
/// ([`isochron_dataplane::net::abort_on_close`]): a stream that cannot go on without a hole ends
/// in a way the player reports (GStreamer: "Could not read from resource. The server closed the
/// connection"; over UDP an error), where a BYE alone reads as a normal end.
///
/// Once a second, while frames go out, it tells the session manager how long the queue ahead
/// of the client is ([`QueueDelay`]: the socket's unacknowledged bytes over the rate they are
/// acknowledged), for the sessions playing a ladder over RTSP/TCP.
async fn write_loop<W: AsyncWrite + Unpin>(
    mut wr: W,
    mut responses: mpsc::Receiver<Vec<u8>>,
    mut frames: mpsc::Receiver<OutFrame>,
    (socket, queue): (std::os::fd::RawFd, QueueReport),
) {
    // What is queued for the socket; it grows to a burst's size only on connections that stream
    // (an idle connection holds no buffer).
    let mut out: Vec<u8> = Vec::new();
    let mut written = 0u64;
    let mut gauge = QueueDelay::default();
    let mut tick = tokio::time::interval(QUEUE_SAMPLE);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last = tokio::time::Instant::now();
    let mut framed = false;
    loop {
        tokio::select! {
            biased;
            _ = tick.tick() => {
                // Only a connection that streams: a quiet one has nothing to say.
                if std::mem::take(&mut framed)
                    && let Ok(unacked) = isochron_dataplane::net::unacked_bytes(socket)
                {
                    let now = tokio::time::Instant::now();
                    if let Some(delay) = gauge.sample(now - last, written, unacked) {
                        let _ = queue.sessions.send(SessionCommand::ConnQueue { conn: queue.conn, delay });
                    }
                    last = now;
                }
                continue;
            }
            r = responses.recv() => match r {
                Some(bytes) => out.extend_from_slice(&bytes),
                None => break,
            },
            f = frames.recv() => match f {
                Some(OutFrame::Close) => {
                    let _ = write_out(&mut wr, &mut out).await;
                    // `wr` holds the socket open here. The reset goes out when the reader lets
                    // go too, which the end of its receiving side makes it do at once.
                    if isochron_dataplane::net::abort_on_close(socket).is_ok() {
                        return;
                    }
                    break;
                }
                Some(frame) => {
                    let (a, b) = frame.parts();
                    out.extend_from_slice(a);
                    out.extend_from_slice(b);
                    framed = true;
                }
                None => break,
            },
        }
        // Write when nothing else is queued, so bursts coalesce but nothing lingers, or when a
        // burst fills the buffer.
        let idle = responses.is_empty() && frames.is_empty();
        if idle || out.len() >= WRITE_BATCH {
            written += out.len() as u64;
            if write_out(&mut wr, &mut out).await.is_err() {
                return;
            }
        }
    }
    let _ = write_out(&mut wr, &mut out).await;
    let _ = wr.shutdown().await;
}

/// Where a connection's writer reports the queue ahead of its client.
struct QueueReport {
    conn: ConnId,
    sessions: mpsc::UnboundedSender<SessionCommand>,
}

/// How often a streaming connection's queue is measured.
const QUEUE_SAMPLE: Duration = Duration::from_secs(1);

/// Bytes gathered before a write while frames keep coming.
const WRITE_BATCH: usize = 64 * 1024;

async fn write_out<W: AsyncWrite + Unpin>(wr: &mut W, out: &mut Vec<u8>) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let r = async {
        wr.write_all(out).await?;
        wr.flush().await
    }
    .await;
    out.clear();
    r
}

/// Who asks for what, for [`authorize`].
struct Asked {
    peer: SocketAddr,
    /// The connection is TLS (Basic is then offered and accepted).
    secure: bool,
    /// A connection on a reserved slot: it must give credentials.
    must_prove: bool,
    /// `read` to play, `record` to publish.
    permission: Permission,
}

/// The access policy's answer to `req`: the user it authenticated as (`None`: no credentials)
/// to go ahead, else the encoded 401 or 403.
async fn authorize(
    auth: &Authority,
    req: &isochron_rtsp::rtsp_types::Request<Vec<u8>>,
    asked: Asked,
) -> Result<Option<String>, Vec<u8>> {
    use isochron_rtsp::url::{Target, parse_target};
    let Asked { peer, secure, must_prove, permission } = asked;
    let object = match parse_target(req.request_uri()) {
        Ok(Target::Presentation(name) | Target::Track(name, _)) => Some(name),
        _ => None,
    };
    let now_unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let credentials = match req.header(&headers::AUTHORIZATION).map(|v| v.as_str()) {
        None => Ok(None),
        Some(v) => Credentials::from_authorization(v).map(Some),
    };
    // Who the credentials name: wrong answers slow down their address and that user.
    let named = match &credentials {
        Ok(Some(Credentials::Basic { user, .. })) => Some(Some(user.as_str())),
        Ok(Some(Credentials::Digest(d))) => Some(Some(d.username.as_str())),
        Ok(Some(Credentials::Bearer(_))) | Err(_) => Some(None),
        Ok(None) => None,
    };
    if let Some(user) = named {
        let wait = auth.wait_before_check(peer.ip(), user, unix_ms());
        if wait > 0 {
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    }
    let method: &str = req.method().into();
    let decision = match &credentials {
        // A Digest answer is for one Request-URI (RFC 7616 §3.4.6): one captured for another
        // object opens nothing here.
        Ok(Some(Credentials::Digest(d))) if !same_uri(&d.uri, req.request_uri()) => {
            Decision::Unauthorized(format!("Digest uri {:?} is not the request's", d.uri))
        }
        Ok(credentials) => auth.check(&Access {
            permission,
            object: object.as_deref(),
            credentials: credentials.as_ref(),
            trusted_peer: peer.ip().is_loopback(),
            secure,
            method,
            now_unix_s,
        }),
        Err(e) => Decision::Unauthorized(e.to_string()),
    };
    if let Some(user) = named {
        let stale = auth.is_stale(credentials.as_ref().ok().and_then(Option::as_ref), now_unix_s);
        match &decision {
            Decision::Unauthorized(why) if !stale => {
                let n = auth.wrong_answer(peer.ip(), user, unix_ms());
                if n > isochron_auth::throttle::FREE {
                    warn!(%peer, user = user.unwrap_or("-"), %why, wrong_in_a_row = n,
                        "RTSP credentials refused; answers from this address and user are slowed");
                }
            }
            Decision::Allow { .. } => auth.right_answer(peer.ip(), user),
            _ => {}
        }
    }
    // A connection on a reserved slot must say who it is, even where anonymous access is open.
    let decision = match decision {
        Decision::Allow { user: None } if must_prove => {
            Decision::Unauthorized("a reserved connection slot needs credentials".to_owned())
        }
        d => d,
    };
    if *req.method() == Method::Options && !must_prove {
        // Open to all; good credentials still say who asks (a keep-alive on a user's session).
        return Ok(match decision {
            Decision::Allow { user } => user,
            _ => None,
        });
    }
    let cseq = req.header(&headers::CSEQ).map_or("0", |v| v.as_str());
    let (status, challenges) = match decision {
        Decision::Allow { user } => return Ok(user),
        Decision::Unauthorized(why) => {
            debug!(%peer, %why, "RTSP request refused (401)");
            let stale = auth.is_stale(credentials.ok().flatten().as_ref(), now_unix_s);
            ("401 Unauthorized", auth.digest_challenges(now_unix_s, stale).to_vec())
        }
        Decision::Forbidden(why) => {
            debug!(%peer, %why, "RTSP request refused (403)");
            ("403 Forbidden", Vec::new())
        }
    };
    // Written by hand: rtsp-types folds repeated headers into one line, and clients read one
    // challenge per WWW-Authenticate line. Basic (TLS only) first, then SHA-256, MD5 last (see
    // the module docs): clients that can do Digest prefer it to Basic.
    let mut out = format!("RTSP/1.0 {status}\r\nCSeq: {cseq}\r\nServer: isochron\r\n");
    if secure && !challenges.is_empty() {
        out.push_str(&format!("WWW-Authenticate: Basic realm=\"{}\"\r\n", isochron_auth::REALM));
    }
    for c in challenges.iter().rev() {
        out.push_str(&format!("WWW-Authenticate: {c}\r\n"));
    }
    out.push_str("Content-Length: 0\r\n\r\n");
    Err(out.into_bytes())
}

/// Whether a Digest answer's `uri` names `request` (both parsed, so that spelling differences a
/// URL parser removes do not matter); `*` (OPTIONS) and relative forms compare as written.
fn same_uri(digest_uri: &str, request: Option<&isochron_rtsp::rtsp_types::Url>) -> bool {
    match (isochron_rtsp::rtsp_types::Url::parse(digest_uri), request) {
        (Ok(u), Some(r)) => u == *r,
        (_, None) => true,
        (Err(_), Some(r)) => r.as_str() == digest_uri || r.path() == digest_uri,
    }
}

/// Unix time now, ms.
fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A response without CSeq (none was read): `408` for a request that never arrived whole, `503`
/// for a connection over a cap (with `Retry-After`), closing the connection.
pub(crate) fn simple_response(status: &str) -> Vec<u8> {
    let retry = if status.starts_with("503") { "Retry-After: 5\r\n" } else { "" };
    format!(
        "RTSP/1.0 {status}\r\nServer: isochron\r\nConnection: close\r\n{retry}Content-Length: 0\r\n\r\n"
    )
    .into_bytes()
}

/// `503` with `Retry-After` and the request's CSeq, closing the connection: a slot of the
/// reserve taken by a request without credentials and without a session.
fn reserved_for_others(req: &isochron_rtsp::rtsp_types::Request<Vec<u8>>) -> Vec<u8> {
    let mut b = Response::builder(Version::V1_0, StatusCode::ServiceUnavailable)
        .header(headers::SERVER, "isochron")
        .header(headers::CONNECTION, "close")
        .header(headers::RETRY_AFTER, "5");
    if let Some(cseq) = req.header(&headers::CSEQ) {
        b = b.header(headers::CSEQ, cseq.as_str());
    }
    let mut out = Vec::new();
    codec::encode_response(&b.build(Vec::new()), &mut out);
    out
}

fn bad_request() -> Vec<u8> {
    let resp = Response::builder(Version::V1_0, StatusCode::BadRequest)
        .header(headers::SERVER, "isochron")
        .header(headers::CONNECTION, "close")
        .build(Vec::new());
    let mut out = Vec::new();
    codec::encode_response(&resp, &mut out);
    out
}
