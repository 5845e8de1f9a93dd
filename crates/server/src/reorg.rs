//! The online reorganiser: SCADDAR disk additions and removals while streams play.
//!
//! SCADDAR (Goel, Shahabi, Yao, Zimmermann, ICDE 2002) moves only the blocks whose disk changes
//! between the active placement epoch and the pending one (algorithms.md §2.7). Here that is one
//! task, sole owner of the reorganisation's state, fed [`ReorgCommand`]s:
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

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use isochron_base::DiskId;
use isochron_dataplane::sched_thread::SchedCommand;
use isochron_diskio::{IoCommand, IoDone, IoWorker, Store};
use isochron_store::reorg::Move;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::library::{Library, ObjectEntry};

/// The reorganiser's non-real-time IO tags start here; the scheduler thread's own tags (real-time
/// reads, HTTP delivery's non-real-time reads) stay below, which is how a disk thread's
/// completions are routed (see `start` in the crate root).
pub(crate) const NRT_TAG_BASE: u64 = 1 << 62;

/// Moves in flight at once.
const IN_FLIGHT: usize = 4;
/// Attempts per move before the reorganisation is declared failed.
const ATTEMPTS: u32 = 3;

/// Commands to the reorganiser.
#[derive(Debug)]
pub enum ReorgCommand {
    /// Add a disk (`PATH` or `PATH,seek_ms=…,rate_mib_s=…`) and reorganise onto it.
    AddDisk {
        /// The disk spec.
        spec: String,
        /// The new disk's id, or why not.
        reply: oneshot::Sender<Result<DiskId, String>>,
    },
    /// Drain a disk and retire it.
    RemoveDisk {
        /// The disk.
        id: DiskId,
        /// Accepted, or why not.
        reply: oneshot::Sender<Result<(), String>>,
    },
    /// Resume a reorganisation found pending at start.
    Resume,
    /// Report progress.
    Status {
        /// The reply.
        reply: oneshot::Sender<ReorgStatus>,
    },
    /// A non-real-time IO completed.
    Io(IoDone),
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
}

/// Builds the IO thread of a disk that joins, wired like the others.
pub(crate) type SpawnWorker = Box<dyn Fn(&Store, DiskId) -> anyhow::Result<IoWorker> + Send>;

struct InFlight {
    mv: Move,
    attempts: u32,
    /// The block's size, known once it has been read.
    len: u64,
}

/// The reorganiser task's state.
pub(crate) struct Reorganiser {
    pub(crate) store: Arc<Store>,
    pub(crate) library: Arc<Library>,
    pub(crate) sched: Sender<SchedCommand>,
    /// Builds an IO thread for a disk that joins (routes its completions like the others).
    pub(crate) spawn_worker: SpawnWorker,
    queue: VecDeque<Move>,
    in_flight: HashMap<u64, InFlight>,
    next_tag: u64,
    status: ReorgStatus,
    started: Option<Instant>,
}

impl Reorganiser {
    pub(crate) fn new(
        store: Arc<Store>,
        library: Arc<Library>,
        sched: Sender<SchedCommand>,
        spawn_worker: SpawnWorker,
    ) -> Self {
        Self {
            store,
            library,
            sched,
            spawn_worker,
            queue: VecDeque::new(),
            in_flight: HashMap::new(),
            // NRT tags live in their own space, far from the scheduler's read tags.
            next_tag: NRT_TAG_BASE,
            status: ReorgStatus { state: "idle".into(), ..ReorgStatus::default() },
            started: None,
        }
    }

    /// Runs until every command sender is gone.
    pub(crate) async fn run(mut self, mut rx: mpsc::UnboundedReceiver<ReorgCommand>) {
        while let Some(cmd) = rx.recv().await {
            match cmd {
                ReorgCommand::AddDisk { spec, reply } => {
                    if self.busy() {
                        let _ = reply.send(Err("a reorganisation is already running".into()));
                        continue;
                    }
                    let store = Arc::clone(&self.store);
                    let added = tokio::task::spawn_blocking(move || store.add_disk(&spec)).await;
                    match added {
                        Ok(Ok(id)) => {
                            if let Err(e) = self.attach(id) {
                                let _ = reply.send(Err(format!("disk {id}: {e:#}")));
                                continue;
                            }
                            let _ = reply.send(Ok(id));
                            self.start(format!("add disk {id}")).await;
                        }
                        Ok(Err(e)) => {
                            let _ = reply.send(Err(e.to_string()));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e.to_string()));
                        }
                    }
                }
                ReorgCommand::RemoveDisk { id, reply } => {
                    if self.busy() {
                        let _ = reply.send(Err("a reorganisation is already running".into()));
                        continue;
                    }
                    let store = Arc::clone(&self.store);
                    match tokio::task::spawn_blocking(move || store.remove_disk(id)).await {
                        Ok(Ok(())) => {
                            let _ = reply.send(Ok(()));
                            self.start(format!("remove disk {id}")).await;
                        }
                        Ok(Err(e)) => {
                            let _ = reply.send(Err(e.to_string()));
                        }
                        Err(e) => {
                            let _ = reply.send(Err(e.to_string()));
                        }
                    }
                }
                ReorgCommand::Resume => {
                    if !self.busy() && self.store.meta().pending().is_some() {
                        self.start("resume interrupted reorganisation".into()).await;
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
        let moves = match tokio::task::spawn_blocking(move || store.reorg_moves()).await {
            Ok(Ok(m)) => m,
            Ok(Err(e)) => return self.fail(format!("planning the moves: {e}")),
            Err(e) => return self.fail(format!("planning the moves: {e}")),
        };
        info!(%operation, moves = moves.len(), "reorganisation started");
        self.status = ReorgStatus {
            state: "running".into(),
            total: moves.len() as u64,
            operation: Some(operation),
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
            let Some(mv) = self.queue.pop_front() else { break };
            self.issue_read(InFlight { mv, attempts: 0, len: 0 });
        }
    }

    fn issue_read(&mut self, mut f: InFlight) {
        f.attempts += 1;
        self.next_tag += 1;
        let tag = self.next_tag;
        let cmd = IoCommand::NrtRead { key: f.mv.key, tag };
        let _ = self.sched.send(SchedCommand::Nrt { disk: f.mv.from, cmd });
        self.in_flight.insert(tag, f);
    }

    async fn on_io(&mut self, done: IoDone) {
        match done {
            IoDone::NrtRead(r) => {
                let Some(mut f) = self.in_flight.remove(&r.tag) else { return };
                match r.result {
                    Ok(block) => {
                        f.len = block.as_bytes().len() as u64;
                        self.next_tag += 1;
                        let tag = self.next_tag;
                        let cmd = IoCommand::NrtWrite { key: f.mv.key, block, tag };
                        let _ = self.sched.send(SchedCommand::Nrt { disk: f.mv.to, cmd });
                        self.in_flight.insert(tag, f);
                    }
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
            self.issue_read(f);
        }
    }

    fn fail(&mut self, error: String) {
        self.status.state = "failed".into();
        self.status.error = Some(error);
    }

    /// Every copy is durable: flip the epoch, switch plans, drain, delete the sources.
    async fn finish(&mut self) {
        let store = Arc::clone(&self.store);
        let flipped = match tokio::task::spawn_blocking(move || store.flip()).await {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return self.fail(format!("flipping the epoch: {e}")),
            Err(e) => return self.fail(format!("flipping the epoch: {e}")),
        };
        // New plans for every object: the library for new streams, the scheduler for running
        // ones.
        let records: Vec<_> = self.library.list().iter().map(|e| e.record.clone()).collect();
        for rec in records {
            let entry = Arc::new(ObjectEntry::new(&self.store, rec));
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
}
