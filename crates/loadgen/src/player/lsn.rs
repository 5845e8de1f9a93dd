//! Loss attribution per node from local sequence numbers (Yima §2.6).
//!
//! Why: a client of a cluster receives one session from several nodes, and the global order
//! (the RTP sequence number) says that a packet is missing, not which node should have sent it.
//! Each node stamps its packets with its own count for the session, the LSN (RFC 8285 header
//! extension, `isochron_rtp::lsn`); a gap in one node's LSNs is a packet that node sent and the
//! network lost. This is what a retransmission request per node (RFC 4585 generic NACK) will be
//! built on: [`LsnTracker::handle`] returns each gap as it opens.
//!
//! Counting follows RFC 3550 §A.3: expected (highest − first + 1, 16-bit numbers extended to 64
//! bits) less received. The caller feeds each packet once (duplicates filtered out).
//!
//! Not here: the global order ([`super::reorder`]), sources, sockets.

use std::ops::Range;

/// See [`super::reorder`]: room below the first number for packets that arrive after it.
const BASE: u64 = 1 << 16;

/// One source's LSNs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LsnTracker {
    /// First and highest extended LSN, once one arrived.
    span: Option<(u64, u64)>,
    received: u64,
}

impl LsnTracker {
    /// A packet with `lsn` arrived (once). Returns the extended LSNs found missing by it: the
    /// gap between the highest received before it and it, if any.
    pub fn handle(&mut self, lsn: u16) -> Option<Range<u64>> {
        self.received += 1;
        let Some((first, highest)) = self.span else {
            let ext = BASE + u64::from(lsn);
            self.span = Some((ext, ext));
            return None;
        };
        let ext = highest.wrapping_add_signed(i64::from(lsn.wrapping_sub(highest as u16) as i16));
        self.span = Some((first.min(ext), highest.max(ext)));
        (ext > highest + 1).then_some(highest + 1..ext)
    }

    /// Packets received with an LSN.
    #[must_use]
    pub fn received(&self) -> u64 {
        self.received
    }

    /// LSNs never received between the first and the highest: this source's losses.
    #[must_use]
    pub fn gaps(&self) -> u64 {
        self.span.map_or(0, |(first, highest)| (highest - first + 1).saturating_sub(self.received))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_are_counted_across_the_wrap_and_filled_by_late_packets() {
        let mut t = LsnTracker::default();
        assert_eq!(t.gaps(), 0);
        assert_eq!(t.handle(65_534), None);
        assert_eq!(t.handle(65_535), None);
        // 0 and 1 missing, across the wrap.
        let gap = t.handle(2).expect("a gap");
        assert_eq!(gap.end - gap.start, 2);
        assert_eq!((t.received(), t.gaps()), (3, 2));
        // 1 arrives after all (reordered on the way): one gap left.
        assert_eq!(t.handle(1), None);
        assert_eq!(t.gaps(), 1);
        assert_eq!(t.handle(3), None);
        assert_eq!((t.received(), t.gaps()), (5, 1));
        // A packet from before the first one widens the span without a gap.
        assert_eq!(t.handle(65_533), None);
        assert_eq!((t.received(), t.gaps()), (6, 1));
    }

    #[test]
    fn thousands_in_order_have_no_gap_and_a_gap_is_reported_once() {
        let mut t = LsnTracker::default();
        for i in 0..200_000u32 {
            assert_eq!(t.handle((i + 60_000) as u16), None);
        }
        assert_eq!(t.gaps(), 0);
        let gap = t.handle(((60_000 + 200_000 + 3) % 65_536) as u16).expect("three missing");
        assert_eq!(gap, BASE + 60_000 + 200_000..BASE + 60_000 + 200_003);
        assert_eq!(t.gaps(), 3);
    }
}
