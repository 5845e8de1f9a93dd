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
//! The feed ends when the channel closes (TEARDOWN, or the connection gone) or after
//! [`IDLE_TIMEOUT`] without a packet: then the object is committed with what arrived. Nothing
//! is playable before that (the growing object is a later step, `docs/design/live.md`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use isochron_base::MediaTime;
use isochron_diskio::ingest::{BlockPacker, PackedObject};
use isochron_media::live::{LiveIngest, LiveStats};
use isochron_media::native::NativeTrack;
use isochron_store::catalog::ObjectRecord;
use serde::Serialize;
use tokio::sync::{mpsc, oneshot};
use tracing::{info, warn};

use super::{IDLE_TIMEOUT, Next, RecordError, RecordParams, Recorders, TokenBucket, Writer};

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
    /// How its packets come: `tcp` (interleaved), `udp`, or `tcp+udp`.
    pub transport: String,
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
    /// When the feed was admitted, Unix seconds.
    pub started_unix_s: u64,
}

/// A feed in progress: what it is and its counters, updated by its recording task.
#[derive(Debug)]
pub(super) struct LiveProgress {
    status: LiveStatus,
    packets: AtomicU64,
    bytes: AtomicU64,
    media_ns: AtomicU64,
    blocks: AtomicU64,
}

impl LiveProgress {
    fn new(feed: &LiveFeed) -> Self {
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
                started_unix_s,
            },
            packets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            media_ns: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
        }
    }

    /// The status now.
    pub(super) fn status(&self) -> LiveStatus {
        let mut s = self.status.clone();
        s.packets = self.packets.load(Ordering::Relaxed);
        s.bytes = self.bytes.load(Ordering::Relaxed);
        s.blocks = self.blocks.load(Ordering::Relaxed);
        let ns = self.media_ns.load(Ordering::Relaxed);
        s.recorded_s = ns as f64 / 1e9;
        let rate = (u128::from(s.bytes) * 8_000_000_000).checked_div(u128::from(ns));
        s.bit_rate_bps = rate.map_or(0, |r| u64::try_from(r).unwrap_or(u64::MAX));
        s
    }
}

/// A feed listed in [`Recorders::live_feeds`] while its recording runs; unlisted on drop.
struct Listed<'a> {
    recorders: &'a Recorders,
    name: String,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.recorders.live_list().remove(&self.name);
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
    /// The feeds being recorded, by name.
    #[must_use]
    pub fn live_feeds(&self) -> Vec<LiveStatus> {
        let mut v: Vec<LiveStatus> = self.live_list().values().map(|p| p.status()).collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
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
        let progress = Arc::new(LiveProgress::new(&feed));
        self.live_list().insert(feed.name.clone(), Arc::clone(&progress));
        let _listed = Listed { recorders: &self, name: feed.name.clone() };
        let _ = admitted.send(());
        let received = self.receive_live(&mut open.writer, &feed, packets, &progress).await;
        let object = open.writer.object;
        let record = received.map(|packed| {
            object.record_native(&feed.name, &feed.source, packed, None, &feed.tracks)
        });
        self.close(open, record).await
    }

    /// Takes the feed's packets until it ends and hands their blocks to `w`, up to the last one
    /// written.
    async fn receive_live(
        &self,
        w: &mut Writer,
        feed: &LiveFeed,
        mut packets: mpsc::Receiver<FeedPacket>,
        progress: &LiveProgress,
    ) -> Result<PackedObject, RecordError> {
        let mut ingest = LiveIngest::new(feed.tracks.clone(), feed.payload_types.clone());
        let mut packer = BlockPacker::new_native(&w.object, feed.tracks.len());
        // Blocks come no faster than the admitted peak (with one block of burst).
        let mut bucket =
            TokenBucket::new(feed.params.peak, w.object.block_size, tokio::time::Instant::now());
        let mut zero = None;
        loop {
            let next = tokio::select! {
                biased;
                ev = w.events.recv() => Next::Event(ev),
                p = tokio::time::timeout(IDLE_TIMEOUT, packets.recv()) => Next::Chunk(p),
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
                Next::Chunk(Ok(None)) => break,
                Next::Chunk(Ok(Some(p))) => p,
            };
            let zero = *zero.get_or_insert(p.at);
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
                if let Some(b) = packer.push_native(&u).map_err(super::store_error)? {
                    w.submit(b).await?;
                    progress.blocks.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        ingest.finish();
        while let Some(u) = ingest.poll_unit() {
            if let Some(b) = packer.push_native(&u).map_err(super::store_error)? {
                w.submit(b).await?;
            }
        }
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
