//! One IO thread per disk, with a real-time and a non-real-time class (XTREAM §2.1;
//! `docs/design/scheduler.md`).
//!
//! Why a thread per disk: a disk does one thing at a time, so a thread that owns it gives natural
//! per-disk queueing and a per-disk service time to measure; blocking `O_DIRECT` reads there never
//! stall the async runtime or the scheduler (moonfire-nvr's reasoning for its per-disk writer
//! threads). The thread is fed by a closed [`IoCommand`] enum over one channel and reports each
//! completion to a callback, so it owns no state anyone else touches.
//!
//! Two classes of work share the disk (Dimitrijević, Rangaswami, Chang, "The XTREAM multimedia
//! system", ICME 2002: non-real-time requests are served in a reserved share of each cycle):
//!
//! - **Real-time** reads ([`IoCommand::Read`]) feed streams. They are served in submission order
//!   and always before any queued non-real-time work (an NRT command already in service finishes
//!   first: IOs are not preempted).
//! - **Non-real-time** work ([`IoCommand::NrtRead`], [`IoCommand::NrtWrite`]: the copies of a
//!   SCADDAR reorganisation) is admitted only while the NRT busy time over a trailing window
//!   ([`IoConfig::nrt_window`], 1 s by default) is below [`IoConfig::nrt_share`] of the window
//!   (20 % by default) — while the disk serves real-time IO: a disk whose last real-time IO is a
//!   window or more ago has no stream to protect, and serves its NRT work back to back (the
//!   share is reserved for NRT work, not a ceiling on an idle disk: a ladder's renditions, an
//!   upload or a reorganisation on a quiet node go at the disk's speed). Over time NRT work
//!   therefore gets at most its share of a disk that streams read, plus at most one IO per
//!   window, and real-time reads never wait behind more than one NRT IO.
//!
//! A real-time read's block is verified (format, key, xxh3 checksum) on a second thread per disk,
//! `isochron-verify-<id>`, which then reports it: the IO thread goes straight on to its next
//! read, so with two or more reads submitted the disk does not idle while a block is checked
//! (inline, `perf` showed the checksum at half of the IO thread's CPU time, the disk idle
//! meanwhile). Completions of real-time reads keep their order; other completions (writes,
//! non-real-time work, verified inline) come from the IO thread.
//!
//! For now the share is enforced per disk thread; the time-cycle scheduler (`isochron-sched`)
//! is to take it over. The real-time queue is unbounded and FIFO: the scheduler decides what each
//! disk reads in a cycle and bounds what it submits. This module does not reorder real-time
//! reads, deduplicate or cache.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use isochron_base::{BlockKey, DiskId};
use isochron_store::Block;

use crate::{AlignedBuf, DiskDir, DiskError, RawBlock};

/// Default share of a disk's time for non-real-time work.
pub const DEFAULT_NRT_SHARE: f64 = 0.2;
/// Default trailing window over which the non-real-time share is measured.
pub const DEFAULT_NRT_WINDOW: Duration = Duration::from_secs(1);

/// A command for a disk's IO thread.
#[derive(Clone, Debug)]
pub enum IoCommand {
    /// Real-time: read and verify one block; the result comes back as [`IoDone::Read`] carrying
    /// `tag`.
    Read {
        /// The block to read.
        key: BlockKey,
        /// An opaque value returned with the result (e.g. the request's deadline slot).
        tag: u64,
    },
    /// Real-time: store a block durably (a recording's block, XTREAM's guaranteed-rate writes);
    /// served with the real-time reads, before any non-real-time work. The result comes back as
    /// [`IoDone::Write`].
    Write {
        /// The block's key (checked against the block's header before writing).
        key: BlockKey,
        /// The block.
        block: Arc<Block<AlignedBuf>>,
        /// An opaque value returned with the result.
        tag: u64,
    },
    /// Non-real-time: read and verify one block (the source of a copy); the result comes back
    /// as [`IoDone::NrtRead`].
    NrtRead {
        /// The block to read.
        key: BlockKey,
        /// An opaque value returned with the result.
        tag: u64,
    },
    /// Non-real-time: store a block durably (temp file, fsync, rename, directory fsync; see
    /// [`DiskDir::write_block`]); the result comes back as [`IoDone::NrtWrite`].
    NrtWrite {
        /// The block's key (checked against the block's header before writing).
        key: BlockKey,
        /// The block, as read from another disk.
        block: Arc<Block<AlignedBuf>>,
        /// An opaque value returned with the result.
        tag: u64,
    },
    /// Stop after the real-time reads queued before this one. Non-real-time commands still
    /// queued are not run: they complete with [`DiskError::Cancelled`].
    Shutdown,
}

/// The outcome of a read ([`IoCommand::Read`] or [`IoCommand::NrtRead`]).
#[derive(Debug)]
pub struct ReadDone {
    /// The disk that served the read.
    pub disk: DiskId,
    /// The block.
    pub key: BlockKey,
    /// The submitter's tag.
    pub tag: u64,
    /// The verified block, shareable without copying, or what went wrong.
    pub result: Result<Arc<Block<AlignedBuf>>, DiskError>,
    /// Wall-clock time the read took on the IO thread (open, read, emulation), excluding
    /// queueing and, for real-time reads, verification (done on the verify thread).
    pub service: Duration,
}

/// The outcome of an [`IoCommand::Write`] or [`IoCommand::NrtWrite`].
#[derive(Debug)]
pub struct WriteDone {
    /// The disk written.
    pub disk: DiskId,
    /// The block.
    pub key: BlockKey,
    /// The submitter's tag.
    pub tag: u64,
    /// Whether the block is now durably on the disk.
    pub result: Result<(), DiskError>,
    /// Wall-clock time the write took on this thread, excluding queueing.
    pub service: Duration,
}

/// A completion, passed to the worker's callback.
#[derive(Debug)]
pub enum IoDone {
    /// A real-time read completed.
    Read(ReadDone),
    /// A real-time write completed.
    Write(WriteDone),
    /// A non-real-time read completed.
    NrtRead(ReadDone),
    /// A non-real-time write completed.
    NrtWrite(WriteDone),
}

impl IoDone {
    /// The submitter's tag.
    #[must_use]
    pub fn tag(&self) -> u64 {
        match self {
            Self::Read(r) | Self::NrtRead(r) => r.tag,
            Self::Write(w) | Self::NrtWrite(w) => w.tag,
        }
    }

    /// The block.
    #[must_use]
    pub fn key(&self) -> BlockKey {
        match self {
            Self::Read(r) | Self::NrtRead(r) => r.key,
            Self::Write(w) | Self::NrtWrite(w) => w.key,
        }
    }
}

/// How a worker shares its disk between the classes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IoConfig {
    /// The most of the disk's time non-real-time work may use, as a fraction in `[0, 1]` (0
    /// stops it; 1 lets it run whenever no real-time read is queued).
    pub nrt_share: f64,
    /// The trailing window over which the share is measured.
    pub nrt_window: Duration,
}

impl Default for IoConfig {
    fn default() -> Self {
        Self { nrt_share: DEFAULT_NRT_SHARE, nrt_window: DEFAULT_NRT_WINDOW }
    }
}

/// A worker's counters since it started ([`IoWorker::stats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoStats {
    /// Real-time reads completed (successfully or not).
    pub rt_ops: u64,
    /// Bytes of the real-time reads that succeeded.
    pub rt_bytes: u64,
    /// Time spent serving real-time reads.
    pub rt_busy: Duration,
    /// Non-real-time reads and writes completed (successfully or not; cancelled ones excluded).
    pub nrt_ops: u64,
    /// Bytes of the non-real-time reads and writes that succeeded.
    pub nrt_bytes: u64,
    /// Time spent serving non-real-time work.
    pub nrt_busy: Duration,
    /// Commands of either class that failed.
    pub errors: u64,
    /// Real-time reads queued or in service now.
    pub rt_queued: usize,
    /// Non-real-time commands queued or in service now.
    pub nrt_queued: usize,
}

/// State shared between a worker handle and its thread: counters and the live NRT share.
#[derive(Debug, Default)]
struct Shared {
    rt_queued: AtomicUsize,
    nrt_queued: AtomicUsize,
    /// `f64::to_bits` of the NRT share.
    nrt_share: AtomicU64,
    rt_ops: AtomicU64,
    rt_bytes: AtomicU64,
    rt_busy_ns: AtomicU64,
    nrt_ops: AtomicU64,
    nrt_bytes: AtomicU64,
    nrt_busy_ns: AtomicU64,
    errors: AtomicU64,
}

impl Shared {
    fn share(&self) -> f64 {
        f64::from_bits(self.nrt_share.load(Ordering::Relaxed))
    }

    fn set_share(&self, share: f64) {
        let share = if share.is_nan() { 0.0 } else { share.clamp(0.0, 1.0) };
        self.nrt_share.store(share.to_bits(), Ordering::Relaxed);
    }

    fn queued(&self, cmd: &IoCommand) -> Option<&AtomicUsize> {
        match cmd {
            IoCommand::Read { .. } | IoCommand::Write { .. } => Some(&self.rt_queued),
            IoCommand::NrtRead { .. } | IoCommand::NrtWrite { .. } => Some(&self.nrt_queued),
            IoCommand::Shutdown => None,
        }
    }
}

/// A disk's IO thread (and its verify thread).
#[derive(Debug)]
pub struct IoWorker {
    id: DiskId,
    tx: Sender<IoCommand>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    verifier: Option<JoinHandle<()>>,
}

/// The completion callback, shared by a disk's IO and verify threads.
type OnDone = Arc<dyn Fn(IoDone) + Send + Sync>;

/// A real-time read done by the IO thread, for the verify thread.
struct Unverified {
    key: BlockKey,
    tag: u64,
    read: Result<RawBlock, DiskError>,
    service: Duration,
}

impl IoWorker {
    /// Starts the IO thread of `disk` (named `isochron-disk-<id>`) with non-real-time work
    /// limited to `nrt_share` of the disk's time (see [`IoConfig`]; the window is
    /// [`DEFAULT_NRT_WINDOW`]). Every completion is passed to `on_done` on that thread or on
    /// the disk's verify thread (see the module docs), so `on_done` should only hand it on
    /// (e.g. send it over a channel).
    pub fn spawn(
        disk: Arc<DiskDir>,
        id: DiskId,
        nrt_share: f64,
        on_done: Box<dyn Fn(IoDone) + Send + Sync>,
    ) -> std::io::Result<Self> {
        let config = IoConfig { nrt_share, ..IoConfig::default() };
        Self::spawn_with(disk, id, config, on_done)
    }

    /// [`IoWorker::spawn`] with a full [`IoConfig`].
    pub fn spawn_with(
        disk: Arc<DiskDir>,
        id: DiskId,
        config: IoConfig,
        on_done: Box<dyn Fn(IoDone) + Send + Sync>,
    ) -> std::io::Result<Self> {
        debug_assert_eq!(
            disk.id(),
            id,
            "IoWorker spawned for {} with id {id}",
            disk.path().display()
        );
        let (tx, rx) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared::default());
        shared.set_share(config.nrt_share);
        let window = config.nrt_window.max(Duration::from_millis(1));
        let on_done: OnDone = Arc::from(on_done);
        let (verify_tx, verify_rx) = crossbeam_channel::unbounded::<Unverified>();
        let verifier = thread::Builder::new().name(format!("isochron-verify-{id}")).spawn({
            let (shared, on_done) = (Arc::clone(&shared), Arc::clone(&on_done));
            move || verify_loop(id, &shared, &*on_done, &verify_rx)
        })?;
        let thread = thread::Builder::new().name(format!("isochron-disk-{id}")).spawn({
            let shared = Arc::clone(&shared);
            move || {
                let t = Thread { disk: &disk, id, shared: &shared, on_done: &*on_done, verify_tx };
                t.run(&rx, window);
            }
        })?;
        Ok(Self { id, tx, shared, thread: Some(thread), verifier: Some(verifier) })
    }

    /// The disk this worker serves.
    #[must_use]
    pub fn disk(&self) -> DiskId {
        self.id
    }

    /// Queues a command. Never blocks: the queues are unbounded (the scheduler bounds what it
    /// submits). If the thread has died (its callback panicked), the command is dropped and an
    /// error is logged.
    pub fn submit(&self, cmd: IoCommand) {
        if let Some(q) = self.shared.queued(&cmd) {
            q.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = self.tx.send(cmd) {
            let cmd = e.into_inner();
            if let Some(q) = self.shared.queued(&cmd) {
                q.fetch_sub(1, Ordering::Relaxed);
            }
            tracing::error!(disk = %self.id, ?cmd, "IO thread is gone; command dropped");
        }
    }

    /// Real-time reads submitted and not yet completed (queued or in service).
    #[must_use]
    pub fn queue_len(&self) -> usize {
        self.shared.rt_queued.load(Ordering::Relaxed)
    }

    /// Non-real-time commands submitted and not yet completed.
    #[must_use]
    pub fn nrt_queue_len(&self) -> usize {
        self.shared.nrt_queued.load(Ordering::Relaxed)
    }

    /// The current share of the disk's time for non-real-time work.
    #[must_use]
    pub fn nrt_share(&self) -> f64 {
        self.shared.share()
    }

    /// Changes the share of the disk's time for non-real-time work (clamped to `[0, 1]`); it
    /// applies from the next admission decision.
    pub fn set_nrt_share(&self, share: f64) {
        self.shared.set_share(share);
    }

    /// The worker's counters.
    #[must_use]
    pub fn stats(&self) -> IoStats {
        let s = &*self.shared;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IoStats {
            rt_ops: get(&s.rt_ops),
            rt_bytes: get(&s.rt_bytes),
            rt_busy: Duration::from_nanos(get(&s.rt_busy_ns)),
            nrt_ops: get(&s.nrt_ops),
            nrt_bytes: get(&s.nrt_bytes),
            nrt_busy: Duration::from_nanos(get(&s.nrt_busy_ns)),
            errors: get(&s.errors),
            rt_queued: s.rt_queued.load(Ordering::Relaxed),
            nrt_queued: s.nrt_queued.load(Ordering::Relaxed),
        }
    }

    /// Stops the thread after the real-time reads already queued (cancelling queued
    /// non-real-time work), and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        // A send error means the thread already exited; joining still reports its panic.
        let _ = self.tx.send(IoCommand::Shutdown);
        let me = thread::current().id();
        let verifier = self.verifier.take();
        if thread.thread().id() == me || verifier.as_ref().is_some_and(|v| v.thread().id() == me) {
            return; // Dropped from one of its own callbacks: cannot join itself.
        }
        if thread.join().is_err() {
            tracing::error!(disk = %self.id, "IO thread panicked");
        }
        // The IO thread has gone, and with it the verify thread's sender: it drains and stops.
        if verifier.is_some_and(|v| v.join().is_err()) {
            tracing::error!(disk = %self.id, "verify thread panicked");
        }
    }
}

impl Drop for IoWorker {
    /// Same as [`IoWorker::shutdown`].
    fn drop(&mut self) {
        self.stop();
    }
}

/// A queued non-real-time command.
enum Nrt {
    Read { key: BlockKey, tag: u64 },
    Write { key: BlockKey, block: Arc<Block<AlignedBuf>>, tag: u64 },
}

/// The NRT busy intervals of the trailing window, as offsets from the thread's start.
struct Budget {
    origin: Instant,
    window: Duration,
    intervals: VecDeque<(Duration, Duration)>,
}

impl Budget {
    fn new(window: Duration) -> Self {
        Self { origin: Instant::now(), window, intervals: VecDeque::new() }
    }

    /// When NRT work may next start: `now` if the busy time of the window ending now is below
    /// `share` of it, otherwise the instant the oldest busy time will have slid out enough.
    /// `None` when the share is 0.
    fn next_admission(&mut self, now: Instant, share: f64) -> Option<Instant> {
        if share <= 0.0 {
            return None;
        }
        let t = now.saturating_duration_since(self.origin);
        let start = t.saturating_sub(self.window);
        while self.intervals.front().is_some_and(|&(_, end)| end <= start) {
            self.intervals.pop_front();
        }
        let limit = self.window.mul_f64(share);
        let busy: Duration = self.intervals.iter().map(|&(s, e)| e - s.max(start)).sum();
        if busy < limit {
            return Some(now);
        }
        // Slide the window start forward until `excess` (and a hair more) has left it.
        let mut excess = busy - limit + Duration::from_micros(10);
        for &(s, e) in &self.intervals {
            let s = s.max(start);
            let len = e - s;
            if len > excess {
                return Some(self.origin + s + excess + self.window);
            }
            excess -= len;
        }
        Some(now)
    }

    fn record(&mut self, start: Instant, end: Instant) {
        let s = start.saturating_duration_since(self.origin);
        let e = end.saturating_duration_since(self.origin);
        self.intervals.push_back((s, e));
    }
}

/// The verify thread: checks each real-time read's block, counts it and reports it, in the
/// order the IO thread read them; returns when the IO thread has gone.
fn verify_loop(id: DiskId, s: &Shared, on_done: &dyn Fn(IoDone), rx: &Receiver<Unverified>) {
    for Unverified { key, tag, read, service } in rx {
        let result = read.and_then(RawBlock::verify).map(Arc::new);
        s.rt_queued.fetch_sub(1, Ordering::Relaxed);
        s.rt_ops.fetch_add(1, Ordering::Relaxed);
        s.rt_busy_ns.fetch_add(nanos(service), Ordering::Relaxed);
        match &result {
            Ok(b) => {
                s.rt_bytes.fetch_add(b.as_bytes().len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                s.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(disk = %id, %key, error = %e, "block read failed");
            }
        }
        on_done(IoDone::Read(ReadDone { disk: id, key, tag, result, service }));
    }
}

/// The IO thread's view of its worker.
struct Thread<'a> {
    disk: &'a DiskDir,
    id: DiskId,
    shared: &'a Shared,
    on_done: &'a dyn Fn(IoDone),
    /// Real-time reads, to be verified and reported by the verify thread.
    verify_tx: Sender<Unverified>,
}

impl Thread<'_> {
    fn run(&self, rx: &Receiver<IoCommand>, window: Duration) {
        tracing::debug!(disk = %self.id, path = %self.disk.path().display(), "IO thread started");
        let mut rt: VecDeque<Rt> = VecDeque::new();
        let mut nrt: VecDeque<Nrt> = VecDeque::new();
        let mut budget = Budget::new(window);
        let mut stopping = false;
        // When the last real-time IO was served: the share binds only while streams read.
        let mut last_rt: Option<Instant> = None;
        loop {
            while let Ok(cmd) = rx.try_recv() {
                stopping |= enqueue(cmd, &mut rt, &mut nrt);
            }
            if let Some(cmd) = rt.pop_front() {
                match cmd {
                    Rt::Read { key, tag } => self.serve_rt(key, tag),
                    Rt::Write { key, block, tag } => self.serve_rt_write(key, &block, tag),
                }
                last_rt = Some(Instant::now());
                continue;
            }
            if stopping {
                break;
            }
            if nrt.is_empty() {
                match rx.recv() {
                    Ok(cmd) => stopping |= enqueue(cmd, &mut rt, &mut nrt),
                    Err(_) => stopping = true,
                }
                continue;
            }
            let now = Instant::now();
            let streaming = last_rt.is_some_and(|t| now.duration_since(t) < window);
            // With a share of 0, look again every window in case it is raised.
            let at = if streaming || self.shared.share() <= 0.0 {
                budget.next_admission(now, self.shared.share()).unwrap_or(now + window)
            } else {
                now
            };
            if at <= now {
                if let Some(cmd) = nrt.pop_front() {
                    let start = Instant::now();
                    self.serve_nrt(cmd);
                    budget.record(start, Instant::now());
                }
                continue;
            }
            match rx.recv_timeout(at - now) {
                Ok(cmd) => stopping |= enqueue(cmd, &mut rt, &mut nrt),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => stopping = true,
            }
        }
        for cmd in nrt {
            self.cancel(cmd);
        }
        tracing::debug!(disk = %self.id, "IO thread stopped");
    }

    fn serve_rt(&self, key: BlockKey, tag: u64) {
        let start = Instant::now();
        let read = self.disk.read_raw(key);
        let service = start.elapsed();
        // The verify thread lives until this thread's sender is dropped: the send cannot fail.
        let _ = self.verify_tx.send(Unverified { key, tag, read, service });
    }

    fn serve_rt_write(&self, key: BlockKey, block: &Block<AlignedBuf>, tag: u64) {
        let start = Instant::now();
        let result = self.disk.write_block(key, block.as_bytes());
        let service = start.elapsed();
        let s = self.shared;
        s.rt_queued.fetch_sub(1, Ordering::Relaxed);
        s.rt_ops.fetch_add(1, Ordering::Relaxed);
        s.rt_busy_ns.fetch_add(nanos(service), Ordering::Relaxed);
        match &result {
            Ok(()) => {
                s.rt_bytes.fetch_add(block.as_bytes().len() as u64, Ordering::Relaxed);
            }
            Err(e) => {
                s.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(disk = %self.id, %key, error = %e, "block write failed");
            }
        }
        (self.on_done)(IoDone::Write(WriteDone { disk: self.id, key, tag, result, service }));
    }

    fn serve_nrt(&self, cmd: Nrt) {
        let s = self.shared;
        let start = Instant::now();
        let (done, ok_bytes) = match cmd {
            Nrt::Read { key, tag } => {
                let result = self.disk.read_block(key).map(Arc::new);
                let bytes = result.as_ref().map_or(0, |b| b.as_bytes().len() as u64);
                let ok = result.is_ok();
                if let Err(e) = &result {
                    tracing::warn!(disk = %self.id, %key, error = %e, "non-real-time read failed");
                }
                let service = start.elapsed();
                let done = ReadDone { disk: self.id, key, tag, result, service };
                (IoDone::NrtRead(done), ok.then_some(bytes))
            }
            Nrt::Write { key, block, tag } => {
                let result = self.disk.write_block(key, block.as_bytes());
                let ok = result.is_ok();
                if let Err(e) = &result {
                    tracing::warn!(disk = %self.id, %key, error = %e, "non-real-time write failed");
                }
                let service = start.elapsed();
                let bytes = block.as_bytes().len() as u64;
                let done = WriteDone { disk: self.id, key, tag, result, service };
                (IoDone::NrtWrite(done), ok.then_some(bytes))
            }
        };
        s.nrt_queued.fetch_sub(1, Ordering::Relaxed);
        s.nrt_ops.fetch_add(1, Ordering::Relaxed);
        s.nrt_busy_ns.fetch_add(nanos(start.elapsed()), Ordering::Relaxed);
        match ok_bytes {
            Some(b) => s.nrt_bytes.fetch_add(b, Ordering::Relaxed),
            None => s.errors.fetch_add(1, Ordering::Relaxed),
        };
        (self.on_done)(done);
    }

    fn cancel(&self, cmd: Nrt) {
        self.shared.nrt_queued.fetch_sub(1, Ordering::Relaxed);
        let disk = self.id;
        let done = match cmd {
            Nrt::Read { key, tag } => IoDone::NrtRead(ReadDone {
                disk,
                key,
                tag,
                result: Err(DiskError::Cancelled { disk, key }),
                service: Duration::ZERO,
            }),
            Nrt::Write { key, tag, .. } => IoDone::NrtWrite(WriteDone {
                disk,
                key,
                tag,
                result: Err(DiskError::Cancelled { disk, key }),
                service: Duration::ZERO,
            }),
        };
        (self.on_done)(done);
    }
}

/// A queued real-time command.
enum Rt {
    Read { key: BlockKey, tag: u64 },
    Write { key: BlockKey, block: Arc<Block<AlignedBuf>>, tag: u64 },
}

/// Files a command in its queue; returns whether it was [`IoCommand::Shutdown`].
fn enqueue(cmd: IoCommand, rt: &mut VecDeque<Rt>, nrt: &mut VecDeque<Nrt>) -> bool {
    match cmd {
        IoCommand::Read { key, tag } => rt.push_back(Rt::Read { key, tag }),
        IoCommand::Write { key, block, tag } => rt.push_back(Rt::Write { key, block, tag }),
        IoCommand::NrtRead { key, tag } => nrt.push_back(Nrt::Read { key, tag }),
        IoCommand::NrtWrite { key, block, tag } => nrt.push_back(Nrt::Write { key, block, tag }),
        IoCommand::Shutdown => return true,
    }
    false
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use isochron_base::{BlockIndex, Gsn, ObjectId};
    use isochron_store::DiskModel;

    use super::*;

    fn encode_block(key: BlockKey, packets: u32) -> Vec<u8> {
        crate::testutil::encode_block(key, Gsn(0), packets)
    }

    fn key(o: u64, i: u32) -> BlockKey {
        BlockKey::new(ObjectId(o), BlockIndex(i))
    }

    fn channel_worker(disk: &Arc<DiskDir>, config: IoConfig) -> (IoWorker, Receiver<IoDone>) {
        let (tx, rx) = crossbeam_channel::unbounded();
        let w = IoWorker::spawn_with(
            Arc::clone(disk),
            disk.id(),
            config,
            Box::new(move |done| {
                let _ = tx.send(done);
            }),
        )
        .unwrap();
        (w, rx)
    }

    #[test]
    fn reads_in_order_and_reports() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskDir::create(dir.path(), 5, DiskId(3)).unwrap());
        let keys: Vec<BlockKey> = (0..8).map(|i| key(1, i)).collect();
        for k in &keys {
            disk.write_block(*k, &encode_block(*k, 4)).unwrap();
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let worker = IoWorker::spawn(
            Arc::clone(&disk),
            DiskId(3),
            DEFAULT_NRT_SHARE,
            Box::new(move |done| tx.send(done).unwrap()),
        )
        .unwrap();
        assert_eq!(worker.disk(), DiskId(3));
        assert_eq!(worker.nrt_share(), 0.2);
        for (tag, k) in keys.iter().enumerate() {
            worker.submit(IoCommand::Read { key: *k, tag: tag as u64 });
        }
        let missing = key(2, 0);
        worker.submit(IoCommand::Read { key: missing, tag: 99 });
        for (tag, k) in keys.iter().enumerate() {
            let IoDone::Read(done) = rx.recv_timeout(Duration::from_secs(10)).unwrap() else {
                panic!("not a real-time read")
            };
            assert_eq!((done.disk, done.key, done.tag), (DiskId(3), *k, tag as u64));
            let block = done.result.unwrap();
            assert_eq!(block.header().key, *k);
            assert_eq!(block.packet_count(), 4);
        }
        let done = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!((done.tag(), done.key()), (99, missing));
        let IoDone::Read(done) = done else { panic!("not a real-time read") };
        assert!(matches!(done.result, Err(DiskError::BlockMissing { .. })));
        assert_eq!(worker.queue_len(), 0);
        let stats = worker.stats();
        assert_eq!((stats.rt_ops, stats.errors, stats.nrt_ops), (9, 1, 0));
        assert!(stats.rt_bytes >= 8 * 4096);
        worker.shutdown();
        // The callback (and its sender) went with the thread.
        assert!(rx.recv_timeout(Duration::from_secs(1)).is_err());
    }

    #[test]
    fn shutdown_drains_queue_and_drop_joins() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskDir::create(dir.path(), 5, DiskId(0)).unwrap());
        let k = key(1, 0);
        disk.write_block(k, &encode_block(k, 1)).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let worker = IoWorker::spawn(Arc::clone(&disk), DiskId(0), 0.2, {
            let count = Arc::clone(&count);
            Box::new(move |done| {
                let IoDone::Read(done) = done else { panic!("not a real-time read") };
                assert!(done.result.is_ok());
                count.fetch_add(1, Ordering::SeqCst);
            })
        })
        .unwrap();
        for tag in 0..50 {
            worker.submit(IoCommand::Read { key: k, tag });
        }
        drop(worker);
        assert_eq!(count.load(Ordering::SeqCst), 50);
    }

    /// A real-time write (a recording's block) is durable, then reads back.
    #[test]
    fn realtime_write_then_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskDir::create(dir.path(), 5, DiskId(0)).unwrap());
        let (tx, rx) = crossbeam_channel::unbounded();
        let worker = IoWorker::spawn(
            Arc::clone(&disk),
            DiskId(0),
            0.2,
            Box::new(move |d| {
                let _ = tx.send(d);
            }),
        )
        .unwrap();
        let k = key(4, 2);
        let bytes = encode_block(k, 3);
        let block = Arc::new(Block::parse(AlignedBuf::copy_from(&bytes), Some(k)).unwrap());
        worker.submit(IoCommand::Write { key: k, block, tag: 5 });
        let IoDone::Write(w) = rx.recv_timeout(Duration::from_secs(10)).unwrap() else {
            panic!("not a real-time write")
        };
        assert_eq!((w.key, w.tag), (k, 5));
        w.result.unwrap();
        worker.submit(IoCommand::Read { key: k, tag: 6 });
        let IoDone::Read(r) = rx.recv_timeout(Duration::from_secs(10)).unwrap() else {
            panic!("not a real-time read")
        };
        assert_eq!(r.result.unwrap().as_bytes(), &bytes[..]);
        let stats = worker.stats();
        assert_eq!((stats.rt_ops, stats.nrt_ops), (2, 0));
    }

    /// A non-real-time copy: read on one disk, durable write on another.
    #[test]
    fn nrt_read_and_write_copy_a_block() {
        let dir = tempfile::tempdir().unwrap();
        let a = Arc::new(DiskDir::create(&dir.path().join("a"), 5, DiskId(0)).unwrap());
        let b = Arc::new(DiskDir::create(&dir.path().join("b"), 5, DiskId(1)).unwrap());
        let k = key(3, 4);
        let bytes = encode_block(k, 9);
        a.write_block(k, &bytes).unwrap();
        let (wa, ra) = channel_worker(&a, IoConfig::default());
        let (wb, rb) = channel_worker(&b, IoConfig::default());
        wa.submit(IoCommand::NrtRead { key: k, tag: 7 });
        let IoDone::NrtRead(r) = ra.recv_timeout(Duration::from_secs(10)).unwrap() else {
            panic!("not an NRT read")
        };
        assert_eq!((r.disk, r.key, r.tag), (DiskId(0), k, 7));
        wb.submit(IoCommand::NrtWrite { key: k, block: r.result.unwrap(), tag: 8 });
        let IoDone::NrtWrite(w) = rb.recv_timeout(Duration::from_secs(10)).unwrap() else {
            panic!("not an NRT write")
        };
        assert_eq!((w.disk, w.key, w.tag), (DiskId(1), k, 8));
        w.result.unwrap();
        assert_eq!(b.read_block(k).unwrap().as_bytes(), &bytes[..]);
        // A block written under the wrong key is refused.
        let other = key(3, 5);
        let block = Arc::new(a.read_block(k).unwrap());
        wb.submit(IoCommand::NrtWrite { key: other, block, tag: 9 });
        let IoDone::NrtWrite(w) = rb.recv_timeout(Duration::from_secs(10)).unwrap() else {
            panic!("not an NRT write")
        };
        assert!(matches!(w.result, Err(DiskError::InvalidBlock { .. })));
        let (sa, sb) = (wa.stats(), wb.stats());
        assert_eq!((sa.nrt_ops, sa.rt_ops, sb.nrt_ops, sb.errors), (1, 0, 2, 1));
        assert_eq!(sb.nrt_bytes, bytes.len() as u64);
        assert_eq!((wa.nrt_queue_len(), wb.nrt_queue_len()), (0, 0));
    }

    /// Real-time reads submitted after a backlog of non-real-time work are served before it
    /// (except the one NRT IO already in service).
    #[test]
    fn rt_reads_overtake_queued_nrt_work() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskDir::create(dir.path(), 5, DiskId(0)).unwrap());
        for i in 0..8 {
            disk.write_block(key(1, i), &encode_block(key(1, i), 2)).unwrap();
        }
        // 100 ms per IO: the test thread submits everything well within the first NRT IO.
        disk.set_model(Some(DiskModel {
            mean_seek: Duration::ZERO,
            rate: 10 * 4096, // bytes/s: one 4 KiB block in 100 ms
        }));
        let (w, rx) = channel_worker(&disk, IoConfig { nrt_share: 1.0, ..IoConfig::default() });
        for i in 0..5 {
            w.submit(IoCommand::NrtRead { key: key(1, i), tag: u64::from(i) });
        }
        for i in 5..8 {
            w.submit(IoCommand::Read { key: key(1, i), tag: u64::from(i) });
        }
        let order: Vec<(bool, u64)> = (0..8)
            .map(|_| {
                let d = rx.recv_timeout(Duration::from_secs(10)).unwrap();
                (matches!(d, IoDone::Read(_)), d.tag())
            })
            .collect();
        let first_rt = order.iter().position(|(rt, _)| *rt).unwrap();
        assert!(first_rt <= 1, "real-time reads waited behind {first_rt} NRT IOs: {order:?}");
        assert_eq!(order[first_rt..first_rt + 3], [(true, 5), (true, 6), (true, 7)]);
        // The NRT work kept its order.
        let nrt: Vec<u64> = order.iter().filter(|(rt, _)| !rt).map(|&(_, t)| t).collect();
        assert_eq!(nrt, (0..5).collect::<Vec<_>>());
    }

    /// A worker on an emulated slow disk (about 10 ms per IO: latency mean 6 ms plus 4 ms of
    /// transfer) with NRT share `share` over 250 ms windows and 1000 NRT reads of block `k`
    /// queued; the temporary directory must outlive it.
    fn nrt_backlog(
        share: f64,
    ) -> (tempfile::TempDir, IoWorker, Receiver<IoDone>, BlockKey, Duration) {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskDir::create(dir.path(), 5, DiskId(0)).unwrap());
        let k = key(1, 0);
        disk.write_block(k, &encode_block(k, 2)).unwrap();
        disk.set_model(Some(DiskModel { mean_seek: Duration::from_millis(6), rate: 1 << 20 }));
        let window = Duration::from_millis(250);
        let (w, rx) = channel_worker(&disk, IoConfig { nrt_share: share, nrt_window: window });
        for tag in 0..1000 {
            w.submit(IoCommand::NrtRead { key: k, tag });
        }
        (dir, w, rx, k, window)
    }

    /// On an emulated slow disk with an endless NRT backlog, while a stream reads it, NRT work
    /// gets its share of the disk's time (measured over whole windows), not more.
    #[test]
    fn nrt_share_is_respected() {
        let share = 0.25;
        let (_dir, w, rx, k, window) = nrt_backlog(share);
        let start = Instant::now();
        let run = window * 8;
        // A stream's real-time reads, one every 50 ms (a fifth of the disk).
        let mut tag = 10_000;
        while start.elapsed() < run {
            w.submit(IoCommand::Read { key: k, tag });
            tag += 1;
            let wait = Instant::now() + Duration::from_millis(50);
            while let Some(left) = wait.checked_duration_since(Instant::now()) {
                let _ = rx.recv_timeout(left);
            }
        }
        let stats = w.stats();
        let elapsed = start.elapsed();
        let fraction = stats.nrt_busy.as_secs_f64() / elapsed.as_secs_f64();
        // At most the share plus one IO per window (≤ 30 ms of 250: 12 %), and not much less.
        assert!(
            fraction > share - 0.07 && fraction < share + 0.12,
            "NRT used {fraction:.3} of the disk (share {share}); {} IOs in {elapsed:?}",
            stats.nrt_ops
        );
        // Real-time reads still get through at once.
        let t = Instant::now();
        w.submit(IoCommand::Read { key: k, tag: 5000 });
        loop {
            let d = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            if matches!(d, IoDone::Read(_)) {
                break;
            }
        }
        assert!(t.elapsed() < Duration::from_millis(200), "RT read took {:?}", t.elapsed());
        // Shutdown cancels the backlog.
        let left = w.nrt_queue_len();
        assert!(left > 500, "{left}");
        drop(w);
        let cancelled = rx
            .try_iter()
            .filter(|d| {
                matches!(
                    d,
                    IoDone::NrtRead(ReadDone { result: Err(DiskError::Cancelled { .. }), .. })
                )
            })
            .count();
        assert!(cancelled + 1 >= left, "{cancelled} cancelled of {left}");
    }

    /// With no stream reading the disk, NRT work is not held to its share: the disk is its own.
    #[test]
    fn nrt_work_takes_an_idle_disk_whole() {
        let (_dir, w, rx, _, window) = nrt_backlog(0.25);
        let start = Instant::now();
        while start.elapsed() < window * 4 {
            let _ = rx.recv_timeout(Duration::from_millis(50));
        }
        let fraction = w.stats().nrt_busy.as_secs_f64() / start.elapsed().as_secs_f64();
        assert!(fraction > 0.6, "NRT used {fraction:.3} of an idle disk");
    }

    #[test]
    fn budget_waits_for_the_window_to_slide() {
        let mut b = Budget::new(Duration::from_secs(1));
        let o = b.origin;
        let at = |ms: u64| o + Duration::from_millis(ms);
        assert_eq!(b.next_admission(at(0), 0.2), Some(at(0)));
        assert_eq!(b.next_admission(at(0), 0.0), None);
        b.record(at(0), at(150));
        assert_eq!(b.next_admission(at(150), 0.2), Some(at(150)));
        b.record(at(150), at(250));
        // 250 ms busy, 200 allowed: wait until 50 ms (plus a hair) of [0, 150] left the window.
        let next = b.next_admission(at(250), 0.2).unwrap();
        assert!(next > at(1050) && next < at(1051), "{:?}", next - o);
        assert_eq!(b.next_admission(at(1051), 0.2), Some(at(1051)));
        // Half the disk: 250 < 500, admitted at once.
        assert_eq!(b.next_admission(at(250), 0.5), Some(at(250)));
    }
}
