//! Ingest: an MPEG-TS file becomes blocks on the store's disks and one catalog entry.
//!
//! Two passes over the source (DESIGN §1, "parsed once" at ingest, never at play time):
//!
//! 1. **Scan.** [`TsScanner`] validates every packet and builds the timing index: PCR anchors,
//!    cut points, random-access points. Nothing is written, so a file that is not MPEG-TS (or has
//!    no PCR to pace it by) is refused with the store unchanged.
//! 2. **Store.** The payload units ([`TsIndex::units`]: ≤ 7 TS packets, each with its send time)
//!    are packed into blocks of whole units (DESIGN §2.2); each block goes to the disk Yima's
//!    placement picks for `(seed, index)`, written durably (temp file, fsync, rename).
//!
//! Only when every block is durable is the catalog entry committed, in one redb transaction. A
//! crash before that leaves orphan block files and no entry: the object does not exist, and the
//! next [`Store::open`] removes the orphans. An error after some blocks were written removes them
//! before returning.
//!
//! Pass 2 holds the store's [`Store::ingest_lock`]: a disk addition or removal waits for it, so
//! the object's `first_epoch` is still the placement log's current epoch when the record is
//! committed (while a reorganisation is pending, that is the pending epoch: the object is written
//! where the new placement puts it and never has to move).

use std::fs::File;
use std::io::{self, BufReader, Read, Seek, SeekFrom};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use isochron_base::{BlockIndex, BlockKey, Bytes, DiskId, Gsn, ObjectId};
use isochron_media::{TS_PACKET_SIZE, TsError, TsIndex, TsScanner};
use isochron_store::block::{Block, BlockBuilder, PacketMeta};
use isochron_store::catalog::{
    BlockEntry, Catalog, CatalogError, ObjectRecord, SeekPoint, StreamDesc, validate_name,
};
use thiserror::Error;

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
    let id = catalog.allocate_object_id()?;
    let seed = new_seed();
    let meta = store.meta();
    let epoch = meta.placement.current_epoch();
    let mut written: Vec<(DiskId, BlockKey)> = Vec::new();
    src.seek(SeekFrom::Start(0)).map_err(IngestError::Read)?;
    let result = store_blocks(
        store,
        &mut BufReader::with_capacity(1 << 20, src),
        &index,
        (id, seed, epoch),
        meta.block_size,
        total_bytes,
        progress,
        &mut written,
    );
    let record = result.and_then(|(blocks, seek_points)| {
        let rec = ObjectRecord {
            id,
            name: name.to_string(),
            seed,
            first_epoch: epoch,
            block_size: meta.block_size,
            blocks,
            packets: index.unit_count(),
            ts_bytes: Bytes(index.packet_count() * TS_PACKET_SIZE as u64),
            duration: index.duration(),
            avg_bitrate: index.avg_bitrate(),
            peak_bitrate: index.peak_bitrate(),
            seek_points,
            streams: index
                .streams()
                .iter()
                .map(|s| StreamDesc {
                    pid: s.pid,
                    kind: format!("{:?}", s.kind).to_lowercase(),
                    codec: s.codec.to_string(),
                })
                .collect(),
            source_file: source_name.to_string(),
            created_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
        };
        catalog.insert_object(&rec)?;
        Ok(rec)
    });
    match record {
        Ok(record) => Ok(IngestReport { record, trailing_bytes: index.trailing_bytes() }),
        Err(e) => {
            for (disk, key) in written {
                if let Some(d) = store.disk(disk) {
                    let _ = d.remove_block(key);
                }
            }
            Err(e)
        }
    }
}

type Placed = (ObjectId, u64, isochron_store::placement::Epoch);

#[allow(clippy::too_many_arguments)]
fn store_blocks<R: Read>(
    store: &Store,
    src: &mut R,
    index: &TsIndex,
    (id, seed, epoch): Placed,
    block_size: Bytes,
    total_bytes: u64,
    progress: &mut dyn FnMut(IngestProgress),
    written: &mut Vec<(DiskId, BlockKey)>,
) -> Result<(Vec<BlockEntry>, Vec<SeekPoint>), IngestError> {
    let mut blocks = Vec::new();
    let mut seek_points = Vec::new();
    let mut block_index = 0u32;
    let mut builder: Option<BlockBuilder> = None;
    let mut payload = vec![0u8; 7 * TS_PACKET_SIZE];
    let mut offset = 0u64;
    let mut flush = |b: BlockBuilder, index: u32, blocks: &mut Vec<BlockEntry>| {
        let key = BlockKey::new(id, BlockIndex(index));
        let bytes = b.finish();
        // Paired assertion: what goes to disk parses back (the read path checks it again).
        let parsed = Block::parse(&bytes[..], Some(key))
            .map_err(|source| StoreError::InvalidBlock { key, source })?;
        let entry = BlockEntry::from(parsed.header());
        let disk = store.write_block(id, seed, epoch, BlockIndex(index), &bytes)?;
        written.push((disk, key));
        blocks.push(entry);
        Ok::<_, IngestError>(())
    };
    for (gsn, unit) in index.units().enumerate() {
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
        let gsn = Gsn(gsn as u64);
        if unit.random_access {
            seek_points.push(SeekPoint { time: unit.send_time, gsn });
        }
        let fits = builder.as_ref().is_some_and(|b| b.fits(len));
        if !fits {
            if let Some(b) = builder.take() {
                flush(b, block_index, &mut blocks)?;
                block_index += 1;
                progress(IngestProgress { pass: 2, bytes_done: offset, total_bytes });
            }
            let key = BlockKey::new(id, BlockIndex(block_index));
            builder = Some(BlockBuilder::new(key, gsn, block_size));
        }
        let meta = PacketMeta {
            send_time: unit.send_time,
            ts_packets: unit.ts_packets,
            random_access: unit.random_access,
            discontinuity: unit.discontinuity,
        };
        if let Some(b) = builder.as_mut() {
            b.push(meta, data);
        }
    }
    if let Some(b) = builder.take()
        && !b.is_empty()
    {
        flush(b, block_index, &mut blocks)?;
    }
    progress(IngestProgress { pass: 2, bytes_done: total_bytes, total_bytes });
    if seek_points.first().is_none_or(|s| s.gsn != Gsn(0)) {
        let t = blocks.first().map(|b| b.first_send_time).unwrap_or_default();
        seek_points.insert(0, SeekPoint { time: t, gsn: Gsn(0) });
    }
    Ok((blocks, seek_points))
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
