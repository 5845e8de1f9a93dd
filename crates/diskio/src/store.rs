//! The store: a catalog plus its disks, the facade the CLI and the server use.
//!
//! A store lives in a root directory:
//!
//! ```text
//! <root>/catalog.redb      the catalog (see `RedbCatalog`); its lock makes the store single-process
//! <root>/disk-0/           the default disk, when no disks are configured
//! ```
//!
//! Disks may live anywhere (mount points in production); their paths are kept in the catalog, a
//! relative one being relative to the root, so a store with only relative disk paths can be moved
//! as a whole. A disk may be emulated ([`DiskModel`](isochron_store::DiskModel), Gennart et al.
//! §3.2): its model is kept in
//! the catalog and applied whenever the store is opened.
//!
//! # Writing and removing objects
//!
//! Writing an object (the ingest pipeline, built on this type): take [`Store::ingest_lock`],
//! allocate an id with [`Catalog::allocate_object_id`], pick a seed with [`new_seed`] and
//! [`Store::current_epoch`], write every block with [`Store::write_block`], then insert the
//! record with [`Catalog::insert_object`]. The record goes in last, so a crash leaves orphan block
//! files (which the next [`Store::open`] deletes), never a catalog entry with missing blocks.
//!
//! Removing reverses the order for the same reason: [`Store::remove`] deletes the catalog entry
//! first (atomically: the object disappears for every reader), then the block files.
//!
//! # Online scaling (SCADDAR)
//!
//! Adding or removing a disk ([`Store::add_disk`], [`Store::remove_disk`]) appends the operation
//! to the placement log in one catalog transaction, which makes the new epoch **pending**:
//! readers keep using the **active** epoch ([`replicas_active`]) while the blocks whose disk
//! changes ([`Store::reorg_moves`], Goel et al. ICDE 2002: only those) are copied
//! ([`Store::copy_block`] here, or non-real-time IO through the [`IoWorker`](crate::IoWorker)s in
//! the server). [`Store::flip`] checks every copy and then makes the pending epoch active in one
//! transaction; [`Store::delete_sources`] removes what the flip made garbage.
//! [`Store::reorganize`] does all of it offline. Every step is ordered so that a crash at any
//! instant leaves a state the next start completes or rolls back ([`Store::recover`], run by
//! [`Store::open`]); `docs/design/scaling.md` has the argument.
//!
//! # Replication
//!
//! A store keeps `store.replication` = K copies of every block ([`Store::replication`], fixed
//! by [`Store::create_with`]; Yima §2.1 keeps physical and logical disks apart "to support fault
//! tolerance"), on K distinct disks that are a pure function of the placement seed
//! ([`Store::replicas`], `isochron_store::replica`). [`Store::write_block`] writes every copy
//! before an object is committed; a reorganisation moves every copy whose disk changes and
//! deletes only files no copy at the active epoch uses; [`Store::read_block_sync`] and
//! [`Store::copy_block`] fall back to another copy; `fsck` checks and repairs every copy.
//! `docs/design/replication.md` has the design.
//!
//! # Concurrency
//!
//! A `Store` is shared (`Arc<Store>`) between the server's threads. The metadata is behind a
//! lock and changed only by the scaling operations, which are serialised among themselves. An
//! object's `first_epoch` must be the log's current epoch when it is committed; so that an
//! addition or removal cannot slip in between, writers of new objects hold
//! [`Store::ingest_lock`] (shared) from choosing the epoch to the commit, and [`Store::add_disk`]
//! and [`Store::remove_disk`] take it exclusively (they wait for ingests in progress).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use isochron_base::{
    BlockIndex, BlockKey, Bytes, DiskId, IoFailure, IoFailureKind, MAX_REPLICAS, ObjectId, Replicas,
};
use isochron_store::block::{BlockSizeError, validate_block_size};
use isochron_store::catalog::{
    Catalog, CatalogError, DiskRecord, DiskSpec, DiskSpecError, DiskState, ObjectRecord,
    STORE_FORMAT_VERSION, StoreMeta, replicas_active,
};
use isochron_store::reorg::{self, Move};
use isochron_store::{
    Block, BlockError, Epoch, PlacementError, PlacementLog, PlacementVariant, ScaleOp,
};

use crate::{AlignedBuf, DiskDir, DiskError, DiskUsage, RedbCatalog};

/// Name of the catalog file in the store root.
pub const CATALOG_FILE: &str = "catalog.redb";
/// Name of the default disk directory, used when a store is created with no disks.
pub const DEFAULT_DISK_DIR: &str = "disk-0";

/// Errors of the store facade.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// There is no store at the root.
    #[error("no isochron store at {root} (no {CATALOG_FILE})")]
    NoStore {
        /// The root looked at.
        root: PathBuf,
    },
    /// A store was to be created where one exists.
    #[error("an isochron store already exists at {root}")]
    AlreadyExists {
        /// The root.
        root: PathBuf,
    },
    /// The store was written by a newer isochron.
    #[error("the store at {root} has format {found}; this build supports {STORE_FORMAT_VERSION}")]
    UnsupportedFormat {
        /// The root.
        root: PathBuf,
        /// The format found.
        found: u32,
    },
    /// The block size is unusable.
    #[error(transparent)]
    BlockSize(#[from] BlockSizeError),
    /// More disks than disk ids.
    #[error("{count} disks given; a store has at most {}", u32::from(u16::MAX) + 1)]
    TooManyDisks {
        /// How many were given (or the store has had).
        count: usize,
    },
    /// The same disk directory was given twice, or is already a disk of the store.
    #[error("disk directory {path} is given twice (or is already a disk of this store)")]
    DuplicateDiskPath {
        /// The directory.
        path: PathBuf,
    },
    /// A disk spec (`PATH[,seek_ms=…][,rate_mib_s=…]`) is invalid.
    #[error(transparent)]
    DiskSpec(#[from] DiskSpecError),
    /// The disk list is invalid for placement, or the operation is refused by it (e.g. the
    /// Faithful variant's randomness budget).
    #[error(transparent)]
    Placement(#[from] PlacementError),
    /// A filesystem operation on the store root failed.
    #[error("cannot {op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
    /// A disk operation failed.
    #[error(transparent)]
    Disk(#[from] DiskError),
    /// A catalog operation failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// No object has that name.
    #[error("no object named {name:?}")]
    NoSuchObject {
        /// The name.
        name: String,
    },
    /// Bytes meant to be a block are not a valid block with the expected key (e.g. a freshly
    /// built block that does not parse back: a bug in the writer).
    #[error("block {key}: not a valid block: {source}")]
    InvalidBlock {
        /// The block.
        key: BlockKey,
        /// What is wrong.
        source: BlockError,
    },
    /// Placement puts a block on a disk that is not open.
    #[error("block {key} is placed on disk {disk}, which is not open in this store")]
    DiskNotOpen {
        /// The block.
        key: BlockKey,
        /// The disk placement chose.
        disk: DiskId,
    },
    /// A scaling operation was asked for while another is pending.
    #[error(
        "a reorganisation (epoch {active} → {pending}) is still pending; let it finish first \
         (`isochron disk list` shows it; `isochron fsck --repair` completes it offline)"
    )]
    ReorgPending {
        /// The active epoch.
        active: Epoch,
        /// The pending epoch.
        pending: Epoch,
    },
    /// A reorganisation step was asked for with none pending.
    #[error("no reorganisation is pending")]
    NoPendingReorg,
    /// The disk id is not one of the store's.
    #[error("the store has no disk {disk}")]
    NoSuchDisk {
        /// The id.
        disk: DiskId,
    },
    /// Only an active disk can be removed.
    #[error("disk {disk} is {state:?}; only an active disk can be removed")]
    DiskNotActive {
        /// The disk.
        disk: DiskId,
        /// Its state.
        state: DiskState,
    },
    /// Removing the disk would leave the store without one.
    #[error("disk {disk} is the store's last disk; it cannot be removed")]
    LastDisk {
        /// The disk.
        disk: DiskId,
    },
    /// A move does not belong to the pending reorganisation (planned for another one).
    #[error(
        "move of block {} from disk {} to disk {} does not belong to the pending reorganisation",
        mv.key, mv.from, mv.to
    )]
    StaleMove {
        /// The move.
        mv: Move,
    },
    /// The epoch cannot flip: some moved blocks have no valid copy on their new disk.
    #[error(
        "cannot make epoch {pending} active: {missing} of {total} moved blocks have no valid copy \
         on their new disk yet (first: block {} on disk {})",
        first.key, first.to
    )]
    FlipIncomplete {
        /// The pending epoch.
        pending: Epoch,
        /// Moves without a valid target copy.
        missing: u64,
        /// All moves.
        total: u64,
        /// The first of them.
        first: Move,
    },
    /// A node's block size differs from the cluster store's.
    #[error(
        "node {node}: block size {ours} differs from the cluster store's {store} \
         (config key store.block_size)"
    )]
    BlockSizeMismatch {
        /// The node.
        node: String,
        /// Its block size.
        ours: Bytes,
        /// The store's.
        store: Bytes,
    },
    /// Writing a block to another node failed.
    #[error("writing block {key} to disk {disk} on its node: {failure}")]
    Remote {
        /// The block.
        key: BlockKey,
        /// The disk.
        disk: DiskId,
        /// What went wrong.
        failure: IoFailure,
    },
    /// The store would keep more copies of every block than it has disks (or, in a cluster, than
    /// the disks an operation would leave).
    #[error(
        "store.replication is {replication}, but {what} {disks} disk(s): every copy of a block \
         needs a disk of its own (config key store.replication)"
    )]
    ReplicationTooHigh {
        /// K.
        replication: u8,
        /// What has too few disks: "the store would have", "the cluster has" ….
        what: &'static str,
        /// How many disks there are (or would be).
        disks: usize,
    },
    /// `store.replication` asks for another number of copies than the store keeps: it is fixed
    /// when the store is created.
    #[error(
        "the store at {root} keeps {} of every block, but store.replication asks for {asked}: \
         the number of copies is fixed when the store is created (config key \
         store.replication; --replication)",
        copies(*store)
    )]
    ReplicationMismatch {
        /// The store root (or the cluster's catalog).
        root: PathBuf,
        /// The store's K.
        store: u8,
        /// The K asked for.
        asked: u8,
    },
    /// Every copy of a block at the active epoch is on an unreachable disk (a dead node's): a
    /// removal of those disks would lose the block.
    #[error(
        "block {key}: every copy (disks {disks}) is on an unreachable disk; removing them \
         would lose it (more nodes are down than store.replication - 1)"
    )]
    NoLiveCopy {
        /// The block.
        key: BlockKey,
        /// Its copies' disks at the active epoch.
        disks: Replicas,
    },
    /// No copy of a block could be read.
    #[error("block {key}: no readable copy on disks {disks}: {errors}")]
    NoValidCopy {
        /// The block.
        key: BlockKey,
        /// The disks tried, replica 0 first.
        disks: Replicas,
        /// What each said.
        errors: String,
    },
    /// A [`FlipReport`] no longer describes the store (another operation came after it).
    #[error("the flip report for epoch {report} is stale (the store is at epoch {current})")]
    StaleFlipReport {
        /// The report's epoch.
        report: Epoch,
        /// The store's current epoch.
        current: Epoch,
    },
}

/// "1 copy", "2 copies".
fn copies(n: u8) -> String {
    if n == 1 { "1 copy".into() } else { format!("{n} copies") }
}

/// Writes one copy of a block somewhere other than straight to the disk: a server's ladder job
/// hands its copies to the disks' non-real-time share (its own disks' IO threads, other nodes'
/// `moves` endpoint), so that its writes never take the streams' time.
pub trait CopyWriter: Send + Sync {
    /// Durably writes `bytes` as block `key` on disk `disk`.
    fn write_copy(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), StoreError>;
}

/// Where blocks on other nodes' disks are written (a cluster node's store; see
/// [`Store::set_remote`]).
pub trait RemoteBlocks: Send + Sync {
    /// Durably writes an encoded block to disk `disk` of the node that owns it (an ingest).
    fn write_block(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), IoFailure>;
    /// Reads a block from disk `disk` of the node that owns it, in that disk's non-real-time
    /// share (the source of a reorganisation's copy). The bytes are the encoded block.
    fn read_block_nrt(&self, disk: DiskId, key: BlockKey) -> Result<Vec<u8>, IoFailure>;
    /// Durably writes a block to disk `disk` of the node that owns it, in that disk's
    /// non-real-time share (the target of a reorganisation's copy); the owner verifies it
    /// (format, key, checksum) before it answers.
    fn write_block_nrt(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), IoFailure>;
}

/// Reads block `key` from disk `disk` of the node that owns it, in that disk's non-real-time
/// share, and verifies it (format, key, checksum): the read of a copy this node does not hold,
/// for a failover or a repair. `remote` is the store's [`Store::remote`] (`None`: no route).
pub fn read_remote_block(
    remote: Option<&dyn RemoteBlocks>,
    disk: DiskId,
    key: BlockKey,
) -> Result<Block<AlignedBuf>, DiskError> {
    let failed = |failure| DiskError::Remote { disk, key, failure };
    let remote = remote.ok_or_else(|| {
        failed(IoFailure::new(IoFailureKind::Remote, "no route to the disk's node"))
    })?;
    let bytes = remote.read_block_nrt(disk, key).map_err(failed)?;
    Block::parse(AlignedBuf::copy_from(&bytes), Some(key))
        .map_err(|e| failed(IoFailure::new(IoFailureKind::Corrupt, e.to_string())))
}

/// The catalog a store keeps its metadata and objects in: the embedded redb file on one node,
/// etcd in a cluster.
pub type DynCatalog = Box<dyn Catalog + Send + Sync>;

/// An open store: its catalog (locked for this process) and its disks.
pub struct Store {
    root: PathBuf,
    catalog: DynCatalog,
    /// A cluster node's name: its disks are those it owns. `None`: every disk is local.
    node: Option<String>,
    /// Writes blocks placed on other nodes' disks.
    remote: RwLock<Option<Arc<dyn RemoteBlocks>>>,
    /// The store metadata as last committed by this process.
    meta: RwLock<StoreMeta>,
    /// The open (non-retired) disks.
    disks: RwLock<BTreeMap<DiskId, Arc<DiskDir>>>,
    /// Serialises the changes of the metadata (add, remove, flip) and source deletion.
    scale: Mutex<()>,
    /// Shared by object writers from choosing the epoch to the commit; exclusive for operations
    /// that push a new epoch, and for recovery and fsck (see the module docs).
    ingest_gate: RwLock<()>,
    /// Disks that cannot be read: in a cluster, the disks of nodes whose lease lapsed
    /// ([`Store::set_unreachable`]). Never a reorganisation's source.
    unreachable: RwLock<BTreeSet<DiskId>>,
}

/// Held by a writer of a new object ([`Store::ingest_lock`]): while any is held, no disk can be
/// added or removed, so the placement log's current epoch stays the object's `first_epoch`.
#[derive(Debug)]
pub struct IngestLock<'a> {
    _guard: RwLockReadGuard<'a, ()>,
}

/// What [`Store::copy_block`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyOutcome {
    /// The block was read from its source and written durably to its target.
    Copied {
        /// Bytes written.
        bytes: u64,
    },
    /// The target already held a valid copy (a copy made before a crash); nothing was done.
    Already,
}

/// What [`Store::flip`] changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FlipReport {
    /// The epoch that was active.
    pub from: Epoch,
    /// The epoch that is now active.
    pub to: Epoch,
    /// The sources of the moved blocks, now garbage: `(disk, block)`.
    pub garbage: Vec<(DiskId, BlockKey)>,
    /// Disks that joined and are now active.
    pub activated: Vec<DiskId>,
    /// Disks that drained and are now retired.
    pub retired: Vec<DiskId>,
}

/// Progress of [`Store::reorganize`], reported after every move.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorgProgress {
    /// Moves done (copied, or found already copied).
    pub moved: u64,
    /// Moves in all.
    pub total: u64,
    /// Bytes copied so far.
    pub bytes: u64,
}

/// What [`Store::reorganize`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReorgReport {
    /// Blocks copied.
    pub moved: u64,
    /// Moves skipped because the target already held a valid copy (from before a crash).
    pub already: u64,
    /// Bytes copied.
    pub bytes: u64,
    /// Source (and misplaced) block files deleted.
    pub deleted: u64,
    /// The epoch active afterwards.
    pub epoch: Epoch,
    /// Wall-clock time taken.
    pub elapsed: Duration,
}

/// What [`Store::recover`] cleaned up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Temporary files of interrupted writes deleted.
    pub temp_files: u64,
    /// Block files of objects not in the catalog deleted (an interrupted ingest or removal).
    pub orphans: u64,
    /// Block files of catalogued objects where neither the active nor the pending placement
    /// puts them deleted (the sources of a flipped reorganisation, blocks past an object's end).
    pub misplaced: u64,
    /// Block files deleted from retired disks.
    pub retired_blocks: u64,
    /// The reorganisation still pending, `(active, pending)`: recovery does not finish it.
    pub pending: Option<(Epoch, Epoch)>,
}

impl RecoveryReport {
    /// Whether anything was deleted.
    #[must_use]
    pub fn cleaned_anything(&self) -> bool {
        self.temp_files + self.orphans + self.misplaced + self.retired_blocks > 0
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("root", &self.root).field("node", &self.node).finish()
    }
}

impl Store {
    /// Creates a store at `root` with the given disks (ids `0..n` in that order) and block size,
    /// using the default placement variant. `disks` may be paths (`&[PathBuf]`) or [`DiskSpec`]s
    /// (paths with emulation models; parse `PATH,seek_ms=…,rate_mib_s=…` strings with
    /// `str::parse::<DiskSpec>()`). No disks means one disk at `root/disk-0`. Relative disk paths
    /// are stored as given and resolved against `root`. On failure, disks initialised by this
    /// call are un-initialised again.
    pub fn create<S: Clone + Into<DiskSpec>>(
        root: &Path,
        disks: &[S],
        block_size: Bytes,
    ) -> Result<Self, StoreError> {
        let specs: Vec<DiskSpec> = disks.iter().cloned().map(Into::into).collect();
        Self::create_with(root, &specs, block_size, PlacementVariant::default(), 1)
    }

    /// [`Store::create`] with disk specs, a placement variant (the Faithful variant is for
    /// fidelity experiments: it accepts a bounded number of scaling operations) and the number of
    /// copies of every block (`store.replication`, 1 to [`MAX_REPLICAS`], at most the number of
    /// disks: [`StoreError::ReplicationTooHigh`] otherwise, before anything is written).
    pub fn create_with(
        root: &Path,
        disks: &[DiskSpec],
        block_size: Bytes,
        variant: PlacementVariant,
        replication: u8,
    ) -> Result<Self, StoreError> {
        validate_block_size(block_size)?;
        if Self::exists(root) {
            return Err(StoreError::AlreadyExists { root: root.to_owned() });
        }
        // Checked before the root is created: a refused store leaves nothing behind.
        let meta = new_meta(root, disks, block_size, variant, None, replication)?;
        fs::create_dir_all(root).map_err(|source| StoreError::Io {
            op: "create directory",
            path: root.to_owned(),
            source,
        })?;
        let store_id = meta.store_id;

        let mut opened: BTreeMap<DiskId, Arc<DiskDir>> = BTreeMap::new();
        let rollback = |opened: &BTreeMap<DiskId, Arc<DiskDir>>| {
            for disk in opened.values() {
                if let Err(e) = disk.remove_identity() {
                    tracing::warn!(error = %e, "could not roll back disk initialisation");
                }
            }
        };
        for rec in &meta.disks {
            match DiskDir::create(&resolve(root, &rec.path), store_id, rec.id) {
                Ok(disk) => {
                    disk.set_model(rec.model);
                    opened.insert(rec.id, Arc::new(disk));
                }
                Err(e) => {
                    rollback(&opened);
                    return Err(e.into());
                }
            }
        }
        let catalog_path = root.join(CATALOG_FILE);
        let catalog = RedbCatalog::create(&catalog_path).and_then(|c| {
            c.put_meta(&meta)?;
            Ok(c)
        });
        let catalog = match catalog {
            Ok(c) => c,
            Err(e) => {
                rollback(&opened);
                if !matches!(e, CatalogError::AlreadyExists { .. }) {
                    let _ = fs::remove_file(&catalog_path);
                }
                return Err(e.into());
            }
        };
        tracing::info!(root = %root.display(), store_id = format_args!("{store_id:016x}"),
            disks = opened.len(), %block_size, ?variant, replication, "created store");
        Ok(Self::assemble(root, Box::new(catalog), meta, opened))
    }

    /// Opens the store at `root`: locks its catalog, opens every disk that is not retired
    /// (checking each disk's identity and applying its emulation model), then runs
    /// [`Store::recover`] to clean up after a crash. A recovery failure is logged, not returned
    /// (the store is usable; `isochron fsck` shows what is left).
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        let store = Self::open_without_recovery(root)?;
        match store.recover() {
            Ok(r) if r.cleaned_anything() => tracing::info!(
                root = %root.display(),
                temp_files = r.temp_files,
                orphans = r.orphans,
                misplaced = r.misplaced,
                retired_blocks = r.retired_blocks,
                "recovered from an interrupted run"
            ),
            Ok(_) => {}
            Err(e) => tracing::warn!(root = %root.display(), error = %e,
                "recovery failed; run `isochron fsck`"),
        }
        Ok(store)
    }

    /// Opens the store at `root` like [`Store::open`] but without [`Store::recover`]: leftovers
    /// of an interrupted run stay where they are (for `fsck` to report, or for tests).
    pub fn open_without_recovery(root: &Path) -> Result<Self, StoreError> {
        if !Self::exists(root) {
            return Err(StoreError::NoStore { root: root.to_owned() });
        }
        let catalog = RedbCatalog::open(&root.join(CATALOG_FILE))?;
        let meta = catalog.meta()?;
        if meta.format_version != STORE_FORMAT_VERSION {
            return Err(StoreError::UnsupportedFormat {
                root: root.to_owned(),
                found: meta.format_version,
            });
        }
        let mut disks = BTreeMap::new();
        for rec in meta.disks.iter().filter(|d| d.state != DiskState::Retired) {
            disks.insert(rec.id, Arc::new(open_disk(root, &meta, rec)?));
        }
        Ok(Self::assemble(root, Box::new(catalog), meta, disks))
    }

    /// Opens a cluster node's part of a shared store (Yima: every node owns its disks, and an
    /// object's blocks are placed over every disk of every node). The metadata and objects are in
    /// `catalog` (etcd); `root` holds this node's disks when their paths are relative.
    ///
    /// The first node creates the store's metadata with its disks. A node already in it opens
    /// the disks it owns (`disks` is then ignored). A new node adds its disks as one SCADDAR
    /// operation; with no object stored yet nothing has to move and the operation takes effect
    /// at once, otherwise it stays pending until the reorganisation has moved the blocks.
    /// A block size other than the store's is refused, naming both, before anything is written;
    /// so is a `replication` other than the store's ([`StoreError::ReplicationMismatch`]). The
    /// first node creates the store with `replication` copies of every block (1 if `None`); until
    /// the cluster has that many disks, objects cannot be written.
    pub fn join(
        root: &Path,
        catalog: DynCatalog,
        node: &str,
        disks: &[DiskSpec],
        block_size: Bytes,
        replication: Option<u8>,
    ) -> Result<Self, StoreError> {
        validate_block_size(block_size)?;
        let check_k = |meta: &StoreMeta| match replication {
            Some(asked) if asked != meta.replication => Err(StoreError::ReplicationMismatch {
                root: PathBuf::from(format!("(cluster catalog; node {node})")),
                store: meta.replication,
                asked,
            }),
            _ => Ok(()),
        };
        let specs = default_disks(disks);
        let mkdir = || {
            fs::create_dir_all(root).map_err(|source| StoreError::Io {
                op: "create directory",
                path: root.to_owned(),
                source,
            })
        };
        let meta = match catalog.meta() {
            Ok(meta) => {
                if meta.block_size != block_size {
                    return Err(StoreError::BlockSizeMismatch {
                        node: node.to_owned(),
                        ours: block_size,
                        store: meta.block_size,
                    });
                }
                check_k(&meta)?;
                mkdir()?;
                if meta.disks.iter().any(|d| d.owner.as_deref() == Some(node)) {
                    meta
                } else {
                    Self::add_node_disks(root, &*catalog, node, &specs, &meta)?
                }
            }
            Err(CatalogError::NoMeta { .. }) => {
                mkdir()?;
                let k = replication.unwrap_or(1);
                match Self::first_node(root, &*catalog, node, disks, block_size, k)? {
                    Some(meta) => meta,
                    // Another node created the store meanwhile: join it.
                    None => {
                        let meta = catalog.meta()?;
                        if meta.block_size != block_size {
                            return Err(StoreError::BlockSizeMismatch {
                                node: node.to_owned(),
                                ours: block_size,
                                store: meta.block_size,
                            });
                        }
                        check_k(&meta)?;
                        Self::add_node_disks(root, &*catalog, node, &specs, &meta)?
                    }
                }
            }
            Err(e) => return Err(e.into()),
        };
        let mut opened = BTreeMap::new();
        for rec in meta
            .disks
            .iter()
            .filter(|d| d.state != DiskState::Retired && d.owner.as_deref() == Some(node))
        {
            opened.insert(rec.id, Arc::new(open_disk(root, &meta, rec)?));
        }
        // This node's disks retired while it was away (it died and the others re-created its
        // copies, docs/design/takeover.md): their block files are garbage.
        for rec in meta
            .disks
            .iter()
            .filter(|d| d.state == DiskState::Retired && d.owner.as_deref() == Some(node))
        {
            match DiskDir::open(&resolve(root, &rec.path), meta.store_id, rec.id) {
                Ok(disk) => {
                    let deleted = disk.remove_all_blocks()?;
                    if deleted > 0 {
                        tracing::info!(%node, disk = %rec.id, deleted,
                            "deleted the block files of a disk retired while this node was away");
                    }
                }
                Err(e) => tracing::debug!(disk = %rec.id, error = %e, "retired disk not cleaned"),
            }
        }
        let mut store = Self::assemble(root, catalog, meta, opened);
        store.node = Some(node.to_owned());
        Ok(store)
    }

    fn first_node(
        root: &Path,
        catalog: &(dyn Catalog + Send + Sync),
        node: &str,
        specs: &[DiskSpec],
        block_size: Bytes,
        replication: u8,
    ) -> Result<Option<StoreMeta>, StoreError> {
        let variant = PlacementVariant::default();
        let meta = new_meta(root, specs, block_size, variant, Some(node), replication)?;
        let store_id = meta.store_id;
        let mut made = Vec::new();
        for rec in &meta.disks {
            made.push(DiskDir::create(&resolve(root, &rec.path), store_id, rec.id)?);
        }
        match catalog.create_meta(&meta) {
            Ok(()) => {}
            Err(CatalogError::AlreadyExists { .. }) => {
                // Lost the race to create the store: these identities name a store that does
                // not exist; the caller joins the one that does.
                for d in made {
                    d.remove_identity()?;
                }
                tracing::info!(%node, "another node created the cluster's store first; joining it");
                return Ok(None);
            }
            Err(e) => return Err(e.into()),
        }
        tracing::info!(%node, store_id = format_args!("{store_id:016x}"), disks = meta.disks.len(),
            %block_size, "created the cluster's store");
        Ok(Some(meta))
    }

    fn add_node_disks(
        root: &Path,
        catalog: &(dyn Catalog + Send + Sync),
        node: &str,
        specs: &[DiskSpec],
        seen: &StoreMeta,
    ) -> Result<StoreMeta, StoreError> {
        // The ids this node will get, and their directories, before the metadata names them.
        let first = seen.next_disk_id().ok_or(StoreError::TooManyDisks { count: specs.len() })?;
        let has_objects = !catalog.objects()?.is_empty();
        let mut add = |meta: &mut StoreMeta| -> Result<(), CatalogError> {
            if meta.pending().is_some() {
                return Err(CatalogError::Invalid {
                    what: "store metadata".into(),
                    reason: format!("node {node} cannot join: a reorganisation is pending"),
                });
            }
            let start = meta.next_disk_id().map_or(u32::MAX, |d| u32::from(d.0));
            let ids: Vec<DiskId> =
                (0..specs.len()).map(|i| DiskId((start as usize + i) as u16)).collect();
            meta.placement
                .push(ScaleOp::Add { disks: ids.clone() })
                .map_err(CatalogError::Placement)?;
            for (id, s) in ids.iter().zip(specs) {
                meta.disks.push(DiskRecord {
                    id: *id,
                    path: s.path.clone(),
                    state: if has_objects { DiskState::Joining } else { DiskState::Active },
                    model: s.model,
                    owner: Some(node.to_owned()),
                });
            }
            if !has_objects {
                // Nothing to move: the new epoch is in force at once.
                meta.active_epoch = meta.placement.current_epoch();
            }
            Ok(())
        };
        // The identity files first: a crash before the metadata names them leaves files a
        // retry reuses. Ids are re-derived under the update; they match unless another node
        // joined in between, in which case the directories are re-stamped below.
        for (i, s) in specs.iter().enumerate() {
            DiskDir::create(&resolve(root, &s.path), seen.store_id, DiskId(first.0 + i as u16))?;
        }
        let meta = catalog.update_meta(&mut add)?;
        for rec in meta.disks.iter().filter(|d| d.owner.as_deref() == Some(node)) {
            let path = resolve(root, &rec.path);
            if DiskDir::open(&path, meta.store_id, rec.id).is_err() {
                DiskDir::create(&path, meta.store_id, rec.id)?;
            }
        }
        tracing::info!(%node, disks = specs.len(), epoch = %meta.placement.current_epoch(),
            pending = meta.pending().is_some(), "node joined the cluster's store");
        Ok(meta)
    }

    /// The cluster node this store belongs to (`None`: a single node, every disk local).
    #[must_use]
    pub fn node(&self) -> Option<&str> {
        self.node.as_deref()
    }

    /// Where blocks placed on other nodes' disks are written.
    pub fn set_remote(&self, remote: Arc<dyn RemoteBlocks>) {
        *write(&self.remote) = Some(remote);
    }

    /// Where blocks on other nodes' disks are read and written, in a cluster.
    #[must_use]
    pub fn remote(&self) -> Option<Arc<dyn RemoteBlocks>> {
        read(&self.remote).clone()
    }

    /// The cluster node that owns disk `id` (`None`: no such disk, or a single node's).
    #[must_use]
    pub fn disk_owner(&self, id: DiskId) -> Option<String> {
        read(&self.meta).disk(id).and_then(|d| d.owner.clone())
    }

    /// Whether disk `id` is open here (on a single node: every disk not retired).
    #[must_use]
    pub fn is_local(&self, id: DiskId) -> bool {
        read(&self.disks).contains_key(&id)
    }

    /// Whether this node runs the pending reorganisation: on a single node whenever one is
    /// pending; in a cluster, the node that owns the joining or draining disks (the node that
    /// joins, or the node being removed). Every other node only serves its copies' reads and
    /// writes.
    ///
    /// When the changing disks are all unreachable (their node is dead,
    /// [`Store::set_unreachable`]), that node cannot coordinate: the survivor with the lowest
    /// name among the owners of the pending epoch's reachable disks does, the same choice on
    /// every node.
    #[must_use]
    pub fn coordinates_pending(&self) -> bool {
        let meta = read(&self.meta);
        if meta.pending().is_none() {
            return false;
        }
        let Some(me) = self.node.as_deref() else { return true };
        let unreachable = read(&self.unreachable);
        let changing: Vec<&DiskRecord> = meta
            .disks
            .iter()
            .filter(|d| matches!(d.state, DiskState::Joining | DiskState::Draining))
            .collect();
        if !changing.is_empty() && changing.iter().all(|d| unreachable.contains(&d.id)) {
            let current = meta.placement.disks(meta.placement.current_epoch());
            let survivor = current
                .iter()
                .filter(|d| !unreachable.contains(d))
                .filter_map(|d| meta.disk(*d).and_then(|r| r.owner.as_deref()))
                .min();
            return survivor == Some(me);
        }
        changing.iter().any(|d| d.owner.as_deref() == Some(me))
    }

    /// Sets the disks that cannot be read (in a cluster: the disks of the nodes whose lease
    /// lapsed). A reorganisation never reads its sources there ([`Store::reorg_sources`]), and a
    /// removal of such disks is refused when a block has no other copy.
    pub fn set_unreachable(&self, disks: BTreeSet<DiskId>) {
        let mut cur = write(&self.unreachable);
        if *cur != disks {
            tracing::info!(disks = ?disks, "unreachable disks");
            *cur = disks;
        }
    }

    /// The disks that cannot be read ([`Store::set_unreachable`]).
    #[must_use]
    pub fn unreachable(&self) -> BTreeSet<DiskId> {
        read(&self.unreachable).clone()
    }

    /// Checks that every block of `objects` has a copy at `meta`'s active epoch on a disk that
    /// is not unreachable (a source for the removal of the unreachable disks): the first block
    /// without one is an error.
    fn check_live_copies(
        &self,
        meta: &StoreMeta,
        objects: &[ObjectRecord],
    ) -> Result<(), StoreError> {
        let unreachable = read(&self.unreachable);
        if unreachable.is_empty() {
            return Ok(());
        }
        let at = meta.active_epoch;
        for rec in objects.iter().filter(|r| r.first_epoch <= at) {
            for i in 0..rec.block_count() {
                let disks = meta.replicas_at(rec, BlockIndex(i), at);
                if disks.iter().all(|d| unreachable.contains(&d)) {
                    let key = BlockKey::new(rec.id, BlockIndex(i));
                    return Err(StoreError::NoLiveCopy { key, disks });
                }
            }
        }
        Ok(())
    }

    /// Where move `mv` of block `rec` reads its copy: `mv.from`, unless that disk is unreachable
    /// (a dead node's), then the first copy at the active epoch on a reachable disk.
    fn source_of(
        &self,
        meta: &StoreMeta,
        rec: &ObjectRecord,
        mv: &Move,
    ) -> Result<DiskId, StoreError> {
        let unreachable = read(&self.unreachable);
        if !unreachable.contains(&mv.from) {
            return Ok(mv.from);
        }
        let active = meta.active_epoch;
        let disks = meta.replicas_at(rec, mv.key.index, active);
        disks
            .iter()
            .find(|d| !unreachable.contains(d))
            .ok_or(StoreError::NoLiveCopy { key: mv.key, disks })
    }

    /// Every move of the pending reorganisation with the disk its copy is read from: `mv.from`,
    /// or, when that disk is unreachable (its node is dead), another copy of the block on a
    /// reachable disk. An error names the first block without one.
    pub fn reorg_sources(&self) -> Result<Vec<(Move, DiskId)>, StoreError> {
        let meta = self.meta();
        let objects = self.catalog.objects()?;
        let by_id: HashMap<ObjectId, &ObjectRecord> = objects.iter().map(|r| (r.id, r)).collect();
        reorg::moves(&meta, &objects)
            .map(|mv| {
                let rec = by_id[&mv.key.object];
                Ok((mv, self.source_of(&meta, rec, &mv)?))
            })
            .collect()
    }

    /// Starts removing cluster node `node` (`isochron node remove`): every disk it owns starts
    /// draining, as one SCADDAR removal (a node is a group of disks), in one update of the
    /// shared metadata. The node itself then copies its blocks to their new disks on the
    /// other nodes and flips the epoch. Refused while another reorganisation is pending, for a
    /// node that owns no active disk, and when no active disk would be left. Returns the
    /// draining disks and the pending epoch.
    ///
    /// When some disks are unreachable (a dead node's, [`Store::set_unreachable`]: the removal
    /// of a dead node re-creates its copies from the others), it is also refused when a block
    /// would have no copy left on a reachable disk.
    pub fn remove_node(&self, node: &str) -> Result<(Vec<DiskId>, Epoch), StoreError> {
        let _scale = lock(&self.scale);
        let objects = self.catalog.objects()?;
        let mut removed = Vec::new();
        let meta = self.catalog.update_meta(&mut |meta: &mut StoreMeta| {
            let invalid =
                |reason: String| CatalogError::Invalid { what: "store metadata".into(), reason };
            if let Some((active, pending)) = meta.pending() {
                return Err(invalid(format!(
                    "a reorganisation is pending (epoch {active} to {pending}); remove node \
                     {node} when it is done"
                )));
            }
            let disks: Vec<DiskId> = meta
                .disks
                .iter()
                .filter(|d| d.state == DiskState::Active && d.owner.as_deref() == Some(node))
                .map(|d| d.id)
                .collect();
            if disks.is_empty() {
                return Err(invalid(format!("node {node} owns no active disk")));
            }
            let current = meta.placement.disks(meta.placement.current_epoch());
            if current.iter().all(|d| disks.contains(d)) {
                return Err(invalid(format!(
                    "node {node} holds the last active disks: nothing would be left"
                )));
            }
            let left = current.iter().filter(|d| !disks.contains(d)).count();
            if left < usize::from(meta.replication) {
                return Err(invalid(format!(
                    "removing node {node} would leave {left} disk(s) for {} copies of every \
                     block (config key store.replication)",
                    meta.replication
                )));
            }
            if let Err(e) = self.check_live_copies(meta, &objects) {
                return Err(invalid(format!("removing node {node}: {e}")));
            }
            meta.placement
                .push(ScaleOp::Remove { disks: disks.clone() })
                .map_err(CatalogError::Placement)?;
            for d in &mut meta.disks {
                if disks.contains(&d.id) {
                    d.state = DiskState::Draining;
                }
            }
            removed = disks;
            Ok(())
        })?;
        let pending = meta.placement.current_epoch();
        tracing::info!(%node, disks = ?removed, epoch = %pending,
            "node draining; reorganisation pending");
        *write(&self.meta) = meta;
        Ok((removed, pending))
    }

    /// Re-reads the metadata another node may have changed (a cluster: a node joined or left);
    /// returns whether it changed.
    pub fn refresh(&self) -> Result<bool, StoreError> {
        // Under the scale lock: metadata read before this node's own flip (or removal) must not
        // overwrite what that flip committed.
        let _scale = lock(&self.scale);
        let meta = self.catalog.meta()?;
        let mut cur = write(&self.meta);
        if *cur == meta {
            return Ok(false);
        }
        *cur = meta;
        Ok(true)
    }

    /// The disks owned by this node (all of them on a single node).
    #[must_use]
    pub fn local_disks(&self) -> BTreeSet<DiskId> {
        let meta = read(&self.meta);
        meta.disks
            .iter()
            .filter(|d| self.node.is_none() || d.owner == self.node)
            .map(|d| d.id)
            .collect()
    }

    fn assemble(
        root: &Path,
        catalog: DynCatalog,
        meta: StoreMeta,
        disks: BTreeMap<DiskId, Arc<DiskDir>>,
    ) -> Self {
        Self {
            root: root.to_owned(),
            catalog,
            node: None,
            remote: RwLock::new(None),
            meta: RwLock::new(meta),
            disks: RwLock::new(disks),
            scale: Mutex::new(()),
            ingest_gate: RwLock::new(()),
            unreachable: RwLock::new(BTreeSet::new()),
        }
    }

    /// Whether a store exists at `root` (it has a catalog file).
    #[must_use]
    pub fn exists(root: &Path) -> bool {
        root.join(CATALOG_FILE).is_file()
    }

    /// The store's root directory.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// A copy of the store metadata as last committed by this process. Its `next_object_id` is
    /// not kept up to date; ask [`Store::catalog`] for the live value.
    #[must_use]
    pub fn meta(&self) -> StoreMeta {
        read(&self.meta).clone()
    }

    /// The block size new objects are cut with.
    #[must_use]
    pub fn block_size(&self) -> Bytes {
        read(&self.meta).block_size
    }

    /// The placement log's current epoch: the `first_epoch` of objects written now (the pending
    /// epoch while a reorganisation is pending). Stable while an [`IngestLock`] is held.
    #[must_use]
    pub fn current_epoch(&self) -> Epoch {
        read(&self.meta).placement.current_epoch()
    }

    /// The epoch readers use.
    #[must_use]
    pub fn active_epoch(&self) -> Epoch {
        read(&self.meta).active_epoch
    }

    /// The pending reorganisation, `(active, pending)` epochs, if any.
    #[must_use]
    pub fn pending(&self) -> Option<(Epoch, Epoch)> {
        read(&self.meta).pending()
    }

    /// The catalog.
    #[must_use]
    pub fn catalog(&self) -> &(dyn Catalog + Send + Sync) {
        &*self.catalog
    }

    /// The open disk `id` (not retired).
    #[must_use]
    pub fn disk(&self, id: DiskId) -> Option<Arc<DiskDir>> {
        read(&self.disks).get(&id).cloned()
    }

    /// The ids of the open disks (active, joining and draining), in order.
    #[must_use]
    pub fn disk_ids(&self) -> Vec<DiskId> {
        read(&self.disks).keys().copied().collect()
    }

    /// The open disks, by id.
    #[must_use]
    pub fn disks(&self) -> Vec<(DiskId, Arc<DiskDir>)> {
        read(&self.disks).iter().map(|(id, d)| (*id, Arc::clone(d))).collect()
    }

    /// Shared lock for a writer of a new object; see [`IngestLock`]. Hold it from reading
    /// [`Store::current_epoch`] for the object's `first_epoch` until its record is committed.
    /// Do not call [`Store::add_disk`] or [`Store::remove_disk`] while holding it (they wait for
    /// it).
    #[must_use]
    pub fn ingest_lock(&self) -> IngestLock<'_> {
        let guard = self.ingest_gate.read().unwrap_or_else(PoisonError::into_inner);
        // A cluster node places a new object with the store's metadata as it is now, not as
        // this node last saw it (another node may have joined since).
        if self.node.is_some()
            && let Err(e) = self.refresh()
        {
            tracing::warn!(error = %e, "could not re-read the store metadata before an ingest");
        }
        IngestLock { _guard: guard }
    }

    /// The disk holding block `index` of `rec` for readers: replica 0 of
    /// [`Store::replicas`] ([`locate_active`](isochron_store::locate_active)).
    #[must_use]
    pub fn locate(&self, rec: &ObjectRecord, index: BlockIndex) -> DiskId {
        self.replicas(rec, index).primary()
    }

    /// Every copy of block `index` of `rec` for readers, replica 0 first
    /// ([`replicas_active`]).
    #[must_use]
    pub fn replicas(&self, rec: &ObjectRecord, index: BlockIndex) -> Replicas {
        replicas_active(&read(&self.meta), rec, index)
    }

    /// The copies of block `index` of `rec` as of placement epoch `epoch`, replica 0 first.
    #[must_use]
    pub fn replicas_at(&self, rec: &ObjectRecord, index: BlockIndex, epoch: Epoch) -> Replicas {
        read(&self.meta).replicas_at(rec, index, epoch)
    }

    /// How many copies of every block the store keeps (`store.replication`).
    #[must_use]
    pub fn replication(&self) -> u8 {
        read(&self.meta).replication
    }

    /// Refuses a `store.replication` other than the store's ([`StoreError::ReplicationMismatch`]):
    /// the number of copies is fixed when the store is created. `None` accepts any.
    pub fn check_replication(&self, asked: Option<u8>) -> Result<(), StoreError> {
        let store = self.replication();
        match asked {
            Some(asked) if asked != store => {
                Err(StoreError::ReplicationMismatch { root: self.root.clone(), store, asked })
            }
            _ => Ok(()),
        }
    }

    /// Refuses to start writing a new object when the current epoch has fewer disks than the
    /// store keeps copies (a cluster whose nodes have not all joined yet).
    pub fn check_can_place(&self) -> Result<(), StoreError> {
        let meta = read(&self.meta);
        let disks = meta.placement.disks(meta.placement.current_epoch()).len();
        if disks < usize::from(meta.replication) {
            return Err(StoreError::ReplicationTooHigh {
                replication: meta.replication,
                what: "the store has",
                disks,
            });
        }
        Ok(())
    }

    /// The disk that holds replica 0 of block `index` of `rec` as of placement epoch `epoch` (a
    /// session planned by another node at the epoch it saw).
    #[must_use]
    pub fn locate_at(&self, rec: &ObjectRecord, index: BlockIndex, epoch: Epoch) -> DiskId {
        read(&self.meta).placement.locate(rec.seed, rec.first_epoch, index, epoch)
    }

    /// Deletes what a flipped reorganisation left on this node's disks, once no stream reads
    /// the old placement any more (a cluster node calls it; a single node deletes the sources
    /// right after the flip, [`Store::delete_sources`]): block files neither the active nor a
    /// pending placement puts where they are ([`Store::remove_misplaced`]), and every block
    /// file of a retired disk, which is then closed. Returns the files deleted and the disks
    /// closed.
    ///
    /// `checked` is the active epoch the caller found no stream reading anything older than.
    /// If another node's flip has come in since (the metadata moved on between that check and
    /// this call), nothing is deleted and `None` is returned: a stream planned at `checked`
    /// still reads the blocks the newer flip moved away.
    ///
    /// `growing` names the objects being recorded now, on this node or another (live feeds,
    /// committed as they grow: `docs/design/live.md`): their blocks past the last commit are
    /// being written and the next commit names them, so they are kept.
    pub fn collect_garbage(
        &self,
        checked: Epoch,
        growing: &BTreeSet<String>,
    ) -> Result<Option<(u64, Vec<DiskId>)>, StoreError> {
        // Under the scale lock: no refresh can bring a newer flip in while this deletes.
        let _scale = lock(&self.scale);
        let meta = self.meta();
        if meta.active_epoch != checked {
            return Ok(None);
        }
        let mut deleted = self.remove_misplaced_in(&meta, growing)?;
        let mut closed = Vec::new();
        for rec in meta.disks.iter().filter(|d| d.state == DiskState::Retired) {
            let disk = write(&self.disks).remove(&rec.id);
            if let Some(d) = disk {
                deleted += d.remove_all_blocks()?;
                tracing::info!(disk = %rec.id, path = %d.path().display(), "disk retired");
                closed.push(rec.id);
            }
        }
        Ok(Some((deleted, closed)))
    }

    /// The disks block `index` of a new object (placed by `seed` and `first_epoch`) is written
    /// to: its copies in `first_epoch`, replica 0 first. For a new object, `first_epoch` is
    /// [`Store::current_epoch`] under an [`IngestLock`].
    #[must_use]
    pub fn place_new(&self, seed: u64, first_epoch: Epoch, index: BlockIndex) -> Replicas {
        read(&self.meta).replicas_of(seed, first_epoch, index, first_epoch)
    }

    /// Durably writes an encoded block of object `rec_id` (placed by `seed` and `first_epoch`)
    /// to every disk placement puts a copy on in `first_epoch` ([`Store::place_new`]); returns
    /// those disks. For a new object, `first_epoch` is [`Store::current_epoch`] under an
    /// [`IngestLock`]. If a copy cannot be written, the copies this call wrote are removed
    /// again (best effort) and the error is returned: a block is either on all its disks or the
    /// object is not committed.
    pub fn write_block(
        &self,
        rec_id: ObjectId,
        seed: u64,
        first_epoch: Epoch,
        index: BlockIndex,
        bytes: &[u8],
    ) -> Result<Replicas, StoreError> {
        self.write_block_via(rec_id, seed, first_epoch, index, bytes, None)
    }

    /// [`Store::write_block`], each copy written by `via` when given (a server's ladder job
    /// writes through the disks' non-real-time share) instead of directly.
    pub fn write_block_via(
        &self,
        rec_id: ObjectId,
        seed: u64,
        first_epoch: Epoch,
        index: BlockIndex,
        bytes: &[u8],
        via: Option<&dyn CopyWriter>,
    ) -> Result<Replicas, StoreError> {
        let key = BlockKey::new(rec_id, index);
        let disks = self.place_new(seed, first_epoch, index);
        let k = usize::from(self.replication());
        if disks.len() < k {
            return Err(StoreError::ReplicationTooHigh {
                replication: self.replication(),
                what: "the store has",
                disks: disks.len(),
            });
        }
        for (i, id) in disks.iter().enumerate() {
            let written = match via {
                Some(w) => w.write_copy(id, key, bytes),
                None => self.write_copy(id, key, bytes),
            };
            if let Err(e) = written {
                for done in disks.iter().take(i) {
                    if let Some(d) = self.disk(done)
                        && let Err(e) = d.remove_block(key)
                    {
                        tracing::warn!(disk = %done, block = %key, error = %e,
                            "could not remove a copy of a block not written everywhere");
                    }
                }
                return Err(e);
            }
        }
        Ok(disks)
    }

    /// Durably writes one copy of a block to disk `id`, here or at the node that owns it.
    fn write_copy(&self, id: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), StoreError> {
        match self.disk(id) {
            Some(disk) => disk.write_block(key, bytes)?,
            None => {
                let remote = read(&self.remote).clone();
                let remote = remote.ok_or(StoreError::DiskNotOpen { key, disk: id })?;
                remote.write_block(id, key, bytes).map_err(|failure| StoreError::Remote {
                    key,
                    disk: id,
                    failure,
                })?;
            }
        }
        Ok(())
    }

    /// Removes the object named `name`: its catalog entry first (atomic), then its block files
    /// on every open disk. Returns the removed record.
    ///
    /// A crash (or an IO error, which is logged) after the first step leaves orphan block files
    /// that no catalog entry refers to; the next [`Store::open`] deletes them. The object itself
    /// is gone either way.
    pub fn remove(&self, name: &str) -> Result<ObjectRecord, StoreError> {
        let rec = self
            .catalog
            .remove_object(name)?
            .ok_or_else(|| StoreError::NoSuchObject { name: name.to_owned() })?;
        for (_, disk) in self.disks() {
            if let Err(e) = disk.remove_object(rec.id) {
                tracing::warn!(object = %rec.name, id = %rec.id, error = %e,
                    "could not delete block files of a removed object; fsck will reclaim them");
            }
        }
        Ok(rec)
    }

    /// Reads and verifies block `index` of `rec` on the calling thread, from where readers find
    /// it (for tools and tests; the server reads through [`IoWorker`](crate::IoWorker)s): replica
    /// 0, or the next copy if that one is missing, corrupt or not the catalog's.
    pub fn read_block_sync(
        &self,
        rec: &ObjectRecord,
        index: BlockIndex,
    ) -> Result<Block<AlignedBuf>, StoreError> {
        let key = BlockKey::new(rec.id, index);
        let disks = self.replicas(rec, index);
        let expected = rec.blocks.get(index.0 as usize).map(|b| b.checksum);
        let mut errors = Vec::new();
        for id in disks.iter() {
            let Some(disk) = self.disk(id) else {
                errors.push(format!("disk {id}: not open here"));
                continue;
            };
            match disk.read_block(key) {
                Ok(b) if expected.is_none_or(|c| b.header().checksum == c) => return Ok(b),
                Ok(b) => errors.push(format!(
                    "disk {id}: checksum {:#018x} is not the catalog's",
                    b.header().checksum
                )),
                Err(e) if disks.len() == 1 => return Err(e.into()),
                Err(e) => errors.push(format!("disk {id}: {e}")),
            }
        }
        match (disks.len(), self.disk(disks.primary())) {
            (1, None) => Err(StoreError::DiskNotOpen { key, disk: disks.primary() }),
            _ => Err(StoreError::NoValidCopy { key, disks, errors: errors.join("; ") }),
        }
    }

    /// Adds a disk given as a spec, `PATH` or `PATH,seek_ms=10,rate_mib_s=4` (an emulated disk;
    /// see [`DiskModel::parse_spec`](isochron_store::DiskModel::parse_spec)): see
    /// [`Store::add_disk_spec`].
    pub fn add_disk(&self, spec: &str) -> Result<DiskId, StoreError> {
        self.add_disk_spec(&spec.parse::<DiskSpec>()?)
    }

    /// Adds a disk and makes its SCADDAR addition the pending operation; returns its id (one more
    /// than any id the store ever had). Refused while another reorganisation is pending. Waits
    /// for ingests in progress ([`Store::ingest_lock`]).
    ///
    /// Order: the disk's directory and identity file are created first, then the disk record
    /// (`Joining`) and the placement operation are committed in one catalog transaction. A crash
    /// in between leaves an identity file no catalog refers to, which a retry reuses.
    pub fn add_disk_spec(&self, spec: &DiskSpec) -> Result<DiskId, StoreError> {
        // Lock order everywhere: ingest gate, then scale lock, then metadata and disks.
        let _gate = write(&self.ingest_gate);
        let _scale = lock(&self.scale);
        let mut meta = self.meta();
        if let Some((active, pending)) = meta.pending() {
            return Err(StoreError::ReorgPending { active, pending });
        }
        let path = resolve(&self.root, &spec.path);
        if meta.disks.iter().any(|d| resolve(&self.root, &d.path) == path) {
            return Err(StoreError::DuplicateDiskPath { path: spec.path.clone() });
        }
        let id = meta
            .next_disk_id()
            .ok_or(StoreError::TooManyDisks { count: usize::from(u16::MAX) + 2 })?;
        // Validate the operation (ids, the Faithful budget) before touching the directory.
        meta.placement.push(ScaleOp::Add { disks: vec![id] })?;
        meta.disks.push(DiskRecord {
            id,
            path: spec.path.clone(),
            state: DiskState::Joining,
            model: spec.model,
            owner: None,
        });
        let fresh =
            matches!(DiskDir::open(&path, meta.store_id, id), Err(DiskError::NotADisk { .. }));
        let disk = DiskDir::create(&path, meta.store_id, id)?;
        disk.set_model(spec.model);
        if let Err(e) = self.catalog.put_meta(&meta) {
            if fresh && let Err(e) = disk.remove_identity() {
                tracing::warn!(error = %e, "could not roll back disk initialisation");
            }
            return Err(e.into());
        }
        write(&self.disks).insert(id, Arc::new(disk));
        let pending = meta.placement.current_epoch();
        *write(&self.meta) = meta;
        tracing::info!(disk = %id, path = %path.display(), model = ?spec.model, epoch = %pending,
            "disk joining; reorganisation pending");
        Ok(id)
    }

    /// Starts removing disk `id`: marks it `Draining` and makes its SCADDAR removal the pending
    /// operation, in one catalog transaction. The disk stays open and readable until the flip.
    /// Refused for the last active disk, a disk that is not active, and while another
    /// reorganisation is pending. Waits for ingests in progress.
    pub fn remove_disk(&self, id: DiskId) -> Result<(), StoreError> {
        let _gate = write(&self.ingest_gate);
        let _scale = lock(&self.scale);
        let mut meta = self.meta();
        if let Some((active, pending)) = meta.pending() {
            return Err(StoreError::ReorgPending { active, pending });
        }
        let state = meta.disk(id).ok_or(StoreError::NoSuchDisk { disk: id })?.state;
        if state != DiskState::Active {
            return Err(StoreError::DiskNotActive { disk: id, state });
        }
        let current = meta.placement.disks(meta.placement.current_epoch());
        if current == [id] {
            return Err(StoreError::LastDisk { disk: id });
        }
        if current.len() - 1 < usize::from(meta.replication) {
            return Err(StoreError::ReplicationTooHigh {
                replication: meta.replication,
                what: "removing this disk would leave",
                disks: current.len() - 1,
            });
        }
        if !read(&self.unreachable).is_empty() {
            self.check_live_copies(&meta, &self.catalog.objects()?)?;
        }
        meta.placement.push(ScaleOp::Remove { disks: vec![id] })?;
        for d in &mut meta.disks {
            if d.id == id {
                d.state = DiskState::Draining;
            }
        }
        self.catalog.put_meta(&meta)?;
        let pending = meta.placement.current_epoch();
        *write(&self.meta) = meta;
        tracing::info!(disk = %id, epoch = %pending, "disk draining; reorganisation pending");
        Ok(())
    }

    /// Every block move of the pending reorganisation ([`reorg::moves`] over the catalog); empty
    /// when none is pending.
    pub fn reorg_moves(&self) -> Result<Vec<Move>, StoreError> {
        let meta = self.meta();
        let objects = self.catalog.objects()?;
        Ok(reorg::moves(&meta, &objects).collect())
    }

    /// Copies one block of the pending reorganisation on the calling thread: reads and verifies
    /// it on `mv.from`, writes it durably to `mv.to`. Does nothing if `mv.to` already holds a
    /// valid copy (a copy made before a crash). For offline use; the server copies through the
    /// disks' IO threads in their non-real-time share.
    pub fn copy_block(&self, mv: &Move) -> Result<CopyOutcome, StoreError> {
        {
            let meta = read(&self.meta);
            let (active, pending) = meta.pending().ok_or(StoreError::NoPendingReorg)?;
            if mv.from == mv.to
                || !meta.placement.disks(active).contains(&mv.from)
                || !meta.placement.disks(pending).contains(&mv.to)
            {
                return Err(StoreError::StaleMove { mv: *mv });
            }
        }
        let open = |id| self.disk(id).ok_or(StoreError::DiskNotOpen { key: mv.key, disk: id });
        let (from, to) = (open(mv.from)?, open(mv.to)?);
        if to.has_block_file(mv.key) && to.read_block(mv.key).is_ok() {
            return Ok(CopyOutcome::Already);
        }
        // The source's node is dead: read another copy.
        let from = if read(&self.unreachable).contains(&mv.from) {
            match self.catalog.objects()?.into_iter().find(|r| r.id == mv.key.object) {
                Some(rec) => open(self.source_of(&self.meta(), &rec, mv)?)?,
                None => return Err(StoreError::StaleMove { mv: *mv }),
            }
        } else {
            from
        };
        let block = match from.read_block(mv.key) {
            Ok(b) => b,
            // Another copy will do: the source's is lost or corrupt.
            Err(e) => match self.catalog.objects()?.into_iter().find(|r| r.id == mv.key.object) {
                Some(rec) if self.replication() > 1 => {
                    tracing::warn!(block = %mv.key, disk = %mv.from, error = %e,
                        "reorganisation source unreadable; copying from another replica");
                    self.read_block_sync(&rec, mv.key.index)?
                }
                _ => return Err(e.into()),
            },
        };
        to.write_block(mv.key, block.as_bytes())?;
        Ok(CopyOutcome::Copied { bytes: block.as_bytes().len() as u64 })
    }

    /// Makes the pending epoch active: checks that every moved block has a valid copy on its new
    /// disk (read and checksum-verified, and matching the catalog's checksum), then, in one
    /// catalog transaction, sets the active epoch to the pending one, turns `Joining` disks
    /// `Active` and `Draining` ones `Retired`. Returns the moved blocks' sources, now garbage
    /// (they stay readable until [`Store::delete_sources`], so reads issued before the flip
    /// still complete).
    pub fn flip(&self) -> Result<FlipReport, StoreError> {
        let _scale = lock(&self.scale);
        let meta = self.meta();
        let (active, pending) = meta.pending().ok_or(StoreError::NoPendingReorg)?;
        let objects = self.catalog.objects()?;
        let by_id: HashMap<ObjectId, &ObjectRecord> = objects.iter().map(|r| (r.id, r)).collect();
        let moves: Vec<Move> = reorg::moves(&meta, &objects).collect();
        let mut missing = 0u64;
        let mut first = None;
        // In a cluster, a copy to another node's disk was verified by that node before it
        // answered the write ([`RemoteBlocks::write_block_nrt`]): the coordinator vouches for
        // it. Copies to this node's disks are checked here.
        let remote = read(&self.remote).is_some();
        for mv in moves.iter().filter(|mv| !remote || self.is_local(mv.to)) {
            let expected = by_id
                .get(&mv.key.object)
                .and_then(|r| r.blocks.get(mv.key.index.0 as usize))
                .map(|b| b.checksum);
            if !self.holds_valid_copy(mv.to, mv.key, expected) {
                missing += 1;
                first.get_or_insert(*mv);
            }
        }
        if let Some(first) = first {
            return Err(StoreError::FlipIncomplete {
                pending,
                missing,
                total: moves.len() as u64,
                first,
            });
        }
        let mut next = meta;
        next.active_epoch = pending;
        let (mut activated, mut retired) = (Vec::new(), Vec::new());
        for i in 0..next.disks.len() {
            let state = next.expected_state(next.disks[i].id);
            let d = &mut next.disks[i];
            match (d.state, state) {
                (DiskState::Joining, DiskState::Active) => activated.push(d.id),
                (DiskState::Draining, DiskState::Retired) => retired.push(d.id),
                _ => {}
            }
            d.state = state;
        }
        let next = if remote {
            // Other nodes write the shared metadata too: flip only the epoch this node planned.
            let states: Vec<(DiskId, DiskState)> =
                next.disks.iter().map(|d| (d.id, d.state)).collect();
            self.catalog.update_meta(&mut |m: &mut StoreMeta| {
                if m.pending() != Some((active, pending)) {
                    return Err(CatalogError::Invalid {
                        what: "store metadata".into(),
                        reason: format!(
                            "the pending reorganisation changed under the flip of epoch {pending}"
                        ),
                    });
                }
                m.active_epoch = pending;
                for d in &mut m.disks {
                    if let Some((_, s)) = states.iter().find(|(id, _)| *id == d.id) {
                        d.state = *s;
                    }
                }
                Ok(())
            })?
        } else {
            self.catalog.put_meta(&next)?;
            next
        };
        *write(&self.meta) = next;
        tracing::info!(from = %active, to = %pending, moved = moves.len(), ?activated, ?retired,
            "epoch flipped");
        Ok(FlipReport {
            from: active,
            to: pending,
            garbage: moves.iter().map(|m| (m.from, m.key)).collect(),
            activated,
            retired,
        })
    }

    /// Deletes the sources a flip made garbage, then every block file left on the retired
    /// disks, and closes those disks (their directories keep their identity files). Returns the
    /// number of block files deleted. A source that the active placement puts a copy on after
    /// all is kept: only files no copy at the active epoch uses are deleted. Refused if another operation has been logged since the flip.
    ///
    /// The server calls this once the reads issued before the flip have completed.
    pub fn delete_sources(&self, report: &FlipReport) -> Result<u64, StoreError> {
        let _scale = lock(&self.scale);
        let meta = self.meta();
        let current = meta.placement.current_epoch();
        if current != report.to || meta.active_epoch != report.to {
            return Err(StoreError::StaleFlipReport { report: report.to, current });
        }
        let objects = self.catalog.objects()?;
        let by_id: HashMap<ObjectId, &ObjectRecord> = objects.iter().map(|r| (r.id, r)).collect();
        let mut deleted = 0;
        for &(disk, key) in &report.garbage {
            let keep = by_id.get(&key.object).is_some_and(|rec| {
                key.index.0 < rec.block_count()
                    && replicas_active(&meta, rec, key.index).contains(disk)
            });
            if keep {
                continue;
            }
            if let Some(d) = self.disk(disk)
                && d.remove_block(key)?
            {
                deleted += 1;
            }
        }
        for id in &report.retired {
            let closed = write(&self.disks).remove(id);
            if let Some(d) = closed {
                deleted += d.remove_all_blocks()?;
                tracing::info!(disk = %id, path = %d.path().display(), "disk retired");
            }
        }
        Ok(deleted)
    }

    /// Deletes the block files of catalogued objects that sit where neither the active nor the
    /// pending placement puts them (the sources of a flipped reorganisation, blocks past an
    /// object's end), on every open disk. Files of objects not in the catalog are left alone
    /// (they may be an ingest in progress; [`Store::recover`] and fsck deal with them). Returns
    /// the number deleted.
    pub fn remove_misplaced(&self) -> Result<u64, StoreError> {
        let _scale = lock(&self.scale);
        let meta = self.meta();
        self.remove_misplaced_in(&meta, &BTreeSet::new())
    }

    /// [`Store::remove_misplaced`] as `meta` places blocks, but the blocks past the end of the
    /// objects named in `growing` (see [`Store::collect_garbage`]); the caller holds the scale
    /// lock.
    fn remove_misplaced_in(
        &self,
        meta: &StoreMeta,
        growing: &BTreeSet<String>,
    ) -> Result<u64, StoreError> {
        let objects = self.catalog.objects()?;
        let by_id: HashMap<ObjectId, &ObjectRecord> = objects.iter().map(|r| (r.id, r)).collect();
        let mut deleted = 0;
        for (id, disk) in self.disks() {
            let mut doomed = Vec::new();
            for file in disk.list_blocks() {
                let key = file?.key;
                let Some(rec) = by_id.get(&key.object) else { continue };
                if key.index.0 >= rec.block_count() && growing.contains(&rec.name) {
                    continue;
                }
                if !placed_on(meta, rec, key.index, id) {
                    doomed.push(key);
                }
            }
            for key in doomed {
                if disk.remove_block(key)? {
                    deleted += 1;
                }
            }
        }
        Ok(deleted)
    }

    /// The offline reorganiser: copies every block of the pending reorganisation
    /// ([`Store::copy_block`]), flips the epoch, deletes the sources. Idempotent: after a crash
    /// at any point, running it again completes the reorganisation (copies already made are
    /// skipped; after a committed flip only the clean-up is left). With nothing pending it only
    /// removes misplaced blocks. A block whose object was removed meanwhile is skipped.
    pub fn reorganize(
        &self,
        progress: &mut dyn FnMut(ReorgProgress),
    ) -> Result<ReorgReport, StoreError> {
        let start = Instant::now();
        let mut report = ReorgReport::default();
        if self.pending().is_some() {
            let moves = self.reorg_moves()?;
            let mut p = ReorgProgress { moved: 0, total: moves.len() as u64, bytes: 0 };
            progress(p);
            for mv in &moves {
                match self.copy_block(mv) {
                    Ok(CopyOutcome::Copied { bytes }) => {
                        report.moved += 1;
                        report.bytes += bytes;
                    }
                    Ok(CopyOutcome::Already) => report.already += 1,
                    Err(e) if !self.object_exists(mv.key.object)? => {
                        tracing::debug!(key = %mv.key, error = %e, "object removed during reorganisation");
                    }
                    Err(e) => return Err(e),
                }
                p.moved += 1;
                p.bytes = report.bytes;
                progress(p);
            }
            let flipped = self.flip()?;
            report.deleted = self.delete_sources(&flipped)?;
        }
        report.deleted += self.remove_misplaced()?;
        report.epoch = self.active_epoch();
        report.elapsed = start.elapsed();
        Ok(report)
    }

    /// Cleans up after an interrupted run (called by [`Store::open`]): deletes temporary files of
    /// interrupted writes, block files of objects not in the catalog (an interrupted ingest or
    /// removal), block files that neither the active nor the pending placement puts where they
    /// are (the sources of a flipped reorganisation), and block files left on retired disks. It
    /// does **not** finish a pending reorganisation: the caller decides (the server resumes it in
    /// the background; `fsck --repair` or [`Store::reorganize`] completes it).
    ///
    /// Only correct when no block write is in flight: waits for ingests ([`Store::ingest_lock`]),
    /// but must not run while reorganisation copies are being made.
    pub fn recover(&self) -> Result<RecoveryReport, StoreError> {
        let gate = write(&self.ingest_gate);
        let mut report = RecoveryReport { pending: self.pending(), ..RecoveryReport::default() };
        let objects = self.catalog.objects()?;
        let known: HashMap<ObjectId, u32> =
            objects.iter().map(|r| (r.id, r.block_count())).collect();
        for (_, disk) in self.disks() {
            for tmp in disk.temp_files()? {
                if disk.remove_temp_file(&tmp)? {
                    report.temp_files += 1;
                }
            }
            let mut orphans = Vec::new();
            for file in disk.list_blocks() {
                let key = file?.key;
                if !known.contains_key(&key.object) {
                    orphans.push(key);
                }
            }
            for key in orphans {
                if disk.remove_block(key)? {
                    report.orphans += 1;
                }
            }
        }
        drop(gate);
        report.misplaced = self.remove_misplaced()?;
        let meta = self.meta();
        for rec in meta.disks.iter().filter(|d| d.state == DiskState::Retired) {
            let path = resolve(&self.root, &rec.path);
            match DiskDir::open(&path, meta.store_id, rec.id) {
                Ok(disk) => report.retired_blocks += disk.remove_all_blocks()?,
                Err(e) => tracing::debug!(disk = %rec.id, error = %e, "retired disk not cleaned"),
            }
        }
        Ok(report)
    }

    /// Every disk record (retired ones included) with the block files on it; a retired disk,
    /// which is not opened, shows no blocks.
    pub fn disk_usage(&self) -> Result<Vec<(DiskRecord, DiskUsage)>, StoreError> {
        let meta = self.meta();
        let mut out = Vec::with_capacity(meta.disks.len());
        for rec in meta.disks {
            let usage = match self.disk(rec.id) {
                Some(d) => d.usage()?,
                None => DiskUsage::default(),
            };
            out.push((rec, usage));
        }
        Ok(out)
    }

    /// Whether disk `id` is open and holds a valid copy of block `key` (its checksum equal to
    /// `expected`, when given).
    pub(crate) fn holds_valid_copy(
        &self,
        id: DiskId,
        key: BlockKey,
        expected: Option<u64>,
    ) -> bool {
        let Some(disk) = self.disk(id) else { return false };
        disk.has_block_file(key)
            && disk.read_block(key).is_ok_and(|b| expected.is_none_or(|c| b.header().checksum == c))
    }

    /// Exclusive use of the object writers' gate (fsck: no ingest in flight).
    pub(crate) fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        write(&self.ingest_gate)
    }

    fn object_exists(&self, id: ObjectId) -> Result<bool, StoreError> {
        Ok(self.catalog.objects()?.iter().any(|r| r.id == id))
    }
}

/// Whether block `index` of `rec` belongs on disk `disk`: where the active placement or, while a
/// reorganisation is pending, the pending one puts one of its copies.
pub(crate) fn placed_on(
    meta: &StoreMeta,
    rec: &ObjectRecord,
    index: BlockIndex,
    disk: DiskId,
) -> bool {
    if index.0 >= rec.block_count() {
        return false;
    }
    if replicas_active(meta, rec, index).contains(disk) {
        return true;
    }
    meta.pending().is_some_and(|(_, pending)| meta.replicas_at(rec, index, pending).contains(disk))
}

/// Opens the disk of `rec` and applies its model.
/// The disks asked for, or one in the data directory.
fn default_disks(disks: &[DiskSpec]) -> Vec<DiskSpec> {
    if disks.is_empty() {
        vec![DiskSpec::from(PathBuf::from(DEFAULT_DISK_DIR))]
    } else {
        disks.to_vec()
    }
}

/// The metadata of a new store over `disks` (ids from 0, all active, owned by `owner`), with a
/// fresh store id; refuses too many disks and one path given twice.
fn new_meta(
    root: &Path,
    disks: &[DiskSpec],
    block_size: Bytes,
    variant: PlacementVariant,
    owner: Option<&str>,
    replication: u8,
) -> Result<StoreMeta, StoreError> {
    let specs = default_disks(disks);
    if specs.len() > usize::from(u16::MAX) + 1 {
        return Err(StoreError::TooManyDisks { count: specs.len() });
    }
    if replication == 0 || usize::from(replication) > MAX_REPLICAS {
        return Err(StoreError::Catalog(CatalogError::Invalid {
            what: "store.replication".into(),
            reason: format!("{replication} is not between 1 and {MAX_REPLICAS}"),
        }));
    }
    // A single node must hold the K copies now; a cluster's first node may wait for others.
    if owner.is_none() && specs.len() < usize::from(replication) {
        return Err(StoreError::ReplicationTooHigh {
            replication,
            what: "the store would have",
            disks: specs.len(),
        });
    }
    for (i, s) in specs.iter().enumerate() {
        if specs[..i].iter().any(|t| resolve(root, &t.path) == resolve(root, &s.path)) {
            return Err(StoreError::DuplicateDiskPath { path: s.path.clone() });
        }
    }
    let store_id = loop {
        let id = rand::random::<u64>();
        if id != 0 {
            break id;
        }
    };
    let records: Vec<DiskRecord> = specs
        .into_iter()
        .enumerate()
        .map(|(i, s)| DiskRecord {
            id: DiskId(i as u16),
            path: s.path,
            state: DiskState::Active,
            model: s.model,
            owner: owner.map(str::to_owned),
        })
        .collect();
    let placement = PlacementLog::with_variant(records.iter().map(|d| d.id).collect(), variant)?;
    Ok(StoreMeta {
        store_id,
        format_version: STORE_FORMAT_VERSION,
        block_size,
        active_epoch: placement.current_epoch(),
        placement,
        disks: records,
        next_object_id: 1,
        replication,
    })
}

fn open_disk(root: &Path, meta: &StoreMeta, rec: &DiskRecord) -> Result<DiskDir, StoreError> {
    let disk = DiskDir::open(&resolve(root, &rec.path), meta.store_id, rec.id)?;
    disk.set_model(rec.model);
    Ok(disk)
}

/// A fresh random placement seed for a new object.
#[must_use]
pub fn new_seed() -> u64 {
    rand::random()
}

/// A disk path as stored, resolved against the store root.
pub(crate) fn resolve(root: &Path, disk: &Path) -> PathBuf {
    if disk.is_absolute() { disk.to_owned() } else { root.join(disk) }
}

// The locks only guard values that are replaced whole, so a panic elsewhere cannot leave them
// half-updated: poisoning is ignored.
fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(PoisonError::into_inner)
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(PoisonError::into_inner)
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use isochron_base::Gsn;
    use isochron_store::DiskModel;

    use super::*;
    use crate::IoWorker;
    use crate::fsck::fsck;
    use crate::testutil::{contents, encode_block, ingest};

    fn total_blocks(store: &Store) -> u64 {
        store.disk_usage().unwrap().iter().map(|(_, u)| u.blocks).sum()
    }

    fn paths(names: &[&str]) -> Vec<PathBuf> {
        names.iter().map(PathBuf::from).collect()
    }

    #[test]
    fn shareable_across_threads() {
        fn check<T: Send + Sync>() {}
        check::<Store>();
        check::<DiskDir>();
        check::<IoWorker>();
    }

    #[test]
    fn create_open_read_remove() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("store");
        let abs = dir.path().join("abs-disk");
        let disks = vec![PathBuf::from("d0"), abs.clone(), PathBuf::from("d2")];
        assert!(!Store::exists(&root));
        let rec = {
            let store = Store::create(&root, &disks, Bytes::kib(64)).unwrap();
            assert!(Store::exists(&root));
            assert_eq!(store.disks().len(), 3);
            assert_eq!(store.disk_ids(), vec![DiskId(0), DiskId(1), DiskId(2)]);
            assert_eq!(store.disk(DiskId(1)).unwrap().path(), abs);
            assert_eq!(store.meta().disks[0].path, PathBuf::from("d0"));
            assert!(matches!(
                Store::open(&root),
                Err(StoreError::Catalog(CatalogError::Locked { .. }))
            ));
            ingest(&store, "movie.ts", 30)
        };
        assert!(matches!(
            Store::create(&root, &[] as &[PathBuf], Bytes::kib(64)),
            Err(StoreError::AlreadyExists { .. })
        ));
        let store = Store::open(&root).unwrap();
        assert_eq!(store.root(), root);
        assert_eq!(store.block_size(), Bytes::kib(64));
        let rec2 = store.catalog().object("movie.ts").unwrap().unwrap();
        assert_eq!(rec2, rec);
        let mut used = HashSet::new();
        for i in 0..30 {
            let block = store.read_block_sync(&rec, BlockIndex(i)).unwrap();
            assert_eq!(block.header().key, BlockKey::new(rec.id, BlockIndex(i)));
            used.insert(store.locate(&rec, BlockIndex(i)));
        }
        assert_eq!(used.len(), 3, "30 blocks over 3 disks should touch all of them");
        assert_eq!(total_blocks(&store), 30);

        let removed = store.remove("movie.ts").unwrap();
        assert_eq!(removed.id, rec.id);
        assert!(store.catalog().object("movie.ts").unwrap().is_none());
        assert_eq!(total_blocks(&store), 0);
        assert!(matches!(store.remove("movie.ts"), Err(StoreError::NoSuchObject { .. })));
        assert!(matches!(
            store.read_block_sync(&rec, BlockIndex(0)),
            Err(StoreError::Disk(DiskError::BlockMissing { .. }))
        ));
    }

    #[test]
    fn default_disk_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let none: &[PathBuf] = &[];
        let err = Store::open(&root).unwrap_err();
        assert!(matches!(err, StoreError::NoStore { .. }));
        assert!(err.to_string().contains("no isochron store at"), "{err}");
        assert!(matches!(Store::create(&root, none, Bytes(1000)), Err(StoreError::BlockSize(_))));
        let store = Store::create(&root, none, Bytes::mib(1)).unwrap();
        assert_eq!(store.disks().len(), 1);
        assert_eq!(store.disk(DiskId(0)).unwrap().path(), root.join(DEFAULT_DISK_DIR));
        assert_eq!(store.meta().disks[0].path, PathBuf::from(DEFAULT_DISK_DIR));
        let rec = ingest(&store, "a.ts", 2);
        // Names are unique.
        let id = store.catalog().allocate_object_id().unwrap();
        let dup = ObjectRecord { id, ..rec };
        assert!(matches!(
            store.catalog().insert_object(&dup),
            Err(CatalogError::NameExists { .. })
        ));
        drop(store);

        // A store moved as a whole still opens (relative disk paths).
        let moved = dir.path().join("moved");
        fs::rename(&root, &moved).unwrap();
        let store = Store::open(&moved).unwrap();
        let rec = store.catalog().object("a.ts").unwrap().unwrap();
        store.read_block_sync(&rec, BlockIndex(1)).unwrap();
    }

    #[test]
    fn refuses_a_disk_of_another_store_and_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let none: &[PathBuf] = &[];
        let other = dir.path().join("other");
        let _other = Store::create(&other, none, Bytes::mib(1)).unwrap();
        let fresh = dir.path().join("fresh-disk");
        let root = dir.path().join("mine");
        let disks = vec![fresh.clone(), other.join(DEFAULT_DISK_DIR)];
        let err = Store::create(&root, &disks, Bytes::mib(1)).unwrap_err();
        assert!(matches!(err, StoreError::Disk(DiskError::ForeignStore { .. })), "{err}");
        assert!(!Store::exists(&root));
        // The first disk was un-initialised, so a corrected retry works.
        assert!(!fresh.join(crate::disk::IDENTITY_FILE).exists());
        Store::create(&root, &[fresh], Bytes::mib(1)).unwrap();
        assert!(matches!(
            Store::create(&dir.path().join("x"), &paths(&["d", "d"]), Bytes::mib(1)),
            Err(StoreError::DuplicateDiskPath { .. })
        ));
    }

    #[test]
    fn open_refuses_swapped_disks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        drop(Store::create(&root, &paths(&["a", "b"]), Bytes::mib(1)).unwrap());
        fs::rename(root.join("a"), root.join("tmp")).unwrap();
        fs::rename(root.join("b"), root.join("a")).unwrap();
        fs::rename(root.join("tmp"), root.join("b")).unwrap();
        let err = Store::open(&root).unwrap_err();
        assert!(matches!(err, StoreError::Disk(DiskError::WrongDisk { .. })), "{err}");
    }

    /// Emulation models given at creation or addition are kept in the catalog and applied on
    /// open.
    #[test]
    fn disk_models_persist() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let specs: Vec<DiskSpec> =
            ["a,seek_ms=0.5,rate_mib_s=400", "b"].iter().map(|s| s.parse().unwrap()).collect();
        let model = DiskModel { mean_seek: Duration::from_micros(500), rate: 400 << 20 };
        {
            let store = Store::create(&root, &specs, Bytes::kib(64)).unwrap();
            assert_eq!(store.disk(DiskId(0)).unwrap().model(), Some(model));
            assert_eq!(store.disk(DiskId(1)).unwrap().model(), None);
            let id = store.add_disk("c,rate_mib_s=300").unwrap();
            assert_eq!(id, DiskId(2));
            assert!(store.disk(id).unwrap().model().is_some());
            assert!(matches!(store.add_disk("d,speed=9"), Err(StoreError::DiskSpec(_))));
        }
        let store = Store::open(&root).unwrap();
        let meta = store.meta();
        assert_eq!(meta.disks[0].model, Some(model));
        assert_eq!(store.disk(DiskId(0)).unwrap().model(), Some(model));
        assert_eq!(store.disk(DiskId(2)).unwrap().model().unwrap().rate, 300 << 20);
        assert_eq!(meta.disks[2].model.unwrap().to_string(), "rate_mib_s=300");
    }

    /// The scaling operations' preconditions and bookkeeping.
    #[test]
    fn add_and_remove_bookkeeping() {
        use DiskState::{Active, Retired};
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let store = Store::create(&root, &paths(&["d0", "d1"]), Bytes::kib(64)).unwrap();
        assert_eq!(store.pending(), None);
        assert!(matches!(store.flip(), Err(StoreError::NoPendingReorg)));
        assert!(matches!(store.add_disk("d1"), Err(StoreError::DuplicateDiskPath { .. })));
        assert!(matches!(store.remove_disk(DiskId(7)), Err(StoreError::NoSuchDisk { .. })));
        let id = store.add_disk("d2").unwrap();
        assert_eq!(id, DiskId(2));
        assert_eq!(store.pending(), Some((Epoch(0), Epoch(1))));
        assert_eq!(store.meta().disk(id).unwrap().state, DiskState::Joining);
        assert_eq!(store.disk_ids().len(), 3);
        assert!(matches!(store.add_disk("d3"), Err(StoreError::ReorgPending { .. })));
        assert!(matches!(store.remove_disk(DiskId(0)), Err(StoreError::ReorgPending { .. })));
        let err = store.add_disk("d3").unwrap_err();
        assert!(err.to_string().contains("epoch 0 → 1"), "{err}");
        // Nothing stored: the flip needs no copies.
        let flipped = store.flip().unwrap();
        assert_eq!((flipped.from, flipped.to), (Epoch(0), Epoch(1)));
        assert_eq!(flipped.activated, vec![id]);
        assert_eq!(store.delete_sources(&flipped).unwrap(), 0);
        assert_eq!(store.meta().disk(id).unwrap().state, Active);
        // Remove disk 1, then the refusals.
        store.remove_disk(DiskId(1)).unwrap();
        assert_eq!(store.meta().disk(DiskId(1)).unwrap().state, DiskState::Draining);
        assert!(store.disk(DiskId(1)).is_some(), "a draining disk stays open");
        let flipped = store.flip().unwrap();
        assert_eq!(flipped.retired, vec![DiskId(1)]);
        assert!(store.delete_sources(&flipped).is_ok());
        assert!(store.disk(DiskId(1)).is_none(), "a retired disk is closed");
        assert!(matches!(
            store.remove_disk(DiskId(1)),
            Err(StoreError::DiskNotActive { state: Retired, .. })
        ));
        store.remove_disk(DiskId(0)).unwrap();
        store.reorganize(&mut |_| {}).unwrap();
        assert!(matches!(store.remove_disk(DiskId(2)), Err(StoreError::LastDisk { .. })));
        // Ids are never reused, even of retired disks.
        assert_eq!(store.add_disk("d9").unwrap(), DiskId(3));
        // A stale flip report is refused.
        store.reorganize(&mut |_| {}).unwrap();
        assert!(matches!(store.delete_sources(&flipped), Err(StoreError::StaleFlipReport { .. })));
        drop(store);
        let store = Store::open(&root).unwrap();
        assert_eq!(store.disk_ids(), vec![DiskId(2), DiskId(3)]);
        let states: Vec<DiskState> = store.meta().disks.iter().map(|d| d.state).collect();
        assert_eq!(states, vec![Retired, Retired, Active, Active]);
        // The retired disks keep their identity.
        DiskDir::open(&root.join("d1"), store.meta().store_id, DiskId(1)).unwrap();
    }

    /// Adding then removing disks with objects stored: only the planned blocks move, every
    /// object reads back byte-identical, fsck is clean, nothing is left on retired disks.
    #[test]
    fn reorganize_add_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let store = Store::create(&root, &paths(&["d0", "d1", "d2"]), Bytes::kib(64)).unwrap();
        ingest(&store, "a", 60);
        ingest(&store, "b", 45);
        let before = contents(&store);
        assert_eq!(total_blocks(&store), 105);

        let id = store.add_disk("d3").unwrap();
        let moves = store.reorg_moves().unwrap();
        assert!(moves.iter().all(|m| m.to == id && m.from != id));
        assert!(!moves.is_empty());
        // An object ingested while the addition is pending is placed at the pending epoch.
        let c = ingest(&store, "c", 40);
        assert_eq!(c.first_epoch, Epoch(1));
        assert_eq!(store.reorg_moves().unwrap(), moves, "c never moves");
        assert_eq!(contents(&store)[..2], before[..]);
        let mut seen = Vec::new();
        let report = store.reorganize(&mut |p| seen.push(p)).unwrap();
        assert_eq!(report.moved, moves.len() as u64);
        assert_eq!(report.already, 0);
        assert_eq!(report.deleted, moves.len() as u64);
        assert_eq!(report.epoch, Epoch(1));
        assert_eq!(seen.last().unwrap().moved, moves.len() as u64);
        assert_eq!(seen.last().unwrap().total, moves.len() as u64);
        assert!(report.bytes >= moves.len() as u64 * 4096);
        let after = contents(&store);
        assert_eq!(after[..2], before[..]);
        assert_eq!(total_blocks(&store), 145);
        assert!(fsck(&store, false).unwrap().is_clean());

        store.remove_disk(DiskId(1)).unwrap();
        let moves = store.reorg_moves().unwrap();
        let on_1 = store.disk(DiskId(1)).unwrap().usage().unwrap().blocks;
        assert_eq!(moves.len() as u64, on_1);
        assert!(moves.iter().all(|m| m.from == DiskId(1)));
        store.reorganize(&mut |_| {}).unwrap();
        assert_eq!(contents(&store), after);
        assert_eq!(total_blocks(&store), 145);
        assert_eq!(fs::read_dir(root.join("d1/blocks")).unwrap().count(), 0);
        assert!(fsck(&store, false).unwrap().is_clean());
        drop(store);
        let store = Store::open(&root).unwrap();
        assert_eq!(contents(&store), after);
    }

    /// A cluster node collects what a flip left only at the epoch it checked its streams
    /// against: if a newer flip came in since, streams planned at the checked epoch still read
    /// the blocks that flip moved away, and nothing is deleted.
    #[test]
    fn garbage_is_collected_only_at_the_epoch_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let store = Store::create(&root, &paths(&["d0", "d1"]), Bytes::kib(64)).unwrap();
        ingest(&store, "a", 40);
        assert_eq!(store.collect_garbage(Epoch(0), &BTreeSet::new()).unwrap(), Some((0, vec![])));
        store.add_disk("d2").unwrap();
        for mv in store.reorg_moves().unwrap() {
            store.copy_block(&mv).unwrap();
        }
        // Pending: sources and copies both stay.
        assert_eq!(store.collect_garbage(Epoch(0), &BTreeSet::new()).unwrap(), Some((0, vec![])));
        assert_eq!(total_blocks(&store), 40 + store.reorg_moves().unwrap().len() as u64);
        let moved = store.reorg_moves().unwrap().len() as u64;
        store.flip().unwrap();
        // Checked at epoch 0, the flip to 1 came in before the deletion: nothing goes.
        assert_eq!(store.collect_garbage(Epoch(0), &BTreeSet::new()).unwrap(), None);
        assert_eq!(total_blocks(&store), 40 + moved);
        assert_eq!(
            store.collect_garbage(Epoch(1), &BTreeSet::new()).unwrap(),
            Some((moved, vec![]))
        );
        assert_eq!(total_blocks(&store), 40);
        assert!(fsck(&store, false).unwrap().is_clean());
    }

    /// A recording's blocks past its last commit are being written (a live feed commits as it
    /// grows, and its recorder may be on another node): collecting a flip's garbage keeps them
    /// while the object is named growing, and deletes them once it is not.
    #[test]
    fn garbage_collection_keeps_the_blocks_a_growing_object_is_writing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let store = Store::create(&root, &paths(&["d0", "d1"]), Bytes::kib(64)).unwrap();
        let rec = ingest(&store, "cam", 10);
        // Two more blocks written, not committed yet.
        for i in 10..12 {
            let key = BlockKey::new(rec.id, BlockIndex(i));
            let bytes = encode_block(key, Gsn(u64::from(i) * 3), 3);
            store.write_block(rec.id, rec.seed, rec.first_epoch, BlockIndex(i), &bytes).unwrap();
        }
        let growing: BTreeSet<String> = ["cam".to_owned()].into();
        assert_eq!(store.collect_garbage(Epoch(0), &growing).unwrap(), Some((0, vec![])));
        assert_eq!(total_blocks(&store), 12);
        assert_eq!(store.collect_garbage(Epoch(0), &BTreeSet::new()).unwrap(), Some((2, vec![])));
        assert_eq!(total_blocks(&store), 10);
        assert!(fsck(&store, false).unwrap().is_clean());
    }

    /// A store of disks d0..d3 keeping two copies, objects "a" (24 blocks) and "b" (16).
    fn replicated_4() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().unwrap();
        let disks: Vec<DiskSpec> =
            (0..4).map(|i| DiskSpec::from(PathBuf::from(format!("d{i}")))).collect();
        let store = Store::create_with(
            &dir.path().join("s"),
            &disks,
            Bytes::kib(64),
            Default::default(),
            2,
        )
        .unwrap();
        ingest(&store, "a", 24);
        ingest(&store, "b", 16);
        (dir, store)
    }

    /// The removal of an unreachable disk (a dead node's) with K = 2: every move reads a
    /// reachable copy, never the dead disk, and afterwards every block has K copies on the
    /// reachable disks, fsck clean.
    #[test]
    fn removing_an_unreachable_disk_copies_from_the_live_replicas() {
        let (_dir, store) = replicated_4();
        let before = contents(&store);
        let dead = DiskId(1);
        // The dead disk's files are gone: a read there would fail.
        let dead_dir = store.disk(dead).unwrap().path().to_owned();
        let mut lost = 0;
        for e in fs::read_dir(&dead_dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                fs::remove_dir_all(&p).unwrap();
                lost += 1;
            }
        }
        assert!(lost > 0, "no block directory on {}", dead_dir.display());
        store.set_unreachable([dead].into());
        store.remove_disk(dead).unwrap();
        let sources = store.reorg_sources().unwrap();
        assert!(!sources.is_empty());
        for (mv, src) in &sources {
            assert_eq!(mv.from, dead, "{mv:?}");
            assert_ne!(*src, dead, "{mv:?} reads the dead disk");
        }
        for (mv, _) in &sources {
            assert!(matches!(store.copy_block(mv).unwrap(), CopyOutcome::Copied { .. }), "{mv:?}");
        }
        store.flip().unwrap();
        let report = fsck(&store, false).unwrap();
        assert!(report.is_clean(), "{report:?}");
        assert_eq!(report.copies_checked, 2 * 40);
        let meta = store.meta();
        for rec in store.catalog().objects().unwrap() {
            for i in 0..rec.block_count() {
                let r = meta.replicas_at(&rec, BlockIndex(i), meta.active_epoch);
                assert_eq!(r.len(), 2);
                assert!(!r.contains(dead), "block {i} of {} still on {dead}", rec.name);
            }
        }
        assert_eq!(contents(&store), before);
    }

    /// Two unreachable disks with K = 2: some block has both copies there; removing one of them
    /// is refused, naming the block, and nothing changes.
    #[test]
    fn removing_the_last_copies_is_refused() {
        let (_dir, store) = replicated_4();
        store.set_unreachable([DiskId(1), DiskId(2)].into());
        let err = store.remove_disk(DiskId(1)).unwrap_err();
        assert!(matches!(err, StoreError::NoLiveCopy { .. }), "{err}");
        assert!(err.to_string().contains("every copy"), "{err}");
        assert!(store.meta().pending().is_none());
        assert_eq!(store.meta().disk(DiskId(1)).unwrap().state, DiskState::Active);
    }

    /// One catalog shared by several in-process "nodes" (etcd's part in a cluster).
    struct SharedCatalog(Arc<RedbCatalog>);

    impl Catalog for SharedCatalog {
        fn meta(&self) -> Result<StoreMeta, CatalogError> {
            self.0.meta()
        }
        fn put_meta(&self, meta: &StoreMeta) -> Result<(), CatalogError> {
            self.0.put_meta(meta)
        }
        fn create_meta(&self, meta: &StoreMeta) -> Result<(), CatalogError> {
            self.0.create_meta(meta)
        }
        fn update_meta(
            &self,
            f: &mut dyn FnMut(&mut StoreMeta) -> Result<(), CatalogError>,
        ) -> Result<StoreMeta, CatalogError> {
            self.0.update_meta(f)
        }
        fn object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError> {
            self.0.object(name)
        }
        fn objects(&self) -> Result<Vec<ObjectRecord>, CatalogError> {
            self.0.objects()
        }
        fn insert_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError> {
            self.0.insert_object(rec)
        }
        fn grow_object(&self, rec: &ObjectRecord) -> Result<(), CatalogError> {
            self.0.grow_object(rec)
        }
        fn allocate_object_id(&self) -> Result<ObjectId, CatalogError> {
            self.0.allocate_object_id()
        }
        fn remove_object(&self, name: &str) -> Result<Option<ObjectRecord>, CatalogError> {
            self.0.remove_object(name)
        }
    }

    /// A dead node's removal is coordinated by one survivor, the lowest-named owner of a
    /// reachable disk, the same on every survivor; with the node reachable again, the node
    /// itself (an ordinary `node remove`).
    #[test]
    fn a_dead_nodes_removal_is_coordinated_by_the_lowest_named_survivor() {
        let dir = tempfile::tempdir().unwrap();
        let catalog = Arc::new(RedbCatalog::create(&dir.path().join("catalog.redb")).unwrap());
        let nodes: Vec<Store> = ["n1", "n2", "n3"]
            .iter()
            .map(|n| {
                let disks = [DiskSpec::from(PathBuf::from("d0"))];
                let cat: DynCatalog = Box::new(SharedCatalog(Arc::clone(&catalog)));
                Store::join(&dir.path().join(n), cat, n, &disks, Bytes::kib(64), Some(2)).unwrap()
            })
            .collect();
        for n in &nodes {
            n.refresh().unwrap();
        }
        let dead: BTreeSet<DiskId> = nodes[2].local_disks().into_iter().collect();
        for n in &nodes[..2] {
            n.set_unreachable(dead.clone());
        }
        nodes[1].remove_node("n3").unwrap();
        for n in &nodes {
            n.refresh().unwrap();
        }
        assert!(nodes[0].coordinates_pending(), "n1 is the lowest-named survivor");
        assert!(!nodes[1].coordinates_pending());
        // n3 comes back before the flip: an ordinary removal, which it coordinates.
        assert!(nodes[2].coordinates_pending());
        nodes[0].set_unreachable(BTreeSet::new());
        assert!(!nodes[0].coordinates_pending());
    }

    /// copy_block: stale moves are refused; a copy already made is skipped.
    #[test]
    fn copy_block_checks_and_skips() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let store = Store::create(&root, &paths(&["d0", "d1"]), Bytes::kib(64)).unwrap();
        ingest(&store, "a", 30);
        store.add_disk("d2").unwrap();
        let moves = store.reorg_moves().unwrap();
        let mv = moves[0];
        for stale in [Move { to: mv.from, ..mv }, Move { from: DiskId(2), ..mv }] {
            assert!(matches!(store.copy_block(&stale), Err(StoreError::StaleMove { .. })));
        }
        assert!(matches!(store.copy_block(&mv).unwrap(), CopyOutcome::Copied { .. }));
        assert_eq!(store.copy_block(&mv).unwrap(), CopyOutcome::Already);
        // A corrupt target copy is not "already there".
        let path = store.disk(mv.to).unwrap().block_path(mv.key);
        let mut bytes = fs::read(&path).unwrap();
        bytes[100] ^= 1;
        fs::write(&path, &bytes).unwrap();
        assert!(matches!(store.copy_block(&mv).unwrap(), CopyOutcome::Copied { .. }));
        // The flip refuses while copies are missing, naming the first.
        let err = store.flip().unwrap_err();
        assert!(
            matches!(err, StoreError::FlipIncomplete { missing, total, .. } if missing == total - 1),
            "{err}"
        );
        assert!(err.to_string().contains("have no valid copy on their new disk"), "{err}");
    }

    /// One crash scenario: `crash` runs part of a reorganisation on a fresh store; the store is
    /// then dropped (the process dies), reopened (recovery), reorganised to completion, checked
    /// with fsck and read back.
    fn crash_and_recover(what: &str, remove: bool, crash: impl FnOnce(&Store, &[Move])) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let before = {
            let store = Store::create(&root, &paths(&["d0", "d1", "d2"]), Bytes::kib(64)).unwrap();
            ingest(&store, "a", 24);
            ingest(&store, "b", 16);
            let before = contents(&store);
            if remove {
                store.remove_disk(DiskId(1)).unwrap();
            } else {
                store.add_disk("d3").unwrap();
            }
            let moves = store.reorg_moves().unwrap();
            crash(&store, &moves);
            before
        };
        let store = Store::open(&root).unwrap();
        store.reorganize(&mut |_| {}).unwrap();
        let report = fsck(&store, false).unwrap();
        assert!(report.is_clean(), "{what}: {report:?}");
        assert_eq!(contents(&store), before, "{what}");
        assert_eq!(total_blocks(&store), 40, "{what}");
        assert_eq!(store.pending(), None, "{what}");
    }

    /// The crash ordering: stop the reorganiser after k copies for every k (including with a
    /// copy's temporary file left behind), and after the flip before the sources are deleted.
    #[test]
    fn reorganisation_survives_a_crash_anywhere() {
        for remove in [false, true] {
            let op = if remove { "removal" } else { "addition" };
            let total = {
                let mut n = 0;
                crash_and_recover(&format!("{op}, counting"), remove, |_, moves| n = moves.len());
                n
            };
            assert!(total >= 6, "{op}: only {total} moves");
            // Every k in release builds (CI); every third in debug builds, which are slower.
            let step = if cfg!(debug_assertions) { 3 } else { 1 };
            for k in (0..=total).step_by(step).chain([total]) {
                crash_and_recover(&format!("{op}, crash after {k} of {total}"), remove, |s, m| {
                    for mv in &m[..k] {
                        s.copy_block(mv).unwrap();
                    }
                    // The next copy was being written.
                    if let Some(mv) = m.get(k) {
                        let path = s.disk(mv.to).unwrap().block_path(mv.key);
                        fs::create_dir_all(path.parent().unwrap()).unwrap();
                        fs::write(path.with_extension("blk.tmp"), b"half a block").unwrap();
                    }
                });
            }
            crash_and_recover(&format!("{op}, crash after the flip"), remove, |s, m| {
                for mv in m {
                    s.copy_block(mv).unwrap();
                }
                s.flip().unwrap();
            });
            crash_and_recover(&format!("{op}, crash while deleting sources"), remove, |s, m| {
                for mv in m {
                    s.copy_block(mv).unwrap();
                }
                let report = s.flip().unwrap();
                let d = s.disk(report.garbage[0].0).unwrap();
                d.remove_block(report.garbage[0].1).unwrap();
            });
        }
    }

    /// Recovery at open deletes what a crash leaves (temp files, orphans of an interrupted
    /// ingest, sources of a flipped reorganisation) and leaves a pending reorganisation pending.
    #[test]
    fn recovery_cleans_up_but_does_not_finish() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        {
            let store = Store::create(&root, &paths(&["d0", "d1"]), Bytes::kib(64)).unwrap();
            ingest(&store, "a", 20);
            // An ingest killed half-way: blocks but no record.
            let id = store.catalog().allocate_object_id().unwrap();
            for i in 0..5 {
                let key = BlockKey::new(id, BlockIndex(i));
                store
                    .write_block(id, 9, Epoch(0), BlockIndex(i), &encode_block(key, Gsn(0), 1))
                    .unwrap();
            }
            let d0 = store.disk(DiskId(0)).unwrap();
            let tmp = d0.block_path(BlockKey::new(id, BlockIndex(9))).with_extension("blk.tmp");
            fs::create_dir_all(tmp.parent().unwrap()).unwrap();
            fs::write(tmp, b"x").unwrap();
            store.add_disk("d2").unwrap();
            let moves = store.reorg_moves().unwrap();
            store.copy_block(&moves[0]).unwrap();
        }
        let store = Store::open_without_recovery(&root).unwrap();
        let found = fsck(&store, false).unwrap();
        assert_eq!(found.temp_files, 1);
        assert_eq!(found.orphaned.len(), 5);
        assert_eq!(found.interrupted.unwrap().moved, 1);
        drop(store);
        let store = Store::open(&root).unwrap();
        let found = fsck(&store, false).unwrap();
        assert_eq!((found.temp_files, found.orphaned.len()), (0, 0), "{found:?}");
        let interrupted = found.interrupted.expect("still pending");
        assert_eq!(
            (interrupted.moved, interrupted.active, interrupted.pending),
            (1, Epoch(0), Epoch(1))
        );
        assert_eq!(store.recover().unwrap().pending, Some((Epoch(0), Epoch(1))));
    }

    /// The online path: copies through the disks' IO threads (non-real-time reads and writes),
    /// an ingest while the operation is pending, readers reading every block all along (paused
    /// only for the barrier between the flip and the deletion of the sources, as the server's
    /// scheduler drains); no read ever fails and every object reads back byte-identical.
    #[test]
    fn online_reorganisation_while_reading() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

        use crate::worker::{IoCommand, IoDone};

        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let store =
            Arc::new(Store::create(&root, &paths(&["d0", "d1", "d2"]), Bytes::kib(64)).unwrap());
        ingest(&store, "a", 60);
        ingest(&store, "b", 40);
        let expected = contents(&store);

        let stop = Arc::new(AtomicBool::new(false));
        let paused = Arc::new(AtomicBool::new(false));
        let passes = Arc::new(AtomicU64::new(0));
        let reader = std::thread::spawn({
            let (store, stop, paused, passes) =
                (Arc::clone(&store), Arc::clone(&stop), Arc::clone(&paused), Arc::clone(&passes));
            move || {
                let mut failures = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    if paused.load(Ordering::SeqCst) {
                        std::thread::sleep(Duration::from_millis(1));
                        continue;
                    }
                    for rec in store.catalog().objects().unwrap() {
                        for i in 0..rec.block_count() {
                            if let Err(e) = store.read_block_sync(&rec, BlockIndex(i)) {
                                failures.push(e.to_string());
                            }
                        }
                    }
                    passes.fetch_add(1, Ordering::SeqCst);
                }
                failures
            }
        });

        let (tx, rx) = crossbeam_channel::unbounded::<IoDone>();
        let spawn = |id: DiskId| {
            let tx = tx.clone();
            IoWorker::spawn(
                store.disk(id).unwrap(),
                id,
                0.5,
                Box::new(move |d| {
                    let _ = tx.send(d);
                }),
            )
            .unwrap()
        };
        let mut workers: BTreeMap<DiskId, IoWorker> =
            store.disk_ids().into_iter().map(|id| (id, spawn(id))).collect();
        let new = store.add_disk("d3").unwrap();
        workers.insert(new, spawn(new));
        let c = ingest(&store, "c", 30);
        assert_eq!(c.first_epoch, Epoch(1));

        let moves = store.reorg_moves().unwrap();
        let mut tags: HashMap<u64, Move> = HashMap::new();
        for (tag, mv) in moves.iter().enumerate() {
            tags.insert(tag as u64, *mv);
            workers[&mv.from].submit(IoCommand::NrtRead { key: mv.key, tag: tag as u64 });
        }
        let mut written = 0;
        while written < moves.len() {
            match rx.recv_timeout(Duration::from_secs(20)).unwrap() {
                IoDone::NrtRead(r) => {
                    let mv = tags[&r.tag];
                    let block = r.result.unwrap();
                    workers[&mv.to].submit(IoCommand::NrtWrite { key: mv.key, block, tag: r.tag });
                }
                IoDone::NrtWrite(w) => {
                    w.result.unwrap();
                    written += 1;
                }
                IoDone::Read(_) | IoDone::Write(_) => unreachable!("no real-time IO submitted"),
            }
        }
        let flipped = store.flip().unwrap();
        // The barrier: the reader finishes its pass (which may have located blocks before the
        // flip), then the sources go.
        paused.store(true, Ordering::SeqCst);
        let seen = passes.load(Ordering::SeqCst);
        while passes.load(Ordering::SeqCst) == seen {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(store.delete_sources(&flipped).unwrap(), moves.len() as u64);
        paused.store(false, Ordering::SeqCst);
        let seen = passes.load(Ordering::SeqCst);
        while passes.load(Ordering::SeqCst) < seen + 2 {
            std::thread::sleep(Duration::from_millis(1));
        }
        stop.store(true, Ordering::SeqCst);
        let failures = reader.join().unwrap();
        assert!(failures.is_empty(), "{} failed reads, first: {}", failures.len(), failures[0]);
        assert!(passes.load(Ordering::SeqCst) >= 3);
        assert_eq!(contents(&store)[..2], expected[..]);
        assert!(fsck(&store, false).unwrap().is_clean());
        let stats: u64 = workers.values().map(|w| w.stats().nrt_ops).sum();
        assert_eq!(stats, 2 * moves.len() as u64);
    }

    /// A Faithful store refuses an addition once its randomness budget is spent.
    #[test]
    fn faithful_store_refuses_when_the_budget_is_spent() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let specs: Vec<DiskSpec> = (0..8).map(|i| PathBuf::from(format!("d{i}")).into()).collect();
        let store =
            Store::create_with(&root, &specs, Bytes::kib(64), PlacementVariant::Faithful, 1)
                .unwrap();
        ingest(&store, "a", 10);
        let mut added = 0;
        let err = loop {
            match store.add_disk(&format!("x{added}")) {
                Ok(_) => {
                    store.reorganize(&mut |_| {}).unwrap();
                    added += 1;
                }
                Err(e) => break e,
            }
        };
        assert!(
            matches!(err, StoreError::Placement(PlacementError::RandomnessExhausted { .. })),
            "{err}"
        );
        assert!(added > 20, "{added}");
        // The refused disk left no trace in the catalog.
        assert_eq!(store.pending(), None);
        assert_eq!(store.meta().disks.len(), 8 + added);
        assert!(fsck(&store, false).unwrap().is_clean());
    }
}
