//! All of isochron's storage IO: disk directories, `O_DIRECT` reads, per-disk IO threads and the
//! redb catalog.
//!
//! Why a crate of its own: the cores (`store`, `sched`, …) are sans-IO (`CONTRIBUTING.md`), so
//! every file the project touches for storage is touched here, behind a small API:
//!
//! - [`AlignedBuf`]: the 4 KiB-aligned buffers direct reads need (algorithms.md §5.5).
//! - [`DiskDir`]: one disk = one directory of block files with an identity file (DESIGN §2.4);
//!   crash-safe writes, verified `O_DIRECT` reads.
//! - [`IoWorker`]: one OS thread per disk, fed over a channel (DESIGN §2.6).
//! - [`RedbCatalog`]: the embedded [`Catalog`](isochron_store::Catalog) (DESIGN §2.5).
//! - [`Store`]: the catalog plus its disks, used by the CLI and the server.
//!
//! This crate does not schedule (that is `isochron-sched`) and does not parse media (the ingest
//! pipeline builds blocks with `isochron_store::BlockBuilder` and writes them through [`Store`]).

#![deny(unsafe_op_in_unsafe_fn)]

pub mod buf;
pub mod catalog;
pub mod disk;
pub mod ingest;
pub mod store;
pub mod worker;

pub use buf::AlignedBuf;
pub use catalog::RedbCatalog;
pub use disk::{BlockFile, BlockFiles, DiskDir, DiskError, DiskUsage};
pub use store::{Store, StoreError, new_seed};
pub use worker::{IoCommand, IoWorker, ReadDone};

#[cfg(test)]
mod testutil {
    use isochron_base::{BlockKey, Bytes, Gsn, MediaTime};
    use isochron_store::{BlockBuilder, PacketMeta};

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
