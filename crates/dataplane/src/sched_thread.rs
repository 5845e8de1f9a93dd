//! The scheduler thread: the one owner of the XTREAM [`CycleScheduler`] and its block cache.
//!
//! Everything that touches the scheduler goes through [`SchedCommand`] on one channel: admission
//! and starts from the session manager, recordings' blocks from the recorder, "block done" from
//! the sender, completions from the disk threads, copies and plan changes from the reorganiser.
//! The thread issues the IOs the scheduler asks for to the per-disk [`IoWorker`]s and forwards
//! delivered blocks to the sender thread and written blocks to their recorder. HTTP delivery's
//! block reads ([`SchedCommand::HttpRead`], `isochron_http::media`) are answered from the block
//! cache when an RTSP stream has the block in memory, and otherwise run as non-real-time reads
//! in the disks' reserved share, their completions coming back here ([`SchedCommand::HttpReadDone`])
//! to be handed to the waiting request. No lock guards
//! the cache or the cycle state: only this thread sees them (moonfire-nvr's `IoCommand`
//! pattern, rust-analyzer's closed event enum). It wakes at every cycle boundary
//! ([`CycleScheduler::poll_timeout`]). Since every admission is decided here, this thread also
//! keeps the [`AdmissionLog`] of recent decisions, and counts each disk's completed reads.
//!
//! With replication (`store.replication` K > 1) a read that fails fails over to the block's next
//! copy: for streams in the scheduler core (`CycleScheduler`'s failover), for HTTP delivery here
//! (the request carries the block's copies and the next one is read in the non-real-time share).
//! Either way the bad copy is reported up ([`SchedEvent::CopyFailed`]) to be repaired, and
//! [`SchedCommand::CopyRepaired`] says when it is.
//!
//! Blocks go down to the sender as [`SenderCommand::Block`]; what goes up (a stream's block could
//! not be read, a copy to repair) is a [`SchedEvent`] handed to the [`SchedSink`] the thread was
//! built with, so the thread names no command type of the session manager's or the
//! reorganiser's.

use std::collections::{BTreeSet, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use isochron_base::{
    BlockIndex, BlockKey, DiskId, Instant, IoFailure, IoFailureKind, ObjectId, Pace, Replicas,
    RunId, StreamId,
};
use isochron_diskio::{
    IoCommand, IoStats, IoWorker, ReadDone as DiskReadDone, WriteDone as DiskWriteDone,
};
use isochron_sched::admission::Decision;
use isochron_sched::cycle::{
    CycleEvent, CycleReport, CycleScheduler, CycleStats, IoClass, OpenRecord, RecordBlock,
    StreamStats, WriteDone,
};
use isochron_sched::profile::DiskProfile;
use isochron_sched::{Anchor, ObjectPlan, OpenStream, ReadDone, ReadOp};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, warn};

use crate::admission_log::{AdmissionEntry, AdmissionKind, AdmissionLog, AdmissionRequest};
use crate::clock::Clock;
use crate::sender::{SenderCommand, SharedBlock};

/// What a recording hears back about its blocks.
#[derive(Debug)]
pub enum RecordEvent {
    /// A copy of a block is durably on a disk (with K copies, one event per disk).
    Written(BlockKey, DiskId),
    /// A block could not be written.
    Failed(BlockKey, IoFailure),
}

/// What the scheduler thread tells the rest of the server, through its [`SchedSink`].
#[derive(Debug)]
pub enum SchedEvent {
    /// A block of a playing stream could not be read from any copy: the stream cannot go on.
    ReadFailed {
        /// The stream.
        stream: StreamId,
        /// Why.
        error: IoFailure,
    },
    /// A copy of a block could not be read (a stream's or HTTP delivery's read failed over to
    /// another copy): it wants repairing from a good copy.
    CopyFailed {
        /// The block.
        key: BlockKey,
        /// The disk of the bad copy.
        disk: DiskId,
        /// Why it failed.
        error: IoFailure,
    },
}

/// Where the scheduler thread's events go. It is called on the scheduler thread, so it should
/// only hand the event on (a channel send), never block.
pub type SchedSink = Box<dyn Fn(SchedEvent) + Send>;

/// Reads block `key` on another cluster node's disk `disk` through that node (a failover to a
/// copy this node does not hold) and completes with [`SchedCommand::ReadDone`] carrying `tag`.
/// Called on the scheduler thread: it must hand the read to another thread and return at once.
pub type RemoteRead = Box<dyn Fn(DiskId, BlockKey, u64) + Send>;

/// Where a stream's admission decision goes ([`SchedCommand::Open`]): called once, on the
/// scheduler thread, so it should only hand the decision on (a channel send), never block. The
/// asker's own sink, so the answer reaches it in one step, with no reply channel to wait on.
pub struct DecisionSink(Box<dyn FnOnce(Decision) + Send>);

impl DecisionSink {
    /// A sink that calls `f` with the decision.
    pub fn new(f: impl FnOnce(Decision) + Send + 'static) -> Self {
        Self(Box::new(f))
    }

    fn send(self, decision: Decision) {
        (self.0)(decision);
    }
}

impl std::fmt::Debug for DecisionSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DecisionSink")
    }
}

/// Commands to the scheduler thread.
#[derive(Debug)]
pub enum SchedCommand {
    /// Admit a playing stream.
    Open {
        /// The request.
        req: OpenStream,
        /// The object's name, for the admission log.
        name: String,
        /// Where the decision goes.
        reply: DecisionSink,
    },
    /// Admit a recording; its blocks' fates go to `events`.
    OpenRecord {
        /// The request.
        req: OpenRecord,
        /// The object's name, for the admission log.
        name: String,
        /// Where written/failed notices go.
        events: mpsc::UnboundedSender<RecordEvent>,
        /// The decision.
        reply: oneshot::Sender<Decision>,
    },
    /// A recording's source stalled: give its reservation back
    /// ([`CycleScheduler::handle_suspend_record`]).
    SuspendRecord {
        /// The recording.
        stream: StreamId,
    },
    /// A suspended recording's source sends again: admit it anew (logged like its first
    /// admission); `None` if it is not a recording.
    ResumeRecord {
        /// Its request, as at its start.
        req: OpenRecord,
        /// The object's name, for the admission log.
        name: String,
        /// The decision.
        reply: oneshot::Sender<Option<Decision>>,
    },
    /// A recording's block, to be written to `disk` within the recording's guaranteed rate.
    RecordBlock {
        /// The recording.
        stream: StreamId,
        /// The disk its placement picks.
        disk: DiskId,
        /// The block.
        block: SharedBlock,
    },
    /// What the node asks of one stream's reads (start a run, take over or give back
    /// blocks, close).
    Read(ReadOp),
    /// A stream's clock was re-anchored at a new pace (MTFC): read ahead on the same clock.
    Pace {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The pacer's new anchor.
        anchor: Anchor,
        /// The pace.
        pace: Pace,
    },
    /// Stop reading for a stream.
    Stop {
        /// The stream.
        stream: StreamId,
    },
    /// The sender finished a block.
    BlockDone {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: RunId,
        /// The block.
        index: BlockIndex,
    },
    /// A disk read finished.
    ReadDone(DiskReadDone),
    /// A recording's block write finished.
    WriteDone(DiskWriteDone),
    /// Drop an object's cached blocks.
    Purge {
        /// The object.
        object: ObjectId,
    },
    /// A disk joined: take over its IO thread; admission learns its profile.
    AttachDisk {
        /// The disk.
        disk: DiskId,
        /// Its IO thread.
        worker: IoWorker,
        /// Its profile for admission (`None`: unprofiled, unlimited).
        profile: DiskProfile,
    },
    /// A disk was retired: stop its IO thread.
    DetachDisk {
        /// The disk.
        disk: DiskId,
    },
    /// Non-real-time IO (a reorganisation's copy) for a disk's IO thread, which runs it in its
    /// non-real-time share; the completion goes to the reorganiser.
    Nrt {
        /// The disk.
        disk: DiskId,
        /// The command (`NrtRead` or `NrtWrite`).
        cmd: IoCommand,
    },
    /// A block for HTTP delivery (`isochron_http::media`): answered from the cache if it is
    /// there, otherwise read as non-real-time IO on its first copy's disk (served only in the
    /// disk's non-real-time share, after the streams' reads), failing over to the next copy;
    /// the block or the error goes to `reply`.
    HttpRead {
        /// The disks of the block's copies, replica 0 first (the object's plan).
        copies: Replicas,
        /// The block.
        key: BlockKey,
        /// Where the block goes.
        reply: oneshot::Sender<Result<SharedBlock, IoFailure>>,
    },
    /// A non-real-time read issued for [`SchedCommand::HttpRead`] finished.
    HttpReadDone(DiskReadDone),
    /// A bad copy reported by [`SchedEvent::CopyFailed`] was repaired: read it again.
    CopyRepaired {
        /// The block.
        key: BlockKey,
        /// The disk of the repaired copy.
        disk: DiskId,
    },
    /// An object's blocks moved: running streams use the new plan.
    UpdatePlan {
        /// The new plan.
        plan: Arc<ObjectPlan>,
    },
    /// A growing object was committed further: streams playing a prefix of it read on
    /// ([`CycleScheduler::handle_plan_grown`]).
    GrowPlan {
        /// The longer plan.
        plan: Arc<ObjectPlan>,
    },
    /// An object the server can play: keep its first block in memory if it is on one of this
    /// node's disks ([`CycleScheduler::handle_resident`]), so that a start from its beginning
    /// waits for no disk.
    KeepResident {
        /// Its plan.
        plan: Arc<ObjectPlan>,
    },
    /// Replies once every read issued before this command has completed.
    Drain {
        /// The reply.
        reply: oneshot::Sender<()>,
    },
    /// Report counters.
    Stats {
        /// The reply.
        reply: oneshot::Sender<SchedSnapshot>,
    },
    /// Report the last `limit` admission decisions, newest first.
    Admissions {
        /// How many.
        limit: usize,
        /// The reply.
        reply: oneshot::Sender<Vec<AdmissionEntry>>,
    },
    /// Exit the thread.
    Shutdown,
}

/// Scheduler counters and gauges.
#[derive(Clone, Debug, Default)]
pub struct SchedSnapshot {
    /// Counters.
    pub stats: CycleStats,
    /// Streams open (playing and recording).
    pub streams: usize,
    /// Each attached disk's queue and counters, by disk id.
    pub disks: Vec<DiskSnapshot>,
    /// Bytes in the cache.
    pub cache_bytes: u64,
    /// The last finished cycle.
    pub last_cycle: CycleReport,
    /// Admission's predicted utilisation of each disk's real-time share, 0..1.
    pub utilisation: Vec<(DiskId, f64)>,
    /// Each open stream's counters (missed deadlines, blocks delivered or written).
    pub per_stream: HashMap<StreamId, StreamStats>,
    /// HTTP delivery's block reads.
    pub http: HttpReadStats,
    /// Admission refusals since start, by kind ([`isochron_sched::admission::Refusal::kind`]).
    pub rejects_by_reason: Vec<(&'static str, u64)>,
    /// The admission policy's name.
    pub admission_policy: &'static str,
    /// Copies the scheduler avoids because a read of them failed, until they are repaired.
    pub bad_copies: usize,
}

/// Counters of HTTP delivery's block reads ([`SchedCommand::HttpRead`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct HttpReadStats {
    /// Blocks requested.
    pub requests: u64,
    /// Requests answered from the block cache.
    pub cache_hits: u64,
    /// Non-real-time disk reads issued.
    pub disk_reads: u64,
    /// Disk reads that failed (each copy's failure).
    pub failed: u64,
    /// Failed reads re-issued to the block's next copy.
    pub failovers: u64,
    /// Block bytes handed to HTTP requests.
    pub bytes: u64,
    /// Disk reads in flight now.
    pub in_flight: u64,
}

/// One disk as the scheduler thread sees it.
#[derive(Clone, Copy, Debug, Default)]
pub struct DiskSnapshot {
    /// The disk.
    pub disk: DiskId,
    /// Real-time IOs the scheduler has queued or in flight on it.
    pub queue: usize,
    /// Real-time block reads completed successfully.
    pub reads: u64,
    /// Bytes of those reads (the disk's share of `B_disk`'s reads, before cache sharing).
    pub read_bytes: u64,
    /// The disk thread's own counters (busy time, non-real-time copies, errors).
    pub io: IoStats,
}

/// An HTTP delivery read in flight: where its answer goes and which copies are left to try.
struct HttpPending {
    reply: oneshot::Sender<Result<SharedBlock, IoFailure>>,
    key: BlockKey,
    copies: Replicas,
    /// The index in `copies` of the copy being read.
    at: usize,
    /// What the copies tried so far said.
    errors: Vec<IoFailure>,
}

/// Real-time reads completed per disk, counted where the completions arrive.
#[derive(Clone, Copy, Debug, Default)]
struct DiskReads {
    reads: u64,
    bytes: u64,
}

/// A recording's admission request as the admission log records it (at its start and when it
/// asks again after a stall).
fn record_request<'a>(
    s: &CycleScheduler<SharedBlock>,
    req: &OpenRecord,
    name: &'a str,
) -> AdmissionRequest<'a> {
    AdmissionRequest {
        stream: req.stream,
        object: name,
        kind: AdmissionKind::Record,
        avg_bitrate: req.avg_bitrate,
        peak_bitrate: req.peak_bitrate,
        uses_peak: s.admission().config().policy.uses_peak_rate(),
    }
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Everything the thread needs.
pub struct SchedThread {
    /// The server's clock.
    pub clock: Clock,
    /// The scheduler and its block cache, owned by the thread from now on.
    pub scheduler: CycleScheduler<SharedBlock>,
    /// The thread's commands.
    pub rx: Receiver<SchedCommand>,
    /// Each disk's IO thread.
    pub workers: HashMap<DiskId, IoWorker>,
    /// The sender thread, which gets the blocks read.
    pub sender: crate::shards::Senders,
    /// Where failed reads of playing streams are reported.
    pub on_event: SchedSink,
    /// A cluster node's reads of copies on other nodes' disks (`None`: every disk is local).
    pub remote: Option<RemoteRead>,
}

impl SchedThread {
    /// Runs until `Shutdown` or until every command sender is gone; then stops the disk threads.
    pub fn run(self) {
        SchedLoop::new(self).run();
    }
}

/// The scheduler thread's state between two commands: the core, the disks' IO threads, and what
/// is in flight on them. One method per command; after each, the loop lets the core act on the
/// time ([`CycleScheduler::handle_timeout`]), hands the IO it issued to the disks, passes the
/// barriers whose reads completed, and forwards the core's events.
struct SchedLoop {
    t: SchedThread,
    /// The last IO tag given out (reads, writes, HTTP reads; below the reorganiser's space).
    tag: u64,
    /// Reads handed to IO threads and not completed.
    outstanding: BTreeSet<u64>,
    /// Barriers ([`SchedCommand::Drain`]) waiting for every read up to their tag.
    drains: Vec<(u64, oneshot::Sender<()>)>,
    /// Recordings' blocks waiting to be written (one entry per copy).
    pending_writes: HashMap<(BlockKey, DiskId), SharedBlock>,
    /// Where each recording's notices go.
    recorders: HashMap<StreamId, mpsc::UnboundedSender<RecordEvent>>,
    last_cycle: CycleReport,
    /// HTTP reads on the disks' non-real-time share, by tag, and their counters.
    http_reads: HashMap<u64, HttpPending>,
    http: HttpReadStats,
    admissions: AdmissionLog,
    disk_reads: HashMap<DiskId, DiskReads>,
}

impl SchedLoop {
    fn new(t: SchedThread) -> Self {
        Self {
            t,
            tag: 0,
            outstanding: BTreeSet::new(),
            drains: Vec::new(),
            pending_writes: HashMap::new(),
            recorders: HashMap::new(),
            last_cycle: CycleReport::default(),
            http_reads: HashMap::new(),
            http: HttpReadStats::default(),
            admissions: AdmissionLog::default(),
            disk_reads: HashMap::new(),
        }
    }

    fn run(mut self) {
        loop {
            let now = self.t.clock.now();
            let cmd = match self.t.scheduler.poll_timeout() {
                Some(t) => match self.t.rx.recv_timeout(t - now) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match self.t.rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => break,
                },
            };
            let now = self.t.clock.now();
            if let Some(cmd) = cmd
                && self.handle(now, cmd).is_break()
            {
                break;
            }
            self.t.scheduler.handle_timeout(now);
            self.issue_io(now);
            // A barrier recorded at tag `at` is passed once no read with a tag ≤ `at` is
            // outstanding.
            let oldest = self.outstanding.first().copied().unwrap_or(u64::MAX);
            for (_, reply) in self.drains.extract_if(.., |(at, _)| oldest > *at) {
                let _ = reply.send(());
            }
            self.forward_events();
        }
        for (_, w) in self.t.workers.drain() {
            w.shutdown();
        }
    }

    /// One command; `Break` on `Shutdown`.
    fn handle(&mut self, now: Instant, cmd: SchedCommand) -> ControlFlow<()> {
        let s = &mut self.t.scheduler;
        match cmd {
            SchedCommand::Open { req, name, reply } => {
                let asked = AdmissionRequest {
                    stream: req.stream,
                    object: &name,
                    kind: AdmissionKind::Play,
                    avg_bitrate: req.avg_bitrate,
                    peak_bitrate: req.peak_bitrate,
                    uses_peak: s.admission().config().policy.uses_peak_rate(),
                };
                let decision = s.handle_open(now, req);
                self.admissions.record(unix_ms(), &asked, &decision);
                reply.send(decision);
            }
            SchedCommand::OpenRecord { req, name, events, reply } => {
                let asked = record_request(s, &req, &name);
                let decision = s.handle_open_record(now, req);
                self.admissions.record(unix_ms(), &asked, &decision);
                if decision.is_admit() {
                    self.recorders.insert(req.stream, events);
                }
                let _ = reply.send(decision);
            }
            SchedCommand::SuspendRecord { stream } => {
                let _ = s.handle_suspend_record(now, stream);
            }
            SchedCommand::ResumeRecord { req, name, reply } => {
                let asked = record_request(s, &req, &name);
                let decision = s.handle_resume_record(now, req);
                if let Some(d) = &decision {
                    self.admissions.record(unix_ms(), &asked, d);
                }
                let _ = reply.send(decision);
            }
            SchedCommand::RecordBlock { stream, disk, block } => {
                self.record_block(now, stream, disk, block);
            }
            SchedCommand::Read(op) => self.read_op(now, op),
            SchedCommand::Pace { stream, run, anchor, pace } => {
                s.handle_pace(now, stream, run, anchor, pace);
            }
            SchedCommand::Stop { stream } => s.handle_stop(now, stream),
            SchedCommand::BlockDone { stream, run, index } => {
                s.handle_block_done(now, stream, run, index);
            }
            SchedCommand::ReadDone(done) => self.read_done(now, done),
            SchedCommand::WriteDone(done) => {
                self.pending_writes.remove(&(done.key, done.disk));
                let result = done.result.map_err(IoFailure::from);
                s.handle_write_done(now, WriteDone { disk: done.disk, key: done.key, result });
            }
            SchedCommand::Purge { object } => s.purge_object(object),
            SchedCommand::AttachDisk { disk, worker, profile } => {
                s.handle_disk_profile(disk, profile);
                if let Some(old) = self.t.workers.insert(disk, worker) {
                    old.shutdown();
                }
            }
            SchedCommand::DetachDisk { disk } => {
                s.handle_disk_removed(disk);
                if let Some(w) = self.t.workers.remove(&disk) {
                    w.shutdown();
                }
            }
            SchedCommand::Nrt { disk, cmd } => match self.t.workers.get(&disk) {
                Some(w) => w.submit(cmd),
                None => warn!(%disk, "non-real-time IO for a disk with no IO thread"),
            },
            SchedCommand::HttpRead { copies, key, reply } => {
                self.http.requests += 1;
                if let Some(block) = s.cache().peek(key) {
                    self.http.cache_hits += 1;
                    self.http.bytes += block.as_bytes().len() as u64;
                    let _ = reply.send(Ok(Arc::clone(block)));
                } else {
                    self.http_read(HttpPending { reply, key, copies, at: 0, errors: Vec::new() });
                }
            }
            SchedCommand::HttpReadDone(done) => self.http_read_done(done),
            SchedCommand::CopyRepaired { key, disk } => s.handle_copy_repaired(now, key, disk),
            SchedCommand::UpdatePlan { plan } => s.handle_plan_update(plan),
            SchedCommand::GrowPlan { plan } => s.handle_plan_grown(now, plan),
            SchedCommand::KeepResident { plan } => {
                let local: BTreeSet<DiskId> = self.t.workers.keys().copied().collect();
                s.handle_resident(now, &plan, Some(&local));
            }
            SchedCommand::Drain { reply } => self.drains.push((self.tag, reply)),
            SchedCommand::Stats { reply } => {
                let _ = reply.send(self.snapshot());
            }
            SchedCommand::Admissions { limit, reply } => {
                let _ = reply.send(self.admissions.latest(limit));
            }
            SchedCommand::Shutdown => return ControlFlow::Break(()),
        }
        ControlFlow::Continue(())
    }

    /// Applies `op` to the scheduler (closing a stream also forgets its recorder's notices).
    fn read_op(&mut self, now: Instant, op: ReadOp) {
        let s = &mut self.t.scheduler;
        match op {
            ReadOp::Start { stream, run, from, media, pinned: None } => {
                s.handle_start(now, stream, run, from, media);
            }
            ReadOp::Start { stream, run, from, pinned: Some((anchor, pace)), .. } => {
                s.handle_start_pinned(now, stream, run, from, anchor, pace);
            }
            ReadOp::TakeOver { stream, run, blocks } => {
                s.handle_take_over(now, stream, run, &blocks)
            }
            ReadOp::GiveBack { stream, run, blocks } => {
                s.handle_give_back(now, stream, run, &blocks)
            }
            ReadOp::Close { stream } => {
                s.handle_close(now, stream);
                self.recorders.remove(&stream);
            }
        }
    }

    /// A recording's block, to be written by the core's schedule; refused (and the recording
    /// told) when the stream is not an open recording.
    fn record_block(&mut self, now: Instant, stream: StreamId, disk: DiskId, block: SharedBlock) {
        let key = block.header().key;
        let len = isochron_base::Bytes(block.as_bytes().len() as u64);
        if self.t.scheduler.handle_record_block(now, stream, RecordBlock { key, disk, len }) {
            self.pending_writes.insert((key, disk), block);
        } else if let Some(tx) = self.recorders.get(&stream) {
            let closed = IoFailure::new(IoFailureKind::Closed, "not an open recording");
            let _ = tx.send(RecordEvent::Failed(key, closed));
        }
    }

    /// A real-time read completed: counted per disk, and told to the core.
    fn read_done(&mut self, now: Instant, done: DiskReadDone) {
        self.outstanding.remove(&done.tag);
        if let Ok(block) = &done.result {
            let d = self.disk_reads.entry(done.disk).or_default();
            d.reads += 1;
            d.bytes += block.as_bytes().len() as u64;
        }
        let result = done.result.map_err(IoFailure::from);
        let done = ReadDone { disk: done.disk, key: done.key, result };
        self.t.scheduler.handle_read_done(now, done);
    }

    /// An HTTP delivery's read completed: answered, or failed over to the next copy (the bad
    /// copy reported for repair).
    fn http_read_done(&mut self, done: DiskReadDone) {
        self.outstanding.remove(&done.tag);
        let Some(mut pending) = self.http_reads.remove(&done.tag) else { return };
        match done.result {
            Ok(block) => {
                self.http.bytes += block.as_bytes().len() as u64;
                let _ = pending.reply.send(Ok(block));
            }
            Err(e) => {
                self.http.failed += 1;
                let error = IoFailure::from(e);
                let (key, disk) = (done.key, done.disk);
                (self.t.on_event)(SchedEvent::CopyFailed { key, disk, error: error.clone() });
                pending.errors.push(error);
                pending.at += 1;
                if pending.at < pending.copies.len() {
                    self.http.failovers += 1;
                }
                self.http_read(pending);
            }
        }
    }

    /// What [`SchedCommand::Stats`] answers.
    fn snapshot(&self) -> SchedSnapshot {
        let s = &self.t.scheduler;
        let mut disks: Vec<_> = self
            .t
            .workers
            .iter()
            .map(|(d, w)| {
                let r = self.disk_reads.get(d).copied().unwrap_or_default();
                DiskSnapshot {
                    disk: *d,
                    queue: s.disk_queue_len(*d),
                    reads: r.reads,
                    read_bytes: r.bytes,
                    io: w.stats(),
                }
            })
            .collect();
        disks.sort_unstable_by_key(|d| d.disk);
        let adm = s.admission();
        let utilisation = adm.disks().filter_map(|d| adm.utilisation(d).map(|u| (d, u))).collect();
        SchedSnapshot {
            stats: s.stats(),
            streams: s.stream_count(),
            disks,
            cache_bytes: s.cache().used().0,
            last_cycle: self.last_cycle,
            utilisation,
            per_stream: s.streams_stats().collect(),
            http: HttpReadStats { in_flight: self.http_reads.len() as u64, ..self.http },
            rejects_by_reason: self.admissions.rejects_by_reason(),
            admission_policy: adm.config().policy.as_str(),
            bad_copies: s.bad_copies(),
        }
    }

    /// Hands the IO the core issued to the disks' threads (or, for a copy on another node's
    /// disk, to [`SchedThread::remote`]); an IO for a disk with no thread fails at once.
    fn issue_io(&mut self, now: Instant) {
        while let Some(io) = self.t.scheduler.poll_io() {
            self.tag += 1;
            let tag = self.tag;
            let cmd = match io.class {
                IoClass::Read { key } => {
                    self.outstanding.insert(tag);
                    IoCommand::Read { key, tag }
                }
                IoClass::Write { key, .. } => match self.pending_writes.get(&(key, io.disk)) {
                    Some(block) => IoCommand::Write { key, block: Arc::clone(block), tag },
                    None => {
                        warn!(block = %key, "write scheduled for a block no longer held");
                        continue;
                    }
                },
                // The server runs reorganisation copies through the disk threads' own
                // non-real-time share, not through the cycle's NRT queue.
                IoClass::Nrt { .. } => continue,
            };
            match (self.t.workers.get(&io.disk), &self.t.remote, io.class) {
                (Some(w), _, _) => w.submit(cmd),
                // A failover to a copy on another node's disk: read through its owner.
                (None, Some(remote), IoClass::Read { key }) => remote(io.disk, key, tag),
                (None, _, class) => {
                    warn!(disk = %io.disk, "IO for a disk with no IO thread");
                    self.outstanding.remove(&tag);
                    let error = detached(io.disk);
                    let s = &mut self.t.scheduler;
                    match class {
                        IoClass::Read { key } => s.handle_read_done(
                            now,
                            ReadDone { disk: io.disk, key, result: Err(error) },
                        ),
                        IoClass::Write { key, .. } => s.handle_write_done(
                            now,
                            WriteDone { disk: io.disk, key, result: Err(error) },
                        ),
                        IoClass::Nrt { .. } => {}
                    }
                }
            }
        }
    }

    /// The core's events, to their owners: blocks to the sender thread, failures to the
    /// server's sink, recordings' notices to each recording.
    fn forward_events(&mut self) {
        while let Some(ev) = self.t.scheduler.poll_event() {
            match ev {
                CycleEvent::Deliver { stream, index, block, anchor, run } => {
                    let _ = self.t.sender.send(SenderCommand::Block {
                        stream,
                        run,
                        index,
                        block,
                        anchor,
                    });
                }
                CycleEvent::ReadFailed { stream, key, error } => {
                    warn!(%stream, block = %key, %error, "block read failed on every copy");
                    let error = error.within(format_args!("block {key} could not be read"));
                    (self.t.on_event)(SchedEvent::ReadFailed { stream, error });
                }
                CycleEvent::Failover { key, failed, next, error } => {
                    warn!(block = %key, disk = %failed, next = %next, %error,
                        "block read failed; reading the next copy");
                    (self.t.on_event)(SchedEvent::CopyFailed { key, disk: failed, error });
                }
                CycleEvent::Missed { stream, key, .. } => {
                    debug!(%stream, block = %key, "deadline missed");
                }
                CycleEvent::Written { stream, key, disk } => {
                    if let Some(tx) = self.recorders.get(&stream) {
                        let _ = tx.send(RecordEvent::Written(key, disk));
                    }
                }
                CycleEvent::WriteFailed { stream, key, error, .. } => {
                    if let Some(tx) = self.recorders.get(&stream) {
                        let _ = tx.send(RecordEvent::Failed(key, error));
                    }
                }
                CycleEvent::GivenBack { stream, run, blocks } => {
                    let _ = self.t.sender.send(SenderCommand::GiveBack { stream, run, blocks });
                }
                CycleEvent::NrtDone { .. } => {}
                CycleEvent::CycleEnd(report) => self.last_cycle = report,
            }
        }
    }

    /// Reads copy `pending.at` of an HTTP delivery's block (or the next one this node has) in
    /// the disk's non-real-time share; answers with every copy's error when none is left.
    fn http_read(&mut self, mut pending: HttpPending) {
        while let Some(disk) = pending.copies.as_slice().get(pending.at).copied() {
            if let Some(w) = self.t.workers.get(&disk) {
                // A tag from the scheduler's own sequence (below the reorganiser's space, see
                // `isochron_server::reorg::NRT_TAG_BASE`), so completions route back here and a
                // `Drain` barrier waits for it like for a stream's read.
                self.tag += 1;
                self.outstanding.insert(self.tag);
                self.http.disk_reads += 1;
                w.submit(IoCommand::NrtRead { key: pending.key, tag: self.tag });
                self.http_reads.insert(self.tag, pending);
                return;
            }
            self.http.failed += 1;
            pending.errors.push(detached(disk));
            pending.at += 1;
        }
        let what = format!("reading block {}", pending.key);
        let _ = pending.reply.send(Err(IoFailure::exhausted(what, &pending.errors)));
    }
}

/// The failure of an IO for a disk this node has no IO thread for.
fn detached(disk: DiskId) -> IoFailure {
    IoFailure::new(IoFailureKind::Detached, format!("disk {disk} is not attached"))
}
