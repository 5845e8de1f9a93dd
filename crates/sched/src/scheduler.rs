//! The block scheduler: which block to read, from which disk, by when.
//!
//! Every playing stream keeps a window of `read_ahead_blocks` blocks pinned ahead of the sender:
//! with the default of two, one block is being sent while the next is read or ready — double
//! buffering (XTREAM §2; DESIGN §2.6). When the sender is done with a block, the window slides and
//! the next block is requested. Blocks are delivered to the sender strictly in index order, even
//! when placement spreads them over disks that answer out of order.
//!
//! Reads wait in one queue per disk ordered by deadline: the wall-clock time the block's first
//! packet is due. The first block of a start has no deadline yet (the stream's clock is anchored
//! when that block arrives), so it is due *now* and goes to the head of its disk's queue: initial
//! latency is about one IO whatever the load (XTREAM's request handler). At most
//! `disk_queue_depth` reads are in flight per disk.
//!
//! What this module does not do yet: fixed time cycles and profile-based admission control
//! (XTREAM Eq. 1–3) and the reserved non-real-time share. The inputs and outputs here are the ones
//! those will use.
//!
//! Call order, as in quinn-proto: after any `handle_*` input, drain [`Scheduler::poll_io`] and
//! [`Scheduler::poll_event`], then wait until [`Scheduler::poll_timeout`] or the next input.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{BitRate, BlockIndex, BlockKey, Bytes, DiskId, Instant, MediaTime, ObjectId};
use isochron_base::{Gsn, StreamId};

use crate::cache::{BlockCache, CacheStats, Pin};

/// Scheduler settings. See `config/example.toml` for the file form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SchedConfig {
    /// Blocks a playing stream keeps pinned: the one being sent plus the ones read ahead.
    /// Default 2 (double buffering).
    pub read_ahead_blocks: u32,
    /// Reads in flight per disk. Default 2.
    pub disk_queue_depth: u32,
    /// Bytes of unpinned blocks kept in memory. Default 256 MiB.
    pub cache_capacity: Bytes,
    /// Time from a start's first block being in memory to its first packet's send time.
    /// Default 20 ms.
    pub startup_delay: Duration,
    /// Most streams admitted at once. Default 10 000.
    pub max_streams: usize,
}

impl Default for SchedConfig {
    fn default() -> Self {
        Self {
            read_ahead_blocks: 2,
            disk_queue_depth: 2,
            cache_capacity: Bytes::mib(256),
            startup_delay: Duration::from_millis(20),
            max_streams: 10_000,
        }
    }
}

/// Where one block of an object is and when it plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlannedBlock {
    /// The disk holding the block.
    pub disk: DiskId,
    /// The GSN of the block's first packet.
    pub first_gsn: Gsn,
    /// The send time of the block's first packet.
    pub first_send_time: MediaTime,
    /// The block's size on disk (what a read transfers and the cache holds).
    pub len: Bytes,
}

/// The blocks of one object in order, as the scheduler needs them. Shared by every stream of the
/// object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectPlan {
    /// The object.
    pub object: ObjectId,
    /// Its blocks, by index.
    pub blocks: Vec<PlannedBlock>,
}

impl ObjectPlan {
    /// The block holding packet `gsn`, if the object has it.
    #[must_use]
    pub fn block_of(&self, gsn: Gsn) -> Option<BlockIndex> {
        let after = self.blocks.partition_point(|b| b.first_gsn <= gsn);
        let i = after.checked_sub(1)?;
        Some(BlockIndex(u32::try_from(i).ok()?))
    }

    /// The key of block `index`.
    #[must_use]
    pub fn key(&self, index: BlockIndex) -> BlockKey {
        BlockKey::new(self.object, index)
    }
}

/// A request to admit a stream.
#[derive(Clone, Debug)]
pub struct OpenStream {
    /// The stream's id, chosen by the caller.
    pub stream: StreamId,
    /// The object it plays.
    pub plan: Arc<ObjectPlan>,
    /// The object's mean rate.
    pub avg_bitrate: BitRate,
    /// The object's peak rate over one-second windows.
    pub peak_bitrate: BitRate,
}

/// The outcome of [`Scheduler::handle_open`]: a decision, not an error.
#[derive(Clone, Debug, PartialEq, Eq)]
#[must_use]
pub enum Admission {
    /// The stream may play.
    Admit,
    /// The stream does not fit (maps to RTSP 453 Not Enough Bandwidth).
    Reject(RejectReason),
}

/// Why a stream was not admitted.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RejectReason {
    /// The configured stream limit is reached.
    TooManyStreams {
        /// The limit.
        limit: usize,
    },
    /// A stream with this id is already open.
    DuplicateStream,
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::TooManyStreams { limit } => write!(f, "stream limit of {limit} reached"),
            Self::DuplicateStream => f.write_str("stream id already open"),
        }
    }
}

/// A read for the driver to carry out and report with [`Scheduler::handle_read_done`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoRequest {
    /// The disk to read from.
    pub disk: DiskId,
    /// The block to read.
    pub key: BlockKey,
    /// Its size.
    pub len: Bytes,
    /// When its first packet is due.
    pub deadline: Instant,
}

/// A completed read.
#[derive(Debug)]
pub struct ReadDone<V> {
    /// The disk the read was issued to.
    pub disk: DiskId,
    /// The block.
    pub key: BlockKey,
    /// The block's contents, or why it could not be read.
    pub result: Result<V, String>,
}

/// Where a stream's media clock is pinned to the wall clock: the packet whose send time is
/// `media` is due at `wall`; later packets are due at `wall + (send_time − media)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Anchor {
    /// Wall-clock time of `media`.
    pub wall: Instant,
    /// The media time of the start.
    pub media: MediaTime,
}

/// Outputs for the driver.
#[derive(Debug)]
pub enum Event<V> {
    /// The next block of a stream is in memory. Blocks of a stream come in index order; the first
    /// one after a start carries the anchor to pace by.
    Deliver {
        /// The stream.
        stream: StreamId,
        /// The block's index.
        index: BlockIndex,
        /// The block.
        block: V,
        /// Set on the first delivery after [`Scheduler::handle_start`].
        anchor: Option<Anchor>,
        /// The run (see [`Scheduler::handle_start`]) this block belongs to.
        run: u64,
    },
    /// A block the stream needs could not be read; the stream is stopped.
    ReadFailed {
        /// The stream.
        stream: StreamId,
        /// The block.
        key: BlockKey,
        /// Why.
        error: String,
    },
}

/// Scheduler counters, monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SchedStats {
    /// The cache's counters (`B_disk`, `B_cache`, hits …).
    pub cache: CacheStats,
    /// Reads issued to disks.
    pub reads: u64,
    /// Reads that completed after their deadline.
    pub late_reads: u64,
    /// Reads that failed.
    pub failed_reads: u64,
    /// Streams admitted.
    pub admitted: u64,
    /// Streams rejected.
    pub rejected: u64,
}

#[derive(Debug)]
enum Slot<V> {
    Waiting(BlockIndex),
    Ready(BlockIndex, V),
    Delivered(BlockIndex),
}

impl<V> Slot<V> {
    fn index(&self) -> BlockIndex {
        match self {
            Self::Waiting(i) | Self::Ready(i, _) | Self::Delivered(i) => *i,
        }
    }
}

#[derive(Debug)]
struct Running<V> {
    run: u64,
    start_media: MediaTime,
    anchor: Option<Instant>,
    next_request: u32,
    window: VecDeque<Slot<V>>,
}

#[derive(Debug)]
struct Stream<V> {
    plan: Arc<ObjectPlan>,
    running: Option<Running<V>>,
}

#[derive(Debug, Default)]
struct DiskQueue {
    /// (deadline, arrival order, block) — earliest deadline first, FIFO among equals.
    queue: BinaryHeap<Reverse<(Instant, u64, BlockKey, Bytes)>>,
    in_flight: u32,
    /// Deadlines of the reads in flight, to count late ones.
    deadlines: HashMap<BlockKey, Instant>,
}

/// The scheduler core. One thread owns it (the server's scheduler thread, the simulator's event
/// loop, or a test).
#[derive(Debug)]
pub struct Scheduler<V> {
    config: SchedConfig,
    cache: BlockCache<V>,
    streams: HashMap<StreamId, Stream<V>>,
    disks: HashMap<DiskId, DiskQueue>,
    io_out: VecDeque<IoRequest>,
    events: VecDeque<Event<V>>,
    seq: u64,
    stats: SchedStats,
}

impl<V: Clone> Scheduler<V> {
    /// A scheduler with no streams.
    #[must_use]
    pub fn new(config: SchedConfig) -> Self {
        Self {
            cache: BlockCache::new(config.cache_capacity),
            config,
            streams: HashMap::new(),
            disks: HashMap::new(),
            io_out: VecDeque::new(),
            events: VecDeque::new(),
            seq: 0,
            stats: SchedStats::default(),
        }
    }

    /// Admits (or not) a stream. An admitted stream reads nothing until [`Self::handle_start`].
    pub fn handle_open(&mut self, _now: Instant, req: OpenStream) -> Admission {
        let decision = if self.streams.contains_key(&req.stream) {
            Admission::Reject(RejectReason::DuplicateStream)
        } else if self.streams.len() >= self.config.max_streams {
            Admission::Reject(RejectReason::TooManyStreams { limit: self.config.max_streams })
        } else {
            self.streams.insert(req.stream, Stream { plan: req.plan, running: None });
            Admission::Admit
        };
        match decision {
            Admission::Admit => self.stats.admitted += 1,
            Admission::Reject(_) => self.stats.rejected += 1,
        }
        decision
    }

    /// Starts (or restarts, for a seek or a resume) a stream at block `from`, whose packet at
    /// media time `media` is the first one to send. `run` numbers the starts of a stream: events
    /// carry it so the driver can drop deliveries that were in flight from an earlier start.
    pub fn handle_start(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: u64,
        from: BlockIndex,
        media: MediaTime,
    ) {
        self.release(stream);
        let Some(s) = self.streams.get_mut(&stream) else { return };
        s.running = Some(Running {
            run,
            start_media: media,
            anchor: None,
            next_request: from.0,
            window: VecDeque::new(),
        });
        self.refill(now, stream);
        self.dispatch();
    }

    /// Stops reading for a stream (PAUSE, or the sender reached the end) and releases its blocks.
    pub fn handle_stop(&mut self, _now: Instant, stream: StreamId) {
        self.release(stream);
        self.dispatch();
    }

    /// Forgets a stream.
    pub fn handle_close(&mut self, _now: Instant, stream: StreamId) {
        self.release(stream);
        self.streams.remove(&stream);
        self.dispatch();
    }

    /// The sender has sent every packet of block `index` of `stream` it is going to in run
    /// `run_id`: release it and read further ahead.
    pub fn handle_block_done(
        &mut self,
        now: Instant,
        stream: StreamId,
        run_id: u64,
        index: BlockIndex,
    ) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let Some(run) = s.running.as_mut() else { return };
        if run.run != run_id {
            return; // a notice from an earlier start
        }
        match run.window.front() {
            Some(Slot::Delivered(i)) if *i == index => {}
            _ => return, // stale notice from before a restart
        }
        run.window.pop_front();
        let key = s.plan.key(index);
        self.cache.unpin(stream, key);
        self.refill(now, stream);
        self.dispatch();
    }

    /// Reports a finished read.
    pub fn handle_read_done(&mut self, now: Instant, done: ReadDone<V>) {
        let q = self.disks.entry(done.disk).or_default();
        q.in_flight = q.in_flight.saturating_sub(1);
        if let Some(deadline) = q.deadlines.remove(&done.key)
            && now > deadline
        {
            self.stats.late_reads += 1;
        }
        match done.result {
            Ok(v) => {
                for stream in self.cache.fill(done.key, v.clone()) {
                    self.mark_ready(stream, done.key, v.clone());
                    self.try_deliver(now, stream);
                }
            }
            Err(error) => {
                self.stats.failed_reads += 1;
                for stream in self.cache.fail(done.key) {
                    // The cache already dropped this stream's pin on the failed block.
                    if let Some(run) =
                        self.streams.get_mut(&stream).and_then(|s| s.running.as_mut())
                    {
                        run.window.retain(|slot| slot.index() != done.key.index);
                    }
                    self.release(stream);
                    self.events.push_back(Event::ReadFailed {
                        stream,
                        key: done.key,
                        error: error.clone(),
                    });
                }
            }
        }
        self.dispatch();
    }

    /// Advances timers. Nothing in the current policy is timed; kept for the cycle scheduler.
    pub fn handle_timeout(&mut self, _now: Instant) {}

    /// The next read to issue.
    pub fn poll_io(&mut self) -> Option<IoRequest> {
        self.io_out.pop_front()
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<Event<V>> {
        self.events.pop_front()
    }

    /// When [`Self::handle_timeout`] next needs calling (never, in the current policy).
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> SchedStats {
        SchedStats { cache: self.cache.stats(), ..self.stats }
    }

    /// Number of admitted streams.
    #[must_use]
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Reads queued or in flight on `disk`.
    #[must_use]
    pub fn disk_queue_len(&self, disk: DiskId) -> usize {
        self.disks.get(&disk).map_or(0, |q| q.queue.len() + q.in_flight as usize)
    }

    /// The block cache (read-only, for metrics and tests).
    #[must_use]
    pub fn cache(&self) -> &BlockCache<V> {
        &self.cache
    }

    /// Replaces the plan of every stream of `plan.object` (after a placement epoch flip moved
    /// blocks to other disks). Reads already queued keep their old disk: the caller keeps the
    /// old copies readable until those reads are done.
    pub fn handle_plan_update(&mut self, plan: Arc<ObjectPlan>) {
        for s in self.streams.values_mut() {
            if s.plan.object == plan.object {
                debug_assert_eq!(s.plan.blocks.len(), plan.blocks.len());
                s.plan = Arc::clone(&plan);
            }
        }
    }

    /// Drops an object's unpinned blocks from the cache (after `rm`).
    pub fn purge_object(&mut self, object: ObjectId) {
        self.cache.purge_object(object);
    }

    fn release(&mut self, stream: StreamId) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let Some(run) = s.running.take() else { return };
        for slot in run.window {
            self.cache.unpin(stream, s.plan.key(slot.index()));
        }
    }

    fn refill(&mut self, now: Instant, stream: StreamId) {
        let Some(s) = self.streams.get_mut(&stream) else { return };
        let Some(run) = s.running.as_mut() else { return };
        let plan = Arc::clone(&s.plan);
        while run.window.len() < self.config.read_ahead_blocks.max(1) as usize
            && (run.next_request as usize) < plan.blocks.len()
        {
            let index = BlockIndex(run.next_request);
            run.next_request += 1;
            let block = plan.blocks[index.0 as usize];
            let key = plan.key(index);
            match self.cache.pin(stream, key, block.len) {
                Pin::Hit(v) => run.window.push_back(Slot::Ready(index, v)),
                Pin::Pending => run.window.push_back(Slot::Waiting(index)),
                Pin::Miss => {
                    run.window.push_back(Slot::Waiting(index));
                    // Before the anchor exists, the stream's clock will start about now: its first
                    // block is due at once (head of the queue), the ones after by their send times.
                    let wall = run.anchor.unwrap_or(now + self.config.startup_delay);
                    let deadline =
                        wall + block.first_send_time.saturating_duration_since(run.start_media);
                    self.seq += 1;
                    self.disks
                        .entry(block.disk)
                        .or_default()
                        .queue
                        .push(Reverse((deadline, self.seq, key, block.len)));
                }
            }
        }
        self.try_deliver(now, stream);
    }

    fn mark_ready(&mut self, stream: StreamId, key: BlockKey, v: V) {
        let Some(run) = self.streams.get_mut(&stream).and_then(|s| s.running.as_mut()) else {
            return;
        };
        for slot in &mut run.window {
            if let Slot::Waiting(i) = slot
                && *i == key.index
            {
                *slot = Slot::Ready(*i, v);
                return;
            }
        }
    }

    fn try_deliver(&mut self, now: Instant, stream: StreamId) {
        let Some(run) = self.streams.get_mut(&stream).and_then(|s| s.running.as_mut()) else {
            return;
        };
        for slot in &mut run.window {
            match slot {
                Slot::Delivered(_) => continue,
                Slot::Waiting(_) => break,
                Slot::Ready(..) => {
                    let Slot::Ready(index, block) =
                        std::mem::replace(slot, Slot::Delivered(BlockIndex(0)))
                    else {
                        unreachable!("matched Ready above");
                    };
                    *slot = Slot::Delivered(index);
                    let anchor = if run.anchor.is_none() {
                        let wall = now + self.config.startup_delay;
                        run.anchor = Some(wall);
                        Some(Anchor { wall, media: run.start_media })
                    } else {
                        None
                    };
                    self.events.push_back(Event::Deliver {
                        stream,
                        index,
                        block,
                        anchor,
                        run: run.run,
                    });
                }
            }
        }
    }

    fn dispatch(&mut self) {
        let depth = self.config.disk_queue_depth.max(1);
        let mut disks: Vec<_> = self.disks.keys().copied().collect();
        disks.sort_unstable();
        for disk in disks {
            let Some(q) = self.disks.get_mut(&disk) else { continue };
            while q.in_flight < depth {
                let Some(Reverse((deadline, _, key, len))) = q.queue.pop() else { break };
                // A read nobody waits for any more (the stream paused or left) is dropped.
                if self.cache.refs(key) == 0 {
                    let _ = self.cache.fail(key);
                    continue;
                }
                q.in_flight += 1;
                q.deadlines.insert(key, deadline);
                self.stats.reads += 1;
                self.io_out.push_back(IoRequest { disk, key, len, deadline });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: Bytes = Bytes::mib(1);

    fn plan(object: u64, disks: &[u16]) -> Arc<ObjectPlan> {
        Arc::new(ObjectPlan {
            object: ObjectId(object),
            blocks: disks
                .iter()
                .enumerate()
                .map(|(i, d)| PlannedBlock {
                    disk: DiskId(*d),
                    first_gsn: Gsn(i as u64 * 100),
                    first_send_time: MediaTime::from_nanos(i as u64 * 2_000_000_000),
                    len: MIB,
                })
                .collect(),
        })
    }

    fn open(s: &mut Scheduler<u32>, id: u64, p: &Arc<ObjectPlan>) {
        let req = OpenStream {
            stream: StreamId(id),
            plan: Arc::clone(p),
            avg_bitrate: BitRate(4_000_000),
            peak_bitrate: BitRate(6_000_000),
        };
        assert_eq!(s.handle_open(Instant::ZERO, req), Admission::Admit);
    }

    fn drain_io(s: &mut Scheduler<u32>) -> Vec<IoRequest> {
        std::iter::from_fn(|| s.poll_io()).collect()
    }

    fn drain_events(s: &mut Scheduler<u32>) -> Vec<(u64, u32, Option<Anchor>)> {
        std::iter::from_fn(|| s.poll_event())
            .map(|e| match e {
                Event::Deliver { stream, index, anchor, .. } => (stream.0, index.0, anchor),
                Event::ReadFailed { stream, key, .. } => panic!("read failed {stream} {key}"),
            })
            .collect()
    }

    fn done(s: &mut Scheduler<u32>, now: Instant, io: IoRequest) {
        s.handle_read_done(
            now,
            ReadDone { disk: io.disk, key: io.key, result: Ok(io.key.index.0) },
        );
    }

    #[test]
    fn double_buffering_window_slides_in_order() {
        let p = plan(1, &[0, 1, 0, 1]);
        let mut s = Scheduler::new(SchedConfig::default());
        open(&mut s, 1, &p);
        let t0 = Instant::from_nanos(1_000);
        s.handle_start(t0, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        let io = drain_io(&mut s);
        assert_eq!(io.len(), 2, "two blocks requested: double buffering");
        let start = t0 + Duration::from_millis(20);
        assert_eq!(io[0].deadline, start, "first block is due at once");
        assert_eq!(io[1].deadline, start + Duration::from_secs(2));
        // Block 1 (disk 1) finishes first: nothing is delivered out of order.
        done(&mut s, t0, io[1]);
        assert!(drain_events(&mut s).is_empty());
        done(&mut s, t0, io[0]);
        let ev = drain_events(&mut s);
        let anchor = Anchor { wall: t0 + Duration::from_millis(20), media: MediaTime::ZERO };
        assert_eq!(ev, vec![(1, 0, Some(anchor)), (1, 1, None)]);
        // Done with block 0: block 2 is requested with a deadline from the anchor.
        s.handle_block_done(t0, StreamId(1), 1, BlockIndex(0));
        s.handle_block_done(t0, StreamId(1), 1, BlockIndex(0)); // a duplicate is ignored
        let io = drain_io(&mut s);
        assert_eq!(io.len(), 1);
        assert_eq!(io[0].key.index, BlockIndex(2));
        assert_eq!(io[0].deadline, anchor.wall + Duration::from_secs(4));
    }

    #[test]
    fn trailing_stream_hits_the_cache_and_reads_are_shared() {
        let p = plan(1, &[0, 0, 0]);
        let mut s = Scheduler::new(SchedConfig::default());
        open(&mut s, 1, &p);
        open(&mut s, 2, &p);
        s.handle_start(Instant::ZERO, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        s.handle_start(Instant::ZERO, StreamId(2), 1, BlockIndex(0), MediaTime::ZERO);
        let io = drain_io(&mut s);
        assert_eq!(io.len(), 2, "coalesced: one read per block, not per stream");
        for r in io {
            done(&mut s, Instant::ZERO, r);
        }
        assert_eq!(drain_events(&mut s).len(), 4);
        let st = s.stats().cache;
        assert_eq!(st.bytes_from_disk, 2 * MIB.0);
        assert_eq!(st.bytes_from_cache, 2 * MIB.0);
    }

    #[test]
    fn queue_depth_limits_reads_in_flight_and_startup_goes_first() {
        let cfg = SchedConfig { disk_queue_depth: 1, ..SchedConfig::default() };
        let mut s = Scheduler::new(cfg);
        let p1 = plan(1, &[0; 4]);
        let p2 = plan(2, &[0; 4]);
        open(&mut s, 1, &p1);
        open(&mut s, 2, &p2);
        let t = Instant::from_nanos(5);
        s.handle_start(t, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        let first = drain_io(&mut s);
        assert_eq!(first.len(), 1, "depth 1: one read in flight");
        // Stream 1's block 1 waits with a deadline 2 s out. Stream 2 starts: its first block
        // is due now and overtakes it.
        s.handle_start(t, StreamId(2), 1, BlockIndex(0), MediaTime::ZERO);
        assert!(drain_io(&mut s).is_empty());
        done(&mut s, t, first[0]);
        let next = drain_io(&mut s);
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].key.object, ObjectId(2), "the new stream's first read goes first");
        assert_eq!(next[0].deadline, t + Duration::from_millis(20));
    }

    #[test]
    fn stop_releases_pins_and_cancels_queued_reads() {
        let cfg = SchedConfig { disk_queue_depth: 1, ..SchedConfig::default() };
        let mut s = Scheduler::new(cfg);
        let p = plan(1, &[0; 4]);
        open(&mut s, 1, &p);
        s.handle_start(Instant::ZERO, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        let io = drain_io(&mut s);
        assert_eq!(io.len(), 1);
        s.handle_stop(Instant::ZERO, StreamId(1));
        done(&mut s, Instant::ZERO, io[0]);
        // The queued read of block 1 was cancelled, nothing is pinned, block 0 stays cached.
        assert!(drain_io(&mut s).is_empty());
        assert!(drain_events(&mut s).is_empty());
        assert_eq!(s.cache().refs(p.key(BlockIndex(0))), 0);
        assert_eq!(s.cache().peek(p.key(BlockIndex(0))), Some(&0));
        // Resume from block 0: a cache hit, delivered at once.
        s.handle_start(Instant::ZERO, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        let ev = drain_events(&mut s);
        assert_eq!(ev[0].1, 0);
    }

    #[test]
    fn plan_update_redirects_later_reads() {
        let p = plan(1, &[0, 0, 0, 0]);
        let mut s = Scheduler::new(SchedConfig::default());
        open(&mut s, 1, &p);
        s.handle_start(Instant::ZERO, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        let io = drain_io(&mut s);
        assert!(io.iter().all(|r| r.disk == DiskId(0)));
        s.handle_plan_update(plan(1, &[7, 7, 7, 7]));
        for r in io {
            done(&mut s, Instant::ZERO, r);
        }
        let _ = drain_events(&mut s);
        s.handle_block_done(Instant::ZERO, StreamId(1), 1, BlockIndex(0));
        let io = drain_io(&mut s);
        assert_eq!(io.len(), 1);
        assert_eq!(io[0].disk, DiskId(7), "reads after the flip go to the new disk");
    }

    #[test]
    fn failed_read_stops_the_stream() {
        let p = plan(1, &[0, 0]);
        let mut s = Scheduler::new(SchedConfig::default());
        open(&mut s, 1, &p);
        s.handle_start(Instant::ZERO, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        let io = drain_io(&mut s);
        s.handle_read_done(
            Instant::ZERO,
            ReadDone { disk: io[0].disk, key: io[0].key, result: Err("checksum".into()) },
        );
        let ev: Vec<_> = std::iter::from_fn(|| s.poll_event()).collect();
        assert!(matches!(ev[..], [Event::ReadFailed { .. }]));
        done(&mut s, Instant::ZERO, io[1]);
        assert!(s.poll_event().is_none());
        assert_eq!(s.cache().refs(p.key(BlockIndex(1))), 0);
    }

    #[test]
    fn late_reads_are_counted_and_admission_limit_holds() {
        let cfg = SchedConfig { max_streams: 1, ..SchedConfig::default() };
        let mut s = Scheduler::new(cfg);
        let p = plan(1, &[0, 0, 0]);
        open(&mut s, 1, &p);
        let req = OpenStream {
            stream: StreamId(2),
            plan: Arc::clone(&p),
            avg_bitrate: BitRate(1),
            peak_bitrate: BitRate(1),
        };
        assert_eq!(
            s.handle_open(Instant::ZERO, req),
            Admission::Reject(RejectReason::TooManyStreams { limit: 1 })
        );
        s.handle_start(Instant::ZERO, StreamId(1), 1, BlockIndex(0), MediaTime::ZERO);
        let io = drain_io(&mut s);
        done(&mut s, Instant::ZERO + Duration::from_millis(21), io[0]);
        assert_eq!(s.stats().late_reads, 1, "due at 20 ms, done at 21 ms");
        assert_eq!(p.block_of(Gsn(150)), Some(BlockIndex(1)));
        assert_eq!(p.block_of(Gsn(10_000)), Some(BlockIndex(2)));
    }
}
