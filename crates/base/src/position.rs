//! A point in a presentation: where a run starts, where a pause stopped, what a node reports.
//!
//! Why here: the RTSP session (RFC 2326 §C.1.1 `Range`, §12.33 `RTP-Info`), the pacer, the
//! scheduler and the cluster's messages all speak of it, and none of them should depend on
//! another for the word.

use crate::{Gsn, MediaTime, TrackSeqs};

/// A point in a presentation as the sender sees it: the next packet to send and its send time,
/// and, for an object of several tracks, each track's next packet ([`TrackSeqs`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Position {
    /// The packet's global sequence number within the object.
    pub gsn: Gsn,
    /// The packet's send time on the object's timeline.
    pub time: MediaTime,
    /// Each track's `track_seq` of its next packet at or after `gsn`; empty for an object
    /// numbered by GSN (MPEG-TS).
    pub tracks: TrackSeqs,
}

impl Position {
    /// The first packet of an object numbered by GSN.
    pub const START: Self = Self { gsn: Gsn(0), time: MediaTime::ZERO, tracks: TrackSeqs::NONE };

    /// A position in an object numbered by GSN (no per-track vector).
    #[must_use]
    pub const fn at(gsn: Gsn, time: MediaTime) -> Self {
        Self { gsn, time, tracks: TrackSeqs::NONE }
    }

    /// The first packet of an object of `tracks` native tracks (0: numbered by GSN).
    #[must_use]
    pub fn start_of(tracks: usize) -> Self {
        Self { tracks: TrackSeqs::zeros(tracks), ..Self::START }
    }

    /// Track `track`'s next packet's `track_seq` here (the GSN for an object numbered by it).
    #[must_use]
    pub fn track_seq(&self, track: usize) -> u64 {
        self.tracks.seq_of(track, self.gsn)
    }
}
