//! The control connections: one TCP connection from this node to each peer carries its
//! messages (`isochron_cluster::wire` frames, a `Hello` first); inbound ones are read into
//! [`SessionCommand::Peer`]. Bytes both ways are counted ([`ClusterView`]).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use isochron_base::NodeId;
use isochron_cluster::Message;
use isochron_cluster::wire::{FrameReader, encode_frame};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::cluster_view::ClusterView;
use crate::sessions::{PeerOut, SessionCommand};

use super::{Quiet, lock};

/// The session manager's end of the control connections: it writes each message straight to
/// the writer task of the peer's connection (connected on the first message to it, and again
/// after it failed), with no task between the manager and the peer's socket.
pub struct ControlOut {
    writers: HashMap<NodeId, mpsc::UnboundedSender<Vec<u8>>>,
    view: Arc<ClusterView>,
    /// This node's `Hello`, encoded: the first frame on every connection.
    hello: Vec<u8>,
}

impl ControlOut {
    /// Connections that open with `hello`, to the peers' addresses in `view`.
    #[must_use]
    pub fn new(view: Arc<ClusterView>, hello: &Message) -> Self {
        Self { writers: HashMap::new(), view, hello: encode_frame(hello) }
    }
}

impl PeerOut for ControlOut {
    /// Sends `msg` to peer `to` (dropped, as a lost connection would, when the peer has no
    /// address). Call from within the runtime: a new connection is a task of its own.
    fn send(&mut self, to: NodeId, msg: &Message) {
        let mut frame = encode_frame(msg);
        self.view.control_messages_out.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = self.writers.get(&to) {
            match w.send(frame) {
                Ok(()) => return,
                // The writer ended (its connection failed): the frame back, for a new one.
                Err(mpsc::error::SendError(f)) => frame = f,
            }
        }
        let addr = lock(&self.view.live).values().find(|r| NodeId(r.id) == to).map(|r| r.control);
        let Some(addr) = addr else {
            debug!(peer = %to, "no address for a peer: message dropped");
            return;
        };
        let (tx, wrx) = mpsc::unbounded_channel();
        let _ = tx.send(frame);
        self.writers.insert(to, tx);
        tokio::spawn(write_peer(addr, wrx, Arc::clone(&self.view), self.hello.clone()));
    }
}

async fn write_peer(
    addr: SocketAddr,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    view: Arc<ClusterView>,
    hello: Vec<u8>,
) {
    // A peer that is down fails every message's new connection: one warning a run.
    static QUIET: std::sync::LazyLock<Quiet> = std::sync::LazyLock::new(Quiet::default);
    let what = addr.to_string();
    let conn = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await;
    let mut stream = match conn {
        Ok(Ok(s)) => {
            QUIET.clear(&what);
            s
        }
        Ok(Err(e)) => {
            if let Some(left_out) = QUIET.admit(&what) {
                warn!(peer = %addr, error = %e, left_out, "control connection failed");
            }
            return;
        }
        Err(_) => {
            if let Some(left_out) = QUIET.admit(&what) {
                warn!(peer = %addr, left_out, "control connection timed out");
            }
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let mut first = Some(hello);
    while let Some(frame) = rx.recv().await {
        let mut buf = first.take().unwrap_or_default();
        buf.extend_from_slice(&frame);
        while let Ok(more) = rx.try_recv() {
            buf.extend_from_slice(&more);
        }
        if let Err(e) = stream.write_all(&buf).await {
            warn!(peer = %addr, error = %e, "control connection lost");
            return;
        }
        view.control_bytes_out.fetch_add(buf.len() as u64, Ordering::Relaxed);
    }
}

/// Each peer's newest inbound control connection (a number counted up per connection).
type Newest = Arc<std::sync::Mutex<HashMap<NodeId, u64>>>;

/// Accepts peers' control connections and hands their messages to the session manager; when
/// a peer's newest connection closes, says so ([`SessionCommand::PeerClosed`]): its process
/// ended, most likely, and its part of every session is taken over at once. An older one that
/// closes after the peer opened another (its writer failed and reconnected) says nothing.
pub async fn accept_control(
    listener: TcpListener,
    view: Arc<ClusterView>,
    sessions: mpsc::UnboundedSender<SessionCommand>,
) {
    let newest: Newest = Arc::default();
    let mut count = 0u64;
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        count += 1;
        let conn = count;
        let (view, sessions, newest) = (Arc::clone(&view), sessions.clone(), Arc::clone(&newest));
        tokio::spawn(async move {
            let mut from = None;
            if let Err(e) = read_peer(stream, &view, &sessions, &newest, conn, &mut from).await {
                debug!(%peer, error = %e, "control connection closed");
            }
            let Some(node) = from else { return };
            let last = {
                let mut newest = lock(&newest);
                let last = newest.get(&node) == Some(&conn);
                if last {
                    newest.remove(&node);
                }
                last
            };
            if last {
                debug!(%peer, %node, "a peer's control connection closed");
                let _ = sessions.send(SessionCommand::PeerClosed { from: node });
            }
        });
    }
}

async fn read_peer(
    mut stream: TcpStream,
    view: &ClusterView,
    sessions: &mpsc::UnboundedSender<SessionCommand>,
    newest: &Newest,
    conn: u64,
    from: &mut Option<NodeId>,
) -> anyhow::Result<()> {
    let mut reader = FrameReader::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        view.control_bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        reader.feed(&buf[..n]);
        while let Some(msg) = reader.next_message()? {
            match (&msg, *from) {
                (Message::Hello { node, .. }, _) => {
                    lock(newest).insert(*node, conn);
                    // The core reads its incarnation too: another one is a restarted process,
                    // which runs none of its old shares, so nothing is given back to it
                    // (`docs/design/takeover.md`). Swallowed here, a node killed and started
                    // again within its lease was taken for one that stood still, and given
                    // back parts of sessions it no longer had: holes to the end of each.
                    *from = Some(*node);
                    let _ = sessions.send(SessionCommand::Peer { from: *node, msg: Box::new(msg) });
                }
                (_, Some(node)) => {
                    let _ = sessions.send(SessionCommand::Peer { from: node, msg: Box::new(msg) });
                }
                (_, None) => anyhow::bail!("a peer sent {} before its hello", msg.kind()),
            }
        }
    }
}
