//! Recording a live feed: the RTP a publisher sends after RTSP RECORD (RFC 2326 §10.11), stored
//! as it arrives into a new object, on an admitted write stream like an HTTP recording's.
//!
//! Why here: a live recording is a recording (XTREAM §2.2: a write stream at a guaranteed
//! rate), so it shares [`Recorders`]' frame — the name's claim, the object's commit thread,
//! admission, the writer of blocks, the commit or the removal — and differs only in its
//! source. The connection that owns the publisher's dialog hands each RTP packet of the feed
//! over a bounded channel ([`FeedPacket`]); [`isochron_media::live::LiveIngest`] makes them the
//! native units an ingested MP4 is stored as; ingest's [`BlockPacker`] packs them. A full
//! channel holds the connection's reader back, so a publisher faster than its admitted peak is
//! slowed by TCP, as an HTTP body is.
//!
//! While it runs the feed is also a live presentation (`rtsp://host/NAME`): the units are cut
//! into chunks ([`isochron_live::ChunkPacker`], numbered as the recording numbers them), each
//! held once as a block in memory and handed to the session manager, whose node core gives it
//! to every viewer ([`isochron_node::FeedEvent`]).
//!
//! The recording is a *growing object*: every [`COMMIT_EVERY`] of the feed the block being
//! filled is sealed and handed to the disks, and the object as far as every copy of its blocks
//! is durable is committed ([`isochron_store::catalog::Catalog::grow_object`]: blocks first,
//! then the record naming them). A crash (`kill -9`) keeps exactly the last committed prefix,
//! which the next start finds whole (the blocks after it are orphans it removes) and plays.
//!
//! The feed ends when its publisher ends it (RTSP TEARDOWN, an SRT shutdown: [`LiveFeed::ended`]
//! is set when the channel closes) or after [`IDLE_TIMEOUT`] without a packet: then its viewers
//! get their BYE and the object is committed with all that arrived. A channel that closes
//! without it (the publisher's connection lost) leaves the feed waiting [`LiveFeed::grace`] for
//! a publisher of the same name and tracks ([`Recorders::rejoin`]), which goes on with it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use isochron_base::{MediaTime, ObjectId};
use isochron_diskio::AlignedBuf;
use isochron_diskio::ingest::{BlockPacker, PackedObject};
use isochron_live::relay::{FeedFrame, encode as encode_frame};
use isochron_live::{ChunkConfig, ChunkPacker};
use isochron_media::live::{LiveIngest, LiveStats};
use isochron_media::native::NativeTrack;
use isochron_rtsp::sdp::MediaTrack;
use isochron_rtsp::server::Presentation;
use isochron_store::block::Block;
use isochron_store::catalog::ObjectRecord;
use serde::Serialize;
use tokio::sync::{broadcast, mpsc, oneshot};
use tracing::{info, warn};

use super::{IDLE_TIMEOUT, Next, RecordError, RecordParams, Recorders, Slot, TokenBucket, Writer};
use crate::library::RemoteFeed;
use crate::sessions::SessionCommand;

/// How often a live recording commits what it has written (at most this much of a feed is lost
/// with the server, plus what its disks had not yet written).
pub const COMMIT_EVERY: std::time::Duration = std::time::Duration::from_secs(2);

/// A feed to record: what its publisher announced and was accepted.
#[derive(Clone, Debug)]
pub struct LiveFeed {
    /// The object name.
    pub name: String,
    /// Its tracks, from the announced description.
    pub tracks: Vec<NativeTrack>,
    /// The RTP payload type of each track's packets (the publisher's).
    pub payload_types: Vec<u8>,
    /// The rates admitted: the announced bandwidth (or the configured default) and its peak.
    pub params: RecordParams,
    /// Where it comes from, for the object's record (`RTSP RECORD from ADDR`).
    pub source: String,
    /// The publisher's address.
    pub publisher: std::net::SocketAddr,
    /// How its packets come: `tcp` (interleaved), `udp`, `tcp+udp`, or `srt`.
    pub transport: String,
    /// Set by the publisher when the feed ends for good (RTSP TEARDOWN, SRT shutdown): its
    /// packets' queue closing without it is a drop, which `grace` waits out.
    pub ended: Arc<AtomicBool>,
    /// How long a feed whose publisher dropped waits for it to come back (`live.grace_s`).
    pub grace: std::time::Duration,
}

/// A publisher come back to its feed within the grace period: its packets from now on.
#[derive(Debug)]
pub struct Rejoin {
    /// Its packets.
    pub packets: mpsc::Receiver<FeedPacket>,
    /// Set when it ends the feed for good.
    pub ended: Arc<AtomicBool>,
    /// Its address.
    pub publisher: std::net::SocketAddr,
}

/// A feed whose publisher dropped, waiting for it: what a returning publisher must send, and
/// where to hand it.
#[derive(Debug)]
pub(super) struct Waiting {
    tracks: Vec<NativeTrack>,
    payload_types: Vec<u8>,
    back: oneshot::Sender<Rejoin>,
}

/// A feed being recorded, as `GET /api/v1/live` shows it.
#[derive(Clone, Debug, Serialize)]
pub struct LiveStatus {
    /// The object name it is recorded as.
    pub name: String,
    /// The publisher's address (empty for those who may not see clients' addresses).
    pub publisher: String,
    /// `tcp` (interleaved), `udp`, or `tcp+udp`.
    pub transport: String,
    /// Each track's encoding, in order.
    pub tracks: Vec<String>,
    /// The mean rate admitted, bits per second.
    pub admitted_bps: u64,
    /// The peak rate admitted, bits per second.
    pub admitted_peak_bps: u64,
    /// Packets received.
    pub packets: u64,
    /// Bytes received (RTP headers included).
    pub bytes: u64,
    /// Seconds of the feed received (its first packet's arrival to its last).
    pub recorded_s: f64,
    /// The received rate over `recorded_s`, bits per second.
    pub bit_rate_bps: u64,
    /// Blocks handed to the disks.
    pub blocks: u64,
    /// Sessions watching it live (filled in by the HTTP API).
    pub viewers: usize,
    /// When the feed was admitted, Unix seconds.
    pub started_unix_s: u64,
    /// The wall-clock time of the recording's timeline zero (its first packet's arrival), Unix
    /// milliseconds; 0 until that packet came. HLS dates its live segments from it
    /// (`EXT-X-PROGRAM-DATE-TIME`).
    pub zero_unix_ms: u64,
    /// In a cluster, the node the feed is published on when it is another: this node serves
    /// it from the chunks it relays, and knows of it what `RemoteFeed` holds (`bytes` are
    /// those relayed to it, `packets` and `blocks` are counted on the publisher's node only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

/// The wall-clock time `ago` before now, Unix milliseconds (a feed's timeline zero, from how
/// long ago its first packet arrived).
#[must_use]
pub fn unix_ms_ago(ago: std::time::Duration) -> u64 {
    (std::time::SystemTime::now() - ago)
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(0))
}

impl LiveStatus {
    /// The status of feed `p`, published on another node, as this node knows it (`f`).
    #[must_use]
    pub fn of_remote(p: &Presentation, f: &RemoteFeed) -> Self {
        let zero_unix_ms = f.zero_unix_ms.load(Ordering::Relaxed);
        let now_ms = unix_ms_ago(std::time::Duration::ZERO);
        let recorded_s =
            if zero_unix_ms > 0 { now_ms.saturating_sub(zero_unix_ms) as f64 / 1e3 } else { 0.0 };
        let bytes = f.bytes.load(Ordering::Relaxed);
        Self {
            name: p.name.clone(),
            publisher: String::new(),
            transport: "cluster".to_owned(),
            tracks: p.tracks.iter().map(|t| t.encoding.clone()).collect(),
            admitted_bps: p.avg_bitrate.0,
            admitted_peak_bps: 0,
            packets: 0,
            bytes,
            recorded_s,
            bit_rate_bps: if recorded_s > 0.0 {
                (bytes as f64 * 8.0 / recorded_s) as u64
            } else {
                0
            },
            blocks: 0,
            viewers: 0,
            started_unix_s: zero_unix_ms / 1000,
            zero_unix_ms,
            node: Some(f.node.clone()),
        }
    }
}

/// A feed in progress: what it is and its counters, updated by its recording task.
#[derive(Debug)]
pub(super) struct LiveProgress {
    status: LiveStatus,
    packets: AtomicU64,
    bytes: AtomicU64,
    media_ns: AtomicU64,
    blocks: AtomicU64,
    zero_unix_ms: AtomicU64,
    /// The feed's object.
    feed: ObjectId,
    /// Its first packet's arrival, once it came.
    zero: Mutex<Option<tokio::time::Instant>>,
    /// Its frames for the other nodes of a cluster (`isochron_live::relay`): each chunk
    /// encoded once and shared by every subscriber.
    tap: broadcast::Sender<TapItem>,
}

/// What a feed's tap carries to the connections of the nodes that subscribed.
#[derive(Clone, Debug)]
pub enum TapItem {
    /// The feed's first packet arrived then (each subscriber writes its own `Opened` frame
    /// with the time since).
    Opened(tokio::time::Instant),
    /// An encoded chunk frame.
    Frame(Arc<[u8]>),
    /// The feed ended.
    Ended,
}

/// A subscription to a feed's tap ([`Recorders::subscribe_feed`]).
#[derive(Debug)]
pub struct FeedSubscription {
    /// The feed's object.
    pub feed: ObjectId,
    /// Its first packet's arrival, if it came before the subscription.
    pub zero: Option<tokio::time::Instant>,
    /// Its chunks from now on.
    pub items: broadcast::Receiver<TapItem>,
}

/// Chunks a subscriber may fall behind by before it is cut off (at 20 ms a chunk, 40 s).
const TAP_DEPTH: usize = 2048;

impl LiveProgress {
    fn new(feed: &LiveFeed, id: ObjectId) -> Self {
        let started_unix_s = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Self {
            status: LiveStatus {
                name: feed.name.clone(),
                publisher: feed.publisher.to_string(),
                transport: feed.transport.clone(),
                tracks: feed.tracks.iter().map(|t| t.encoding.to_owned()).collect(),
                admitted_bps: feed.params.rate.0,
                admitted_peak_bps: feed.params.peak.0,
                packets: 0,
                bytes: 0,
                recorded_s: 0.0,
                bit_rate_bps: 0,
                blocks: 0,
                viewers: 0,
                started_unix_s,
                zero_unix_ms: 0,
                node: None,
            },
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            media_ns: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
            zero_unix_ms: AtomicU64::new(0),
            feed: id,
            zero: Mutex::new(None),
            tap: broadcast::channel(TAP_DEPTH).0,
        }
    }

    /// A subscription to the feed's frames from now on.
    pub(super) fn subscribe(&self) -> FeedSubscription {
        // Under the lock that `opened` takes: the zero is either read here or sent after.
        let zero = self.zero.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        FeedSubscription { feed: self.feed, zero: *zero, items: self.tap.subscribe() }
    }

    fn opened(&self, at: tokio::time::Instant) {
        let mut zero = self.zero.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        *zero = Some(at);
        let _ = self.tap.send(TapItem::Opened(at));
    }

    fn frame(&self, frame: &FeedFrame) {
        if self.tap.receiver_count() > 0 {
            let _ = self.tap.send(TapItem::Frame(encode_frame(frame).into()));
        }
    }

    /// The status now.
    pub(super) fn status(&self) -> LiveStatus {
        let mut s = self.status.clone();
        s.packets = self.packets.load(Ordering::Relaxed);
        s.bytes = self.bytes.load(Ordering::Relaxed);
        s.blocks = self.blocks.load(Ordering::Relaxed);
        s.zero_unix_ms = self.zero_unix_ms.load(Ordering::Relaxed);
        let ns = self.media_ns.load(Ordering::Relaxed);
        s.recorded_s = ns as f64 / 1e9;
        let rate = (u128::from(s.bytes) * 8_000_000_000).checked_div(u128::from(ns));
        s.bit_rate_bps = rate.map_or(0, |r| u64::try_from(r).unwrap_or(u64::MAX));
        s
    }
}

/// A feed listed in [`Recorders::live_feeds`] and playable live while its recording runs;
/// unlisted on drop, its viewers told it ended.
struct Listed<'a> {
    recorders: &'a Recorders,
    name: String,
    feed: ObjectId,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        if let Some(p) = self.recorders.live_list().remove(&self.name) {
            let _ = p.tap.send(TapItem::Ended);
        }
        self.recorders.library.remove_live(&self.name);
        let _ = self.recorders.sessions.send(SessionCommand::FeedEnded { feed: self.feed });
    }
}

/// Feed `feed` as its viewers' descriptions show it: its tracks, an open range.
fn live_presentation(feed: &LiveFeed, id: ObjectId) -> Presentation {
    Presentation {
        object: id,
        name: feed.name.clone(),
        duration: MediaTime::ZERO,
        avg_bitrate: feed.params.rate,
        tracks: feed
            .tracks
            .iter()
            .map(|t| MediaTrack {
                kind: if t.kind == isochron_media::StreamKind::Video { "video" } else { "audio" }
                    .to_owned(),
                payload_type: t.payload_type,
                encoding: t.encoding.to_owned(),
                clock_rate: t.clock_rate,
                channels: t.channels,
                fmtp: t.fmtp.clone(),
            })
            .collect(),
        ladder: Vec::new(),
        live: true,
    }
}

/// One RTP packet of a feed, as its connection received it.
#[derive(Debug)]
pub struct FeedPacket {
    /// When it arrived.
    pub at: tokio::time::Instant,
    /// The track it belongs to.
    pub track: usize,
    /// The packet, header included.
    pub packet: Vec<u8>,
}

impl Recorders {
    /// Commits the object as far as its blocks are written, every copy, if that is further
    /// than `committed` blocks, and lists it: the growing object (see the module docs).
    async fn grow(
        &self,
        w: &Writer,
        slot: &Slot,
        packer: &BlockPacker,
        feed: &LiveFeed,
        committed: &mut u32,
    ) -> Result<(), RecordError> {
        let n = w.written_through(packer.blocks_sealed());
        if n <= *committed {
            return Ok(());
        }
        let Some(packed) = packer.prefix(n as usize) else { return Ok(()) };
        let record = w.object.record_native(&feed.name, &feed.source, packed, None, &feed.tracks);
        let duration = record.duration;
        slot.grow(record.clone()).await?;
        self.library.insert(Arc::new(crate::library::entry(&self.store, record)));
        let _ = self.sessions.send(SessionCommand::FeedCommitted { feed: w.object.id });
        *committed = n;
        tracing::debug!(object = %feed.name, blocks = n, %duration, "live recording committed");
        Ok(())
    }

    /// Whether feed `name` waits for its publisher to come back.
    #[must_use]
    pub fn awaits_publisher(&self, name: &str) -> bool {
        self.waiting_list().contains_key(name)
    }

    /// A publisher of `name` with `tracks` (sending `payload_types`): if the feed of that name
    /// waits for its publisher, `rejoin` goes to it (`Ok(None)`); else it is given back (start
    /// a feed). A feed that waits for other tracks is a conflict.
    pub fn rejoin(
        &self,
        name: &str,
        (tracks, payload_types): (&[NativeTrack], &[u8]),
        rejoin: Rejoin,
    ) -> Result<Option<Rejoin>, RecordError> {
        let mut waiting = self.waiting_list();
        let Some(w) = waiting.remove(name) else { return Ok(Some(rejoin)) };
        if w.tracks != tracks || w.payload_types != payload_types {
            waiting.insert(name.to_owned(), w);
            return Err(RecordError::Conflict(format!(
                "the feed {name:?} waits for its publisher with other tracks"
            )));
        }
        Ok(w.back.send(rejoin).err())
    }

    fn waiting_list(
        &self,
    ) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, Waiting>> {
        self.waiting.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The feeds being recorded, by name.
    #[must_use]
    pub fn live_feeds(&self) -> Vec<LiveStatus> {
        let mut v: Vec<LiveStatus> = self.live_list().values().map(|p| p.status()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// A subscription to feed `name`'s chunks (for another node of the cluster that serves
    /// it), if it is being published here.
    pub fn subscribe_feed(&self, name: &str) -> Option<FeedSubscription> {
        self.live_list().get(name).map(|p| p.subscribe())
    }

    /// Starts recording `feed` from `packets` on a task of its own ([`Recorders::record_live`]):
    /// `Ok` once admission let it in, else why not (nothing was created).
    pub async fn start_live(
        self: &Arc<Self>,
        feed: LiveFeed,
        packets: mpsc::Receiver<FeedPacket>,
    ) -> Result<(), RecordError> {
        let (admitted_tx, admitted) = oneshot::channel();
        let (done_tx, done) = oneshot::channel();
        let recorders = Arc::clone(self);
        tokio::spawn(async move {
            let _ = done_tx.send(recorders.record_live(feed, packets, admitted_tx).await);
        });
        if admitted.await.is_ok() {
            return Ok(());
        }
        match done.await {
            Ok(Err(e)) => Err(e),
            Ok(Ok(_)) => {
                Err(RecordError::Store("the recording ended before it was admitted".into()))
            }
            Err(_) => Err(RecordError::Unavailable),
        }
    }

    /// Records `feed` from `packets` (see the module docs): `admitted` is told once admission
    /// let it in (the publisher's RECORD is answered then); an error before that is the
    /// refusal. Returns the committed record. Run it as its own task.
    pub async fn record_live(
        self: Arc<Self>,
        feed: LiveFeed,
        packets: mpsc::Receiver<FeedPacket>,
        admitted: oneshot::Sender<()>,
    ) -> Result<ObjectRecord, RecordError> {
        let mut open = self.open(&feed.name, feed.params).await?;
        let progress = Arc::new(LiveProgress::new(&feed, open.writer.object.id));
        self.live_list().insert(feed.name.clone(), Arc::clone(&progress));
        let id = open.writer.object.id;
        self.library.insert_live(live_presentation(&feed, id));
        let _listed = Listed { recorders: &self, name: feed.name.clone(), feed: id };
        // Viewers may PLAY it from now on: their answer waits for its first key frame.
        let tracks = feed.tracks.iter().map(|t| (t.clock_rate, t.payload_type)).collect();
        let _ = self.sessions.send(SessionCommand::FeedAnnounced { feed: id, tracks });
        let _ = admitted.send(());
        let received =
            self.receive_live((&mut open.writer, &open.slot), &feed, packets, &progress).await;
        let object = open.writer.object;
        let record = received.map(|packed| {
            object.record_native(&feed.name, &feed.source, packed, None, &feed.tracks)
        });
        let recorded = self.close(open, record).await;
        if recorded.is_ok() {
            self.ask_ladder(&feed.name);
        }
        recorded
    }

    /// A finished live recording is a title like any other: the server's ladder
    /// (`transcode.ladder`) is asked for it, its source its own HLS (a live recording keeps no
    /// source file: its stored packets are all there is), which the transcoder's ffmpeg reads
    /// from this server as fast as the disks give it.
    fn ask_ladder(self: &Arc<Self>, name: &str) {
        if self.laddering.get().is_none() {
            return;
        }
        let (me, name) = (Arc::clone(self), name.to_owned());
        tokio::task::spawn_blocking(move || {
            let Some((laddering, base)) = me.laddering.get() else { return };
            let url = format!("{base}/hls/{name}/index.m3u8");
            laddering.ask(&me.store, std::path::Path::new(&url), &name);
        });
    }

    /// Takes the feed's packets until it ends and hands their blocks to `w`, up to the last one
    /// written.
    async fn receive_live(
        &self,
        (w, slot): (&mut Writer, &Slot),
        feed: &LiveFeed,
        packets: mpsc::Receiver<FeedPacket>,
        progress: &LiveProgress,
    ) -> Result<PackedObject, RecordError> {
        let mut ingest = LiveIngest::new(feed.tracks.clone(), feed.payload_types.clone());
        // The publisher's packets; none while it is away, waiting (`back`) for it to return.
        let mut packets = Some(packets);
        let mut ended = Arc::clone(&feed.ended);
        let mut back: Option<(oneshot::Receiver<Rejoin>, tokio::time::Instant)> = None;
        let mut packer = BlockPacker::new_native(&w.object, feed.tracks.len());
        let mut chunks = Chunks {
            packer: ChunkPacker::new(w.object.id, feed.tracks.len(), ChunkConfig::default()),
            feed: w.object.id,
            sessions: &self.sessions,
            progress,
        };
        // Blocks come no faster than the admitted peak (with one block of burst).
        let mut bucket =
            TokenBucket::new(feed.params.peak, w.object.block_size, tokio::time::Instant::now());
        let mut zero = None;
        // The next commit of what is written, and the blocks the last one named.
        let (mut next_commit, mut committed) = (None, 0);
        loop {
            // The open chunk is sealed on time even when no packet comes.
            let seal =
                chunks.packer.poll_timeout().zip(zero).map(|(t, z): (_, tokio::time::Instant)| {
                    z + std::time::Duration::from_nanos(t.as_nanos())
                });
            let next = tokio::select! {
                biased;
                ev = w.events.recv() => Next::Event(ev),
                () = sleep_until(seal) => {
                    chunks.handle_timeout(zero);
                    continue;
                }
                () = sleep_until(next_commit) => {
                    next_commit = next_commit.map(|t| t + COMMIT_EVERY);
                    self.grow(w, slot, &packer, feed, &mut committed).await?;
                    // What arrived since the last seal goes to the disks, committed next time.
                    if let Some(b) = packer.flush().map_err(super::store_error)? {
                        w.submit(b).await?;
                        progress.blocks.fetch_add(1, Ordering::Relaxed);
                    }
                    continue;
                }
                p = next_packet(packets.as_mut()) => Next::Chunk(p),
                r = come_back(back.as_mut()) => {
                    back = None;
                    let Ok(r) = r else {
                        info!(object = %feed.name, "the publisher did not come back; the feed ends");
                        break;
                    };
                    info!(object = %feed.name, publisher = %r.publisher,
                        "the publisher came back: the feed goes on");
                    ingest.rejoin();
                    (packets, ended) = (Some(r.packets), r.ended);
                    continue;
                }
            };
            let p = match next {
                Next::Event(ev) => {
                    w.handle(ev)?;
                    continue;
                }
                Next::Chunk(Err(_)) => {
                    warn!(object = %feed.name, "no packet of the feed for {} s; it ends",
                        IDLE_TIMEOUT.as_secs());
                    break;
                }
                Next::Chunk(Ok(None)) if ended.load(Ordering::Relaxed) || feed.grace.is_zero() => {
                    break;
                }
                Next::Chunk(Ok(None)) => {
                    // Dropped, not ended: the feed waits for its publisher (viewers stay).
                    let (tx, rx) = oneshot::channel();
                    let waiting = Waiting {
                        tracks: feed.tracks.clone(),
                        payload_types: feed.payload_types.clone(),
                        back: tx,
                    };
                    self.waiting_list().insert(feed.name.clone(), waiting);
                    back = Some((rx, tokio::time::Instant::now() + feed.grace));
                    packets = None;
                    warn!(object = %feed.name, grace_s = feed.grace.as_secs_f64(),
                        "the publisher dropped; waiting for it to come back");
                    continue;
                }
                Next::Chunk(Ok(Some(p))) => p,
            };
            if zero.is_none() {
                let tracks = feed.tracks.iter().map(|t| (t.clock_rate, t.payload_type)).collect();
                let opened = SessionCommand::FeedOpened { feed: w.object.id, zero: p.at, tracks };
                let _ = self.sessions.send(opened);
                progress.opened(p.at);
                // The wall clock of the same instant: now, less the time since it arrived.
                let ago = tokio::time::Instant::now().saturating_duration_since(p.at);
                progress.zero_unix_ms.store(unix_ms_ago(ago), Ordering::Relaxed);
            }
            let zero = *zero.get_or_insert(p.at);
            next_commit.get_or_insert(zero + COMMIT_EVERY);
            let since = p.at.saturating_duration_since(zero);
            let arrival =
                MediaTime::from_nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX));
            let wait = bucket.take(tokio::time::Instant::now(), p.packet.len());
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            self.bytes.fetch_add(p.packet.len() as u64, Ordering::Relaxed);
            progress.packets.fetch_add(1, Ordering::Relaxed);
            progress.bytes.fetch_add(p.packet.len() as u64, Ordering::Relaxed);
            progress.media_ns.store(arrival.as_nanos(), Ordering::Relaxed);
            ingest.handle_rtp(arrival, p.track, &p.packet);
            while let Some(u) = ingest.poll_unit() {
                chunks.push(zero, &u);
                if let Some(b) = packer.push_native(&u).map_err(super::store_error)? {
                    w.submit(b).await?;
                    progress.blocks.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        self.waiting_list().remove(&feed.name);
        ingest.finish();
        let zero = zero.unwrap_or_else(tokio::time::Instant::now);
        while let Some(u) = ingest.poll_unit() {
            chunks.push(zero, &u);
            if let Some(b) = packer.push_native(&u).map_err(super::store_error)? {
                w.submit(b).await?;
            }
        }
        chunks.packer.finish();
        chunks.hand_on();
        let stats: LiveStats = ingest.stats();
        if packer.units() == 0 {
            return Err(RecordError::BadRequest(format!(
                "the feed of {:?} ended before any media of its tracks arrived ({stats})",
                feed.name
            )));
        }
        let (last, packed) = packer.finish().map_err(super::store_error)?;
        if let Some(b) = last {
            w.submit(b).await?;
        }
        w.wait_all().await?;
        info!(object = %feed.name, %stats, "live feed ended");
        Ok(packed)
    }
}

/// The next packet of the publisher's queue (an error after [`IDLE_TIMEOUT`] without one), or
/// never while there is no publisher.
async fn next_packet(
    packets: Option<&mut mpsc::Receiver<FeedPacket>>,
) -> Result<Option<FeedPacket>, tokio::time::error::Elapsed> {
    match packets {
        Some(p) => tokio::time::timeout(IDLE_TIMEOUT, p.recv()).await,
        None => std::future::pending().await,
    }
}

/// The publisher that came back, or an error at the end of the grace period; never while no
/// feed waits.
async fn come_back(
    back: Option<&mut (oneshot::Receiver<Rejoin>, tokio::time::Instant)>,
) -> Result<Rejoin, ()> {
    let Some((rx, until)) = back else { return std::future::pending().await };
    match tokio::time::timeout_at(*until, rx).await {
        Ok(Ok(r)) => Ok(r),
        _ => Err(()),
    }
}

/// Sleeps until `at`, or forever without it.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A feed's chunks on their way to its viewers: cut by the packer, each made a block once and
/// handed to the session manager.
struct Chunks<'a> {
    packer: ChunkPacker,
    feed: ObjectId,
    sessions: &'a mpsc::UnboundedSender<SessionCommand>,
    /// The feed's tap, for the other nodes.
    progress: &'a LiveProgress,
}

impl Chunks<'_> {
    /// The packer's clock: time since the feed's first packet.
    fn now(zero: tokio::time::Instant) -> isochron_base::Instant {
        let since = tokio::time::Instant::now().saturating_duration_since(zero);
        isochron_base::Instant::from_nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    fn push(&mut self, zero: tokio::time::Instant, unit: &isochron_media::native::NativeUnit) {
        self.packer.push(Self::now(zero), unit);
        self.hand_on();
    }

    fn handle_timeout(&mut self, zero: Option<tokio::time::Instant>) {
        let Some(zero) = zero else { return };
        self.packer.handle_timeout(Self::now(zero));
        self.hand_on();
    }

    /// Hands the sealed chunks on.
    fn hand_on(&mut self) {
        while let Some(c) = self.packer.poll_chunk() {
            // The packer's own encoding: it parses (a failure is a bug, logged, the chunk lost).
            match Block::parse(AlignedBuf::copy_from(&c.bytes), None) {
                Ok(block) => {
                    // The block without its padding to the disk's alignment.
                    let mut bytes = c.bytes;
                    bytes.truncate(block.header().encoded_len as usize);
                    self.progress.frame(&FeedFrame::Chunk { info: c.info.clone(), bytes });
                    let cmd = SessionCommand::FeedChunk {
                        feed: self.feed,
                        info: c.info,
                        block: Arc::new(block),
                    };
                    let _ = self.sessions.send(cmd);
                }
                Err(e) => warn!(feed = %self.feed, error = %e, "a live chunk does not parse"),
            }
        }
    }
}
