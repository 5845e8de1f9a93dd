//! Switching a session between a title's renditions: adaptive bit rate over RTSP.
//!
//! A title with renditions is played from its ladder (`rtsp://host/TITLE`; `?rendition=` pins
//! one). The renditions' IDR frames fall at the same presentation times and their tracks are
//! alike (`docs/design/renditions.md`), so a session can leave one rendition just before a key
//! frame and go on in another from that same key frame: to its player one stream, whose
//! sequence numbers and timestamps run on (RFC 3550 §5.1; the SSRC stays), whose picture changes
//! size at an IDR that carries its own SPS and PPS in-band (RFC 6184 §8.4).
//!
//! When [`crate::abr::Chooser`] decides on another rung, the origin picks the first key frame
//! at least [`SWITCH_LEAD`] ahead of where the session is, stops every node just before it
//! ([`StopKind::At`]: positions exact), closes the session's reservations and opens the other
//! rendition's (admission judges the new rate; a refused step up goes back to the rung it left),
//! then starts a run there, numbered on from where the last one stopped, as a seek does.

use super::{
    Abr, AbrConfig, Arc, BufferLevel, Chooser, Gsn, Instant, MediaTime, NodeCore, ObjectEntry,
    OpenSpec, PlayAction, PlayStart, Position, ReceiverFeedback, RunRequest, StopKind, StreamId,
    Waiting, open_spec,
};
use std::time::Duration;
use tracing::{debug, info, warn};

/// How far ahead of the session's position a switch's key frame is at least: its stop must
/// reach every node before the key frame's packets are due.
pub(super) const SWITCH_LEAD: Duration = Duration::from_millis(500);

impl NodeCore {
    /// The ladder a PLAY's session plays from: its presentation's renditions, when there are
    /// at least two to switch between.
    pub(super) fn ladder_of(&self, action: &PlayAction) -> Option<Abr> {
        let ladder: Vec<Arc<ObjectEntry>> =
            action.ladder.iter().filter_map(|id| self.catalog.by_id(*id)).collect();
        let rung = ladder.iter().position(|e| e.record.id == action.object)?;
        (ladder.len() >= 2).then(|| Abr {
            chooser: Chooser::new(AbrConfig::default(), ladder.len(), rung),
            ladder,
        })
    }

    /// A receiver report on one of our streams (or what stands for one, `why`): the session
    /// playing a ladder may switch.
    pub(super) fn feedback(&mut self, now: Instant, fb: ReceiverFeedback, why: &'static str) {
        let Some((stream, track)) = self.rtsp.track_of_ssrc(fb.ssrc) else { return };
        // The clock its jitter is counted in (0 if unknown: jitter is not judged).
        let clock_rate = self.origins.get(&stream).map_or(0, |o| {
            let media = o.entry.record.media.as_ref();
            media.and_then(|m| m.tracks.get(track)).map_or(0, |t| t.clock_rate)
        });
        self.judge(now, stream, why, |c| c.handle_report(now, fb, clock_rate));
    }

    /// The player asked for packets `seqs` of our stream `ssrc` again: the loss its next
    /// report's span is judged on.
    pub(super) fn nacked(&mut self, ssrc: u32, seqs: &[u16]) {
        let Some(stream) = self.rtsp.stream_of_ssrc(ssrc) else { return };
        if let Some(abr) = self.origins.get_mut(&stream).and_then(|o| o.abr.as_mut()) {
            abr.chooser.handle_nack(ssrc, seqs);
        }
    }

    /// The player of `stream` reported its buffer with a rate request (MTFC): the session
    /// playing a ladder may switch.
    pub(super) fn buffer_report(&mut self, now: Instant, stream: StreamId, b: BufferLevel) {
        self.judge(now, stream, "the player's buffer", |c| c.handle_buffer(now, b.level, b.depth));
    }

    /// Hands `stream`'s chooser one piece of feedback (`judge`, from `why`), and switches as it
    /// decides.
    fn judge(
        &mut self,
        now: Instant,
        stream: StreamId,
        why: &'static str,
        judge: impl FnOnce(&mut Chooser) -> Option<usize>,
    ) {
        let Some(o) = self.origins.get_mut(&stream) else { return };
        // Judged only while a run plays to its end: not a range the client asked to stop at.
        if !o.can_switch() || o.run_end.is_some() {
            return;
        }
        let Some(abr) = o.abr.as_mut() else { return };
        let Some(to) = judge(&mut abr.chooser) else { return };
        if to < abr.chooser.current() && !self.room_wanted.is_empty() {
            // PLAYs wait for room (degrade): no step up takes it from them.
            self.refuse_step_up(now, stream);
            return;
        }
        self.switch(now, stream, to, why);
    }

    /// Starts the switch of `stream` to rung `to` at the next key frame far enough ahead
    /// (decided on `why`).
    pub(super) fn switch(&mut self, now: Instant, stream: StreamId, to: usize, why: &str) {
        let Some(o) = self.origins.get_mut(&stream) else { return };
        let Some(abr) = o.abr.as_mut() else { return };
        let from = abr.chooser.current();
        // Where the session is, by its run's clock (at whatever pace it runs).
        let media_now = o.clock.media_at(now);
        let earliest = media_now + SWITCH_LEAD;
        let key = o.entry.record.seek_points.iter().find(|p| p.time >= earliest).copied();
        let (Some(key), Some(target)) = (key, abr.ladder.get(to)) else {
            // Too near the end to switch: play it out.
            abr.chooser.handle_switched(now, from);
            return;
        };
        let at = key.time;
        let nacked = abr.chooser.nack_loss();
        info!(%stream, from = %o.entry.record.name, to = %target.record.name, %at, on = why, ?nacked, "switching rendition");
        o.waiting = Some(Waiting::Switch { to, at, key: key.gsn });
        // Due when the session reaches it: after `at - media_now` by the estimate, which is
        // ahead of the truth by the time the clock took to be pinned (a second is plenty).
        let due = o.clock.pace.wall_span(at.saturating_duration_since(media_now))
            + Duration::from_secs(1);
        // The key frame's packets are sent ahead of its presentation time (decode order): the
        // stop is before its first packet, and reported once its time has come.
        let stop = StopKind::At { cutoff: at, before: key.gsn, due };
        if !self.cluster.stop(now, stream, stop)
            && let Some(o) = self.origins.get_mut(&stream)
        {
            o.waiting = None;
            o.give_up_switch(now);
        }
    }

    /// Every node stopped for the switch to the key frame at `at` (GSN `key`), `stopped` being
    /// where: open rung `to`.
    pub(super) fn switch_stopped(
        &mut self,
        now: Instant,
        stream: StreamId,
        to: usize,
        (at, key): (MediaTime, Gsn),
        stopped: Position,
    ) {
        let Some(o) = self.origins.get_mut(&stream) else { return };
        let Some(abr) = o.abr.as_ref() else { return };
        let from = abr.chooser.current();
        debug!(%stream, %at, key = %key, stopped = %stopped.gsn, stopped_at = %stopped.time, "switching rendition: stopped");
        if stopped.gsn == key {
            self.reopen(now, stream, to, from, at, false);
            return;
        }
        // Not just before the key frame: after it (the stop came after its packets had left,
        // a busy node), or before it (the stop's deadline passed first, the run behind its
        // clock). The other rendition can go on only from a key frame, and what lies between
        // would be missing or sent twice. The session goes on exactly where it stopped, in the
        // rendition it played; its chooser decides again on the next report.
        let when = if stopped.gsn > key { "after" } else { "before" };
        info!(%stream, %at, stopped = %stopped.time, "switching rendition: the stop came {when} the key frame; going on in the rendition playing");
        o.give_up_switch(now);
        let req = RunRequest {
            start: PlayStart::Resume(stopped),
            end: o.run_end,
            scale: None,
            speed: o.speed,
        };
        if let Err(reason) = self.begin_run(now, stream, req) {
            warn!(%stream, %reason, "switching rendition: the run could not go on");
        }
    }

    /// Closes the session's reservations and opens rung `to`'s, to go on from `at`.
    fn reopen(
        &mut self,
        now: Instant,
        stream: StreamId,
        to: usize,
        from: usize,
        at: MediaTime,
        paused: bool,
    ) {
        if to < from && self.probing.iter().any(|s| *s != stream) {
            // Another step up is being decided, on the room this one would also take: it is
            // refused at once, its reservation kept, and the session goes on from `at`.
            self.refuse_step_up(now, stream);
            self.switch_opened(now, stream, from, at, paused);
            return;
        }
        self.cluster.close(now, stream);
        let Some(o) = self.origins.get_mut(&stream) else { return };
        let Some(entry) = o.abr.as_ref().and_then(|a| a.ladder.get(to)).cloned() else { return };
        let spec = open_spec(stream, &entry, o.delivery);
        o.entry = entry;
        o.opened = false;
        o.waiting = Some(Waiting::Reopen { to, from, at, paused });
        if to < from {
            // A step up: until it is decided, no other session is admitted into the room the
            // rung it leaves would need back.
            self.probing.insert(stream);
        }
        self.cluster.open(now, spec);
    }

    /// A step up of `stream` is not made (no room for the higher rate): it stays on its rung
    /// and waits longer before the next try.
    fn refuse_step_up(&mut self, now: Instant, stream: StreamId) {
        self.abr_stats.step_ups_refused += 1;
        if let Some(abr) = self.origins.get_mut(&stream).and_then(|o| o.abr.as_mut()) {
            abr.chooser.handle_refused(now);
        }
    }

    /// Opens a session's reservation, or holds it while a step up is being decided.
    pub(super) fn open(&mut self, now: Instant, spec: OpenSpec) {
        if self.probing.is_empty() || self.probing.contains(&spec.stream) {
            self.cluster.open(now, spec);
        } else {
            self.held.push_back(spec);
        }
    }

    /// `stream`'s step up is decided (admitted, back on its rung, or ended): once none is
    /// pending, the admissions held meanwhile go ahead, in order.
    pub(super) fn probe_done(&mut self, now: Instant, stream: StreamId) {
        if !self.probing.remove(&stream) || !self.probing.is_empty() {
            return;
        }
        while let Some(spec) = self.held.pop_front() {
            if self.origins.get(&spec.stream).is_some_and(|o| !o.opened) {
                self.cluster.open(now, spec);
            }
        }
    }

    /// Rung `to` was admitted: the session goes on from the key frame at `at` (unless a PAUSE
    /// came meanwhile: then the next PLAY resumes there).
    pub(super) fn switch_opened(
        &mut self,
        now: Instant,
        stream: StreamId,
        to: usize,
        at: MediaTime,
        paused: bool,
    ) {
        self.probe_done(now, stream);
        let Some(o) = self.origins.get_mut(&stream) else { return };
        o.opened = true;
        let end = o.run_end;
        if let Some(abr) = o.abr.as_mut() {
            let from = abr.chooser.current();
            if to > from {
                self.abr_stats.switches_down += 1;
                // The lower rate left room for a PLAY waiting for it.
                self.room_freed = true;
            } else if to < from {
                self.abr_stats.switches_up += 1;
            }
            abr.chooser.handle_switched(now, to);
        }
        if paused {
            return;
        }
        let req = RunRequest { start: PlayStart::Seek(at), end, scale: None, speed: o.speed };
        if let Err(reason) = self.begin_run(now, stream, req) {
            warn!(%stream, %reason, "switching rendition: the run could not start");
        }
    }

    /// Rung `to` was refused: back to the rung the session left, or (that refused too) the
    /// stream ends where it stopped. Returns whether the session goes on.
    pub(super) fn switch_refused(
        &mut self,
        now: Instant,
        stream: StreamId,
        (to, from, at, paused): (usize, usize, MediaTime, bool),
        reason: &str,
    ) -> bool {
        if to != from {
            info!(%stream, %reason, "switching rendition: refused, staying on the rendition it played");
            if to < from {
                self.refuse_step_up(now, stream);
            }
            self.reopen(now, stream, from, from, at, paused);
            return true;
        }
        let lower = from + 1;
        let ladder =
            self.origins.get(&stream).and_then(|o| o.abr.as_ref()).map_or(0, |a| a.ladder.len());
        if self.degrade && lower < ladder {
            // Its own rung was taken meanwhile: it goes on lower rather than end.
            info!(%stream, %reason, "switching rendition: refused again, degrading");
            self.reopen(now, stream, lower, lower, at, paused);
            return true;
        }
        warn!(%stream, %reason, "switching rendition: neither rendition is admitted; the stream ends");
        self.probe_done(now, stream);
        false
    }
}
