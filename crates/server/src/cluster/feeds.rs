//! Live feeds across the cluster (`docs/design/live.md`, step 6): a feed published on one node
//! is served by every node, its chunks crossing to each other node once.
//!
//! - **Announced in etcd.** The membership loop puts each feed published here under
//!   `P/feeds/<name>` ([`FeedRecord`]: the node, the object, the tracks its viewers' SDP
//!   describes), attached to the node's lease, and deletes it when the feed ends: a node that
//!   dies takes its feeds' keys with its lease.
//! - **Subscribed by the other nodes.** Every other node, reading a feed it does not have,
//!   lists it as a live presentation (DESCRIBE, SETUP and PLAY work there as on the publisher's
//!   node) and subscribes once: one connection to the publisher's HTTP port,
//!   `GET /api/v1/cluster/feeds/<name>` (members only), whose body is the feed's
//!   `isochron_live::relay` frames for as long as it runs. Each chunk goes to the session
//!   manager as the local recording's chunks do (`SessionCommand::FeedChunk`), so the node's
//!   own edge serves its viewers from one copy.
//! - **The clock.** The `Opened` frame says how long ago the feed's first packet arrived at the
//!   publisher; the subscriber puts the feed's zero that long ago plus [`HOP`] (the chunks'
//!   way between nodes), so its viewers get each packet `VIEWER_DELAY + HOP` after the
//!   publisher sent it.
//! - **The end.** An `Ended` frame, a connection that closes, or nothing for [`SILENT`] (the
//!   publisher's node stopped: it sends `Alive` every second) end the feed here: its viewers get
//!   their RTCP BYE, and the presentation is unlisted.
//!
//! The request is HTTP/1.0, so that the body is the connection's bytes until it closes (no
//! chunked coding to undo); one thread per subscription reads it with a read timeout.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use isochron_base::{BitRate, MediaTime, ObjectId};
use isochron_diskio::AlignedBuf;
use isochron_etcd::Client;
use isochron_live::relay::{FeedFrame, FrameReader};
use isochron_rtsp::sdp::MediaTrack;
use isochron_rtsp::server::Presentation;
use isochron_store::block::Block;
use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::cluster_view::ClusterView;
use crate::library::{Library, RemoteFeed};
use crate::recorder::live::unix_ms_ago;
use crate::sessions::SessionCommand;

use super::{ClusterSettings, Quiet, SharedLease, lock};

/// The delay a feed's chunks get on their way from the publisher's node to another.
pub const HOP: Duration = Duration::from_millis(40);

/// How long a subscription waits for a frame before it takes the publisher's node for gone.
pub const SILENT: Duration = Duration::from_secs(5);

/// A feed as etcd lists it (`P/feeds/<name>`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FeedRecord {
    /// The node it is published on.
    pub node: String,
    /// The object it is recorded as.
    pub object: u64,
    /// Its mean bit rate, bit/s (as admitted).
    pub rate_bps: u64,
    /// Its tracks: kind, payload type, encoding, clock rate, channels, fmtp.
    pub tracks: Vec<(String, u8, String, u32, u8, String)>,
}

impl FeedRecord {
    /// The record of feed `p`, published on `node`.
    #[must_use]
    pub fn of(p: &Presentation, node: &str) -> Self {
        Self {
            node: node.to_owned(),
            object: p.object.0,
            rate_bps: p.avg_bitrate.0,
            tracks: p
                .tracks
                .iter()
                .map(|t| {
                    let fmtp = t.fmtp.clone();
                    (
                        t.kind.clone(),
                        t.payload_type,
                        t.encoding.clone(),
                        t.clock_rate,
                        t.channels,
                        fmtp,
                    )
                })
                .collect(),
        }
    }

    /// The live presentation `name` it describes.
    #[must_use]
    pub fn presentation(&self, name: &str) -> Presentation {
        Presentation {
            object: ObjectId(self.object),
            name: name.to_owned(),
            duration: MediaTime::ZERO,
            avg_bitrate: BitRate(self.rate_bps),
            tracks: self
                .tracks
                .iter()
                .map(|(kind, payload_type, encoding, clock_rate, channels, fmtp)| MediaTrack {
                    kind: kind.clone(),
                    payload_type: *payload_type,
                    encoding: encoding.clone(),
                    clock_rate: *clock_rate,
                    channels: *channels,
                    fmtp: fmtp.clone(),
                })
                .collect(),
            ladder: Vec::new(),
            live: true,
        }
    }

    fn clock_types(&self) -> Vec<(u32, u8)> {
        self.tracks.iter().map(|t| (t.3, t.1)).collect()
    }
}

/// The feeds' side of the membership loop: what this node announced, what it subscribed to.
#[derive(Debug, Default)]
pub struct Feeds {
    /// The records this node put, by name.
    announced: BTreeMap<String, FeedRecord>,
    /// The feeds subscribed to (removed by their thread when it ends).
    subscribed: Arc<Mutex<BTreeSet<String>>>,
    /// The objects of feeds whose end was received: not subscribed to again while their
    /// record lingers in etcd.
    ended: Arc<Mutex<BTreeSet<u64>>>,
}

/// What [`Feeds::sync`] works with.
pub struct FeedsIo<'a> {
    /// etcd.
    pub client: &'a Client,
    /// The node's settings.
    pub settings: &'a ClusterSettings,
    /// Its lease.
    pub lease: &'a SharedLease,
    /// The objects (and the feeds) it serves.
    pub library: &'a Arc<Library>,
    /// Members' addresses, the counters.
    pub view: &'a Arc<ClusterView>,
    /// The session manager.
    pub sessions: &'a mpsc::UnboundedSender<SessionCommand>,
}

impl Feeds {
    /// Puts this node's feeds in etcd and takes away those that ended; subscribes to the other
    /// nodes' feeds it does not serve yet.
    pub fn sync(&mut self, io: &FeedsIo<'_>) {
        let prefix = format!("{}feeds/", io.settings.prefix);
        let lease = lock(io.lease).as_ref().map(isochron_etcd::LeaseKeeper::id);
        let mine: BTreeMap<String, FeedRecord> = io
            .library
            .local_live()
            .iter()
            .map(|p| (p.name.clone(), FeedRecord::of(p, &io.settings.node)))
            .collect();
        for (name, rec) in &mine {
            if self.announced.get(name) == Some(rec) {
                continue;
            }
            let Ok(value) = serde_json::to_vec(rec) else { continue };
            match io.client.put(format!("{prefix}{name}").as_bytes(), &value, lease) {
                Ok(_) => {
                    self.announced.insert(name.clone(), rec.clone());
                }
                Err(e) => warn!(feed = %name, error = %e, "announcing a feed in etcd"),
            }
        }
        let gone: Vec<String> =
            self.announced.keys().filter(|n| !mine.contains_key(*n)).cloned().collect();
        for name in gone {
            if io.client.delete(format!("{prefix}{name}").as_bytes()).is_ok() {
                self.announced.remove(&name);
            }
        }
        let Ok(listed) = io.client.get_prefix(prefix.as_bytes()) else { return };
        for kv in &listed.kvs {
            let Some(name) =
                std::str::from_utf8(&kv.key).ok().and_then(|k| k.strip_prefix(&prefix))
            else {
                continue;
            };
            let Ok(rec) = serde_json::from_slice::<FeedRecord>(&kv.value) else { continue };
            if rec.node == io.settings.node
                || mine.contains_key(name)
                || lock(&self.ended).contains(&rec.object)
            {
                continue;
            }
            let Some(http) = lock(&io.view.live).get(&rec.node).and_then(|r| r.http) else {
                continue;
            };
            if !lock(&self.subscribed).insert(name.to_owned()) {
                continue;
            }
            let sub = Subscription {
                name: name.to_owned(),
                record: rec,
                from: http,
                library: Arc::clone(io.library),
                view: Arc::clone(io.view),
                sessions: io.sessions.clone(),
                subscribed: Arc::clone(&self.subscribed),
                ended: Arc::clone(&self.ended),
            };
            let spawned = std::thread::Builder::new()
                .name("isochron-feed-in".into())
                .spawn(move || sub.run());
            if let Err(e) = spawned {
                warn!(feed = %name, error = %e, "subscribing to a feed: no thread");
                lock(&self.subscribed).remove(name);
            }
        }
    }
}

/// One node's subscription to a feed published on another.
struct Subscription {
    name: String,
    record: FeedRecord,
    /// The publisher's node's HTTP address.
    from: SocketAddr,
    library: Arc<Library>,
    view: Arc<ClusterView>,
    sessions: mpsc::UnboundedSender<SessionCommand>,
    subscribed: Arc<Mutex<BTreeSet<String>>>,
    ended: Arc<Mutex<BTreeSet<u64>>>,
}

impl Subscription {
    fn run(self) {
        // Retried every second while the publisher's node is down: one warning a run.
        static QUIET: std::sync::LazyLock<Quiet> = std::sync::LazyLock::new(Quiet::default);
        let what = format!("{}@{}", self.name, self.record.node);
        let feed = ObjectId(self.record.object);
        match self.connect() {
            Ok((conn, reader)) => {
                QUIET.clear(&what);
                let p = self.record.presentation(&self.name);
                let known = self.library.insert_remote_live(p, &self.record.node);
                let tracks = self.record.clock_types();
                let _ = self.sessions.send(SessionCommand::FeedAnnounced { feed, tracks });
                info!(feed = %self.name, node = %self.record.node, "serving a feed published on another node");
                match self.receive(feed, conn, reader, &known) {
                    Ok(()) => {
                        info!(feed = %self.name, "the feed from another node ended");
                        lock(&self.ended).insert(self.record.object);
                    }
                    Err(e) => {
                        warn!(feed = %self.name, node = %self.record.node, error = %e, "the feed from another node was cut: it ends here");
                    }
                }
                self.library.remove_remote_live(&self.name);
                let _ = self.sessions.send(SessionCommand::FeedEnded { feed });
            }
            Err(e) => {
                if let Some(left_out) = QUIET.admit(&what) {
                    warn!(feed = %self.name, node = %self.record.node, error = %e, left_out, "subscribing to a feed on another node");
                }
            }
        }
        lock(&self.subscribed).remove(&self.name);
    }

    /// Asks the publisher's node for the feed: the connection, and a reader holding what came
    /// after the response's head.
    fn connect(&self) -> anyhow::Result<(TcpStream, FrameReader)> {
        use anyhow::Context as _;
        let mut conn = TcpStream::connect_timeout(&self.from, Duration::from_secs(2))
            .with_context(|| format!("connecting to {}", self.from))?;
        conn.set_read_timeout(Some(SILENT))?;
        conn.set_nodelay(true)?;
        let path = format!("/api/v1/cluster/feeds/{}", self.name);
        write!(conn, "GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.from)?;
        let mut head = Vec::new();
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = conn.read(&mut buf).context("reading the response")?;
            anyhow::ensure!(n > 0, "the connection closed before the response");
            head.extend_from_slice(&buf[..n]);
            if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                let status = String::from_utf8_lossy(&head[..end]);
                let line = status.lines().next().unwrap_or_default().to_owned();
                anyhow::ensure!(line.split(' ').nth(1) == Some("200"), "{path}: {line}");
                let mut reader = FrameReader::default();
                reader.feed(&head[end + 4..]);
                return Ok((conn, reader));
            }
            anyhow::ensure!(head.len() < 16 * 1024, "{path}: no end to the response's head");
        }
    }

    /// Reads the feed's frames until it ends (`Ok`) or the connection fails.
    fn receive(
        &self,
        feed: ObjectId,
        mut conn: TcpStream,
        mut reader: FrameReader,
        known: &RemoteFeed,
    ) -> anyhow::Result<()> {
        use anyhow::Context as _;
        let mut buf = vec![0u8; 64 * 1024];
        let tracks = self.record.clock_types();
        loop {
            while let Some(frame) = reader.next_frame()? {
                match frame {
                    FeedFrame::Opened { elapsed } => {
                        let zero = tokio::time::Instant::now()
                            .checked_sub(elapsed)
                            .unwrap_or_else(tokio::time::Instant::now)
                            + HOP;
                        // The same instant on the wall clock, for the API and HLS's dates.
                        known.zero_unix_ms.store(unix_ms_ago(elapsed), Ordering::Relaxed);
                        let tracks = tracks.clone();
                        let _ =
                            self.sessions.send(SessionCommand::FeedOpened { feed, zero, tracks });
                    }
                    FeedFrame::Chunk { info, bytes } => {
                        let block = Block::parse(AlignedBuf::copy_from(&bytes), None)
                            .map_err(|e| anyhow::anyhow!("chunk {}: {e}", info.index))?;
                        let block = Arc::new(block);
                        let _ = self.sessions.send(SessionCommand::FeedChunk { feed, info, block });
                    }
                    FeedFrame::Alive => {}
                    FeedFrame::Ended => return Ok(()),
                }
            }
            let n = match conn.read(&mut buf) {
                Ok(n) => n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) =>
                {
                    anyhow::bail!("nothing from {} for {} s", self.from, SILENT.as_secs())
                }
                Err(e) => return Err(e).context("reading the feed"),
            };
            anyhow::ensure!(n > 0, "the connection closed before the feed's end");
            self.view.feed_bytes_in.fetch_add(n as u64, Ordering::Relaxed);
            known.bytes.fetch_add(n as u64, Ordering::Relaxed);
            reader.feed(&buf[..n]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_record_describes_the_presentation_it_was_made_from() {
        let p = Presentation {
            object: ObjectId(42),
            name: "cam".into(),
            duration: MediaTime::ZERO,
            avg_bitrate: BitRate(2_000_000),
            tracks: vec![MediaTrack {
                kind: "video".into(),
                payload_type: 96,
                encoding: "H264".into(),
                clock_rate: 90_000,
                channels: 0,
                fmtp: "packetization-mode=1".into(),
            }],
            ladder: Vec::new(),
            live: true,
        };
        let rec = FeedRecord::of(&p, "n1");
        let json = serde_json::to_vec(&rec).unwrap();
        let back: FeedRecord = serde_json::from_slice(&json).unwrap();
        assert_eq!(back.presentation("cam"), p);
        assert_eq!(back.clock_types(), vec![(90_000, 96)]);
    }
}
