//! Clock offsets between nodes, from the heartbeats' four timestamps.
//!
//! Why: in bipartite delivery every node sends its own packets at `anchor + (t − t0) / pace`, so
//! the nodes must agree on when the anchor is (Yima §2.2: "the synchronized decentralized
//! scheduler"). Anchors travel as Unix nanoseconds on the origin's clock; each node converts them
//! with its estimate of the origin's clock offset. Hosts are expected to run NTP or PTP, which
//! keeps the offset within a millisecond on a LAN; the estimate here corrects what is left and
//! makes a drifting host visible (`/api/v1/nodes` shows each peer's offset and round trip).
//!
//! The estimate is NTP's on-wire calculation (RFC 5905 §8): with `t0` the ping's send time,
//! `t1` its arrival at the peer, `t2` the pong's departure and `t3` its arrival, the peer's clock
//! is ahead by `θ = ((t1 − t0) + (t2 − t3)) / 2`, within ± half the round trip
//! `δ = (t3 − t0) − (t2 − t1)`. Of the last [`WINDOW`] samples the one with the smallest round
//! trip is used (NTP's clock filter, simplified): queueing delays only ever add to δ.

use std::collections::VecDeque;
use std::time::Duration;

/// Samples kept per peer.
pub const WINDOW: usize = 8;

/// One peer's offset estimate.
#[derive(Clone, Debug, Default)]
pub struct ClockSync {
    samples: VecDeque<(i64, u64)>,
}

impl ClockSync {
    /// Adds a probe's four timestamps (Unix ns): `t0`, `t3` on our clock, `t1`, `t2` on the peer's.
    pub fn handle_sample(&mut self, t0: u64, t1: u64, t2: u64, t3: u64) {
        let (t0, t1, t2, t3) = (i128::from(t0), i128::from(t1), i128::from(t2), i128::from(t3));
        let delay = (t3 - t0) - (t2 - t1);
        if delay < 0 {
            // Clocks stepped during the probe: not a usable sample.
            return;
        }
        let offset = ((t1 - t0) + (t2 - t3)) / 2;
        let offset = offset.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        if self.samples.len() == WINDOW {
            self.samples.pop_front();
        }
        self.samples.push_back((offset, u64::try_from(delay).unwrap_or(u64::MAX)));
    }

    /// How far the peer's clock is ahead of ours, in ns (0 before any sample).
    #[must_use]
    pub fn offset_ns(&self) -> i64 {
        self.best().map_or(0, |(o, _)| o)
    }

    /// The round trip of the sample in use.
    #[must_use]
    pub fn round_trip(&self) -> Option<Duration> {
        self.best().map(|(_, d)| Duration::from_nanos(d))
    }

    /// Converts a Unix time on the peer's clock to ours.
    #[must_use]
    pub fn to_local(&self, peer_unix_ns: u64) -> u64 {
        peer_unix_ns.saturating_add_signed(-self.offset_ns())
    }

    fn best(&self) -> Option<(i64, u64)> {
        self.samples.iter().copied().min_by_key(|&(_, d)| d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_and_round_trip_from_the_best_sample() {
        let mut c = ClockSync::default();
        assert_eq!(c.offset_ns(), 0);
        // Peer 5 ms ahead; 2 ms each way.
        c.handle_sample(1_000_000_000, 1_007_000_000, 1_007_100_000, 1_004_100_000);
        assert_eq!(c.offset_ns(), 5_000_000);
        assert_eq!(c.round_trip(), Some(Duration::from_millis(4)));
        // A queued sample (asymmetric, long) does not displace it.
        c.handle_sample(2_000_000_000, 2_030_000_000, 2_030_000_000, 2_010_000_000);
        assert_eq!(c.offset_ns(), 5_000_000);
        assert_eq!(c.to_local(1_005_000_000), 1_000_000_000);
        // A stepped clock gives a negative delay: ignored.
        c.handle_sample(3_000_000_000, 1, 10, 3_000_000_001);
        assert_eq!(c.offset_ns(), 5_000_000);
    }

    #[test]
    fn the_window_forgets_old_samples() {
        let mut c = ClockSync::default();
        c.handle_sample(0, 1_000, 1_000, 0); // best ever: delay 0, offset 1000
        for i in 1..=WINDOW as u64 {
            let t = i * 1_000_000;
            c.handle_sample(t, t - 200, t - 200, t + 1000);
        }
        assert_eq!(c.offset_ns(), -700);
    }
}
