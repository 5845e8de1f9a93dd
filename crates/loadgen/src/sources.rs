//! Per-source accounting: what each sender of one session delivered.
//!
//! Why: in a Yima cluster every node sends its own blocks straight to the client from its own
//! address, all under the session's one SSRC (Yima §2.2, bipartite delivery). A client that wants
//! to know each node's share of the bandwidth (Yima Figure 4 (c)(d)(i)(j)) or which node lost a
//! packet (§2.6) keeps its counts per source address. The table is small and fixed: a cluster has
//! a handful of nodes, and the receive path must not allocate per packet (the bench has to stay
//! cheaper than the server it measures), so a lookup is a short linear scan that starts at the
//! last source hit, and the storage is reserved once.
//!
//! Not here: what is counted per source (the caller's `V`), sockets.

/// Most sources a table tells apart; packets from further sources are not attributed (the
/// caller still counts them in its session totals).
pub const MAX_SOURCES: usize = 16;

/// Packets and payload bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Traffic {
    /// Packets.
    pub packets: u64,
    /// Payload bytes (the RTP payload: TS bytes for MP2T).
    pub bytes: u64,
}

impl Traffic {
    /// Counts one packet of `bytes` payload bytes.
    pub fn add(&mut self, bytes: usize) {
        self.packets += 1;
        self.bytes += bytes as u64;
    }
}

/// Up to [`MAX_SOURCES`] sources (`K`: an IP or a socket address), each with a `V`, in the order
/// they were first seen.
#[derive(Clone, Debug)]
pub struct SourceTable<K, V> {
    entries: Vec<(K, V)>,
    last: usize,
}

impl<K: Copy + Eq, V: Default> Default for SourceTable<K, V> {
    fn default() -> Self {
        Self::new()
    }
}

impl<K: Copy + Eq, V: Default> SourceTable<K, V> {
    /// An empty table with room for [`MAX_SOURCES`] (the only allocation it makes).
    #[must_use]
    pub fn new() -> Self {
        Self { entries: Vec::with_capacity(MAX_SOURCES), last: 0 }
    }

    /// The entry of `key` with its index (order of first sight), added if new; `None` when the
    /// table is full and `key` is not in it.
    pub fn entry(&mut self, key: K) -> Option<(usize, &mut V)> {
        let i = match self.entries.get(self.last) {
            Some((k, _)) if *k == key => self.last,
            _ => match self.entries.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                None if self.entries.len() < MAX_SOURCES => {
                    self.entries.push((key, V::default()));
                    self.entries.len() - 1
                }
                None => return None,
            },
        };
        self.last = i;
        Some((i, &mut self.entries[i].1))
    }

    /// The sources in the order first seen.
    pub fn iter(&self) -> impl Iterator<Item = &(K, V)> {
        self.entries.iter()
    }

    /// The entries, mutably, in the order first seen.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&K, &mut V)> {
        self.entries.iter_mut().map(|(k, v)| (&*k, v))
    }
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;

    #[test]
    fn sources_keep_their_order_and_the_table_stops_at_its_size() {
        let mut t: SourceTable<IpAddr, Traffic> = SourceTable::new();
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        for round in 0..3 {
            for i in [2u8, 1, 2, 3] {
                let (idx, tr) = t.entry(ip(i)).unwrap();
                tr.add(100 * usize::from(i));
                assert_eq!(idx, [0, 1, 0, 2][usize::from(i) % 4], "round {round}");
            }
        }
        let got: Vec<(IpAddr, Traffic)> = t.iter().copied().collect();
        assert_eq!(
            got,
            [
                (ip(2), Traffic { packets: 6, bytes: 1200 }),
                (ip(1), Traffic { packets: 3, bytes: 300 }),
                (ip(3), Traffic { packets: 3, bytes: 900 }),
            ]
        );
        for i in 4..=(MAX_SOURCES as u8) {
            assert!(t.entry(ip(i)).is_some());
        }
        assert_eq!(t.iter().count(), MAX_SOURCES);
        assert!(t.entry(ip(200)).is_none(), "full");
        assert!(t.entry(ip(1)).is_some(), "known sources are still found");
    }
}
