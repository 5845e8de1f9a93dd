//! Recording: a client pushes an MPEG-TS stream with `PUT /api/v1/record/NAME?rate=4M`, and it
//! is stored as an object while it arrives, on a guaranteed-rate write stream, playable over RTSP
//! as soon as the body ends.
//!
//! Why: XTREAM serves recordings as *write streams* beside the playing ones (XTREAM §1, §2.2;
//! `docs/design/scheduler.md`). Admission reserves the declared rate on the disks (a recording's
//! blocks are spread by Yima's placement like any object's), the cycle scheduler writes each block
//! by the end of the cycle after the one it was handed in (the recorder's double buffer), and
//! that guarantee holds only if the recorder never hands blocks in faster than it declared. So
//! the body is read through a token bucket at the declared mean rate, with one block of burst: a
//! client that pushes faster is slowed down by TCP flow control, not buffered, and playing
//! streams keep their guarantees.
//!
//! One task per recording ([`Recorders::record`]):
//!
//! 1. Checks the request (name, `rate`, `peak`), claims the name, takes a stream id from the
//!    session manager (the RTSP sessions' sequence) and opens the object (id, seed, epoch) on a
//!    *commit thread* that holds the store's ingest lock until the end, as an ingest does (no
//!    disk is added or removed meanwhile, so the object's epoch stays current).
//! 2. Asks the scheduler thread for admission ([`SchedCommand::OpenRecord`]); a refusal is
//!    `503` with the reason. A body that brings nothing for [`STALL`] gives the reservation
//!    back at once ([`SchedCommand::SuspendRecord`]: a stalled upload must not keep PLAYs out)
//!    and asks for it again when data comes ([`SchedCommand::ResumeRecord`]; refused: `503`).
//! 3. Reads the body at the declared rate into a [`UnitStream`], packs the final units into blocks
//!    ([`BlockPacker`], ingest's own) and hands each full block to the scheduler
//!    ([`SchedCommand::RecordBlock`]) for the disk its placement picks (in a cluster, a copy on
//!    another node's disk goes to its owner over HTTP, as an ingest's blocks do). At most
//!    [`MAX_BLOCKS_IN_FLIGHT`] blocks are unwritten at once; past that the body waits.
//! 4. At the end of the body: the last units and block, every write confirmed, then the catalog
//!    entry ([`NewObject::record`], ingest's) committed in one transaction on the commit thread,
//!    the object added to the [`Library`], the stream closed: `201 Created`.
//!
//! The object is the one `isochron ingest` makes of the same bytes: [`UnitStream`] cuts the units
//! of the batch index, and the packing and the record are ingest's code. Crash ordering is
//! ingest's too: blocks first, the catalog entry last. On any error (not MPEG-TS: `422` with the
//! offset; a failed write; the client gone) the writes in flight are waited for, the stream is
//! closed and the blocks written are removed; nothing is committed. A crash leaves orphan blocks,
//! which the next [`Store::open`] removes.
//!
//! A live feed published over RTSP is recorded by the same frame ([`live`]): only its source
//! differs.
//!
//! Not here: playing an object while it is recorded (time shift), or resuming a recording.

pub mod live;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use crossbeam_channel::Sender;
use futures_util::StreamExt as _;
use isochron_base::{BitRate, BlockKey, Bytes, DiskId, IoFailure, IoFailureKind, StreamId};
use isochron_dataplane::sched_thread::{RecordEvent, SchedCommand};
use isochron_diskio::ingest::{BlockPacker, NewObject, PackedBlock, PackedObject, remove_blocks};
use isochron_diskio::{AlignedBuf, Store};
use isochron_media::{TsError, TsIndex, UnitStream};
use isochron_sched::ReadOp;
use isochron_sched::admission::{Decision, Refusal};
use isochron_sched::cycle::OpenRecord;
use isochron_store::block::Block;
use isochron_store::catalog::{CatalogError, ObjectRecord, validate_title};
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use crate::library::{Library, ObjectSummary};
use crate::sessions::SessionCommand;

/// Most blocks of one recording handed to the scheduler and not yet written; the body waits
/// beyond that. Two would be XTREAM's double buffer; the rest absorbs a disk that is late.
pub const MAX_BLOCKS_IN_FLIGHT: usize = 4;

/// A recording whose body brings no data for this long fails (`408`).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// A recording whose body brings no data for this long gives its reservation back at once (the
/// disks' room is free for others) and asks for it again when data comes; refused then, it
/// fails with `503`.
pub const STALL: Duration = Duration::from_secs(2);

/// A stream with no clock (two PCRs) after this many bytes is refused: without one nothing can be
/// cut or paced, and [`UnitStream`] would buffer it all.
pub const NO_CLOCK_LIMIT: Bytes = Bytes(16 << 20);

/// How long a failed recording waits for its writes in flight before removing what was written.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The declared rates of a recording, from the query string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordParams {
    /// `rate`: the declared mean bit rate, the rate the body is read at.
    pub rate: BitRate,
    /// `peak`: the declared peak bit rate (default: `rate`), for admission.
    pub peak: BitRate,
}

impl RecordParams {
    /// Parses `rate=4M[&peak=6M]` (suffixes `k`, `M`, `G`). Errors name the parameter.
    pub fn from_query(query: &HashMap<String, String>) -> Result<Self, RecordError> {
        let bad = |m: String| Err(RecordError::BadRequest(m));
        if let Some(k) = query.keys().find(|k| !matches!(k.as_str(), "rate" | "peak")) {
            return bad(format!("unknown query parameter {k:?} (expected rate and peak)"));
        }
        let parse = |key: &str, v: &str| {
            v.parse::<BitRate>()
                .map_err(|e| RecordError::BadRequest(format!("query parameter `{key}`: {e}")))
        };
        let Some(rate) = query.get("rate") else {
            return bad(
                "missing query parameter `rate`: the stream's mean bit rate, like rate=4M".into()
            );
        };
        let rate = parse("rate", rate)?;
        let peak = match query.get("peak") {
            Some(p) => parse("peak", p)?,
            None => rate,
        };
        if peak < rate {
            return bad(format!(
                "query parameter `peak` ({peak}) is below `rate` ({rate}): the peak rate is at \
                 least the mean"
            ));
        }
        Ok(Self { rate, peak })
    }
}

/// Why a recording failed. [`RecordError::status`] is its HTTP status.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// The request is malformed: the name or a query parameter (`400`).
    #[error("{0}")]
    BadRequest(String),
    /// The name is taken by an object or by a recording in progress (`409`).
    #[error("{0}")]
    Conflict(String),
    /// Admission control refused the write stream (`503`).
    #[error("recording {name:?} at {rate} (peak {peak}) was not admitted: {reason}")]
    Rejected {
        /// The object name.
        name: String,
        /// The declared mean rate.
        rate: BitRate,
        /// The declared peak rate.
        peak: BitRate,
        /// Admission's reason.
        reason: Refusal,
    },
    /// The body is not MPEG-TS that can be stored (`422`); the message has the offset.
    #[error("the body is not a storable MPEG-TS stream: {0}")]
    Media(#[from] TsError),
    /// No clock (two PCRs) in the first bytes of the body (`422`).
    #[error(
        "no MPEG-TS clock in the first {0} bytes of the body: fewer than two PCRs on one PID, \
         so the stream cannot be paced"
    )]
    NoClock(u64),
    /// The body brought no data for [`IDLE_TIMEOUT`] (`408`).
    #[error("the body brought no data for {} s", .0.as_secs())]
    Idle(Duration),
    /// Reading the body failed: the client went away (`400`; nobody is left to hear it).
    #[error("reading the request body after {received} bytes: {error}")]
    Body {
        /// Bytes received before the failure.
        received: u64,
        /// What failed.
        error: String,
    },
    /// A block write or the catalog failed (`500`).
    #[error("{0}")]
    Store(String),
    /// The server is shutting down (`503`).
    #[error("the server is shutting down")]
    Unavailable,
}

impl RecordError {
    /// The HTTP status of the error.
    #[must_use]
    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest(_) | Self::Body { .. } => StatusCode::BAD_REQUEST,
            Self::Conflict(_) => StatusCode::CONFLICT,
            Self::Rejected { .. } | Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::Media(_) | Self::NoClock(_) => StatusCode::UNPROCESSABLE_ENTITY,
            Self::Idle(_) => StatusCode::REQUEST_TIMEOUT,
            Self::Store(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<CatalogError> for RecordError {
    fn from(e: CatalogError) -> Self {
        match e {
            CatalogError::NameExists { name } => {
                Self::Conflict(format!("an object named {name:?} already exists"))
            }
            other => Self::Store(other.to_string()),
        }
    }
}

/// What a committed recording reports (the `201 Created` body): the object as
/// `GET /api/v1/objects` shows it, and how the recording went.
#[derive(Clone, Debug, Serialize)]
pub struct RecordReport {
    /// The object.
    #[serde(flatten)]
    pub object: ObjectSummary,
    /// Body bytes received.
    pub received_bytes: u64,
    /// Bytes of a partial packet at the end of the body, left out.
    pub trailing_bytes: u64,
    /// Seconds from admission to the last block written (the commit follows at once).
    pub wall_s: f64,
}

/// Counters of the recordings, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Recordings in progress.
    pub active: usize,
    /// Body bytes accepted by recordings.
    pub bytes: u64,
    /// Recordings committed.
    pub committed: u64,
    /// Recordings that failed after admission.
    pub failed: u64,
}

/// What every recording task needs, shared by the HTTP handlers.
///
/// The names of the recordings in progress are a small set behind a lock held only to insert or
/// remove one (never across an await): like the [`Library`], not a shared big state.
#[derive(Debug)]
pub struct Recorders {
    store: Arc<Store>,
    library: Arc<Library>,
    sched: Sender<SchedCommand>,
    sessions: mpsc::UnboundedSender<SessionCommand>,
    active: Mutex<HashSet<String>>,
    /// The live feeds among them, with their counters.
    live: Mutex<HashMap<String, Arc<live::LiveProgress>>>,
    /// Live feeds whose publisher dropped, waiting for it to come back (`live.grace_s`).
    waiting: Mutex<HashMap<String, live::Waiting>>,
    bytes: AtomicU64,
    committed: AtomicU64,
    failed: AtomicU64,
    /// The ladder a live recording gets once its feed ends (`transcode.ladder`, a single
    /// node), and the base URL of this server's HTTP, which the transcoder reads it from.
    laddering: std::sync::OnceLock<(crate::transcoder::Laddering, String)>,
}

impl Recorders {
    /// Recorders into `store`, adding their objects to `library`.
    #[must_use]
    pub fn new(
        store: Arc<Store>,
        library: Arc<Library>,
        sched: Sender<SchedCommand>,
        sessions: mpsc::UnboundedSender<SessionCommand>,
    ) -> Self {
        Self {
            store,
            library,
            sched,
            sessions,
            active: Mutex::new(HashSet::new()),
            live: Mutex::new(HashMap::new()),
            waiting: Mutex::new(HashMap::new()),
            bytes: AtomicU64::new(0),
            committed: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            laddering: std::sync::OnceLock::new(),
        }
    }

    /// Live recordings get `laddering`'s ladder once their feed ends, made from their HLS at
    /// `http_base` (`http://host:port`, this server's).
    pub(crate) fn ladder_live_with(
        &self,
        laddering: crate::transcoder::Laddering,
        http_base: String,
    ) {
        let _ = self.laddering.set((laddering, http_base));
    }

    /// The counters.
    #[must_use]
    pub fn stats(&self) -> RecorderStats {
        RecorderStats {
            active: self.names().len(),
            bytes: self.bytes.load(Ordering::Relaxed),
            committed: self.committed.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
        }
    }

    /// Whether a recording named `name` may start now: a valid name, no object and no recording
    /// in progress of that name. The API asks before it reads a byte of the body, so that the
    /// refusal is the answer to the client's `Expect: 100-continue` (RFC 9110 §10.1.1) and no
    /// body is sent for nothing; [`Recorders::record`] asks again, atomically with its claim.
    pub fn check(&self, name: &str) -> Result<(), RecordError> {
        validate_title(name).map_err(|e| RecordError::BadRequest(e.to_string()))?;
        if self.library.contains(name) {
            return Err(RecordError::Conflict(format!("an object named {name:?} already exists")));
        }
        if self.names().contains(name) {
            return Err(RecordError::Conflict(format!(
                "a recording named {name:?} is already in progress"
            )));
        }
        Ok(())
    }

    /// Records `body` as object `name` at the declared rates (see the module docs). Run it as its
    /// own task: it must see the body to its end (or its failure) to clean up, even if the HTTP
    /// exchange is dropped.
    pub async fn record(
        self: Arc<Self>,
        name: String,
        params: RecordParams,
        body: Body,
    ) -> Result<RecordReport, RecordError> {
        let mut open = self.open(&name, params).await?;
        let received = self.receive(&mut open.writer, params, body).await;
        let object = open.writer.object;
        let started = open.started;
        let mut report = None;
        let record = received.map(|Received { packed, index, bytes }| {
            let source = format!("HTTP PUT /api/v1/record/{name}");
            let rec = object.record(&name, &source, packed, &index);
            report = Some((bytes, index.trailing_bytes()));
            rec
        });
        let rec = self.close(open, record).await?;
        let (received_bytes, trailing_bytes) = report.unwrap_or_default();
        Ok(RecordReport {
            object: ObjectSummary::from(&rec),
            received_bytes,
            trailing_bytes,
            wall_s: started.elapsed().as_secs_f64(),
        })
    }

    /// The frame of every recording, before its source's data: checks and claims `name`, takes
    /// a stream id, opens the object on its commit thread and asks admission for the write
    /// stream at `params` (times the store's copies). A refusal abandons the object.
    async fn open(&self, name: &str, params: RecordParams) -> Result<Open<'_>, RecordError> {
        self.check(name)?;
        let claim = self.claim(name)?;
        let stream = self.allocate_stream().await?;
        let slot = Slot::open(Arc::clone(&self.store)).await?;
        let object = slot.object;

        let (events_tx, events) = mpsc::unbounded_channel();
        let (tx, rx) = oneshot::channel();
        // Each block is written `store.replication` times: admitted at that multiple of the
        // declared rates.
        let copies = u64::from(self.store.replication());
        let req = OpenRecord {
            stream,
            object: object.id,
            avg_bitrate: BitRate(params.rate.0.saturating_mul(copies)),
            peak_bitrate: BitRate(params.peak.0.saturating_mul(copies)),
            block_size: object.block_size,
        };
        let open = SchedCommand::OpenRecord {
            req,
            name: name.to_owned(),
            events: events_tx.clone(),
            reply: tx,
        };
        let _ = self.sched.send(open);
        match rx.await {
            Ok(Decision::Admit) => {}
            Ok(Decision::Reject(reason)) => {
                slot.finish(None, Vec::new()).await?;
                let (rate, peak) = (params.rate, params.peak);
                return Err(RecordError::Rejected { name: name.to_owned(), rate, peak, reason });
            }
            Err(_) => return Err(RecordError::Unavailable),
        }
        let admitted = Admitted { sched: self.sched.clone(), stream };
        info!(object = %name, id = %object.id, %stream, rate = %params.rate, "recording");
        let writer = Writer {
            store: Arc::clone(&self.store),
            sched: self.sched.clone(),
            stream,
            req,
            name: name.to_owned(),
            object,
            events,
            events_tx,
            in_flight: HashMap::new(),
            written: Vec::new(),
        };
        let started = tokio::time::Instant::now();
        Ok(Open { _claim: claim, slot, admitted, writer, started })
    }

    /// The frame of every recording, after its source's data: commits `record` (every block
    /// of it written) and adds the object to the library; or, when the source failed, waits for
    /// the writes in flight and removes every block written. The write stream is closed.
    async fn close(
        &self,
        open: Open<'_>,
        record: Result<ObjectRecord, RecordError>,
    ) -> Result<ObjectRecord, RecordError> {
        let Open { _claim, slot, admitted, mut writer, started } = open;
        let name = writer.name.clone();
        match record {
            Ok(rec) => {
                if let Err(e) = slot.finish(Some(rec.clone()), writer.written).await {
                    self.failed.fetch_add(1, Ordering::Relaxed);
                    warn!(object = %name, error = %e, "recording not committed");
                    return Err(e);
                }
                self.library.insert(Arc::new(crate::library::entry(&self.store, rec.clone())));
                drop(admitted);
                self.committed.fetch_add(1, Ordering::Relaxed);
                info!(object = %name, duration_s = rec.duration.as_secs_f64(),
                    blocks = rec.blocks.len(), wall_s = started.elapsed().as_secs_f64(),
                    "recorded");
                Ok(rec)
            }
            Err(e) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                writer.settle().await;
                drop(admitted);
                warn!(object = %name, error = %e, blocks = writer.written.len(),
                    "recording failed; removing the blocks written");
                let _ = slot.finish(None, writer.written).await;
                Err(e)
            }
        }
    }

    /// A stalled recording's data came again: its reservation asked for anew.
    async fn resume(&self, w: &Writer, params: &RecordParams) -> Result<(), RecordError> {
        let (tx, rx) = oneshot::channel();
        let cmd = SchedCommand::ResumeRecord { req: w.req, name: w.name.clone(), reply: tx };
        let _ = self.sched.send(cmd);
        match rx.await {
            Ok(Some(Decision::Admit)) => {
                info!(object = %w.name, stream = %w.stream, "recording resumed");
                Ok(())
            }
            Ok(Some(Decision::Reject(reason))) => Err(RecordError::Rejected {
                name: w.name.clone(),
                rate: params.rate,
                peak: params.peak,
                reason,
            }),
            Ok(None) | Err(_) => Err(RecordError::Unavailable),
        }
    }

    /// Reads the body at the declared rate and hands its blocks to `w`, up to the last one
    /// written; returns what the record needs.
    async fn receive(
        &self,
        w: &mut Writer,
        params: RecordParams,
        body: Body,
    ) -> Result<Received, RecordError> {
        let mut data = body.into_data_stream();
        let mut bucket =
            TokenBucket::new(params.rate, w.object.block_size, tokio::time::Instant::now());
        let mut units = UnitStream::new();
        let mut packer = BlockPacker::new(&w.object);
        let mut received = 0u64;
        let mut last_data = tokio::time::Instant::now();
        let mut suspended = false;
        loop {
            let idle_left = IDLE_TIMEOUT.saturating_sub(last_data.elapsed());
            let wait = if suspended { idle_left } else { STALL.min(idle_left) };
            let next = tokio::select! {
                biased;
                ev = w.events.recv() => Next::Event(ev),
                chunk = tokio::time::timeout(wait, data.next()) => Next::Chunk(chunk),
            };
            let chunk = match next {
                Next::Event(ev) => {
                    w.handle(ev)?;
                    continue;
                }
                Next::Chunk(Err(_)) if !suspended && last_data.elapsed() < IDLE_TIMEOUT => {
                    // Stalled: the disks' room goes back to the others until data comes.
                    let _ = self.sched.send(SchedCommand::SuspendRecord { stream: w.stream });
                    suspended = true;
                    info!(object = %w.name, stream = %w.stream, "recording stalled; reservation released");
                    continue;
                }
                Next::Chunk(Err(_)) => return Err(RecordError::Idle(IDLE_TIMEOUT)),
                Next::Chunk(Ok(None)) => break,
                Next::Chunk(Ok(Some(Err(e)))) => {
                    return Err(RecordError::Body { received, error: e.to_string() });
                }
                Next::Chunk(Ok(Some(Ok(chunk)))) => chunk,
            };
            last_data = tokio::time::Instant::now();
            if suspended {
                self.resume(w, &params).await?;
                suspended = false;
            }
            // Pace first: the bytes of a fast client wait in its socket, not here.
            let wait = bucket.take(tokio::time::Instant::now(), chunk.len());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            received += chunk.len() as u64;
            self.bytes.fetch_add(chunk.len() as u64, Ordering::Relaxed);
            units.push(&chunk)?;
            while let Some(u) = units.poll_unit() {
                if let Some(b) = packer.push(&u.unit, &u.bytes).map_err(store_error)? {
                    w.submit(b).await?;
                }
            }
            if !units.has_clock() && received > NO_CLOCK_LIMIT.0 {
                return Err(RecordError::NoClock(received));
            }
        }
        let (rest, index) = units.finish()?;
        for u in rest {
            if let Some(b) = packer.push(&u.unit, &u.bytes).map_err(store_error)? {
                w.submit(b).await?;
            }
        }
        let (last, packed) = packer.finish().map_err(store_error)?;
        if let Some(b) = last {
            w.submit(b).await?;
        }
        w.wait_all().await?;
        Ok(Received { packed, index, bytes: received })
    }

    fn claim(&self, name: &str) -> Result<Claim<'_>, RecordError> {
        if !self.names().insert(name.to_owned()) {
            return Err(RecordError::Conflict(format!(
                "a recording named {name:?} is already in progress"
            )));
        }
        Ok(Claim { recorders: self, name: name.to_owned() })
    }

    async fn allocate_stream(&self) -> Result<StreamId, RecordError> {
        let (tx, rx) = oneshot::channel();
        self.sessions
            .send(SessionCommand::AllocateStream { reply: tx })
            .map_err(|_| RecordError::Unavailable)?;
        rx.await.map_err(|_| RecordError::Unavailable)
    }

    fn live_list(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<live::LiveProgress>>> {
        // Inserts and removes are atomic, as for `names`.
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn names(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        // Inserts and removes are atomic: a panicking holder left the set itself intact.
        self.active.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// A recording admitted and open ([`Recorders::open`]): its name claimed, its object's commit
/// thread, its write stream and the writer of its blocks.
struct Open<'a> {
    _claim: Claim<'a>,
    slot: Slot,
    admitted: Admitted,
    writer: Writer,
    /// When admission let it in.
    started: tokio::time::Instant,
}

/// A whole body, stored.
struct Received {
    packed: PackedObject,
    index: TsIndex,
    bytes: u64,
}

/// What the body loop woke for.
enum Next<C> {
    Event(Option<RecordEvent>),
    Chunk(C),
}

fn store_error(e: impl std::fmt::Display) -> RecordError {
    RecordError::Store(e.to_string())
}

/// A name reserved by a recording in progress; released on drop.
struct Claim<'a> {
    recorders: &'a Recorders,
    name: String,
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.recorders.names().remove(&self.name);
    }
}

/// An admitted write stream; closed in the scheduler (its bandwidth released) on drop, so that a
/// recording task that ends in any way gives it back.
struct Admitted {
    sched: Sender<SchedCommand>,
    stream: StreamId,
}

impl Drop for Admitted {
    fn drop(&mut self) {
        let _ = self.sched.send(SchedCommand::Read(ReadOp::Close { stream: self.stream }));
    }
}

/// The blocks of one recording on their way to the disks.
struct Writer {
    store: Arc<Store>,
    sched: Sender<SchedCommand>,
    stream: StreamId,
    /// Its admission request and name, to ask again after a stall.
    req: OpenRecord,
    name: String,
    object: NewObject,
    events: mpsc::UnboundedReceiver<RecordEvent>,
    /// Where the writes on other nodes' disks report (as the scheduler does).
    events_tx: mpsc::UnboundedSender<RecordEvent>,
    /// Handed to the scheduler, with the disks of their copies not yet reported written.
    in_flight: HashMap<BlockKey, Vec<DiskId>>,
    /// Durably written.
    written: Vec<(DiskId, BlockKey)>,
}

impl Writer {
    /// Hands `b` to the scheduler, first waiting while [`MAX_BLOCKS_IN_FLIGHT`] are unwritten.
    async fn submit(&mut self, b: PackedBlock) -> Result<(), RecordError> {
        while self.in_flight.len() >= MAX_BLOCKS_IN_FLIGHT {
            let ev = self.events.recv().await;
            self.handle(ev)?;
        }
        // Every copy (`store.replication`), each a write of the admitted stream.
        let disks = self.object.disks_of(&self.store, b.index);
        self.in_flight.insert(b.key(), disks.iter().collect());
        let block = Arc::new(b.block);
        for disk in disks.iter() {
            if self.store.is_local(disk) {
                let block = Arc::clone(&block);
                let cmd = SchedCommand::RecordBlock { stream: self.stream, disk, block };
                self.sched.send(cmd).map_err(|_| RecordError::Unavailable)?;
            } else {
                self.write_remote(disk, Arc::clone(&block));
            }
        }
        Ok(())
    }

    /// Writes a copy on another node's disk (a cluster): its owner writes it (an HTTP `PUT`,
    /// as an ingest's blocks), on a blocking task; the outcome comes back as the scheduler's
    /// would. The owner writes it directly: this node's admission reserved the recording's
    /// rate, the owner's disk has no reservation for it.
    fn write_remote(&self, disk: DiskId, block: Arc<Block<AlignedBuf>>) {
        let (remote, events) = (self.store.remote(), self.events_tx.clone());
        let key = block.header().key;
        tokio::task::spawn_blocking(move || {
            let written = match remote {
                Some(r) => r.write_block(disk, key, block.as_bytes()),
                None => Err(IoFailure::new(
                    IoFailureKind::Remote,
                    format!("disk {disk} is on another node, and no route to it"),
                )),
            };
            let _ = events.send(match written {
                Ok(()) => RecordEvent::Written(key, disk),
                Err(e) => RecordEvent::Failed(key, e),
            });
        });
    }

    /// How many of the object's first blocks are durably written, every copy, when `sealed`
    /// were handed in: those before the first still in flight.
    fn written_through(&self, sealed: u32) -> u32 {
        self.in_flight.keys().map(|k| k.index.0).min().unwrap_or(sealed).min(sealed)
    }

    /// Waits until every block handed in is written.
    async fn wait_all(&mut self) -> Result<(), RecordError> {
        while !self.in_flight.is_empty() {
            let ev = self.events.recv().await;
            self.handle(ev)?;
        }
        Ok(())
    }

    /// After a failure: waits (a bounded time) for the writes in flight to end, so that what was
    /// written is known and can be removed.
    async fn settle(&mut self) {
        let deadline = tokio::time::Instant::now() + SETTLE_TIMEOUT;
        while !self.in_flight.is_empty() {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(ev)) => {
                    let _ = self.handle(Some(ev));
                }
                Ok(None) | Err(_) => {
                    warn!(stream = %self.stream, blocks = self.in_flight.len(),
                        "writes of a failed recording did not end; recovery will remove them");
                    return;
                }
            }
        }
    }

    fn handle(&mut self, ev: Option<RecordEvent>) -> Result<(), RecordError> {
        match ev {
            Some(RecordEvent::Written(key, disk)) => {
                if let Some(left) = self.in_flight.get_mut(&key)
                    && let Some(i) = left.iter().position(|d| *d == disk)
                {
                    left.swap_remove(i);
                    self.written.push((disk, key));
                    if left.is_empty() {
                        self.in_flight.remove(&key);
                    }
                }
                Ok(())
            }
            Some(RecordEvent::Failed(key, error)) => {
                let disks = self.in_flight.remove(&key);
                let on = disks
                    .map(|d| {
                        let d: Vec<String> = d.iter().map(ToString::to_string).collect();
                        format!(" on disk {}", d.join(" or "))
                    })
                    .unwrap_or_default();
                Err(RecordError::Store(format!("writing block {key}{on} failed: {error}")))
            }
            None => Err(RecordError::Unavailable),
        }
    }
}

/// The end of a recording, for its commit thread.
struct Finish {
    /// The record to commit; `None` to abandon the object.
    record: Option<ObjectRecord>,
    /// Its written blocks, removed if it is not committed.
    written: Vec<(DiskId, BlockKey)>,
    reply: oneshot::Sender<Result<(), CatalogError>>,
}

/// What a recording asks of its commit thread.
enum SlotMsg {
    /// Commit `record`, the object as written so far (a growing object, `Catalog::grow_object`).
    Grow { record: ObjectRecord, reply: oneshot::Sender<Result<(), CatalogError>> },
    /// The end.
    Finish(Finish),
}

/// A new object open for a recording. Its commit thread holds the store's ingest lock (a
/// `std` read guard, which must stay on one thread) from choosing the object's epoch until the
/// record is committed or abandoned, as an ingest does; the catalog transactions run there too,
/// off the async workers. A live recording commits the object as it grows ([`Slot::grow`]);
/// what a commit names is kept whatever happens after. Dropped unfinished (a task that
/// panicked or was aborted), the thread releases the lock and leaves the blocks no commit
/// names to recovery.
struct Slot {
    object: NewObject,
    tx: mpsc::UnboundedSender<SlotMsg>,
}

impl Slot {
    async fn open(store: Arc<Store>) -> Result<Self, RecordError> {
        let (opened_tx, opened_rx) = oneshot::channel();
        let (tx, mut rx) = mpsc::unbounded_channel::<SlotMsg>();
        std::thread::Builder::new()
            .name("isochron-record".into())
            .spawn(move || {
                let _lock = store.ingest_lock();
                let object = match NewObject::begin(&store) {
                    Ok(o) => o,
                    Err(e) => {
                        let _ = opened_tx.send(Err(RecordError::Store(e.to_string())));
                        return;
                    }
                };
                if opened_tx.send(Ok(object)).is_err() {
                    return;
                }
                // The blocks the last commit names (a growing object's).
                let mut committed = 0;
                while let Some(msg) = rx.blocking_recv() {
                    let Finish { record, written, reply } = match msg {
                        SlotMsg::Grow { record, reply } => {
                            let result = store.catalog().grow_object(&record);
                            if result.is_ok() {
                                committed = record.blocks.len();
                            }
                            let _ = reply.send(result);
                            continue;
                        }
                        SlotMsg::Finish(f) => f,
                    };
                    let result = match &record {
                        Some(rec) if committed > 0 => store.catalog().grow_object(rec),
                        Some(rec) => store.catalog().insert_object(rec),
                        None => Ok(()),
                    };
                    if record.is_none() || result.is_err() {
                        // What a commit names stays; the rest goes.
                        let beyond: Vec<(DiskId, BlockKey)> = written
                            .into_iter()
                            .filter(|(_, k)| k.index.0 as usize >= committed)
                            .collect();
                        remove_blocks(&store, &beyond);
                    }
                    let _ = reply.send(result);
                    return;
                }
            })
            .map_err(|e| RecordError::Store(format!("starting a recording thread: {e}")))?;
        let object = opened_rx.await.map_err(|_| RecordError::Unavailable)??;
        Ok(Self { object, tx })
    }

    /// Commits `record`, the object as written so far: every block it names is durable, all
    /// its copies (a live recording, `docs/design/live.md`).
    async fn grow(&self, record: ObjectRecord) -> Result<(), RecordError> {
        let (reply, rx) = oneshot::channel();
        let _ = self.tx.send(SlotMsg::Grow { record, reply });
        match rx.await {
            Ok(result) => Ok(result?),
            Err(_) => Err(RecordError::Unavailable),
        }
    }

    /// Commits `record` (or abandons the object, with `None`); blocks of an object not committed
    /// are removed. Releases the ingest lock.
    async fn finish(
        self,
        record: Option<ObjectRecord>,
        written: Vec<(DiskId, BlockKey)>,
    ) -> Result<(), RecordError> {
        let (tx, rx) = oneshot::channel();
        let _ = self.tx.send(SlotMsg::Finish(Finish { record, written, reply: tx }));
        match rx.await {
            Ok(result) => Ok(result?),
            Err(_) => Err(RecordError::Unavailable),
        }
    }
}

/// Paces the body: at most `rate` on average, with a burst of one block.
#[derive(Clone, Copy, Debug)]
struct TokenBucket {
    /// Bytes per second.
    rate: f64,
    /// Most bytes that can be taken at once after an idle period.
    burst: f64,
    /// Bytes that can be taken now (negative: owed).
    tokens: f64,
    at: tokio::time::Instant,
}

impl TokenBucket {
    fn new(rate: BitRate, burst: Bytes, now: tokio::time::Instant) -> Self {
        let burst = burst.0 as f64;
        Self { rate: rate.bytes_per_sec().max(1.0), burst, tokens: burst, at: now }
    }

    /// Takes `n` bytes at `now`; returns how long to wait before taking more.
    fn take(&mut self, now: tokio::time::Instant, n: usize) -> Duration {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst) - n as f64;
        self.at = now;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_string(), (*v).to_string())).collect()
    }

    #[test]
    fn params_parse_and_errors_name_the_parameter() {
        let p = RecordParams::from_query(&query(&[("rate", "4M")])).unwrap();
        assert_eq!(p, RecordParams { rate: BitRate(4_000_000), peak: BitRate(4_000_000) });
        let p = RecordParams::from_query(&query(&[("rate", "1.5M"), ("peak", "6m")])).unwrap();
        assert_eq!(p.peak, BitRate(6_000_000));
        for (q, needle) in [
            (query(&[]), "`rate`"),
            (query(&[("rate", "fast")]), "`rate`"),
            (query(&[("rate", "0")]), "`rate`"),
            (query(&[("rate", "4M"), ("peak", "x")]), "`peak`"),
            (query(&[("rate", "4M"), ("peak", "1M")]), "`peak`"),
            (query(&[("rate", "4M"), ("speed", "1")]), "\"speed\""),
        ] {
            let e = RecordParams::from_query(&q).unwrap_err();
            assert_eq!(e.status(), StatusCode::BAD_REQUEST);
            assert!(e.to_string().contains(needle), "{e}");
        }
    }

    #[test]
    fn token_bucket_paces_to_the_rate_after_one_burst() {
        let t0 = tokio::time::Instant::now();
        // 8 kb/s = 1000 B/s, burst 500 B.
        let mut b = TokenBucket::new(BitRate(8000), Bytes(500), t0);
        assert_eq!(b.take(t0, 500), Duration::ZERO);
        assert_eq!(b.take(t0, 250), Duration::from_millis(250));
        // After waiting it out, the debt is paid; an idle second refills only the burst.
        let t1 = t0 + Duration::from_millis(250);
        assert_eq!(b.take(t1, 0), Duration::ZERO);
        let t2 = t1 + Duration::from_secs(10);
        assert_eq!(b.take(t2, 1500), Duration::from_secs(1));
        // Overall: n bytes take (n - burst) / rate.
        let mut b = TokenBucket::new(BitRate(8000), Bytes(500), t0);
        let (mut now, mut waited) = (t0, Duration::ZERO);
        for _ in 0..100 {
            let w = b.take(now, 100);
            now += w;
            waited += w;
        }
        let want = Duration::from_millis(9_500);
        assert!(waited.abs_diff(want) < Duration::from_millis(101), "{waited:?}");
    }

    #[test]
    fn errors_map_to_statuses() {
        let e: RecordError = CatalogError::NameExists { name: "a".into() }.into();
        assert_eq!(e.status(), StatusCode::CONFLICT);
        let e = RecordError::Media(TsError::NotTransportStream { offset: 376, byte: 0 });
        assert_eq!(e.status(), StatusCode::UNPROCESSABLE_ENTITY);
        assert!(e.to_string().contains("offset 376"), "{e}");
        assert_eq!(RecordError::Idle(IDLE_TIMEOUT).status(), StatusCode::REQUEST_TIMEOUT);
    }
}
