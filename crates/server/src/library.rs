//! The objects the server can play, as the session manager and the scheduler need them.
//!
//! Built from the catalog at start and updated when the server ingests a file. Each entry pairs
//! the catalog record (duration, seek points, rates) with the object's [`ObjectPlan`](isochron_sched::ObjectPlan): every
//! block's disk (from placement), first GSN, first send time and size, computed once and shared
//! by every stream of the object.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, PoisonError, RwLock};

use isochron_base::ObjectId;
use isochron_diskio::Store;
use isochron_rtsp::sdp::MediaTrack;
use isochron_rtsp::server::Presentation;
use isochron_store::Epoch;
use isochron_store::catalog::{
    ObjectRecord, RENDITION_SEP, is_rendition_of, split_rendition, title_of,
};

pub use isochron_node::ObjectEntry;

/// The entry for `record`, placing its blocks with `store`'s active placement.
#[must_use]
pub fn entry(store: &Store, record: ObjectRecord) -> ObjectEntry {
    let epoch = store.active_epoch();
    entry_at(store, record, epoch)
}

/// The entry for `record`, placing its blocks as of placement epoch `epoch`.
#[must_use]
pub fn entry_at(store: &Store, record: ObjectRecord, epoch: Epoch) -> ObjectEntry {
    ObjectEntry::planned_with(record, epoch, |rec, i| store.replicas_at(rec, i, epoch))
}

/// An object as the HTTP API shows it (`GET /api/v1/objects`, a recording's `201 Created`).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ObjectSummary {
    /// Its name.
    pub name: String,
    /// Its id.
    pub id: u64,
    /// Duration, from its PCRs.
    pub duration_s: f64,
    /// Bytes stored (whole TS packets).
    pub bytes: u64,
    /// Number of blocks.
    pub blocks: usize,
    /// Payload units (RTP packets when played).
    pub packets: u64,
    /// Mean bit rate.
    pub avg_bitrate_bps: u64,
    /// Peak bit rate.
    pub peak_bitrate_bps: u64,
    /// Its elementary streams, `kind codec`.
    pub streams: Vec<String>,
    /// The title it belongs to: its own name, or a rendition's `TITLE` (in `TITLE~RUNG`).
    pub title: String,
    /// A rendition's rung (`720p`), `None` for a title.
    pub rendition: Option<String>,
}

impl From<&ObjectRecord> for ObjectSummary {
    fn from(r: &ObjectRecord) -> Self {
        Self {
            name: r.name.clone(),
            id: r.id.0,
            duration_s: r.duration.as_secs_f64(),
            bytes: r.ts_bytes.0,
            blocks: r.blocks.len(),
            packets: r.packets,
            avg_bitrate_bps: r.avg_bitrate.0,
            peak_bitrate_bps: r.peak_bitrate.0,
            streams: r.streams.iter().map(|d| format!("{} {}", d.kind, d.codec)).collect(),
            title: title_of(&r.name).to_owned(),
            rendition: split_rendition(&r.name).map(|(_, rung)| rung.to_owned()),
        }
    }
}

/// The set of playable objects, read by many, written by the ingest path.
#[derive(Debug, Default)]
pub struct Library {
    by_name: RwLock<HashMap<String, Arc<ObjectEntry>>>,
    /// Told of every entry inserted from the moment it is set ([`Library::on_insert`]).
    inserted: std::sync::OnceLock<InsertHook>,
    /// The feeds being published, by name: played from their live edge until they end
    /// (`docs/design/live.md`), with the node each is published on (`None`: this one).
    live: RwLock<HashMap<String, (Presentation, Option<String>)>>,
    /// What this node knows of the feeds published on other nodes, by name.
    remote: RwLock<HashMap<String, Arc<RemoteFeed>>>,
}

/// What [`Library::insert`] tells of each entry.
struct InsertHook(Box<Tell>);

/// The function [`Library::on_insert`] sets.
type Tell = dyn Fn(&Arc<ObjectEntry>) + Send + Sync;

impl std::fmt::Debug for InsertHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InsertHook")
    }
}

/// A feed published on another node of the cluster and served here too
/// (`crate::cluster::feeds`): what `/api/v1/live` and the HLS playlist of the node say of it.
#[derive(Debug, Default)]
pub struct RemoteFeed {
    /// The node it is published on.
    pub node: String,
    /// The wall-clock time of its timeline zero (its first packet's arrival at the publisher's
    /// node), Unix milliseconds; 0 until the publisher's node said when that was.
    pub zero_unix_ms: AtomicU64,
    /// Bytes of it received from the publisher's node (its chunks as relayed).
    pub bytes: AtomicU64,
}

impl Library {
    /// The library of every object in `store`.
    pub fn load(store: &Store) -> Result<Self, isochron_store::catalog::CatalogError> {
        let lib = Self::default();
        for rec in store.catalog().objects()? {
            lib.insert(Arc::new(entry(store, rec)));
        }
        Ok(lib)
    }

    /// Lists feed `p` (a live presentation) under its name while it is published here.
    pub fn insert_live(&self, p: Presentation) {
        self.live.write().unwrap_or_else(PoisonError::into_inner).insert(p.name.clone(), (p, None));
    }

    /// Unlists feed `name`, published here: it ended.
    pub fn remove_live(&self, name: &str) {
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        if live.get(name).is_some_and(|(_, node)| node.is_none()) {
            live.remove(name);
        }
    }

    /// Lists feed `p`, published on node `node` and served here too
    /// (`crate::cluster::feeds`); a feed of the same name published here stays. Returns what
    /// the subscription keeps up to date about it.
    pub fn insert_remote_live(&self, p: Presentation, node: &str) -> Arc<RemoteFeed> {
        let feed = Arc::new(RemoteFeed { node: node.to_owned(), ..RemoteFeed::default() });
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        if !live.get(&p.name).is_some_and(|(_, node)| node.is_none()) {
            let mut remote = self.remote.write().unwrap_or_else(PoisonError::into_inner);
            remote.insert(p.name.clone(), Arc::clone(&feed));
            live.insert(p.name.clone(), (p, Some(node.to_owned())));
        }
        feed
    }

    /// Unlists feed `name`, published on another node: it ended there (or its node is gone).
    pub fn remove_remote_live(&self, name: &str) {
        let mut live = self.live.write().unwrap_or_else(PoisonError::into_inner);
        if live.get(name).is_some_and(|(_, node)| node.is_some()) {
            live.remove(name);
            self.remote.write().unwrap_or_else(PoisonError::into_inner).remove(name);
        }
    }

    /// What is known of feed `name`, if it is published on another node and served here.
    #[must_use]
    pub fn remote_feed(&self, name: &str) -> Option<Arc<RemoteFeed>> {
        self.remote.read().unwrap_or_else(PoisonError::into_inner).get(name).cloned()
    }

    /// The feeds published on other nodes and served here: each one's presentation and what
    /// is known of it.
    #[must_use]
    pub fn remote_live(&self) -> Vec<(Presentation, Arc<RemoteFeed>)> {
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        let remote = self.remote.read().unwrap_or_else(PoisonError::into_inner);
        let mut v: Vec<(Presentation, Arc<RemoteFeed>)> = remote
            .iter()
            .filter_map(|(name, f)| Some((live.get(name)?.0.clone(), Arc::clone(f))))
            .collect();
        v.sort_by(|a, b| a.0.name.cmp(&b.0.name));
        v
    }

    /// The names of the feeds in progress, published here or on another node: each is an
    /// object growing as its recording commits.
    #[must_use]
    pub fn live_names(&self) -> BTreeSet<String> {
        self.live.read().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect()
    }

    /// The feeds published on this node.
    #[must_use]
    pub fn local_live(&self) -> Vec<Presentation> {
        let live = self.live.read().unwrap_or_else(PoisonError::into_inner);
        live.values().filter(|(_, node)| node.is_none()).map(|(p, _)| p.clone()).collect()
    }

    /// Adds or replaces an entry.
    pub fn insert(&self, entry: Arc<ObjectEntry>) {
        if let Some(InsertHook(tell)) = self.inserted.get() {
            tell(&entry);
        }
        self.write().insert(entry.record.name.clone(), entry);
    }

    /// Calls `tell` with every entry in the library now and with each inserted from now on
    /// (the scheduler keeps their first blocks in memory: `SchedCommand::KeepResident`). Set
    /// once; a second call changes nothing.
    pub fn on_insert(&self, tell: impl Fn(&Arc<ObjectEntry>) + Send + Sync + 'static) {
        if self.inserted.set(InsertHook(Box::new(tell))).is_ok()
            && let Some(InsertHook(tell)) = self.inserted.get()
        {
            for entry in self.list() {
                tell(&entry);
            }
        }
    }

    /// Removes an entry.
    pub fn remove(&self, name: &str) -> Option<Arc<ObjectEntry>> {
        self.write().remove(name)
    }

    /// The entry named `name`.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<ObjectEntry>> {
        self.read().get(name).cloned()
    }

    /// The entry of object `id`.
    #[must_use]
    pub fn by_id(&self, id: ObjectId) -> Option<Arc<ObjectEntry>> {
        self.read().values().find(|e| e.record.id == id).cloned()
    }

    /// Every entry, sorted by name.
    #[must_use]
    pub fn list(&self) -> Vec<Arc<ObjectEntry>> {
        let mut v: Vec<_> = self.read().values().cloned().collect();
        v.sort_by(|a, b| a.record.name.cmp(&b.record.name));
        v
    }

    /// The renditions of `title` (the objects named `TITLE~RUNG`), highest mean rate first.
    #[must_use]
    pub fn renditions(&self, title: &str) -> Vec<Arc<ObjectEntry>> {
        let mut v: Vec<_> = self
            .read()
            .values()
            .filter(|e| is_rendition_of(&e.record.name, title))
            .cloned()
            .collect();
        v.sort_by_key(|e| std::cmp::Reverse(e.record.avg_bitrate.0));
        v
    }

    /// Whether an object named `name` exists.
    #[must_use]
    pub fn contains(&self, name: &str) -> bool {
        self.read().contains_key(name)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<ObjectEntry>>> {
        // A writer that panicked left the map itself intact (inserts and removes are atomic).
        self.by_name.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Arc<ObjectEntry>>> {
        self.by_name.write().unwrap_or_else(PoisonError::into_inner)
    }
}

impl isochron_rtsp::server::Library for Library {
    /// `TITLE~RUNG` is that rendition and `TITLE~source` the title's own file, each played as
    /// it is; a title with renditions is its ladder (the renditions whose tracks match the
    /// highest's), played from the highest and switched between; any other name is itself.
    fn lookup(&self, name: &str) -> Option<Presentation> {
        if let Some((p, _)) = self.live.read().unwrap_or_else(PoisonError::into_inner).get(name) {
            return Some(p.clone());
        }
        if let Some((title, SOURCE_RUNG)) = split_rendition(name) {
            return self.get(title).map(|e| presentation(&e, Vec::new()));
        }
        let e = self.get(name)?;
        if name.contains(RENDITION_SEP) {
            return Some(presentation(&e, Vec::new()));
        }
        let renditions = self.renditions(name);
        let Some(top) = renditions.first() else { return Some(presentation(&e, Vec::new())) };
        let shape = track_shape(top);
        let ladder: Vec<ObjectId> =
            renditions.iter().filter(|r| track_shape(r) == shape).map(|r| r.record.id).collect();
        let mut p = presentation(top, ladder);
        p.name = name.to_owned();
        Some(p)
    }
}

/// The rung name `?rendition=` and `TITLE~source` give the file a title was made from.
pub const SOURCE_RUNG: &str = "source";

/// A presentation of `e` as it is, with `ladder` (see [`Presentation::ladder`]).
fn presentation(e: &ObjectEntry, ladder: Vec<ObjectId>) -> Presentation {
    let tracks = e.record.media.iter().flat_map(|m| &m.tracks);
    Presentation {
        object: e.record.id,
        name: e.record.name.clone(),
        duration: e.record.duration,
        avg_bitrate: e.record.avg_bitrate,
        tracks: tracks
            .map(|t| MediaTrack {
                kind: t.kind.clone(),
                payload_type: t.payload_type,
                encoding: t.encoding.clone(),
                clock_rate: t.clock_rate,
                channels: t.channels,
                fmtp: t.fmtp.clone(),
            })
            .collect(),
        ladder,
        live: false,
    }
}

/// What must match for a session to switch between two renditions: each track's kind,
/// payload type, encoding, clock rate and channels (the SDP a player set up once).
fn track_shape(e: &ObjectEntry) -> Vec<(&str, u8, &str, u32, u8)> {
    let tracks = e.record.media.iter().flat_map(|m| &m.tracks);
    tracks
        .map(|t| (t.kind.as_str(), t.payload_type, t.encoding.as_str(), t.clock_rate, t.channels))
        .collect()
}
