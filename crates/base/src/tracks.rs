//! Per-track positions for objects with several RTP streams.
//!
//! Why: an object ingested from MP4 or Matroska is sent as one RTP stream per track (RFC 3550
//! §5.2: one SSRC, one sequence space per medium), while the store keeps all its packets in one
//! interleaved sequence numbered by GSN. Each packet also carries its index among its track's
//! packets (`track_seq`), and the RTP sequence number of a track's packet is the session's offset
//! for that track plus that index. A run that starts anywhere must know, for every track, the
//! index of the track's next packet: [`TrackSeqs`] is that vector, small and `Copy` so that it
//! travels inside positions and control messages.
//!
//! An MPEG-TS object has one stream numbered by GSN: its positions carry an empty vector, and
//! [`TrackSeqs::seq_of`] answers the GSN.

use crate::Gsn;

/// The most tracks an object may have.
pub const MAX_TRACKS: usize = 8;

/// For each track of an object, the `track_seq` of its next packet; empty for an object whose
/// single stream is numbered by GSN (MPEG-TS).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TrackSeqs {
    len: u8,
    seqs: [u32; MAX_TRACKS],
}

impl TrackSeqs {
    /// No tracks: the GSN numbers the one stream.
    pub const NONE: Self = Self { len: 0, seqs: [0; MAX_TRACKS] };

    /// The vector `seqs`; tracks past [`MAX_TRACKS`] are dropped (objects never have more).
    #[must_use]
    pub fn new(seqs: &[u32]) -> Self {
        let mut out = Self::NONE;
        for (i, s) in seqs.iter().take(MAX_TRACKS).enumerate() {
            out.seqs[i] = *s;
        }
        out.len = seqs.len().min(MAX_TRACKS) as u8;
        out
    }

    /// `n` tracks, each at its first packet.
    #[must_use]
    pub fn zeros(n: usize) -> Self {
        Self { len: n.min(MAX_TRACKS) as u8, seqs: [0; MAX_TRACKS] }
    }

    /// The number of tracks (0 for a GSN-numbered object).
    #[must_use]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether this is the empty vector of a GSN-numbered object.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The values, track by track.
    #[must_use]
    pub fn as_slice(&self) -> &[u32] {
        &self.seqs[..self.len()]
    }

    /// Track `track`'s next packet's index, at position `gsn`: the GSN itself for an object
    /// numbered by GSN, else the vector's entry (0 for a track out of range).
    #[must_use]
    pub fn seq_of(&self, track: usize, gsn: Gsn) -> u64 {
        if self.is_empty() {
            gsn.0
        } else {
            u64::from(self.as_slice().get(track).copied().unwrap_or(0))
        }
    }

    /// Sets track `track`'s entry (ignored out of range).
    pub fn set(&mut self, track: usize, seq: u32) {
        if track < self.len() {
            self.seqs[track] = seq;
        }
    }

    /// The entry-wise maximum of two vectors of the same tracks (where shares of one run stand
    /// together: every node counted the packets it sent). An empty vector (not known) yields to
    /// the other; of two lengths that differ otherwise, `self` is kept.
    #[must_use]
    pub fn max(self, other: Self) -> Self {
        if self.is_empty() {
            return other;
        }
        if self.len != other.len {
            return self;
        }
        let mut out = self;
        for i in 0..self.len() {
            out.seqs[i] = self.seqs[i].max(other.seqs[i]);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_means_gsn() {
        assert!(TrackSeqs::NONE.is_empty());
        assert_eq!(TrackSeqs::NONE.seq_of(0, Gsn(77)), 77);
        let t = TrackSeqs::new(&[5, 9]);
        assert_eq!((t.len(), t.as_slice()), (2, &[5, 9][..]));
        assert_eq!(t.seq_of(1, Gsn(77)), 9);
        assert_eq!(t.seq_of(4, Gsn(77)), 0);
        assert_eq!(TrackSeqs::zeros(3).as_slice(), &[0, 0, 0]);
        assert_eq!(TrackSeqs::new(&[1; 12]).len(), MAX_TRACKS);
    }

    #[test]
    fn max_and_set() {
        let mut a = TrackSeqs::new(&[5, 1]);
        a.set(1, 8);
        a.set(7, 8);
        assert_eq!(a.as_slice(), &[5, 8]);
        assert_eq!(a.max(TrackSeqs::new(&[6, 2])).as_slice(), &[6, 8]);
        assert_eq!(a.max(TrackSeqs::new(&[9])), a);
        assert_eq!(TrackSeqs::NONE.max(a), a);
        assert_eq!(a.max(TrackSeqs::NONE), a);
    }
}
