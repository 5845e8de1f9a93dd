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
//! as a whole.
//!
//! Writing an object (the ingest pipeline, built on this type): allocate an id with
//! [`Catalog::allocate_object_id`], pick a seed with [`new_seed`] and the current epoch, write
//! every block with [`Store::write_block`], then insert the record with
//! [`Catalog::insert_object`]. The record goes in last, so a crash leaves orphan block files
//! (which `fsck` reclaims), never a catalog entry with missing blocks.
//!
//! Removing reverses the order for the same reason: [`Store::remove`] deletes the catalog entry
//! first (atomically: the object disappears for every reader), then the block files.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use isochron_base::{BlockIndex, BlockKey, Bytes, DiskId, ObjectId};
use isochron_store::block::{BlockSizeError, validate_block_size};
use isochron_store::catalog::{
    Catalog, CatalogError, DiskRecord, DiskState, ObjectRecord, STORE_FORMAT_VERSION, StoreMeta,
};
use isochron_store::{Block, BlockError, Epoch, PlacementError, PlacementLog};

use crate::{AlignedBuf, DiskDir, DiskError, RedbCatalog};

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
        /// How many were given.
        count: usize,
    },
    /// The same disk directory was given twice.
    #[error("disk directory {path} is given twice")]
    DuplicateDiskPath {
        /// The directory.
        path: PathBuf,
    },
    /// The disk list is invalid for placement.
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
}

/// An open store: its catalog (locked for this process) and its disks.
#[derive(Debug)]
pub struct Store {
    root: PathBuf,
    meta: StoreMeta,
    catalog: RedbCatalog,
    disks: BTreeMap<DiskId, Arc<DiskDir>>,
}

impl Store {
    /// Creates a store at `root` with the given disk directories (ids `0..n` in that order) and
    /// block size. No disks means one disk at `root/disk-0`. Relative disk paths are stored as
    /// given and resolved against `root`. On failure, disks initialised by this call are
    /// un-initialised again.
    pub fn create(root: &Path, disks: &[PathBuf], block_size: Bytes) -> Result<Self, StoreError> {
        validate_block_size(block_size)?;
        if Self::exists(root) {
            return Err(StoreError::AlreadyExists { root: root.to_owned() });
        }
        fs::create_dir_all(root).map_err(|source| StoreError::Io {
            op: "create directory",
            path: root.to_owned(),
            source,
        })?;
        let paths =
            if disks.is_empty() { vec![PathBuf::from(DEFAULT_DISK_DIR)] } else { disks.to_vec() };
        if paths.len() > usize::from(u16::MAX) + 1 {
            return Err(StoreError::TooManyDisks { count: paths.len() });
        }
        for (i, p) in paths.iter().enumerate() {
            if paths[..i].iter().any(|q| resolve(root, q) == resolve(root, p)) {
                return Err(StoreError::DuplicateDiskPath { path: p.clone() });
            }
        }
        let store_id = loop {
            let id = rand::random::<u64>();
            if id != 0 {
                break id;
            }
        };
        let records: Vec<DiskRecord> = paths
            .into_iter()
            .enumerate()
            .map(|(i, path)| DiskRecord { id: DiskId(i as u16), path, state: DiskState::Active })
            .collect();
        let meta = StoreMeta {
            store_id,
            format_version: STORE_FORMAT_VERSION,
            block_size,
            placement: PlacementLog::new(records.iter().map(|d| d.id).collect())?,
            disks: records,
            next_object_id: 1,
        };

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
            disks = opened.len(), %block_size, "created store");
        Ok(Self { root: root.to_owned(), meta, catalog, disks: opened })
    }

    /// Opens the store at `root`: locks its catalog and opens every disk that is not retired,
    /// checking each disk's identity.
    pub fn open(root: &Path) -> Result<Self, StoreError> {
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
            let disk = DiskDir::open(&resolve(root, &rec.path), meta.store_id, rec.id)?;
            disks.insert(rec.id, Arc::new(disk));
        }
        Ok(Self { root: root.to_owned(), meta, catalog, disks })
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

    /// The store metadata as of [`Store::open`]/[`Store::create`]. Its `next_object_id` is not
    /// kept up to date; ask [`Store::catalog`] for the live value.
    #[must_use]
    pub fn meta(&self) -> &StoreMeta {
        &self.meta
    }

    /// The block size new objects are cut with.
    #[must_use]
    pub fn block_size(&self) -> Bytes {
        self.meta.block_size
    }

    /// The current placement epoch: the `first_epoch` of objects written now.
    #[must_use]
    pub fn current_epoch(&self) -> Epoch {
        self.meta.placement.current_epoch()
    }

    /// The catalog.
    #[must_use]
    pub fn catalog(&self) -> &RedbCatalog {
        &self.catalog
    }

    /// The open disk `id`.
    #[must_use]
    pub fn disk(&self, id: DiskId) -> Option<&Arc<DiskDir>> {
        self.disks.get(&id)
    }

    /// The open disks, by id.
    pub fn disks(&self) -> impl Iterator<Item = (DiskId, &Arc<DiskDir>)> {
        self.disks.iter().map(|(id, d)| (*id, d))
    }

    /// The disk holding block `index` of `rec` in the current epoch.
    #[must_use]
    pub fn locate(&self, rec: &ObjectRecord, index: BlockIndex) -> DiskId {
        self.meta.placement.locate(rec.seed, rec.first_epoch, index, self.current_epoch())
    }

    /// Durably writes an encoded block of object `rec_id` (placed by `seed` and `first_epoch`)
    /// to the disk placement picks in the current epoch; returns that disk.
    pub fn write_block(
        &self,
        rec_id: ObjectId,
        seed: u64,
        first_epoch: Epoch,
        index: BlockIndex,
        bytes: &[u8],
    ) -> Result<DiskId, StoreError> {
        let key = BlockKey::new(rec_id, index);
        let id = self.meta.placement.locate(seed, first_epoch, index, self.current_epoch());
        let disk = self.disks.get(&id).ok_or(StoreError::DiskNotOpen { key, disk: id })?;
        disk.write_block(key, bytes)?;
        Ok(id)
    }

    /// Removes the object named `name`: its catalog entry first (atomic), then its block files
    /// on every open disk. Returns the removed record.
    ///
    /// A crash (or an IO error, which is logged) after the first step leaves orphan block files
    /// that no catalog entry refers to; `fsck` reclaims them. The object itself is gone either
    /// way.
    pub fn remove(&self, name: &str) -> Result<ObjectRecord, StoreError> {
        let rec = self
            .catalog
            .remove_object(name)?
            .ok_or_else(|| StoreError::NoSuchObject { name: name.to_owned() })?;
        for disk in self.disks.values() {
            if let Err(e) = disk.remove_object(rec.id) {
                tracing::warn!(object = %rec.name, id = %rec.id, error = %e,
                    "could not delete block files of a removed object; fsck will reclaim them");
            }
        }
        Ok(rec)
    }

    /// Reads and verifies block `index` of `rec` on the calling thread (for tools and tests;
    /// the server reads through [`IoWorker`](crate::IoWorker)s).
    pub fn read_block_sync(
        &self,
        rec: &ObjectRecord,
        index: BlockIndex,
    ) -> Result<Block<AlignedBuf>, StoreError> {
        let key = BlockKey::new(rec.id, index);
        let id = self.locate(rec, index);
        let disk = self.disks.get(&id).ok_or(StoreError::DiskNotOpen { key, disk: id })?;
        Ok(disk.read_block(key)?)
    }
}

/// A fresh random placement seed for a new object.
#[must_use]
pub fn new_seed() -> u64 {
    rand::random()
}

/// A disk path as stored, resolved against the store root.
fn resolve(root: &Path, disk: &Path) -> PathBuf {
    if disk.is_absolute() { disk.to_owned() } else { root.join(disk) }
}

#[cfg(test)]
mod tests {
    use isochron_base::{BitRate, Gsn, MediaTime};
    use isochron_store::catalog::BlockEntry;

    use super::*;
    use crate::IoWorker;
    use crate::testutil::encode_block;

    fn ingest(store: &Store, name: &str, blocks: u32) -> ObjectRecord {
        let id = store.catalog().allocate_object_id().unwrap();
        let seed = new_seed();
        let first_epoch = store.current_epoch();
        let mut entries = Vec::new();
        let mut gsn = 0;
        for i in 0..blocks {
            let key = BlockKey::new(id, BlockIndex(i));
            let bytes = encode_block(key, Gsn(gsn), 3);
            let block = Block::parse(&bytes[..], Some(key)).unwrap();
            entries.push(BlockEntry::from(block.header()));
            gsn += u64::from(block.header().packet_count);
            store.write_block(id, seed, first_epoch, BlockIndex(i), &bytes).unwrap();
        }
        let rec = ObjectRecord {
            id,
            name: name.into(),
            seed,
            first_epoch,
            block_size: store.block_size(),
            blocks: entries,
            packets: gsn,
            ts_bytes: Bytes(gsn * 1316),
            duration: MediaTime::from_nanos(gsn),
            avg_bitrate: BitRate(1),
            peak_bitrate: BitRate(1),
            seek_points: vec![],
            streams: vec![],
            source_file: String::new(),
            created_unix_s: 0,
        };
        store.catalog().insert_object(&rec).unwrap();
        rec
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
            assert_eq!(store.disks().count(), 3);
            assert_eq!(store.disk(DiskId(1)).unwrap().path(), abs);
            assert_eq!(store.meta().disks[0].path, PathBuf::from("d0"));
            assert!(matches!(
                Store::open(&root),
                Err(StoreError::Catalog(CatalogError::Locked { .. }))
            ));
            ingest(&store, "movie.ts", 30)
        };
        assert!(matches!(
            Store::create(&root, &[], Bytes::kib(64)),
            Err(StoreError::AlreadyExists { .. })
        ));
        let store = Store::open(&root).unwrap();
        assert_eq!(store.root(), root);
        assert_eq!(store.block_size(), Bytes::kib(64));
        let rec2 = store.catalog().object("movie.ts").unwrap().unwrap();
        assert_eq!(rec2, rec);
        let mut used = std::collections::HashSet::new();
        for i in 0..30 {
            let block = store.read_block_sync(&rec, BlockIndex(i)).unwrap();
            assert_eq!(block.header().key, BlockKey::new(rec.id, BlockIndex(i)));
            used.insert(store.locate(&rec, BlockIndex(i)));
        }
        assert_eq!(used.len(), 3, "30 blocks over 3 disks should touch all of them");
        let total: u64 = store.disks().map(|(_, d)| d.usage().unwrap().blocks).sum();
        assert_eq!(total, 30);

        let removed = store.remove("movie.ts").unwrap();
        assert_eq!(removed.id, rec.id);
        assert!(store.catalog().object("movie.ts").unwrap().is_none());
        let total: u64 = store.disks().map(|(_, d)| d.usage().unwrap().blocks).sum();
        assert_eq!(total, 0);
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
        let err = Store::open(&root).unwrap_err();
        assert!(matches!(err, StoreError::NoStore { .. }));
        assert!(err.to_string().contains("no isochron store at"), "{err}");
        assert!(matches!(Store::create(&root, &[], Bytes(1000)), Err(StoreError::BlockSize(_))));
        let store = Store::create(&root, &[], Bytes::mib(1)).unwrap();
        assert_eq!(store.disks().count(), 1);
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
        let other = dir.path().join("other");
        let _other = Store::create(&other, &[], Bytes::mib(1)).unwrap();
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
            Store::create(
                &dir.path().join("x"),
                &[PathBuf::from("d"), PathBuf::from("d")],
                Bytes::mib(1)
            ),
            Err(StoreError::DuplicateDiskPath { .. })
        ));
    }

    #[test]
    fn open_refuses_swapped_disks() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("s");
        let disks = vec![PathBuf::from("a"), PathBuf::from("b")];
        drop(Store::create(&root, &disks, Bytes::mib(1)).unwrap());
        fs::rename(root.join("a"), root.join("tmp")).unwrap();
        fs::rename(root.join("b"), root.join("a")).unwrap();
        fs::rename(root.join("tmp"), root.join("b")).unwrap();
        let err = Store::open(&root).unwrap_err();
        assert!(matches!(err, StoreError::Disk(DiskError::WrongDisk { .. })), "{err}");
    }
}
