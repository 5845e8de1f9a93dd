//! The XTREAM time-cycle scheduler (XTREAM §2.1–2.2; `docs/design/scheduler.md`).
//!
//! Time is cut into cycles of length `T` (`cycle_ms`, default 1 s), aligned on multiples of `T`
//! from the driver's clock epoch. At the start of each cycle, every playing stream queues, on
//! the disks holding them, the blocks whose deadlines fall before the end of the *next* cycle:
//! its double buffer (the block being sent, and what the next cycle needs). With a single disk
//! and a stream whose cycle's worth of data is one block this is XTREAM's "exactly one IO per
//! stream per cycle"; with blocks spread over many disks, a stream slower than `block / T` reads
//! a block only every few cycles and a faster one reads several. So every block is read at least
//! one cycle before it is due, and a cycle that overruns eats into that slack before any deadline
//! is missed.
//!
//! Within a cycle the order is free (XTREAM §2.1). [`CycleOrder::Deadline`] (the default) issues
//! earliest deadline first; [`CycleOrder::Position`] issues in block-key order (a proxy for disk
//! position) except for reads due within the current cycle, which go first by deadline. One IO is
//! in flight per disk by default (XTREAM's single IO thread: the schedule is deterministic and the
//! next IO is chosen when the previous one ends).
//!
//! A started stream's first block is due at once, so it goes to the head of its disk's queue and
//! is read as soon as the IO in progress ends: initial latency is about one IO plus the IO in
//! progress (XTREAM's request handler, §2.2). The rest of its double buffer follows by deadline.
//!
//! The IO in progress is what grows with the load: an idle disk has none, a disk at MaxN is busy
//! most of the time, with up to one whole block left to read. So the first block of each object
//! the driver names ([`CycleScheduler::handle_resident`]) stays in memory, pinned by the
//! scheduler itself, within `resident_capacity` (the objects started least recently leave first):
//! a start of such an object from its beginning is delivered at once, whatever the disks are
//! doing, and its later blocks are read by deadline, the first of them a whole block's
//! duration after the start. Those first blocks are read only when a disk has no real-time IO
//! queued, before non-real-time IO, one at a time.
//!
//! Non-real-time IO (HTTP reads, reorganisation, ingest) is issued only in a cycle's slack: when
//! a disk has no real-time IO queued, in chunks sized (from the disk profile's min curve) to end
//! before the cycle does, so a real-time IO never waits for it beyond the cycle, and at most one
//! chunk delays a new stream's first read. Admission ([`AdmissionController`]) keeps a share
//! `nrt_share` of every cycle free of real-time work, so the slack is there.
//!
//! Recording streams hand in the blocks they produce; a block produced in cycle `k` is due on disk
//! by the end of cycle `k + 1` (the recorder's double buffer: it fills the other buffer
//! meanwhile) and is queued at once, by deadline, with the reads.
//!
//! A *missed deadline* is a block not in memory at its deadline (its first packet's send time),
//! or a recorded block not written by the end of the cycle after the one it was produced in.
//! Both are counted per stream, per cycle ([`CycleEvent::CycleEnd`]) and in total.
//!
//! **Failover** (`store.replication` K > 1; Yima §2.1 keeps logical disks apart from physical ones
//! "to support fault tolerance"). Every block of a plan lists its copies' disks
//! ([`PlannedBlock::copies`](crate::PlannedBlock), replica 0 first). A real-time read that fails
//! (IO error, checksum mismatch, missing file) does not end the streams waiting for the block:
//! the copy is marked bad, and the read is queued again at once on the next copy's disk with the
//! deadline it had, so EDF serves it first and the stream keeps its schedule when the disk has
//! the time ([`CycleEvent::Failover`] tells the driver, which repairs the bad copy in the
//! non-real-time share and then reports [`CycleScheduler::handle_copy_repaired`]). Until then,
//! every read of that block goes to a good copy. Only when no copy is left is the stream stopped
//! ([`CycleEvent::ReadFailed`]). Admission reserves each stream's reads on its blocks' replica-0
//! disks; after a failover the streams of the object are re-accounted with the failed-over
//! blocks charged to the disk they are now read from, and charged back after the repair. The
//! failover read itself is one more real-time read on the other copy's disk, in its queue by
//! deadline: what admission leaves free of real-time work (the non-real-time share) absorbs it.
//!
//! The API is quinn-proto's shape: `handle_*(now, …)` inputs, [`CycleScheduler::poll_io`] / [`CycleScheduler::poll_event`] /
//! [`CycleScheduler::poll_timeout`] outputs. Not here: the IO itself, pacing, and the clock.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use isochron_base::{
    BitRate, BlockIndex, BlockKey, Bytes, DiskId, Instant, MediaTime, ObjectId, Pace, Replicas,
};
use isochron_base::{IoFailure, RunId, StreamId};

use crate::admission::{AdmissionController, Decision, Direction, Refusal, StreamDemand};
use crate::cache::{BlockCache, CacheStats, Pin};
use crate::plan::{Anchor, ObjectPlan, OpenStream, ReadDone};

/// Alignment of non-real-time chunks (`O_DIRECT`).
const NRT_ALIGN: u64 = 4096;

/// Cycle scheduler settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CycleConfig {
    /// Cycle length `T` (config `cycle_ms`). Default 1 s.
    pub cycle: Duration,
    /// IOs in flight per disk. Default 1 (XTREAM's single IO thread per disk).
    pub disk_queue_depth: u32,
    /// Bytes of unpinned blocks kept in memory. Default 256 MiB.
    pub cache_capacity: Bytes,
    /// Bytes of objects' first blocks kept in memory ([`CycleScheduler::handle_resident`]), on
    /// top of `cache_capacity`. Default 64 MiB; 0 keeps none.
    pub resident_capacity: Bytes,
    /// Time from a start's first block being in memory to its first packet's send time.
    /// Default 20 ms.
    pub startup_delay: Duration,
    /// Most streams (playing and recording) open at once. Default 10 000.
    pub max_streams: usize,
    /// Order of the real-time IOs within a cycle. Default [`CycleOrder::Deadline`].
    pub order: CycleOrder,
    /// Largest non-real-time IO. Default 1 MiB.
    pub nrt_chunk: Bytes,
    /// How many cycles past the current one a stream's blocks are read ahead: a block is queued
    /// in the cycle in which its deadline falls before the end of the `lookahead_cycles`-th next
    /// cycle. Default 1: XTREAM's double buffer. More smooths cycles in which many streams need a
    /// block at once, for `lookahead_cycles · T · ΣBR` more memory.
    pub lookahead_cycles: u32,
}

impl Default for CycleConfig {
    fn default() -> Self {
        Self {
            cycle: Duration::from_secs(1),
            disk_queue_depth: 1,
            cache_capacity: Bytes::mib(256),
            resident_capacity: Bytes::mib(64),
            startup_delay: Duration::from_millis(20),
            max_streams: 10_000,
            order: CycleOrder::Deadline,
            nrt_chunk: Bytes::mib(1),
            lookahead_cycles: 1,
        }
    }
}

/// The order of real-time IOs within a cycle.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CycleOrder {
    /// Earliest deadline first.
    #[default]
    Deadline,
    /// Block-key order (a proxy for position on disk), except that IOs due before the end of the
    /// current cycle go first by deadline.
    Position,
}

/// The id of a non-real-time request, chosen by the caller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NrtId(pub u64);

impl fmt::Display for NrtId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// Whether a non-real-time request reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NrtKind {
    /// A read.
    Read,
    /// A write.
    Write,
}

/// A non-real-time request: `len` bytes to read or write on `disk`, in chunks, in cycles' slack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NrtRequest {
    /// Its id (unique among open requests).
    pub id: NrtId,
    /// The disk.
    pub disk: DiskId,
    /// Read or write.
    pub kind: NrtKind,
    /// Total bytes.
    pub len: Bytes,
}

/// A finished chunk of a non-real-time request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NrtDone {
    /// The request.
    pub id: NrtId,
    /// The disk.
    pub disk: DiskId,
    /// Offset of the chunk in the request.
    pub offset: Bytes,
    /// Whether it succeeded.
    pub result: Result<(), IoFailure>,
}

/// A request to admit a recording (a write stream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenRecord {
    /// The stream's id, chosen by the caller.
    pub stream: StreamId,
    /// The object being recorded.
    pub object: ObjectId,
    /// Declared mean rate.
    pub avg_bitrate: BitRate,
    /// Declared peak rate.
    pub peak_bitrate: BitRate,
    /// Size of the blocks it will hand in.
    pub block_size: Bytes,
}

/// A block a recording produced, to be written (the caller keeps the data).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordBlock {
    /// The block.
    pub key: BlockKey,
    /// The disk it goes to (its placement).
    pub disk: DiskId,
    /// Its size.
    pub len: Bytes,
}

/// A completed block write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteDone {
    /// The disk.
    pub disk: DiskId,
    /// The block.
    pub key: BlockKey,
    /// Whether it succeeded.
    pub result: Result<(), IoFailure>,
}

/// What an IO is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IoClass {
    /// A real-time block read; report with [`CycleScheduler::handle_read_done`].
    Read {
        /// The block.
        key: BlockKey,
    },
    /// A recording's block write; report with [`CycleScheduler::handle_write_done`].
    Write {
        /// The recording.
        stream: StreamId,
        /// The block.
        key: BlockKey,
    },
    /// A chunk of a non-real-time request: bytes `offset .. offset + len` of it; report with
    /// [`CycleScheduler::handle_nrt_done`].
    Nrt {
        /// The request.
        id: NrtId,
        /// Read or write.
        kind: NrtKind,
        /// Offset of the chunk in the request.
        offset: Bytes,
    },
}

/// An IO for the driver to carry out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CycleIo {
    /// The disk.
    pub disk: DiskId,
    /// Bytes to transfer.
    pub len: Bytes,
    /// When it must be done: a block's deadline, or for a non-real-time chunk the end of the
    /// cycle it was sized to fit in.
    pub deadline: Instant,
    /// What it is.
    pub class: IoClass,
}

/// One cycle's counts, reported when it ends.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleReport {
    /// The cycle's number (its start divided by `T`).
    pub index: u64,
    /// Its start.
    pub start: Instant,
    /// Deadlines missed during it (reads and writes).
    pub missed: u32,
    /// Real-time reads issued.
    pub reads: u32,
    /// Recording writes issued.
    pub writes: u32,
    /// Non-real-time chunks issued.
    pub nrt_ios: u32,
    /// Non-real-time bytes issued.
    pub nrt_bytes: u64,
}

/// Outputs for the driver.
#[derive(Debug)]
pub enum CycleEvent<V> {
    /// The next block of a stream is in memory .
    Deliver {
        /// The stream.
        stream: StreamId,
        /// The block's index.
        index: BlockIndex,
        /// The block.
        block: V,
        /// Set on the first delivery after [`CycleScheduler::handle_start`].
        anchor: Option<Anchor>,
        /// The run this block belongs to.
        run: RunId,
    },
    /// A copy of a block could not be read and the read was queued again on the next copy
    /// (failover). The bad copy stays avoided until [`CycleScheduler::handle_copy_repaired`].
    Failover {
        /// The block.
        key: BlockKey,
        /// The disk whose copy failed.
        failed: DiskId,
        /// The disk the read now goes to.
        next: DiskId,
        /// Why the copy failed.
        error: IoFailure,
    },
    /// A block could not be read from any of its copies; the stream is stopped.
    ReadFailed {
        /// The stream.
        stream: StreamId,
        /// The block.
        key: BlockKey,
        /// Why.
        error: IoFailure,
    },
    /// A block was not in memory (read) or not written (recording) by its deadline.
    Missed {
        /// The stream.
        stream: StreamId,
        /// The block.
        key: BlockKey,
        /// The deadline.
        deadline: Instant,
    },
    /// A recorded block is on disk.
    Written {
        /// The recording.
        stream: StreamId,
        /// The block.
        key: BlockKey,
        /// The disk (a recording with K copies writes each block to K disks).
        disk: DiskId,
    },
    /// A recorded block could not be written.
    WriteFailed {
        /// The recording.
        stream: StreamId,
        /// The block.
        key: BlockKey,
        /// The disk.
        disk: DiskId,
        /// Why.
        error: IoFailure,
    },
    /// Every chunk of a non-real-time request is done (or one failed).
    NrtDone {
        /// The request.
        id: NrtId,
        /// The first failure, if any.
        result: Result<(), IoFailure>,
    },
    /// Blocks a cluster share had taken over and gives back
    /// ([`CycleScheduler::handle_give_back`]): they will not be delivered.
    GivenBack {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The blocks, ascending.
        blocks: Vec<BlockIndex>,
    },
    /// A cycle ended.
    CycleEnd(CycleReport),
}

/// Counters, monotonic.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CycleStats {
    /// The cache's counters (`B_disk`, `B_cache`, hits …).
    pub cache: CacheStats,
    /// Real-time reads issued.
    pub reads: u64,
    /// Recording writes issued.
    pub writes: u64,
    /// Non-real-time chunks issued.
    pub nrt_ios: u64,
    /// Non-real-time bytes issued.
    pub nrt_bytes: u64,
    /// Reads of objects' first blocks to keep them in memory ([`CycleScheduler::handle_resident`]).
    pub resident_reads: u64,
    /// Objects whose first block is (or is being read to be) in memory.
    pub resident_objects: u64,
    /// Reads completed after the deadline they were queued with, for reads queued once the
    /// stream's clock was anchored (an IO-level count; see `missed_deadlines` for blocks).
    pub late_reads: u64,
    /// Blocks not in memory by their deadline.
    pub missed_deadlines: u64,
    /// Recorded blocks not written by their deadline.
    pub missed_write_deadlines: u64,
    /// Reads that failed.
    pub failed_reads: u64,
    /// Failed reads re-issued to another copy of the block ([`CycleEvent::Failover`]).
    pub failovers: u64,
    /// Writes that failed.
    pub failed_writes: u64,
    /// Cycles ended.
    pub cycles: u64,
    /// Cycles in which at least one deadline was missed.
    pub cycles_with_misses: u64,
    /// Streams admitted.
    pub admitted: u64,
    /// Streams refused.
    pub rejected: u64,
}

/// One stream's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamStats {
    /// Deadlines missed.
    pub missed: u64,
    /// Blocks delivered (playback).
    pub delivered: u64,
    /// Blocks written (recording).
    pub written: u64,
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
struct Run<V> {
    run: RunId,
    start_media: MediaTime,
    /// Wall time of `start_media` assumed until the first block arrives.
    provisional: Instant,
    anchor: Option<Instant>,
    /// Whether the sender has been given the anchor (with the run's first delivered block).
    anchor_sent: bool,
    /// The pace of the stream's clock (MTFC; nominal unless the sender re-paced it).
    pace: Pace,
    next_request: u32,
    window: VecDeque<Slot<V>>,
    /// Blocks of a cluster share taken over from a lost node (`docs/design/takeover.md`):
    /// read and delivered with the share's own.
    taken: BTreeSet<BlockIndex>,
    /// The run's first block.
    from: BlockIndex,
}

impl<V> Run<V> {
    fn deadline(&self, plan: &ObjectPlan, index: BlockIndex) -> Instant {
        let wall = self.anchor.unwrap_or(self.provisional);
        let send =
            plan.blocks.get(index.0 as usize).map_or(self.start_media, |b| b.first_send_time);
        wall + self.pace.wall_span(send.saturating_duration_since(self.start_media))
    }
}

#[derive(Debug)]
enum StreamState<V> {
    Play {
        plan: Arc<ObjectPlan>,
        /// A cluster share's disks (see [`OpenStream::local`]).
        local: Option<Arc<BTreeSet<DiskId>>>,
        running: Option<Run<V>>,
    },
    Record,
}

#[derive(Debug)]
struct StreamEntry<V> {
    state: StreamState<V>,
    stats: StreamStats,
}

/// A real-time IO target; its order is the `Position` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Target {
    Read(BlockKey),
    Write(BlockKey),
}

#[derive(Clone, Copy, Debug)]
struct Queued {
    deadline: Instant,
    seq: u64,
    len: Bytes,
    /// The deadline is an estimate (the stream's clock is not anchored yet).
    provisional: bool,
    /// The recording, for writes.
    stream: Option<StreamId>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Flight {
    Rt(Target),
    Nrt(NrtId, u64),
}

#[derive(Clone, Copy, Debug)]
struct InFlight {
    deadline: Instant,
    provisional: bool,
    stream: Option<StreamId>,
}

#[derive(Debug, Default)]
struct DiskState {
    edf: BTreeMap<(Instant, u64), Target>,
    queued: BTreeMap<Target, Queued>,
    /// First blocks to read into memory when nothing real-time is queued (resident objects).
    resident: VecDeque<(BlockKey, Bytes)>,
    nrt: VecDeque<NrtId>,
    in_flight: HashMap<Flight, InFlight>,
}

impl DiskState {
    fn push(&mut self, target: Target, q: Queued) {
        if let Some(old) = self.queued.get(&target) {
            if old.deadline <= q.deadline {
                return;
            }
            self.edf.remove(&(old.deadline, old.seq));
        }
        self.edf.insert((q.deadline, q.seq), target);
        self.queued.insert(target, q);
    }

    fn take(&mut self, target: Target) -> Option<Queued> {
        let q = self.queued.remove(&target)?;
        self.edf.remove(&(q.deadline, q.seq));
        Some(q)
    }

    fn pick(&self, order: CycleOrder, cycle_end: Instant) -> Option<Target> {
        let (&(deadline, _), &first) = self.edf.first_key_value()?;
        match order {
            CycleOrder::Deadline => Some(first),
            CycleOrder::Position if deadline < cycle_end => Some(first),
            CycleOrder::Position => self.queued.keys().next().copied(),
        }
    }

    fn idle(&self) -> bool {
        self.queued.is_empty()
            && self.resident.is_empty()
            && self.nrt.is_empty()
            && self.in_flight.is_empty()
    }
}

#[derive(Clone, Debug)]
struct NrtState {
    disk: DiskId,
    kind: NrtKind,
    len: u64,
    issued: u64,
    in_flight: u32,
    error: Option<IoFailure>,
}

/// The cycle scheduler core. One thread owns it (the server's scheduler thread, the simulator,
/// or a test).
#[derive(Debug)]
pub struct CycleScheduler<V> {
    config: CycleConfig,
    admission: AdmissionController,
    cache: BlockCache<V>,
    streams: BTreeMap<StreamId, StreamEntry<V>>,
    disks: BTreeMap<DiskId, DiskState>,
    nrt: BTreeMap<NrtId, NrtState>,
    /// Outstanding read deadlines of anchored streams' blocks not yet in memory.
    read_deadlines: BTreeSet<(Instant, StreamId, BlockIndex)>,
    /// Outstanding write deadlines.
    write_deadlines: BTreeSet<(Instant, StreamId, BlockKey, DiskId)>,
    /// Copies known bad (a read of them failed), avoided until repaired.
    bad: BTreeSet<(BlockKey, DiskId)>,
    /// The cycle being accumulated.
    current: CycleReport,
    io_out: VecDeque<CycleIo>,
    events: VecDeque<CycleEvent<V>>,
    seq: u64,
    stats: CycleStats,
    /// Declared rates of playing streams, to re-account them when their blocks move.
    rates: HashMap<StreamId, (BitRate, BitRate)>,
    /// Objects whose first block is kept in memory, pinned by [`RESIDENT`].
    resident: HashMap<ObjectId, Resident>,
    /// Bytes of their first blocks.
    resident_bytes: u64,
    /// Ticks of [`Resident::used`].
    resident_tick: u64,
}

/// The holder of the pins of resident objects' first blocks: no stream has this id (the
/// drivers number streams from 1 upwards).
pub const RESIDENT: StreamId = StreamId(u64::MAX);

/// An object whose first block is kept in memory.
#[derive(Clone, Copy, Debug)]
struct Resident {
    key: BlockKey,
    len: Bytes,
    /// When a stream last started it from its beginning (or when it was named).
    used: u64,
}

impl<V: Clone> CycleScheduler<V> {
    /// A scheduler with no streams, admitting with `admission`. The admission controller's cycle
    /// length is the one used for its predictions; keep it equal to `config.cycle`.
    #[must_use]
    pub fn new(config: CycleConfig, admission: AdmissionController) -> Self {
        let config = CycleConfig {
            cycle: config.cycle.max(Duration::from_millis(1)),
            disk_queue_depth: config.disk_queue_depth.max(1),
            nrt_chunk: config.nrt_chunk.max(Bytes(NRT_ALIGN)),
            lookahead_cycles: config.lookahead_cycles.max(1),
            ..config
        };
        Self {
            cache: BlockCache::new(config.cache_capacity),
            config,
            admission,
            streams: BTreeMap::new(),
            disks: BTreeMap::new(),
            nrt: BTreeMap::new(),
            read_deadlines: BTreeSet::new(),
            write_deadlines: BTreeSet::new(),
            bad: BTreeSet::new(),
            current: CycleReport::default(),
            io_out: VecDeque::new(),
            events: VecDeque::new(),
            seq: 0,
            stats: CycleStats::default(),
            rates: HashMap::new(),
            resident: HashMap::new(),
            resident_bytes: 0,
            resident_tick: 0,
        }
    }

    /// Admits (or not) a playing stream. An admitted stream reads nothing until
    /// [`Self::handle_start`]; its bandwidth stays reserved until [`Self::handle_close`].
    pub fn handle_open(&mut self, now: Instant, req: OpenStream) -> Decision {
        self.catch_up(now);
        let demand = demand_of(&req.plan, req.avg_bitrate, req.peak_bitrate, req.local.as_deref());
        let decision = self.admit(req.stream, &demand);
        if decision.is_admit() {
            self.rates.insert(req.stream, (req.avg_bitrate, req.peak_bitrate));
            self.streams.insert(
                req.stream,
                StreamEntry {
                    state: StreamState::Play { plan: req.plan, local: req.local, running: None },
                    stats: StreamStats::default(),
                },
            );
        }
        decision
    }

    /// Admits (or not) a recording: a write stream whose blocks arrive with
    /// [`Self::handle_record_block`] (XTREAM §1: guaranteed-rate writes).
    pub fn handle_open_record(&mut self, now: Instant, req: OpenRecord) -> Decision {
        self.catch_up(now);
        let demand = StreamDemand::write(req.avg_bitrate, req.peak_bitrate, req.block_size);
        let decision = self.admit(req.stream, &demand);
        if decision.is_admit() {
            self.streams.insert(
                req.stream,
                StreamEntry { state: StreamState::Record, stats: StreamStats::default() },
            );
        }
        decision
    }

    /// A recording whose source stalled gives its reservation back: its declared rate stops
    /// counting against the disks (others may be admitted meanwhile), while the writes it has in
    /// flight go on. Returns whether `stream` was an admitted recording.
    pub fn handle_suspend_record(&mut self, now: Instant, stream: StreamId) -> bool {
        self.catch_up(now);
        matches!(self.streams.get(&stream), Some(StreamEntry { state: StreamState::Record, .. }))
            && self.admission.release(stream)
    }

    /// A suspended recording's source sends again: it asks for its reservation anew, as at its
    /// start (`req` is its [`OpenRecord`]); on a refusal it stays suspended and the caller ends
    /// it. `None` if `req.stream` is not a recording.
    pub fn handle_resume_record(&mut self, now: Instant, req: OpenRecord) -> Option<Decision> {
        self.catch_up(now);
        let entry = self.streams.get(&req.stream);
        if !matches!(entry, Some(StreamEntry { state: StreamState::Record, .. })) {
            return None;
        }
        let demand = StreamDemand::write(req.avg_bitrate, req.peak_bitrate, req.block_size);
        let decision = self.admission.admit(req.stream, &demand);
        match decision {
            Decision::Admit => self.stats.admitted += 1,
            Decision::Reject(_) => self.stats.rejected += 1,
        }
        Some(decision)
    }

    /// Starts (or restarts, for a seek or a resume) a stream at block `from`, whose packet at
    /// media time `media` is the first one to send. `run` numbers the starts of a stream: events
    /// carry it so the driver can drop deliveries from an earlier start.
    pub fn handle_start(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        from: BlockIndex,
        media: MediaTime,
    ) {
        self.start(now, stream, run, from, media, None);
    }

    /// Starts a stream whose clock is already pinned (a cluster session: the origin chose the
    /// anchor, so that every node sends on one clock, Yima §2.2): block `i` is due at
    /// `anchor.wall + (first_send_time(i) − anchor.media) / pace` from the start, and the anchor
    /// goes to the sender with the first block delivered.
    pub fn handle_start_pinned(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        from: BlockIndex,
        anchor: Anchor,
        pace: Pace,
    ) {
        self.start(now, stream, run, from, anchor.media, Some((anchor.wall, pace)));
    }

    fn start(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        from: BlockIndex,
        media: MediaTime,
        pinned: Option<(Instant, Pace)>,
    ) {
        self.catch_up(now);
        self.release(stream);
        let Some(StreamEntry { state: StreamState::Play { running, plan, .. }, .. }) =
            self.streams.get_mut(&stream)
        else {
            return;
        };
        if from.0 == 0
            && let Some(r) = self.resident.get_mut(&plan.object)
        {
            self.resident_tick += 1;
            r.used = self.resident_tick;
        }
        *running = Some(Run {
            run,
            start_media: media,
            provisional: now + self.config.startup_delay,
            anchor: pinned.map(|(wall, _)| wall),
            anchor_sent: false,
            pace: pinned.map_or(Pace::NOMINAL, |(_, pace)| pace),
            next_request: from.0,
            window: VecDeque::new(),
            taken: BTreeSet::new(),
            from,
        });
        self.refill(now, stream);
        self.dispatch(now);
    }

    /// A cluster share's run `run` gives back `blocks` it took over: their node is back
    /// (`docs/design/takeover.md`, *A node that stood still*). Those the walk has not reached
    /// are read no more, and [`CycleEvent::GivenBack`] names them, after every delivery before
    /// it, so that the pacer drops them from its list; those already queued or delivered are
    /// delivered as they are, and the pacer passes over their packets (the node back sends
    /// them: the session manager tells the pacer so directly).
    pub fn handle_give_back(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        blocks: &[BlockIndex],
    ) {
        self.catch_up(now);
        let Some(StreamEntry { state: StreamState::Play { running: Some(r), .. }, .. }) =
            self.streams.get_mut(&stream)
        else {
            return;
        };
        if r.run != run {
            return;
        }
        let mut given: Vec<BlockIndex> =
            blocks.iter().copied().filter(|i| i.0 >= r.next_request && r.taken.remove(i)).collect();
        given.sort_unstable();
        if !given.is_empty() {
            self.events.push_back(CycleEvent::GivenBack { stream, run, blocks: given });
        }
    }

    /// A cluster share's run `run` takes over `blocks` (another node's, lost): they are read
    /// like the share's own, each from the first good copy on this node's disks (else through
    /// another node), with its deadline on the session's clock. Blocks the walk passed already
    /// are overdue: their reads are queued now (earliest deadline first puts them ahead) and
    /// they are delivered before the blocks after them (in the run's delivery window), which is
    /// the order the pacer sends them in. Blocks before the run's first are ignored, and so are
    /// the share's own, but for those its walk passed already and the sender let go: they are
    /// read and delivered again (withheld while another node was to send them, that node was
    /// lost in turn: `docs/design/takeover.md`). Admission is not re-accounted: the extra reads
    /// come out of the non-real-time share, as a failover's do.
    pub fn handle_take_over(
        &mut self,
        now: Instant,
        stream: StreamId,
        run: RunId,
        blocks: &[BlockIndex],
    ) {
        self.catch_up(now);
        let Some(StreamEntry {
            state: StreamState::Play { plan, local, running: Some(r) }, ..
        }) = self.streams.get_mut(&stream)
        else {
            return;
        };
        if r.run != run {
            return;
        }
        let mut behind = Vec::new();
        for &index in blocks {
            let Some(block) = plan.blocks.get(index.0 as usize) else { continue };
            let own = local.as_ref().is_none_or(|l| l.contains(&block.disk));
            if index < r.from {
                continue;
            }
            if own {
                // Its own, passed over while another node was to send it and named again now
                // that node is lost: delivered again if the walk is past it and the sender
                // let it go (no longer in the window).
                let held = r.window.iter().any(|s| s.index() == index);
                if index.0 < r.next_request && !held {
                    behind.push(index);
                }
                continue;
            }
            if !r.taken.insert(index) {
                continue;
            }
            if index.0 < r.next_request {
                behind.push(index);
            }
        }
        behind.sort_unstable();
        // After the blocks already handed to the pacer, before any not yet delivered.
        let at = r.window.iter().take_while(|s| matches!(s, Slot::Delivered(_))).count();
        for (i, index) in behind.iter().enumerate() {
            r.window.insert(at + i, Slot::Waiting(*index));
        }
        let plan = Arc::clone(plan);
        let local = local.clone();
        for index in behind {
            let block = plan.blocks[index.0 as usize];
            let key = plan.key(index);
            let Some(StreamEntry { state: StreamState::Play { running: Some(r), .. }, .. }) =
                self.streams.get_mut(&stream)
            else {
                return;
            };
            let deadline = r.deadline(&plan, index);
            let anchored = r.anchor.is_some();
            match self.cache.pin(stream, key, block.len) {
                Pin::Hit(v) => {
                    if let Some(slot) =
                        r.window.iter_mut().find(|s| matches!(s, Slot::Waiting(i) if *i == index))
                    {
                        *slot = Slot::Ready(index, v);
                    }
                    continue;
                }
                Pin::Pending | Pin::Miss => {
                    let at = (deadline, !anchored);
                    queue_read(&mut self.disks, &mut self.seq, &self.bad, key, &block, &local, at);
                }
            }
            if anchored {
                self.read_deadlines.insert((deadline, stream, index));
            }
        }
        self.refill(now, stream);
        self.dispatch(now);
    }

    /// The sender re-anchored run `run_id` of `stream` at a new pace (MTFC rate smoothing, Yima
    /// §2.5): block `i` is now due at `anchor.wall + pace.wall_span(first_send_time(i) −
    /// anchor.media)`. Outstanding deadlines are recomputed and the window refilled on the new
    /// clock, so a faster stream reads ahead sooner. Reads already queued keep their queue order.
    pub fn handle_pace(
        &mut self,
        now: Instant,
        stream: StreamId,
        run_id: RunId,
        anchor: Anchor,
        pace: Pace,
    ) {
        self.catch_up(now);
        let Some(StreamEntry { state: StreamState::Play { plan, running: Some(run), .. }, .. }) =
            self.streams.get_mut(&stream)
        else {
            return;
        };
        if run.run != run_id {
            return;
        }
        let waiting: Vec<BlockIndex> = run
            .window
            .iter()
            .filter_map(|slot| match slot {
                Slot::Waiting(i) => Some(*i),
                _ => None,
            })
            .collect();
        if run.anchor.is_some() {
            for i in &waiting {
                self.read_deadlines.remove(&(run.deadline(plan, *i), stream, *i));
            }
        }
        run.anchor = Some(anchor.wall);
        run.start_media = anchor.media;
        run.pace = pace;
        for i in waiting {
            self.read_deadlines.insert((run.deadline(plan, i), stream, i));
        }
        self.refill(now, stream);
        self.dispatch(now);
    }

    /// Stops reading for a stream (PAUSE, or the sender reached the end) and releases its blocks.
    /// Its bandwidth stays reserved.
    pub fn handle_stop(&mut self, now: Instant, stream: StreamId) {
        self.catch_up(now);
        self.release(stream);
        self.dispatch(now);
    }

    /// Forgets a stream and releases its bandwidth. A recording's blocks already handed in are
    /// still written.
    pub fn handle_close(&mut self, now: Instant, stream: StreamId) {
        self.rates.remove(&stream);
        self.catch_up(now);
        self.release(stream);
        self.streams.remove(&stream);
        let _ = self.admission.release(stream);
        self.dispatch(now);
    }

    /// The sender is done with block `index` of `stream` in run `run_id`: release it.
    pub fn handle_block_done(
        &mut self,
        now: Instant,
        stream: StreamId,
        run_id: RunId,
        index: BlockIndex,
    ) {
        self.catch_up(now);
        let Some(StreamEntry { state: StreamState::Play { plan, running: Some(run), .. }, .. }) =
            self.streams.get_mut(&stream)
        else {
            return;
        };
        if run.run != run_id {
            return;
        }
        match run.window.front() {
            Some(Slot::Delivered(i)) if *i == index => {}
            _ => return,
        }
        run.window.pop_front();
        self.cache.unpin(stream, plan.key(index));
        self.refill(now, stream);
        self.dispatch(now);
    }

    /// Reports a finished block read.
    pub fn handle_read_done(&mut self, now: Instant, done: ReadDone<V>) {
        self.catch_up(now);
        let flight = self
            .disks
            .get_mut(&done.disk)
            .and_then(|d| d.in_flight.remove(&Flight::Rt(Target::Read(done.key))));
        if let Some(f) = flight
            && !f.provisional
            && now > f.deadline
        {
            self.stats.late_reads += 1;
        }
        match done.result {
            Ok(v) => {
                for stream in self.cache.fill(done.key, v.clone()) {
                    self.mark_ready(stream, done.key, v.clone());
                    if self.try_deliver(now, stream) {
                        self.refill(now, stream);
                    }
                }
            }
            Err(error) => {
                self.stats.failed_reads += 1;
                self.bad.insert((done.key, done.disk));
                let next = self.next_copy(done.key);
                if let Some(next) = next
                    && self.cache.refs(done.key) > 0
                {
                    // Failover: the same read on the next copy, with the deadline it had.
                    self.stats.failovers += 1;
                    let (deadline, provisional) =
                        flight.map_or((now, true), |f| (f.deadline, f.provisional));
                    self.seq += 1;
                    let len = self.block_len(done.key);
                    let d = self.disks.entry(next).or_default();
                    if !d.in_flight.contains_key(&Flight::Rt(Target::Read(done.key))) {
                        d.push(
                            Target::Read(done.key),
                            Queued { deadline, seq: self.seq, len, provisional, stream: None },
                        );
                    }
                    self.events.push_back(CycleEvent::Failover {
                        key: done.key,
                        failed: done.disk,
                        next,
                        error,
                    });
                    self.reaccount_object(done.key.object);
                    self.dispatch(now);
                    return;
                }
                for stream in self.cache.fail(done.key) {
                    if stream == RESIDENT {
                        // The pin is gone with the entry: forget the object here too.
                        if let Some(r) = self.resident.remove(&done.key.object) {
                            self.resident_bytes -= r.len.0;
                            self.stats.resident_objects = self.resident.len() as u64;
                        }
                        continue;
                    }
                    // The cache already dropped this stream's pin on the failed block.
                    self.forget_slot(stream, done.key.index);
                    self.release(stream);
                    self.events.push_back(CycleEvent::ReadFailed {
                        stream,
                        key: done.key,
                        error: error.clone(),
                    });
                }
            }
        }
        self.dispatch(now);
    }

    /// A recording produced a block: it is written by the end of the next cycle (the recorder's
    /// double buffer: it fills the other buffer meanwhile), as soon as the disk has time.
    /// Returns `false` (and ignores the block) if `stream` is not an open recording.
    pub fn handle_record_block(
        &mut self,
        now: Instant,
        stream: StreamId,
        block: RecordBlock,
    ) -> bool {
        self.catch_up(now);
        match self.streams.get(&stream) {
            Some(StreamEntry { state: StreamState::Record, .. }) => {}
            _ => return false,
        }
        let deadline = self.cycle_end(now) + self.config.cycle;
        self.seq += 1;
        self.disks.entry(block.disk).or_default().push(
            Target::Write(block.key),
            Queued {
                deadline,
                seq: self.seq,
                len: block.len,
                provisional: false,
                stream: Some(stream),
            },
        );
        self.write_deadlines.insert((deadline, stream, block.key, block.disk));
        self.dispatch(now);
        true
    }

    /// Reports a finished block write.
    pub fn handle_write_done(&mut self, now: Instant, done: WriteDone) {
        self.catch_up(now);
        let Some(f) = self
            .disks
            .get_mut(&done.disk)
            .and_then(|d| d.in_flight.remove(&Flight::Rt(Target::Write(done.key))))
        else {
            self.dispatch(now);
            return;
        };
        let stream = f.stream.unwrap_or_default();
        self.write_deadlines.remove(&(f.deadline, stream, done.key, done.disk));
        let (key, disk) = (done.key, done.disk);
        match done.result {
            Ok(()) => {
                if let Some(s) = self.streams.get_mut(&stream) {
                    s.stats.written += 1;
                }
                self.events.push_back(CycleEvent::Written { stream, key, disk });
            }
            Err(error) => {
                self.stats.failed_writes += 1;
                self.events.push_back(CycleEvent::WriteFailed { stream, key, disk, error });
            }
        }
        self.dispatch(now);
    }

    /// Queues a non-real-time request. Returns `false` (and ignores it) if its id is in use.
    pub fn handle_nrt(&mut self, now: Instant, req: NrtRequest) -> bool {
        self.catch_up(now);
        if self.nrt.contains_key(&req.id) {
            return false;
        }
        if req.len.0 == 0 {
            self.events.push_back(CycleEvent::NrtDone { id: req.id, result: Ok(()) });
            return true;
        }
        self.nrt.insert(
            req.id,
            NrtState {
                disk: req.disk,
                kind: req.kind,
                len: req.len.0,
                issued: 0,
                in_flight: 0,
                error: None,
            },
        );
        self.disks.entry(req.disk).or_default().nrt.push_back(req.id);
        self.dispatch(now);
        true
    }

    /// Reports a finished non-real-time chunk.
    pub fn handle_nrt_done(&mut self, now: Instant, done: NrtDone) {
        self.catch_up(now);
        let Some(f) = self.disks.get_mut(&done.disk) else { return };
        let Some(_) = f.in_flight.remove(&Flight::Nrt(done.id, done.offset.0)) else {
            self.dispatch(now);
            return;
        };
        if let Some(n) = self.nrt.get_mut(&done.id) {
            n.in_flight = n.in_flight.saturating_sub(1);
            match done.result {
                Ok(()) => {}
                Err(e) => {
                    if n.error.is_none() {
                        n.error = Some(e);
                    }
                    // Issue nothing more of a failed request.
                    n.issued = n.len;
                }
            }
            if n.in_flight == 0 && n.issued >= n.len {
                let result = n.error.take().map_or(Ok(()), Err);
                self.nrt.remove(&done.id);
                self.events.push_back(CycleEvent::NrtDone { id: done.id, result });
            }
        }
        self.dispatch(now);
    }

    /// Advances time: counts missed deadlines, starts cycles, issues IO.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.catch_up(now);
        self.dispatch(now);
    }

    /// The next IO to carry out.
    pub fn poll_io(&mut self) -> Option<CycleIo> {
        self.io_out.pop_front()
    }

    /// The next event for the driver.
    pub fn poll_event(&mut self) -> Option<CycleEvent<V>> {
        self.events.pop_front()
    }

    /// When [`Self::handle_timeout`] next needs calling: the next deadline to check or the next
    /// cycle start, or `None` with nothing to do.
    #[must_use]
    pub fn poll_timeout(&self) -> Option<Instant> {
        let mut t: Option<Instant> = None;
        let mut consider = |x: Instant| t = Some(t.map_or(x, |t| t.min(x)));
        // A deadline is met if the block is in memory *at* it: check just after.
        if let Some((d, ..)) = self.read_deadlines.first() {
            consider(*d + Duration::from_nanos(1));
        }
        if let Some((d, ..)) = self.write_deadlines.first() {
            consider(*d + Duration::from_nanos(1));
        }
        if self.active() {
            consider(self.cycle_start_of(self.current.index + 1));
        }
        t
    }

    /// Counters.
    #[must_use]
    pub fn stats(&self) -> CycleStats {
        CycleStats { cache: self.cache.stats(), ..self.stats }
    }

    /// One stream's counters.
    #[must_use]
    pub fn stream_stats(&self, stream: StreamId) -> Option<StreamStats> {
        self.streams.get(&stream).map(|s| s.stats)
    }

    /// Every open stream's counters.
    pub fn streams_stats(&self) -> impl Iterator<Item = (StreamId, StreamStats)> + '_ {
        self.streams.iter().map(|(id, s)| (*id, s.stats))
    }

    /// The counts of the cycle in progress.
    #[must_use]
    pub fn current_cycle(&self) -> CycleReport {
        self.current
    }

    /// Number of open streams (playing and recording).
    #[must_use]
    pub fn stream_count(&self) -> usize {
        self.streams.len()
    }

    /// Non-real-time requests open (queued or in flight) on `disk`.
    #[must_use]
    pub fn nrt_pending(&self, disk: DiskId) -> usize {
        self.nrt.values().filter(|n| n.disk == disk).count()
    }

    /// Real-time IOs queued or in flight on `disk`.
    #[must_use]
    pub fn disk_queue_len(&self, disk: DiskId) -> usize {
        self.disks.get(&disk).map_or(0, |d| {
            d.queued.len() + d.in_flight.keys().filter(|f| matches!(f, Flight::Rt(_))).count()
        })
    }

    /// The block cache (read-only, for metrics and tests).
    #[must_use]
    pub fn cache(&self) -> &BlockCache<V> {
        &self.cache
    }

    /// The admission controller (read-only: loads and utilisation for metrics).
    #[must_use]
    pub fn admission(&self) -> &AdmissionController {
        &self.admission
    }

    /// The settings.
    #[must_use]
    pub fn config(&self) -> &CycleConfig {
        &self.config
    }

    /// Replaces the plan of every stream of `plan.object` after a placement epoch flip moved
    /// blocks to other disks, and re-accounts their load on the new disks (they keep their
    /// admission). Reads already queued keep their old disk: the caller keeps the old copies
    /// readable until those reads are done.
    pub fn handle_plan_update(&mut self, plan: Arc<ObjectPlan>) {
        let mut moved = Vec::new();
        for (id, e) in &mut self.streams {
            if let StreamState::Play { plan: p, .. } = &mut e.state
                && p.object == plan.object
            {
                debug_assert_eq!(p.blocks.len(), plan.blocks.len());
                *p = Arc::clone(&plan);
                moved.push(*id);
            }
        }
        for id in moved {
            self.reaccount_stream(id, &plan);
        }
    }

    /// A growing object (a live feed's recording, committed as it arrives: `docs/design/live.md`)
    /// was committed further: every stream playing a shorter prefix of `plan.object` reads on
    /// into the new blocks, and admission charges it for them. Its first blocks are those of
    /// every earlier prefix (blocks are committed in order and never change).
    pub fn handle_plan_grown(&mut self, now: Instant, plan: Arc<ObjectPlan>) {
        self.catch_up(now);
        let mut grown = Vec::new();
        for (id, e) in &mut self.streams {
            if let StreamState::Play { plan: p, .. } = &mut e.state
                && p.object == plan.object
                && p.blocks.len() < plan.blocks.len()
            {
                debug_assert!(p.blocks.iter().zip(&plan.blocks).all(|(a, b)| a.disk == b.disk));
                *p = Arc::clone(&plan);
                grown.push(*id);
            }
        }
        for id in grown {
            self.reaccount_stream(id, &plan);
            self.refill(now, id);
        }
        self.dispatch(now);
    }

    /// Charges admission for stream `id`'s reads of `plan` (on its node's disks, a share).
    fn reaccount_stream(&mut self, id: StreamId, plan: &Arc<ObjectPlan>) {
        let local = match self.streams.get(&id).map(|e| &e.state) {
            Some(StreamState::Play { local, .. }) => local.clone(),
            _ => None,
        };
        if let Some(&(avg, peak)) = self.rates.get(&id) {
            let plan = self.reading_plan(plan, local.as_deref());
            self.admission.reaccount(id, &demand_of(&plan, avg, peak, local.as_deref()));
        }
    }

    /// The driver repaired the copy of `key` on `disk` (after a [`CycleEvent::Failover`]): it
    /// is read again, and admission charges the block to it again.
    pub fn handle_copy_repaired(&mut self, now: Instant, key: BlockKey, disk: DiskId) {
        self.catch_up(now);
        if self.bad.remove(&(key, disk)) {
            self.reaccount_object(key.object);
        }
        self.dispatch(now);
    }

    /// Copies known bad (a read failed) and not yet repaired.
    #[must_use]
    pub fn bad_copies(&self) -> usize {
        self.bad.len()
    }

    /// The disk a block is read from: its first copy not known bad, on this node's disks first
    /// (a cluster share), or `None` when none is left.
    fn read_disk(
        &self,
        key: BlockKey,
        copies: &Replicas,
        local: Option<&BTreeSet<DiskId>>,
    ) -> Option<DiskId> {
        good_copy(&self.bad, key, copies, local)
    }

    /// The next copy to read `key` from after a failure, from the plan of a stream playing its
    /// object (streams of one object share its plan).
    fn next_copy(&self, key: BlockKey) -> Option<DiskId> {
        self.streams.values().find_map(|e| match &e.state {
            StreamState::Play { plan, local, .. } if plan.object == key.object => {
                let block = plan.blocks.get(key.index.0 as usize)?;
                self.read_disk(key, &block.copies, local.as_deref())
            }
            _ => None,
        })
    }

    /// A block's size, from the plan of a stream playing its object.
    fn block_len(&self, key: BlockKey) -> Bytes {
        self.streams
            .values()
            .find_map(|e| match &e.state {
                StreamState::Play { plan, .. } if plan.object == key.object => {
                    plan.blocks.get(key.index.0 as usize).map(|b| b.len)
                }
                _ => None,
            })
            .unwrap_or_default()
    }

    /// `plan` with every block on the disk it is read from now (its first good copy): what
    /// admission charges.
    fn reading_plan(
        &self,
        plan: &Arc<ObjectPlan>,
        local: Option<&BTreeSet<DiskId>>,
    ) -> Arc<ObjectPlan> {
        let lo = (BlockKey::new(plan.object, BlockIndex(0)), DiskId(0));
        let hi = (BlockKey::new(plan.object, BlockIndex(u32::MAX)), DiskId(u16::MAX));
        if self.bad.range(lo..=hi).next().is_none() {
            return Arc::clone(plan);
        }
        let mut p = ObjectPlan::clone(plan);
        for (i, b) in p.blocks.iter_mut().enumerate() {
            let key = plan.key(BlockIndex(i as u32));
            if let Some(d) = self.read_disk(key, &b.copies, local) {
                b.disk = d;
            }
        }
        Arc::new(p)
    }

    /// Re-accounts every stream playing `object` with its blocks charged to the disks they are
    /// read from now (after a failover or a repair).
    fn reaccount_object(&mut self, object: ObjectId) {
        type Playing = (StreamId, Arc<ObjectPlan>, Option<Arc<BTreeSet<DiskId>>>);
        let playing: Vec<Playing> = self
            .streams
            .iter()
            .filter_map(|(id, e)| match &e.state {
                StreamState::Play { plan, local, .. } if plan.object == object => {
                    Some((*id, Arc::clone(plan), local.clone()))
                }
                _ => None,
            })
            .collect();
        for (id, plan, local) in playing {
            if let Some(&(avg, peak)) = self.rates.get(&id) {
                let plan = self.reading_plan(&plan, local.as_deref());
                self.admission.reaccount(id, &demand_of(&plan, avg, peak, local.as_deref()));
            }
        }
    }

    /// A disk joined the store (or its profile changed): admission can place load on it.
    pub fn handle_disk_profile(&mut self, disk: DiskId, profile: crate::profile::DiskProfile) {
        self.admission.set_disk(disk, profile);
    }

    /// A disk was retired: admission forgets it.
    pub fn handle_disk_removed(&mut self, disk: DiskId) {
        self.admission.remove_disk(disk);
    }

    /// Drops an object's unpinned blocks from the cache (after `rm`), its first block included.
    pub fn purge_object(&mut self, object: ObjectId) {
        self.drop_resident(object);
        self.cache.purge_object(object);
    }

    /// Keeps the first block of `plan`'s object in memory from now on (module docs), if it is
    /// on one of `local`'s disks (`None`: every disk is this node's) and fits in
    /// `resident_capacity`, making room by dropping the objects started least recently. A block
    /// not in memory yet is read when its disk has no real-time IO queued. Naming an object
    /// again changes nothing.
    pub fn handle_resident(
        &mut self,
        now: Instant,
        plan: &ObjectPlan,
        local: Option<&BTreeSet<DiskId>>,
    ) {
        let Some(block) = plan.blocks.first() else { return };
        let key = plan.key(BlockIndex(0));
        let capacity = self.config.resident_capacity.0;
        if self.resident.contains_key(&plan.object) || block.len.0 > capacity || block.len.0 == 0 {
            return;
        }
        let Some(disk) = good_copy(&self.bad, key, &block.copies, local)
            .filter(|d| local.is_none_or(|l| l.contains(d)))
        else {
            return;
        };
        while self.resident_bytes + block.len.0 > capacity {
            let Some((&oldest, _)) = self.resident.iter().min_by_key(|(_, r)| r.used) else {
                break;
            };
            self.drop_resident(oldest);
        }
        self.resident_tick += 1;
        let r = Resident { key, len: block.len, used: self.resident_tick };
        self.resident.insert(plan.object, r);
        self.resident_bytes += block.len.0;
        self.stats.resident_objects = self.resident.len() as u64;
        if let Pin::Miss = self.cache.pin(RESIDENT, key, block.len) {
            self.disks.entry(disk).or_default().resident.push_back((key, block.len));
            self.dispatch(now);
        }
    }

    /// Lets an object's first block leave memory (its pin released; a read of it still queued
    /// is dropped when its turn comes).
    fn drop_resident(&mut self, object: ObjectId) {
        if let Some(r) = self.resident.remove(&object) {
            self.resident_bytes -= r.len.0;
            self.stats.resident_objects = self.resident.len() as u64;
            if self.cache.refs(r.key) > 0 {
                self.cache.unpin(RESIDENT, r.key);
            }
        }
    }

    /// The next first block to read into memory on `d`, if any is still wanted and no read of
    /// it is queued or in flight.
    fn next_resident(&mut self, disk: DiskId) -> Option<(BlockKey, Bytes)> {
        let d = self.disks.get_mut(&disk)?;
        while let Some((key, len)) = d.resident.pop_front() {
            let flight = Flight::Rt(Target::Read(key));
            if d.in_flight.contains_key(&flight)
                || d.queued.contains_key(&Target::Read(key))
                || self.cache.peek(key).is_some()
            {
                continue;
            }
            if self.cache.refs(key) == 0 {
                // Dropped since (its object left, or made room for others).
                let _ = self.cache.fail(key);
                continue;
            }
            return Some((key, len));
        }
        None
    }

    /// The start of the cycle after the one holding `now`.
    #[must_use]
    pub fn cycle_end(&self, now: Instant) -> Instant {
        self.cycle_start_of(self.cycle_of(now) + 1)
    }

    fn cycle_nanos(&self) -> u64 {
        u64::try_from(self.config.cycle.as_nanos()).unwrap_or(u64::MAX).max(1)
    }

    fn cycle_of(&self, t: Instant) -> u64 {
        t.as_nanos() / self.cycle_nanos()
    }

    fn cycle_start_of(&self, index: u64) -> Instant {
        Instant::from_nanos(index.saturating_mul(self.cycle_nanos()))
    }

    fn active(&self) -> bool {
        !self.streams.is_empty() || !self.nrt.is_empty() || self.disks.values().any(|d| !d.idle())
    }

    fn admit(&mut self, stream: StreamId, demand: &StreamDemand) -> Decision {
        let decision = if self.streams.contains_key(&stream) {
            Decision::Reject(Refusal::DuplicateStream)
        } else if self.streams.len() >= self.config.max_streams {
            Decision::Reject(Refusal::TooManyStreams { limit: self.config.max_streams })
        } else {
            self.admission.admit(stream, demand)
        };
        match decision {
            Decision::Admit => self.stats.admitted += 1,
            Decision::Reject(_) => self.stats.rejected += 1,
        }
        decision
    }

    /// Processes, in time order, the deadlines and cycle starts up to `now`.
    fn catch_up(&mut self, now: Instant) {
        loop {
            let boundary = self.cycle_start_of(self.current.index + 1);
            let read = self.read_deadlines.first().map(|x| x.0).filter(|d| *d < now);
            let write = self.write_deadlines.first().map(|x| x.0).filter(|d| *d < now);
            let next_deadline = match (read, write) {
                (Some(r), Some(w)) => Some(r.min(w)),
                (r, w) => r.or(w),
            };
            match next_deadline {
                Some(d) if d < boundary || boundary > now => self.expire_one(d),
                _ if boundary <= now => self.start_cycle(now, boundary),
                _ => break,
            }
        }
    }

    fn expire_one(&mut self, d: Instant) {
        if let Some(&(rd, stream, index)) = self.read_deadlines.first()
            && rd == d
        {
            self.read_deadlines.pop_first();
            let key = match self.streams.get(&stream) {
                Some(StreamEntry { state: StreamState::Play { plan, .. }, .. }) => plan.key(index),
                _ => return,
            };
            self.count_miss(stream, key, d, false);
            return;
        }
        if let Some(&(wd, stream, key, _)) = self.write_deadlines.first()
            && wd == d
        {
            self.write_deadlines.pop_first();
            self.count_miss(stream, key, d, true);
        }
    }

    fn count_miss(&mut self, stream: StreamId, key: BlockKey, deadline: Instant, write: bool) {
        if write {
            self.stats.missed_write_deadlines += 1;
        } else {
            self.stats.missed_deadlines += 1;
        }
        self.current.missed += 1;
        if let Some(s) = self.streams.get_mut(&stream) {
            s.stats.missed += 1;
        }
        self.events.push_back(CycleEvent::Missed { stream, key, deadline });
    }

    /// Ends the current cycle and starts the one holding `boundary`, and queues every playing
    /// stream's double buffer for it.
    fn start_cycle(&mut self, now: Instant, boundary: Instant) {
        let index = if self.active() {
            let ended = self.current;
            self.stats.cycles += 1;
            if ended.missed > 0 {
                self.stats.cycles_with_misses += 1;
            }
            self.events.push_back(CycleEvent::CycleEnd(ended));
            self.cycle_of(boundary)
        } else {
            // Idle: nothing to report; jump to the cycle holding `now`.
            self.cycle_of(now)
        };
        self.current =
            CycleReport { index, start: self.cycle_start_of(index), ..CycleReport::default() };
        let ids: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| matches!(s.state, StreamState::Play { running: Some(_), .. }))
            .map(|(id, _)| *id)
            .collect();
        let at = self.current.start;
        for id in ids {
            self.refill(at, id);
        }
    }

    fn release(&mut self, stream: StreamId) {
        let Some(StreamEntry { state: StreamState::Play { plan, running, .. }, .. }) =
            self.streams.get_mut(&stream)
        else {
            return;
        };
        let Some(run) = running.take() else { return };
        for slot in &run.window {
            let index = slot.index();
            if let (Slot::Waiting(_), Some(_)) = (slot, run.anchor) {
                self.read_deadlines.remove(&(run.deadline(plan, index), stream, index));
            }
            self.cache.unpin(stream, plan.key(index));
        }
    }

    /// Drops a failed block's slot (its pin is already gone) and its deadline.
    fn forget_slot(&mut self, stream: StreamId, index: BlockIndex) {
        let Some(StreamEntry { state: StreamState::Play { plan, running: Some(run), .. }, .. }) =
            self.streams.get_mut(&stream)
        else {
            return;
        };
        if run.anchor.is_some() {
            self.read_deadlines.remove(&(run.deadline(plan, index), stream, index));
        }
        run.window.retain(|slot| slot.index() != index);
    }

    /// Pins and queues the stream's blocks due before the end of the next cycle (the next
    /// `lookahead_cycles` cycles), and its first block whatever its deadline; then delivers what
    /// is ready.
    fn refill(&mut self, now: Instant, stream: StreamId) {
        let horizon = self.cycle_end(now) + self.config.cycle * self.config.lookahead_cycles;
        let Some(StreamEntry {
            state: StreamState::Play { plan, local, running: Some(run) }, ..
        }) = self.streams.get_mut(&stream)
        else {
            return;
        };
        while (run.next_request as usize) < plan.blocks.len() {
            let index = BlockIndex(run.next_request);
            let block = plan.blocks[index.0 as usize];
            if local.as_ref().is_some_and(|l| !l.contains(&block.disk))
                && !run.taken.contains(&index)
            {
                // Another node's block (a cluster share): it reads and sends that one.
                run.next_request += 1;
                continue;
            }
            let deadline = run.deadline(plan, index);
            if !run.window.is_empty() && deadline >= horizon {
                break;
            }
            run.next_request += 1;
            let key = plan.key(index);
            match self.cache.pin(stream, key, block.len) {
                Pin::Hit(v) => {
                    run.window.push_back(Slot::Ready(index, v));
                    continue;
                }
                Pin::Pending | Pin::Miss => {
                    // Pending: a read is queued or in flight; pushing again only moves a queued
                    // read's deadline earlier, never duplicates it. A copy known bad is skipped
                    // (failover); with none good left, the read fails and ends the stream.
                    run.window.push_back(Slot::Waiting(index));
                    let at = (deadline, run.anchor.is_none());
                    queue_read(&mut self.disks, &mut self.seq, &self.bad, key, &block, local, at);
                }
            }
            if run.anchor.is_some() {
                self.read_deadlines.insert((deadline, stream, index));
            }
        }
        if self.try_deliver(now, stream) {
            self.refill(now, stream);
        }
    }

    fn mark_ready(&mut self, stream: StreamId, key: BlockKey, v: V) {
        let Some(StreamEntry { state: StreamState::Play { plan, running: Some(run), .. }, .. }) =
            self.streams.get_mut(&stream)
        else {
            return;
        };
        let Some(pos) =
            run.window.iter().position(|s| matches!(s, Slot::Waiting(i) if *i == key.index))
        else {
            return;
        };
        if run.anchor.is_some() {
            self.read_deadlines.remove(&(run.deadline(plan, key.index), stream, key.index));
        }
        run.window[pos] = Slot::Ready(key.index, v);
    }

    /// Delivers the stream's ready blocks in order. Returns whether this anchored the stream's
    /// clock (its deadlines are now known, so more blocks may be due).
    fn try_deliver(&mut self, now: Instant, stream: StreamId) -> bool {
        let startup_delay = self.config.startup_delay;
        let Some(StreamEntry { state: StreamState::Play { plan, running: Some(run), .. }, stats }) =
            self.streams.get_mut(&stream)
        else {
            return false;
        };
        let mut anchored = false;
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
                    let anchor = match run.anchor {
                        None => {
                            let wall = now + startup_delay;
                            run.anchor = Some(wall);
                            run.anchor_sent = true;
                            anchored = true;
                            Some(Anchor { wall, media: run.start_media })
                        }
                        // A pinned clock: the sender learns it with the first block.
                        Some(wall) if !run.anchor_sent => {
                            run.anchor_sent = true;
                            Some(Anchor { wall, media: run.start_media })
                        }
                        Some(_) => None,
                    };
                    stats.delivered += 1;
                    self.events.push_back(CycleEvent::Deliver {
                        stream,
                        index,
                        block,
                        anchor,
                        run: run.run,
                    });
                }
            }
        }
        if anchored {
            for slot in &run.window {
                if let Slot::Waiting(i) = slot {
                    self.read_deadlines.insert((run.deadline(plan, *i), stream, *i));
                }
            }
        }
        anchored
    }

    fn dispatch(&mut self, now: Instant) {
        let depth = self.config.disk_queue_depth as usize;
        let cycle_end = self.cycle_end(now);
        let disks: Vec<DiskId> = self.disks.keys().copied().collect();
        for disk in disks {
            while let Some(d) = self.disks.get_mut(&disk) {
                if d.in_flight.len() >= depth {
                    break;
                }
                if let Some(target) = d.pick(self.config.order, cycle_end) {
                    let Some(q) = d.take(target) else { break };
                    if let Target::Read(key) = target
                        && self.cache.refs(key) == 0
                    {
                        // Nobody waits for this block any more (the stream stopped or left).
                        let _ = self.cache.fail(key);
                        continue;
                    }
                    d.in_flight.insert(
                        Flight::Rt(target),
                        InFlight {
                            deadline: q.deadline,
                            provisional: q.provisional,
                            stream: q.stream,
                        },
                    );
                    let class = match target {
                        Target::Read(key) => {
                            self.stats.reads += 1;
                            self.current.reads += 1;
                            IoClass::Read { key }
                        }
                        Target::Write(key) => {
                            self.stats.writes += 1;
                            self.current.writes += 1;
                            IoClass::Write { stream: q.stream.unwrap_or_default(), key }
                        }
                    };
                    self.io_out.push_back(CycleIo {
                        disk,
                        len: q.len,
                        deadline: q.deadline,
                        class,
                    });
                    continue;
                }
                if let Some((key, len)) = self.next_resident(disk) {
                    let Some(d) = self.disks.get_mut(&disk) else { break };
                    d.in_flight.insert(
                        Flight::Rt(Target::Read(key)),
                        InFlight { deadline: cycle_end, provisional: true, stream: None },
                    );
                    self.stats.resident_reads += 1;
                    self.io_out.push_back(CycleIo {
                        disk,
                        len,
                        deadline: cycle_end,
                        class: IoClass::Read { key },
                    });
                    continue;
                }
                if !self.issue_nrt(now, disk, cycle_end) {
                    break;
                }
            }
        }
    }

    /// Issues the next chunk of the disk's first non-real-time request if it fits in what is left
    /// of the cycle. Returns whether it issued one.
    fn issue_nrt(&mut self, now: Instant, disk: DiskId, cycle_end: Instant) -> bool {
        let Some(d) = self.disks.get_mut(&disk) else { return false };
        let Some(&id) = d.nrt.front() else { return false };
        let Some(n) = self.nrt.get_mut(&id) else {
            d.nrt.pop_front();
            return true; // a stale id: look at the next one
        };
        if n.issued >= n.len {
            d.nrt.pop_front();
            return true;
        }
        let slack = cycle_end.saturating_duration_since(now);
        let remaining = n.len - n.issued;
        let direction = match n.kind {
            NrtKind::Read => Direction::Read,
            NrtKind::Write => Direction::Write,
        };
        let max = remaining.min(self.config.nrt_chunk.0);
        let fits = |len: u64| {
            self.admission.estimate(disk, direction, Bytes(len)).is_none_or(|t| t <= slack)
        };
        let len = if fits(max) {
            max
        } else {
            // The largest multiple of the alignment that fits (times grow with size).
            let (mut lo, mut hi) = (0u64, max / NRT_ALIGN);
            while lo < hi {
                let mid = (lo + hi).div_ceil(2);
                if fits(mid * NRT_ALIGN) {
                    lo = mid;
                } else {
                    hi = mid - 1;
                }
            }
            lo * NRT_ALIGN
        };
        if len == 0 {
            return false;
        }
        let offset = n.issued;
        n.issued += len;
        n.in_flight += 1;
        let kind = n.kind;
        if n.issued >= n.len {
            d.nrt.pop_front();
        }
        d.in_flight.insert(
            Flight::Nrt(id, offset),
            InFlight { deadline: cycle_end, provisional: false, stream: None },
        );
        self.stats.nrt_ios += 1;
        self.stats.nrt_bytes += len;
        self.current.nrt_ios += 1;
        self.current.nrt_bytes += len;
        self.io_out.push_back(CycleIo {
            disk,
            len: Bytes(len),
            deadline: cycle_end,
            class: IoClass::Nrt { id, kind, offset: Bytes(offset) },
        });
        true
    }
}

/// The first copy of `key` not in `bad`, on a disk this node reads (`local`; `None`: all) if
/// one is left, else on another node's disk (a cluster share reads it through its owner).
/// Queues a real-time read of `key` (`block` of a plan) on its first good copy, this node's
/// first, with deadline `at.0` (provisional while the stream's clock is not pinned: `at.1`),
/// unless that disk is already reading it; a read already queued only moves earlier.
fn queue_read(
    disks: &mut BTreeMap<DiskId, DiskState>,
    seq: &mut u64,
    bad: &BTreeSet<(BlockKey, DiskId)>,
    key: BlockKey,
    block: &crate::plan::PlannedBlock,
    local: &Option<Arc<BTreeSet<DiskId>>>,
    (deadline, provisional): (Instant, bool),
) {
    let disk = good_copy(bad, key, &block.copies, local.as_deref()).unwrap_or(block.disk);
    let d = disks.entry(disk).or_default();
    if !d.in_flight.contains_key(&Flight::Rt(Target::Read(key))) {
        *seq += 1;
        let q = Queued { deadline, seq: *seq, len: block.len, provisional, stream: None };
        d.push(Target::Read(key), q);
    }
}

fn good_copy(
    bad: &BTreeSet<(BlockKey, DiskId)>,
    key: BlockKey,
    copies: &Replicas,
    local: Option<&BTreeSet<DiskId>>,
) -> Option<DiskId> {
    let good = |d: &DiskId| !bad.contains(&(key, *d));
    let here = copies.iter().find(|d| good(d) && local.is_none_or(|l| l.contains(d)));
    here.or_else(|| copies.iter().find(good))
}

/// What playing `plan` asks of this node's disks: all of it, or a cluster share's part.
fn demand_of(
    plan: &ObjectPlan,
    avg: BitRate,
    peak: BitRate,
    local: Option<&BTreeSet<DiskId>>,
) -> StreamDemand {
    match local {
        Some(l) => StreamDemand::read_part(plan, avg, peak, l),
        None => StreamDemand::read(plan, avg, peak),
    }
}

#[cfg(test)]
mod tests {
    use isochron_base::{Gsn, IoFailureKind};

    use super::*;
    use crate::admission::{AdmissionConfig, AdmissionPolicy};
    use crate::plan::PlannedBlock;
    use crate::profile::DiskModel;

    const MIB: Bytes = Bytes::mib(1);
    const SEC: Duration = Duration::from_secs(1);

    fn at(ms: u64) -> Instant {
        Instant::from_nanos(ms * 1_000_000)
    }

    /// Blocks of 1 MiB on the given disks, each lasting `block_ms` of media.
    fn plan(object: u64, disks: &[u16], block_ms: u64) -> Arc<ObjectPlan> {
        Arc::new(ObjectPlan {
            object: ObjectId(object),
            blocks: disks
                .iter()
                .enumerate()
                .map(|(i, d)| PlannedBlock {
                    disk: DiskId(*d),
                    copies: Replicas::single(DiskId(*d)),
                    first_gsn: Gsn(i as u64 * 100),
                    first_send_time: MediaTime::from_nanos(i as u64 * block_ms * 1_000_000),
                    len: MIB,
                })
                .collect(),
        })
    }

    fn sched(policy: AdmissionPolicy, disks: u16, config: CycleConfig) -> CycleScheduler<u32> {
        let p =
            DiskModel::new(Duration::from_millis(10), 4.0 * 1_048_576.0).read_profile().unwrap();
        let a = AdmissionController::new(
            AdmissionConfig { policy, cycle: config.cycle, ..AdmissionConfig::default() },
            (0..disks).map(|d| (DiskId(d), p.clone())),
        );
        CycleScheduler::new(config, a)
    }

    fn open(s: &mut CycleScheduler<u32>, id: u64, p: &Arc<ObjectPlan>, bps: u64) -> Decision {
        s.handle_open(
            Instant::ZERO,
            OpenStream {
                stream: StreamId(id),
                plan: Arc::clone(p),
                avg_bitrate: BitRate(bps),
                peak_bitrate: BitRate(bps),
                local: None,
            },
        )
    }

    fn ios(s: &mut CycleScheduler<u32>) -> Vec<CycleIo> {
        std::iter::from_fn(|| s.poll_io()).collect()
    }

    fn events(s: &mut CycleScheduler<u32>) -> Vec<CycleEvent<u32>> {
        std::iter::from_fn(|| s.poll_event()).collect()
    }

    fn read_done(s: &mut CycleScheduler<u32>, now: Instant, io: CycleIo) {
        let IoClass::Read { key } = io.class else { panic!("not a read: {io:?}") };
        s.handle_read_done(now, ReadDone { disk: io.disk, key, result: Ok(key.index.0) });
    }

    fn delivered(ev: &[CycleEvent<u32>]) -> Vec<(u64, u32)> {
        ev.iter()
            .filter_map(|e| match e {
                CycleEvent::Deliver { stream, index, .. } => Some((stream.0, index.0)),
                _ => None,
            })
            .collect()
    }

    /// The module docs' resident first blocks: read only when the disk has no real-time IO
    /// queued; a start from the beginning is then delivered with no IO, while another stream's
    /// read is in progress; a start elsewhere reads as before; and at capacity the object
    /// started least recently makes room.
    #[test]
    fn a_resident_first_block_starts_a_stream_at_once_whatever_the_disk_is_doing() {
        let config = CycleConfig { resident_capacity: Bytes::mib(2), ..CycleConfig::default() };
        let mut s = sched(AdmissionPolicy::Off, 1, config);
        let (busy, p1, p2, p3) = (
            plan(9, &[0; 8], 500),
            plan(1, &[0; 4], 500),
            plan(2, &[0; 4], 500),
            plan(3, &[0; 4], 500),
        );
        // A playing stream's first read is queued first: the resident read waits behind it.
        assert_eq!(open(&mut s, 9, &busy, 8_000_000), Decision::Admit);
        s.handle_start(at(0), StreamId(9), RunId(1), BlockIndex(0), MediaTime::ZERO);
        s.handle_resident(at(0), &p1, None);
        s.handle_resident(at(0), &p2, None);
        let first = ios(&mut s);
        assert_eq!(first.len(), 1, "{first:?}");
        assert_eq!(first[0].class, IoClass::Read { key: busy.key(BlockIndex(0)) });
        read_done(&mut s, at(80), first[0]);
        let mut now = at(80);
        let mut resident_reads = Vec::new();
        for _ in 0..20 {
            if resident_reads.len() == 2 {
                break;
            }
            for io in ios(&mut s) {
                let IoClass::Read { key } = io.class else { panic!("{io:?}") };
                if key.object != ObjectId(9) {
                    resident_reads.push(key);
                }
                now = now + Duration::from_millis(80);
                read_done(&mut s, now, io);
            }
            for e in events(&mut s) {
                if let CycleEvent::Deliver { stream, index, .. } = e {
                    s.handle_block_done(now, stream, RunId(1), index);
                }
            }
            now = now + Duration::from_millis(100);
            s.handle_timeout(now);
        }
        assert_eq!(resident_reads, vec![p1.key(BlockIndex(0)), p2.key(BlockIndex(0))]);
        assert_eq!((s.stats().resident_reads, s.stats().resident_objects), (2, 2));
        // Make the busy stream's next read be in progress, then start object 1 from its
        // beginning: delivered at once, with its clock anchored now, and no read of block 0.
        let in_progress = (0..50)
            .find_map(|_| {
                now = now + Duration::from_millis(100);
                s.handle_timeout(now);
                Some(ios(&mut s)).filter(|io| !io.is_empty())
            })
            .expect("the busy stream reads again");
        events(&mut s);
        assert_eq!(open(&mut s, 1, &p1, 8_000_000), Decision::Admit);
        s.handle_start(now, StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let ev = events(&mut s);
        assert_eq!(delivered(&ev), vec![(1, 0)], "{ev:?}");
        let CycleEvent::Deliver { anchor: Some(a), .. } = &ev[0] else { panic!("{ev:?}") };
        assert_eq!(a.wall, now + CycleConfig::default().startup_delay);
        assert!(
            ios(&mut s).iter().all(|io| io.class != IoClass::Read { key: p1.key(BlockIndex(0)) })
        );
        for io in in_progress {
            read_done(&mut s, now, io);
        }
        // A seek into object 2 reads its block as any start does.
        assert_eq!(open(&mut s, 2, &p2, 8_000_000), Decision::Admit);
        s.handle_start(
            now,
            StreamId(2),
            RunId(1),
            BlockIndex(2),
            MediaTime::from_nanos(1_000_000_000),
        );
        assert!(delivered(&events(&mut s)).iter().all(|d| d.0 != 2));
        // Object 3 needs room: object 2, started (from the beginning) least recently, leaves;
        // object 1, started since, stays.
        s.handle_resident(now, &p3, None);
        assert_eq!(s.stats().resident_objects, 2);
        assert_eq!(s.cache().refs(p2.key(BlockIndex(0))), 0);
        assert!(s.cache().refs(p1.key(BlockIndex(0))) >= 1);
        // Removing object 1 lets its first block go.
        s.handle_close(now, StreamId(1));
        s.purge_object(ObjectId(1));
        assert_eq!(s.cache().refs(p1.key(BlockIndex(0))), 0);
        assert_eq!(s.stats().resident_objects, 1);
    }

    #[test]
    fn a_cluster_share_reads_only_its_disks_on_the_pinned_clock() {
        // Disks 0 and 1 are this node's; 2 and 3 another's.
        let mut s = sched(AdmissionPolicy::Aggressive, 2, CycleConfig::default());
        let p = plan(1, &[2, 0, 3, 1, 2, 2, 0, 3], 500);
        let local: Arc<BTreeSet<DiskId>> = Arc::new([DiskId(0), DiskId(1)].into());
        let req = OpenStream {
            stream: StreamId(1),
            plan: Arc::clone(&p),
            avg_bitrate: BitRate(8_000_000),
            peak_bitrate: BitRate(8_000_000),
            local: Some(Arc::clone(&local)),
        };
        // The part on disks 2 and 3 has no profile here, and is not this node's to admit.
        assert_eq!(s.handle_open(Instant::ZERO, req), Decision::Admit);
        // Three of eight blocks: three eighths of the stream's reads, split over two disks.
        let l0 = s.admission().load(DiskId(0)).unwrap().ios;
        let l1 = s.admission().load(DiskId(1)).unwrap().ios;
        let all = 1_000_000.0 / MIB.0 as f64; // reads per 1 s cycle of the whole stream
        assert!((l0 - all * 2.0 / 8.0).abs() < 1e-9 && (l1 - all / 8.0).abs() < 1e-9, "{l0} {l1}");
        // The origin pinned the clock at 300 ms for media 0.
        let anchor = Anchor { wall: at(300), media: MediaTime::ZERO };
        s.handle_start_pinned(at(50), StreamId(1), RunId(1), BlockIndex(0), anchor, Pace::NOMINAL);
        let mut got = Vec::new();
        let mut now = at(50);
        for _ in 0..20 {
            for io in ios(&mut s) {
                assert_eq!(io.deadline, at(300 + 500 * u64::from(io_index(&io))), "{io:?}");
                read_done(&mut s, now, io);
            }
            for e in events(&mut s) {
                if let CycleEvent::Deliver { index, anchor: a, .. } = e {
                    // The anchor travels with the first block delivered, and only with it.
                    assert_eq!(a.is_some(), got.is_empty());
                    if let Some(a) = a {
                        assert_eq!(a, anchor);
                    }
                    got.push(index.0);
                    s.handle_block_done(now, StreamId(1), RunId(1), index);
                }
            }
            now = now + Duration::from_millis(500);
            s.handle_timeout(now);
        }
        assert_eq!(got, vec![1, 3, 6]);
        assert_eq!(s.stats().missed_deadlines, 0);
    }

    /// A cluster share on this node's disks 0 and 1 (2 and 3 another node's, every block with a
    /// second copy on the other node's disks) of an 8-block object, started at 50 ms with its
    /// clock pinned at 300 ms.
    fn cluster_share_started() -> CycleScheduler<u32> {
        let mut s = sched(AdmissionPolicy::Aggressive, 2, CycleConfig::default());
        let other = |d: u16| DiskId([2, 3, 0, 1][usize::from(d)]);
        let mut p = (*plan(1, &[2, 0, 3, 1, 2, 2, 0, 3], 500)).clone();
        for b in &mut p.blocks {
            b.copies.push(other(b.disk.0));
        }
        let local: Arc<BTreeSet<DiskId>> = Arc::new([DiskId(0), DiskId(1)].into());
        let req = OpenStream {
            stream: StreamId(1),
            plan: Arc::new(p),
            avg_bitrate: BitRate(8_000_000),
            peak_bitrate: BitRate(8_000_000),
            local: Some(local),
        };
        assert_eq!(s.handle_open(Instant::ZERO, req), Decision::Admit);
        let anchor = Anchor { wall: at(300), media: MediaTime::ZERO };
        s.handle_start_pinned(at(50), StreamId(1), RunId(1), BlockIndex(0), anchor, Pace::NOMINAL);
        s
    }

    #[test]
    fn a_cluster_share_takes_over_a_lost_node_s_blocks_from_its_local_copies() {
        // Disks 2 and 3 are a node now lost.
        let mut s = cluster_share_started();
        let mut got = Vec::new();
        let mut now = at(50);
        for step in 0..20 {
            if step == 4 {
                // At 2050 ms (media 1.75 s, in block 3): the lost node's blocks from block 2 on.
                let lost = [2, 4, 5, 7].map(BlockIndex);
                s.handle_take_over(now, StreamId(1), RunId(1), &lost);
                s.handle_take_over(now, StreamId(1), RunId(2), &lost); // another run: ignored
            }
            for io in ios(&mut s) {
                assert_eq!(io.deadline, at(300 + 500 * u64::from(io_index(&io))), "{io:?}");
                let d = io.disk;
                assert!(d == DiskId(0) || d == DiskId(1), "read from a local copy: {io:?}");
                read_done(&mut s, now, io);
            }
            for e in events(&mut s) {
                if let CycleEvent::Deliver { index, .. } = e {
                    got.push((step, index.0));
                    s.handle_block_done(now, StreamId(1), RunId(1), index);
                }
            }
            now = now + Duration::from_millis(500);
            s.handle_timeout(now);
        }
        // Its own blocks as before (6 read ahead already); then the taken blocks, in
        // index order (the pacer sends every block in index order whatever order they come
        // in); then 7 on time. Nothing twice.
        let order: Vec<u32> = got.iter().map(|g| g.1).collect();
        assert_eq!(order, vec![1, 3, 6, 2, 4, 5, 7], "{got:?}");
        // 2 and 4 are overdue or nearly (due at 1300 and 2300 ms): read at once; 5 (due at
        // 2800 ms, on the same disk as 4) one cycle later, in time.
        assert!(got.contains(&(4, 2)) && got.contains(&(4, 4)) && got.contains(&(5, 5)), "{got:?}");
    }

    #[test]
    fn a_cluster_share_reads_again_its_own_blocks_named_for_a_lost_taker() {
        // At 2050 ms its own blocks 1 and 3 are named: passed over while a taker was to send
        // them, the taker lost in turn. The walk passed both and the sender let them go: they
        // are read and delivered again. Block 6, read ahead and still with the sender, is not.
        let mut s = cluster_share_started();
        let mut got = Vec::new();
        let mut now = at(50);
        for step in 0..20 {
            if step == 4 {
                let named = [1, 3, 6].map(BlockIndex);
                s.handle_take_over(now, StreamId(1), RunId(1), &named);
            }
            for io in ios(&mut s) {
                read_done(&mut s, now, io);
            }
            for e in events(&mut s) {
                if let CycleEvent::Deliver { index, .. } = e {
                    got.push(index.0);
                    if index.0 != 6 {
                        s.handle_block_done(now, StreamId(1), RunId(1), index);
                    }
                }
            }
            now = now + Duration::from_millis(500);
            s.handle_timeout(now);
        }
        assert_eq!(got, vec![1, 3, 6, 1, 3], "read again after the sender let them go");
    }

    #[test]
    fn a_cluster_share_gives_back_the_blocks_it_has_not_reached() {
        // As above; the lost node's blocks are taken over at the start, and given back at
        // 550 ms: the walk has reached block 6 (read ahead); 7 is read no more.
        let mut s = cluster_share_started();
        let lost = [0, 2, 4, 5, 7].map(BlockIndex);
        s.handle_take_over(at(50), StreamId(1), RunId(1), &lost);
        let mut got = Vec::new();
        let mut given = Vec::new();
        let mut now = at(50);
        for step in 0..20 {
            if step == 1 {
                s.handle_give_back(now, StreamId(1), RunId(2), &lost); // another run: ignored
                s.handle_give_back(now, StreamId(1), RunId(1), &lost);
            }
            for io in ios(&mut s) {
                read_done(&mut s, now, io);
            }
            for e in events(&mut s) {
                match e {
                    CycleEvent::Deliver { index, .. } => {
                        got.push(index.0);
                        s.handle_block_done(now, StreamId(1), RunId(1), index);
                    }
                    CycleEvent::GivenBack { run, blocks, .. } => given.push((run, blocks)),
                    _ => {}
                }
            }
            now = now + Duration::from_millis(500);
            s.handle_timeout(now);
        }
        assert_eq!(given, vec![(RunId(1), vec![BlockIndex(7)])]);
        got.sort_unstable();
        assert_eq!(got, vec![0, 1, 2, 3, 4, 5, 6], "every block the walk reached, not 7");
    }

    fn io_index(io: &CycleIo) -> u32 {
        match io.class {
            IoClass::Read { key } => key.index.0,
            _ => panic!("{io:?}"),
        }
    }

    #[test]
    fn double_buffer_is_read_one_cycle_ahead() {
        // Blocks of 1 s of media (a 1 MiB/s stream): one read per cycle after the start.
        let mut s = sched(AdmissionPolicy::Aggressive, 1, CycleConfig::default());
        let p = plan(1, &[0; 10], 1000);
        assert_eq!(open(&mut s, 1, &p, 2_000_000), Decision::Admit);
        s.handle_start(at(100), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        // The first block goes at once; with depth 1 only it is in flight.
        let io = ios(&mut s);
        assert_eq!(io.len(), 1);
        assert_eq!(io[0].deadline, at(120), "provisional: now + startup delay");
        read_done(&mut s, at(360), io[0]);
        let ev = events(&mut s);
        let Some(CycleEvent::Deliver { anchor: Some(a), .. }) = ev.first() else {
            panic!("{ev:?}")
        };
        assert_eq!(a.wall, at(380));
        // Blocks due before the end of the next cycle (2 s): block 1 (1.38 s). Block 2 (2.38 s)
        // waits for the cycle starting at 1 s.
        let io = ios(&mut s);
        assert_eq!(io.len(), 1);
        assert_eq!(io[0].class, IoClass::Read { key: p.key(BlockIndex(1)) });
        // Queued before the anchor: its queue deadline is the provisional one (earlier than the
        // real 1.38 s), which only makes it more urgent.
        assert_eq!(io[0].deadline, at(1120));
        read_done(&mut s, at(620), io[0]);
        assert!(ios(&mut s).is_empty());
        assert_eq!(s.poll_timeout(), Some(at(1000)), "next cycle start");
        s.handle_timeout(at(1000));
        let io = ios(&mut s);
        assert_eq!(io.len(), 1);
        assert_eq!(io[0].class, IoClass::Read { key: p.key(BlockIndex(2)) });
        let ev = events(&mut s);
        assert!(matches!(
            ev.last(),
            Some(CycleEvent::CycleEnd(CycleReport { index: 0, reads: 2, .. }))
        ));
    }

    #[test]
    fn a_stream_of_a_growing_object_reads_on_into_the_blocks_committed_later() {
        // A recording committed as 2 blocks of 1 s; later as 4 (the first 2 the same).
        let mut s = sched(AdmissionPolicy::Aggressive, 1, CycleConfig::default());
        let (short, long) = (plan(1, &[0; 2], 1000), plan(1, &[0; 4], 1000));
        assert_eq!(open(&mut s, 1, &short, 2_000_000), Decision::Admit);
        s.handle_start(at(100), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let mut got = Vec::new();
        let mut now = at(100);
        // Each second: the reads done, the blocks delivered, the next cycle.
        let seconds = |s: &mut CycleScheduler<u32>, now: &mut Instant, n: usize| {
            let mut got = Vec::new();
            for _ in 0..n {
                for io in ios(s) {
                    read_done(s, *now, io);
                }
                got.extend(delivered(&events(s)));
                *now = *now + Duration::from_secs(1);
                s.handle_timeout(*now);
            }
            got
        };
        got.extend(seconds(&mut s, &mut now, 2));
        assert_eq!(got, [(1, 0), (1, 1)], "the prefix, and nothing past it");
        assert!(ios(&mut s).is_empty(), "no read past the committed prefix");
        s.handle_plan_grown(now, Arc::clone(&long));
        got.extend(seconds(&mut s, &mut now, 3));
        assert_eq!(got, [(1, 0), (1, 1), (1, 2), (1, 3)], "on into the blocks committed later");
        // Another object's plan, or a shorter one, changes nothing.
        s.handle_plan_grown(now, plan(2, &[0; 8], 1000));
        s.handle_plan_grown(now, short);
        assert!(ios(&mut s).is_empty());
    }

    #[test]
    fn a_faster_pace_reads_ahead_sooner_and_moves_deadlines() {
        // Blocks of 1 s of media; anchored at 380 ms, block 1 in flight.
        let mut s = sched(AdmissionPolicy::Aggressive, 1, CycleConfig::default());
        let p = plan(1, &[0; 10], 1000);
        assert_eq!(open(&mut s, 1, &p, 2_000_000), Decision::Admit);
        s.handle_start(at(100), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let io = ios(&mut s);
        read_done(&mut s, at(360), io[0]);
        let _ = events(&mut s);
        assert_eq!(s.disk_queue_len(DiskId(0)), 1, "nominal: only block 1 (due 1.38 s)");
        // Twice as fast from the anchor: blocks 1, 2, 3 are due at 0.88, 1.38, 1.88 s, all
        // before the end of the next cycle (2 s).
        let double = Pace::from_multiplier(2.0).unwrap();
        let anchor = Anchor { wall: at(380), media: MediaTime::ZERO };
        s.handle_pace(at(400), StreamId(1), RunId(1), anchor, double);
        assert_eq!(s.disk_queue_len(DiskId(0)), 3);
        assert_eq!(s.poll_timeout(), Some(at(880) + Duration::from_nanos(1)));
        // A stale run is ignored.
        s.handle_pace(at(400), StreamId(1), RunId(7), anchor, Pace::NOMINAL);
        assert_eq!(s.poll_timeout(), Some(at(880) + Duration::from_nanos(1)));
        // Block 1 not in memory at 0.88 s: a miss on the new clock.
        s.handle_timeout(at(900));
        assert_eq!(s.stats().missed_deadlines, 1);
    }

    #[test]
    fn a_new_stream_goes_to_the_head_of_the_queue() {
        let mut s = sched(AdmissionPolicy::Off, 1, CycleConfig::default());
        // Ten streams, started and anchored, with several blocks each queued for the cycle.
        for id in 1..=10 {
            let p = plan(id, &[0; 20], 700);
            let _ = open(&mut s, id, &p, 1);
            s.handle_start(at(0), StreamId(id), RunId(1), BlockIndex(0), MediaTime::ZERO);
        }
        let mut now = 0;
        let mut io = ios(&mut s);
        while s.stats().cache.bytes_from_disk < 10 * MIB.0 {
            now += 1;
            read_done(&mut s, at(now), io[0]);
            io = ios(&mut s);
        }
        assert_eq!(io.len(), 1, "one IO in flight per disk");
        assert!(s.disk_queue_len(DiskId(0)) > 10);
        // A new stream arrives while that read is in progress.
        let p = plan(99, &[0; 20], 700);
        let _ = open(&mut s, 99, &p, 1);
        s.handle_start(at(now), StreamId(99), RunId(1), BlockIndex(0), MediaTime::ZERO);
        assert!(ios(&mut s).is_empty());
        read_done(&mut s, at(now + 1), io[0]);
        let next = ios(&mut s);
        assert_eq!(
            next[0].class,
            IoClass::Read { key: p.key(BlockIndex(0)) },
            "after the IO in progress"
        );
    }

    #[test]
    fn misses_are_counted_per_stream_and_per_cycle() {
        let mut s = sched(AdmissionPolicy::Off, 1, CycleConfig::default());
        let p = plan(1, &[0; 10], 500);
        let _ = open(&mut s, 1, &p, 1);
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let io = ios(&mut s);
        read_done(&mut s, at(100), io[0]); // anchor at 120 ms: block 1 due at 620 ms
        let io = ios(&mut s);
        assert_eq!(io[0].deadline, at(520), "queued with the provisional deadline");
        // The disk is slow: block 1 arrives at 700 ms. In time at exactly the deadline is fine.
        s.handle_timeout(at(620));
        assert_eq!(s.stats().missed_deadlines, 0);
        s.handle_timeout(at(621));
        assert_eq!(s.stats().missed_deadlines, 1);
        read_done(&mut s, at(700), io[0]);
        // Queued before the anchor, the read had a provisional deadline: not a "late read" (an
        // IO-level count); the miss above is the block-level count.
        assert_eq!(s.stats().late_reads, 0);
        let ev = events(&mut s);
        assert!(
            ev.iter()
                .any(|e| matches!(e, CycleEvent::Missed { deadline, .. } if *deadline == at(620)))
        );
        assert_eq!(delivered(&ev), vec![(1, 0), (1, 1)], "a late block is still delivered");
        assert_eq!(s.stream_stats(StreamId(1)).unwrap().missed, 1);
        s.handle_timeout(at(1000));
        let ev = events(&mut s);
        let ends: Vec<_> = ev
            .iter()
            .filter_map(|e| match e {
                CycleEvent::CycleEnd(r) => Some(*r),
                _ => None,
            })
            .collect();
        assert_eq!(ends.len(), 1);
        assert_eq!((ends[0].index, ends[0].missed), (0, 1));
        assert_eq!(s.stats().cycles_with_misses, 1);
    }

    #[test]
    fn nrt_uses_only_the_slack_and_fits_the_cycle() {
        let mut s = sched(AdmissionPolicy::Aggressive, 1, CycleConfig::default());
        let p = plan(1, &[0; 10], 4000);
        assert!(open(&mut s, 1, &p, 1_000_000).is_admit());
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let req =
            NrtRequest { id: NrtId(7), disk: DiskId(0), kind: NrtKind::Read, len: Bytes::mib(3) };
        assert!(s.handle_nrt(at(0), req));
        assert!(!s.handle_nrt(at(0), req), "duplicate id");
        // The real-time read goes first.
        let io = ios(&mut s);
        assert_eq!(io.len(), 1);
        assert!(matches!(io[0].class, IoClass::Read { .. }));
        read_done(&mut s, at(280), io[0]);
        // Nothing real-time is due this cycle: a full 1 MiB chunk fits in the 720 ms left.
        let io = ios(&mut s);
        assert_eq!(io.len(), 1);
        assert_eq!(
            io[0].class,
            IoClass::Nrt { id: NrtId(7), kind: NrtKind::Read, offset: Bytes(0) }
        );
        assert_eq!((io[0].len, io[0].deadline), (MIB, at(1000)));
        s.handle_nrt_done(
            at(560),
            NrtDone { id: NrtId(7), disk: DiskId(0), offset: Bytes(0), result: Ok(()) },
        );
        // 440 ms left: another full chunk (277 ms on the min curve).
        let io = ios(&mut s);
        assert_eq!(io[0].len, MIB);
        s.handle_nrt_done(
            at(840),
            NrtDone { id: NrtId(7), disk: DiskId(0), offset: MIB, result: Ok(()) },
        );
        // 160 ms left: the chunk is cut to what the min curve says fits (27 ms + len / 4 MiB/s).
        let io = ios(&mut s);
        let t = s.admission().estimate(DiskId(0), Direction::Read, io[0].len).unwrap();
        assert!(t <= Duration::from_millis(160) && io[0].len < MIB, "{:?} takes {t:?}", io[0].len);
        assert!(io[0].len > Bytes::kib(400), "{:?}", io[0].len);
        assert_eq!(io[0].len.0 % 4096, 0);
        let len = io[0].len;
        s.handle_nrt_done(
            at(990),
            NrtDone { id: NrtId(7), disk: DiskId(0), offset: Bytes::mib(2), result: Ok(()) },
        );
        // 10 ms left: nothing fits; the next chunk waits for the next cycle.
        assert!(ios(&mut s).is_empty());
        s.handle_timeout(at(1000));
        let io = ios(&mut s);
        assert!(
            matches!(io[0].class, IoClass::Nrt { offset, .. } if offset == Bytes::mib(2) + len)
        );
        let _ = events(&mut s);
        // Finish the rest.
        let mut off = (Bytes::mib(2) + len).0;
        let mut io = io;
        let mut now = 1000;
        while let Some(x) = io.pop() {
            now += 300;
            off += x.len.0;
            let IoClass::Nrt { offset, .. } = x.class else { continue };
            s.handle_nrt_done(
                at(now),
                NrtDone { id: NrtId(7), disk: DiskId(0), offset, result: Ok(()) },
            );
            io = ios(&mut s)
                .into_iter()
                .filter(|i| matches!(i.class, IoClass::Nrt { .. }))
                .collect();
        }
        assert_eq!(off, 3 * MIB.0);
        let ev = events(&mut s);
        assert!(
            ev.iter().any(|e| matches!(e, CycleEvent::NrtDone { id: NrtId(7), result: Ok(()) }))
        );
        assert_eq!(s.stats().nrt_bytes, 3 * MIB.0);
    }

    #[test]
    fn admission_refuses_with_numbers_and_close_frees() {
        let mut s = sched(AdmissionPolicy::Aggressive, 1, CycleConfig::default());
        let p = plan(1, &[0; 4], 1000);
        // 8 Mb/s = 1 MiB/s → 0.95 blocks per cycle · 0.26 s: three fit in 0.9 s, not four.
        for id in 0..3 {
            assert!(open(&mut s, id, &p, 8_000_000).is_admit());
        }
        let Decision::Reject(Refusal::Bandwidth(o)) = open(&mut s, 3, &p, 8_000_000) else {
            panic!()
        };
        assert_eq!(o.disks[0].disk, DiskId(0));
        assert!(o.disks[0].needed > o.disks[0].available);
        assert_eq!(open(&mut s, 0, &p, 1), Decision::Reject(Refusal::DuplicateStream));
        s.handle_close(at(0), StreamId(0));
        assert!(open(&mut s, 3, &p, 8_000_000).is_admit());
        assert_eq!((s.stats().admitted, s.stats().rejected), (4, 2));
    }

    #[test]
    fn a_stalled_recording_gives_its_reservation_back_and_asks_again() {
        let mut s = sched(AdmissionPolicy::Aggressive, 1, CycleConfig::default());
        let p = plan(1, &[0; 4], 1000);
        let rec = OpenRecord {
            stream: StreamId(9),
            object: ObjectId(9),
            avg_bitrate: BitRate(16_000_000),
            peak_bitrate: BitRate(16_000_000),
            block_size: MIB,
        };
        assert!(s.handle_open_record(at(0), rec).is_admit());
        // 8 Mb/s plays: one fits beside the 16 Mb/s recording, not two.
        assert!(open(&mut s, 1, &p, 8_000_000).is_admit());
        assert!(!open(&mut s, 2, &p, 8_000_000).is_admit());
        // The recording stalls: its room is free for others.
        assert!(s.handle_suspend_record(at(1), StreamId(9)));
        assert!(!s.handle_suspend_record(at(1), StreamId(1)), "a play is not a recording");
        assert!(open(&mut s, 2, &p, 8_000_000).is_admit());
        // It sends again: no room any more, refused (the caller ends it); once room is made,
        // admitted again.
        assert!(!s.handle_resume_record(at(2), rec).unwrap().is_admit());
        s.handle_close(at(3), StreamId(2));
        assert!(s.handle_resume_record(at(3), rec).unwrap().is_admit());
        assert_eq!(s.handle_resume_record(at(3), OpenRecord { stream: StreamId(1), ..rec }), None);
    }

    #[test]
    fn trailing_streams_share_reads_through_the_cache() {
        let mut s = sched(AdmissionPolicy::Off, 1, CycleConfig::default());
        let p = plan(1, &[0; 3], 10_000);
        let _ = open(&mut s, 1, &p, 1);
        let _ = open(&mut s, 2, &p, 1);
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        s.handle_start(at(0), StreamId(2), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let io = ios(&mut s);
        assert_eq!(io.len(), 1);
        read_done(&mut s, at(10), io[0]);
        assert_eq!(delivered(&events(&mut s)), vec![(1, 0), (2, 0)]);
        assert!(ios(&mut s).is_empty(), "one read for both streams");
        let st = s.stats().cache;
        assert_eq!((st.bytes_from_disk, st.bytes_from_cache), (MIB.0, MIB.0));
    }

    #[test]
    fn failed_read_stops_the_stream() {
        let mut s = sched(AdmissionPolicy::Off, 1, CycleConfig::default());
        let p = plan(1, &[0; 3], 10_000);
        let _ = open(&mut s, 1, &p, 1);
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let io = ios(&mut s);
        let IoClass::Read { key } = io[0].class else { panic!() };
        s.handle_read_done(
            at(5),
            ReadDone {
                disk: DiskId(0),
                key,
                result: Err(IoFailure::new(IoFailureKind::Corrupt, "checksum")),
            },
        );
        let ev = events(&mut s);
        assert!(
            matches!(&ev[..], [CycleEvent::ReadFailed { error, .. }] if error.context() == "checksum")
        );
        assert_eq!(s.stats().failed_reads, 1);
        assert_eq!(s.cache().refs(key), 0);
    }

    #[test]
    fn recorded_blocks_are_due_by_the_end_of_the_next_cycle() {
        let mut s = sched(AdmissionPolicy::Aggressive, 2, CycleConfig::default());
        let r = OpenRecord {
            stream: StreamId(5),
            object: ObjectId(9),
            avg_bitrate: BitRate(8_000_000),
            peak_bitrate: BitRate(8_000_000),
            block_size: MIB,
        };
        assert!(s.handle_open_record(at(0), r).is_admit());
        let key = BlockKey::new(ObjectId(9), BlockIndex(0));
        assert!(s.handle_record_block(
            at(300),
            StreamId(5),
            RecordBlock { key, disk: DiskId(1), len: MIB }
        ));
        assert!(!s.handle_record_block(
            at(300),
            StreamId(6),
            RecordBlock { key, disk: DiskId(1), len: MIB }
        ));
        let io = ios(&mut s);
        assert_eq!(io[0].class, IoClass::Write { stream: StreamId(5), key });
        assert_eq!(io[0].deadline, at(2000));
        s.handle_write_done(at(1300), WriteDone { disk: DiskId(1), key, result: Ok(()) });
        let ev = events(&mut s);
        assert!(ev.iter().any(|e| matches!(e, CycleEvent::Written { stream: StreamId(5), .. })));
        assert_eq!(s.stream_stats(StreamId(5)).unwrap().written, 1);
        // A write still pending at its deadline is a miss.
        let key1 = BlockKey::new(ObjectId(9), BlockIndex(1));
        assert!(s.handle_record_block(
            at(1500),
            StreamId(5),
            RecordBlock { key: key1, disk: DiskId(0), len: MIB }
        ));
        s.handle_timeout(at(3000) + Duration::from_nanos(1));
        assert_eq!(s.stats().missed_write_deadlines, 1);
    }

    #[test]
    fn position_order_serves_urgent_reads_first_then_keys() {
        let config = CycleConfig { order: CycleOrder::Position, ..CycleConfig::default() };
        let mut s = sched(AdmissionPolicy::Off, 1, config);
        // Stream 2's object has the smaller keys but later deadlines.
        let late = plan(1, &[0; 6], 600);
        let soon = plan(2, &[0; 6], 300);
        let _ = open(&mut s, 1, &late, 1);
        let _ = open(&mut s, 2, &soon, 1);
        s.handle_start(at(0), StreamId(2), RunId(1), BlockIndex(0), MediaTime::ZERO);
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let mut order = Vec::new();
        let mut now = 0;
        while let Some(io) = ios(&mut s).pop() {
            now += 10;
            let IoClass::Read { key } = io.class else { break };
            order.push((key.object.0, key.index.0, io.deadline < at(1000)));
            read_done(&mut s, at(now), io);
        }
        // Reads due in this cycle go first by deadline, the rest by key.
        let split = order.iter().position(|o| !o.2).unwrap_or(order.len());
        assert!(order[..split].iter().all(|o| o.2));
        let rest: Vec<_> = order[split..].iter().map(|o| (o.0, o.1)).collect();
        let mut sorted = rest.clone();
        sorted.sort_unstable();
        assert_eq!(rest, sorted, "{order:?}");
        let _ = SEC;
    }

    /// Blocks of 1 MiB, each lasting `block_ms`, with copies on the given disks (replica 0
    /// first).
    fn plan_copies(object: u64, copies: &[&[u16]], block_ms: u64) -> Arc<ObjectPlan> {
        let mut p = ObjectPlan::clone(&plan(object, &vec![0; copies.len()], block_ms));
        for (b, c) in p.blocks.iter_mut().zip(copies) {
            let mut r = Replicas::single(DiskId(c[0]));
            for &d in &c[1..] {
                assert!(r.push(DiskId(d)));
            }
            b.disk = r.primary();
            b.copies = r;
        }
        Arc::new(p)
    }

    fn fail(s: &mut CycleScheduler<u32>, now: Instant, io: CycleIo, error: &str) {
        let IoClass::Read { key } = io.class else { panic!("not a read: {io:?}") };
        s.handle_read_done(
            now,
            ReadDone { disk: io.disk, key, result: Err(IoFailure::new(IoFailureKind::Os, error)) },
        );
    }

    /// In virtual time: a read that fails on replica 0 is re-issued at once to the next copy
    /// with the same deadline, the stream gets the block before it is due and keeps playing
    /// (no ReadFailed, no missed deadline); the bad copy is avoided by later reads of the block
    /// (another stream) until it is repaired; other blocks still read from replica 0.
    #[test]
    fn a_failed_read_fails_over_to_the_next_copy_within_the_deadline() {
        let mut s = sched(AdmissionPolicy::Off, 2, CycleConfig::default());
        let p = plan_copies(1, &[&[0, 1], &[0, 1], &[1, 0], &[0, 1]], 500);
        let _ = open(&mut s, 1, &p, 1);
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        // Block 0 (due at once) first, on disk 0.
        let mut io = ios(&mut s);
        assert_eq!(
            (io[0].disk, io[0].class),
            (DiskId(0), IoClass::Read { key: p.key(BlockIndex(0)) })
        );
        read_done(&mut s, at(10), io.remove(0));
        let _ = events(&mut s);
        // The rest of the double buffer; block 1's read (disk 0) fails.
        io.extend(ios(&mut s));
        let i1 =
            io.iter().position(|x| x.class == IoClass::Read { key: p.key(BlockIndex(1)) }).unwrap();
        let failed = io.remove(i1);
        assert_eq!(failed.disk, DiskId(0));
        fail(&mut s, at(20), failed, "block 1/1: checksum mismatch");
        let ev = events(&mut s);
        assert!(
            matches!(&ev[..], [CycleEvent::Failover { key, failed: DiskId(0), next: DiskId(1), error }]
                if *key == p.key(BlockIndex(1)) && error.context().contains("checksum")),
            "{ev:?}"
        );
        assert_eq!((s.stats().failovers, s.stats().failed_reads, s.bad_copies()), (1, 1, 1));
        // The failover read: block 1 on disk 1, with the deadline the failed read had, next on
        // disk 1 (EDF) once the read in flight there, if any, is done.
        let mut outstanding: Vec<CycleIo> = io.into_iter().chain(ios(&mut s)).collect();
        let is_retry = |x: &CycleIo| x.class == IoClass::Read { key: p.key(BlockIndex(1)) };
        if !outstanding.iter().any(is_retry) {
            let busy = outstanding.iter().position(|x| x.disk == DiskId(1)).unwrap();
            read_done(&mut s, at(25), outstanding.remove(busy));
            outstanding.extend(ios(&mut s));
        }
        let retry: Vec<CycleIo> = outstanding.iter().copied().filter(is_retry).collect();
        assert_eq!(retry.len(), 1, "{retry:?}");
        for other in outstanding.iter().filter(|x| !is_retry(x)) {
            read_done(&mut s, at(26), *other);
        }
        read_done(&mut s, at(30), retry[0]);
        // Block 1 arrives at 30 ms, due at 520 ms: blocks 1 to 3 are delivered in order.
        assert!(failed.deadline > at(30));
        assert_eq!(delivered(&events(&mut s)), vec![(1, 1), (1, 2), (1, 3)]);
        let now = 2100;
        for i in 0..4 {
            s.handle_block_done(at(now), StreamId(1), RunId(1), BlockIndex(i));
        }
        s.handle_timeout(at(now));
        let ev = events(&mut s);
        assert!(!ev.iter().any(|e| matches!(e, CycleEvent::ReadFailed { .. })), "{ev:?}");
        assert_eq!(s.stats().missed_deadlines, 0);
        assert_eq!(s.stats().failovers, 1);
        // A second stream (the cache emptied) reads block 1 from the good copy directly.
        s.handle_close(at(now), StreamId(1));
        s.purge_object(ObjectId(1));
        let _ = open(&mut s, 2, &p, 1);
        s.handle_start(
            at(now),
            StreamId(2),
            RunId(1),
            BlockIndex(1),
            MediaTime::from_nanos(500_000_000),
        );
        let io = ios(&mut s);
        let first = io.iter().find(|x| is_retry(x)).unwrap();
        assert_eq!(first.disk, DiskId(1), "{io:?}");
        s.handle_close(at(now + 5), StreamId(2));
        for x in io {
            read_done(&mut s, at(now + 5), x);
        }
        let _ = events(&mut s);
        // Repaired: replica 0 is read again.
        s.handle_copy_repaired(at(now + 6), p.key(BlockIndex(1)), DiskId(0));
        assert_eq!(s.bad_copies(), 0);
        s.purge_object(ObjectId(1));
        let _ = open(&mut s, 3, &p, 1);
        s.handle_start(
            at(now + 7),
            StreamId(3),
            RunId(1),
            BlockIndex(1),
            MediaTime::from_nanos(500_000_000),
        );
        let io = ios(&mut s);
        assert_eq!(io.iter().find(|x| is_retry(x)).unwrap().disk, DiskId(0), "{io:?}");
    }

    /// When every copy fails, the stream stops as without replication.
    #[test]
    fn a_block_with_no_good_copy_ends_the_stream() {
        let mut s = sched(AdmissionPolicy::Off, 3, CycleConfig::default());
        let p = plan_copies(1, &[&[2, 0, 1], &[0, 1, 2]], 10_000);
        let _ = open(&mut s, 1, &p, 1);
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let mut disks = Vec::new();
        for t in 1..=3 {
            let io = ios(&mut s);
            let io = io
                .into_iter()
                .find(|x| x.class == IoClass::Read { key: p.key(BlockIndex(0)) })
                .unwrap();
            disks.push(io.disk);
            fail(&mut s, at(t), io, "missing");
            let ev = events(&mut s);
            if t < 3 {
                assert!(matches!(ev[..], [CycleEvent::Failover { .. }]), "{ev:?}");
            } else {
                assert!(
                    matches!(&ev[..], [CycleEvent::ReadFailed { error, .. }] if error.context() == "missing"),
                    "{ev:?}"
                );
            }
        }
        assert_eq!(disks, vec![DiskId(2), DiskId(0), DiskId(1)], "replica order");
        assert_eq!((s.stats().failovers, s.stats().failed_reads), (2, 3));
        assert_eq!(s.cache().refs(p.key(BlockIndex(0))), 0);
    }

    /// Admission follows the reads: after a failover the block is charged to the disk it is
    /// read from, and back to replica 0 after the repair.
    #[test]
    fn admission_charges_the_copy_read_after_a_failover() {
        let mut s = sched(AdmissionPolicy::Aggressive, 2, CycleConfig::default());
        // Every block on disk 0, copies on disk 1.
        let copies: Vec<&[u16]> = vec![&[0, 1]; 8];
        let p = plan_copies(1, &copies, 1000);
        assert!(open(&mut s, 1, &p, 8_000_000).is_admit());
        let util = |s: &CycleScheduler<u32>, d| s.admission().utilisation(DiskId(d)).unwrap();
        let (u0, u1) = (util(&s, 0), util(&s, 1));
        assert!(u0 > 0.0 && u1 == 0.0, "{u0} {u1}");
        s.handle_start(at(0), StreamId(1), RunId(1), BlockIndex(0), MediaTime::ZERO);
        let io = ios(&mut s);
        fail(&mut s, at(5), io[0], "io error");
        assert!(util(&s, 1) > 0.0, "the failed-over block is charged to disk 1");
        s.handle_copy_repaired(at(6), p.key(BlockIndex(0)), DiskId(0));
        assert!((util(&s, 0) - u0).abs() < 1e-12 && util(&s, 1) == 0.0);
    }

    /// A cluster share: a failed read of a block on this node's disk fails over to a copy on
    /// this node if there is one, else to the copy on another node's disk (read through its
    /// owner); blocks whose replica 0 is another node's stay that node's to send.
    #[test]
    fn a_cluster_share_fails_over_to_a_local_copy_first_then_a_remote_one() {
        let mut s = sched(AdmissionPolicy::Off, 2, CycleConfig::default());
        // Disks 0 and 1 are this node's, 2 another's.
        let p = plan_copies(1, &[&[0, 2, 1], &[0, 2], &[2, 0]], 300);
        let local: Arc<BTreeSet<DiskId>> = Arc::new([DiskId(0), DiskId(1)].into());
        let req = OpenStream {
            stream: StreamId(1),
            plan: Arc::clone(&p),
            avg_bitrate: BitRate(1),
            peak_bitrate: BitRate(1),
            local: Some(local),
        };
        assert!(s.handle_open(at(0), req).is_admit());
        let anchor = Anchor { wall: at(100), media: MediaTime::ZERO };
        s.handle_start_pinned(at(0), StreamId(1), RunId(1), BlockIndex(0), anchor, Pace::NOMINAL);
        let io = ios(&mut s);
        // Block 2's replica 0 is the other node's: not read here.
        assert!(io.iter().all(|x| io_index(x) < 2), "{io:?}");
        let b0 = *io.iter().find(|x| io_index(x) == 0).unwrap();
        fail(&mut s, at(1), b0, "checksum");
        let ev = events(&mut s);
        assert!(
            matches!(ev[..], [CycleEvent::Failover { failed: DiskId(0), next: DiskId(1), .. }]),
            "a local copy first: {ev:?}"
        );
        // Block 1 has no other local copy: the remote one.
        let b1 = io.into_iter().find(|x| io_index(x) == 1);
        let b1 = b1.or_else(|| ios(&mut s).into_iter().find(|x| io_index(x) == 1)).unwrap();
        fail(&mut s, at(2), b1, "missing");
        let ev = events(&mut s);
        assert!(
            matches!(ev[..], [CycleEvent::Failover { failed: DiskId(0), next: DiskId(2), .. }]),
            "{ev:?}"
        );
        let remote = ios(&mut s).into_iter().find(|x| x.disk == DiskId(2)).unwrap();
        assert_eq!(io_index(&remote), 1);
        read_done(&mut s, at(3), remote);
    }
}
