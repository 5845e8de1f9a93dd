//! The origin's side: a session's PLAY, PAUSE and pace change (RFC 2326 §10.5, §10.6, §12.34,
//! §12.35), and what the cluster says of the session (opened, refused, stopped, ended, failed).

use super::{
    Arc, ConnId, Delivery, Dest, HeaderName, Instant, MediaTime, Method, NodeCore, NodeOutput,
    Origin, Pace, PauseAction, PlayAction, PlayOutcome, PlayStart, Position, RateAction, Rates,
    Request, RunClock, RunReport, RunRequest, RunTracks, SessionEvent, SessionTransport, ShareKey,
    StartSpec, StopKind, StreamId, StreamOp, Ticket, TrackSeqs, TrackSpec, Waiting, open_spec,
};
use isochron_rtsp::server::Pacing;
use isochron_store::catalog::ObjectRecord;
use std::time::Duration;
use tracing::{debug, info, warn};

impl NodeCore {
    pub(super) fn note_prefs(&mut self, conn: ConnId, req: &Request<Vec<u8>>) {
        let entry = self.prefs.entry(conn).or_insert((None, String::new()));
        if let Some(ua) = req.header(&HeaderName::from_static_str("User-Agent").expect("valid")) {
            entry.1 = ua.as_str().to_owned();
        }
        if matches!(req.method(), Method::Setup | Method::Play | Method::Describe)
            && let Some(d) = req.request_uri().and_then(|u| delivery_query(u.query()))
        {
            entry.0 = Some(d);
        }
    }

    /// The delivery a connection's player gets: what it asked for, else by player (`auto`).
    fn delivery_for(&self, conn: ConnId) -> Delivery {
        match self.prefs.get(&conn) {
            Some((Some(d), _)) => *d,
            Some((None, ua)) => auto_delivery(ua),
            None => Delivery::Relay,
        }
    }

    pub(super) fn play(&mut self, now: Instant, conn: ConnId, action: PlayAction, ticket: Ticket) {
        let stream = action.stream;
        if self.is_live(action.object) {
            // Time-shift further back than the edge keeps: the recording, from disk, as far
            // as it is committed and on as it grows (`live.rs`); else the edge.
            if self.plays_recording(&action) {
                self.leave_edge(now, stream);
            } else {
                if self.leave_recording(now, stream).is_err() {
                    let outcome =
                        PlayOutcome::Failed { reason: "another request is in progress".into() };
                    let response = self.rtsp.finish_play(now, action, outcome);
                    self.respond(ticket, response);
                    return;
                }
                self.play_live(now, action, ticket);
                return;
            }
        }
        if let Some(o) = self.origins.get_mut(&stream) {
            // A PLAY in the middle of a switch of rendition takes its place: the stop already
            // asked for serves the PLAY (a seek), or the admission under way does.
            match o.waiting.take() {
                Some(Waiting::Switch { .. }) => {
                    o.give_up_switch(now);
                    o.waiting = Some(Waiting::StopForPlay(action, ticket));
                    return;
                }
                Some(Waiting::Reopen { to, .. }) => {
                    if let Some(abr) = o.abr.as_mut() {
                        abr.chooser.handle_switched(now, to);
                    }
                    o.waiting = Some(Waiting::Open(action, ticket));
                    return;
                }
                other => o.waiting = other,
            }
            if o.waiting.is_some() {
                let outcome =
                    PlayOutcome::Failed { reason: "another request is in progress".into() };
                let response = self.rtsp.finish_play(now, action, outcome);
                self.respond(ticket, response);
                return;
            }
            if o.running {
                // A seek while playing: every node stops first, to learn where numbering stands.
                o.waiting = Some(Waiting::StopForPlay(action, ticket));
                self.cluster.stop(now, stream, StopKind::Now);
                return;
            }
            if o.opened {
                let response = self.start(now, action);
                self.respond(ticket, response);
                return;
            }
        }
        if self.local_disks.is_some() && !self.catalog.membership_confirmed() {
            // Membership and placement cannot be confirmed: sessions already open go on, new
            // ones wait for etcd (docs/design/etcd.md).
            let reason = "etcd is unreachable: this node takes no new sessions until it answers";
            warn!(stream = %stream, "{reason}");
            let outcome = PlayOutcome::Unavailable { reason: reason.into() };
            let response = self.rtsp.finish_play(now, action, outcome);
            self.respond(ticket, response);
            return;
        }
        let Some(entry) = self.catalog.by_id(action.object) else {
            let outcome = PlayOutcome::Failed { reason: "object was removed".into() };
            let response = self.rtsp.finish_play(now, action, outcome);
            self.respond(ticket, response);
            return;
        };
        let delivery = self.delivery_for(conn);
        let spec = open_spec(stream, &entry, delivery);
        let (pace, smooth) =
            self.origins.get(&stream).map_or((Pace::NOMINAL, false), |o| (o.pace, o.smooth));
        let abr = self.ladder_of(&action);
        let waiting = Some(Waiting::Open(action, ticket));
        let mut origin = Origin::new(entry, delivery, pace, waiting);
        origin.abr = abr;
        origin.smooth = smooth;
        self.origins.insert(stream, origin);
        self.open(now, spec);
    }

    /// Starts a run of an opened session everywhere and answers the PLAY.
    fn start(
        &mut self,
        now: Instant,
        action: PlayAction,
    ) -> isochron_rtsp::rtsp_types::Response<Vec<u8>> {
        let run = RunRequest {
            start: action.start,
            end: action.end,
            scale: action.scale,
            speed: action.speed,
        };
        let outcome = match self.begin_run(now, action.stream, run) {
            Ok(started) => started,
            Err(reason) => PlayOutcome::Failed { reason: reason.into() },
        };
        self.rtsp.finish_play(now, action, outcome)
    }

    /// Starts a run of an opened session everywhere: what a PLAY asks (or a switch of
    /// rendition), on the object the session plays now. Returns what the PLAY's answer says.
    pub(super) fn begin_run(
        &mut self,
        now: Instant,
        stream: StreamId,
        req: RunRequest,
    ) -> Result<PlayOutcome, &'static str> {
        let Some(view) = self.rtsp.session_by_stream(stream) else {
            return Err("session vanished");
        };
        // Each track as the client set it up (all of them go the same way).
        let n = view.track_count();
        let mut set_up: Vec<Option<(u32, u16, u32, Dest)>> = vec![None; n];
        for t in view.tracks() {
            let dest = match t.transport() {
                SessionTransport::Udp { client_rtp, client_rtcp, .. } => {
                    Dest::Udp { rtp: *client_rtp, rtcp: *client_rtcp }
                }
                SessionTransport::Interleaved { .. } => Dest::Origin,
            };
            set_up[t.index()] = Some((t.ssrc(), t.seq_offset(), t.rtp_ts_offset(), dest));
        }
        let single = self.local_disks.is_none();
        let Some(o) = self.origins.get_mut(&stream) else {
            return Err("session vanished");
        };
        let rec = &o.entry.record;
        // Trick play (Scale, RFC 2326 §12.34): key frames of native objects on a single node
        // (its packets are numbered by the one sender that sends them all). Speed (§12.35):
        // the run paced that much faster or slower.
        let trick = req.scale.filter(|_| single && rec.media.is_some());
        let speed = req.speed.filter(|_| trick.is_none());
        let run_pace = trick.or(speed).unwrap_or(o.pace);
        // A trick run starts at a key frame; the run after one restarts at the key frame at or
        // before where it stopped (its positions count the packets it sent, not the track's).
        let start = match req.start {
            PlayStart::Seek(t) => seek_position(rec, t),
            PlayStart::Resume(pos) if trick.is_some() || o.trick => seek_position(rec, pos.time),
            PlayStart::Resume(pos) => pos,
            PlayStart::Beginning => seek_position(rec, MediaTime::ZERO),
        };
        o.trick = trick.is_some();
        // Numbering continues across seeks: each track's first packet gets its next number.
        let seq_offsets: Vec<u16> = (0..n)
            .map(|t| match (&o.next_seqs, set_up[t]) {
                (Some(next), _) => {
                    next.get(t).copied().unwrap_or(0).wrapping_sub(start.track_seq(t) as u16)
                }
                (None, Some((_, first, _, _))) => first,
                (None, None) => 0,
            })
            .collect();
        let tracks: Vec<TrackSpec> = (0..n)
            .map(|t| {
                let (clock_rate, payload_type) = rec
                    .media
                    .as_ref()
                    .and_then(|m| m.tracks.get(t))
                    .map_or((90_000, 33), |d| (d.clock_rate, d.payload_type));
                let (ssrc, _, rtp_ts_offset, dest) = set_up[t].unwrap_or((0, 0, 0, Dest::Origin));
                TrackSpec {
                    ssrc,
                    seq_offset: seq_offsets[t],
                    rtp_ts_offset,
                    clock_rate,
                    payload_type,
                    dest,
                    enabled: set_up[t].is_some(),
                }
            })
            .collect();
        o.run = o.run.next();
        o.running = true;
        o.run_start = start;
        o.clock = RunClock { wall: now, media: start.time, pace: run_pace };
        o.speed = speed;
        o.seq_offsets.clone_from(&seq_offsets);
        let run = o.run;
        let end = req.end;
        let spec = StartSpec { start, end, tracks: RunTracks::new(&tracks), trick };
        debug!(%stream, %run, gsn = %start.gsn, npt = %start.time, ?seq_offsets, ?trick, ?speed, "play");
        // An open range unless the client asked to stop early (see PlayOutcome::Started).
        let end = end.filter(|e| *e < rec.duration);
        o.run_end = end;
        self.cluster.start(now, stream, run, spec, run_pace);
        let rates = Rates { scale: trick, speed };
        Ok(PlayOutcome::Started { first: start, end, seq_offsets, rates })
    }

    pub(super) fn pause(&mut self, now: Instant, action: PauseAction, ticket: Ticket) {
        let stream = action.stream;
        if self.viewers.contains_key(&stream) {
            self.pause_live(now, action, ticket);
            return;
        }
        let Some(o) = self.origins.get_mut(&stream) else {
            // Never played: it is at its start.
            let response = self.rtsp.finish_pause(now, action, Position::START);
            self.respond(ticket, response);
            return;
        };
        match o.waiting.take() {
            // The stop of a switch of rendition is under way: it serves the PAUSE (the
            // switch is given up).
            Some(Waiting::Switch { .. }) => {
                o.give_up_switch(now);
                o.waiting = Some(Waiting::Pause(action, ticket));
                return;
            }
            // Stopped at the key frame and being admitted on the other rung: paused there.
            Some(Waiting::Reopen { to, from, at, .. }) => {
                let pos = seek_position(&o.entry.record, at);
                o.waiting = Some(Waiting::Reopen { to, from, at, paused: true });
                let response = self.rtsp.finish_pause(now, action, pos);
                self.respond(ticket, response);
                return;
            }
            other => o.waiting = other,
        }
        if o.waiting.is_some() || !o.running {
            let at = match o.next_seqs {
                Some(_) => self.rtsp.session_by_stream(stream).and_then(|v| v.position()),
                None => None,
            }
            .unwrap_or(o.run_start);
            let response = self.rtsp.finish_pause(now, action, at);
            self.respond(ticket, response);
            return;
        }
        o.waiting = Some(Waiting::Pause(action, ticket));
        self.cluster.stop(now, stream, StopKind::Pause);
    }

    /// MTFC: paces the session at the pace asked for, on every node. A session without a run
    /// gets it when it starts.
    pub(super) fn rate(
        &mut self,
        now: Instant,
        action: RateAction,
    ) -> isochron_rtsp::rtsp_types::Response<Vec<u8>> {
        let applied = self.cluster.pace(now, action.stream, action.pace).unwrap_or(action.pace);
        if let Some(o) = self.origins.get_mut(&action.stream) {
            o.pace = applied;
            if o.running {
                o.clock = o.clock.repaced(now, applied);
            }
        } else {
            // Before the first PLAY: kept with the session until it opens.
            self.pending_pace(action.stream, applied);
        }
        let pacing = match action.pacing {
            Some(asked) => self.set_pacing(action.stream, asked),
            None => match self.origins.get(&action.stream).is_some_and(|o| o.smooth) {
                true => Pacing::Rate,
                false => Pacing::Content,
            },
        };
        debug!(stream = %action.stream, pace = %applied, ?pacing, buffer = ?action.buffer, "rate change");
        if let Some(buffer) = action.buffer {
            self.buffer_report(now, action.stream, buffer);
        }
        self.rtsp.finish_rate(now, action, applied, pacing)
    }

    /// A player asked for `asked` pacing (`docs/design/mtfc.md`): rate pacing is for a session
    /// on a single node of an object with a known length (a cluster's nodes each send only
    /// their own blocks, and do not have the bytes before a packet; a feed's recording grows).
    /// Returns the pacing in force.
    fn set_pacing(&mut self, stream: StreamId, asked: Pacing) -> Pacing {
        let single = self.local_disks.is_none();
        // `rate` made the session's origin, even before its first PLAY (`pending_pace`).
        let Some(o) = self.origins.get(&stream) else { return Pacing::Content };
        let record = &o.entry.record;
        let wanted = single && asked == Pacing::Rate && !self.is_live(record.id);
        let rate = mean_byte_rate(record).filter(|_| wanted);
        let Some(o) = self.origins.get_mut(&stream) else { return Pacing::Content };
        o.smooth = rate.is_some();
        if o.running {
            self.send(StreamOp::Smooth { stream, rate });
        }
        if rate.is_some() { Pacing::Rate } else { Pacing::Content }
    }

    /// A pace asked for before the session's first PLAY.
    fn pending_pace(&mut self, stream: StreamId, pace: Pace) {
        let Some(view) = self.rtsp.session_by_stream(stream) else { return };
        let Some(entry) = self.catalog.by_id(view.object()) else { return };
        // Not opened: the PLAY opens it with the player's delivery and this pace.
        self.origins.insert(stream, Origin::new(entry, Delivery::Relay, pace, None));
    }

    pub(super) fn session_event(&mut self, now: Instant, ev: SessionEvent) {
        let single = self.local_disks.is_none();
        match ev {
            SessionEvent::Opened { stream } => {
                // A step up decided, whichever request the session now waits to answer.
                self.probe_done(now, stream);
                let Some(o) = self.origins.get_mut(&stream) else { return };
                o.opened = true;
                info!(%stream, object = %o.entry.record.name, "admission: admitted");
                match o.waiting.take() {
                    Some(Waiting::Open(action, ticket)) => {
                        if o.degraded {
                            self.abr_stats.admitted_degraded += 1;
                        }
                        let response = self.start(now, action);
                        self.respond(ticket, response);
                    }
                    Some(Waiting::Reopen { to, at, paused, .. }) => {
                        self.switch_opened(now, stream, to, at, paused);
                    }
                    other => o.waiting = other,
                }
            }
            SessionEvent::Refused { stream, refusal } => {
                if let Some(Origin {
                    waiting: Some(Waiting::Reopen { to, from, at, paused }),
                    ..
                }) = self.origins.get(&stream)
                {
                    let (switch, reason) = ((*to, *from, *at, *paused), refusal.to_string());
                    if self.switch_refused(now, stream, switch, &reason) {
                        return;
                    }
                    if let Some(o) = self.origins.remove(&stream) {
                        // Its reservations are closed, its shares gone: the client is told
                        // by its RTSP connection's reset (no share is left to send a BYE).
                        let pos = seek_position(&o.entry.record, switch.2);
                        self.fail_client(now, stream, reason.into(), pos);
                    }
                    return;
                }
                let opening = self.origins.get(&stream).map(|o| &o.waiting);
                if matches!(opening, Some(Some(Waiting::Open(..))))
                    && self.degrade_refused(now, stream)
                {
                    return;
                }
                self.probe_done(now, stream);
                let Some(o) = self.origins.remove(&stream) else { return };
                info!(%stream, object = %o.entry.record.name, %refusal, "admission: rejected");
                if let Some(Waiting::Open(action, ticket)) = o.waiting {
                    // A single node's refusal is its scheduler's own words.
                    let reason = if single { refusal.reason } else { refusal.to_string() };
                    let outcome = PlayOutcome::Rejected { reason };
                    let response = self.rtsp.finish_play(now, action, outcome);
                    self.respond(ticket, response);
                }
            }
            SessionEvent::Stopped { stream, run, next, last_sent } => {
                let Some(o) = self.origins.get_mut(&stream) else { return };
                if o.run != run {
                    return;
                }
                o.running = false;
                let at = RunReport { next, last_sent }.resume_at(o.run_start);
                o.next_seqs = Some(next_seqs(&o.seq_offsets, &at));
                match o.waiting.take() {
                    Some(Waiting::StopForPlay(action, ticket)) => {
                        let response = self.start(now, action);
                        self.respond(ticket, response);
                    }
                    Some(Waiting::Pause(action, ticket)) => {
                        let response = self.rtsp.finish_pause(now, action, at);
                        self.respond(ticket, response);
                    }
                    Some(Waiting::Fail(reason)) => self.fail_client(now, stream, reason, at),
                    Some(Waiting::Switch { to, at: key_time, key }) => {
                        self.switch_stopped(now, stream, to, (key_time, key), at);
                    }
                    other => o.waiting = other,
                }
            }
            SessionEvent::Ended { stream, run, last_sent } => {
                let Some(o) = self.origins.get_mut(&stream) else { return };
                if o.run != run {
                    return;
                }
                o.running = false;
                let at = RunReport { next: None, last_sent }.resume_at(o.run_start);
                o.next_seqs = Some(next_seqs(&o.seq_offsets, &at));
                // The end came before a switch's key frame: nothing left to switch.
                if matches!(o.waiting, Some(Waiting::Switch { .. })) {
                    o.waiting = None;
                    o.give_up_switch(now);
                }
                debug!(%stream, %run, gsn = %at.gsn, "end of stream");
                self.rtsp.handle_end_of_stream(now, stream, at);
            }
            SessionEvent::Failed { stream, run, error } => {
                warn!(%stream, %run, %error, "ending stream: a node cannot go on");
                let Some(o) = self.origins.get_mut(&stream) else { return };
                if o.run == run && o.running && o.waiting.is_none() {
                    o.waiting = Some(Waiting::Fail(Arc::from(error.as_str())));
                    self.cluster.stop(now, stream, StopKind::Now);
                }
            }
        }
    }

    /// Answers the request a session was waiting to answer when it ended meanwhile (a timeout,
    /// its connection closed, a TEARDOWN): a PLAY gets 500 saying so, a PAUSE 454; every
    /// request gets an answer, none is left waiting.
    pub(super) fn answer_ended(&mut self, now: Instant, waiting: Option<Waiting>) {
        match waiting {
            Some(Waiting::Open(action, ticket) | Waiting::StopForPlay(action, ticket)) => {
                let outcome = PlayOutcome::Failed { reason: "the session ended meanwhile".into() };
                let response = self.rtsp.finish_play(now, action, outcome);
                self.respond(ticket, response);
            }
            Some(Waiting::Pause(action, ticket)) => {
                let response = self.rtsp.finish_pause(now, action, Position::START);
                self.respond(ticket, response);
            }
            Some(Waiting::Fail(_) | Waiting::Switch { .. } | Waiting::Reopen { .. }) | None => {}
        }
    }

    /// A session whose nodes stopped after one failed: the client is told why (RFC 3550 §6.6)
    /// by the RTCP of this node's share, and its RTSP connection is reset: to players a BYE
    /// reads as a normal end, a reset at least as a warning (docs/design/closing.md).
    fn fail_client(&mut self, now: Instant, stream: StreamId, reason: Arc<str>, at: Position) {
        let key = ShareKey { origin: self.cluster.config().node, stream };
        if let Some(share) = self.shares.get(&key) {
            let stream = share.stream;
            self.send(StreamOp::Bye { stream, reason: Some(reason) });
        }
        if let Some(conn) = self.rtsp.session_by_stream(stream).and_then(|s| s.conn()) {
            // After the BYE the sender queues, if it comes within a moment.
            let after = Duration::from_millis(100);
            self.out.push_back(NodeOutput::CloseConn { conn, after });
        }
        self.rtsp.handle_end_of_stream(now, stream, at);
    }
}

/// `delivery=bipartite|relay` in a URL's query.
fn delivery_query(query: Option<&str>) -> Option<Delivery> {
    query?.split('&').find_map(|kv| match kv.split_once('=') {
        Some(("delivery", "bipartite")) => Some(Delivery::Bipartite),
        Some(("delivery", "relay")) => Some(Delivery::Relay),
        _ => None,
    })
}

/// `auto` delivery: bipartite for players shown to take RTP of one SSRC from several addresses
/// (`docs/results/cluster-players.md`), relay for every other.
fn auto_delivery(user_agent: &str) -> Delivery {
    // isochron's own client, and ffmpeg (libavformat accepts RTP of one SSRC from any source
    // address unless `-rtsp_flags filter_src`). GStreamer drops a second source as an SSRC
    // collision (RFC 3550 §8.2) and VLC's SAT>IP module does not strip header extensions.
    const BIPARTITE: [&str; 2] = ["isochron", "lavf"];
    if BIPARTITE.iter().any(|p| user_agent.to_ascii_lowercase().starts_with(p)) {
        Delivery::Bipartite
    } else {
        Delivery::Relay
    }
}

/// Where playing from `t` starts: the object's seek point for `t` (the last random-access point
/// at or before it).
pub(super) fn seek_position(rec: &ObjectRecord, t: MediaTime) -> Position {
    let i = rec.seek_index(t);
    let sp = rec.seek(t);
    let tracks = match &rec.media {
        Some(m) => {
            m.track_seqs_at(i).map_or_else(|| TrackSeqs::zeros(m.tracks.len()), TrackSeqs::new)
        }
        None => TrackSeqs::NONE,
    };
    Position { gsn: sp.gsn, time: sp.time, tracks }
}

/// Each track's sequence number for its next packet at `at`, under `offsets`.
fn next_seqs(offsets: &[u16], at: &Position) -> Vec<u16> {
    offsets.iter().enumerate().map(|(t, o)| o.wrapping_add(at.track_seq(t) as u16)).collect()
}

/// An object's mean payload bytes a second over its whole length (rate pacing's rate at the
/// nominal pace); `None` for an object without length.
pub(super) fn mean_byte_rate(record: &ObjectRecord) -> Option<u64> {
    let ns = u128::from(record.duration.as_nanos()).max(1);
    let rate = u128::from(record.ts_bytes.0) * 1_000_000_000 / ns;
    u64::try_from(rate).ok().filter(|&r| r > 0 && record.duration.as_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_from_the_query_and_the_player() {
        assert_eq!(delivery_query(Some("a=1&delivery=relay")), Some(Delivery::Relay));
        assert_eq!(delivery_query(Some("delivery=bipartite")), Some(Delivery::Bipartite));
        assert_eq!(delivery_query(Some("delivery=other")), None);
        assert_eq!(delivery_query(None), None);
        assert_eq!(auto_delivery("isochron/0.1"), Delivery::Bipartite);
        assert_eq!(auto_delivery("Lavf/61.7.100"), Delivery::Bipartite);
        assert_eq!(auto_delivery("GStreamer/1.22"), Delivery::Relay);
        assert_eq!(auto_delivery("VLC/3.0.21 LibVLC/3.0.21"), Delivery::Relay);
    }
}
