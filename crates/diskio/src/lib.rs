//! All of isochron's storage IO: disk directories, `O_DIRECT` reads, per-disk IO threads and the
//! redb catalog.
//!
//! Why a crate of its own: the cores (`store`, `sched`, …) are sans-IO (`CONTRIBUTING.md`), so
//! every file the project touches for storage is touched here, behind a small API:
//!
//! - [`AlignedBuf`]: the 4 KiB-aligned buffers direct reads need (`O_DIRECT`, open(2)).
//! - [`DiskDir`]: one disk = one directory of block files with an identity file;
//!   crash-safe writes, verified `O_DIRECT` reads.
//!   A disk may be emulated (a latency and transfer model after Gennart et al., §3.2).
//! - [`IoWorker`]: one OS thread per disk, fed over a channel (XTREAM §2.1), with a real-time
//!   and a non-real-time class sharing the disk (XTREAM's reserved share).
//! - [`RedbCatalog`]: the embedded [`Catalog`](isochron_store::Catalog).
//! - [`Store`]: the catalog plus its disks, used by the CLI and the server; online disk scaling
//!   (SCADDAR, Goel et al. ICDE 2002) with crash-ordered steps (`docs/design/scaling.md`).
//! - [`fsck`](fsck::fsck): checks every block and every file, repairs what it can.
//!
//! This crate does not schedule (that is `isochron-sched`) and does not parse media (the ingest
//! pipeline builds blocks with `isochron_store::BlockBuilder` and writes them through [`Store`]).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod buf;
pub mod catalog;
pub mod disk;
pub mod fsck;
pub mod ingest;
pub mod profile;
pub mod store;
pub mod worker;

pub use buf::AlignedBuf;
pub use catalog::RedbCatalog;
pub use disk::{BlockFile, BlockFiles, DiskDir, DiskError, DiskUsage, RawBlock};
pub use fsck::{BlockFileRef, BlockProblem, FsckReport, InterruptedReorg, OrphanReason, fsck};
pub use store::{
    CopyOutcome, FlipReport, IngestLock, RecoveryReport, ReorgProgress, ReorgReport, Store,
    StoreError, new_seed,
};
pub use worker::{
    DEFAULT_NRT_SHARE, DEFAULT_NRT_WINDOW, IoCommand, IoConfig, IoDone, IoStats, IoWorker,
    ReadDone, WriteDone,
};

#[cfg(test)]
mod testutil {
    use isochron_base::{BitRate, BlockIndex, BlockKey, Bytes, Gsn, MediaTime};
    use isochron_store::catalog::{BlockEntry, ObjectRecord};
    use isochron_store::{Block, BlockBuilder, PacketMeta};

    use crate::Store;

    /// Writes an object of `blocks` blocks the way ingest does (under the ingest lock, at the
    /// current epoch) and commits it.
    pub(crate) fn ingest(store: &Store, name: &str, blocks: u32) -> ObjectRecord {
        let _lock = store.ingest_lock();
        let id = store.catalog().allocate_object_id().unwrap();
        // A seed from the name, so that tests place (and move) the same blocks every run.
        let seed = isochron_base::mix::hash_words(&name.bytes().map(u64::from).collect::<Vec<_>>());
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
            media: None,
        };
        store.catalog().insert_object(&rec).unwrap();
        rec
    }

    /// Every object's payloads, concatenated in block order, read where readers find them.
    pub(crate) fn contents(store: &Store) -> Vec<(String, Vec<u8>)> {
        let mut out = Vec::new();
        for rec in store.catalog().objects().unwrap() {
            let mut bytes = Vec::new();
            for i in 0..rec.block_count() {
                let block = store.read_block_sync(&rec, BlockIndex(i)).unwrap();
                bytes.extend_from_slice(block.payload());
            }
            out.push((rec.name, bytes));
        }
        out
    }

    /// An encoded 64 KiB block of `packets` 7-TS-packet payloads.
    pub(crate) fn encode_block(key: BlockKey, first_gsn: Gsn, packets: u32) -> Vec<u8> {
        let mut b = BlockBuilder::new(key, first_gsn, Bytes::kib(64));
        for i in 0..packets {
            let meta = PacketMeta {
                send_time: MediaTime::from_nanos((first_gsn.0 + u64::from(i)) * 1000),
                ts_packets: 7,
                random_access: i == 0,
                discontinuity: false,
            };
            let payload: Vec<u8> = (0..7 * 188u32).map(|j| (j ^ i ^ key.index.0) as u8).collect();
            b.push(meta, &payload);
        }
        b.finish()
    }
}
