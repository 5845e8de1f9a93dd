//! One disk of the store: a directory holding an identity file and one file per block.
//!
//! Why a directory per disk and a file per block: it works on any filesystem and mount point,
//! needs no allocator of our own, and lets an operator inspect a disk with `ls`. Yima's placement
//! decides *which* disk holds a block; where the block sits *within* the disk is the filesystem's
//! business.
//!
//! # Layout
//!
//! ```text
//! <disk>/isochron-disk.json                       {"store_id": …, "disk_id": …, "format": 1}
//! <disk>/blocks/<object id, 16 hex>/<block index, 8 hex>.blk
//! <disk>/blocks/<object id, 16 hex>/<block index, 8 hex>.blk.tmp   (a write in progress)
//! ```
//!
//! The identity file ties the directory to one store and one disk id, so a mis-mounted or
//! mis-configured disk is refused instead of silently serving (or overwriting) another store's
//! blocks.
//!
//! # Crash safety of writes
//!
//! [`DiskDir::write_block`] writes `<index>.blk.tmp`, `fsync`s it, renames it over
//! `<index>.blk`, then `fsync`s the object directory (and, when it had to create the object
//! directory, `blocks/` too). After a crash a block file is therefore either absent or complete
//! (its checksum proves it); a leftover `.tmp` file is garbage that `fsck` may delete. The catalog
//! entry of an object is written only after all its blocks, so a crash during ingest leaves
//! orphan blocks, never a catalog entry pointing at missing ones.
//!
//! # Reads
//!
//! [`DiskDir::read_block`] opens the block file with `O_DIRECT` (open(2)): reads then
//! cost what the disk costs, so the disk profile and the admission test stay honest, and the
//! kernel page cache does not compete with our own block cache. Filesystems that refuse
//! `O_DIRECT` (tmpfs, some overlays) answer `EINVAL`; the disk then falls back, once and with a
//! warning, to buffered reads followed by `posix_fadvise(POSIX_FADV_DONTNEED)`. Every read verifies
//! the block's checksum and key.
//!
//! # Emulated disks
//!
//! A disk may carry a [`DiskModel`] (Gennart, Messerli, Hersch, "Performances of multiprocessor
//! multidisk architectures for continuous media storage", §3.2 "Disk modeling"): then every block
//! read and write takes at least a latency drawn from the model's density (mean `m`, sd `m/√2`)
//! plus `len / rate`. The real IO is done first and the calling thread sleeps the remainder, with
//! the disk held, so concurrent users of one emulated disk queue as on a real one. Back-to-back
//! IOs are timed on the disk's own clock (each starts when the previous one's service time
//! ended, not when the host woke from it), so a loaded host's oversleeping does not slow the
//! emulated disk down. The latency
//! generator is seeded from the disk id, so runs are reproducible. This lets tests and demos turn
//! directories on one fast SSD into a cluster of slow disks (reorganisation under load, the
//! non-real-time share of [`IoWorker`](crate::IoWorker)s).
//!
//! This module does not decide what to read when: that is the scheduler's job, through the
//! per-disk [`IoWorker`](crate::IoWorker).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use isochron_base::mix::{SplitMix64, hash_words};
use isochron_base::{BlockIndex, BlockKey, Bytes, DiskId, IoFailure, IoFailureKind, ObjectId};
use isochron_store::{Block, BlockError, DiskModel};
use serde::{Deserialize, Serialize};

use crate::AlignedBuf;

/// Name of the identity file at the root of a disk.
pub const IDENTITY_FILE: &str = "isochron-disk.json";
/// The disk layout version written into the identity file.
pub const DISK_FORMAT: u32 = 1;
/// Directory under the disk root that holds the block files.
pub const BLOCKS_DIR: &str = "blocks";
const BLOCK_EXT: &str = "blk";
const TMP_SUFFIX: &str = ".tmp";

/// Errors of disk IO. Every variant names the disk, and the block or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    /// A filesystem operation failed.
    #[error("disk {disk}: cannot {op} {path}: {source}")]
    Io {
        /// The disk.
        disk: DiskId,
        /// What was being done ("open", "read", "rename", …).
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// The directory has no identity file.
    #[error("{path} is not an isochron disk (no {IDENTITY_FILE})")]
    NotADisk {
        /// The directory.
        path: PathBuf,
    },
    /// The identity file cannot be parsed.
    #[error("{path}: unreadable disk identity: {reason}")]
    BadIdentity {
        /// The identity file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The directory belongs to another store.
    #[error(
        "{path} belongs to another isochron store ({found:016x}; this store is {expected:016x})"
    )]
    ForeignStore {
        /// The directory.
        path: PathBuf,
        /// The store id in the identity file.
        found: u64,
        /// This store's id.
        expected: u64,
    },
    /// The directory is another disk of this store.
    #[error("{path} is disk {found} of this store, not disk {expected}")]
    WrongDisk {
        /// The directory.
        path: PathBuf,
        /// The disk id in the identity file.
        found: DiskId,
        /// The disk id expected there.
        expected: DiskId,
    },
    /// The disk was written by a newer isochron.
    #[error("{path}: disk format {found} is newer than this build supports ({DISK_FORMAT})")]
    UnsupportedFormat {
        /// The directory.
        path: PathBuf,
        /// The format in the identity file.
        found: u32,
    },
    /// The block file does not exist.
    #[error("block {key} on disk {disk}: missing ({path})")]
    BlockMissing {
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
        /// Where it should be.
        path: PathBuf,
    },
    /// The block file exists but is corrupt (checksum, format or key).
    #[error("block {key} on disk {disk}: {source} ({path})")]
    Corrupt {
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        source: BlockError,
    },
    /// A block on another cluster node's disk could not be read through that node.
    #[error("block {key} on disk {disk} (another node's): {failure}")]
    Remote {
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
        /// What the node (or the network) said.
        failure: IoFailure,
    },
    /// A queued non-real-time command was not run because its IO thread was shut down.
    #[error("block {key} on disk {disk}: cancelled (the disk's IO thread stopped)")]
    Cancelled {
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
    },
    /// [`DiskDir::write_block`] was given bytes that are not a valid block with that key.
    #[error("refusing to write block {key} to disk {disk}: {source}")]
    InvalidBlock {
        /// The disk.
        disk: DiskId,
        /// The block.
        key: BlockKey,
        /// What is wrong with the bytes.
        source: BlockError,
    },
}

impl DiskError {
    /// The kind of failure, as the threads and crates it crosses decide on it.
    #[must_use]
    pub fn kind(&self) -> IoFailureKind {
        match self {
            Self::BlockMissing { .. } => IoFailureKind::Missing,
            Self::Corrupt { .. } | Self::InvalidBlock { .. } => IoFailureKind::Corrupt,
            Self::Remote { .. } => IoFailureKind::Remote,
            Self::Cancelled { .. } => IoFailureKind::Cancelled,
            Self::Io { .. }
            | Self::NotADisk { .. }
            | Self::BadIdentity { .. }
            | Self::ForeignStore { .. }
            | Self::WrongDisk { .. }
            | Self::UnsupportedFormat { .. } => IoFailureKind::Os,
        }
    }
}

impl From<DiskError> for IoFailure {
    fn from(e: DiskError) -> Self {
        Self::new(e.kind(), e.to_string())
    }
}

/// The identity file's contents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    store_id: u64,
    disk_id: u16,
    format: u32,
}

/// A block file found by [`DiskDir::list_blocks`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFile {
    /// The block, from the file's name.
    pub key: BlockKey,
    /// The file.
    pub path: PathBuf,
    /// The file's size.
    pub len: Bytes,
}

/// A block file's bytes as read, not yet verified ([`DiskDir::read_raw`]).
#[derive(Debug)]
pub struct RawBlock {
    disk: DiskId,
    key: BlockKey,
    path: PathBuf,
    buf: AlignedBuf,
}

impl RawBlock {
    /// Parses and verifies the bytes (format, key, checksum): the CPU half of
    /// [`DiskDir::read_block`].
    pub fn verify(self) -> Result<Block<AlignedBuf>, DiskError> {
        let Self { disk, key, path, buf } = self;
        Block::parse(buf, Some(key)).map_err(|source| DiskError::Corrupt {
            disk,
            key,
            path,
            source,
        })
    }
}

/// How much a disk holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Number of block files.
    pub blocks: u64,
    /// Their total size.
    pub bytes: Bytes,
}

/// One disk directory of a store.
#[derive(Debug)]
pub struct DiskDir {
    path: PathBuf,
    store_id: u64,
    id: DiskId,
    /// Whether reads try `O_DIRECT`.
    direct: AtomicBool,
    /// The emulation model and its latency generator, for an emulated disk. Held for the whole
    /// of an emulated IO (one IO at a time, as on a real disk).
    emulation: Mutex<Option<Emulation>>,
}

/// An emulated disk's model and latency generator.
#[derive(Debug)]
struct Emulation {
    model: DiskModel,
    rng: SplitMix64,
    /// The last IO's end on the disk's own clock, and when its caller actually woke.
    last: Option<(Instant, Instant)>,
}

impl Emulation {
    /// A uniform sample in `[0, 1)`.
    fn uniform(&mut self) -> f64 {
        (self.rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// An emulated IO issued within this of the previous one's return counts as queued behind it.
const BACK_TO_BACK: Duration = Duration::from_millis(1);

/// Domain word of the latency generators' seeds.
const EMULATION_SEED: u64 = 0xD15C_E4A1_A7E5_0001;

impl DiskDir {
    /// Makes `path` (created if missing) disk `disk_id` of store `store_id`: writes the identity
    /// file and the `blocks/` directory. Re-creating a disk with the same identity opens it;
    /// a directory that belongs to another store, or is another disk, is refused.
    pub fn create(path: &Path, store_id: u64, disk_id: DiskId) -> Result<Self, DiskError> {
        let io_err = |op, p: &Path| {
            let path = p.to_owned();
            move |source| DiskError::Io { disk: disk_id, op, path, source }
        };
        match Self::open(path, store_id, disk_id) {
            Err(DiskError::NotADisk { .. }) => {}
            other => return other,
        }
        if !path.exists() {
            fs::create_dir_all(path).map_err(io_err("create directory", path))?;
            if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
                sync_dir(parent).map_err(io_err("fsync", parent))?;
            }
        }
        let blocks = path.join(BLOCKS_DIR);
        match fs::create_dir(&blocks) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => {
                return Err(io_err("create directory", &blocks)(e));
            }
            _ => {}
        }
        let identity = Identity { store_id, disk_id: disk_id.0, format: DISK_FORMAT };
        let mut json = serde_json::to_vec_pretty(&identity)
            .map_err(|e| io_err("encode identity for", path)(io::Error::other(e)))?;
        json.push(b'\n');
        let file = path.join(IDENTITY_FILE);
        write_durably(path, &file, &json, |op, p, source| DiskError::Io {
            disk: disk_id,
            op,
            path: p.to_owned(),
            source,
        })?;
        Ok(Self::new(path, store_id, disk_id))
    }

    /// Opens the disk at `path`, checking that its identity file says it is disk `disk_id` of
    /// store `store_id`.
    pub fn open(path: &Path, store_id: u64, disk_id: DiskId) -> Result<Self, DiskError> {
        let file = path.join(IDENTITY_FILE);
        let bytes = match fs::read(&file) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(DiskError::NotADisk { path: path.to_owned() });
            }
            Err(source) => {
                return Err(DiskError::Io { disk: disk_id, op: "read", path: file, source });
            }
        };
        let id: Identity = serde_json::from_slice(&bytes)
            .map_err(|e| DiskError::BadIdentity { path: file, reason: e.to_string() })?;
        if id.format > DISK_FORMAT || id.format == 0 {
            return Err(DiskError::UnsupportedFormat { path: path.to_owned(), found: id.format });
        }
        if id.store_id != store_id {
            return Err(DiskError::ForeignStore {
                path: path.to_owned(),
                found: id.store_id,
                expected: store_id,
            });
        }
        if DiskId(id.disk_id) != disk_id {
            return Err(DiskError::WrongDisk {
                path: path.to_owned(),
                found: DiskId(id.disk_id),
                expected: disk_id,
            });
        }
        Ok(Self::new(path, store_id, disk_id))
    }

    fn new(path: &Path, store_id: u64, id: DiskId) -> Self {
        Self {
            path: path.to_owned(),
            store_id,
            id,
            direct: AtomicBool::new(true),
            emulation: Mutex::new(None),
        }
    }

    /// Makes the disk emulate `model` (or stop emulating, for `None`); see the module docs. The
    /// latency generator restarts from the disk id's seed.
    pub fn set_model(&self, model: Option<DiskModel>) {
        let rng = SplitMix64::new(hash_words(&[EMULATION_SEED, u64::from(self.id.0)]));
        *lock(&self.emulation) = model.map(|model| Emulation { model, rng, last: None });
    }

    /// The emulation model, if the disk is emulated.
    #[must_use]
    pub fn model(&self) -> Option<DiskModel> {
        lock(&self.emulation).as_ref().map(|e| e.model)
    }

    /// Runs `io`; on an emulated disk, holds the disk and sleeps until the model's service time
    /// for `len(&result)` bytes has passed.
    fn emulated<T>(&self, io: impl FnOnce() -> T, len: impl FnOnce(&T) -> u64) -> T {
        let mut guard = lock(&self.emulation);
        let Some(em) = guard.as_mut() else {
            drop(guard);
            return io();
        };
        let arrived = Instant::now();
        // An IO issued as soon as the previous one returned was queued behind it: a real disk
        // starts it when the previous one ends on the disk's clock, not when the host's sleep
        // happened to wake (a loaded or stolen CPU oversleeps; those delays must not add up).
        let start = match em.last {
            Some((ended, woke)) if arrived.saturating_duration_since(woke) < BACK_TO_BACK => ended,
            _ => arrived,
        };
        let out = io();
        let u = em.uniform();
        let end = start + em.model.service_time(len(&out), u);
        if let Some(rest) = end.checked_duration_since(Instant::now()) {
            thread::sleep(rest);
        }
        em.last = Some((end, Instant::now()));
        out
    }

    /// The disk's directory.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The disk's id.
    #[must_use]
    pub fn id(&self) -> DiskId {
        self.id
    }

    /// The id of the store the disk belongs to.
    #[must_use]
    pub fn store_id(&self) -> u64 {
        self.store_id
    }

    /// Whether reads use `O_DIRECT` (false after the filesystem refused it, or when disabled).
    /// Profiles measured without it are affected by the page cache.
    #[must_use]
    pub fn direct_io(&self) -> bool {
        self.direct.load(Ordering::Relaxed)
    }

    /// Enables or disables `O_DIRECT` reads (disabling forces the buffered fallback).
    pub fn set_direct_io(&self, enabled: bool) {
        self.direct.store(enabled, Ordering::Relaxed);
    }

    /// The file of block `key`.
    #[must_use]
    pub fn block_path(&self, key: BlockKey) -> PathBuf {
        self.object_dir(key.object).join(format!("{:08x}.{BLOCK_EXT}", key.index.0))
    }

    /// Durably stores an encoded block (see the module docs for the ordering). The bytes are
    /// parsed first, so a block is never stored under another key or with a bad checksum.
    pub fn write_block(&self, key: BlockKey, bytes: &[u8]) -> Result<(), DiskError> {
        Block::parse(bytes, Some(key)).map_err(|source| DiskError::InvalidBlock {
            disk: self.id,
            key,
            source,
        })?;
        let dir = self.object_dir(key.object);
        match fs::create_dir(&dir) {
            Ok(()) => {
                let blocks = self.path.join(BLOCKS_DIR);
                sync_dir(&blocks).map_err(|e| self.io("fsync", &blocks, e))?;
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(self.io("create directory", &dir, e)),
        }
        self.emulated(
            || write_durably(&dir, &self.block_path(key), bytes, |op, p, e| self.io(op, p, e)),
            |_| bytes.len() as u64,
        )
    }

    /// Reads block `key` with `O_DIRECT` (or the buffered fallback) and verifies it.
    pub fn read_block(&self, key: BlockKey) -> Result<Block<AlignedBuf>, DiskError> {
        self.read_raw(key).and_then(|raw| raw.verify())
    }

    /// Reads block `key`'s file with `O_DIRECT` (or the buffered fallback), unverified: the IO
    /// half of [`DiskDir::read_block`], so that a disk's IO thread can start its next read while
    /// another thread checks this one ([`RawBlock::verify`]).
    pub fn read_raw(&self, key: BlockKey) -> Result<RawBlock, DiskError> {
        let path = self.block_path(key);
        let read =
            self.emulated(|| self.read_file(&path), |r| r.as_ref().map_or(0, |b| b.len() as u64));
        match read {
            Ok(buf) => Ok(RawBlock { disk: self.id, key, path, buf }),
            Err(source) if source.kind() == io::ErrorKind::NotFound => {
                Err(DiskError::BlockMissing { disk: self.id, key, path })
            }
            Err(source) => Err(self.io("read", &path, source)),
        }
    }

    /// Whether a file for block `key` exists (without reading or verifying it, and without the
    /// emulated latency: a directory lookup).
    #[must_use]
    pub fn has_block_file(&self, key: BlockKey) -> bool {
        self.block_path(key).is_file()
    }

    /// Deletes block `key`; returns whether it existed.
    pub fn remove_block(&self, key: BlockKey) -> Result<bool, DiskError> {
        let path = self.block_path(key);
        match fs::remove_file(&path) {
            Ok(()) => {
                let dir = self.object_dir(key.object);
                sync_dir(&dir).map_err(|e| self.io("fsync", &dir, e))?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io("remove", &path, e)),
        }
    }

    /// Deletes every block of `object` on this disk (its directory); returns whether there was
    /// anything.
    pub fn remove_object(&self, object: ObjectId) -> Result<bool, DiskError> {
        let dir = self.object_dir(object);
        match fs::remove_dir_all(&dir) {
            Ok(()) => {
                let blocks = self.path.join(BLOCKS_DIR);
                sync_dir(&blocks).map_err(|e| self.io("fsync", &blocks, e))?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io("remove", &dir, e)),
        }
    }

    /// Every block file on the disk, object by object. Files whose names are not block names
    /// (such as leftover `.tmp` files) are skipped.
    pub fn list_blocks(&self) -> BlockFiles<'_> {
        BlockFiles { disk: self, objects: None, current: None, started: false }
    }

    /// How many block files the disk holds and their total size.
    pub fn usage(&self) -> Result<DiskUsage, DiskError> {
        let mut usage = DiskUsage::default();
        for file in self.list_blocks() {
            let file = file?;
            usage.blocks += 1;
            usage.bytes += file.len;
        }
        Ok(usage)
    }

    /// Leftover temporary files of interrupted writes (`*.tmp` in the object directories and at
    /// the disk root). Only meaningful when no write is in flight on the disk.
    pub fn temp_files(&self) -> Result<Vec<PathBuf>, DiskError> {
        let mut out = Vec::new();
        let scan = |dir: &Path, out: &mut Vec<PathBuf>| -> Result<(), DiskError> {
            let entries = match fs::read_dir(dir) {
                Ok(rd) => rd,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(self.io("list", dir, e)),
            };
            for entry in entries {
                let entry = entry.map_err(|e| self.io("list", dir, e))?;
                if entry.file_name().to_str().is_some_and(|n| n.ends_with(TMP_SUFFIX)) {
                    out.push(entry.path());
                }
            }
            Ok(())
        };
        scan(&self.path, &mut out)?;
        let blocks = self.path.join(BLOCKS_DIR);
        let objects = match fs::read_dir(&blocks) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(self.io("list", &blocks, e)),
        };
        for entry in objects {
            let entry = entry.map_err(|e| self.io("list", &blocks, e))?;
            if entry.file_name().to_str().and_then(parse_object_name).is_some() {
                scan(&entry.path(), &mut out)?;
            }
        }
        out.sort();
        Ok(out)
    }

    /// Deletes a leftover temporary file found by [`DiskDir::temp_files`]; returns whether it
    /// existed. Leaves alone (returning `false`) a path that is not a `*.tmp` file of this disk.
    pub fn remove_temp_file(&self, path: &Path) -> Result<bool, DiskError> {
        let ours = path.starts_with(&self.path)
            && path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(TMP_SUFFIX));
        if !ours {
            return Ok(false);
        }
        match fs::remove_file(path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(self.io("remove", path, e)),
        }
    }

    /// Deletes every block file and object directory (a retired disk's cleanup); keeps the
    /// identity file and the empty `blocks/` directory. Returns the number of block files
    /// deleted.
    pub fn remove_all_blocks(&self) -> Result<u64, DiskError> {
        let mut removed = 0;
        let blocks = self.path.join(BLOCKS_DIR);
        let objects = match fs::read_dir(&blocks) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(self.io("list", &blocks, e)),
        };
        for entry in objects {
            let entry = entry.map_err(|e| self.io("list", &blocks, e))?;
            let Some(object) = entry.file_name().to_str().and_then(parse_object_name) else {
                continue;
            };
            removed += self.list_object(object)?;
            self.remove_object(object)?;
        }
        Ok(removed)
    }

    /// The number of block files of `object` on this disk.
    fn list_object(&self, object: ObjectId) -> Result<u64, DiskError> {
        let dir = self.object_dir(object);
        let entries = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
            Err(e) => return Err(self.io("list", &dir, e)),
        };
        let mut n = 0;
        for entry in entries {
            let entry = entry.map_err(|e| self.io("list", &dir, e))?;
            if entry.file_name().to_str().and_then(parse_block_name).is_some() {
                n += 1;
            }
        }
        Ok(n)
    }

    /// Undoes [`DiskDir::create`] on a disk that holds no blocks: removes the identity file and
    /// the empty `blocks/` directory. Used to roll back a failed store creation.
    pub(crate) fn remove_identity(&self) -> Result<(), DiskError> {
        let file = self.path.join(IDENTITY_FILE);
        fs::remove_file(&file).map_err(|e| self.io("remove", &file, e))?;
        let blocks = self.path.join(BLOCKS_DIR);
        match fs::remove_dir(&blocks) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(self.io("remove", &blocks, e)),
        }
    }

    fn object_dir(&self, object: ObjectId) -> PathBuf {
        self.path.join(BLOCKS_DIR).join(format!("{:016x}", object.0))
    }

    fn io(&self, op: &'static str, path: &Path, source: io::Error) -> DiskError {
        DiskError::Io { disk: self.id, op, path: path.to_owned(), source }
    }

    /// Reads a whole file into an aligned buffer, with `O_DIRECT` unless the disk fell back.
    fn read_file(&self, path: &Path) -> io::Result<AlignedBuf> {
        if self.direct_io() {
            let direct = OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path);
            match direct.and_then(|f| read_all(&f)) {
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.fall_back(&e),
                other => return other,
            }
        }
        let file = File::open(path)?;
        let buf = read_all(&file)?;
        // SAFETY: `file` is open for the duration of the call; the range (0, 0) means "the
        // whole file"; the advice is a hint with no memory-safety effect.
        let rc = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        if rc != 0 {
            tracing::debug!(disk = %self.id, ?path, rc, "posix_fadvise(DONTNEED) failed");
        }
        Ok(buf)
    }

    /// Switches the disk to buffered reads, warning once.
    fn fall_back(&self, cause: &io::Error) {
        if self.direct.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                disk = %self.id,
                path = %self.path.display(),
                error = %cause,
                "the filesystem refuses O_DIRECT; falling back to buffered reads (page cache \
                 effects will show in timings)"
            );
        }
    }
}

/// Iterator over a disk's block files; see [`DiskDir::list_blocks`].
#[derive(Debug)]
pub struct BlockFiles<'a> {
    disk: &'a DiskDir,
    objects: Option<fs::ReadDir>,
    current: Option<(ObjectId, PathBuf, fs::ReadDir)>,
    started: bool,
}

impl Iterator for BlockFiles<'_> {
    type Item = Result<BlockFile, DiskError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            let blocks = self.disk.path.join(BLOCKS_DIR);
            match fs::read_dir(&blocks) {
                Ok(rd) => self.objects = Some(rd),
                Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
                Err(e) => return Some(Err(self.disk.io("list", &blocks, e))),
            }
        }
        loop {
            if let Some((object, dir, entries)) = &mut self.current {
                match entries.next() {
                    Some(Ok(entry)) => {
                        let name = entry.file_name();
                        let Some(index) = name.to_str().and_then(parse_block_name) else {
                            continue;
                        };
                        let path = entry.path();
                        return Some(match entry.metadata() {
                            Ok(m) => Ok(BlockFile {
                                key: BlockKey::new(*object, index),
                                path,
                                len: Bytes(m.len()),
                            }),
                            Err(e) => Err(self.disk.io("stat", &path, e)),
                        });
                    }
                    Some(Err(e)) => return Some(Err(self.disk.io("list", dir, e))),
                    None => self.current = None,
                }
            }
            let entry = match self.objects.as_mut()?.next()? {
                Ok(entry) => entry,
                Err(e) => {
                    let blocks = self.disk.path.join(BLOCKS_DIR);
                    return Some(Err(self.disk.io("list", &blocks, e)));
                }
            };
            let name = entry.file_name();
            let Some(object) = name.to_str().and_then(parse_object_name) else { continue };
            let dir = entry.path();
            match fs::read_dir(&dir) {
                Ok(rd) => self.current = Some((object, dir, rd)),
                Err(e) => return Some(Err(self.disk.io("list", &dir, e))),
            }
        }
    }
}

fn parse_object_name(name: &str) -> Option<ObjectId> {
    (name.len() == 16).then(|| u64::from_str_radix(name, 16).ok()).flatten().map(ObjectId)
}

fn parse_block_name(name: &str) -> Option<BlockIndex> {
    let stem = name.strip_suffix(BLOCK_EXT)?.strip_suffix('.')?;
    (stem.len() == 8).then(|| u32::from_str_radix(stem, 16).ok()).flatten().map(BlockIndex)
}

/// Reads all of `file` into an aligned buffer. With `O_DIRECT` every read is of an aligned length
/// at an aligned offset; block files are multiples of the alignment, so this is one `pread`.
fn read_all(file: &File) -> io::Result<AlignedBuf> {
    let size = usize::try_from(file.metadata()?.len())
        .map_err(|_| io::Error::other("file too large for memory"))?;
    let mut buf = AlignedBuf::for_read(size);
    let mut filled = 0;
    while filled < size {
        let spare = buf.spare_mut();
        let n = file.read_at(&mut spare[filled..], filled as u64)?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    buf.set_len(filled.min(size));
    Ok(buf)
}

/// Writes `bytes` to `path` crash-safely: temp file, fsync, rename, fsync of `dir`.
fn write_durably<E>(
    dir: &Path,
    path: &Path,
    bytes: &[u8],
    err: impl Fn(&'static str, &Path, io::Error) -> E,
) -> Result<(), E> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(TMP_SUFFIX);
    let tmp = PathBuf::from(tmp);
    let mut file = File::create(&tmp).map_err(|e| err("create", &tmp, e))?;
    let written = (|| {
        file.write_all(bytes).map_err(|e| err("write", &tmp, e))?;
        file.sync_all().map_err(|e| err("fsync", &tmp, e))?;
        // The data is on disk: drop it from the page cache, which reads bypass anyway.
        // SAFETY: `file` is open; the advice is a hint with no memory-safety effect.
        unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        fs::rename(&tmp, path).map_err(|e| err("rename", &tmp, e))
    })();
    if written.is_err() {
        // A failed write (a full disk, an IO error) leaves nothing behind.
        let _ = fs::remove_file(&tmp);
    }
    written?;
    sync_dir(dir).map_err(|e| err("fsync", dir, e))
}

/// Makes a directory's entries durable.
fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Locks a mutex, ignoring poisoning: the emulation state is valid at every instant.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use isochron_base::Gsn;

    use super::*;

    fn encode_block(key: BlockKey, packets: u32) -> Vec<u8> {
        crate::testutil::encode_block(key, Gsn(0), packets)
    }

    fn key(o: u64, i: u32) -> BlockKey {
        BlockKey::new(ObjectId(o), BlockIndex(i))
    }

    fn round_trip(disk: &DiskDir) {
        let k = key(7, 12);
        let bytes = encode_block(k, 20);
        disk.write_block(k, &bytes).unwrap();
        assert!(disk.block_path(k).ends_with("blocks/0000000000000007/0000000c.blk"));
        let block = disk.read_block(k).unwrap();
        assert_eq!(block.as_bytes(), &bytes[..]);
        assert_eq!(block.packet_count(), 20);
        assert_eq!(block.as_bytes().as_ptr() as usize % AlignedBuf::ALIGN, 0);
    }

    #[test]
    fn direct_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(0)).unwrap();
        round_trip(&disk);
        // Where the filesystem supports O_DIRECT (a real disk, as /tmp is here), the read must
        // have used it rather than falling back.
        let probe = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECT)
            .open(disk.block_path(key(7, 12)));
        assert_eq!(disk.direct_io(), probe.is_ok());
    }

    #[test]
    fn buffered_fallback_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(0)).unwrap();
        disk.set_direct_io(false);
        round_trip(&disk);
        assert!(!disk.direct_io());
    }

    #[test]
    fn fall_back_is_sticky() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(0)).unwrap();
        disk.fall_back(&io::Error::from_raw_os_error(libc::EINVAL));
        disk.fall_back(&io::Error::from_raw_os_error(libc::EINVAL));
        assert!(!disk.direct_io());
        round_trip(&disk);
    }

    #[test]
    fn corruption_names_the_block() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(2)).unwrap();
        let k = key(7, 12);
        disk.write_block(k, &encode_block(k, 5)).unwrap();
        let path = disk.block_path(k);
        let mut bytes = fs::read(&path).unwrap();
        bytes[500] ^= 0x40;
        fs::write(&path, &bytes).unwrap();
        for direct in [true, false] {
            disk.set_direct_io(direct);
            let err = disk.read_block(k).unwrap_err();
            assert!(matches!(
                err,
                DiskError::Corrupt { source: BlockError::ChecksumMismatch { .. }, .. }
            ));
            let msg = err.to_string();
            assert!(msg.starts_with("block 7/12 on disk 2: checksum mismatch"), "{msg}");
        }
        // A block stored under the wrong name is caught by the key check.
        let other = key(7, 13);
        disk.write_block(k, &encode_block(k, 5)).unwrap();
        fs::copy(disk.block_path(k), disk.block_path(other)).unwrap();
        assert!(matches!(
            disk.read_block(other),
            Err(DiskError::Corrupt { source: BlockError::WrongKey { .. }, .. })
        ));
        assert!(matches!(disk.read_block(key(8, 0)), Err(DiskError::BlockMissing { .. })));
    }

    #[test]
    fn refuses_invalid_writes() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(0)).unwrap();
        let bytes = encode_block(key(1, 1), 3);
        let err = disk.write_block(key(1, 2), &bytes).unwrap_err();
        assert!(matches!(err, DiskError::InvalidBlock { .. }), "{err}");
        assert!(!disk.block_path(key(1, 2)).exists());
    }

    #[test]
    fn identity_checks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d");
        assert!(matches!(DiskDir::open(&path, 1, DiskId(0)), Err(DiskError::NotADisk { .. })));
        DiskDir::create(&path, 0xAA, DiskId(3)).unwrap();
        let json: serde_json::Value =
            serde_json::from_slice(&fs::read(path.join(IDENTITY_FILE)).unwrap()).unwrap();
        assert_eq!(json["store_id"], 0xAA);
        assert_eq!(json["disk_id"], 3);
        assert_eq!(json["format"], 1);
        // Same identity: idempotent.
        DiskDir::create(&path, 0xAA, DiskId(3)).unwrap();
        DiskDir::open(&path, 0xAA, DiskId(3)).unwrap();
        let err = DiskDir::create(&path, 0xBB, DiskId(3)).unwrap_err();
        assert!(matches!(err, DiskError::ForeignStore { found: 0xAA, expected: 0xBB, .. }));
        assert!(err.to_string().contains("belongs to another isochron store"), "{err}");
        assert!(matches!(
            DiskDir::open(&path, 0xAA, DiskId(4)),
            Err(DiskError::WrongDisk { found: DiskId(3), expected: DiskId(4), .. })
        ));
        fs::write(path.join(IDENTITY_FILE), "{\"store_id\": 170, \"disk_id\": 3, \"format\": 9}")
            .unwrap();
        assert!(matches!(
            DiskDir::open(&path, 0xAA, DiskId(3)),
            Err(DiskError::UnsupportedFormat { found: 9, .. })
        ));
        fs::write(path.join(IDENTITY_FILE), "not json").unwrap();
        assert!(matches!(
            DiskDir::open(&path, 0xAA, DiskId(3)),
            Err(DiskError::BadIdentity { .. })
        ));
    }

    #[test]
    fn list_usage_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(0)).unwrap();
        assert_eq!(disk.usage().unwrap(), DiskUsage::default());
        let mut keys = vec![key(1, 0), key(1, 1), key(2, 0), key(0xFFFF_FFFF_FFFF, 0xABCD)];
        let mut total = 0;
        for k in &keys {
            let bytes = encode_block(*k, 3);
            total += bytes.len() as u64;
            disk.write_block(*k, &bytes).unwrap();
        }
        // Strays are skipped.
        fs::write(disk.block_path(key(1, 5)).with_extension("blk.tmp"), b"x").unwrap();
        fs::write(dir.path().join(BLOCKS_DIR).join("README"), b"x").unwrap();
        let mut listed: Vec<BlockKey> = disk.list_blocks().map(|f| f.unwrap().key).collect();
        listed.sort();
        keys.sort();
        assert_eq!(listed, keys);
        assert_eq!(disk.usage().unwrap(), DiskUsage { blocks: 4, bytes: Bytes(total) });
        assert!(disk.remove_block(key(1, 1)).unwrap());
        assert!(!disk.remove_block(key(1, 1)).unwrap());
        assert!(disk.remove_object(ObjectId(1)).unwrap());
        assert!(!disk.remove_object(ObjectId(1)).unwrap());
        assert_eq!(disk.usage().unwrap().blocks, 2);
        assert!(matches!(disk.read_block(key(1, 0)), Err(DiskError::BlockMissing { .. })));
    }

    #[test]
    fn a_failed_write_leaves_no_temp_file() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(0)).unwrap();
        let k = key(1, 0);
        disk.write_block(key(1, 1), &encode_block(key(1, 1), 2)).unwrap();
        // A directory in the block's place: the rename over it fails after the data is written.
        fs::create_dir_all(disk.block_path(k).join("x")).unwrap();
        assert!(disk.write_block(k, &encode_block(k, 2)).is_err());
        assert!(disk.temp_files().unwrap().is_empty(), "{:?}", disk.temp_files());
    }

    #[test]
    fn temp_files_and_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(0)).unwrap();
        assert!(disk.temp_files().unwrap().is_empty());
        for k in [key(1, 0), key(1, 1), key(2, 0)] {
            disk.write_block(k, &encode_block(k, 2)).unwrap();
        }
        let t1 = disk.block_path(key(1, 7)).with_extension("blk.tmp");
        fs::write(&t1, b"partial").unwrap();
        let t2 = dir.path().join("isochron-disk.json.tmp");
        fs::write(&t2, b"{").unwrap();
        assert_eq!(disk.temp_files().unwrap(), vec![t1.clone(), t2.clone()]);
        assert!(!disk.remove_temp_file(&disk.block_path(key(1, 0))).unwrap(), "not a temp file");
        assert!(disk.block_path(key(1, 0)).exists());
        assert!(disk.remove_temp_file(&t1).unwrap());
        assert!(disk.remove_temp_file(&t2).unwrap());
        assert!(!disk.remove_temp_file(&t2).unwrap());
        assert!(disk.temp_files().unwrap().is_empty());
        assert_eq!(disk.remove_all_blocks().unwrap(), 3);
        assert_eq!(disk.usage().unwrap().blocks, 0);
        // The identity survives: the directory is still this disk.
        DiskDir::open(dir.path(), 1, DiskId(0)).unwrap();
    }

    /// An emulated disk takes at least the model's time per IO, reproducibly.
    #[test]
    fn emulated_disk_is_slow_and_reproducible() {
        use std::time::Duration;
        let dir = tempfile::tempdir().unwrap();
        let disk = DiskDir::create(dir.path(), 1, DiskId(4)).unwrap();
        assert_eq!(disk.model(), None);
        // 64 KiB blocks at 2 MiB/s: 31.25 ms of transfer each, plus 0..15 ms of latency.
        let model = DiskModel { mean_seek: Duration::from_millis(5), rate: 2 << 20 };
        disk.set_model(Some(model));
        assert_eq!(disk.model(), Some(model));
        let k = key(1, 0);
        let bytes = encode_block(k, 40);
        assert!(bytes.len() <= 64 << 10);
        let t = Instant::now();
        disk.write_block(k, &bytes).unwrap();
        for _ in 0..3 {
            disk.read_block(k).unwrap();
        }
        let transfer = model.transfer(bytes.len() as u64);
        assert!(t.elapsed() >= transfer * 4, "{:?} < 4 × {transfer:?}", t.elapsed());
        // The latency sequence depends only on the disk id.
        let samples = |d: &DiskDir| {
            let mut em = lock(&d.emulation);
            let em = em.as_mut().unwrap();
            (0..4).map(|_| em.uniform()).collect::<Vec<_>>()
        };
        disk.set_model(Some(model));
        let other = DiskDir::create(&dir.path().join("o"), 1, DiskId(4)).unwrap();
        other.set_model(Some(model));
        assert_eq!(samples(&disk), samples(&other));
        let third = DiskDir::create(&dir.path().join("p"), 1, DiskId(5)).unwrap();
        third.set_model(Some(model));
        assert_ne!(samples(&disk), samples(&third));
        disk.set_model(None);
        assert_eq!(disk.model(), None);
    }

    #[test]
    fn names_parse() {
        assert_eq!(parse_block_name("0000000c.blk"), Some(BlockIndex(12)));
        assert_eq!(parse_block_name("0000000c.blk.tmp"), None);
        assert_eq!(parse_block_name("c.blk"), None);
        assert_eq!(parse_object_name("0000000000000007"), Some(ObjectId(7)));
        assert_eq!(parse_object_name("7"), None);
    }
}
