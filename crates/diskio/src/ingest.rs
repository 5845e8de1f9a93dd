//! Ingest: an MPEG-TS file becomes blocks on the store's disks and one catalog entry.
//!
//! Two passes over the source (DESIGN §1, "parsed once" at ingest, never at play time):
//!
//! 1. **Scan.** [`TsScanner`] validates every packet and builds the timing index: PCR anchors,
//!    cut points, random-access points. Nothing is written, so a file that is not MPEG-TS (or has
//!    no PCR to pace it by) is refused with the store unchanged.
//! 2. **Store.** The payload units ([`TsIndex::units`]: ≤ 7 TS packets, each with its send time)
//!    are packed into blocks of whole units (DESIGN §2.2); each block goes to the disk Yima's
//!    placement picks for `(seed, index)`, and with replication (`store.replication` K) to the
//!    K−1 other disks its copies are placed on (`isochron_store::replica`), each copy written
//!    durably (temp file, fsync, rename).
//!
//! Only when every copy of every block is durable is the catalog entry committed, in one redb
//! transaction. A
//! crash before that leaves orphan block files and no entry: the object does not exist, and the
//! next [`Store::open`] removes the orphans. An error after some blocks were written removes them
//! before returning.
//!
//! Pass 2 holds the store's [`Store::ingest_lock`]: a disk addition or removal waits for it, so
//! the object's `first_epoch` is still the placement log's current epoch when the record is
//! committed (while a reorganisation is pending, that is the pending epoch: the object is written
//! where the new placement puts it and never has to move).
//!
//! The pieces every writer of a new object shares live here too, so that an object recorded live
//! (the server's recorder: blocks written through the scheduler at a guaranteed rate) is stored
//! exactly as an ingested one: [`NewObject`] (id, seed, epoch), [`BlockPacker`] (units into
//! blocks, seek points), [`NewObject::record`] (the catalog entry) and [`remove_blocks`] (undo).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use isochron_base::{BlockIndex, BlockKey, Bytes, DiskId, Gsn, ObjectId, Replicas};
use isochron_media::{TS_PACKET_SIZE, TsError, TsIndex, TsScanner, Unit};
use isochron_store::Epoch;
use isochron_store::block::{Block, BlockBuilder, PacketMeta};
use isochron_store::catalog::{
    BlockEntry, CatalogError, ObjectRecord, SeekPoint, StreamDesc, validate_name,
};
use thiserror::Error;

use crate::AlignedBuf;
use crate::store::{Store, StoreError, new_seed};

/// Progress of an ingest, reported as it goes.
#[derive(Clone, Copy, Debug)]
pub struct IngestProgress {
    /// 1 while scanning, 2 while storing.
    pub pass: u8,
    /// Source bytes processed in this pass.
    pub bytes_done: u64,
    /// Source size.
    pub total_bytes: u64,
}

/// What an ingest produced.
#[derive(Clone, Debug)]
pub struct IngestReport {
    /// The committed catalog entry.
    pub record: ObjectRecord,
    /// Bytes of a partial packet at the end of the source that were left out (0 normally).
    pub trailing_bytes: u64,
}

/// Why an ingest failed. Messages say what is wrong with the input; callers add the file name.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The source is not usable MPEG-TS.
    #[error("{0}")]
    Media(#[from] TsError),
    /// Reading the source failed.
    #[error("cannot read: {0}")]
    Read(#[source] io::Error),
    /// The source changed between the two passes.
    #[error("the file changed while it was being ingested (at byte {offset})")]
    Changed {
        /// Where the second pass found different data.
        offset: u64,
    },
    /// The name is taken.
    #[error("an object named {name:?} already exists (remove it first with `isochron rm {name}`)")]
    Exists {
        /// The name.
        name: String,
    },
    /// The name is not valid, or the catalog failed.
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    /// Writing a block failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Ingests the file at `path` as object `name`.
pub fn ingest_file(
    store: &Store,
    path: &Path,
    name: &str,
    progress: &mut dyn FnMut(IngestProgress),
) -> Result<IngestReport, IngestError> {
    let mut f = File::open(path).map_err(IngestError::Read)?;
    let source = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    ingest(store, &mut f, &source, name, progress)
}

/// Ingests `src` (read twice, from its start) as object `name`; `source_name` is recorded in the
/// catalog.
pub fn ingest<R: Read + Seek>(
    store: &Store,
    src: &mut R,
    source_name: &str,
    name: &str,
    progress: &mut dyn FnMut(IngestProgress),
) -> Result<IngestReport, IngestError> {
    validate_name(name)?;
    let catalog = store.catalog();
    if catalog.object(name)?.is_some() {
        return Err(IngestError::Exists { name: name.to_string() });
    }
    let total_bytes = src.seek(SeekFrom::End(0)).map_err(IngestError::Read)?;

    // Pass 1: scan and validate.
    src.seek(SeekFrom::Start(0)).map_err(IngestError::Read)?;
    let mut scanner = TsScanner::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut done = 0u64;
    loop {
        let n = read_some(src, &mut buf)?;
        if n == 0 {
            break;
        }
        scanner.push(&buf[..n])?;
        done += n as u64;
        progress(IngestProgress { pass: 1, bytes_done: done, total_bytes });
    }
    let index = scanner.finish()?;

    // Pass 2: pack units into blocks and place them. The ingest lock keeps the placement epoch
    // from changing (no disk is added or removed) until the record is committed.
    let _lock = store.ingest_lock();
    let object = NewObject::begin(store)?;
    let mut written: Vec<(DiskId, BlockKey)> = Vec::new();
    src.seek(SeekFrom::Start(0)).map_err(IngestError::Read)?;
    let result = store_blocks(
        store,
        &mut BufReader::with_capacity(1 << 20, src),
        &index,
        &object,
        total_bytes,
        progress,
        &mut written,
    );
    let record = result.and_then(|packed| {
        let rec = object.record(name, source_name, packed, &index);
        catalog.insert_object(&rec)?;
        Ok(rec)
    });
    match record {
        Ok(record) => Ok(IngestReport { record, trailing_bytes: index.trailing_bytes() }),
        Err(e) => {
            remove_blocks(store, &written);
            Err(e)
        }
    }
}

/// A new object being written: its id, placement seed, first epoch and block size.
///
/// Made by [`NewObject::begin`] under [`Store::ingest_lock`], which must stay held until the
/// record is committed (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NewObject {
    /// Its id, allocated in the catalog.
    pub id: ObjectId,
    /// Its placement seed (Yima §2.2: the pseudo-random sequence of its blocks' disks).
    pub seed: u64,
    /// The placement epoch its blocks are written in: the log's current epoch.
    pub first_epoch: Epoch,
    /// The store's block size.
    pub block_size: Bytes,
}

impl NewObject {
    /// Allocates an id and picks a seed and the current epoch. Call it holding
    /// [`Store::ingest_lock`], and keep holding it until the record is committed. Refused
    /// ([`StoreError::ReplicationTooHigh`]) while the store has fewer disks than copies to keep
    /// (a cluster whose nodes have not joined yet).
    pub fn begin(store: &Store) -> Result<Self, StoreError> {
        store.check_can_place()?;
        let id = store.catalog().allocate_object_id()?;
        let meta = store.meta();
        Ok(Self {
            id,
            seed: new_seed(),
            first_epoch: meta.placement.current_epoch(),
            block_size: meta.block_size,
        })
    }

    /// The disks block `index` is written to: its copies in `first_epoch`, replica 0 first.
    #[must_use]
    pub fn disks_of(&self, store: &Store, index: BlockIndex) -> Replicas {
        store.place_new(self.seed, self.first_epoch, index)
    }

    /// The catalog entry of the object once every block is written: `packed` from its
    /// [`BlockPacker`], `index` of its whole stream, `source` the origin to record.
    #[must_use]
    pub fn record(
        &self,
        name: &str,
        source: &str,
        packed: PackedObject,
        index: &TsIndex,
    ) -> ObjectRecord {
        ObjectRecord {
            id: self.id,
            name: name.to_string(),
            seed: self.seed,
            first_epoch: self.first_epoch,
            block_size: self.block_size,
            blocks: packed.blocks,
            packets: index.unit_count(),
            ts_bytes: Bytes(index.packet_count() * TS_PACKET_SIZE as u64),
            duration: index.duration(),
            avg_bitrate: index.avg_bitrate(),
            peak_bitrate: index.peak_bitrate(),
            seek_points: packed.seek_points,
            streams: index
                .streams()
                .iter()
                .map(|s| StreamDesc {
                    pid: s.pid,
                    kind: format!("{:?}", s.kind).to_lowercase(),
                    codec: s.codec.to_string(),
                })
                .collect(),
            source_file: source.to_string(),
            created_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            media: None,
        }
    }
}

/// A block of a new object, built and verified, ready to be written.
#[derive(Debug)]
pub struct PackedBlock {
    /// Its index in the object.
    pub index: BlockIndex,
    /// The encoded block (parsed back, so its header, checksum and key are checked).
    pub block: Block<AlignedBuf>,
}

impl PackedBlock {
    /// The block's key.
    #[must_use]
    pub fn key(&self) -> BlockKey {
        self.block.header().key
    }
}

/// What the catalog records about an object's blocks, from its [`BlockPacker`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PackedObject {
    /// Every block's entry, in order.
    pub blocks: Vec<BlockEntry>,
    /// The random-access points (the first unit's always among them).
    pub seek_points: Vec<SeekPoint>,
}

/// Packs an object's payload units, in GSN order, into blocks of whole units (DESIGN §2.2) and
/// collects what the catalog records of them. Ingest feeds it [`TsIndex::units`]; the recorder
/// feeds it the units [`UnitStream`](isochron_media::UnitStream) yields, which are the same, so a
/// recorded object's blocks are byte for byte those an ingest of the same bytes makes.
#[derive(Debug)]
pub struct BlockPacker {
    id: ObjectId,
    block_size: Bytes,
    builder: Option<BlockBuilder>,
    next_index: u32,
    next_gsn: u64,
    packed: PackedObject,
}

impl BlockPacker {
    /// A packer for the blocks of `object`.
    #[must_use]
    pub fn new(object: &NewObject) -> Self {
        Self {
            id: object.id,
            block_size: object.block_size,
            builder: None,
            next_index: 0,
            next_gsn: 0,
            packed: PackedObject::default(),
        }
    }

    /// Adds the next unit (GSN order) and its bytes. When it does not fit in the block being
    /// filled, that block is finished and returned, and the unit starts the next one.
    pub fn push(&mut self, unit: &Unit, bytes: &[u8]) -> Result<Option<PackedBlock>, StoreError> {
        let gsn = Gsn(self.next_gsn);
        self.next_gsn += 1;
        if unit.random_access {
            self.packed.seek_points.push(SeekPoint { time: unit.send_time, gsn });
        }
        let mut full = None;
        if !self.builder.as_ref().is_some_and(|b| b.fits(bytes.len())) {
            if let Some(b) = self.builder.take() {
                full = Some(self.seal(b)?);
            }
            let key = BlockKey::new(self.id, BlockIndex(self.next_index));
            self.builder = Some(BlockBuilder::new(key, gsn, self.block_size));
        }
        let meta = PacketMeta {
            send_time: unit.send_time,
            ts_packets: unit.ts_packets,
            random_access: unit.random_access,
            discontinuity: unit.discontinuity,
        };
        if let Some(b) = self.builder.as_mut() {
            b.push(meta, bytes);
        }
        Ok(full)
    }

    /// Units pushed so far: the GSN of the next one.
    #[must_use]
    pub fn units(&self) -> u64 {
        self.next_gsn
    }

    /// Ends the object: the last block (if a unit went into it) and the catalog's view of all.
    pub fn finish(mut self) -> Result<(Option<PackedBlock>, PackedObject), StoreError> {
        let last = match self.builder.take() {
            Some(b) if !b.is_empty() => Some(self.seal(b)?),
            _ => None,
        };
        let mut packed = self.packed;
        if packed.seek_points.first().is_none_or(|s| s.gsn != Gsn(0)) {
            let t = packed.blocks.first().map(|b| b.first_send_time).unwrap_or_default();
            packed.seek_points.insert(0, SeekPoint { time: t, gsn: Gsn(0) });
        }
        Ok((last, packed))
    }

    fn seal(&mut self, builder: BlockBuilder) -> Result<PackedBlock, StoreError> {
        let index = BlockIndex(self.next_index);
        let key = BlockKey::new(self.id, index);
        // Paired assertion: what goes to disk parses back (the read path checks it again).
        let block = Block::parse(AlignedBuf::copy_from(&builder.finish()), Some(key))
            .map_err(|source| StoreError::InvalidBlock { key, source })?;
        self.packed.blocks.push(BlockEntry::from(block.header()));
        self.next_index += 1;
        Ok(PackedBlock { index, block })
    }
}

/// Removes the block files of a new object that will not be committed (best effort: what is
/// left is an orphan the next [`Store::open`] removes).
pub fn remove_blocks(store: &Store, written: &[(DiskId, BlockKey)]) {
    for &(disk, key) in written {
        if let Some(d) = store.disk(disk)
            && let Err(e) = d.remove_block(key)
        {
            tracing::warn!(%disk, block = %key, error = %e,
                "could not remove a block of an object not committed; recovery will");
        }
    }
}

fn store_blocks<R: Read>(
    store: &Store,
    src: &mut R,
    index: &TsIndex,
    object: &NewObject,
    total_bytes: u64,
    progress: &mut dyn FnMut(IngestProgress),
    written: &mut Vec<(DiskId, BlockKey)>,
) -> Result<PackedObject, IngestError> {
    let mut packer = BlockPacker::new(object);
    let mut write = |b: PackedBlock| {
        let (id, seed, epoch) = (object.id, object.seed, object.first_epoch);
        let disks = store.write_block(id, seed, epoch, b.index, b.block.as_bytes())?;
        written.extend(disks.iter().map(|d| (d, b.key())));
        Ok::<_, IngestError>(())
    };
    let mut payload = vec![0u8; 7 * TS_PACKET_SIZE];
    let mut offset = 0u64;
    for unit in index.units() {
        let len = usize::from(unit.ts_packets) * TS_PACKET_SIZE;
        let data = &mut payload[..len];
        src.read_exact(data).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => IngestError::Changed { offset },
            _ => IngestError::Read(e),
        })?;
        if let Some(bad) = (0..len).step_by(TS_PACKET_SIZE).find(|&i| data[i] != 0x47) {
            return Err(IngestError::Changed { offset: offset + bad as u64 });
        }
        offset += len as u64;
        if let Some(b) = packer.push(&unit, data)? {
            write(b)?;
            progress(IngestProgress { pass: 2, bytes_done: offset, total_bytes });
        }
    }
    let (last, packed) = packer.finish()?;
    if let Some(b) = last {
        write(b)?;
    }
    progress(IngestProgress { pass: 2, bytes_done: total_bytes, total_bytes });
    Ok(packed)
}

fn read_some<R: Read>(src: &mut R, buf: &mut [u8]) -> Result<usize, IngestError> {
    loop {
        match src.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(IngestError::Read(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use isochron_media::UnitStream;

    use super::*;

    const DEMO: &[u8] = include_bytes!("../../../assets/demo.ts");

    /// A recorder's path (bytes in chunks through [`UnitStream`], then [`BlockPacker`]) makes
    /// the blocks and the record an ingest of the same bytes makes, for any chunking.
    #[test]
    fn packing_streamed_units_matches_ingest() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::create(&dir.path().join("store"), &[] as &[PathBuf], Bytes::kib(64)).unwrap();
        let mut src = io::Cursor::new(DEMO);
        let ingested = ingest(&store, &mut src, "demo.ts", "ingested", &mut |_| {}).unwrap().record;
        assert!(ingested.blocks.len() > 20);
        let layout = |r: &ObjectRecord| {
            let blocks: Vec<_> = r
                .blocks
                .iter()
                .map(|b| {
                    (b.first_gsn, b.first_send_time, b.packets, b.payload_bytes, b.encoded_len)
                })
                .collect();
            (blocks, r.seek_points.clone(), r.packets, r.ts_bytes, r.duration, r.avg_bitrate)
        };
        for chunk in [1000, 188 * 7 + 5, 100_003] {
            let _lock = store.ingest_lock();
            let object = NewObject::begin(&store).unwrap();
            let mut packer = BlockPacker::new(&object);
            let mut units = UnitStream::new();
            let mut blocks = Vec::new();
            for c in DEMO.chunks(chunk) {
                units.push(c).unwrap();
                while let Some(u) = units.poll_unit() {
                    blocks.extend(packer.push(&u.unit, &u.bytes).unwrap());
                }
            }
            let (rest, index) = units.finish().unwrap();
            for u in rest {
                blocks.extend(packer.push(&u.unit, &u.bytes).unwrap());
            }
            let (last, packed) = packer.finish().unwrap();
            blocks.extend(last);
            let rec = object.record("streamed", "test", packed, &index);
            assert_eq!(layout(&rec), layout(&ingested), "chunks of {chunk}");
            for b in &blocks {
                let stored = store.read_block_sync(&ingested, b.index).unwrap();
                assert_eq!(b.block.payload(), stored.payload(), "block {} payload", b.index.0);
                assert_eq!(b.key(), BlockKey::new(object.id, b.index));
            }
            assert_eq!(blocks.len(), ingested.blocks.len());
        }
    }
}
