//! What this node knows of the cluster, shared by its IO (`crate::cluster`), the session
//! manager and the HTTP API: the members' records as etcd has them, and counters of the traffic
//! between nodes. Facts only: the decisions are `isochron_cluster::ClusterCore`'s.
//!
//! A module of its own so that the session manager, which reads it, does not depend on the IO
//! module that writes it (and that hands the session manager its commands).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

/// What a node publishes about itself in etcd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeRecord {
    /// Its id in the cluster's messages.
    pub id: u16,
    /// Its name.
    pub name: String,
    /// RTSP address.
    pub rtsp: SocketAddr,
    /// HTTP address.
    pub http: Option<SocketAddr>,
    /// Control connections (TCP) and relay (UDP).
    pub control: SocketAddr,
}

/// The cluster as this node's IO sees it: live members and traffic counters, shared with the
/// HTTP API.
#[derive(Debug, Default)]
pub struct ClusterView {
    /// Live members' records, by name (this node included).
    pub live: Mutex<BTreeMap<String, NodeRecord>>,
    /// Every node that ever registered, by name.
    pub known: Mutex<BTreeMap<String, NodeRecord>>,
    /// Control bytes sent to peers.
    pub control_bytes_out: AtomicU64,
    /// Control bytes received from peers.
    pub control_bytes_in: AtomicU64,
    /// Control messages sent.
    pub control_messages_out: AtomicU64,
    /// RTP packets received from peers to relay.
    pub relay_packets_in: AtomicU64,
    /// Their bytes.
    pub relay_bytes_in: AtomicU64,
    /// NACKs received from the origins of relayed sessions (packets of ours they missed).
    pub relay_nacks_in: AtomicU64,
    /// Block bytes written to other nodes (ingest, reorganisation copies).
    pub block_bytes_out: AtomicU64,
    /// Block bytes read from other nodes (reorganisation copies).
    pub block_bytes_in: AtomicU64,
    /// Bytes of live feeds' frames sent to the other nodes that serve them.
    pub feed_bytes_out: AtomicU64,
    /// Bytes of live feeds' frames received from the nodes they are published on.
    pub feed_bytes_in: AtomicU64,
    /// Whether etcd answered the last poll.
    pub etcd_ok: AtomicBool,
    /// This node's name.
    pub node: String,
    /// The cluster's key prefix.
    pub prefix: String,
}

impl ClusterView {
    /// The IPs of live members (who may write blocks here).
    #[must_use]
    pub fn member_ips(&self) -> Vec<IpAddr> {
        lock(&self.live).values().map(|r| r.control.ip()).collect()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
