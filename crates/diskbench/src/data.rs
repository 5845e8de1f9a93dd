//! The benchmark's data: a throw-away store whose disks hold a pool of random blocks, laid out
//! as a store lays them out (XTREAM §3's dummy streams read real data from the disk).
//!
//! Why a pool: a workload of N streams of 10 minutes each would need N objects' worth of blocks
//! on disk. Instead one object of random blocks (the pool) is written once per disk set
//! (`--prepare`), placed by the store's Yima placement and recorded in its catalog like any
//! ingested object, and every stream's *logical* block (its own object and index, which is what
//! the scheduler and its cache see, so no two streams share a block) is read from a *physical*
//! pool block on the disk the workload placed it on ([`BenchStore::physical`], a hash of the
//! logical key). Reads are `O_DIRECT`, so reading a pool block again costs the disk again.
//!
//! Recording streams (`--write`) write their blocks to per-stream scratch objects that are not
//! in the catalog, cycling over [`WRITE_SLOTS`] files per stream, and are deleted after the run
//! (or, after a crash, by the store's recovery).
//!
//! Not here: timing (see [`crate::run`](mod@crate::run)).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, bail};
use isochron_base::mix::{SplitMix64, hash_words, reduce};
use isochron_base::{BitRate, BlockIndex, BlockKey, Bytes, DiskId, Gsn, MediaTime, ObjectId};
use isochron_diskio::{DiskDir, Store, profile as disk_profile};
use isochron_sched::profile::DiskProfile;
use isochron_store::catalog::{BlockEntry, DiskSpec, ObjectRecord, SeekPoint};
use isochron_store::{Block, BlockBuilder, PacketMeta};

/// Name of the pool object in the bench store's catalog.
pub const POOL_OBJECT: &str = "diskbench-pool";
/// Files each recording stream cycles over.
pub const WRITE_SLOTS: u32 = 4;
/// Object ids of recording streams' scratch objects start here (far above catalog ids).
const WRITE_OBJECT_BASE: u64 = 1 << 48;
/// Bytes of one payload unit (7 TS packets).
const UNIT: usize = 7 * 188;

/// How to prepare a bench store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PrepareOptions {
    /// The block size (every pool block is full). Default 1 MiB.
    pub block_size: Bytes,
    /// Pool blocks per disk (on average: placement is pseudo-random). Default 256.
    pub pool_blocks_per_disk: u32,
    /// Seed of the payload and placement.
    pub seed: u64,
}

impl Default for PrepareOptions {
    fn default() -> Self {
        Self { block_size: Bytes::mib(1), pool_blocks_per_disk: 256, seed: 1 }
    }
}

/// Where a disk's profile came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProfileSource {
    /// The emulation model (its spec form).
    Model(String),
    /// A profile file written by `isochron profile-disk`.
    File(std::path::PathBuf),
}

/// A prepared bench store: the store, its pool and its disks.
#[derive(Debug)]
pub struct BenchStore {
    store: Store,
    record: ObjectRecord,
    pool: BTreeMap<DiskId, Vec<BlockIndex>>,
    block_len: Bytes,
}

impl BenchStore {
    /// Creates the bench store at `root` on `disks` (or opens it, if it exists and its disks are
    /// `disks` or `disks` is empty) and writes the pool unless it is already there with at
    /// least as many blocks of the same size. The emulation of emulated disks is paused while
    /// the pool is written.
    pub fn prepare(root: &Path, disks: &[DiskSpec], opts: &PrepareOptions) -> anyhow::Result<Self> {
        let store = if Store::exists(root) {
            let store = Store::open(root)?;
            if !disks.is_empty() {
                let have: Vec<DiskSpec> = store
                    .meta()
                    .disks
                    .iter()
                    .map(|d| DiskSpec { path: store.root().join(&d.path), model: d.model })
                    .collect();
                let want: Vec<DiskSpec> = disks
                    .iter()
                    .map(|d| DiskSpec { path: root.join(&d.path), model: d.model })
                    .collect();
                if have != want {
                    bail!(
                        "{} is a bench store on other disks ({}); remove it to start afresh",
                        root.display(),
                        have.iter().map(ToString::to_string).collect::<Vec<_>>().join(" ")
                    );
                }
            }
            store
        } else {
            Store::create(root, disks, opts.block_size)
                .with_context(|| format!("creating the bench store at {}", root.display()))?
        };
        if store.block_size() != opts.block_size {
            bail!(
                "{} holds blocks of {}, not {}; remove it to start afresh",
                root.display(),
                store.block_size(),
                opts.block_size
            );
        }
        let want = u64::from(opts.pool_blocks_per_disk) * store.disk_ids().len() as u64;
        match store.catalog().object(POOL_OBJECT)? {
            Some(rec) if rec.blocks.len() as u64 >= want => {}
            Some(_) => {
                store.remove(POOL_OBJECT)?;
                write_pool(&store, want, opts.seed)?;
            }
            None => write_pool(&store, want, opts.seed)?,
        }
        Self::from_store(store)
    }

    /// Opens a prepared bench store.
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        let store =
            Store::open(root).context("opening the bench store (prepare it with --prepare)")?;
        Self::from_store(store)
    }

    fn from_store(store: Store) -> anyhow::Result<Self> {
        let Some(record) = store.catalog().object(POOL_OBJECT)? else {
            bail!("{} has no block pool; run with --prepare first", store.root().display());
        };
        let mut pool: BTreeMap<DiskId, Vec<BlockIndex>> =
            store.disk_ids().into_iter().map(|d| (d, Vec::new())).collect();
        for i in 0..record.blocks.len() {
            let index = BlockIndex(u32::try_from(i)?);
            pool.entry(store.locate(&record, index)).or_default().push(index);
        }
        if let Some((d, _)) = pool.iter().find(|(_, v)| v.is_empty()) {
            bail!("disk {d} holds no pool block; prepare a bigger pool (--pool-blocks)");
        }
        // Every pool block is full: the first one's length is every one's.
        let first = store.read_block_sync(&record, BlockIndex(0))?;
        let block_len = Bytes(first.as_bytes().len() as u64);
        Ok(Self { store, record, pool, block_len })
    }

    /// The store.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The disks, by id.
    #[must_use]
    pub fn disks(&self) -> Vec<(DiskId, Arc<DiskDir>)> {
        self.store.disks()
    }

    /// The disk ids.
    #[must_use]
    pub fn disk_ids(&self) -> Vec<DiskId> {
        self.store.disk_ids()
    }

    /// The length of every block (what one read transfers).
    #[must_use]
    pub fn block_len(&self) -> Bytes {
        self.block_len
    }

    /// Pool blocks on `disk`.
    #[must_use]
    pub fn pool_blocks(&self, disk: DiskId) -> usize {
        self.pool.get(&disk).map_or(0, Vec::len)
    }

    /// The pool block on `disk` that stands for a stream's logical block `logical`.
    #[must_use]
    pub fn physical(&self, disk: DiskId, logical: BlockKey) -> Option<BlockKey> {
        let blocks = self.pool.get(&disk)?;
        let n = u32::try_from(blocks.len()).ok()?;
        let h = hash_words(&[0x504f_4f4c, logical.object.0, u64::from(logical.index.0)]);
        let index = *blocks.get(reduce(h, n) as usize)?;
        Some(BlockKey::new(self.record.id, index))
    }

    /// The scratch file recording stream `stream` writes its block `index` to.
    #[must_use]
    pub fn write_key(stream: u64, index: BlockIndex) -> BlockKey {
        BlockKey::new(ObjectId(WRITE_OBJECT_BASE + stream), BlockIndex(index.0 % WRITE_SLOTS))
    }

    /// Deletes recording stream `stream`'s scratch files on every disk.
    pub fn remove_write_files(&self, stream: u64) {
        for (_, disk) in self.disks() {
            if let Err(e) = disk.remove_object(ObjectId(WRITE_OBJECT_BASE + stream)) {
                tracing::warn!(error = %e, "could not delete a recording's scratch files");
            }
        }
    }

    /// A full block of random payload with key `key`, parsed (ready to hand to an IO thread).
    pub fn random_block(
        &self,
        key: BlockKey,
        seed: u64,
    ) -> anyhow::Result<Block<isochron_diskio::AlignedBuf>> {
        let bytes = random_block(key, Gsn(0), self.store.block_size(), seed);
        Ok(Block::parse(isochron_diskio::AlignedBuf::copy_from(&bytes), Some(key))?)
    }

    /// `disk`'s profile: from its emulation model, else from its profile file
    /// (`<disk>/isochron-profile.json`), else `None`.
    pub fn profile(&self, disk: DiskId) -> anyhow::Result<Option<(DiskProfile, ProfileSource)>> {
        let Some(dir) = self.store.disk(disk) else { return Ok(None) };
        if let Some(model) = dir.model() {
            let p = disk_profile::from_model(&model)?;
            return Ok(Some((p, ProfileSource::Model(model.to_string()))));
        }
        let path = disk_profile::profile_path(dir.path());
        if !path.exists() {
            return Ok(None);
        }
        Ok(Some((disk_profile::load(&path)?, ProfileSource::File(path))))
    }
}

/// Writes the pool object: `blocks` full blocks of random payload, placed by the store, then its
/// catalog record (last, as ingest does).
fn write_pool(store: &Store, blocks: u64, seed: u64) -> anyhow::Result<()> {
    let disks = store.disks();
    let models: Vec<_> = disks.iter().map(|(_, d)| d.model()).collect();
    for (_, d) in &disks {
        d.set_model(None);
    }
    let result = write_pool_blocks(store, blocks, seed);
    for ((_, d), m) in disks.iter().zip(models) {
        d.set_model(m);
    }
    let rec = result?;
    store.catalog().insert_object(&rec)?;
    tracing::info!(blocks, root = %store.root().display(), "wrote the bench block pool");
    Ok(())
}

fn write_pool_blocks(store: &Store, blocks: u64, seed: u64) -> anyhow::Result<ObjectRecord> {
    let _lock = store.ingest_lock();
    let id = store.catalog().allocate_object_id()?;
    let epoch = store.current_epoch();
    let block_size = store.block_size();
    let mut entries = Vec::new();
    let mut gsn = 0u64;
    for i in 0..u32::try_from(blocks)? {
        let key = BlockKey::new(id, BlockIndex(i));
        let bytes = random_block(key, Gsn(gsn), block_size, seed);
        let block = Block::parse(&bytes[..], Some(key))?;
        entries.push(BlockEntry::from(block.header()));
        gsn += u64::from(block.header().packet_count);
        store.write_block(id, seed, epoch, BlockIndex(i), &bytes)?;
    }
    Ok(ObjectRecord {
        id,
        name: POOL_OBJECT.into(),
        seed,
        first_epoch: epoch,
        block_size,
        blocks: entries,
        packets: gsn,
        ts_bytes: Bytes(gsn * UNIT as u64),
        duration: MediaTime::from_nanos(gsn),
        avg_bitrate: BitRate(1),
        peak_bitrate: BitRate(1),
        seek_points: vec![SeekPoint { time: MediaTime::ZERO, gsn: Gsn(0) }],
        streams: vec![],
        source_file: "random payload (isochron bench-disk --prepare)".into(),
        created_unix_s: 0,
        media: None,
    })
}

/// A full block of random 7-TS-packet payload units with key `key`.
fn random_block(key: BlockKey, first_gsn: Gsn, block_size: Bytes, seed: u64) -> Vec<u8> {
    let mut rng = SplitMix64::new(hash_words(&[seed, key.object.0, u64::from(key.index.0)]));
    let mut b = BlockBuilder::new(key, first_gsn, block_size);
    let mut unit = vec![0u8; UNIT];
    let mut k = 0u64;
    while b.fits(UNIT) {
        for w in unit.chunks_exact_mut(4) {
            w.copy_from_slice(&(rng.next_u64() as u32).to_le_bytes());
        }
        for p in unit.chunks_exact_mut(188) {
            p[0] = 0x47;
        }
        let meta = PacketMeta {
            send_time: MediaTime::from_nanos(first_gsn.0 + k),
            ts_packets: 7,
            random_access: k == 0,
            discontinuity: false,
        };
        b.push(meta, &unit);
        k += 1;
    }
    b.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_places_a_pool_and_maps_logical_blocks_onto_it() {
        let dir = tempfile::tempdir().unwrap();
        let disks: Vec<DiskSpec> =
            ["d0", "d1,seek_ms=1,rate_mib_s=400"].iter().map(|s| s.parse().unwrap()).collect();
        let opts = PrepareOptions { block_size: Bytes::kib(64), pool_blocks_per_disk: 8, seed: 3 };
        let b = BenchStore::prepare(&dir.path().join("store"), &disks, &opts).unwrap();
        assert_eq!(b.disk_ids(), vec![DiskId(0), DiskId(1)]);
        assert!(b.pool_blocks(DiskId(0)) > 0 && b.pool_blocks(DiskId(1)) > 0);
        assert_eq!(b.pool_blocks(DiskId(0)) + b.pool_blocks(DiskId(1)), 16);
        assert!(b.block_len() <= Bytes::kib(64) && b.block_len() > Bytes::kib(60));
        // A logical block maps to a pool block on the disk asked for, which reads back.
        for d in [DiskId(0), DiskId(1)] {
            let phys = b.physical(d, BlockKey::new(ObjectId(77), BlockIndex(5))).unwrap();
            let block = b.store().disk(d).unwrap().read_block(phys).unwrap();
            assert_eq!(block.as_bytes().len() as u64, b.block_len().0);
        }
        // The emulated disk's profile comes from its model; the other has none yet.
        assert!(matches!(b.profile(DiskId(1)).unwrap(), Some((_, ProfileSource::Model(_)))));
        assert!(b.profile(DiskId(0)).unwrap().is_none());
        drop(b);
        // Preparing again reuses the pool; other disks are refused.
        let again = BenchStore::prepare(&dir.path().join("store"), &[], &opts).unwrap();
        assert_eq!(again.pool_blocks(DiskId(0)) + again.pool_blocks(DiskId(1)), 16);
        drop(again);
        let e = BenchStore::prepare(&dir.path().join("store"), &disks[..1], &opts).unwrap_err();
        assert!(e.to_string().contains("other disks"), "{e}");
        let b = BenchStore::open(&dir.path().join("store")).unwrap();
        let w = b.random_block(BenchStore::write_key(3, BlockIndex(9)), 1).unwrap();
        assert_eq!(w.header().key, BlockKey::new(ObjectId((1 << 48) + 3), BlockIndex(1)));
    }
}
