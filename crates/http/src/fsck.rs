//! `POST /api/v1/fsck` (`isochron fsck --server URL`): every copy of every block, checked on the
//! node that holds it, and repaired from a good copy.
//!
//! Why over HTTP: in a cluster a block's K copies lie on K nodes (Yima §2.1's fault tolerance,
//! `docs/design/replication.md`), so no single store directory holds them all; the offline
//! `isochron fsck --data DIR` sees one node's disks only. Each node checks the copies on its own
//! disks (`?scope=self`): a read in the disk's non-real-time share through the reorganiser
//! (`ReorgCommand::ServeRead`, which verifies the block's checksum and key), so checking never
//! costs a stream its deadline. With `repair=1` a bad copy is handed to the reorganiser's repair
//! (`ReorgCommand::Repair`: a good copy, local or read through its node, written over the bad one
//! and read back), and checked again once the repairs are done. The node asked (without
//! `scope`) checks its own copies and asks every live node the same, and adds up: copies
//! expected (blocks × K), checked, bad, repaired, and copies no live node checked (their node is
//! down or did not answer); clean means every expected copy was checked good.
//!
//! It needs `admin` (`crate::auth`: the check loads the disks, and a repair writes); the fan-out
//! (`scope=self`) is open to cluster members and loopback only.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use axum::extract::{ConnectInfo, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use isochron_base::{BlockIndex, BlockKey, DiskId, IoFailure, IoFailureKind};
use isochron_server::reorg::ReorgCommand;
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;

use crate::state::ApiState;

/// How long a node waits for its repairs to finish.
const REPAIR_WAIT: Duration = Duration::from_secs(120);
/// How long the asked node waits for each peer's answer.
const PEER_WAIT: Duration = Duration::from_secs(600);

/// One copy that failed its check.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub(crate) struct BadCopy {
    /// The object's name.
    object: String,
    /// The block.
    index: u32,
    /// Which copy (0: the first).
    replica: usize,
    /// Its disk.
    disk: u16,
    /// Why it is bad (missing file, checksum, IO error …).
    error: String,
}

/// One node's check of the copies on its disks.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub(crate) struct NodeFsck {
    /// The node.
    node: String,
    /// Copies on its disks checked.
    copies_checked: u64,
    /// Copies found bad.
    bad: Vec<BadCopy>,
    /// Bad copies repaired (checked good again afterwards).
    repaired: Vec<BadCopy>,
    /// Bad copies still bad after the repair (or not repaired: without `repair=1`).
    unrepaired: Vec<BadCopy>,
}

/// The cluster's answer.
#[derive(Clone, Debug, Serialize)]
struct FsckJson {
    /// Every expected copy was checked and is good (after repairs, if asked).
    clean: bool,
    /// Copies of every block (`store.replication`).
    replication: u8,
    /// Objects in the catalog.
    objects: u64,
    /// Blocks of every object.
    blocks: u64,
    /// Copies the placement expects (blocks × K).
    copies_expected: u64,
    /// Copies checked by the nodes that answered.
    copies_checked: u64,
    /// Copies on nodes that did not answer (down, or no answer in time), by node.
    unchecked: BTreeMap<String, u64>,
    /// Each node's check.
    nodes: Vec<NodeFsck>,
}

/// The query: `scope=self` (this node's copies only), `repair=1`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct FsckQuery {
    scope: Option<String>,
    repair: Option<String>,
}

/// `POST /api/v1/fsck[?repair=1][&scope=self]`.
pub(crate) async fn fsck(
    State(s): State<ApiState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    Query(q): Query<FsckQuery>,
) -> Response {
    // The fan-out to each node is node-to-node; the request itself passed `crate::auth` (admin).
    if q.scope.as_deref() == Some("self")
        && let Some(refused) = crate::auth::refuse_non_member(&s, peer)
    {
        return refused;
    }
    let repair = match q.repair.as_deref() {
        None | Some("0" | "false") => false,
        Some("1" | "true") => true,
        Some(other) => {
            return crate::error::error(
                StatusCode::BAD_REQUEST,
                format!("repair must be 1 or 0, not {other:?}"),
            );
        }
    };
    let mine = match check_self(&s, repair).await {
        Ok(r) => r,
        Err(e) => return crate::error::error(StatusCode::SERVICE_UNAVAILABLE, e),
    };
    if q.scope.as_deref() == Some("self") {
        return Json(mine).into_response();
    }
    let mut nodes = vec![mine];
    nodes.extend(ask_peers(&s, repair).await);
    let objects = match s.store.catalog().objects() {
        Ok(o) => o,
        Err(e) => return crate::error::error(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    };
    // Copies each node should have checked, from the placement.
    let mut expected: BTreeMap<String, u64> = BTreeMap::new();
    let mut blocks = 0u64;
    for rec in &objects {
        for i in 0..rec.blocks.len() {
            blocks += 1;
            for disk in s.store.replicas(rec, BlockIndex(i as u32)).iter() {
                let owner = s.store.disk_owner(disk).unwrap_or_else(|| node_name(&s));
                *expected.entry(owner).or_default() += 1;
            }
        }
    }
    let mut unchecked = BTreeMap::new();
    for (node, n) in &expected {
        let checked = nodes.iter().find(|r| &r.node == node).map_or(0, |r| r.copies_checked);
        if checked < *n {
            unchecked.insert(node.clone(), n - checked);
        }
    }
    let copies_expected: u64 = expected.values().sum();
    let copies_checked: u64 = nodes.iter().map(|r| r.copies_checked).sum();
    let clean = unchecked.is_empty() && nodes.iter().all(|r| r.unrepaired.is_empty());
    Json(FsckJson {
        clean,
        replication: s.store.replication(),
        objects: objects.len() as u64,
        blocks,
        copies_expected,
        copies_checked,
        unchecked,
        nodes,
    })
    .into_response()
}

/// Checks (and with `repair`, repairs) the copies on this node's disks.
async fn check_self(s: &ApiState, repair: bool) -> Result<NodeFsck, String> {
    let objects = s.store.catalog().objects().map_err(|e| e.to_string())?;
    let mut out = NodeFsck { node: node_name(s), ..NodeFsck::default() };
    // The bad copies' keys and disks, beside their reports.
    let mut where_bad = Vec::new();
    for rec in &objects {
        for i in 0..rec.blocks.len() {
            let index = BlockIndex(i as u32);
            let key = BlockKey::new(rec.id, index);
            for (replica, disk) in s.store.replicas(rec, index).iter().enumerate() {
                if !s.store.is_local(disk) {
                    continue;
                }
                out.copies_checked += 1;
                if let Err(failure) = read_copy(s, disk, key).await {
                    let (object, error) = (rec.name.clone(), failure.to_string());
                    out.bad.push(BadCopy { object, index: index.0, replica, disk: disk.0, error });
                    where_bad.push((key, disk, failure));
                }
            }
        }
    }
    if !repair {
        out.unrepaired.clone_from(&out.bad);
        return Ok(out);
    }
    for (key, disk, error) in &where_bad {
        let cmd = ReorgCommand::Repair { key: *key, disk: *disk, error: error.clone() };
        s.reorg.send(cmd).map_err(|_| "the reorganiser is not running".to_owned())?;
    }
    wait_for_repairs(s).await?;
    for (b, (key, disk, _)) in out.bad.iter().zip(&where_bad) {
        let (key, disk) = (*key, *disk);
        if read_copy(s, disk, key).await.is_ok() {
            out.repaired.push(b.clone());
        } else {
            out.unrepaired.push(b.clone());
        }
    }
    Ok(out)
}

/// This node's name: its cluster name, or `isochron@RTSP` for a single server.
fn node_name(s: &ApiState) -> String {
    s.store.node().map_or_else(|| format!("isochron@{}", s.node.rtsp), str::to_owned)
}

/// Reads one copy in its disk's non-real-time share, verified.
async fn read_copy(s: &ApiState, disk: DiskId, key: BlockKey) -> Result<(), IoFailure> {
    let stopped = || IoFailure::new(IoFailureKind::Cancelled, "the reorganiser is not running");
    let (reply, rx) = oneshot::channel();
    s.reorg.send(ReorgCommand::ServeRead { disk, key, reply }).map_err(|_| stopped())?;
    match rx.await {
        Ok(r) => r.map(drop),
        Err(_) => Err(stopped()),
    }
}

/// Waits until the reorganiser has no repair in progress (at most [`REPAIR_WAIT`]).
async fn wait_for_repairs(s: &ApiState) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + REPAIR_WAIT;
    loop {
        let (reply, rx) = oneshot::channel();
        s.reorg
            .send(ReorgCommand::Status { reply })
            .map_err(|_| "the reorganiser is not running".to_owned())?;
        let status = rx.await.map_err(|_| "the reorganiser is not running".to_owned())?;
        if status.repair.in_progress == 0 {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!("repairs still running after {} s", REPAIR_WAIT.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Every live peer's check of its own copies (`?scope=self`); peers that do not answer are
/// left out (their copies count as unchecked).
async fn ask_peers(s: &ApiState, repair: bool) -> Vec<NodeFsck> {
    let Some(view) = &s.cluster else { return Vec::new() };
    let live = view.live.lock().map(|l| l.clone()).unwrap_or_default();
    let asks: Vec<_> = live
        .into_values()
        .filter(|r| r.name != view.node)
        .filter_map(|r| r.http)
        .map(|http| {
            tokio::task::spawn_blocking(move || {
                let agent: ureq::Agent =
                    ureq::Agent::config_builder().timeout_global(Some(PEER_WAIT)).build().into();
                let url = format!(
                    "http://{http}/api/v1/fsck?scope=self&repair={}",
                    if repair { 1 } else { 0 }
                );
                agent.post(&url).send_empty().ok()?.into_body().read_json::<NodeFsck>().ok()
            })
        })
        .collect();
    let mut out = Vec::new();
    for a in asks {
        if let Ok(Some(r)) = a.await {
            out.push(r);
        }
    }
    out
}
