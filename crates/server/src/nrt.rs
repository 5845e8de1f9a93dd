//! A node's non-real-time block IO outside the streams: HTTP delivery's reads and a ladder job's
//! reads of its source and writes of its renditions (XTREAM's non-real-time share: admission
//! keeps `sched.nrt_share_percent` of every disk's time free of streams, and each disk's IO
//! thread serves this IO only within it and after the streams' reads).
//!
//! - A read ([`request_read`]) goes to the scheduler thread as [`SchedCommand::HttpRead`]
//!   when this node holds a copy (answered from the block cache, or read in the share and
//!   failed over to the next copy), and otherwise to the nodes holding its copies, which read
//!   it in their own share (`GET /api/v1/cluster/moves/…`, [`read_remote_block`]).
//! - A write ([`NrtWrites`]) goes to the reorganiser, which owns the disks' non-real-time
//!   writes ([`ReorgCommand::ServeWrite`]: verified, then written durably in the share), or to
//!   the node owning the disk (`PUT /api/v1/cluster/moves/…`).
//! - [`spool_source`]: an object's source file (an MP4 or Matroska object keeps its file in
//!   its source blocks), read block by block in the share into a local file: what a ladder job
//!   on any node of a cluster encodes.

use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Weak};

use isochron_base::{BlockIndex, BlockKey, DiskId, IoFailure, IoFailureKind, Replicas};
use isochron_dataplane::sched_thread::SchedCommand;
use isochron_dataplane::sender::SharedBlock;
use isochron_diskio::Store;
use isochron_diskio::store::{CopyWriter, StoreError, read_remote_block};
use isochron_node::ObjectEntry;
use tokio::sync::{mpsc, oneshot};

use crate::reorg::ReorgCommand;

/// Where a block read answers.
pub type ReadReply = oneshot::Receiver<Result<SharedBlock, IoFailure>>;

/// Asks for block `index` of `entry`'s object in the disks' non-real-time share; the block (or
/// every copy's error) comes on the receiver. An error here: the object has no such block, or
/// the scheduler thread has stopped.
pub fn request_read(
    store: &Store,
    sched: &crossbeam_channel::Sender<SchedCommand>,
    entry: &ObjectEntry,
    index: usize,
) -> Result<ReadReply, String> {
    let name = &entry.record.name;
    let planned =
        entry.planned(index).ok_or_else(|| format!("object {name:?} has no block {index}"))?;
    let key = BlockKey { object: entry.record.id, index: BlockIndex(index as u32) };
    let (tx, rx) = oneshot::channel();
    // The copies this node holds, replica 0 first (every copy on a single node).
    let mut local: Option<Replicas> = None;
    for d in planned.copies.iter().filter(|&d| store.is_local(d)) {
        match &mut local {
            None => local = Some(Replicas::single(d)),
            Some(r) => {
                let _ = r.push(d);
            }
        }
    }
    if local.is_none()
        && let Some(remote) = store.remote()
    {
        // A cluster: other nodes own the copies' disks and read the block in their
        // non-real-time share; the next copy's node is asked when one fails.
        let copies = planned.copies;
        tokio::task::spawn_blocking(move || {
            let mut errors = Vec::new();
            for disk in copies.iter() {
                match read_remote_block(Some(&*remote), disk, key).map(Arc::new) {
                    Ok(b) => {
                        let _ = tx.send(Ok(b));
                        return;
                    }
                    Err(e) => errors.push(IoFailure::from(e)),
                }
            }
            let what = format!("reading block {key}");
            let _ = tx.send(Err(IoFailure::exhausted(what, &errors)));
        });
        return Ok(rx);
    }
    let copies = local.unwrap_or(planned.copies);
    sched
        .send(SchedCommand::HttpRead { copies, key, reply: tx })
        .map_err(|_| "the scheduler thread has stopped".to_string())?;
    Ok(rx)
}

/// Why an object's source could not be spooled.
#[derive(Debug, thiserror::Error)]
pub enum SpoolError {
    /// The object keeps no source file (an MPEG-TS object is its own source: its packets).
    #[error("object {0:?} keeps no source file")]
    NoSource(String),
    /// A block could not be read from any copy.
    #[error("object {name:?}, block {index}: {error}")]
    Read {
        /// The object.
        name: String,
        /// The block.
        index: usize,
        /// Why.
        error: String,
    },
    /// The local file could not be written.
    #[error("{}: {source}", path.display())]
    Write {
        /// The file.
        path: std::path::PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
}

/// How many blocks a spool keeps asked for at once.
const SPOOL_AHEAD: usize = 4;

/// Writes the source file of `entry`'s object (an MP4 or Matroska object's file, byte for
/// byte) to `out`, reading its source blocks in the non-real-time share; returns its length.
/// Runs on a blocking thread (it waits for each block).
pub fn spool_source(
    store: &Store,
    sched: &crossbeam_channel::Sender<SchedCommand>,
    entry: &ObjectEntry,
    out: &Path,
) -> Result<u64, SpoolError> {
    let name = entry.record.name.clone();
    let (first, blocks) = entry.record.source_blocks();
    if blocks.is_empty() || entry.record.media.is_none() {
        return Err(SpoolError::NoSource(name));
    }
    let lengths: Vec<usize> = blocks.iter().map(|b| b.payload_bytes as usize).collect();
    let write_err = |source| SpoolError::Write { path: out.to_path_buf(), source };
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).map_err(write_err)?);
    let read_err =
        |index: usize, error: String| SpoolError::Read { name: name.clone(), index, error };
    let mut asked = std::collections::VecDeque::new();
    let mut next = 0;
    let mut written = 0u64;
    for (i, &len) in lengths.iter().enumerate() {
        while next < lengths.len() && next < i + SPOOL_AHEAD {
            let rx = request_read(store, sched, entry, first + next)
                .map_err(|e| read_err(first + next, e))?;
            asked.push_back(rx);
            next += 1;
        }
        let rx = asked.pop_front().ok_or_else(|| read_err(first + i, "not asked".into()))?;
        let block = rx
            .blocking_recv()
            .map_err(|_| read_err(first + i, "the scheduler thread dropped the read".into()))?
            .map_err(|e| read_err(first + i, e.to_string()))?;
        let payload = block.payload();
        let bytes = payload.get(..len).ok_or_else(|| {
            let held = payload.len();
            read_err(first + i, format!("holds {held} payload bytes, the catalog says {len}"))
        })?;
        file.write_all(bytes).map_err(write_err)?;
        written += bytes.len() as u64;
    }
    file.into_inner().map_err(|e| write_err(e.into_error()))?.sync_all().map_err(write_err)?;
    Ok(written)
}

/// Writes a new object's block copies in the disks' non-real-time share: this node's disks
/// through the reorganiser, other nodes' through their `moves` endpoint. Used from blocking
/// threads (each write waits for its answer).
pub struct NrtWrites {
    /// The store (which disks are here, the route to the others).
    pub store: Weak<Store>,
    /// The reorganiser, which owns this node's non-real-time writes.
    pub reorg: mpsc::UnboundedSender<ReorgCommand>,
}

impl CopyWriter for NrtWrites {
    fn write_copy(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), StoreError> {
        let closed = || IoFailure::new(IoFailureKind::Closed, "the server is stopping");
        let failed = |failure| StoreError::Remote { key, disk, failure };
        let store = self.store.upgrade().ok_or_else(|| failed(closed()))?;
        if !store.is_local(disk) {
            let remote = store.remote().ok_or(StoreError::DiskNotOpen { key, disk })?;
            return remote.write_block_nrt(disk, key, bytes).map_err(failed);
        }
        let (reply, rx) = oneshot::channel();
        let cmd = ReorgCommand::ServeWrite { disk, key, bytes: bytes.to_vec(), reply };
        self.reorg.send(cmd).map_err(|_| failed(closed()))?;
        rx.blocking_recv().map_err(|_| failed(closed()))?.map_err(failed)
    }
}
