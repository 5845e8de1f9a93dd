//! One IO thread per disk (DESIGN §2.6).
//!
//! Why a thread per disk: a disk does one thing at a time, so a thread that owns it gives natural
//! per-disk queueing and a per-disk service time to measure; blocking `O_DIRECT` reads there never
//! stall the async runtime or the scheduler (moonfire-nvr's reasoning for its per-disk writer
//! threads). The thread is fed by a closed [`IoCommand`] enum over one channel and reports each
//! read to a callback, so it owns no state anyone else touches.
//!
//! The queue is unbounded and strictly FIFO: the time-cycle scheduler (`isochron-sched`) decides
//! what each disk reads in a cycle and bounds what it submits. This module does not reorder,
//! deduplicate or cache.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use isochron_base::{BlockKey, DiskId};
use isochron_store::Block;

use crate::{AlignedBuf, DiskDir, DiskError};

/// A command for a disk's IO thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCommand {
    /// Read and verify one block; the result comes back as a [`ReadDone`] carrying `tag`.
    Read {
        /// The block to read.
        key: BlockKey,
        /// An opaque value returned with the result (e.g. the request's deadline slot).
        tag: u64,
    },
    /// Stop after the commands queued before this one.
    Shutdown,
}

/// The outcome of one [`IoCommand::Read`].
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
    /// Wall-clock time the read took on this thread (open, read, verify), excluding queueing.
    pub service: Duration,
}

/// A disk's IO thread.
#[derive(Debug)]
pub struct IoWorker {
    id: DiskId,
    tx: Sender<IoCommand>,
    queued: Arc<AtomicUsize>,
    thread: Option<JoinHandle<()>>,
}

impl IoWorker {
    /// Starts the IO thread of `disk` (named `isochron-disk-<id>`). Every read's result is passed
    /// to `on_done` on that thread, so `on_done` should only hand it on (e.g. send it over a
    /// channel).
    pub fn spawn(
        disk: Arc<DiskDir>,
        id: DiskId,
        on_done: Box<dyn Fn(ReadDone) + Send>,
    ) -> std::io::Result<Self> {
        debug_assert_eq!(
            disk.id(),
            id,
            "IoWorker spawned for {} with id {id}",
            disk.path().display()
        );
        let (tx, rx) = crossbeam_channel::unbounded();
        let queued = Arc::new(AtomicUsize::new(0));
        let thread = thread::Builder::new().name(format!("isochron-disk-{id}")).spawn({
            let queued = Arc::clone(&queued);
            move || run(&disk, id, &rx, &queued, &*on_done)
        })?;
        Ok(Self { id, tx, queued, thread: Some(thread) })
    }

    /// The disk this worker reads.
    #[must_use]
    pub fn disk(&self) -> DiskId {
        self.id
    }

    /// Queues a command. Never blocks: the queue is unbounded (the scheduler bounds what it
    /// submits). If the thread has died (its callback panicked), the command is dropped and an
    /// error is logged.
    pub fn submit(&self, cmd: IoCommand) {
        if matches!(cmd, IoCommand::Read { .. }) {
            self.queued.fetch_add(1, Ordering::Relaxed);
        }
        if let Err(e) = self.tx.send(cmd) {
            if matches!(cmd, IoCommand::Read { .. }) {
                self.queued.fetch_sub(1, Ordering::Relaxed);
            }
            tracing::error!(disk = %self.id, cmd = ?e.into_inner(), "IO thread is gone; command dropped");
        }
    }

    /// Reads submitted and not yet completed (queued or in service).
    #[must_use]
    pub fn queue_len(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Stops the thread after the commands already queued, and waits for it.
    pub fn shutdown(mut self) {
        self.stop();
    }

    fn stop(&mut self) {
        let Some(thread) = self.thread.take() else { return };
        // A send error means the thread already exited; joining still reports its panic.
        let _ = self.tx.send(IoCommand::Shutdown);
        if thread.thread().id() == thread::current().id() {
            return; // Dropped from its own callback: cannot join itself.
        }
        if thread.join().is_err() {
            tracing::error!(disk = %self.id, "IO thread panicked");
        }
    }
}

impl Drop for IoWorker {
    /// Same as [`IoWorker::shutdown`].
    fn drop(&mut self) {
        self.stop();
    }
}

fn run(
    disk: &DiskDir,
    id: DiskId,
    rx: &Receiver<IoCommand>,
    queued: &AtomicUsize,
    on_done: &dyn Fn(ReadDone),
) {
    tracing::debug!(disk = %id, path = %disk.path().display(), "IO thread started");
    while let Ok(cmd) = rx.recv() {
        match cmd {
            IoCommand::Read { key, tag } => {
                let start = Instant::now();
                let result = disk.read_block(key).map(Arc::new);
                let service = start.elapsed();
                queued.fetch_sub(1, Ordering::Relaxed);
                if let Err(e) = &result {
                    tracing::warn!(disk = %id, %key, error = %e, "block read failed");
                }
                on_done(ReadDone { disk: id, key, tag, result, service });
            }
            IoCommand::Shutdown => break,
        }
    }
    tracing::debug!(disk = %id, "IO thread stopped");
}

#[cfg(test)]
mod tests {
    use isochron_base::{BlockIndex, Gsn, ObjectId};

    use super::*;

    fn encode_block(key: BlockKey, packets: u32) -> Vec<u8> {
        crate::testutil::encode_block(key, Gsn(0), packets)
    }

    #[test]
    fn reads_in_order_and_reports() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskDir::create(dir.path(), 5, DiskId(3)).unwrap());
        let keys: Vec<BlockKey> =
            (0..8).map(|i| BlockKey::new(ObjectId(1), BlockIndex(i))).collect();
        for k in &keys {
            disk.write_block(*k, &encode_block(*k, 4)).unwrap();
        }
        let (tx, rx) = crossbeam_channel::unbounded();
        let worker = IoWorker::spawn(
            Arc::clone(&disk),
            DiskId(3),
            Box::new(move |done| tx.send(done).unwrap()),
        )
        .unwrap();
        assert_eq!(worker.disk(), DiskId(3));
        for (tag, k) in keys.iter().enumerate() {
            worker.submit(IoCommand::Read { key: *k, tag: tag as u64 });
        }
        let missing = BlockKey::new(ObjectId(2), BlockIndex(0));
        worker.submit(IoCommand::Read { key: missing, tag: 99 });
        for (tag, k) in keys.iter().enumerate() {
            let done = rx.recv_timeout(Duration::from_secs(10)).unwrap();
            assert_eq!((done.disk, done.key, done.tag), (DiskId(3), *k, tag as u64));
            let block = done.result.unwrap();
            assert_eq!(block.header().key, *k);
            assert_eq!(block.packet_count(), 4);
        }
        let done = rx.recv_timeout(Duration::from_secs(10)).unwrap();
        assert_eq!(done.tag, 99);
        assert!(matches!(done.result, Err(DiskError::BlockMissing { .. })));
        assert_eq!(worker.queue_len(), 0);
        worker.shutdown();
        // The callback (and its sender) went with the thread.
        assert!(rx.recv_timeout(Duration::from_secs(1)).is_err());
    }

    #[test]
    fn shutdown_drains_queue_and_drop_joins() {
        let dir = tempfile::tempdir().unwrap();
        let disk = Arc::new(DiskDir::create(dir.path(), 5, DiskId(0)).unwrap());
        let k = BlockKey::new(ObjectId(1), BlockIndex(0));
        disk.write_block(k, &encode_block(k, 1)).unwrap();
        let count = Arc::new(AtomicUsize::new(0));
        let worker = IoWorker::spawn(Arc::clone(&disk), DiskId(0), {
            let count = Arc::clone(&count);
            Box::new(move |done| {
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
}
