//! A feed's *live edge* and its viewers (sans-IO): which chunks are kept, where a viewer starts,
//! and which chunk goes to which viewer when.
//!
//! The edge keeps the chunks of the last [`EdgeConfig::window`] of the feed, and at least those
//! from the newest seek point on (a key frame of the video track, or the audio track's seek
//! points when there is no video). A viewer who joins at the edge starts decoding at once: its first packet is the newest seek point's, and what has arrived since
//! then reaches it at once (its pacer finds those packets overdue and sends them as fast as it
//! can), after which it receives each chunk as it is sealed. A viewer is a cursor over the
//! chunks: the glue holds each chunk once, and hands the same shared chunk to every viewer the
//! edge names ([`EdgeOutput::Deliver`]). A viewer that joins before the feed's first seek point
//! waits for it ([`EdgeOutput::Joined`] comes then).
//!
//! A viewer may also join in the past (time-shift, a PLAY with a `Range` start): at the last
//! seek point at or before that time among the chunks kept (the oldest one, for a time before
//! the window). It is handed every chunk from there at once and its pacer plays them at its own
//! pace, behind the edge; at a faster pace (`Speed`) it reaches the edge and follows it. The
//! packets are the recording's, numbered alike, so what it plays is what is stored.
//!
//! RFC 2326 §12.33 wants a PLAY's response before its first packet, and the response is written
//! by another task than the packets: a viewer's first chunks are handed out
//! [`EdgeConfig::start_delay`] after it joined (the glue answers the PLAY on
//! [`EdgeOutput::Joined`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use isochron_base::{BlockIndex, Instant, Position, RunId, StreamId};

use crate::chunk::ChunkInfo;

/// How long after a packet arrived from the publisher it is due to viewers: a chunk's span
/// ([`crate::ChunkConfig::span`]), the access unit the ingest holds until its last packet,
/// the hand-offs to the sender, and a margin. Packets already due when a viewer starts (those
/// since the seek point it starts at) go out at once.
pub const VIEWER_DELAY: Duration = Duration::from_millis(100);

/// How the edge serves its viewers.
#[derive(Clone, Copy, Debug)]
pub struct EdgeConfig {
    /// How long after it joined a viewer's first chunk is handed out (its PLAY's response goes
    /// first).
    pub start_delay: Duration,
    /// The most chunks kept, whatever the seek points (a feed whose key frames are far apart
    /// costs no more memory than this).
    pub max_chunks: usize,
    /// How much of the feed is kept for viewers to go back into (the DVR window), by the send
    /// times of the chunks' packets.
    pub window: Duration,
}

impl Default for EdgeConfig {
    fn default() -> Self {
        Self {
            start_delay: Duration::from_millis(30),
            max_chunks: 16_384,
            window: Duration::from_secs(60),
        }
    }
}

/// What the edge asks of its owner.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EdgeOutput {
    /// A viewer starts at `first`, a seek point in chunk `from`: answer its PLAY.
    Joined {
        /// The viewer's stream.
        viewer: StreamId,
        /// Its run.
        run: RunId,
        /// Its first packet.
        first: Position,
        /// The chunk holding it.
        from: BlockIndex,
    },
    /// Hand chunk `index` to a viewer's stream.
    Deliver {
        /// The viewer's stream.
        viewer: StreamId,
        /// Its run.
        run: RunId,
        /// The chunk.
        index: BlockIndex,
    },
    /// No viewer will be handed chunk `index` any more: drop it.
    Evict {
        /// The chunk.
        index: BlockIndex,
    },
    /// The feed ended: the viewer's stream has been handed its last chunk, `last` (`None`: it
    /// was handed none).
    Ended {
        /// The viewer's stream.
        viewer: StreamId,
        /// Its run.
        run: RunId,
        /// The feed's last chunk.
        last: Option<BlockIndex>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cursor {
    /// Waiting for the feed's first seek point.
    AwaitingKey,
    /// Joined at chunk `from`; chunks go out from `at` on.
    Starting { from: BlockIndex, at: Instant },
    /// Handed every chunk before `next`.
    Live { next: BlockIndex },
}

#[derive(Clone, Copy, Debug)]
struct Viewer {
    run: RunId,
    cursor: Cursor,
}

/// The edge of one feed (see the module docs).
#[derive(Debug)]
pub struct Edge {
    config: EdgeConfig,
    chunks: VecDeque<ChunkInfo>,
    /// The newest seek point and its chunk.
    key: Option<(BlockIndex, Position)>,
    viewers: BTreeMap<StreamId, Viewer>,
    out: VecDeque<EdgeOutput>,
    ended: bool,
}

impl Edge {
    /// An edge with no chunk yet.
    #[must_use]
    pub fn new(config: EdgeConfig) -> Self {
        Self {
            config,
            chunks: VecDeque::new(),
            key: None,
            viewers: BTreeMap::new(),
            out: VecDeque::new(),
            ended: false,
        }
    }

    /// A chunk was sealed (chunks come in index order).
    pub fn handle_chunk(&mut self, now: Instant, info: ChunkInfo) {
        if self.ended {
            return;
        }
        let index = info.index;
        if let Some(k) = info.keys.last() {
            self.key = Some((index, *k));
        }
        self.chunks.push_back(info);
        // Viewers waiting for a seek point start at this one.
        if let Some((from, first)) = self.key {
            for (&viewer, v) in &mut self.viewers {
                if v.cursor == Cursor::AwaitingKey {
                    v.cursor = Cursor::Starting { from, at: now + self.config.start_delay };
                    self.out.push_back(EdgeOutput::Joined { viewer, run: v.run, first, from });
                }
            }
        }
        for (&viewer, v) in &mut self.viewers {
            if let Cursor::Live { next } = &mut v.cursor
                && *next <= index
            {
                *next = BlockIndex(index.0 + 1);
                self.out.push_back(EdgeOutput::Deliver { viewer, run: v.run, index });
            }
        }
        self.evict();
    }

    /// A viewer's PLAY (its stream, in run `run`): it starts at the newest seek point, now or
    /// once there is one ([`EdgeOutput::Joined`]); with `at`, at the last seek point kept at or
    /// before that time (time-shift; the oldest kept when `at` is older). A viewer that was
    /// watching starts again.
    pub fn handle_join(
        &mut self,
        now: Instant,
        viewer: StreamId,
        run: RunId,
        at: Option<isochron_base::MediaTime>,
    ) {
        let start = match at {
            Some(t) => self.key_at(t).or(self.key),
            None => self.key,
        };
        let cursor = match start {
            Some((from, first)) => {
                self.out.push_back(EdgeOutput::Joined { viewer, run, first, from });
                Cursor::Starting { from, at: now + self.config.start_delay }
            }
            None => Cursor::AwaitingKey,
        };
        self.viewers.insert(viewer, Viewer { run, cursor });
        if self.ended {
            self.out.push_back(EdgeOutput::Ended { viewer, run, last: None });
        }
    }

    /// The last seek point kept at or before `t`, else the oldest kept.
    fn key_at(&self, t: isochron_base::MediaTime) -> Option<(BlockIndex, Position)> {
        let keys = self.chunks.iter().flat_map(|c| c.keys.iter().map(|k| (c.index, *k)));
        let mut oldest = None;
        let mut best = None;
        for (index, k) in keys {
            oldest.get_or_insert((index, k));
            if k.time <= t {
                best = Some((index, k));
            }
        }
        best.or(oldest)
    }

    /// The media time of the oldest seek point kept (how far back a viewer can go).
    #[must_use]
    pub fn oldest_key(&self) -> Option<Position> {
        self.chunks.iter().find_map(|c| c.keys.first().copied())
    }

    /// A viewer left (TEARDOWN, PAUSE, its connection closed).
    pub fn handle_leave(&mut self, viewer: StreamId) {
        if self.viewers.remove(&viewer).is_some() {
            self.evict();
        }
    }

    /// Hands starting viewers their first chunks once their delay has passed.
    pub fn handle_timeout(&mut self, now: Instant) {
        let newest = self.chunks.back().map(|c| c.index);
        for (&viewer, v) in &mut self.viewers {
            let Cursor::Starting { from, at } = v.cursor else { continue };
            if at > now {
                continue;
            }
            let mut next = from;
            for c in self.chunks.iter().filter(|c| c.index >= from) {
                self.out.push_back(EdgeOutput::Deliver { viewer, run: v.run, index: c.index });
                next = BlockIndex(c.index.0 + 1);
            }
            if let Some(n) = newest {
                next = next.max(BlockIndex(n.0 + 1));
            }
            v.cursor = Cursor::Live { next };
        }
        self.evict();
    }

    /// When [`Edge::handle_timeout`] is next due.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.viewers
            .values()
            .filter_map(|v| match v.cursor {
                Cursor::Starting { at, .. } => Some(at),
                _ => None,
            })
            .min()
    }

    /// The feed ended: every viewer has had its last chunk once those starting have theirs.
    pub fn handle_end(&mut self, now: Instant) {
        if self.ended {
            return;
        }
        // Those about to start get what there is at once: nothing more will come.
        for v in self.viewers.values_mut() {
            if let Cursor::Starting { from, .. } = v.cursor {
                v.cursor = Cursor::Starting { from, at: now };
            }
        }
        self.handle_timeout(now);
        self.ended = true;
        let newest = self.chunks.back().map(|c| c.index);
        for (&viewer, v) in &self.viewers {
            let last = match v.cursor {
                Cursor::Live { .. } => newest,
                _ => None,
            };
            self.out.push_back(EdgeOutput::Ended { viewer, run: v.run, last });
        }
        for c in self.chunks.drain(..) {
            self.out.push_back(EdgeOutput::Evict { index: c.index });
        }
    }

    /// Drops the chunks no viewer can be handed any more: those older than the window and
    /// before the newest seek point that no starting viewer needs, and the oldest beyond
    /// [`EdgeConfig::max_chunks`].
    fn evict(&mut self) {
        // Before the first seek point nobody can start: nothing is kept.
        let newest_key = self.key.map_or(BlockIndex(u32::MAX), |(i, _)| i);
        // The window: the chunks whose last packet is within it of the newest chunk's.
        let newest = self.chunks.back().map(|c| c.last_time);
        let in_window = newest.and_then(|n| {
            let since =
                isochron_base::MediaTime::from_nanos(n.as_nanos().saturating_sub(
                    u64::try_from(self.config.window.as_nanos()).unwrap_or(u64::MAX),
                ));
            self.chunks.iter().find(|c| c.last_time >= since).map(|c| c.index)
        });
        let keep_from = match (self.key, in_window) {
            (Some(_), Some(w)) => w.min(newest_key),
            _ => newest_key,
        };
        let needed = self
            .viewers
            .values()
            .filter_map(|v| match v.cursor {
                Cursor::Starting { from, .. } => Some(from),
                _ => None,
            })
            .min()
            .map_or(keep_from, |f| f.min(keep_from));
        while let Some(c) = self.chunks.front() {
            if c.index >= needed && self.chunks.len() <= self.config.max_chunks {
                break;
            }
            let index = c.index;
            self.chunks.pop_front();
            self.out.push_back(EdgeOutput::Evict { index });
        }
    }

    /// The chunks kept.
    #[must_use]
    pub fn chunk_count(&self) -> usize {
        self.chunks.len()
    }

    /// What the owner must do next.
    pub fn poll_output(&mut self) -> Option<EdgeOutput> {
        self.out.pop_front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isochron_base::{Gsn, MediaTime};

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    fn key(gsn: u64) -> Position {
        Position::at(Gsn(gsn), MediaTime::from_nanos(gsn * 1_000_000))
    }

    fn chunk(index: u32, keys: &[u64]) -> ChunkInfo {
        ChunkInfo {
            index: BlockIndex(index),
            first: key(u64::from(index) * 10),
            keys: keys.iter().map(|g| key(*g)).collect(),
            packets: 10,
            last_time: MediaTime::from_nanos((u64::from(index) * 10 + 9) * 1_000_000),
        }
    }

    fn drain(e: &mut Edge) -> Vec<EdgeOutput> {
        std::iter::from_fn(|| e.poll_output()).collect()
    }

    fn deliver(viewer: u64, index: u32) -> EdgeOutput {
        EdgeOutput::Deliver { viewer: StreamId(viewer), run: RunId(1), index: BlockIndex(index) }
    }

    #[test]
    fn a_viewer_starts_at_the_newest_key_frame_after_its_delay_then_follows_the_edge() {
        let config = EdgeConfig {
            start_delay: Duration::from_millis(30),
            max_chunks: 100,
            window: Duration::ZERO,
        };
        let mut e = Edge::new(config);
        // A viewer before any key frame waits for one.
        e.handle_join(at(0), StreamId(1), RunId(1), None);
        e.handle_chunk(at(10), chunk(0, &[]));
        assert_eq!(drain(&mut e), vec![EdgeOutput::Evict { index: BlockIndex(0) }]);
        e.handle_chunk(at(20), chunk(1, &[12]));
        let joined = EdgeOutput::Joined {
            viewer: StreamId(1),
            run: RunId(1),
            first: key(12),
            from: BlockIndex(1),
        };
        assert_eq!(drain(&mut e), vec![joined]);
        e.handle_chunk(at(30), chunk(2, &[]));
        assert!(drain(&mut e).is_empty());
        assert_eq!(e.poll_timeout(), Some(at(50)));
        e.handle_timeout(at(50));
        assert_eq!(drain(&mut e), vec![deliver(1, 1), deliver(1, 2)]);
        e.handle_chunk(at(60), chunk(3, &[]));
        assert_eq!(drain(&mut e), vec![deliver(1, 3)]);
        // A new key frame: the chunks before it go, once nobody starting needs them.
        e.handle_chunk(at(70), chunk(4, &[41, 45]));
        let out = drain(&mut e);
        assert_eq!(out[0], deliver(1, 4));
        assert_eq!(out.len(), 4, "{out:?}");
        assert_eq!(e.chunk_count(), 1);
        // A second viewer starts at the newest seek point of the newest key chunk.
        e.handle_join(at(71), StreamId(2), RunId(1), None);
        assert!(matches!(
            drain(&mut e)[..],
            [EdgeOutput::Joined { first, from: BlockIndex(4), .. }] if first == key(45)
        ));
        e.handle_chunk(at(80), chunk(5, &[]));
        assert_eq!(drain(&mut e), vec![deliver(1, 5)]);
        e.handle_timeout(at(101));
        assert_eq!(drain(&mut e), vec![deliver(2, 4), deliver(2, 5)]);
        // The first leaves; the feed ends.
        e.handle_leave(StreamId(1));
        e.handle_end(at(110));
        let out = drain(&mut e);
        let last = Some(BlockIndex(5));
        assert_eq!(out[0], EdgeOutput::Ended { viewer: StreamId(2), run: RunId(1), last });
        assert_eq!(out.len(), 3, "{out:?}");
    }

    #[test]
    fn the_edge_is_bounded_without_key_frames() {
        let config =
            EdgeConfig { start_delay: Duration::ZERO, max_chunks: 3, window: Duration::ZERO };
        let mut e = Edge::new(config);
        e.handle_chunk(at(0), chunk(0, &[1]));
        e.handle_join(at(0), StreamId(1), RunId(1), None);
        for i in 1..10 {
            e.handle_chunk(at(u64::from(i)), chunk(i, &[]));
        }
        assert!(e.chunk_count() <= 3);
    }

    /// Time-shift: the window keeps the last stretch of the feed; a viewer joining at a time in
    /// it starts at the last seek point at or before that time and is handed every chunk from
    /// there, then follows the edge; before the window, it starts at the oldest kept.
    #[test]
    fn a_viewer_goes_back_into_the_window() {
        let config = EdgeConfig {
            start_delay: Duration::ZERO,
            max_chunks: 100,
            window: Duration::from_millis(45),
        };
        let mut e = Edge::new(config);
        for i in 0..10 {
            // A seek point every other chunk, at its first packet.
            let keys: &[u64] = if i % 2 == 0 { &[u64::from(i) * 10] } else { &[] };
            e.handle_chunk(at(u64::from(i) * 10), chunk(i, keys));
        }
        drain(&mut e);
        // Chunk 9's last packet is at 99 ms: the window keeps chunks 5..=9, seek points 60, 80.
        assert_eq!(e.chunk_count(), 5);
        assert_eq!(e.oldest_key(), Some(key(60)));
        e.handle_join(at(100), StreamId(1), RunId(1), Some(MediaTime::from_nanos(75_000_000)));
        assert!(matches!(
            drain(&mut e)[..],
            [EdgeOutput::Joined { first, from: BlockIndex(6), .. }] if first == key(60)
        ));
        e.handle_timeout(at(100));
        assert_eq!(drain(&mut e), vec![deliver(1, 6), deliver(1, 7), deliver(1, 8), deliver(1, 9)]);
        e.handle_chunk(at(110), chunk(10, &[]));
        assert_eq!(drain(&mut e)[0], deliver(1, 10));
        // Before the window: the oldest seek point kept.
        e.handle_join(at(111), StreamId(2), RunId(1), Some(MediaTime::ZERO));
        assert!(
            matches!(drain(&mut e)[..], [EdgeOutput::Joined { first, .. }] if first == key(60))
        );
    }
}
