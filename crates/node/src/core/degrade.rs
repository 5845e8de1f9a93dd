//! Degrade instead of refuse (`sched.degrade`): a PLAY of a title with renditions that
//! admission refuses is admitted at a lower rendition, and when even the lowest does not fit,
//! sessions playing higher renditions step down to make room.
//!
//! Gennart et al. put rate adaptation in the server: a full node can still serve a
//! new viewer at a lower rate, where XTREAM's admission alone answers 453 (RFC 2326 §11.3.9).
//! The order is the ladder's, highest first: the new session tries each rung down to the
//! lowest (each a full admission: the disks' test and the node's egress,
//! `sched.egress_mbps`); then the session playing the highest rate (of those this node is the
//! origin of) is stepped down one rung at its next key frame, the same switch as a receiver
//! report's (`switch.rs`), and the PLAY is tried again once the room is freed — so the
//! sessions that take the most give first, one rung at a time, and no playing session is ever
//! stopped to make room. With no session left to step down, the PLAY is refused as before.
//! A session stepped down may step up again on its reports; admission refuses it while the
//! room is taken, and each refusal doubles its wait ([`crate::abr::Chooser::handle_refused`]);
//! while a step up is being decided no other admission is sent (`switch.rs`, `NodeCore::open`).

use super::{Instant, NodeCore, StreamId, Waiting, open_spec};
use std::time::Duration;
use tracing::info;

/// How long a PLAY waits for room before it is tried again (and refused when nothing more
/// can step down): a step down happens at its session's next key frame.
pub(super) const ROOM_WAIT: Duration = Duration::from_secs(8);

/// What degrading and switching did (metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AbrStats {
    /// Switches to a lower rendition carried out (reports and room alike).
    pub switches_down: u64,
    /// Switches to a higher rendition carried out.
    pub switches_up: u64,
    /// Steps up admission refused (the session stayed where it was).
    pub step_ups_refused: u64,
    /// PLAYs admitted at a lower rendition than they asked for.
    pub admitted_degraded: u64,
    /// Sessions stepped down to make room for a PLAY.
    pub stepped_down_for_room: u64,
}

impl NodeCore {
    /// Admission refused the rung a PLAY of a ladder would start on. With degrade, the PLAY
    /// tries the next rung down, or (on the lowest) waits while a session playing a higher
    /// rate steps down. Returns whether it waits; `false`: it is refused.
    pub(super) fn degrade_refused(&mut self, now: Instant, stream: StreamId) -> bool {
        if !self.degrade {
            return false;
        }
        let Some(o) = self.origins.get_mut(&stream) else { return false };
        let Some(abr) = o.abr.as_mut() else { return false };
        let rung = abr.chooser.current();
        if let Some(entry) = abr.ladder.get(rung + 1).cloned() {
            abr.chooser.handle_switched(now, rung + 1);
            info!(%stream, to = %entry.record.name, "admission: refused, trying the next rendition down");
            let spec = open_spec(stream, &entry, o.delivery);
            o.entry = entry;
            o.degraded = true;
            self.cluster.close(now, stream);
            self.open(now, spec);
            return true;
        }
        // Steps down under way for earlier PLAYs may free enough: wait for them too.
        if !self.step_down_for_room(now, stream) && !self.room_coming() {
            return false;
        }
        if !self.room_wanted.iter().any(|(s, _)| *s == stream) {
            self.room_wanted.push((stream, now));
        }
        true
    }

    /// Steps down one session playing a ladder above its lowest rung, the one playing the
    /// highest rate (the lowest stream id among equals), to make room for `for_stream`.
    /// Returns whether one was.
    fn step_down_for_room(&mut self, now: Instant, for_stream: StreamId) -> bool {
        let mut candidates: Vec<(u64, StreamId)> = self
            .origins
            .iter()
            .filter(|(s, o)| {
                **s != for_stream
                    && o.can_switch()
                    && o.abr.as_ref().is_some_and(|a| a.chooser.current() + 1 < a.ladder.len())
            })
            .map(|(s, o)| (o.entry.record.avg_bitrate.0, *s))
            .collect();
        candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        for (_, victim) in candidates {
            let Some(to) = self
                .origins
                .get(&victim)
                .and_then(|o| o.abr.as_ref())
                .map(|a| a.chooser.current() + 1)
            else {
                continue;
            };
            self.switch(now, victim, to, "degrade");
            if matches!(
                self.origins.get(&victim).map(|o| &o.waiting),
                Some(Some(Waiting::Switch { .. }))
            ) {
                info!(stream = %victim, for_stream = %for_stream, "degrade: stepping a session down to make room");
                self.abr_stats.stepped_down_for_room += 1;
                return true;
            }
        }
        false
    }

    /// Whether a session is stepping down (a lower rung decided, not yet admitted).
    fn room_coming(&self) -> bool {
        self.origins.values().any(|o| {
            let current = o.abr.as_ref().map_or(usize::MAX, |a| a.chooser.current());
            match o.waiting {
                Some(Waiting::Switch { to, .. } | Waiting::Reopen { to, .. }) => to > current,
                _ => false,
            }
        })
    }

    /// Tries again the PLAYs waiting for room: all of them once room was freed (a session
    /// closed, or one stepped down), and any that waited [`ROOM_WAIT`] (a step down that did
    /// not happen: it is refused, or steps another session down).
    pub(super) fn retry_room(&mut self, now: Instant) {
        let freed = std::mem::take(&mut self.room_freed);
        if self.room_wanted.is_empty() {
            return;
        }
        let (due, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut self.room_wanted)
            .into_iter()
            .partition(|(_, since)| freed || now >= *since + ROOM_WAIT);
        self.room_wanted = wait;
        for (stream, _) in due {
            let Some(o) = self.origins.get(&stream) else { continue };
            if o.opened || !matches!(o.waiting, Some(Waiting::Open(..))) {
                continue;
            }
            let spec = open_spec(stream, &o.entry, o.delivery);
            self.cluster.close(now, stream);
            self.open(now, spec);
        }
    }
}
