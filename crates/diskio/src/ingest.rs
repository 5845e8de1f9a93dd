//! Ingest: a media file becomes blocks on the store's disks and one catalog entry.
//!
//! What a file is decides how it is cut ([`isochron_media::sniff`]): MPEG-TS (and 192-byte
//! M2TS, read as the TS it carries) becomes RTP payload units of whole TS packets timed by the
//! PCR (RFC 2250), stored in version-1 blocks; MP4 and Matroska/WebM become the native RTP
//! payloads of their tracks ([`isochron_media::native`]: H.264, H.265, AAC, Opus, AC-3, MP3),
//! stored in version-2 blocks, with a track description per stream in the catalog. Both go
//! through the same two passes:
//!
//! Two passes over the source (it is parsed once, at ingest, never at play time):
//!
//! 1. **Scan.** [`TsScanner`] validates every packet and builds the timing index: PCR anchors,
//!    cut points, random-access points. Nothing is written, so a file that is not MPEG-TS (or has
//!    no PCR to pace it by) is refused with the store unchanged.
//! 2. **Store.** The payload units ([`TsIndex::units`]: ≤ 7 TS packets, each with its send time)
//!    are packed into blocks of whole units (`docs/design/block-format.md`); each block goes to the
//!    disk Yima's placement picks for `(seed, index)`, and with replication (`store.replication` K)
//!    to the K−1 other disks its copies are placed on (`isochron_store::replica`), each copy
//!    written durably (temp file, fsync, rename).
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

use isochron_base::{
    BitRate, BlockIndex, BlockKey, Bytes, DiskId, Gsn, MediaTime, ObjectId, Replicas,
};
use isochron_media::{
    ContainerError, ContainerKind, Demuxer, M2tsToTs, NativeAssembler, NativeError, NativeTrack,
    NativeUnit, StreamKind, TS_PACKET_SIZE, TsError, TsIndex, TsScanner, Unit, sniff,
};
use isochron_store::Epoch;
use isochron_store::block::{Block, BlockBuilder, NativeMeta, PacketMeta};
use isochron_store::catalog::{
    BlockEntry, CatalogError, NativeMedia, ObjectRecord, SeekPoint, StreamDesc, TrackDesc,
    validate_name,
};
use thiserror::Error;

use crate::AlignedBuf;
use crate::store::{CopyWriter, Store, StoreError, new_seed};

/// Progress of an ingest, reported as it goes.
#[derive(Clone, Copy, Debug)]
pub struct IngestProgress {
    /// 1 while scanning, 2 while storing the packets, 3 while storing a native object's source
    /// file.
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
    /// Tracks of the file that are not stored, each with why (an unsupported codec): the
    /// object is served with the others.
    pub skipped: Vec<String>,
}

/// The largest native RTP payload: the size of a full MP2T payload (7 × 188 bytes), so a
/// packet with its RTP header and extension fits a 1500-byte MTU with room to spare.
pub const MAX_NATIVE_PAYLOAD: usize = 1316;

/// Why an ingest failed. Messages say what is wrong with the input; callers add the file name.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum IngestError {
    /// The source is not usable MPEG-TS.
    #[error("{0}")]
    Media(#[from] TsError),
    /// The source is no media file isochron reads.
    #[error("not a media file isochron reads (MPEG-TS, M2TS, MP4 or Matroska/WebM expected): {0}")]
    NotMedia(TsError),
    /// The source is MP4 or Matroska that cannot be indexed, or has no track to serve.
    #[error("{0}")]
    Container(#[from] ContainerError),
    /// A track's samples cannot be cut into RTP payloads.
    #[error("{0}")]
    Native(#[from] NativeError),
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
    ingest_file_via(store, path, name, progress, None)
}

/// [`ingest_file`], every block's copies written by `via` when given
/// ([`Store::write_block_via`]).
pub fn ingest_file_via(
    store: &Store,
    path: &Path,
    name: &str,
    progress: &mut dyn FnMut(IngestProgress),
    via: Option<&dyn CopyWriter>,
) -> Result<IngestReport, IngestError> {
    let mut f = File::open(path).map_err(IngestError::Read)?;
    let source = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    ingest_via(store, &mut f, &source, name, progress, via)
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
    ingest_via(store, src, source_name, name, progress, None)
}

/// [`ingest`], every block's copies written by `via` when given.
pub fn ingest_via<R: Read + Seek>(
    store: &Store,
    src: &mut R,
    source_name: &str,
    name: &str,
    progress: &mut dyn FnMut(IngestProgress),
    via: Option<&dyn CopyWriter>,
) -> Result<IngestReport, IngestError> {
    validate_name(name)?;
    let catalog = store.catalog();
    if catalog.object(name)?.is_some() {
        return Err(IngestError::Exists { name: name.to_string() });
    }
    let total_bytes = src.seek(SeekFrom::End(0)).map_err(IngestError::Read)?;
    src.seek(SeekFrom::Start(0)).map_err(IngestError::Read)?;
    let mut head = vec![0u8; 512];
    let n = read_full(src, &mut head)?;
    head.truncate(n);
    match sniff(&head) {
        Some(kind @ (ContainerKind::Mp4 | ContainerKind::Matroska)) => {
            let names = (source_name, name);
            ingest_native(store, via, src, kind, total_bytes, names, progress)
        }
        Some(ContainerKind::M2ts) => {
            let mut ts = M2tsRead::new(src, total_bytes);
            ingest_ts(store, via, &mut ts, source_name, name, progress)
        }
        Some(ContainerKind::MpegTs) => ingest_ts(store, via, src, source_name, name, progress),
        // Not recognised: the TS scanner says what is wrong at which byte.
        None => ingest_ts(store, via, src, source_name, name, progress).map_err(|e| match e {
            IngestError::Media(e @ TsError::NotTransportStream { .. }) => IngestError::NotMedia(e),
            other => other,
        }),
    }
}

/// Ingests an MPEG-TS byte stream (see the module docs).
fn ingest_ts<R: Read + Seek>(
    store: &Store,
    via: Option<&dyn CopyWriter>,
    src: &mut R,
    source_name: &str,
    name: &str,
    progress: &mut dyn FnMut(IngestProgress),
) -> Result<IngestReport, IngestError> {
    let catalog = store.catalog();
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
        (store, via),
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
        Ok(record) => {
            Ok(IngestReport { record, trailing_bytes: index.trailing_bytes(), skipped: Vec::new() })
        }
        Err(e) => {
            remove_blocks(store, &written);
            Err(e)
        }
    }
}

/// Ingests an MP4 or Matroska file as native RTP payloads (see the module docs).
fn ingest_native<R: Read + Seek>(
    store: &Store,
    via: Option<&dyn CopyWriter>,
    src: &mut R,
    kind: ContainerKind,
    total_bytes: u64,
    (source_name, name): (&str, &str),
    progress: &mut dyn FnMut(IngestProgress),
) -> Result<IngestReport, IngestError> {
    // Pass 1: the tracks and every sample's place, reading only what the demuxer asks for
    // (box and element headers, `moov`/`moof`, cluster headers; never the media data).
    let mut demuxer = Demuxer::new(kind, total_bytes);
    let mut buf = Vec::new();
    while let Some(need) = demuxer.poll_need() {
        let len = need.len.min(total_bytes.saturating_sub(need.offset));
        buf.resize(usize::try_from(len).unwrap_or(usize::MAX), 0);
        src.seek(SeekFrom::Start(need.offset)).map_err(IngestError::Read)?;
        let n = read_full(src, &mut buf)?;
        demuxer.handle_data(need.offset, &buf[..n])?;
        progress(IngestProgress { pass: 1, bytes_done: need.offset + n as u64, total_bytes });
    }
    let index = demuxer.finish()?;
    let skipped: Vec<String> = index.skipped.iter().map(ToString::to_string).collect();
    for s in &skipped {
        tracing::warn!(file = source_name, "{s}: not stored; the other tracks are");
    }
    let mut assembler = NativeAssembler::new(&index, MAX_NATIVE_PAYLOAD)?;

    // Pass 2: every sample in decode order, cut into payloads, packed into blocks.
    let _lock = store.ingest_lock();
    let catalog = store.catalog();
    let object = NewObject::begin(store)?;
    let mut written: Vec<(DiskId, BlockKey)> = Vec::new();
    let result = (|| {
        let mut packer = BlockPacker::new_native(&object, index.tracks.len());
        let mut write = |b: PackedBlock| {
            let (id, seed, epoch) = (object.id, object.seed, object.first_epoch);
            let disks = store.write_block_via(id, seed, epoch, b.index, b.block.as_bytes(), via)?;
            written.extend(disks.iter().map(|d| (d, b.key())));
            Ok::<_, IngestError>(())
        };
        let mut window = Window::default();
        let mut done = 0u64;
        for s in &index.samples {
            let bytes = window.read(src, s.offset, s.size, total_bytes)?;
            assembler.push(s, bytes)?;
            while let Some(u) = assembler.poll_unit() {
                if let Some(b) = packer.push_native(&u)? {
                    write(b)?;
                }
            }
            done += u64::from(s.size);
            if done >= 4 << 20 {
                progress(IngestProgress { pass: 2, bytes_done: s.offset, total_bytes });
                done = 0;
            }
        }
        assembler.finish();
        while let Some(u) = assembler.poll_unit() {
            if let Some(b) = packer.push_native(&u)? {
                write(b)?;
            }
        }
        let next_index = packer.blocks_sealed() + u32::from(packer.has_open_block());
        let (last, mut packed) = packer.finish()?;
        if let Some(b) = last {
            write(b)?;
        }
        // Pass 3: the file itself, after the packets, for HTTP to serve as the original.
        let first_gsn = Gsn(packed.track_packets.iter().sum());
        src.seek(SeekFrom::Start(0)).map_err(IngestError::Read)?;
        let mut index = next_index;
        let mut chunk = vec![0u8; object.block_size.as_usize()];
        let mut source_bytes = 0u64;
        let mut source_blocks = 0u32;
        loop {
            let key = BlockKey::new(object.id, BlockIndex(index));
            let mut builder = BlockBuilder::new_raw(key, first_gsn, object.block_size);
            let room = builder.raw_room();
            let n = read_full(src, &mut chunk[..room])?;
            if n == 0 {
                break;
            }
            builder.push_raw(&chunk[..n]);
            let block = Block::parse(AlignedBuf::copy_from(&builder.finish()), Some(key))
                .map_err(|source| StoreError::InvalidBlock { key, source })?;
            packed.blocks.push(BlockEntry::from(block.header()));
            write(PackedBlock { index: BlockIndex(index), block })?;
            source_bytes += n as u64;
            source_blocks += 1;
            index += 1;
            progress(IngestProgress { pass: 3, bytes_done: source_bytes, total_bytes });
        }
        if source_bytes != total_bytes {
            return Err(IngestError::Changed { offset: source_bytes });
        }
        let source = SourceFile { blocks: source_blocks, bytes: source_bytes, kind };
        let rec = object.record_native(name, source_name, packed, Some(source), assembler.tracks());
        catalog.insert_object(&rec)?;
        Ok(rec)
    })();
    match result {
        Ok(record) => Ok(IngestReport { record, trailing_bytes: 0, skipped }),
        Err(e) => {
            remove_blocks(store, &written);
            Err(e)
        }
    }
}

/// Reads samples by file offset through a window of the file, so that the samples of an
/// interleaved file (in decode order, mostly in file order) cost one large read per window.
#[derive(Default)]
struct Window {
    buf: Vec<u8>,
    start: u64,
}

impl Window {
    const SIZE: usize = 4 << 20;

    fn read<R: Read + Seek>(
        &mut self,
        src: &mut R,
        offset: u64,
        size: u32,
        total: u64,
    ) -> Result<&[u8], IngestError> {
        let end = offset + u64::from(size);
        if end > total {
            return Err(IngestError::Changed { offset });
        }
        let have = offset >= self.start && end <= self.start + self.buf.len() as u64;
        if !have {
            let len = (Self::SIZE as u64).max(u64::from(size)).min(total - offset);
            self.buf.resize(len as usize, 0);
            src.seek(SeekFrom::Start(offset)).map_err(IngestError::Read)?;
            let n = read_full(src, &mut self.buf)?;
            if (n as u64) < u64::from(size) {
                return Err(IngestError::Changed { offset: offset + n as u64 });
            }
            self.buf.truncate(n);
            self.start = offset;
        }
        let at = (offset - self.start) as usize;
        Ok(&self.buf[at..at + size as usize])
    }
}

/// Reads until `buf` is full or the source ends; the bytes read.
fn read_full<R: Read>(src: &mut R, buf: &mut [u8]) -> Result<usize, IngestError> {
    let mut n = 0;
    while n < buf.len() {
        match read_some(src, &mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// A 192-byte M2TS file read as the 188-byte transport stream it carries: each packet's 4-byte
/// `TP_extra_header` (a timestamp Blu-ray players use) is dropped. Seeks only to the start
/// or the end (what ingest's two passes do).
struct M2tsRead<'a, R> {
    src: &'a mut R,
    len: u64,
    conv: M2tsToTs,
    out: Vec<u8>,
    at: usize,
    chunk: Vec<u8>,
}

impl<'a, R: Read + Seek> M2tsRead<'a, R> {
    fn new(src: &'a mut R, total: u64) -> Self {
        Self {
            src,
            len: total / 192 * 188,
            conv: M2tsToTs::new(),
            out: Vec::new(),
            at: 0,
            chunk: vec![0; 1 << 20],
        }
    }
}

impl<R: Read + Seek> Read for M2tsRead<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.out.len() {
            let n = self.src.read(&mut self.chunk)?;
            if n == 0 {
                return Ok(0);
            }
            self.out.clear();
            self.at = 0;
            self.conv.push(&self.chunk[..n], &mut self.out);
        }
        let n = buf.len().min(self.out.len() - self.at);
        buf[..n].copy_from_slice(&self.out[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl<R: Read + Seek> Seek for M2tsRead<'_, R> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        match pos {
            SeekFrom::Start(0) => {
                self.src.seek(SeekFrom::Start(0))?;
                self.conv = M2tsToTs::new();
                self.out.clear();
                self.at = 0;
                Ok(0)
            }
            SeekFrom::End(0) => Ok(self.len),
            _ => Err(io::Error::new(io::ErrorKind::Unsupported, "M2TS is read from its start")),
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

/// The source file of a native object, as stored after its packets.
#[derive(Clone, Copy, Debug)]
pub struct SourceFile {
    /// Its blocks (the last of the object).
    pub blocks: u32,
    /// Its length.
    pub bytes: u64,
    /// Its container.
    pub kind: ContainerKind,
}

impl NewObject {
    /// The catalog entry of a native object once every block is written: `packed` from its
    /// [`BlockPacker::new_native`], `tracks` from its assembler; `source` names where it came
    /// from. `file`: an ingested file (MP4, Matroska) whose blocks follow the packets; `None`
    /// for a live recording, which has no file (its container is `live`).
    #[must_use]
    pub fn record_native(
        &self,
        name: &str,
        source: &str,
        packed: PackedObject,
        file: Option<SourceFile>,
        tracks: &[NativeTrack],
    ) -> ObjectRecord {
        let totals = packed.native_totals;
        let duration = totals.last_send.max(totals.last_npt);
        let nanos = u128::from(duration.as_nanos().max(1));
        let avg = u128::from(totals.bytes) * 8 * 1_000_000_000 / nanos;
        let packets: u64 = packed.track_packets.iter().sum();
        let kind = |k: StreamKind| if k == StreamKind::Video { "video" } else { "audio" };
        ObjectRecord {
            id: self.id,
            name: name.to_string(),
            seed: self.seed,
            first_epoch: self.first_epoch,
            block_size: self.block_size,
            blocks: packed.blocks,
            packets,
            ts_bytes: Bytes(totals.bytes),
            duration,
            avg_bitrate: BitRate(u64::try_from(avg).unwrap_or(u64::MAX)),
            peak_bitrate: BitRate(totals.peak_bytes_per_s.saturating_mul(8)),
            seek_points: packed.seek_points,
            streams: tracks
                .iter()
                .enumerate()
                .map(|(i, t)| StreamDesc {
                    pid: i as u16,
                    kind: kind(t.kind).to_owned(),
                    codec: t.codec.name().to_owned(),
                })
                .collect(),
            source_file: source.to_string(),
            created_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            media: Some(NativeMedia {
                container: match file.map(|f| f.kind) {
                    None => "live",
                    Some(ContainerKind::Matroska) => "matroska",
                    Some(_) => "mp4",
                }
                .to_owned(),
                source_blocks: file.map_or(0, |f| f.blocks),
                source_bytes: file.map_or(0, |f| f.bytes),
                source_type: file.map_or("", |f| source_type(f.kind, source)).to_owned(),
                tracks: tracks
                    .iter()
                    .zip(&packed.track_packets)
                    .map(|(t, &packets)| TrackDesc {
                        kind: kind(t.kind).to_owned(),
                        codec: t.codec.name().to_owned(),
                        encoding: t.encoding.to_owned(),
                        clock_rate: t.clock_rate,
                        channels: t.channels,
                        payload_type: t.payload_type,
                        fmtp: t.fmtp.clone(),
                        config: t.config.clone(),
                        packets,
                        width: t.width,
                        height: t.height,
                        language: t.language.clone().unwrap_or_default(),
                    })
                    .collect(),
                seek_track_seqs: packed.seek_track_seqs,
            }),
        }
    }
}

/// The media type HTTP gives a source file: by its container, and for Matroska by its name
/// (`.webm` is WebM).
fn source_type(kind: ContainerKind, name: &str) -> &'static str {
    let webm = name.rsplit('.').next().is_some_and(|e| e.eq_ignore_ascii_case("webm"));
    match kind {
        ContainerKind::Matroska if webm => "video/webm",
        ContainerKind::Matroska => "video/x-matroska",
        ContainerKind::Mp4 => "video/mp4",
        ContainerKind::M2ts | ContainerKind::MpegTs => "video/mp2t",
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
    /// Native objects: for each seek point, each track's next `track_seq` there.
    pub seek_track_seqs: Vec<u32>,
    /// Native objects: each track's packets.
    pub track_packets: Vec<u64>,
    /// Native objects: the payload bytes, the last send time and presentation end, and the
    /// most payload bits in any one-second window of send times.
    pub native_totals: NativeTotals,
}

/// What a native object's packets add up to (see [`PackedObject`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NativeTotals {
    /// Payload bytes.
    pub bytes: u64,
    /// The latest send time.
    pub last_send: MediaTime,
    /// The latest presentation time of a packet's access unit.
    pub last_npt: MediaTime,
    /// The most payload bytes whose send times fall in one window `[k, k+1)` s.
    pub peak_bytes_per_s: u64,
}

/// Packs an object's payload units, in GSN order, into blocks of whole units
/// (`docs/design/block-format.md`) and collects what the catalog records of them. Ingest feeds it
/// [`TsIndex::units`]; the recorder feeds it the units [`UnitStream`](isochron_media::UnitStream)
/// yields, which are the same, so a recorded object's blocks are byte for byte those an ingest of
/// the same bytes makes.
#[derive(Debug)]
pub struct BlockPacker {
    id: ObjectId,
    block_size: Bytes,
    builder: Option<BlockBuilder>,
    next_index: u32,
    next_gsn: u64,
    packed: PackedObject,
    /// Native objects: each track's next `track_seq`.
    track_next: Vec<u32>,
    native: bool,
    /// The current one-second window of send times and its bytes.
    window: (u64, u64),
    /// Native objects: what the catalog records of the first `n + 1` blocks, for each block `n`
    /// sealed ([`BlockPacker::prefix`]: a growing object's commits).
    sealed: Vec<Sealed>,
}

/// What a native object's packer had counted when it sealed a block: the catalog's view of the
/// blocks up to it.
#[derive(Clone, Debug)]
struct Sealed {
    seek_points: usize,
    track_packets: Vec<u64>,
    totals: NativeTotals,
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
            track_next: Vec::new(),
            native: false,
            window: (0, 0),
            sealed: Vec::new(),
        }
    }

    /// A packer for the native RTP payloads of `object`'s `tracks` tracks (version-2 blocks).
    #[must_use]
    pub fn new_native(object: &NewObject, tracks: usize) -> Self {
        Self { track_next: vec![0; tracks], native: true, ..Self::new(object) }
    }

    /// Adds the next native payload (send order). When it does not fit in the block being
    /// filled, that block is finished and returned, and the payload starts the next one.
    pub fn push_native(&mut self, unit: &NativeUnit) -> Result<Option<PackedBlock>, StoreError> {
        debug_assert!(self.native);
        let gsn = Gsn(self.next_gsn);
        self.next_gsn += 1;
        // The block it does not fit in is sealed before the unit is counted: what is counted
        // at a seal is exactly the blocks sealed.
        let full = self.make_room(unit.payload.len(), gsn)?;
        if unit.random_access {
            // Seek points are sorted by time: a key frame presented before the previous one
            // (a broken file) takes its time.
            let last = self.packed.seek_points.last().map_or(MediaTime::ZERO, |s| s.time);
            self.packed.seek_points.push(SeekPoint { time: unit.npt.max(last), gsn });
            self.packed.seek_track_seqs.extend_from_slice(&self.track_next);
        }
        let t = usize::from(unit.track);
        if let Some(n) = self.track_next.get_mut(t) {
            *n = unit.track_seq.wrapping_add(1);
        }
        if self.packed.track_packets.len() <= t {
            self.packed.track_packets.resize(t + 1, 0);
        }
        self.packed.track_packets[t] += 1;
        let len = unit.payload.len() as u64;
        let totals = &mut self.packed.native_totals;
        totals.bytes += len;
        totals.last_send = totals.last_send.max(unit.send_time);
        totals.last_npt = totals.last_npt.max(unit.npt);
        let second = unit.send_time.as_nanos() / 1_000_000_000;
        if second != self.window.0 {
            self.window = (second, 0);
        }
        self.window.1 += len;
        totals.peak_bytes_per_s = totals.peak_bytes_per_s.max(self.window.1);
        let meta = NativeMeta {
            send_time: unit.send_time,
            track: unit.track,
            rtp_time: unit.rtp_time,
            track_seq: unit.track_seq,
            marker: unit.marker,
            random_access: unit.random_access,
        };
        if let Some(b) = self.builder.as_mut() {
            b.push_native(meta, &unit.payload);
        }
        Ok(full)
    }

    /// Adds the next unit (GSN order) and its bytes. When it does not fit in the block being
    /// filled, that block is finished and returned, and the unit starts the next one.
    pub fn push(&mut self, unit: &Unit, bytes: &[u8]) -> Result<Option<PackedBlock>, StoreError> {
        let gsn = Gsn(self.next_gsn);
        self.next_gsn += 1;
        if unit.random_access {
            self.packed.seek_points.push(SeekPoint { time: unit.send_time, gsn });
        }
        let full = self.make_room(bytes.len(), gsn)?;
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

    /// Seals the block being filled now, if a unit went into it (a growing object commits what
    /// has arrived so far; the next unit starts a new block).
    pub fn flush(&mut self) -> Result<Option<PackedBlock>, StoreError> {
        match self.builder.take() {
            Some(b) if !b.is_empty() => self.seal(b).map(Some),
            other => {
                self.builder = other;
                Ok(None)
            }
        }
    }

    /// The catalog's view of the first `n` blocks sealed of a native object (`None` for none, or
    /// more than are sealed): what [`BlockPacker::finish`] would give had the object ended
    /// with them. A growing object (a live recording) commits it while it grows.
    #[must_use]
    pub fn prefix(&self, n: usize) -> Option<PackedObject> {
        let at = self.sealed.get(n.checked_sub(1)?)?;
        let tracks = self.track_next.len();
        let mut packed = PackedObject {
            blocks: self.packed.blocks[..n].to_vec(),
            seek_points: self.packed.seek_points[..at.seek_points].to_vec(),
            seek_track_seqs: self.packed.seek_track_seqs[..at.seek_points * tracks].to_vec(),
            track_packets: at.track_packets.clone(),
            native_totals: at.totals,
        };
        if packed.seek_points.first().is_none_or(|s| s.gsn != Gsn(0)) {
            packed.seek_points.insert(0, SeekPoint { time: MediaTime::ZERO, gsn: Gsn(0) });
            packed.seek_track_seqs.splice(0..0, vec![0; tracks]);
        }
        packed.track_packets.resize(tracks, 0);
        Some(packed)
    }

    /// Units pushed so far: the GSN of the next one.
    #[must_use]
    pub fn units(&self) -> u64 {
        self.next_gsn
    }

    /// Blocks finished so far (the index of the block being filled).
    #[must_use]
    pub fn blocks_sealed(&self) -> u32 {
        self.next_index
    }

    /// Whether a block is being filled (it becomes the last block at [`BlockPacker::finish`]).
    #[must_use]
    pub fn has_open_block(&self) -> bool {
        self.builder.as_ref().is_some_and(|b| !b.is_empty())
    }

    /// Ends the object: the last block (if a unit went into it) and the catalog's view of all.
    pub fn finish(mut self) -> Result<(Option<PackedBlock>, PackedObject), StoreError> {
        let last = match self.builder.take() {
            Some(b) if !b.is_empty() => Some(self.seal(b)?),
            _ => None,
        };
        let mut packed = self.packed;
        if packed.seek_points.first().is_none_or(|s| s.gsn != Gsn(0)) {
            if self.native {
                // The object's start: every track at its first packet, at time zero.
                packed.seek_points.insert(0, SeekPoint { time: MediaTime::ZERO, gsn: Gsn(0) });
                let zeros = vec![0; self.track_next.len()];
                packed.seek_track_seqs.splice(0..0, zeros);
            } else {
                let t = packed.blocks.first().map(|b| b.first_send_time).unwrap_or_default();
                packed.seek_points.insert(0, SeekPoint { time: t, gsn: Gsn(0) });
            }
        }
        if self.native {
            packed.track_packets.resize(self.track_next.len(), 0);
        }
        Ok((last, packed))
    }

    /// When a packet of `len` bytes does not fit in the block being filled, seals that block
    /// (returned) and starts the next at `gsn`, of this packer's version.
    fn make_room(&mut self, len: usize, gsn: Gsn) -> Result<Option<PackedBlock>, StoreError> {
        if self.builder.as_ref().is_some_and(|b| b.fits(len)) {
            return Ok(None);
        }
        let full = match self.builder.take() {
            Some(b) => Some(self.seal(b)?),
            None => None,
        };
        let key = BlockKey::new(self.id, BlockIndex(self.next_index));
        self.builder = Some(if self.native {
            BlockBuilder::new_native(key, gsn, self.block_size)
        } else {
            BlockBuilder::new(key, gsn, self.block_size)
        });
        Ok(full)
    }

    fn seal(&mut self, builder: BlockBuilder) -> Result<PackedBlock, StoreError> {
        let index = BlockIndex(self.next_index);
        let key = BlockKey::new(self.id, index);
        // Paired assertion: what goes to disk parses back (the read path checks it again).
        let block = Block::parse(AlignedBuf::copy_from(&builder.finish()), Some(key))
            .map_err(|source| StoreError::InvalidBlock { key, source })?;
        self.packed.blocks.push(BlockEntry::from(block.header()));
        if self.native {
            self.sealed.push(Sealed {
                seek_points: self.packed.seek_points.len(),
                track_packets: self.packed.track_packets.clone(),
                totals: self.packed.native_totals,
            });
        }
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
    (store, via): (&Store, Option<&dyn CopyWriter>),
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
        let disks = store.write_block_via(id, seed, epoch, b.index, b.block.as_bytes(), via)?;
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

    /// A growing object's prefix (a live recording's commit) is what the packer would have
    /// finished with had the object ended after those blocks, whatever sealed them (a full
    /// block, or a flush).
    #[test]
    fn a_prefix_is_the_object_ended_there() {
        let dir = tempfile::tempdir().unwrap();
        let store =
            Store::create(&dir.path().join("store"), &[] as &[PathBuf], Bytes::kib(8)).unwrap();
        let _lock = store.ingest_lock();
        let object = NewObject::begin(&store).unwrap();
        let units: Vec<NativeUnit> = (0..200u32)
            .map(|i| NativeUnit {
                track: (i % 3 == 0) as u8,
                send_time: MediaTime::from_nanos(u64::from(i) * 20_000_000),
                rtp_time: i * 1800,
                track_seq: if i % 3 == 0 { i / 3 } else { i - i / 3 - 1 },
                marker: true,
                random_access: i % 25 == 1,
                npt: MediaTime::from_nanos(u64::from(i) * 20_000_000 + 40_000_000),
                payload: vec![i as u8; 300 + (i as usize * 37) % 900],
            })
            .collect();
        let mut whole = BlockPacker::new_native(&object, 2);
        for (i, u) in units.iter().enumerate() {
            whole.push_native(u).unwrap();
            if i == 90 {
                assert!(whole.flush().unwrap().is_some(), "a flush seals the open block");
                assert!(whole.flush().unwrap().is_none(), "and then there is none");
            }
        }
        let sealed = whole.blocks_sealed() as usize;
        assert!(sealed > 10, "{sealed} blocks");
        assert!(whole.prefix(0).is_none() && whole.prefix(sealed + 1).is_none());
        for n in [1, 5, sealed] {
            let got = whole.prefix(n).unwrap();
            let end = got.blocks[n - 1].first_gsn.0 + u64::from(got.blocks[n - 1].packets);
            let mut part = BlockPacker::new_native(&object, 2);
            for (i, u) in units.iter().take(end as usize).enumerate() {
                part.push_native(u).unwrap();
                if i == 90 {
                    part.flush().unwrap();
                }
            }
            let (_, want) = part.finish().unwrap();
            assert_eq!(got, want, "the first {n} blocks");
        }
    }
}
