//! Membership in etcd (`docs/design/etcd.md`): registration under a lease, the loop that reads
//! who is live, the store's metadata and the catalog whenever a watch wakes it, the dead nodes
//! it counts and forgets, a lapsed lease taken again.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use isochron_base::{DiskId, NodeId};
use isochron_cluster::MemberInfo;
use isochron_diskio::Store;
use isochron_etcd::Client;
use isochron_store::catalog::DiskState;
use tokio::sync::mpsc;
use tracing::{debug, info, warn};

use crate::cluster_view::{ClusterView, NodeRecord};
use crate::library::Library;
use crate::reorg::ReorgCommand;
use crate::sessions::SessionCommand;

use super::{ClusterSettings, lock};

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
        let mut feeds = super::feeds::Feeds::default();
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
                let io = super::feeds::FeedsIo {
                    client: &client,
                    settings: &settings,
                    lease: &lease,
                    library: &library,
                    view: &view,
                    sessions: &sessions,
                };
                feeds.sync(&io);
            }
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
        // New, or changed under its name: a live recording's commits grow it (the same id,
        // more blocks), a removal and a new ingest between two polls replace it (another id).
        let stale = library
            .get(&rec.name)
            .is_none_or(|e| e.record.id != rec.id || e.record.blocks.len() != rec.blocks.len());
        if placement_changed || stale {
            library.insert(Arc::new(crate::library::entry(store, rec)));
        }
    }
}
