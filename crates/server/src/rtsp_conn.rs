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

use std::net::SocketAddr;

use isochron_dataplane::sender::OutFrame;
use isochron_rtsp::codec::{self, Decoded, Frame, Limits};
use isochron_rtsp::rtsp_types::{Response, StatusCode, Version, headers};
use isochron_rtsp::server::{ConnId, ConnInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tracing::debug;

use crate::sessions::SessionCommand;

/// Per-connection settings.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ConnConfig {
    pub(crate) limits: Limits,
    pub(crate) queue_frames: usize,
}

/// Serves one accepted connection until it closes.
pub(crate) async fn serve(
    stream: TcpStream,
    id: ConnId,
    peer: SocketAddr,
    config: ConnConfig,
    sessions: mpsc::UnboundedSender<SessionCommand>,
) {
    let Ok(local) = stream.local_addr() else { return };
    let _ = stream.set_nodelay(true);
    let conn = ConnInfo { id, peer, local };
    let (mut rd, wr) = stream.into_split();
    let (resp_tx, resp_rx) = mpsc::channel::<Vec<u8>>(64);
    let (frame_tx, frame_rx) = mpsc::channel::<OutFrame>(config.queue_frames);
    let _ = sessions.send(SessionCommand::ConnOpened { conn: id, frames: frame_tx });
    let writer = tokio::spawn(write_loop(wr, resp_rx, frame_rx));

    let mut buf: Vec<u8> = Vec::with_capacity(8192);
    let mut chunk = vec![0u8; 16 * 1024];
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
                    match frame {
                        Frame::Request(req) => {
                            let (tx, rx) = oneshot::channel();
                            let cmd =
                                SessionCommand::Request { conn, req: Box::new(req), reply: tx };
                            if sessions.send(cmd).is_err() {
                                break 'conn;
                            }
                            let Ok(resp) = rx.await else { break 'conn };
                            let mut out = Vec::with_capacity(512);
                            codec::encode_response(&resp, &mut out);
                            if resp_tx.send(out).await.is_err() {
                                break 'conn;
                            }
                        }
                        Frame::Data { channel, .. } => {
                            if channel % 2 == 1 {
                                let _ = sessions
                                    .send(SessionCommand::InterleavedRtcp { conn: id, channel });
                            }
                        }
                        Frame::Response(_) => {} // we send no requests; ignore stray responses
                    }
                }
            }
        }
        match rd.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let _ = sessions.send(SessionCommand::ConnClosed { conn: id });
    drop(resp_tx);
    // The writer ends once the response queue is closed and drained; the frame queue's other
    // senders (streams of this connection) are removed by ConnClosed.
    let _ = writer.await;
}

async fn write_loop(
    wr: tokio::net::tcp::OwnedWriteHalf,
    mut responses: mpsc::Receiver<Vec<u8>>,
    mut frames: mpsc::Receiver<OutFrame>,
) {
    let mut wr = BufWriter::with_capacity(64 * 1024, wr);
    loop {
        let ok = tokio::select! {
            biased;
            r = responses.recv() => match r {
                Some(bytes) => wr.write_all(&bytes).await.is_ok(),
                None => break,
            },
            f = frames.recv() => match f {
                Some(frame) => {
                    let (a, b) = frame.parts();
                    wr.write_all(a).await.is_ok() && wr.write_all(b).await.is_ok()
                }
                None => break,
            },
        };
        if !ok {
            break;
        }
        // Flush when nothing else is queued, so bursts coalesce but nothing lingers.
        if responses.is_empty() && frames.is_empty() && wr.flush().await.is_err() {
            break;
        }
    }
    let _ = wr.flush().await;
    let _ = wr.shutdown().await;
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
