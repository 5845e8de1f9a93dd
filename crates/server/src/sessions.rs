//! The session manager: the one owner of the RTSP session core.
//!
//! RTSP requests from every connection, RTCP liveness from the RTCP socket and from interleaved
//! channels, end-of-stream notices from the sender, and the reaping tick all arrive as
//! [`SessionCommand`]s on one channel. The manager feeds them to the sans-IO
//! [`ServerCore`], and carries out the data-plane actions the
//! core hands back: admission and starts at the scheduler thread, play/pause at the sender thread.
//!
//! PLAY order matters (rtsp-interop §1.8): the response (with RTP-Info computed from the start
//! packet's GSN and send time) is returned to the connection before the first packet can leave;
//! the scheduler anchors the stream's clock `startup_delay` after its first block is in memory.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use isochron_base::{BlockIndex, MediaTime, Pace, StreamId};
use isochron_dataplane::clock::Clock;
use isochron_dataplane::pacer::StreamSetup;
use isochron_dataplane::sched_thread::SchedCommand;
use isochron_dataplane::sender::{OutFrame, SenderCommand, StreamTransport};
use isochron_rtsp::rtsp_types::{Request, Response};
use isochron_rtsp::server::{
    ConnId, ConnInfo, Event, Handled, PauseAction, PlayAction, PlayOutcome, PlayStart, Position,
    RateAction, ServerCore, SessionTransport,
};
use isochron_sched::{Decision, OpenStream};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

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
    },
    /// RTCP arrived interleaved on a connection.
    InterleavedRtcp {
        /// The connection.
        conn: ConnId,
        /// The channel.
        channel: u8,
    },
    /// The sender sent a stream's last packet.
    EndOfStream {
        /// The stream.
        stream: StreamId,
        /// Position after the last packet.
        at: Position,
        /// The sequence number the next packet would have had.
        next_seq: u16,
    },
    /// A block of a stream could not be read.
    ReadFailed {
        /// The stream.
        stream: StreamId,
        /// Why.
        error: String,
    },
    /// Allocate a stream id for a recording, from the sequence the RTSP sessions' streams use.
    AllocateStream {
        /// The id.
        reply: oneshot::Sender<StreamId>,
    },
    /// List the sessions.
    List {
        /// The reply.
        reply: oneshot::Sender<Vec<SessionInfo>>,
    },
}

/// A session as the HTTP API shows it.
#[derive(Clone, Debug, Serialize)]
pub struct SessionInfo {
    /// The RTSP session id.
    pub id: String,
    /// The stream id.
    pub stream: u64,
    /// The object's name.
    pub object: String,
    /// `ready`, `playing` or `paused`.
    pub state: String,
    /// `udp` or `tcp`.
    pub transport: String,
    /// The client: where UDP media goes (`ip:rtp_port`), or the RTSP connection's peer for
    /// interleaved (TCP) media.
    pub client: String,
    /// The object's mean bit rate, bit/s.
    pub bitrate_bps: u64,
    /// Blocks of this stream not in memory by their deadline (the scheduler's per-stream count);
    /// filled in by the HTTP API.
    pub missed_deadlines: u64,
    /// Blocks the scheduler has delivered to the sender for this stream.
    pub blocks_delivered: u64,
    /// Media time of the last packet sent, seconds into the object (the sender's; filled in by
    /// the HTTP API).
    pub position_s: f64,
    /// The pace (1.0 = the object's own timing), from the sender.
    pub pace: f64,
    /// RTP packets sent to this session (the sender's count).
    pub packets_sent: u64,
    /// RTP payload bytes sent to this session.
    pub bytes_sent: u64,
}

struct StreamState {
    entry: Arc<ObjectEntry>,
    run: u64,
    opened: bool,
    /// Whether the sender is (or is about to be) sending this stream.
    sending: bool,
    /// The sequence number the stream's next packet gets; `None` before its first PLAY.
    next_seq: Option<u16>,
}

/// Everything the manager needs.
pub(crate) struct Manager {
    pub(crate) core: ServerCore,
    pub(crate) library: Arc<Library>,
    pub(crate) clock: Clock,
    pub(crate) sched: Sender<SchedCommand>,
    pub(crate) sender: Sender<SenderCommand>,
    pub(crate) cname: String,
    pub(crate) conns: HashMap<ConnId, mpsc::Sender<OutFrame>>,
    /// Each open connection's client address, learnt from its requests (for the API).
    peers: HashMap<ConnId, std::net::SocketAddr>,
    streams: HashMap<StreamId, StreamState>,
    /// Paces asked for before the stream's first PLAY, applied when it opens.
    pending_paces: HashMap<StreamId, Pace>,
}

impl Manager {
    /// A manager around `core`.
    pub(crate) fn new(
        core: ServerCore,
        library: Arc<Library>,
        clock: Clock,
        sched: Sender<SchedCommand>,
        sender: Sender<SenderCommand>,
        cname: String,
    ) -> Self {
        Self {
            core,
            library,
            clock,
            sched,
            sender,
            cname,
            conns: HashMap::new(),
            peers: HashMap::new(),
            streams: HashMap::new(),
            pending_paces: HashMap::new(),
        }
    }

    /// Runs until every command sender is gone.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<SessionCommand>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => self.handle(cmd).await,
                    None => break,
                },
                _ = tick.tick() => {
                    let now = self.clock.now();
                    self.core.handle_timeout(now);
                }
            }
            self.drain_events();
        }
    }

    async fn handle(&mut self, cmd: SessionCommand) {
        let now = self.clock.now();
        match cmd {
            SessionCommand::Request { conn, req, reply } => {
                self.peers.insert(conn.id, conn.peer);
                let resp = match self.core.handle_request(now, &conn, &req, &*self.library) {
                    Handled::Respond(r) => r,
                    Handled::Play(action) => self.play(action).await,
                    Handled::Pause(action) => self.pause(action).await,
                    Handled::Rate(action) => self.rate(action).await,
                };
                let _ = reply.send(resp);
            }
            SessionCommand::ConnOpened { conn, frames } => {
                self.conns.insert(conn, frames);
            }
            SessionCommand::ConnClosed { conn } => {
                self.conns.remove(&conn);
                self.peers.remove(&conn);
                self.core.handle_conn_closed(now, conn);
            }
            SessionCommand::Rtcp { media_ssrcs } => {
                for ssrc in media_ssrcs {
                    self.core.handle_rtcp(now, ssrc);
                }
            }
            SessionCommand::InterleavedRtcp { conn, channel } => {
                self.core.handle_interleaved_rtcp(now, conn, channel);
            }
            SessionCommand::EndOfStream { stream, at, next_seq } => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.sending = false;
                    s.next_seq = Some(next_seq);
                }
                self.core.handle_end_of_stream(now, stream, at);
            }
            SessionCommand::ReadFailed { stream, error } => {
                warn!(%stream, %error, "ending stream: a block could not be read");
                if let Some((at, _)) = self.stop_sender(stream).await {
                    // The client gets no more data; the session stays until TEARDOWN or timeout.
                    self.core.handle_end_of_stream(now, stream, at);
                }
            }
            SessionCommand::AllocateStream { reply } => {
                let _ = reply.send(self.core.allocate_stream());
            }
            SessionCommand::List { reply } => {
                let _ = reply.send(self.list());
            }
        }
    }

    async fn play(&mut self, action: PlayAction) -> Response<Vec<u8>> {
        let now = self.clock.now();
        let stream = action.stream;
        let entry = match self.streams.get(&stream) {
            Some(s) => Arc::clone(&s.entry),
            None => match self.library.by_id(action.object) {
                Some(e) => e,
                None => {
                    let outcome = PlayOutcome::Failed { reason: "object was removed".into() };
                    return self.core.finish_play(now, action, outcome);
                }
            },
        };
        if !self.streams.get(&stream).is_some_and(|s| s.opened)
            && let Err(outcome) = self.open(stream, &entry).await
        {
            return self.core.finish_play(now, action, outcome);
        }
        let rec = &entry.record;
        let start = match action.start {
            PlayStart::Seek(t) => seek_position(rec, t),
            PlayStart::Resume(pos) => pos,
            PlayStart::Beginning => seek_position(rec, MediaTime::ZERO),
        };
        let from = entry.plan.block_of(start.gsn).unwrap_or(BlockIndex(0));
        // A seek while playing: stop first, to learn where numbering stands.
        if self.streams.get(&stream).is_some_and(|s| s.sending) {
            self.stop_sender(stream).await;
        }
        let state = self.streams.get_mut(&stream).expect("opened above");
        state.run += 1;
        state.sending = true;
        let run = state.run;
        // Numbering continues across seeks: the start packet gets the next sequence number.
        let seq_offset = match state.next_seq {
            Some(next) => next.wrapping_sub(start.gsn.0 as u16),
            None => self.core.session_by_stream(stream).map_or(0, |v| v.seq_offset()),
        };
        let end = action.end;
        let _ = self.sender.send(SenderCommand::Play { stream, run, start, end, seq_offset });
        let _ = self.sched.send(SchedCommand::Start { stream, run, from, media: start.time });
        debug!(%stream, run, gsn = %start.gsn, npt = %start.time, seq_offset, "play");
        // An open range unless the client asked to stop early (see PlayOutcome::Started).
        let end = end.filter(|e| *e < rec.duration);
        self.core.finish_play(now, action, PlayOutcome::Started { first: start, end, seq_offset })
    }

    /// Stops the sender for `stream` and the scheduler's reads; returns where it stopped.
    async fn stop_sender(&mut self, stream: StreamId) -> Option<(Position, u16)> {
        let (tx, rx) = oneshot::channel();
        let _ = self.sender.send(SenderCommand::Pause { stream, reply: tx });
        let stopped = rx.await.ok().flatten();
        let _ = self.sched.send(SchedCommand::Stop { stream });
        if let Some(s) = self.streams.get_mut(&stream) {
            s.sending = false;
            if let Some((_, next)) = stopped {
                s.next_seq = Some(next);
            }
        }
        stopped
    }

    /// Admits the stream at the scheduler and registers it with the sender.
    async fn open(
        &mut self,
        stream: StreamId,
        entry: &Arc<ObjectEntry>,
    ) -> Result<(), PlayOutcome> {
        let (tx, rx) = oneshot::channel();
        let req = OpenStream {
            stream,
            plan: Arc::clone(&entry.plan),
            avg_bitrate: entry.record.avg_bitrate,
            peak_bitrate: entry.record.peak_bitrate,
            local: None,
        };
        let name = entry.record.name.clone();
        let _ = self.sched.send(SchedCommand::Open { req, name, reply: tx });
        match rx.await {
            Ok(Decision::Admit) => {}
            Ok(Decision::Reject(reason)) => {
                info!(%stream, object = %entry.record.name, %reason, "admission: rejected");
                return Err(PlayOutcome::Rejected { reason: reason.to_string() });
            }
            Err(_) => return Err(PlayOutcome::Failed { reason: "scheduler stopped".into() }),
        }
        let Some(view) = self.core.session_by_stream(stream) else {
            return Err(PlayOutcome::Failed { reason: "session vanished".into() });
        };
        let transport = match view.transport() {
            SessionTransport::Udp { client_rtp, client_rtcp } => {
                StreamTransport::Udp { rtp: *client_rtp, rtcp: *client_rtcp }
            }
            SessionTransport::Interleaved { conn, rtp_channel, rtcp_channel } => {
                let Some(frames) = self.conns.get(conn) else {
                    return Err(PlayOutcome::Failed { reason: "connection closed".into() });
                };
                StreamTransport::Interleaved {
                    frames: frames.clone(),
                    rtp_channel: *rtp_channel,
                    rtcp_channel: *rtcp_channel,
                }
            }
        };
        let last_block = BlockIndex(entry.plan.blocks.len().saturating_sub(1) as u32);
        let setup = StreamSetup {
            stream,
            ssrc: view.ssrc(),
            seq_offset: view.seq_offset(),
            rtp_ts_offset: view.rtp_ts_offset(),
            last_block,
        };
        let _ =
            self.sender.send(SenderCommand::Add { setup, transport, cname: self.cname.clone() });
        if let Some(pace) = self.pending_paces.remove(&stream) {
            let (reply, _) = oneshot::channel();
            let _ = self.sender.send(SenderCommand::Pace { stream, pace, reply });
        }
        info!(%stream, object = %entry.record.name, "admission: admitted");
        self.streams.insert(
            stream,
            StreamState {
                entry: Arc::clone(entry),
                run: 0,
                opened: true,
                sending: false,
                next_seq: None,
            },
        );
        Ok(())
    }

    /// MTFC: paces the session's stream at the pace asked for. A stream not opened yet (before
    /// its first PLAY) gets it when it opens.
    async fn rate(&mut self, action: RateAction) -> Response<Vec<u8>> {
        let (tx, rx) = oneshot::channel();
        let _ = self.sender.send(SenderCommand::Pace {
            stream: action.stream,
            pace: action.pace,
            reply: tx,
        });
        let applied = match rx.await.ok().flatten() {
            Some(p) => p,
            None => {
                self.pending_paces.insert(action.stream, action.pace);
                action.pace
            }
        };
        debug!(stream = %action.stream, pace = %applied, "rate change");
        let now = self.clock.now();
        self.core.finish_rate(now, action, applied)
    }

    async fn pause(&mut self, action: PauseAction) -> Response<Vec<u8>> {
        let stream = action.stream;
        // A stream the sender does not know has sent nothing: it is at its start.
        let at = match self.stop_sender(stream).await {
            Some((at, _)) => at,
            None => self
                .streams
                .get(&stream)
                .map_or(Position::START, |s| seek_position(&s.entry.record, MediaTime::ZERO)),
        };
        let now = self.clock.now();
        self.core.finish_pause(now, action, at)
    }

    fn drain_events(&mut self) {
        while let Some(ev) = self.core.poll_event() {
            let Event::Closed { session, stream, reason } = ev;
            debug!(%stream, ?session, ?reason, "session closed");
            self.pending_paces.remove(&stream);
            if self.streams.remove(&stream).is_some() {
                let _ = self.sender.send(SenderCommand::Remove { stream });
                let _ = self.sched.send(SchedCommand::Close { stream });
            }
        }
    }

    fn list(&self) -> Vec<SessionInfo> {
        self.core
            .sessions()
            .map(|v| {
                let entry = self.library.by_id(v.object());
                let (transport, client) = match v.transport() {
                    SessionTransport::Udp { client_rtp, .. } => ("udp", client_rtp.to_string()),
                    SessionTransport::Interleaved { conn, .. } => {
                        ("tcp", self.peers.get(conn).map_or_else(String::new, ToString::to_string))
                    }
                };
                SessionInfo {
                    id: v.id().to_string(),
                    stream: v.stream().0,
                    object: entry
                        .as_ref()
                        .map_or_else(|| v.object().to_string(), |e| e.record.name.clone()),
                    state: format!("{:?}", v.state()).to_lowercase(),
                    transport: transport.into(),
                    client,
                    bitrate_bps: entry.as_ref().map_or(0, |e| e.record.avg_bitrate.0),
                    missed_deadlines: 0,
                    blocks_delivered: 0,
                    position_s: v.position().map_or(0.0, |p| p.time.as_secs_f64()),
                    pace: 1.0,
                    packets_sent: 0,
                    bytes_sent: 0,
                }
            })
            .collect()
    }
}

/// Where playing from `t` starts: the object's seek point for `t` (rtsp-interop §3.2).
fn seek_position(rec: &isochron_store::catalog::ObjectRecord, t: MediaTime) -> Position {
    let sp = rec.seek(t);
    Position { gsn: sp.gsn, time: sp.time }
}
