//! The scheduler thread: the one owner of the [`Scheduler`] and its block cache.
//!
//! Everything that touches the scheduler goes through [`SchedCommand`] on one channel: admission
//! and starts from the session manager, "block done" from the sender, read completions from the
//! disk threads. The thread issues the reads the scheduler asks for to the per-disk
//! [`IoWorker`]s and forwards delivered blocks to the sender thread. No lock guards the cache:
//! only this thread sees it (moonfire-nvr's `IoCommand` pattern, rust-analyzer's closed event
//! enum).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use isochron_base::{BlockIndex, DiskId, MediaTime, ObjectId, StreamId};
use isochron_diskio::{IoCommand, IoWorker, ReadDone as DiskReadDone};
use isochron_sched::{Admission, Event, ObjectPlan, OpenStream, ReadDone, SchedStats, Scheduler};
use tokio::sync::{mpsc, oneshot};
use tracing::warn;

use crate::clock::Clock;
use crate::sender::{SenderCommand, SharedBlock};
use crate::sessions::SessionCommand;

/// Commands to the scheduler thread.
#[derive(Debug)]
pub enum SchedCommand {
    /// Admit a stream.
    Open {
        /// The request.
        req: OpenStream,
        /// The decision.
        reply: oneshot::Sender<Admission>,
    },
    /// Start run `run` of a stream at block `from`, media time `media`.
    Start {
        /// The stream.
        stream: StreamId,
        /// The run number.
        run: u64,
        /// First block.
        from: BlockIndex,
        /// Media time of the first packet.
        media: MediaTime,
    },
    /// Stop reading for a stream.
    Stop {
        /// The stream.
        stream: StreamId,
    },
    /// Forget a stream.
    Close {
        /// The stream.
        stream: StreamId,
    },
    /// The sender finished a block.
    BlockDone {
        /// The stream.
        stream: StreamId,
        /// The run.
        run: u64,
        /// The block.
        index: BlockIndex,
    },
    /// A disk read finished.
    ReadDone(DiskReadDone),
    /// Drop an object's cached blocks.
    Purge {
        /// The object.
        object: ObjectId,
    },
    /// A disk joined: take over its IO thread.
    AttachDisk {
        /// The disk.
        disk: DiskId,
        /// Its IO thread.
        worker: IoWorker,
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
    /// An object's blocks moved: running streams use the new plan.
    UpdatePlan {
        /// The new plan.
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
    /// Exit the thread.
    Shutdown,
}

/// Scheduler counters and gauges.
#[derive(Clone, Debug, Default)]
pub struct SchedSnapshot {
    /// Counters.
    pub stats: SchedStats,
    /// Streams admitted now.
    pub streams: usize,
    /// Reads queued or in flight per disk.
    pub disk_queues: Vec<(DiskId, usize)>,
    /// Bytes in the cache.
    pub cache_bytes: u64,
}

/// Everything the thread needs.
pub(crate) struct SchedThread {
    pub(crate) clock: Clock,
    pub(crate) scheduler: Scheduler<SharedBlock>,
    pub(crate) rx: Receiver<SchedCommand>,
    pub(crate) workers: HashMap<DiskId, IoWorker>,
    pub(crate) sender: Sender<SenderCommand>,
    pub(crate) sessions: mpsc::UnboundedSender<SessionCommand>,
}

impl SchedThread {
    /// Runs until `Shutdown` or until every command sender is gone; then stops the disk threads.
    pub(crate) fn run(mut self) {
        let mut tag = 0u64;
        // Reads handed to IO threads and not completed, and the barriers waiting on them.
        let mut outstanding: BTreeSet<u64> = BTreeSet::new();
        let mut drains: Vec<(u64, oneshot::Sender<()>)> = Vec::new();
        loop {
            let now = self.clock.now();
            let cmd = match self.scheduler.poll_timeout() {
                Some(t) => match self.rx.recv_timeout(t - now) {
                    Ok(c) => Some(c),
                    Err(RecvTimeoutError::Timeout) => None,
                    Err(RecvTimeoutError::Disconnected) => break,
                },
                None => match self.rx.recv() {
                    Ok(c) => Some(c),
                    Err(_) => break,
                },
            };
            let now = self.clock.now();
            let s = &mut self.scheduler;
            match cmd {
                Some(SchedCommand::Open { req, reply }) => {
                    let _ = reply.send(s.handle_open(now, req));
                }
                Some(SchedCommand::Start { stream, run, from, media }) => {
                    s.handle_start(now, stream, run, from, media);
                }
                Some(SchedCommand::Stop { stream }) => s.handle_stop(now, stream),
                Some(SchedCommand::Close { stream }) => s.handle_close(now, stream),
                Some(SchedCommand::BlockDone { stream, run, index }) => {
                    s.handle_block_done(now, stream, run, index);
                }
                Some(SchedCommand::ReadDone(done)) => {
                    outstanding.remove(&done.tag);
                    let result = done.result.map_err(|e| e.to_string());
                    s.handle_read_done(now, ReadDone { disk: done.disk, key: done.key, result });
                }
                Some(SchedCommand::Purge { object }) => s.purge_object(object),
                Some(SchedCommand::AttachDisk { disk, worker }) => {
                    if let Some(old) = self.workers.insert(disk, worker) {
                        old.shutdown();
                    }
                }
                Some(SchedCommand::DetachDisk { disk }) => {
                    if let Some(w) = self.workers.remove(&disk) {
                        w.shutdown();
                    }
                }
                Some(SchedCommand::Nrt { disk, cmd }) => match self.workers.get(&disk) {
                    Some(w) => w.submit(cmd),
                    None => warn!(%disk, "non-real-time IO for a disk with no IO thread"),
                },
                Some(SchedCommand::UpdatePlan { plan }) => s.handle_plan_update(plan),
                Some(SchedCommand::Drain { reply }) => drains.push((tag, reply)),
                Some(SchedCommand::Stats { reply }) => {
                    let mut disk_queues: Vec<_> =
                        self.workers.keys().map(|d| (*d, s.disk_queue_len(*d))).collect();
                    disk_queues.sort_unstable();
                    let _ = reply.send(SchedSnapshot {
                        stats: s.stats(),
                        streams: s.stream_count(),
                        disk_queues,
                        cache_bytes: s.cache().used().0,
                    });
                }
                Some(SchedCommand::Shutdown) => break,
                None => s.handle_timeout(now),
            }
            while let Some(io) = self.scheduler.poll_io() {
                tag += 1;
                match self.workers.get(&io.disk) {
                    Some(w) => {
                        outstanding.insert(tag);
                        w.submit(IoCommand::Read { key: io.key, tag });
                    }
                    None => {
                        warn!(disk = %io.disk, key = %io.key, "read for a disk with no IO thread");
                        self.scheduler.handle_read_done(
                            now,
                            ReadDone {
                                disk: io.disk,
                                key: io.key,
                                result: Err(format!("disk {} is not attached", io.disk)),
                            },
                        );
                    }
                }
            }
            // A barrier recorded at tag `at` is passed once no read with a tag ≤ `at` is
            // outstanding.
            let oldest = outstanding.first().copied().unwrap_or(u64::MAX);
            for (_, reply) in drains.extract_if(.., |(at, _)| oldest > *at) {
                let _ = reply.send(());
            }
            while let Some(ev) = self.scheduler.poll_event() {
                match ev {
                    Event::Deliver { stream, index, block, anchor, run } => {
                        let _ = self.sender.send(SenderCommand::Block {
                            stream,
                            run,
                            index,
                            block,
                            anchor,
                        });
                    }
                    Event::ReadFailed { stream, key, error } => {
                        warn!(%stream, block = %key, %error, "block read failed");
                        let _ = self.sessions.send(SessionCommand::ReadFailed { stream, error });
                    }
                }
            }
        }
        for (_, w) in self.workers.drain() {
            w.shutdown();
        }
    }
}
