//! The session manager: the owner of the node core ([`NodeCore`]) and of its IO.
//!
//! RTSP requests from every connection, RTCP liveness, the sender's and scheduler's notices,
//! cluster messages and membership, and the reaping tick all arrive as [`SessionCommand`]s on one
//! channel. The manager hands each to the node core (`isochron-node`, sans-IO: every decision
//! about a session and a share is made there) and carries out what it outputs: an answer goes
//! back on the request's reply channel, an admission or a `ReadOp` to the scheduler thread, a
//! new stream or a `StreamOp` to the sender, a message to a peer, a connection closed. It keeps only what the core must not
//! hold: the channels, each connection's frame queue, and the replies waiting under their
//! tickets. PLAY order (RFC 2326 §12.33) holds because outputs are carried out in order: the
//! answer before the work that sends the first packet.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crossbeam_channel::Sender;
use isochron_base::{BlockIndex, DiskId, IoFailure, NodeId, ObjectId, RunId, StreamId};
use isochron_cluster::{MemberInfo, Message, ShareKey};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::pacer::RunReport;
use isochron_dataplane::sched_thread::{DecisionSink, SchedCommand};
use isochron_dataplane::sender::{OutFrame, SenderCommand, SharedBlock, StreamTransport};
use isochron_dataplane::shards::Senders;
use isochron_node::abr::ReceiverFeedback;
use isochron_node::{Catalog, FeedEvent, NodeConfig, NodeCore, NodeOutput, Ticket, Transport};
use isochron_rtsp::rtsp_types::{Request, Response};
use isochron_rtsp::server::{ConnId, ConnInfo, Presentation, ServerCore};
use isochron_sched::{Decision, OpenStream};
use isochron_store::Epoch;
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

pub use isochron_node::{AbrStats, ClusterInfo, MemberSummary, SessionInfo, TakeoverStats};

use crate::library::{Library, ObjectEntry};

/// Commands to the session manager.
#[derive(Debug)]
pub enum SessionCommand {
    /// An RTSP request from a connection, answered on `reply`.
    Request {
        /// The connection.
        conn: ConnInfo,
        /// The request.
        req: Box<Request<Vec<u8>>>,
        /// The response.
        reply: oneshot::Sender<Response<Vec<u8>>>,
    },
    /// A connection opened; `frames` is its interleaved frame queue.
    ConnOpened {
        /// The connection.
        conn: ConnId,
        /// Its frame queue.
        frames: mpsc::Sender<OutFrame>,
    },
    /// A connection closed.
    ConnClosed {
        /// The connection.
        conn: ConnId,
    },
    /// RTCP arrived on the UDP socket, naming these media SSRCs.
    Rtcp {
        /// SSRCs of our streams it reports on.
        media_ssrcs: Vec<u32>,
        /// What its reception report blocks say of the path.
        reports: Vec<ReceiverFeedback>,
        /// The packets of each stream (SSRC) its generic NACKs ask for again.
        nacked: Vec<(u32, Vec<u16>)>,
    },
    /// RTCP arrived interleaved on a connection.
    InterleavedRtcp {
        /// The connection.
        conn: ConnId,
        /// The channel.
        channel: u8,
        /// What its receiver reports say (applied to the connection's own sessions only).
        reports: Vec<ReceiverFeedback>,
    },
    /// The queue ahead of an RTSP connection's client, from its socket (streams over
    /// RTSP/TCP: [`isochron_node::abr::QueueDelay`]).
    ConnQueue {
        /// The connection.
        conn: ConnId,
        /// How long a byte written now waits before the client has it.
        delay: std::time::Duration,
    },
    /// The sender sent a local stream's last packet of a run.
    ShareEnded {
        /// The local stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: RunReport,
    },
    /// The sender stopped a local stream's run.
    ShareStopped {
        /// The local stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// Where it stood.
        report: RunReport,
    },
    /// The scheduler decided on a share's admission.
    Admitted {
        /// The share.
        key: ShareKey,
        /// Which of its session's opens ([`NodeOutput::Admit`]'s `open`).
        open: u32,
        /// The decision (`None`: the scheduler thread is gone).
        decision: Option<Decision>,
    },
    /// A block of a local stream could not be read.
    ReadFailed {
        /// The stream.
        stream: StreamId,
        /// Why.
        error: IoFailure,
    },
    /// A message from another node.
    Peer {
        /// The node.
        from: NodeId,
        /// The message (boxed: a run's start is a few hundred bytes).
        msg: Box<Message>,
    },
    /// A peer's newest control connection to this node closed.
    PeerClosed {
        /// The node.
        from: NodeId,
    },
    /// A node's record or liveness changed (from etcd).
    Member {
        /// The node.
        info: MemberInfo,
        /// Where it takes relayed RTP.
        relay: Option<SocketAddr>,
    },
    /// A node left the cluster for good: not live, and no disk in use is its own (removed with
    /// `isochron node remove`, or dead and its disks retired) ([`ClusterCore::remove_member`](isochron_cluster::ClusterCore::remove_member)).
    Forget {
        /// The node.
        id: NodeId,
    },
    /// A live feed was admitted; its first packet is still to come.
    FeedAnnounced {
        /// The object it is recorded as.
        feed: ObjectId,
        /// Each track's RTP clock rate and payload type, as its viewers' SDP says.
        tracks: Vec<(u32, u8)>,
    },
    /// A live feed began: its first packet arrived at `zero` (`docs/design/live.md`).
    FeedOpened {
        /// The object it is recorded as.
        feed: ObjectId,
        /// Its first packet's arrival: its media time zero.
        zero: tokio::time::Instant,
        /// Each track's RTP clock rate and payload type, as its viewers' SDP says.
        tracks: Vec<(u32, u8)>,
    },
    /// A chunk of a live feed was sealed: held here, handed to its viewers.
    FeedChunk {
        /// The feed.
        feed: ObjectId,
        /// What it holds.
        info: isochron_live::ChunkInfo,
        /// The chunk, a block in memory.
        block: SharedBlock,
    },
    /// A live feed's recording was committed further (the library lists the longer prefix).
    FeedCommitted {
        /// The feed.
        feed: ObjectId,
    },
    /// A live feed ended.
    FeedEnded {
        /// The feed.
        feed: ObjectId,
    },
    /// Allocate a stream id for a recording, from the sequence the RTSP sessions' streams use.
    AllocateStream {
        /// The id.
        reply: oneshot::Sender<StreamId>,
    },
    /// List the sessions, with what switching renditions and degrading did, and what the
    /// cluster's takeover rules did.
    List {
        /// The reply.
        reply: oneshot::Sender<(Vec<SessionInfo>, AbrStats, TakeoverStats)>,
    },
    /// Report the cluster as this node sees it.
    Cluster {
        /// The reply.
        reply: oneshot::Sender<ClusterInfo>,
    },
    /// The oldest placement epoch a session or share of this node reads (`None`: none runs).
    OldestEpoch {
        /// The reply.
        reply: oneshot::Sender<Option<Epoch>>,
    },
}

/// Where the manager's messages to other nodes go: straight onto the peer's connection, from
/// within the manager's task (no task of its own in between).
pub trait PeerOut: Send {
    /// Sends `msg` to node `to`; a message to a node that cannot be reached is dropped, as a
    /// lost connection would drop it (the cluster core's timeouts cover both).
    fn send(&mut self, to: NodeId, msg: &Message);
}

/// A node's link to the rest of the cluster, when it is in one.
pub(crate) struct ClusterLink {
    /// The control connections to peers (`cluster::ControlOut`).
    pub(crate) out: Box<dyn PeerOut>,
    /// The shared store.
    pub(crate) store: Arc<isochron_diskio::Store>,
    /// The disks this node owns: its shares read only these.
    pub(crate) local_disks: Arc<std::collections::BTreeSet<DiskId>>,
    /// What this node's IO knows of the cluster (whether etcd answers).
    pub(crate) view: Arc<crate::cluster_view::ClusterView>,
}

type Reply = oneshot::Sender<Response<Vec<u8>>>;

/// The owner of the node core and of the ends it works through.
pub(crate) struct Manager {
    core: NodeCore,
    clock: Clock,
    sched: Sender<SchedCommand>,
    sender: Senders,
    cname: String,
    /// The manager's own channel, for the scheduler's admission decisions.
    me: mpsc::UnboundedSender<SessionCommand>,
    /// The control connections to peers (a cluster).
    peers: Option<Box<dyn PeerOut>>,
    /// Each open connection's frame queue (interleaved media, and closing it).
    conns: HashMap<ConnId, mpsc::Sender<OutFrame>>,
    /// Requests the core has not answered yet, with their connections (a closed connection's
    /// are dropped: nobody reads their answers).
    replies: HashMap<Ticket, (ConnId, Reply)>,
    next_ticket: u64,
    /// The chunks of each live feed's edge that its viewers may still be handed: each held
    /// once, given to every viewer by reference.
    chunks: HashMap<ObjectId, HashMap<BlockIndex, SharedBlock>>,
    /// Feeds that ended: their chunks go once what the end decided is carried out.
    ended_feeds: Vec<ObjectId>,
}

impl Manager {
    /// A manager around `core`; in a cluster when `link` is given (this node is `node`,
    /// called `name`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        core: ServerCore,
        library: Arc<Library>,
        clock: Clock,
        sched: Sender<SchedCommand>,
        sender: Senders,
        cname: String,
        me: mpsc::UnboundedSender<SessionCommand>,
        node: (NodeId, String),
        link: Option<ClusterLink>,
        (degrade, live_window): (bool, std::time::Duration),
    ) -> Self {
        // The Unix time of the clock's zero: anchors travel as Unix time between nodes.
        let unix_now =
            SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
        let unix_base_ns = unix_now.saturating_sub(clock.now().as_nanos());
        let config = NodeConfig {
            node: node.0,
            name: node.1,
            unix_base_ns,
            cluster: link.as_ref().map(|l| (Arc::clone(&l.local_disks), l.store.replication())),
            degrade,
            live: isochron_live::EdgeConfig {
                window: live_window,
                ..isochron_live::EdgeConfig::default()
            },
        };
        let shared = link.as_ref().map(|l| (Arc::clone(&l.store), Arc::clone(&l.view)));
        let catalog = Arc::new(NodeCatalog { library, shared });
        Self {
            core: NodeCore::new(config, core, catalog),
            clock,
            sched,
            sender,
            cname,
            me,
            peers: link.map(|l| l.out),
            conns: HashMap::new(),
            replies: HashMap::new(),
            next_ticket: 0,
            chunks: HashMap::new(),
            ended_feeds: Vec::new(),
        }
    }

    /// Runs until every command sender is gone.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<SessionCommand>) {
        // The cluster core's timers (heartbeats first) are due at most a heartbeat apart.
        let mut tick = tokio::time::interval(self.core.tick());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => {
                        // How far the senders have got, fresh for whichever call into the
                        // cluster core comes first after a stall: it re-pins the relayed
                        // sessions by the senders' lag (`ClusterCore::repin_relayed`), and a
                        // task that only waited for the CPU while they sent must not.
                        let now = self.clock.now();
                        self.core.handle_sent_through(self.sender.sent_through().unwrap_or(now));
                        self.handle(cmd);
                    }
                    None => break,
                },
                _ = tick.tick() => {
                    let now = self.clock.now();
                    // No shard playing a stream: nothing due is unsent.
                    self.core.handle_sent_through(self.sender.sent_through().unwrap_or(now));
                    self.core.handle_timeout(now);
                }
            }
            self.carry_out();
            for feed in self.ended_feeds.drain(..) {
                self.chunks.remove(&feed);
            }
        }
    }

    fn handle(&mut self, cmd: SessionCommand) {
        let now = self.clock.now();
        match cmd {
            SessionCommand::Request { conn, req, reply } => {
                let ticket = Ticket(self.next_ticket);
                self.next_ticket += 1;
                self.replies.insert(ticket, (conn.id, reply));
                self.core.handle_request(now, &conn, &req, ticket);
            }
            SessionCommand::ConnOpened { conn, frames } => {
                self.conns.insert(conn, frames);
                self.core.handle_conn_opened(conn);
            }
            SessionCommand::ConnClosed { conn } => {
                self.conns.remove(&conn);
                self.core.handle_conn_closed(now, conn);
                self.replies.retain(|_, (c, _)| *c != conn);
            }
            SessionCommand::Rtcp { media_ssrcs, reports, nacked } => {
                self.core.handle_rtcp(now, &media_ssrcs, &reports, &nacked);
            }
            SessionCommand::InterleavedRtcp { conn, channel, reports } => {
                self.core.handle_interleaved_rtcp(now, conn, channel, &reports);
            }
            SessionCommand::ConnQueue { conn, delay } => {
                self.core.handle_conn_queue(now, conn, delay);
            }
            SessionCommand::ShareEnded { stream, run, report } => {
                self.core.handle_share_ended(now, stream, run, report);
            }
            SessionCommand::ShareStopped { stream, run, report } => {
                self.core.handle_share_stopped(now, stream, run, report);
            }
            SessionCommand::Admitted { key, open, decision } => {
                self.core.handle_admitted(now, key, open, decision);
            }
            SessionCommand::ReadFailed { stream, error } => {
                self.core.handle_read_failed(now, stream, error);
            }
            SessionCommand::Peer { from, msg } => self.core.handle_message(now, from, *msg),
            SessionCommand::PeerClosed { from } => self.core.handle_peer_closed(now, from),
            SessionCommand::Member { info, relay } => self.core.handle_member(now, info, relay),
            SessionCommand::Forget { id } => self.core.handle_forget(now, id),
            SessionCommand::FeedAnnounced { feed, tracks } => {
                self.chunks.entry(feed).or_default();
                self.core.handle_feed(now, FeedEvent::Announced { feed, tracks });
            }
            SessionCommand::FeedOpened { feed, zero, tracks } => {
                // Its clock: a packet is due to viewers VIEWER_DELAY after it arrived.
                let since_zero = zero.elapsed();
                let wall = now.saturating_sub(since_zero) + isochron_live::VIEWER_DELAY;
                let anchor = isochron_sched::Anchor { wall, media: isochron_base::MediaTime::ZERO };
                self.chunks.entry(feed).or_default();
                self.core.handle_feed(now, FeedEvent::Opened { feed, anchor, tracks });
            }
            SessionCommand::FeedChunk { feed, info, block } => {
                if let Some(held) = self.chunks.get_mut(&feed) {
                    held.insert(info.index, block);
                    self.core.handle_feed(now, FeedEvent::Chunk { feed, info });
                }
            }
            SessionCommand::FeedCommitted { feed } => {
                self.core.handle_feed(now, FeedEvent::Committed { feed });
            }
            SessionCommand::FeedEnded { feed } => {
                self.core.handle_feed(now, FeedEvent::Ended { feed });
                self.ended_feeds.push(feed);
            }
            SessionCommand::AllocateStream { reply } => {
                let _ = reply.send(self.core.allocate_stream());
            }
            SessionCommand::List { reply } => {
                let core = &self.core;
                let _ = reply.send((core.sessions(), core.abr_stats(), core.takeover_stats()));
            }
            SessionCommand::Cluster { reply } => {
                let _ = reply.send(self.core.cluster_info(now));
            }
            SessionCommand::OldestEpoch { reply } => {
                let _ = reply.send(self.core.oldest_epoch());
            }
        }
    }

    /// Carries out what the node core output, in order.
    fn carry_out(&mut self) {
        while let Some(output) = self.core.poll_output() {
            match output {
                NodeOutput::Respond { ticket, response } => {
                    if let Some((_, reply)) = self.replies.remove(&ticket) {
                        let _ = reply.send(response);
                    }
                }
                NodeOutput::Admit { key, open, req, name } => self.admit(key, open, req, name),
                NodeOutput::Read(op) => {
                    let _ = self.sched.send(SchedCommand::Read(op));
                }
                NodeOutput::AddStream { setup, transports, rtx, relay } => {
                    let transports = transports.into_iter().map(|t| self.transport(t?)).collect();
                    let cname = self.cname.clone();
                    let _ = self.sender.send(SenderCommand::Add {
                        setup,
                        transports,
                        cname,
                        rtx,
                        relay,
                    });
                }
                NodeOutput::Send(op) => {
                    let _ = self.sender.send(SenderCommand::Stream(op));
                }
                NodeOutput::Transmit { to, msg } => {
                    if let Some(out) = &mut self.peers {
                        out.send(to, &msg);
                    }
                }
                NodeOutput::Deliver { feed, stream, run, index } => {
                    let Some(block) = self.chunks.get(&feed).and_then(|c| c.get(&index)) else {
                        continue;
                    };
                    let block = Arc::clone(block);
                    let cmd = SenderCommand::Block { stream, run, index, block, anchor: None };
                    let _ = self.sender.send(cmd);
                }
                NodeOutput::Grow { plan } => {
                    let _ = self.sched.send(SchedCommand::GrowPlan { plan });
                }
                NodeOutput::Evict { feed, index } => {
                    if let Some(c) = self.chunks.get_mut(&feed) {
                        c.remove(&index);
                    }
                }
                NodeOutput::CloseConn { conn, after } => {
                    if let Some(frames) = self.conns.get(&conn).cloned() {
                        tokio::spawn(async move {
                            tokio::time::sleep(after).await;
                            frames.send(OutFrame::Close).await
                        });
                    }
                }
            }
        }
    }

    /// Asks the scheduler thread to admit share `key`; the decision comes back on the
    /// manager's own channel (`None`: the scheduler thread is gone).
    fn admit(&self, key: ShareKey, open: u32, req: OpenStream, name: String) {
        let me = self.me.clone();
        let reply = DecisionSink::new(move |d: Decision| {
            let _ = me.send(SessionCommand::Admitted { key, open, decision: Some(d) });
        });
        if self.sched.send(SchedCommand::Open { req, name, reply }).is_err() {
            let _ = self.me.send(SessionCommand::Admitted { key, open, decision: None });
        }
    }

    /// The sender's transport for a track the core names: a connection becomes its frame
    /// queue (`None`: it closed meanwhile).
    fn transport(&self, t: Transport) -> Option<StreamTransport> {
        match t {
            Transport::Udp { rtp, rtcp } => Some(StreamTransport::Udp { rtp, rtcp }),
            Transport::Interleaved { conn, rtp_channel, rtcp_channel } => {
                let frames = self.conns.get(&conn)?.clone();
                Some(StreamTransport::Interleaved { frames, rtp_channel, rtcp_channel })
            }
        }
    }
}

/// The node core's view of the objects: the library, and in a cluster the shared store (its
/// placement, its catalog for objects not polled yet) and whether etcd answers.
struct NodeCatalog {
    library: Arc<Library>,
    shared: Option<(Arc<isochron_diskio::Store>, Arc<crate::cluster_view::ClusterView>)>,
}

impl isochron_rtsp::server::Library for NodeCatalog {
    fn lookup(&self, name: &str) -> Option<Presentation> {
        self.library.lookup(name)
    }
}

impl Catalog for NodeCatalog {
    fn by_id(&self, id: ObjectId) -> Option<Arc<ObjectEntry>> {
        self.library.by_id(id)
    }

    fn shared_entry(&self, id: ObjectId) -> Option<Arc<ObjectEntry>> {
        let (store, _) = self.shared.as_ref()?;
        let rec = store.catalog().objects().ok()?.into_iter().find(|r| r.id == id)?;
        let entry = Arc::new(crate::library::entry(store, rec));
        self.library.insert(Arc::clone(&entry));
        Some(entry)
    }

    fn at_epoch(&self, entry: Arc<ObjectEntry>, epoch: Epoch) -> Arc<ObjectEntry> {
        let Some((store, _)) = self.shared.as_ref() else { return entry };
        if entry.epoch == epoch {
            return entry;
        }
        if epoch > store.current_epoch() {
            // The origin saw an operation this node has not polled yet.
            if let Err(e) = store.refresh() {
                warn!(error = %e, "reading the store metadata");
            }
        }
        let planned = crate::library::entry_at(store, entry.record.clone(), epoch);
        tracing::debug!(object = %entry.record.name, from = %entry.epoch, to = %epoch, "planned at the origin's epoch");
        Arc::new(planned)
    }

    fn disk_owners(&self) -> BTreeMap<DiskId, String> {
        let Some((store, _)) = self.shared.as_ref() else { return BTreeMap::new() };
        let meta = store.meta();
        meta.disks.iter().filter_map(|d| Some((d.id, d.owner.clone()?))).collect()
    }

    fn membership_confirmed(&self) -> bool {
        self.shared
            .as_ref()
            .is_none_or(|(_, view)| view.etcd_ok.load(std::sync::atomic::Ordering::Relaxed))
    }
}
