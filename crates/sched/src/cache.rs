//! The shared block cache with per-block session reference counts (Yima's file I/O module).
//!
//! Every block a stream needs is *pinned* by that stream before it is read and *unpinned* when
//! the sender is done with it. A pinned block is never evicted; an unpinned block stays cached
//! (least recently unpinned first out) so a second stream trailing the first on the same object
//! reads it from memory instead of from disk — interval caching. Concurrent requests for a block
//! that is being read coalesce onto the one read.
//!
//! Accounting follows Yima §3 (Table I) and §3.2.2 (the shared block list): `B_disk` counts the
//! bytes handed to streams that came from a disk read, `B_cache` the bytes handed to streams from
//! memory (a ready hit, or a request that joined a read already in flight). `B_disk + B_cache` is
//! every block byte delivered.
//!
//! The cache stores values of any type `V` (the server stores `Arc` handles to block buffers; tests
//! store integers): it performs no IO and never reads a clock.

use std::collections::{BTreeMap, HashMap};

use isochron_base::{BlockKey, Bytes, StreamId};

/// Counters exported as metrics; monotonic since the cache was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheStats {
    /// Bytes delivered to streams that a disk read produced (Yima's `B_disk`, integrated).
    pub bytes_from_disk: u64,
    /// Bytes delivered to streams from memory (Yima's `B_cache`, integrated).
    pub bytes_from_cache: u64,
    /// Pins answered from a ready entry.
    pub hits: u64,
    /// Pins that joined a read already in flight.
    pub coalesced: u64,
    /// Pins that needed a new disk read.
    pub misses: u64,
    /// Entries evicted to make room.
    pub evictions: u64,
}

/// What a [`BlockCache::pin`] found.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Pin<V> {
    /// The block is in memory.
    Hit(V),
    /// A read for the block is in flight; the stream will be given it by [`BlockCache::fill`].
    Pending,
    /// The block is not cached and nobody is reading it: the caller must issue the read.
    Miss,
}

#[derive(Debug)]
enum State<V> {
    Loading { waiters: Vec<StreamId> },
    Ready(V),
}

#[derive(Debug)]
struct Entry<V> {
    state: State<V>,
    refs: u32,
    len: Bytes,
    /// Position in the LRU list while `refs == 0` and the entry is ready.
    lru_tick: Option<u64>,
}

/// A byte-bounded cache of blocks with per-block reference counts.
#[derive(Debug)]
pub struct BlockCache<V> {
    capacity: Bytes,
    used: Bytes,
    entries: HashMap<BlockKey, Entry<V>>,
    lru: BTreeMap<u64, BlockKey>,
    tick: u64,
    stats: CacheStats,
}

impl<V: Clone> BlockCache<V> {
    /// An empty cache holding up to `capacity` bytes of unpinned blocks. Pinned blocks may exceed
    /// it: they are in use and cannot be dropped (admission control keeps that bounded).
    #[must_use]
    pub fn new(capacity: Bytes) -> Self {
        Self {
            capacity,
            used: Bytes(0),
            entries: HashMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            stats: CacheStats::default(),
        }
    }

    /// Pins `key` for `stream`. `len` is the block's size, used for accounting on a miss.
    pub fn pin(&mut self, stream: StreamId, key: BlockKey, len: Bytes) -> Pin<V> {
        if let Some(e) = self.entries.get_mut(&key) {
            e.refs += 1;
            if let Some(t) = e.lru_tick.take() {
                self.lru.remove(&t);
            }
            return match &mut e.state {
                State::Ready(v) => {
                    self.stats.hits += 1;
                    self.stats.bytes_from_cache += e.len.0;
                    Pin::Hit(v.clone())
                }
                State::Loading { waiters } => {
                    self.stats.coalesced += 1;
                    waiters.push(stream);
                    Pin::Pending
                }
            };
        }
        self.stats.misses += 1;
        self.used += len;
        self.entries.insert(
            key,
            Entry { state: State::Loading { waiters: vec![stream] }, refs: 1, len, lru_tick: None },
        );
        self.evict_to_capacity();
        Pin::Miss
    }

    /// Stores the result of a read and returns the streams waiting for it, in pin order. The
    /// first waiter's bytes count as `B_disk`, the others' as `B_cache` (they shared the read).
    pub fn fill(&mut self, key: BlockKey, value: V) -> Vec<StreamId> {
        let Some(e) = self.entries.get_mut(&key) else {
            return Vec::new(); // every waiter left and the entry was dropped
        };
        let waiters = match std::mem::replace(&mut e.state, State::Ready(value)) {
            State::Loading { waiters } => waiters,
            State::Ready(_) => Vec::new(),
        };
        if let Some((_, rest)) = waiters.split_first() {
            self.stats.bytes_from_disk += e.len.0;
            self.stats.bytes_from_cache += e.len.0 * rest.len() as u64;
        }
        if e.refs == 0 {
            self.make_evictable(key);
        }
        waiters
    }

    /// Drops a failed read's entry and returns the streams that were waiting for it. Their pins
    /// are released.
    pub fn fail(&mut self, key: BlockKey) -> Vec<StreamId> {
        match self.entries.remove(&key) {
            Some(Entry { state: State::Loading { waiters }, len, .. }) => {
                self.used = self.used - len;
                waiters
            }
            Some(e) => {
                // A ready entry cannot fail; put it back untouched.
                self.entries.insert(key, e);
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Releases one pin of `stream` on `key`. A stream that was still waiting for the read is
    /// removed from the waiters.
    pub fn unpin(&mut self, stream: StreamId, key: BlockKey) {
        let Some(e) = self.entries.get_mut(&key) else {
            debug_assert!(false, "unpin of unknown block {key}");
            return;
        };
        debug_assert!(e.refs > 0, "unpin of unpinned block {key}");
        e.refs = e.refs.saturating_sub(1);
        if let State::Loading { waiters } = &mut e.state
            && let Some(pos) = waiters.iter().position(|s| *s == stream)
        {
            waiters.remove(pos);
        }
        if e.refs == 0 {
            match e.state {
                State::Ready(_) => self.make_evictable(key),
                // Keep a loading entry with no pins: the read is in flight and its result is
                // worth keeping; `fill` makes it evictable.
                State::Loading { .. } => {}
            }
        }
    }

    /// The value of `key` if it is ready, without pinning or counting (for tools).
    #[must_use]
    pub fn peek(&self, key: BlockKey) -> Option<&V> {
        match &self.entries.get(&key)?.state {
            State::Ready(v) => Some(v),
            State::Loading { .. } => None,
        }
    }

    /// The pin count of `key` (0 if absent).
    #[must_use]
    pub fn refs(&self, key: BlockKey) -> u32 {
        self.entries.get(&key).map_or(0, |e| e.refs)
    }

    /// Bytes held, pinned or not.
    #[must_use]
    pub fn used(&self) -> Bytes {
        self.used
    }

    /// The configured capacity.
    #[must_use]
    pub fn capacity(&self) -> Bytes {
        self.capacity
    }

    /// Number of entries, loading or ready.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the cache holds nothing.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> CacheStats {
        self.stats
    }

    /// Drops every unpinned ready block of an object (after the object is removed).
    pub fn purge_object(&mut self, object: isochron_base::ObjectId) {
        let keys: Vec<_> =
            self.lru.iter().filter(|(_, k)| k.object == object).map(|(t, k)| (*t, *k)).collect();
        for (t, k) in keys {
            self.lru.remove(&t);
            if let Some(e) = self.entries.remove(&k) {
                self.used = self.used - e.len;
            }
        }
    }

    fn make_evictable(&mut self, key: BlockKey) {
        self.tick += 1;
        if let Some(e) = self.entries.get_mut(&key) {
            e.lru_tick = Some(self.tick);
            self.lru.insert(self.tick, key);
        }
        self.evict_to_capacity();
    }

    fn evict_to_capacity(&mut self) {
        while self.used > self.capacity {
            let Some((_, key)) = self.lru.pop_first() else { break };
            if let Some(e) = self.entries.remove(&key) {
                debug_assert_eq!(e.refs, 0);
                self.used = self.used - e.len;
                self.stats.evictions += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use isochron_base::{BlockIndex, ObjectId};

    fn key(i: u32) -> BlockKey {
        BlockKey::new(ObjectId(1), BlockIndex(i))
    }
    const S1: StreamId = StreamId(1);
    const S2: StreamId = StreamId(2);
    const MB: Bytes = Bytes::mib(1);

    #[test]
    fn miss_fill_hit_and_accounting() {
        let mut c = BlockCache::new(Bytes::mib(4));
        assert_eq!(c.pin(S1, key(0), MB), Pin::Miss);
        assert_eq!(c.pin(S2, key(0), MB), Pin::Pending);
        assert_eq!(c.fill(key(0), 7), vec![S1, S2]);
        assert_eq!(c.refs(key(0)), 2);
        let s = c.stats();
        assert_eq!((s.bytes_from_disk, s.bytes_from_cache), (MB.0, MB.0));
        c.unpin(S1, key(0));
        c.unpin(S2, key(0));
        // Unpinned but cached: a third stream hits.
        assert_eq!(c.pin(StreamId(3), key(0), MB), Pin::Hit(7));
        assert_eq!(c.stats().bytes_from_cache, 2 * MB.0);
        // Invariant: B_disk + B_cache = bytes delivered (3 deliveries of 1 MiB).
        let s = c.stats();
        assert_eq!(s.bytes_from_disk + s.bytes_from_cache, 3 * MB.0);
    }

    #[test]
    fn pinned_blocks_are_never_evicted() {
        let mut c = BlockCache::new(Bytes::mib(2));
        for i in 0..4 {
            assert_eq!(c.pin(S1, key(i), MB), Pin::Miss);
            let _ = c.fill(key(i), i);
        }
        // Over capacity, but everything is pinned.
        assert_eq!(c.len(), 4);
        assert_eq!(c.used(), Bytes::mib(4));
        for i in 0..4 {
            c.unpin(S1, key(i));
        }
        // Least recently unpinned go first.
        assert_eq!(c.used(), Bytes::mib(2));
        assert!(c.peek(key(0)).is_none() && c.peek(key(1)).is_none());
        assert_eq!(c.peek(key(3)), Some(&3));
        assert_eq!(c.stats().evictions, 2);
    }

    #[test]
    fn waiter_leaving_before_fill() {
        let mut c = BlockCache::new(Bytes::mib(4));
        assert_eq!(c.pin(S1, key(0), MB), Pin::Miss);
        c.unpin(S1, key(0));
        assert_eq!(c.fill(key(0), 1), Vec::<StreamId>::new());
        assert_eq!(c.refs(key(0)), 0);
        assert_eq!(c.pin(S2, key(0), MB), Pin::Hit(1));
    }

    #[test]
    fn failed_read_releases_waiters() {
        let mut c: BlockCache<u32> = BlockCache::new(Bytes::mib(4));
        assert_eq!(c.pin(S1, key(0), MB), Pin::Miss);
        assert_eq!(c.pin(S2, key(0), MB), Pin::Pending);
        assert_eq!(c.fail(key(0)), vec![S1, S2]);
        assert!(c.is_empty());
        assert_eq!(c.used(), Bytes(0));
        assert_eq!(c.pin(S1, key(0), MB), Pin::Miss);
    }

    #[test]
    fn purge_object_drops_unpinned_only() {
        let mut c = BlockCache::new(Bytes::mib(8));
        for i in 0..2 {
            let _ = c.pin(S1, key(i), MB);
            let _ = c.fill(key(i), i);
        }
        c.unpin(S1, key(0));
        c.purge_object(ObjectId(1));
        assert!(c.peek(key(0)).is_none());
        assert_eq!(c.peek(key(1)), Some(&1));
    }
}
