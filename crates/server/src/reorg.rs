//! The online reorganiser: SCADDAR disk additions and removals while streams play.
//!
//! SCADDAR (Goel, Shahabi, Yao, Zimmermann, ICDE 2002) moves only the blocks whose disk changes
//! between the active placement epoch and the pending one (`docs/design/scaling.md`). Here that is
//! one task, sole owner of the reorganisation's state, fed [`ReorgCommand`]s:
//!
//! 1. `AddDisk`/`RemoveDisk` record the operation in the store (the disk joins or starts
//!    draining; the placement log gains a pending epoch) and attach an IO thread for a new disk.
//! 2. Every move is a non-real-time read on the source disk followed by a non-real-time durable
//!    write on the target, issued through the scheduler thread to the disks' IO threads, which
//!    run them only in the non-real-time share of their time: streams are served first. A few
//!    moves are kept in flight to overlap the two disks.
//! 3. When every copy is durable, the epoch flips in one catalog transaction; the object plans
//!    of the library and of running streams switch to the new disks.
//! 4. Once the reads issued before the switch are done (a scheduler barrier), the sources are
//!    deleted and a removed disk's IO thread stops.
//!
//! A crash at any point leaves either the pending epoch (the next start resumes the copies; copies
//! already made are skipped) or the flipped one (the next start deletes leftover sources):
//! docs/design/scaling.md.
//!
//! **In a cluster** (Yima §2.1: a node is a group of disks) the node whose disks change runs the
//! reorganisation: the node that joins, or the node being removed
//! ([`Store::coordinates_pending`]). A move's source or target may be another node's disk: that
//! node reads or writes the block in its disk's non-real-time share too, on the coordinator's
//! behalf ([`ReorgCommand::ServeRead`], [`ReorgCommand::ServeWrite`], over HTTP). The flip is one
//! compare-and-swap of the shared metadata; every node then plans new streams with the new
//! epoch, while running streams keep the plan they started with, so nothing changes under a
//! stream on any node. Each node deletes its moved blocks' sources (and closes retired disks) once
//! none of its sessions reads an older epoch ([`SessionCommand::OldestEpoch`]).
//!
//! **Repairs** (`store.replication` K > 1). When a read of a copy fails (a stream's or an HTTP
//! download's read failed over to another copy; Yima §2.1's fault tolerance), the scheduler thread
//! reports the bad copy ([`ReorgCommand::Repair`]). The reorganiser, which already owns the
//! disks' non-real-time copies, repairs it the same way: a non-real-time read of another copy of
//! the block (checked against the catalog's checksum), a non-real-time durable write over the
//! bad copy, and a non-real-time read of the written copy, verified; then the scheduler reads
//! that copy again ([`SchedCommand::CopyRepaired`]). Repairs run beside a reorganisation and are
//! counted in [`ReorgStatus::repair`] (`/api/v1/reorg`, `/metrics`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use isochron_base::{BlockKey, DiskId, IoFailure, IoFailureKind};
use isochron_dataplane::sched_thread::SchedCommand;
use isochron_diskio::store::{StoreError, read_remote_block};
use isochron_diskio::{AlignedBuf, IoCommand, IoDone, IoWorker, ReadDone, Store};
use isochron_store::catalog::DiskState;
use isochron_store::reorg::Move;
use isochron_store::{Block, Epoch};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{debug, info, warn};

use crate::library::Library;
use crate::sessions::SessionCommand;

/// The reorganiser's non-real-time IO tags start here; the scheduler thread's own tags (real-time
/// reads, HTTP delivery's non-real-time reads) stay below, which is how a disk thread's
/// completions are routed (see `start` in the crate root).
pub(crate) const NRT_TAG_BASE: u64 = 1 << 62;

/// Moves in flight at once.
const IN_FLIGHT: usize = 4;
/// Attempts per move before the reorganisation is declared failed.
const ATTEMPTS: u32 = 5;
/// The wait before a move's next attempt, times the attempts so far.
const RETRY_BACKOFF: Duration = Duration::from_millis(300);
/// A failed reorganisation is resumed ([`ReorgCommand::Resume`]) no sooner than this.
const RESTART_AFTER: Duration = Duration::from_secs(5);

/// Why the reorganiser did not take a disk operation on.
#[derive(Debug, thiserror::Error)]
pub enum ReorgError {
    /// Another reorganisation runs; one at a time.
    #[error("a reorganisation is already running")]
    Busy,
    /// The store refused the operation (a bad spec, an unknown disk, the last copies of a
    /// block); nothing changed.
    #[error(transparent)]
    Refused(#[from] StoreError),
    /// The disk was added but its IO thread could not be started.
    #[error("disk {disk}: {error:#}")]
    Attach {
        /// The disk.
        disk: DiskId,
        /// Why.
        error: anyhow::Error,
    },
    /// The store's operation did not finish (its task panicked).
    #[error("the store operation did not finish: {0}")]
    Lost(#[from] tokio::task::JoinError),
}

/// Commands to the reorganiser.
#[derive(Debug)]
pub enum ReorgCommand {
    /// Add a disk (`PATH` or `PATH,seek_ms=…,rate_mib_s=…`) and reorganise onto it.
    AddDisk {
        /// The disk spec.
        spec: String,
        /// The new disk's id, or why not.
        reply: oneshot::Sender<Result<DiskId, ReorgError>>,
    },
    /// Drain a disk and retire it.
    RemoveDisk {
        /// The disk.
        id: DiskId,
        /// Accepted, or why not.
        reply: oneshot::Sender<Result<(), ReorgError>>,
    },
    /// Resume a reorganisation found pending at start.
    Resume,
    /// A reorganisation this node should have started was refused (a dead node's removal would
    /// lose the last copies of a block): shown as failed in the status.
    Refused {
        /// The operation, e.g. `re-replicate dead node n2`.
        operation: String,
        /// Why it was refused.
        error: String,
    },
    /// Report progress.
    Status {
        /// The reply.
        reply: oneshot::Sender<ReorgStatus>,
    },
    /// A non-real-time IO completed.
    Io(IoDone),
    /// Another node's reorganisation reads a block of one of this node's disks: read it in the
    /// disk's non-real-time share.
    ServeRead {
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
        /// The encoded block, or why not.
        reply: oneshot::Sender<Result<Vec<u8>, IoFailure>>,
    },
    /// Another node's reorganisation writes a block to one of this node's disks: verify it and
    /// write it durably in the disk's non-real-time share.
    ServeWrite {
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
        /// The encoded block.
        bytes: Vec<u8>,
        /// Done, or why not.
        reply: oneshot::Sender<Result<(), IoFailure>>,
    },
    /// A move's back-off after a failed attempt is over: try it again.
    Retry {
        /// The move's tag.
        tag: u64,
    },
    /// A copy of a block could not be read: repair it from another copy in the non-real-time
    /// share (a request for a copy already being repaired is merged into it).
    Repair {
        /// The block.
        key: BlockKey,
        /// The disk of the bad copy.
        disk: DiskId,
        /// Why it is bad.
        error: IoFailure,
    },
    /// A copy's read from (`Some` bytes) or write to (`None`) another node completed.
    Remote {
        /// The move's tag.
        tag: u64,
        /// The result.
        result: Result<Option<Vec<u8>>, IoFailure>,
    },
}

/// The reorganisation's state as the API shows it.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ReorgStatus {
    /// `idle`, `running` or `failed`.
    pub state: String,
    /// Blocks copied.
    pub moved: u64,
    /// Blocks to copy.
    pub total: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Seconds since the reorganisation started (or, when idle, how long the last one took).
    pub elapsed_s: f64,
    /// Copy rate of the current (or last) reorganisation, MiB/s.
    pub rate_mib_s: f64,
    /// The operation, e.g. `add disk 3`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub operation: Option<String>,
    /// Why it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Repairs of bad copies (with `store.replication` > 1).
    pub repair: RepairStatus,
}

/// Repairs of bad copies since the server started: a copy whose read failed, rewritten from a
/// good copy in the non-real-time share and read back verified.
#[derive(Clone, Debug, Default, Serialize)]
pub struct RepairStatus {
    /// Bad copies reported (each copy once while its repair runs).
    pub requested: u64,
    /// Copies rewritten and verified.
    pub repaired: u64,
    /// Repairs that failed (no good copy readable, the write or the check failed).
    pub failed: u64,
    /// Repairs running now.
    pub in_progress: u64,
    /// Bytes rewritten.
    pub bytes: u64,
    /// The last failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

/// Builds the IO thread of a disk that joins, wired like the others.
pub(crate) type SpawnWorker = Box<dyn Fn(&Store, DiskId) -> anyhow::Result<IoWorker> + Send>;

struct InFlight {
    mv: Move,
    /// Where the copy is read: `mv.from`, or another copy when `mv.from` is a dead node's
    /// ([`Store::reorg_sources`]).
    src: DiskId,
    attempts: u32,
    /// The block's size, known once it has been read.
    len: u64,
}

/// A repair of a bad copy in progress: which step its IO in flight is.
struct RepairJob {
    key: BlockKey,
    /// The disk of the bad copy.
    bad: DiskId,
    /// The other copies' disks (on this node), tried in replica order.
    sources: Vec<DiskId>,
    /// The catalog's checksum of the block.
    checksum: u64,
    step: RepairStep,
}

#[derive(Clone, Copy)]
enum RepairStep {
    /// Reading `sources[i]`.
    Read(usize),
    /// Writing the good block over the bad copy.
    Write(u64),
    /// Reading the written copy back.
    Verify(u64),
}

/// An IO done for another node's reorganisation, waiting for its disk.
enum Serving {
    Read(oneshot::Sender<Result<Vec<u8>, IoFailure>>),
    Write(oneshot::Sender<Result<(), IoFailure>>),
}

/// The failure of a request for a disk another node holds.
fn not_here(disk: DiskId) -> IoFailure {
    IoFailure::new(IoFailureKind::Detached, format!("disk {disk} is not on this node"))
}

/// How long a cluster node waits after it sees a new epoch before it deletes what the flip left:
/// a session another node opened just before the flip is planned at the old epoch.
const GARBAGE_GRACE: Duration = Duration::from_secs(3);

/// The reorganiser task's state.
pub(crate) struct Reorganiser {
    pub(crate) store: Arc<Store>,
    pub(crate) library: Arc<Library>,
    pub(crate) sched: Sender<SchedCommand>,
    /// Builds an IO thread for a disk that joins (routes its completions like the others).
    pub(crate) spawn_worker: SpawnWorker,
    /// The reorganiser's own channel (remote copies' results come back on it).
    me: mpsc::UnboundedSender<ReorgCommand>,
    /// The session manager (which placement epochs its streams read).
    sessions: mpsc::UnboundedSender<SessionCommand>,
    queue: VecDeque<(Move, DiskId)>,
    in_flight: HashMap<u64, InFlight>,
    serving: HashMap<u64, Serving>,
    /// Repairs by the tag of their IO in flight.
    repairs: HashMap<u64, RepairJob>,
    next_tag: u64,
    status: ReorgStatus,
    started: Option<Instant>,
    /// A cluster node: the active epoch whose leftovers are deleted.
    collected: Option<Epoch>,
    /// When this node first saw the active epoch.
    seen: Option<(Epoch, Instant)>,
    /// When the last reorganisation failed.
    failed_at: Option<Instant>,
}

impl Reorganiser {
    pub(crate) fn new(
        store: Arc<Store>,
        library: Arc<Library>,
        sched: Sender<SchedCommand>,
        spawn_worker: SpawnWorker,
        me: mpsc::UnboundedSender<ReorgCommand>,
        sessions: mpsc::UnboundedSender<SessionCommand>,
    ) -> Self {
        Self {
            store,
            library,
            sched,
            spawn_worker,
            me,
            sessions,
            queue: VecDeque::new(),
            in_flight: HashMap::new(),
            serving: HashMap::new(),
            repairs: HashMap::new(),
            collected: None,
            seen: None,
            failed_at: None,
            // NRT tags live in their own space, far from the scheduler's read tags.
            next_tag: NRT_TAG_BASE,
            status: ReorgStatus { state: "idle".into(), ..ReorgStatus::default() },
            started: None,
        }
    }

    /// Runs until every command sender is gone.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<ReorgCommand>) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let cmd = tokio::select! {
                cmd = rx.recv() => match cmd {
                    Some(cmd) => cmd,
                    None => return,
                },
                _ = tick.tick() => {
                    self.collect_garbage().await;
                    continue;
                }
            };
            match cmd {
                ReorgCommand::AddDisk { spec, reply } => {
                    if self.busy() {
                        let _ = reply.send(Err(ReorgError::Busy));
                        continue;
                    }
                    let store = Arc::clone(&self.store);
                    let added = tokio::task::spawn_blocking(move || store.add_disk(&spec)).await;
                    let attached = match added {
                        Ok(Ok(id)) => self
                            .attach(id)
                            .map(|()| id)
                            .map_err(|error| ReorgError::Attach { disk: id, error }),
                        Ok(Err(e)) => Err(e.into()),
                        Err(e) => Err(e.into()),
                    };
                    let id = attached.as_ref().ok().copied();
                    let _ = reply.send(attached);
                    if let Some(id) = id {
                        self.start(format!("add disk {id}")).await;
                    }
                }
                ReorgCommand::RemoveDisk { id, reply } => {
                    if self.busy() {
                        let _ = reply.send(Err(ReorgError::Busy));
                        continue;
                    }
                    let store = Arc::clone(&self.store);
                    let removed =
                        match tokio::task::spawn_blocking(move || store.remove_disk(id)).await {
                            Ok(r) => r.map_err(ReorgError::from),
                            Err(e) => Err(e.into()),
                        };
                    let ok = removed.is_ok();
                    let _ = reply.send(removed);
                    if ok {
                        self.start(format!("remove disk {id}")).await;
                    }
                }
                ReorgCommand::Resume => {
                    let backing_off = self.failed_at.is_some_and(|t| t.elapsed() < RESTART_AFTER);
                    if !self.busy() && !backing_off && self.store.coordinates_pending() {
                        let op = match self.store.node() {
                            Some(node) => format!("node {node}: {}", self.pending_op()),
                            None => "resume interrupted reorganisation".into(),
                        };
                        self.start(op).await;
                    }
                }
                ReorgCommand::ServeRead { disk, key, reply } => {
                    if !self.store.is_local(disk) {
                        let _ = reply.send(Err(not_here(disk)));
                        continue;
                    }
                    let tag = self.tag();
                    self.serving.insert(tag, Serving::Read(reply));
                    let cmd = IoCommand::NrtRead { key, tag };
                    let _ = self.sched.send(SchedCommand::Nrt { disk, cmd });
                }
                ReorgCommand::ServeWrite { disk, key, bytes, reply } => {
                    if !self.store.is_local(disk) {
                        let _ = reply.send(Err(not_here(disk)));
                        continue;
                    }
                    let block = match Block::parse(AlignedBuf::copy_from(&bytes), Some(key)) {
                        Ok(b) => Arc::new(b),
                        Err(e) => {
                            let context = format!("block {key}: {e}");
                            let _ =
                                reply.send(Err(IoFailure::new(IoFailureKind::Corrupt, context)));
                            continue;
                        }
                    };
                    let tag = self.tag();
                    self.serving.insert(tag, Serving::Write(reply));
                    let cmd = IoCommand::NrtWrite { key, block, tag };
                    let _ = self.sched.send(SchedCommand::Nrt { disk, cmd });
                }
                ReorgCommand::Repair { key, disk, error } => self.repair(key, disk, &error),
                ReorgCommand::Remote { tag, result } => self.on_remote(tag, result).await,
                ReorgCommand::Retry { tag } => {
                    if let Some(f) = self.in_flight.remove(&tag) {
                        self.issue_read(f);
                    }
                }
                ReorgCommand::Refused { operation, error } => {
                    if !self.busy() {
                        self.status.operation = Some(operation);
                        self.fail(error);
                    }
                }
                ReorgCommand::Status { reply } => {
                    let _ = reply.send(self.snapshot());
                }
                ReorgCommand::Io(done) => self.on_io(done).await,
            }
        }
    }

    fn busy(&self) -> bool {
        self.status.state == "running"
    }

    fn snapshot(&self) -> ReorgStatus {
        let mut s = self.status.clone();
        s.repair.in_progress = self.repairs.len() as u64;
        if let Some(t) = self.started
            && self.busy()
        {
            s.elapsed_s = t.elapsed().as_secs_f64();
            s.rate_mib_s = s.bytes as f64 / (1 << 20) as f64 / s.elapsed_s.max(1e-9);
        }
        s
    }

    fn attach(&self, id: DiskId) -> anyhow::Result<()> {
        let worker = (self.spawn_worker)(&self.store, id)?;
        let profile = crate::profile::disk_profile(&self.store, id);
        let _ = self.sched.send(SchedCommand::AttachDisk { disk: id, worker, profile });
        Ok(())
    }

    async fn start(&mut self, operation: String) {
        let store = Arc::clone(&self.store);
        let moves = match tokio::task::spawn_blocking(move || store.reorg_sources()).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return self.fail(format!("planning the moves: {e}")),
            Err(e) => return self.fail(format!("planning the moves: {e}")),
        };
        info!(%operation, moves = moves.len(), "reorganisation started");
        self.status = ReorgStatus {
            state: "running".into(),
            total: moves.len() as u64,
            operation: Some(operation),
            repair: std::mem::take(&mut self.status.repair),
            ..ReorgStatus::default()
        };
        self.started = Some(Instant::now());
        self.queue = moves.into();
        self.pump();
        if self.queue.is_empty() && self.in_flight.is_empty() {
            self.finish().await;
        }
    }

    /// Keeps `IN_FLIGHT` moves going: each starts with a non-real-time read of the source.
    fn pump(&mut self) {
        while self.in_flight.len() < IN_FLIGHT {
            let Some((mv, src)) = self.queue.pop_front() else { break };
            self.issue_read(InFlight { mv, src, attempts: 0, len: 0 });
        }
    }

    fn tag(&mut self) -> u64 {
        self.next_tag += 1;
        self.next_tag
    }

    /// What the pending operation does, for the status.
    fn pending_op(&self) -> String {
        let meta = self.store.meta();
        let list = |state: DiskState| -> Vec<String> {
            meta.disks.iter().filter(|d| d.state == state).map(|d| d.id.to_string()).collect()
        };
        let (joining, draining) = (list(DiskState::Joining), list(DiskState::Draining));
        match (joining.is_empty(), draining.is_empty()) {
            (false, _) => format!("add disks {}", joining.join(",")),
            (true, false) => {
                let unreachable = self.store.unreachable();
                let dead = meta
                    .disks
                    .iter()
                    .filter(|d| d.state == DiskState::Draining)
                    .all(|d| unreachable.contains(&d.id));
                if dead {
                    format!(
                        "re-replicate the copies of dead disks {} from the live replicas",
                        draining.join(",")
                    )
                } else {
                    format!("remove disks {}", draining.join(","))
                }
            }
            (true, true) => "resume reorganisation".into(),
        }
    }

    /// Reads the move's source: in the local disk's non-real-time share, or at the node that
    /// owns it (which reads it in its own).
    fn issue_read(&mut self, mut f: InFlight) {
        f.attempts += 1;
        let tag = self.tag();
        if self.store.is_local(f.src) {
            let cmd = IoCommand::NrtRead { key: f.mv.key, tag };
            let _ = self.sched.send(SchedCommand::Nrt { disk: f.src, cmd });
        } else {
            self.remote(tag, Move { from: f.src, ..f.mv }, None);
        }
        self.in_flight.insert(tag, f);
    }

    /// Writes a block read for move `f` to its target, locally or at its owner.
    fn issue_write(&mut self, mut f: InFlight, block: Arc<Block<AlignedBuf>>) {
        f.len = block.as_bytes().len() as u64;
        let tag = self.tag();
        if self.store.is_local(f.mv.to) {
            let cmd = IoCommand::NrtWrite { key: f.mv.key, block, tag };
            let _ = self.sched.send(SchedCommand::Nrt { disk: f.mv.to, cmd });
        } else {
            self.remote(tag, f.mv, Some(block.as_bytes().to_vec()));
        }
        self.in_flight.insert(tag, f);
    }

    /// A copy's read from (`bytes` = `None`) or write to another node, on a blocking thread; the
    /// result comes back as [`ReorgCommand::Remote`].
    fn remote(&self, tag: u64, mv: Move, bytes: Option<Vec<u8>>) {
        let (remote, me) = (self.store.remote(), self.me.clone());
        tokio::task::spawn_blocking(move || {
            let result = match (remote, bytes) {
                (None, _) => Err(IoFailure::new(
                    IoFailureKind::Remote,
                    format!("no route to disks {} and {}", mv.from, mv.to),
                )),
                (Some(r), None) => r.read_block_nrt(mv.from, mv.key).map(Some),
                (Some(r), Some(b)) => r.write_block_nrt(mv.to, mv.key, &b).map(|()| None),
            };
            let _ = me.send(ReorgCommand::Remote { tag, result });
        });
    }

    async fn on_remote(&mut self, tag: u64, result: Result<Option<Vec<u8>>, IoFailure>) {
        let Some(f) = self.in_flight.remove(&tag) else { return };
        match result {
            Ok(Some(bytes)) => match Block::parse(AlignedBuf::copy_from(&bytes), Some(f.mv.key)) {
                Ok(block) => self.issue_write(f, Arc::new(block)),
                Err(e) => {
                    let error = format!("block {} from disk {}: {e}", f.mv.key, f.src);
                    self.retry(f, error);
                }
            },
            Ok(None) => {
                self.status.moved += 1;
                self.status.bytes += f.len;
            }
            Err(e) if self.object_gone(f.mv.key.object) => {
                debug!(key = %f.mv.key, error = %e, "object removed during reorganisation");
                self.status.total = self.status.total.saturating_sub(1);
            }
            Err(e) => {
                let error = format!("copying block {} to disk {}: {e}", f.mv.key, f.mv.to);
                self.retry(f, error);
            }
        }
        self.advance().await;
    }

    /// Answers another node's read or write once this node's disk has done it.
    fn on_serving(&mut self, done: IoDone) -> Option<IoDone> {
        let Some(serving) = self.serving.remove(&done.tag()) else { return Some(done) };
        match (serving, done) {
            (Serving::Read(reply), IoDone::NrtRead(r)) => {
                let _ =
                    reply.send(r.result.map(|b| b.as_bytes().to_vec()).map_err(IoFailure::from));
            }
            (Serving::Write(reply), IoDone::NrtWrite(w)) => {
                let _ = reply.send(w.result.map_err(IoFailure::from));
            }
            _ => {}
        }
        None
    }

    async fn on_io(&mut self, done: IoDone) {
        let Some(done) = self.on_serving(done) else { return };
        let Some(done) = self.on_repair(done) else { return };
        match done {
            IoDone::NrtRead(r) => {
                let Some(f) = self.in_flight.remove(&r.tag) else { return };
                match r.result {
                    Ok(block) => self.issue_write(f, block),
                    Err(e) => {
                        if self.object_gone(r.key.object) {
                            // Removed while the reorganisation ran: nothing to move.
                            self.status.total = self.status.total.saturating_sub(1);
                        } else {
                            self.retry(
                                f,
                                format!("reading block {} from disk {}: {e}", r.key, r.disk),
                            );
                        }
                    }
                }
            }
            IoDone::NrtWrite(w) => {
                let Some(f) = self.in_flight.remove(&w.tag) else { return };
                match w.result {
                    Ok(()) => {
                        self.status.moved += 1;
                        self.status.bytes += f.len;
                    }
                    Err(e) => {
                        self.retry(f, format!("writing block {} to disk {}: {e}", w.key, w.disk))
                    }
                }
            }
            // Real-time reads and writes go to the scheduler, never here.
            IoDone::Read(_) | IoDone::Write(_) => {}
        }
        self.advance().await;
    }

    /// Starts repairing the copy of `key` on `disk` from another copy (see the module docs).
    fn repair(&mut self, key: BlockKey, disk: DiskId, error: &IoFailure) {
        if self.repairs.values().any(|j| j.key == key && j.bad == disk) {
            return;
        }
        let Some(entry) = self.library.by_id(key.object) else { return };
        let Some(checksum) = entry.record.blocks.get(key.index.0 as usize).map(|b| b.checksum)
        else {
            return;
        };
        let copies = self.store.replicas(&entry.record, key.index);
        if !copies.contains(disk) || !self.store.is_local(disk) {
            // A stale report (the copy moved since), or another node's disk: its node repairs.
            debug!(block = %key, %disk, "not repairing a copy this node does not hold");
            return;
        }
        self.status.repair.requested += 1;
        // This node's other copies first, then other nodes' (read through their owners).
        let mut sources: Vec<DiskId> = copies.iter().filter(|&d| d != disk).collect();
        sources.sort_by_key(|&d| !self.store.is_local(d));
        info!(block = %key, %disk, %error, ?sources, "repairing a bad copy");
        let job = RepairJob { key, bad: disk, sources, checksum, step: RepairStep::Read(0) };
        self.repair_read(job);
    }

    /// Reads the next source of a repair, or gives up when none is left.
    fn repair_read(&mut self, job: RepairJob) {
        let RepairStep::Read(i) = job.step else { return };
        let Some(&from) = job.sources.get(i) else {
            let error = format!("block {}: no other copy could be read", job.key);
            return self.repair_failed(job, error);
        };
        let tag = self.tag();
        if self.store.is_local(from) {
            let cmd = IoCommand::NrtRead { key: job.key, tag };
            let _ = self.sched.send(SchedCommand::Nrt { disk: from, cmd });
        } else {
            // Another node's copy, read in its disk's non-real-time share; the result comes
            // back as the completion of a non-real-time read.
            let (remote, me, key) = (self.store.remote(), self.me.clone(), job.key);
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let result = read_remote_block(remote.as_deref(), from, key).map(Arc::new);
                let done = ReadDone { disk: from, key, tag, result, service: started.elapsed() };
                let _ = me.send(ReorgCommand::Io(IoDone::NrtRead(done)));
            });
        }
        self.repairs.insert(tag, job);
    }

    fn repair_failed(&mut self, job: RepairJob, error: String) {
        warn!(block = %job.key, disk = %job.bad, %error, "repair failed");
        self.status.repair.failed += 1;
        self.status.repair.last_error = Some(format!("disk {}: {error}", job.bad));
    }

    /// Carries a repair on when one of its IOs completes; other completions are returned.
    fn on_repair(&mut self, done: IoDone) -> Option<IoDone> {
        let Some(mut job) = self.repairs.remove(&done.tag()) else { return Some(done) };
        match (job.step, done) {
            (RepairStep::Read(i), IoDone::NrtRead(r)) => match r.result {
                Ok(block) if block.header().checksum == job.checksum => {
                    let tag = self.tag();
                    job.step = RepairStep::Write(block.as_bytes().len() as u64);
                    let cmd = IoCommand::NrtWrite { key: job.key, block, tag };
                    let _ = self.sched.send(SchedCommand::Nrt { disk: job.bad, cmd });
                    self.repairs.insert(tag, job);
                }
                other => {
                    let why = match other {
                        Ok(_) => "checksum differs from the catalog's".to_string(),
                        Err(e) => e.to_string(),
                    };
                    debug!(block = %job.key, disk = %r.disk, %why, "repair source unusable");
                    job.step = RepairStep::Read(i + 1);
                    self.repair_read(job);
                }
            },
            (RepairStep::Write(len), IoDone::NrtWrite(w)) => match w.result {
                Ok(()) => {
                    let tag = self.tag();
                    job.step = RepairStep::Verify(len);
                    let cmd = IoCommand::NrtRead { key: job.key, tag };
                    let _ = self.sched.send(SchedCommand::Nrt { disk: job.bad, cmd });
                    self.repairs.insert(tag, job);
                }
                Err(e) => self.repair_failed(job, format!("writing: {e}")),
            },
            (RepairStep::Verify(len), IoDone::NrtRead(r)) => match r.result {
                Ok(block) if block.header().checksum == job.checksum => {
                    self.status.repair.repaired += 1;
                    self.status.repair.bytes += len;
                    info!(block = %job.key, disk = %job.bad, "bad copy repaired");
                    let _ =
                        self.sched.send(SchedCommand::CopyRepaired { key: job.key, disk: job.bad });
                }
                Ok(_) => self.repair_failed(job, "the rewritten copy reads back wrong".into()),
                Err(e) => self.repair_failed(job, format!("reading the rewritten copy: {e}")),
            },
            (_, other) => {
                warn!(tag = other.tag(), "unexpected completion for a repair");
            }
        }
        None
    }

    /// Keeps the copies going; flips once all are done.
    async fn advance(&mut self) {
        if !self.busy() {
            return;
        }
        self.pump();
        if self.queue.is_empty() && self.in_flight.is_empty() {
            self.finish().await;
        }
    }

    fn object_gone(&self, object: isochron_base::ObjectId) -> bool {
        self.library.by_id(object).is_none()
    }

    fn retry(&mut self, f: InFlight, error: String) {
        if f.attempts >= ATTEMPTS {
            warn!(%error, "reorganisation move failed");
            self.queue.clear();
            self.in_flight.clear();
            self.fail(error);
        } else {
            warn!(%error, attempt = f.attempts, "reorganisation move failed; retrying");
            // A back-off: a peer may not know this node yet, or be restarting.
            let tag = self.tag();
            let wait = RETRY_BACKOFF * f.attempts;
            self.in_flight.insert(tag, f);
            let me = self.me.clone();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                let _ = me.send(ReorgCommand::Retry { tag });
            });
        }
    }

    fn fail(&mut self, error: String) {
        self.status.state = "failed".into();
        self.status.error = Some(error);
        self.failed_at = Some(Instant::now());
    }

    /// Every copy is durable: flip the epoch, switch plans, drain, delete the sources.
    async fn finish(&mut self) {
        let store = Arc::clone(&self.store);
        let flipped = match tokio::task::spawn_blocking(move || store.flip()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return self.fail(format!("flipping the epoch: {e}")),
            Err(e) => return self.fail(format!("flipping the epoch: {e}")),
        };
        if self.store.node().is_some() {
            // A cluster: new streams get the new plans here now, and on the other nodes when
            // they see the new epoch; running streams keep theirs, and the sources go once no
            // stream holds an old plan (`collect_garbage`).
            let records: Vec<_> = self.library.list().iter().map(|e| e.record.clone()).collect();
            for rec in records {
                self.library.insert(Arc::new(crate::library::entry(&self.store, rec)));
            }
            self.finished();
            return;
        }
        // New plans for every object: the library for new streams, the scheduler for running
        // ones.
        let records: Vec<_> = self.library.list().iter().map(|e| e.record.clone()).collect();
        for rec in records {
            let entry = Arc::new(crate::library::entry(&self.store, rec));
            let _ = self.sched.send(SchedCommand::UpdatePlan { plan: Arc::clone(&entry.plan) });
            self.library.insert(entry);
        }
        // Reads queued before the switch may still target the old disks: wait for them.
        let (tx, rx) = oneshot::channel();
        let _ = self.sched.send(SchedCommand::Drain { reply: tx });
        let _ = tokio::time::timeout(Duration::from_secs(60), rx).await;
        let store = Arc::clone(&self.store);
        let retired: Vec<DiskId> = flipped.retired.clone();
        let deleted = tokio::task::spawn_blocking(move || store.delete_sources(&flipped)).await;
        match deleted {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                warn!(error = %e, "deleting moved blocks' sources (the next start finishes it)")
            }
            Err(e) => {
                warn!(error = %e, "deleting moved blocks' sources (the next start finishes it)")
            }
        }
        for id in retired {
            let _ = self.sched.send(SchedCommand::DetachDisk { disk: id });
        }
        self.finished();
    }

    fn finished(&mut self) {
        let elapsed = self.started.map_or(0.0, |t| t.elapsed().as_secs_f64());
        self.status.state = "idle".into();
        self.status.elapsed_s = elapsed;
        self.status.rate_mib_s = self.status.bytes as f64 / (1 << 20) as f64 / elapsed.max(1e-9);
        info!(
            moved = self.status.moved,
            bytes = self.status.bytes,
            elapsed_s = elapsed,
            rate_mib_s = self.status.rate_mib_s,
            "reorganisation done"
        );
    }

    /// A cluster node: once a new epoch has been in force for [`GARBAGE_GRACE`] and no session
    /// reads an older one, deletes the moved blocks' sources on this node's disks and closes its
    /// retired disks.
    async fn collect_garbage(&mut self) {
        if self.store.node().is_none() || self.busy() {
            return;
        }
        let epoch = self.store.active_epoch();
        if self.collected == Some(epoch) {
            return;
        }
        let since = match self.seen {
            Some((e, t)) if e == epoch => t,
            _ => {
                let now = Instant::now();
                self.seen = Some((epoch, now));
                now
            }
        };
        if since.elapsed() < GARBAGE_GRACE {
            return;
        }
        let (reply, rx) = oneshot::channel();
        let _ = self.sessions.send(SessionCommand::OldestEpoch { reply });
        match rx.await {
            Ok(Some(oldest)) if oldest < epoch => {
                debug!(%epoch, %oldest, "streams still read an old placement");
                return;
            }
            Ok(_) => {}
            Err(_) => return,
        }
        let store = Arc::clone(&self.store);
        // A feed's blocks past its last commit are being written: not garbage.
        let growing = self.library.live_names();
        match tokio::task::spawn_blocking(move || store.collect_garbage(epoch, &growing)).await {
            Ok(Ok(None)) => {
                // Another flip came in since the check: its sessions are checked afresh.
                debug!(%epoch, "the placement moved on while checking; collecting later");
            }
            Ok(Ok(Some((deleted, closed)))) => {
                info!(%epoch, deleted, ?closed, "deleted what the reorganisation left on this node");
                for disk in closed {
                    let _ = self.sched.send(SchedCommand::DetachDisk { disk });
                }
                self.collected = Some(epoch);
            }
            Ok(Err(e)) => warn!(error = %e, "deleting what the reorganisation left (retrying)"),
            Err(e) => warn!(error = %e, "deleting what the reorganisation left (retrying)"),
        }
    }
}
