//! isochron's block format, Yima/SCADDAR placement and catalog records (pure, no IO).
//!
//! Why a crate of its own: what a stored object *is* — the bytes of a block, the disk a block
//! lives on, the record the catalog keeps — is persistent state shared by the ingest tool, the
//! server, the simulator and, later, every node of a cluster. Keeping it free of IO (no files, no
//! clock, no threads; see `CONTRIBUTING.md`) lets all of them use it and lets tests pin it with
//! golden vectors.
//!
//! - [`block`]: the self-describing block format (`docs/design/block-format.md`).
//! - [`placement`]: Yima pseudo-random placement (Yima §2.2) and SCADDAR epochs (ICDE 2002).
//! - [`catalog`]: versioned catalog records and the [`Catalog`] trait.
//! - [`replica`]: where the K copies of a block are (`store.replication`; Yima §2.1's fault
//!   tolerance).
//! - [`reorg`]: which blocks a pending SCADDAR operation moves (`docs/design/scaling.md`).
//! - `testing` (feature `testing`): the behaviour every [`Catalog`] implementation is checked
//!   against.
//!
//! Reading and writing files, the redb catalog and the IO threads are in `isochron-diskio`.

pub mod block;
pub mod catalog;
pub mod placement;
pub mod reorg;
pub mod replica;
#[cfg(feature = "testing")]
pub mod testing;

pub use block::{
    BLOCK_ALIGN, BLOCK_FORMAT_VERSION, BLOCK_MAGIC, Block, BlockBuilder, BlockError, BlockHeader,
    ENTRY_LEN, HEADER_LEN, PacketMeta, PacketRef,
};
pub use catalog::{
    BlockEntry, Catalog, CatalogError, DiskModel, DiskRecord, DiskSpec, DiskSpecError, DiskState,
    ObjectRecord, RENDITION_SEP, SeekPoint, StoreMeta, StreamDesc, is_rendition_of, locate_active,
    rendition_name, split_rendition, title_of, validate_name, validate_title,
};
pub use placement::{Epoch, PlacementError, PlacementLog, PlacementVariant, ScaleOp};
pub use reorg::{Move, count_moves, moves};
pub use replica::locate_replicas;
