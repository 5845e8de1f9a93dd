//! A node's IO for the cluster (Yima §2): etcd membership, the control connections, the relay
//! port, and block writes to other nodes. The decisions are [`isochron_cluster::ClusterCore`]'s,
//! owned by the session manager; this module only moves bytes and facts.
//!
//! - **Membership** (`docs/design/etcd.md`): every node keeps `P/nodes/<name>` (its record: id
//!   and addresses) and `P/live/<name>` (the same, attached to its lease, put only if nobody
//!   holds it). A node whose lease lapses disappears from `P/live/`. A watch on `P/` wakes the
//!   [`Poller`] at every change (and it reads at least once a second regardless): it tells the
//!   session manager who is up ([`SessionCommand::Member`]), and re-reads the shared store
//!   metadata and the catalog so the library follows other nodes' ingests, joins and removals.
//! - **Control connections**: one TCP connection from each node to each peer carries its
//!   messages (`isochron_cluster::wire` frames, a `Hello` first); inbound connections are read
//!   into [`SessionCommand::Peer`]. Bytes both ways are counted ([`ClusterView`]) and reported
//!   against the media bytes in `/metrics`.
//! - **Relay** (`docs/design/cluster.md`): a UDP socket on the control port takes the RTP packets
//!   other nodes send for a relayed session and hands them to the sender thread, which sends them
//!   on to the client from this node's address.
//! - **Block writes**: an ingest through any node writes each block on its owner's disk with an
//!   HTTP `PUT` to the owner ([`HttpBlocks`]), accepted only from cluster members.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use isochron_base::{BlockKey, DiskId, NodeId};
use isochron_cluster::wire::{FrameReader, encode_frame};
use isochron_cluster::{MemberInfo, Message};
use isochron_dataplane::sender::SenderCommand;
use isochron_diskio::Store;
use isochron_diskio::store::RemoteBlocks;
use isochron_etcd::Client;
use isochron_store::catalog::DiskState;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

pub use crate::cluster_view::{ClusterView, NodeRecord};
use crate::library::{Library, ObjectEntry};
use crate::reorg::ReorgCommand;
use crate::sessions::SessionCommand;

/// Cluster settings (`[cluster]`, `serve --etcd … --node …`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterSettings {
    /// etcd endpoints (`http://host:2379`).
    pub etcd: Vec<String>,
    /// This node's name (unique among live nodes).
    pub node: String,
    /// The address other nodes and clients reach this node at.
    pub advertise: IpAddr,
    /// TCP port of the control connections; the same UDP port takes relayed RTP.
    pub control_port: u16,
    /// Key prefix of the cluster in etcd.
    pub prefix: String,
    /// TTL of the node's lease: a dead node is noticed within it.
    pub lease_ttl: Duration,
    /// How long a node's lease must have lapsed before it counts as dead and its copies are
    /// re-created from the other replicas (`cluster.dead_after_s`).
    pub dead_after: Duration,
}

/// A node's id: a stable function of its name (FNV-1a, 16 bits), checked against collisions
/// when it registers.
#[must_use]
pub fn node_id(name: &str) -> NodeId {
    let mut h: u32 = 0x811c_9dc5;
    for b in name.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    NodeId(((h >> 16) ^ (h & 0xffff)) as u16)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Connects to etcd, naming every endpoint when none answers.
pub fn connect(settings: &ClusterSettings) -> anyhow::Result<Client> {
    let client =
        Client::connect(&settings.etcd, isochron_etcd::Timeouts::default()).with_context(|| {
            format!("etcd at {} (config key cluster.etcd)", settings.etcd.join(","))
        })?;
    client.get(b"health-probe").with_context(|| {
        format!("etcd at {} is unreachable (config key cluster.etcd)", settings.etcd.join(","))
    })?;
    Ok(client)
}

/// Refuses to start a node whose name is already live (another process holds its lease).
pub fn check_not_live(client: &Client, settings: &ClusterSettings) -> anyhow::Result<()> {
    let key = isochron_etcd::membership::live_key(&settings.prefix, &settings.node);
    if let Some(kv) = client.get(key.as_bytes())? {
        let holder = serde_json::from_slice::<NodeRecord>(&kv.value)
            .map_or_else(|_| "unknown address".to_owned(), |r| r.control.to_string());
        anyhow::bail!(
            "node {} is already live in the cluster (at {holder}); pick another --node name \
             or stop that node",
            settings.node
        );
    }
    Ok(())
}

/// Registers this node: its record, and its live key under a lease kept alive on a thread.
pub fn register(
    client: &Client,
    settings: &ClusterSettings,
    record: &NodeRecord,
) -> anyhow::Result<isochron_etcd::LeaseKeeper> {
    let nodes = isochron_etcd::membership::nodes_prefix(&settings.prefix);
    let others = client.get_prefix(nodes.as_bytes())?;
    for kv in &others.kvs {
        if let Ok(r) = serde_json::from_slice::<NodeRecord>(&kv.value)
            && r.id == record.id
            && r.name != record.name
        {
            anyhow::bail!(
                "node name {} has the same id ({}) as node {}: pick another --node name",
                record.name,
                record.id,
                r.name
            );
        }
    }
    let value = serde_json::to_vec(record)?;
    let keeper = isochron_etcd::LeaseKeeper::start(client, settings.lease_ttl)
        .context("taking a lease in etcd")?;
    isochron_etcd::membership::register_live(
        client,
        &settings.prefix,
        &settings.node,
        &value,
        keeper.id(),
    )
    .map_err(|e| anyhow::anyhow!("registering node {}: {e}", settings.node))?;
    client.put(format!("{nodes}{}", settings.node).as_bytes(), &value, None)?;
    info!(node = %settings.node, id = record.id, control = %record.control, "registered in etcd");
    Ok(keeper)
}

/// How long the membership loop lets a burst of etcd changes settle before it reads them.
const WATCH_SETTLE: Duration = Duration::from_millis(20);

/// The node's lease, shared by the server (which revokes it at shutdown) and the membership
/// poll (which takes a new one when it lapsed).
pub type SharedLease = Arc<Mutex<Option<isochron_etcd::LeaseKeeper>>>;

/// The membership loop: reads live members, the store's metadata and the catalog from etcd
/// whenever a watch on the cluster's prefix reports a change, and at least every `every` (which
/// also tells whether etcd answers); tells the session manager who is up, keeps the library in
/// step, and starts the reorganisation this node coordinates (a join or a removal of its disks).
pub struct Poller {
    /// The etcd client.
    pub client: Client,
    /// The node's settings.
    pub settings: ClusterSettings,
    /// What it registered.
    pub record: NodeRecord,
    /// Its lease.
    pub lease: SharedLease,
    /// Shared with the HTTP API.
    pub view: Arc<ClusterView>,
    /// The store (its metadata is refreshed).
    pub store: Arc<Store>,
    /// The objects.
    pub library: Arc<Library>,
    /// The session manager.
    pub sessions: mpsc::UnboundedSender<SessionCommand>,
    /// The reorganiser.
    pub reorg: mpsc::UnboundedSender<ReorgCommand>,
    /// Set at shutdown.
    pub stop: Arc<AtomicBool>,
    /// The period.
    pub every: Duration,
}

impl Poller {
    /// Polls until `stop`, on the calling thread.
    pub fn run(self) {
        let Self {
            client,
            settings,
            record,
            lease,
            view,
            store,
            library,
            sessions,
            reorg,
            stop,
            every,
        } = self;
        let live_prefix = isochron_etcd::membership::live_prefix(&settings.prefix);
        let nodes_prefix = isochron_etcd::membership::nodes_prefix(&settings.prefix);
        let mut was: BTreeMap<String, NodeRecord> = BTreeMap::new();
        let mut dead = DeadNodes::default();
        let mut forgotten: BTreeSet<String> = BTreeSet::new();
        let mut watch: Option<isochron_etcd::Watch> = None;
        while !stop.load(Ordering::Relaxed) {
            match client.get_prefix(live_prefix.as_bytes()) {
                Ok(r) => {
                    view.etcd_ok.store(true, Ordering::Relaxed);
                    if watch.is_none() {
                        // Every change under the cluster's prefix from this read on wakes the
                        // loop at once (membership, metadata, catalog).
                        let from = r.revision + 1;
                        watch = Some(client.watch_prefix(settings.prefix.as_bytes(), from));
                    }
                    let now: BTreeMap<String, NodeRecord> = r
                        .kvs
                        .iter()
                        .filter_map(|kv| serde_json::from_slice::<NodeRecord>(&kv.value).ok())
                        .map(|rec| (rec.name.clone(), rec))
                        .collect();
                    for (name, rec) in &now {
                        if was.get(name) != Some(rec) {
                            let info =
                                MemberInfo { id: NodeId(rec.id), name: name.clone(), live: true };
                            let relay = Some(rec.control);
                            let _ = sessions.send(SessionCommand::Member { info, relay });
                        }
                    }
                    for (name, rec) in &was {
                        if !now.contains_key(name) {
                            info!(node = %name, "node is no longer live");
                            let info =
                                MemberInfo { id: NodeId(rec.id), name: name.clone(), live: false };
                            let _ = sessions.send(SessionCommand::Member { info, relay: None });
                        }
                    }
                    if !now.contains_key(&settings.node) && !stop.load(Ordering::Relaxed) {
                        // The lease lapsed (etcd was out of reach for longer than its TTL):
                        // register again, under a new lease.
                        match register(&client, &settings, &record) {
                            Ok(keeper) => {
                                info!(node = %settings.node, "registered again after the lease lapsed");
                                if let Some(old) = lock(&lease).replace(keeper) {
                                    let _ = old.shutdown();
                                }
                            }
                            Err(e) => warn!(error = %e, "registering again in etcd"),
                        }
                    }
                    *lock(&view.live) = now.clone();
                    was = now;
                }
                Err(e) => {
                    if view.etcd_ok.swap(false, Ordering::Relaxed) {
                        warn!(error = %e, "etcd unreachable: sessions go on, new ones wait");
                    }
                }
            }
            if let Ok(r) = client.get_prefix(nodes_prefix.as_bytes()) {
                *lock(&view.known) = r
                    .kvs
                    .iter()
                    .filter_map(|kv| serde_json::from_slice::<NodeRecord>(&kv.value).ok())
                    .map(|rec| (rec.name.clone(), rec))
                    .collect();
            }
            forget_departed(&store, &view, &sessions, &mut forgotten);
            sync_library(&store, &library);
            if view.etcd_ok.load(Ordering::Relaxed) {
                let live: BTreeSet<String> = lock(&view.live).keys().cloned().collect();
                dead.update(&store, &reorg, &live, settings.dead_after);
            }
            if store.coordinates_pending() {
                // Ignored while it runs (and for a while after a failure).
                let _ = reorg.send(ReorgCommand::Resume);
            }
            match watch.as_mut().map(|w| w.next_batch(every)) {
                None => std::thread::sleep(every),
                Some(Ok(Some(_))) => {
                    // A burst (an ingest writes many keys) is read once.
                    let w = watch.as_mut().expect("watching");
                    while let Ok(Some(_)) = w.next_batch(WATCH_SETTLE) {}
                }
                Some(Ok(None)) => {}
                Some(Err(e)) => {
                    if e.is_terminal() {
                        debug!(error = %e, "etcd watch ended; watching again after the next read");
                        watch = None;
                    }
                }
            }
        }
        if let Some(w) = watch {
            w.cancel();
        }
    }
}

/// Tells the session manager, once, of every known node that is not live and owns no disk in
/// use (removed, or dead with its disks retired): the cluster core forgets it, so that it no
/// longer counts among a session's lost members (`docs/design/takeover.md`).
fn forget_departed(
    store: &Store,
    view: &ClusterView,
    sessions: &mpsc::UnboundedSender<SessionCommand>,
    forgotten: &mut BTreeSet<String>,
) {
    let meta = store.meta();
    let live = lock(&view.live).clone();
    let known = lock(&view.known).clone();
    forgotten.retain(|n| !live.contains_key(n));
    for (name, rec) in &known {
        let owns = meta
            .disks
            .iter()
            .any(|d| d.state != DiskState::Retired && d.owner.as_deref() == Some(name.as_str()));
        if live.contains_key(name) || owns || !forgotten.insert(name.clone()) {
            continue;
        }
        let _ = sessions.send(SessionCommand::Forget { id: NodeId(rec.id) });
    }
}

/// How often a refused removal of a dead node is tried again (the store may have changed: an
/// object removed, the node back).
const RETRY_REFUSED: Duration = Duration::from_secs(10);

/// The nodes whose lease has lapsed, and since when (as this node saw it): past
/// `cluster.dead_after_s` a node is dead, its disks unreachable ([`Store::set_unreachable`]), and
/// the survivor with the lowest name starts the SCADDAR removal of its disks, which re-creates
/// its copies from the other replicas (`docs/design/takeover.md`).
#[derive(Default)]
struct DeadNodes {
    /// Down nodes owning disks, and when this node first saw them down.
    since: BTreeMap<String, Instant>,
    /// Dead nodes whose removal was refused (warned once), and when it was last tried.
    refused: BTreeMap<String, Instant>,
}

impl DeadNodes {
    fn update(
        &mut self,
        store: &Store,
        reorg: &mpsc::UnboundedSender<ReorgCommand>,
        live: &BTreeSet<String>,
        dead_after: Duration,
    ) {
        let meta = store.meta();
        let owners: BTreeSet<String> = meta
            .disks
            .iter()
            .filter(|d| d.state != DiskState::Retired)
            .filter_map(|d| d.owner.clone())
            .collect();
        let now = Instant::now();
        self.since.retain(|n, _| owners.contains(n) && !live.contains(n));
        for n in owners.iter().filter(|n| !live.contains(*n)) {
            self.since.entry(n.clone()).or_insert(now);
        }
        let dead: BTreeSet<&String> = self
            .since
            .iter()
            .filter(|(_, t)| now.duration_since(**t) >= dead_after)
            .map(|(n, _)| n)
            .collect();
        self.refused.retain(|n, _| dead.contains(n));
        let unreachable: BTreeSet<DiskId> = meta
            .disks
            .iter()
            .filter(|d| d.owner.as_ref().is_some_and(|o| dead.contains(o)))
            .map(|d| d.id)
            .collect();
        store.set_unreachable(unreachable);
        if meta.pending().is_some() {
            return;
        }
        // The survivor with the lowest name among the owners of active disks starts the
        // removal; the metadata update is a compare-and-swap, so even two nodes that disagree
        // on who that is start it once.
        let me = store.node().unwrap_or_default();
        let coordinator = meta
            .disks
            .iter()
            .filter(|d| d.state == DiskState::Active)
            .filter_map(|d| d.owner.as_deref())
            .filter(|o| live.contains(*o))
            .min();
        if coordinator != Some(me) {
            return;
        }
        let Some(node) = dead.into_iter().find(|n| {
            meta.disks.iter().any(|d| d.state == DiskState::Active && d.owner.as_ref() == Some(*n))
        }) else {
            return;
        };
        if self.refused.get(node).is_some_and(|t| now.duration_since(*t) < RETRY_REFUSED) {
            return;
        }
        let operation = format!("re-replicate dead node {node}");
        match store.remove_node(node) {
            Ok((disks, epoch)) => {
                info!(%node, ?disks, %epoch, "node dead: re-creating its copies from the other replicas");
                self.refused.remove(node);
            }
            Err(e) => {
                if self.refused.insert(node.clone(), now).is_none() {
                    warn!(%node, error = %e, "node dead, but its copies cannot be re-created");
                }
                let error = format!("node {node} is dead: {e}");
                let _ = reorg.send(ReorgCommand::Refused { operation, error });
            }
        }
    }
}

/// Brings the library in step with the shared catalog and placement.
fn sync_library(store: &Store, library: &Library) {
    let placement_changed = match store.refresh() {
        Ok(c) => c,
        Err(e) => {
            debug!(error = %e, "reading the store metadata");
            return;
        }
    };
    let Ok(objects) = store.catalog().objects() else { return };
    let names: BTreeSet<&str> = objects.iter().map(|r| r.name.as_str()).collect();
    for e in library.list() {
        if !names.contains(e.record.name.as_str()) {
            library.remove(&e.record.name);
        }
    }
    for rec in objects {
        if placement_changed || !library.contains(&rec.name) {
            library.insert(Arc::new(ObjectEntry::new(store, rec)));
        }
    }
}

/// Sends the session manager's messages to peers over one TCP connection per peer.
pub async fn send_control(
    mut rx: mpsc::UnboundedReceiver<(NodeId, Message)>,
    view: Arc<ClusterView>,
    hello: Message,
) {
    let mut writers: HashMap<NodeId, mpsc::UnboundedSender<Vec<u8>>> = HashMap::new();
    while let Some((to, msg)) = rx.recv().await {
        let frame = encode_frame(&msg);
        view.control_messages_out.fetch_add(1, Ordering::Relaxed);
        if let Some(w) = writers.get(&to)
            && w.send(frame.clone()).is_ok()
        {
            continue;
        }
        let addr = lock(&view.live).values().find(|r| NodeId(r.id) == to).map(|r| r.control);
        let Some(addr) = addr else {
            debug!(peer = %to, "no address for a peer: message dropped");
            continue;
        };
        let (tx, wrx) = mpsc::unbounded_channel();
        let _ = tx.send(frame);
        writers.insert(to, tx);
        tokio::spawn(write_peer(addr, wrx, Arc::clone(&view), encode_frame(&hello)));
    }
}

async fn write_peer(
    addr: SocketAddr,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    view: Arc<ClusterView>,
    hello: Vec<u8>,
) {
    let conn = tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await;
    let mut stream = match conn {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            warn!(peer = %addr, error = %e, "control connection failed");
            return;
        }
        Err(_) => {
            warn!(peer = %addr, "control connection timed out");
            return;
        }
    };
    let _ = stream.set_nodelay(true);
    let mut first = Some(hello);
    while let Some(frame) = rx.recv().await {
        let mut buf = first.take().unwrap_or_default();
        buf.extend_from_slice(&frame);
        while let Ok(more) = rx.try_recv() {
            buf.extend_from_slice(&more);
        }
        if let Err(e) = stream.write_all(&buf).await {
            warn!(peer = %addr, error = %e, "control connection lost");
            return;
        }
        view.control_bytes_out.fetch_add(buf.len() as u64, Ordering::Relaxed);
    }
}

/// Accepts peers' control connections and hands their messages to the session manager.
pub async fn accept_control(
    listener: TcpListener,
    view: Arc<ClusterView>,
    sessions: mpsc::UnboundedSender<SessionCommand>,
) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else { continue };
        let (view, sessions) = (Arc::clone(&view), sessions.clone());
        tokio::spawn(async move {
            if let Err(e) = read_peer(stream, &view, &sessions).await {
                debug!(%peer, error = %e, "control connection closed");
            }
        });
    }
}

async fn read_peer(
    mut stream: TcpStream,
    view: &ClusterView,
    sessions: &mpsc::UnboundedSender<SessionCommand>,
) -> anyhow::Result<()> {
    let mut reader = FrameReader::default();
    let mut buf = vec![0u8; 64 * 1024];
    let mut from: Option<NodeId> = None;
    loop {
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        view.control_bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        reader.feed(&buf[..n]);
        while let Some(msg) = reader.next_message()? {
            match (&msg, from) {
                (Message::Hello { node, .. }, _) => from = Some(*node),
                (_, Some(node)) => {
                    let _ = sessions.send(SessionCommand::Peer { from: node, msg: Box::new(msg) });
                }
                (_, None) => anyhow::bail!("a peer sent {} before its hello", msg.kind()),
            }
        }
    }
}

/// Receives on the relay port until `stop`: RTP that other nodes relay through this node (the
/// origin of their relayed sessions) goes to the sender thread to be resequenced and forwarded;
/// an RTCP generic NACK from such an origin (RFC 4585 §6.2.1, told from RTP by its packet type,
/// RFC 5761 §4) asks this node to resend what it relayed there, from its retransmission buffer.
pub fn receive_relay(
    socket: UdpSocket,
    sender: isochron_dataplane::shards::Senders,
    view: Arc<ClusterView>,
    stop: Arc<AtomicBool>,
) {
    use isochron_rtp::rtcp::{RtcpPacket, nack_seqs, parse_compound};
    let _ = socket.set_read_timeout(Some(Duration::from_millis(200)));
    // Larger than any datagram: a relayed packet is never cut short.
    let mut buf = vec![0u8; 65_536];
    while !stop.load(Ordering::Relaxed) {
        let Ok(n) = socket.recv(&mut buf) else { continue };
        if n < 12 {
            continue;
        }
        if (192..=223).contains(&buf[1]) {
            for p in parse_compound(&buf[..n]).map_while(Result::ok) {
                if let RtcpPacket::Nack { media_ssrc, pairs, .. } = p {
                    let seqs = nack_seqs(&pairs).collect();
                    view.relay_nacks_in.fetch_add(1, Ordering::Relaxed);
                    let _ = sender.send(SenderCommand::Nack { ssrc: media_ssrc, seqs });
                }
            }
            continue;
        }
        view.relay_packets_in.fetch_add(1, Ordering::Relaxed);
        view.relay_bytes_in.fetch_add(n as u64, Ordering::Relaxed);
        let _ = sender.send(SenderCommand::Relayed { datagram: buf[..n].to_vec() });
    }
}

/// Writes blocks to the nodes that own their disks, over HTTP.
pub struct HttpBlocks {
    /// The store (for each disk's owner).
    pub store: std::sync::Weak<Store>,
    /// Live members' addresses.
    pub view: Arc<ClusterView>,
    /// The HTTP agent.
    pub agent: ureq::Agent,
}

impl HttpBlocks {
    /// An agent with timeouts fit for one block.
    #[must_use]
    pub fn new(store: std::sync::Weak<Store>, view: Arc<ClusterView>) -> Self {
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false)
            .build()
            .into();
        Self { store, view, agent }
    }
}

impl HttpBlocks {
    /// The URL of block `key` on disk `disk` under `path` at the disk's owner, and the owner.
    fn url(&self, path: &str, disk: DiskId, key: BlockKey) -> Result<(String, String), String> {
        let store = self.store.upgrade().ok_or("the store is closed")?;
        let owner =
            store.disk_owner(disk).ok_or_else(|| format!("disk {disk} has no owner node"))?;
        let http = lock(&self.view.live)
            .get(&owner)
            .and_then(|r| r.http)
            .ok_or_else(|| format!("node {owner} (owner of disk {disk}) is not live"))?;
        let url = format!(
            "http://{http}/api/v1/cluster/{path}/{}/{}/{}",
            disk.0, key.object.0, key.index.0
        );
        Ok((url, owner))
    }

    fn put(&self, path: &str, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), String> {
        let (url, owner) = self.url(path, disk, key)?;
        let resp = self.agent.put(&url).send(bytes).map_err(|e| format!("node {owner}: {e}"))?;
        if !resp.status().is_success() {
            let status = resp.status();
            let body = resp.into_body().read_to_string().unwrap_or_default();
            return Err(format!("node {owner} answered {status}: {}", body.trim()));
        }
        self.view.block_bytes_out.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl RemoteBlocks for HttpBlocks {
    fn write_block(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), String> {
        self.put("blocks", disk, key, bytes)
    }

    fn write_block_nrt(&self, disk: DiskId, key: BlockKey, bytes: &[u8]) -> Result<(), String> {
        self.put("moves", disk, key, bytes)
    }

    fn read_block_nrt(&self, disk: DiskId, key: BlockKey) -> Result<Vec<u8>, String> {
        let (url, owner) = self.url("moves", disk, key)?;
        let resp = self.agent.get(&url).call().map_err(|e| format!("node {owner}: {e}"))?;
        let status = resp.status();
        let mut body = resp.into_body();
        if !status.is_success() {
            let text = body.read_to_string().unwrap_or_default();
            return Err(format!("node {owner} answered {status}: {}", text.trim()));
        }
        let bytes = body
            .with_config()
            .limit(64 << 20)
            .read_to_vec()
            .map_err(|e| format!("node {owner}: reading block {key}: {e}"))?;
        self.view.block_bytes_in.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        Ok(bytes)
    }
}
