//! Viewers of live feeds (`docs/design/live.md`, step 2): a PLAY of a feed being published
//! joins its live edge ([`isochron_live::Edge`]) instead of opening a stored object's shares.
//!
//! A viewer is a stream of the sender like any other, with no last block: its packets come in
//! the feed's chunks, stamped and paced by its pacer on the feed's clock (each packet due a
//! fixed delay after it arrived from the publisher, [`FeedEvent::Opened`]'s anchor), numbered
//! as the recording numbers them (RTP-Info from the seek point it starts at). No admission: the
//! disks are not read, and the feed's rate was admitted once, for its recording. The feed's
//! end is each viewer's RTCP BYE (RFC 3550 §6.6); the player then tears down.

use std::sync::Arc;

use isochron_base::{BlockIndex, Instant, ObjectId, Pace, Position, RunId, StreamId};
use isochron_cluster::ShareKey;
use isochron_live::{ChunkInfo, Edge, EdgeOutput};
use isochron_pacing::pacer::{PlayRun, RtcpMode, SeqOffsets, StreamOp, StreamSetup, TrackStamp};
use isochron_rtsp::server::{PauseAction, PlayAction, PlayOutcome, PlayStart, Rates};
use isochron_sched::Anchor;
use tracing::{debug, info};

use super::NodeCore;
use crate::output::{NodeOutput, Ticket};

/// What a feed's recording tells the node about the feed.
#[derive(Clone, Debug)]
pub enum FeedEvent {
    /// A feed was admitted, before its first packet: viewers may set up and PLAY (answered
    /// once a key frame has come).
    Announced {
        /// The object it is recorded as.
        feed: ObjectId,
        /// Each track's RTP clock rate and payload type.
        tracks: Vec<(u32, u8)>,
    },
    /// A feed began: it is recorded as `feed`, its packets are due to viewers on `anchor`'s
    /// clock, its tracks have these clock rates and payload types (as its viewers' SDP says).
    Opened {
        /// The object it is recorded as.
        feed: ObjectId,
        /// Its clock: a packet sent (arrived) at media time `t` is due at
        /// `anchor.wall + (t − anchor.media)`.
        anchor: Anchor,
        /// Each track's RTP clock rate and payload type.
        tracks: Vec<(u32, u8)>,
    },
    /// A chunk of the feed was sealed (its bytes are with the owner, under `feed` and
    /// `info.index`).
    Chunk {
        /// The feed.
        feed: ObjectId,
        /// The chunk.
        info: ChunkInfo,
    },
    /// The feed's recording was committed further: the catalog's entry of `feed` is a longer
    /// prefix of it (a viewer playing the recording from disk reads on into it).
    Committed {
        /// The feed.
        feed: ObjectId,
    },
    /// The feed ended (the catalog's entry of `feed` is the whole recording, as far as it was
    /// committed).
    Ended {
        /// The feed.
        feed: ObjectId,
    },
}

/// A feed with viewers on this node.
pub(super) struct Feed {
    edge: Edge,
    /// Its clock, from its first packet on.
    anchor: Option<Anchor>,
    tracks: Vec<(u32, u8)>,
}

/// A viewer of a feed.
pub(super) struct Viewer {
    feed: ObjectId,
    run: RunId,
    /// Each track's sequence-number offset, as its SETUP gave it (a run never changes it), and
    /// how many tracks it has.
    seq_offsets: SeqOffsets,
    tracks: usize,
    /// The PLAY to answer once it has joined.
    waiting: Option<(PlayAction, Ticket)>,
    /// Where it started.
    first: Position,
}

impl NodeCore {
    /// What a feed's recording says (see [`FeedEvent`]).
    pub fn handle_feed(&mut self, now: Instant, ev: FeedEvent) {
        match ev {
            FeedEvent::Announced { feed, tracks } => {
                let edge = Edge::new(self.live);
                self.feeds.entry(feed).or_insert(Feed { edge, anchor: None, tracks });
            }
            FeedEvent::Opened { feed, anchor, tracks } => {
                let f = self.feeds.entry(feed).or_insert_with(|| Feed {
                    edge: Edge::new(self.live),
                    anchor: None,
                    tracks: tracks.clone(),
                });
                f.anchor = Some(anchor);
                f.tracks = tracks;
            }
            FeedEvent::Chunk { feed, info } => {
                if let Some(f) = self.feeds.get_mut(&feed) {
                    f.edge.handle_chunk(now, info);
                    f.edge.handle_timeout(now);
                }
                self.edge_outputs(now, feed);
            }
            FeedEvent::Committed { feed } => self.recording_grew(feed),
            FeedEvent::Ended { feed } => {
                if let Some(f) = self.feeds.get_mut(&feed) {
                    f.edge.handle_end(now);
                }
                self.edge_outputs(now, feed);
                self.feeds.remove(&feed);
                self.recording_grew(feed);
            }
        }
        self.drive(now);
    }

    /// Feed `feed`'s recording was committed further, or ended: the sessions playing it from
    /// disk (time-shift further back than the edge keeps) read on into the new blocks, at the
    /// scheduler and, once it ended, the sender learns each one's last block (its BYE follows
    /// it). Only a single node plays a recording in progress (see [`NodeCore::play`]).
    fn recording_grew(&mut self, feed: ObjectId) {
        if self.local_disks.is_some() {
            // A cluster's sessions never play a recording in progress; the shares of a
            // finished one were planned on the whole of it.
            return;
        }
        let ended = !self.feeds.contains_key(&feed);
        let Some(entry) = self.catalog.by_id(feed) else {
            if ended {
                // Removed meanwhile: nothing more comes.
                let streams: Vec<StreamId> = self
                    .shares
                    .values()
                    .filter(|s| s.entry.record.id == feed && s.added)
                    .map(|s| s.stream)
                    .collect();
                for stream in streams {
                    self.send(StreamOp::Bye { stream, reason: None });
                }
            }
            return;
        };
        let blocks = entry.plan.blocks.len();
        let mut grown = false;
        let mut added = Vec::new();
        for share in self.shares.values_mut().filter(|s| s.entry.record.id == feed) {
            if share.entry.plan.blocks.len() < blocks {
                share.entry = Arc::clone(&entry);
                grown = true;
            }
            if share.added {
                added.push(share.stream);
            }
        }
        for o in self.origins.values_mut().filter(|o| o.entry.record.id == feed) {
            if o.entry.plan.blocks.len() < blocks {
                o.entry = Arc::clone(&entry);
            }
        }
        if grown {
            debug!(%feed, blocks, ended, "live: the recording's viewers read on");
            self.out.push_back(NodeOutput::Grow { plan: Arc::clone(&entry.plan) });
        }
        if ended && let Some(last) = blocks.checked_sub(1) {
            for stream in added {
                self.send(StreamOp::Last { stream, last: BlockIndex(last as u32) });
            }
        }
    }

    /// Whether a PLAY of feed `action.object` plays its recording from disk: on a single node,
    /// a `Range` start further back than the edge keeps (a time before its oldest seek point)
    /// that the recording has committed, or a PLAY resuming such a run after a PAUSE.
    pub(super) fn plays_recording(&self, action: &PlayAction) -> bool {
        if self.local_disks.is_some() {
            return false;
        }
        match action.start {
            PlayStart::Seek(t) => {
                let kept = self.feeds.get(&action.object).and_then(|f| f.edge.oldest_key());
                kept.is_some_and(|k| t < k.time)
                    && self
                        .catalog
                        .by_id(action.object)
                        .is_some_and(|e| e.record.seek_points.first().is_some_and(|p| p.time <= t))
            }
            PlayStart::Resume(_) => self.origins.contains_key(&action.stream),
            PlayStart::Beginning => false,
        }
    }

    /// A viewer of the edge goes to the recording on disk: it leaves the edge, and its stream
    /// goes (the recording's run adds its own, under the same id).
    pub(super) fn leave_edge(&mut self, now: Instant, stream: StreamId) {
        let Some(v) = self.viewers.remove(&stream) else { return };
        if let Some(f) = self.feeds.get_mut(&v.feed) {
            f.edge.handle_leave(stream);
        }
        self.send(StreamOp::Remove { stream });
        self.edge_outputs(now, v.feed);
    }

    /// A session playing a feed's recording from disk goes to the edge: its run and reservation
    /// end at once (the edge's viewer adds its own stream, under the same id). `Err`: it is
    /// busy with another request.
    pub(super) fn leave_recording(&mut self, now: Instant, stream: StreamId) -> Result<(), ()> {
        let Some(o) = self.origins.get(&stream) else { return Ok(()) };
        if o.waiting.is_some() {
            return Err(());
        }
        let opened = o.opened;
        self.origins.remove(&stream);
        self.room_freed |= opened;
        let key = ShareKey { origin: self.cluster.config().node, stream };
        self.forget_share(key);
        self.cluster.close(now, stream);
        Ok(())
    }

    /// Whether `object` is a feed in progress.
    pub(super) fn is_live(&self, object: ObjectId) -> bool {
        self.feeds.contains_key(&object)
    }

    /// A PLAY of a feed: the viewer joins its edge; the answer comes when it has (a seek point
    /// to start at). A PLAY of a viewer already watching starts it again at the edge.
    pub(super) fn play_live(&mut self, now: Instant, action: PlayAction, ticket: Ticket) {
        let stream = action.stream;
        let feed = action.object;
        if let Some(v) = self.viewers.get(&stream)
            && v.waiting.is_some()
        {
            let outcome = PlayOutcome::Failed { reason: "another request is in progress".into() };
            let response = self.rtsp.finish_play(now, action, outcome);
            self.respond(ticket, response);
            return;
        }
        if !self.viewers.contains_key(&stream) && !self.add_viewer(stream, feed) {
            let outcome = PlayOutcome::Failed { reason: "no transport to the client".into() };
            let response = self.rtsp.finish_play(now, action, outcome);
            self.respond(ticket, response);
            return;
        }
        let Some(v) = self.viewers.get_mut(&stream) else { return };
        v.run = v.run.next();
        v.waiting = Some((action, ticket));
        let run = v.run;
        // A `Range` start goes back into the feed (time-shift); without one, the live edge.
        let at = match v.waiting.as_ref().map(|(a, _)| a.start) {
            Some(PlayStart::Seek(t)) => Some(t),
            _ => None,
        };
        if let Some(f) = self.feeds.get_mut(&feed) {
            f.edge.handle_join(now, stream, run, at);
        }
        info!(%stream, %feed, "live: a viewer joins");
        self.edge_outputs(now, feed);
    }

    /// The sender's stream for a new viewer: each track as the client set it up, no last block.
    fn add_viewer(&mut self, stream: StreamId, feed: ObjectId) -> bool {
        let (Some(view), Some(f)) = (self.rtsp.session_by_stream(stream), self.feeds.get(&feed))
        else {
            return false;
        };
        let n = view.track_count();
        let mut tracks = Vec::with_capacity(n);
        let mut transports = vec![None; n];
        let mut seq_offsets = [0u16; isochron_base::MAX_TRACKS];
        for i in 0..n {
            let (clock_rate, payload_type) = f.tracks.get(i).copied().unwrap_or((90_000, 96));
            tracks.push(TrackStamp {
                ssrc: 0,
                rtp_ts_offset: 0,
                clock_rate,
                payload_type,
                enabled: false,
            });
        }
        for t in view.tracks() {
            let i = t.index();
            let Some(stamp) = tracks.get_mut(i) else { continue };
            stamp.ssrc = t.ssrc();
            stamp.rtp_ts_offset = t.rtp_ts_offset();
            stamp.enabled = true;
            seq_offsets[i] = t.seq_offset();
            transports[i] = self.client_transport(t.transport());
            if transports[i].is_none() {
                return false;
            }
        }
        if transports.iter().all(Option::is_none) {
            return false;
        }
        let setup = StreamSetup {
            tracks,
            seq_offsets,
            rtcp: RtcpMode::AfterPackets,
            ..StreamSetup::whole(stream, 0, 0, 0, BlockIndex(u32::MAX))
        };
        let rtx = vec![None; n];
        self.out.push_back(NodeOutput::AddStream { setup, transports, rtx, relay: None });
        let first = Position::start_of(n);
        let viewer = Viewer { feed, run: RunId(0), seq_offsets, tracks: n, waiting: None, first };
        self.viewers.insert(stream, viewer);
        true
    }

    /// A PAUSE of a viewer: it leaves the edge (a PLAY joins it again, at the edge).
    pub(super) fn pause_live(&mut self, now: Instant, action: PauseAction, ticket: Ticket) {
        let stream = action.stream;
        let Some(v) = self.viewers.get_mut(&stream) else { return };
        let (feed, run, first) = (v.feed, v.run, v.first);
        if let Some((play, play_ticket)) = v.waiting.take() {
            let outcome = PlayOutcome::Failed { reason: "paused before it started".into() };
            let response = self.rtsp.finish_play(now, play, outcome);
            self.respond(play_ticket, response);
        }
        if let Some(f) = self.feeds.get_mut(&feed) {
            f.edge.handle_leave(stream);
        }
        self.send(StreamOp::Stop { stream, run, cutoff: None, before: None });
        let response = self.rtsp.finish_pause(now, action, first);
        self.respond(ticket, response);
        self.edge_outputs(now, feed);
    }

    /// A viewer's session closed.
    pub(super) fn close_live(&mut self, now: Instant, stream: StreamId) {
        let Some(v) = self.viewers.remove(&stream) else { return };
        if let Some(f) = self.feeds.get_mut(&v.feed) {
            f.edge.handle_leave(stream);
        }
        self.send(StreamOp::Remove { stream });
        debug!(%stream, feed = %v.feed, "live: a viewer leaves");
        self.edge_outputs(now, v.feed);
    }

    /// Starts the viewers whose start delay has passed.
    pub(super) fn live_timeout(&mut self, now: Instant) {
        let feeds: Vec<ObjectId> = self.feeds.keys().copied().collect();
        for feed in feeds {
            if let Some(f) = self.feeds.get_mut(&feed) {
                f.edge.handle_timeout(now);
            }
            self.edge_outputs(now, feed);
        }
    }

    /// Carries out what feed `feed`'s edge decided.
    fn edge_outputs(&mut self, now: Instant, feed: ObjectId) {
        loop {
            let Some(f) = self.feeds.get_mut(&feed) else { return };
            let anchor = f.anchor;
            let Some(out) = f.edge.poll_output() else { return };
            match out {
                // A seek point came in a chunk, so the first packet (the clock) came before it.
                EdgeOutput::Joined { viewer, run, first, from } => {
                    if let Some(anchor) = anchor {
                        self.viewer_joined(now, viewer, run, first, from, anchor);
                    }
                }
                EdgeOutput::Deliver { viewer, run, index } => {
                    self.out.push_back(NodeOutput::Deliver { feed, stream: viewer, run, index });
                }
                EdgeOutput::Evict { index } => {
                    self.out.push_back(NodeOutput::Evict { feed, index });
                }
                EdgeOutput::Ended { viewer, last, .. } => {
                    // A PLAY still waiting for a seek point will not get one.
                    let waiting = self.viewers.get_mut(&viewer).and_then(|v| v.waiting.take());
                    if let Some((action, ticket)) = waiting {
                        let reason = "the feed ended before a key frame came".into();
                        let response =
                            self.rtsp.finish_play(now, action, PlayOutcome::Failed { reason });
                        self.respond(ticket, response);
                    }
                    // Its BYE after its last packet, however far behind the edge it plays.
                    match last {
                        Some(last) => self.send(StreamOp::Last { stream: viewer, last }),
                        None => self.send(StreamOp::Bye { stream: viewer, reason: None }),
                    }
                }
            }
        }
    }

    /// A viewer has a seek point to start at: its PLAY is answered, then its run starts.
    fn viewer_joined(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        first: Position,
        from: BlockIndex,
        anchor: Anchor,
    ) {
        let Some(v) = self.viewers.get_mut(&stream) else { return };
        if v.run != run {
            return;
        }
        v.first = first;
        let Some((action, ticket)) = v.waiting.take() else { return };
        let (offsets, tracks) = (v.seq_offsets, v.tracks);
        // At the edge, the feed's clock: each packet a fixed delay after it arrived. Gone back
        // into it, its own from the seek point, once the answer is out; at a `Speed` (RFC 2326
        // §12.35) faster, until it reaches the edge and follows it.
        let shifted = matches!(action.start, PlayStart::Seek(_));
        let speed = action.speed.filter(|_| shifted);
        let anchor = if shifted {
            Anchor { wall: now + self.live.start_delay, media: first.time }
        } else {
            anchor
        };
        let outcome = PlayOutcome::Started {
            first,
            end: None,
            seq_offsets: offsets[..tracks].to_vec(),
            rates: Rates { scale: None, speed },
        };
        let response = self.rtsp.finish_play(now, action, outcome);
        self.respond(ticket, response);
        let play = PlayRun {
            run,
            start: first,
            from,
            end: None,
            seq_offsets: offsets,
            anchor: Some(anchor),
            trick: None,
        };
        debug!(%stream, gsn = %first.gsn, npt = %first.time, shifted, ?speed, "live: a viewer starts");
        self.send(StreamOp::Pace { stream, pace: speed.unwrap_or(Pace::NOMINAL) });
        self.send(StreamOp::Play { stream, play });
    }
}
