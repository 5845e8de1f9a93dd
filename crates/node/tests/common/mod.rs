//! What the node core's tests share: an MPEG-TS object of one-second blocks behind a
//! [`Catalog`], a player's connection, and RTSP requests.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use isochron_base::{BitRate, DiskId, Gsn, MediaTime, ObjectId, Replicas};
use isochron_node::{Catalog, ObjectEntry};
use isochron_rtsp::rtsp_types::{HeaderName, Method, Request, Response, Url, Version};
use isochron_rtsp::sdp::MediaTrack;
use isochron_rtsp::server::{ConnId, ConnInfo, Presentation};
use isochron_store::Epoch;
use isochron_store::catalog::{BlockEntry, ObjectRecord, SeekPoint};

pub(crate) const SECOND: u64 = 1_000_000_000;
/// Packets per block (one second each).
pub(crate) const PER_BLOCK: u64 = 100;

/// One MPEG-TS object, `clip` (id 7): `blocks` one-second blocks of 100 packets, a seek point
/// at each block's start, block `i`'s copies from `copies(i)`; each disk's owner; whether etcd
/// answers.
pub(crate) struct Clip {
    /// `clip` (id 7): replaced by a longer one as a live recording grows ([`Clip::grow`]).
    entry: std::sync::RwLock<Arc<ObjectEntry>>,
    /// A second rendition of it, `clip~low` (id 8, 50 packets a block), when `clip` is played
    /// from a ladder.
    low: Option<Arc<ObjectEntry>>,
    owners: BTreeMap<DiskId, String>,
    pub etcd: Arc<AtomicBool>,
    /// `clip` is a feed being published (its presentation says so: `npt=now-` is its edge).
    pub live: AtomicBool,
}

impl Clip {
    pub(crate) fn new(blocks: u64, copies: impl Fn(u64) -> Replicas) -> Self {
        let rec = record(ObjectId(7), "clip", blocks, PER_BLOCK);
        let entry = ObjectEntry::planned_with(rec, Epoch(0), |_, i| copies(u64::from(i.0)));
        Self {
            entry: std::sync::RwLock::new(Arc::new(entry)),
            low: None,
            owners: BTreeMap::new(),
            etcd: Arc::new(AtomicBool::new(true)),
            live: AtomicBool::new(false),
        }
    }

    /// The same object with a second rendition, `clip~low` (id 8, half the packets, on disk
    /// 0): `clip` is then played from the ladder of the two.
    pub(crate) fn with_ladder(mut self) -> Self {
        let blocks = self.entry().record.blocks.len() as u64;
        let mut rec = record(ObjectId(8), "clip~low", blocks, PER_BLOCK / 2);
        rec.avg_bitrate = BitRate(500_000);
        let entry = ObjectEntry::planned_with(rec, Epoch(0), |_, _| Replicas::single(DiskId(0)));
        self.low = Some(Arc::new(entry));
        self
    }

    /// `clip` as its catalog has it now.
    pub(crate) fn entry(&self) -> Arc<ObjectEntry> {
        Arc::clone(&self.entry.read().unwrap())
    }

    /// `clip` committed further, as a live feed's recording is: `blocks` blocks on disk 0.
    pub(crate) fn grow(&self, blocks: u64) {
        let rec = record(ObjectId(7), "clip", blocks, PER_BLOCK);
        let entry = ObjectEntry::planned_with(rec, Epoch(0), |_, _| Replicas::single(DiskId(0)));
        *self.entry.write().unwrap() = Arc::new(entry);
    }

    /// The same object in a cluster: each disk's owner, and one etcd for every node.
    pub(crate) fn in_cluster(
        mut self,
        owners: BTreeMap<DiskId, String>,
        etcd: Arc<AtomicBool>,
    ) -> Self {
        self.owners = owners;
        self.etcd = etcd;
        self
    }
}

/// An MPEG-TS object `name` (id `id`) of `blocks` one-second blocks of `per_block` packets,
/// a seek point at each block's start.
fn record(id: ObjectId, name: &str, blocks: u64, per_block: u64) -> ObjectRecord {
    let mut rec = isochron_store::testing::object_record(id, name);
    rec.blocks = (0..blocks)
        .map(|i| BlockEntry {
            first_gsn: Gsn(i * per_block),
            first_send_time: MediaTime::from_nanos(i * SECOND),
            packets: per_block as u32,
            payload_bytes: per_block as u32 * 1316,
            encoded_len: 64 + per_block as u32 * (16 + 1316),
            checksum: 1,
        })
        .collect();
    rec.packets = blocks * per_block;
    rec.duration = MediaTime::from_nanos(blocks * SECOND);
    rec.avg_bitrate = BitRate(1_000_000);
    rec.seek_points = (0..blocks)
        .map(|i| SeekPoint { time: MediaTime::from_nanos(i * SECOND), gsn: Gsn(i * per_block) })
        .collect();
    rec
}

impl isochron_rtsp::server::Library for Clip {
    fn lookup(&self, name: &str) -> Option<Presentation> {
        let entries = std::iter::once(self.entry()).chain(self.low.clone());
        let e = entries.clone().find(|e| e.record.name == name)?;
        let r = &e.record;
        let ladder = match &self.low {
            Some(_) if name == "clip" => entries.map(|e| e.record.id).collect(),
            _ => Vec::new(),
        };
        Some(Presentation {
            object: r.id,
            name: r.name.clone(),
            duration: r.duration,
            avg_bitrate: r.avg_bitrate,
            tracks: Vec::<MediaTrack>::new(),
            ladder,
            live: name == "clip" && self.live.load(Ordering::Relaxed),
        })
    }
}

impl Catalog for Clip {
    fn by_id(&self, id: ObjectId) -> Option<Arc<ObjectEntry>> {
        std::iter::once(self.entry()).chain(self.low.clone()).find(|e| e.record.id == id)
    }
    fn shared_entry(&self, _: ObjectId) -> Option<Arc<ObjectEntry>> {
        None
    }
    fn at_epoch(&self, entry: Arc<ObjectEntry>, _: Epoch) -> Arc<ObjectEntry> {
        entry
    }
    fn disk_owners(&self) -> BTreeMap<DiskId, String> {
        self.owners.clone()
    }
    fn membership_confirmed(&self) -> bool {
        self.etcd.load(Ordering::Relaxed)
    }
}

/// The player's connection 1, from 10.0.0.9 to the node at `node_ip`.
pub(crate) fn conn(node_ip: Ipv4Addr) -> ConnInfo {
    ConnInfo {
        id: ConnId(1),
        peer: SocketAddr::new(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 9)), 40_001),
        local: SocketAddr::new(IpAddr::V4(node_ip), 8554),
        secure: false,
        user: None,
    }
}

/// A request with `CSeq: cseq`, the session if there is one, and `headers`.
pub(crate) fn request(
    method: Method,
    uri: &str,
    cseq: u32,
    session: Option<&str>,
    headers: &[(&str, &str)],
) -> Request<Vec<u8>> {
    let mut b = Request::builder(method, Version::V1_0)
        .request_uri(Url::parse(uri).unwrap())
        .header(HeaderName::try_from("CSeq").unwrap(), cseq.to_string());
    if let Some(s) = session {
        b = b.header(HeaderName::try_from("Session").unwrap(), s.to_owned());
    }
    for (n, v) in headers {
        b = b.header(HeaderName::try_from(*n).unwrap(), *v);
    }
    b.build(Vec::new())
}

/// The session id a SETUP's response gives (without its timeout).
pub(crate) fn session_of(r: &Response<Vec<u8>>) -> Option<String> {
    let v = r.header(&HeaderName::try_from("Session").unwrap())?;
    Some(v.as_str().split(';').next()?.to_owned())
}
