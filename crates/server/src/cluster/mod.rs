//! A node's IO for the cluster (Yima §2): etcd membership, the control connections, the relay
//! port, and block writes to other nodes. The decisions are [`isochron_cluster::ClusterCore`]'s,
//! owned by the session manager; this module only moves bytes and facts.
//!
//! - **Membership** (`docs/design/etcd.md`): every node keeps `P/nodes/<name>` (its record: id
//!   and addresses) and `P/live/<name>` (the same, attached to its lease, put only if nobody
//!   holds it). A node whose lease lapses disappears from `P/live/`. A watch on `P/` wakes the
//!   [`Poller`] at every change (and it reads at least once a second regardless): it tells the
//!   session manager who is up ([`SessionCommand::Member`](crate::sessions::SessionCommand::Member)), and re-reads the shared store
//!   metadata and the catalog so the library follows other nodes' ingests, joins and removals.
//! - **Control connections**: one TCP connection from each node to each peer carries its
//!   messages (`isochron_cluster::wire` frames, a `Hello` first); inbound connections are read
//!   into [`SessionCommand::Peer`](crate::sessions::SessionCommand::Peer). Bytes both ways are counted ([`ClusterView`]) and reported
//!   against the media bytes in `/metrics`.
//! - **Relay** (`docs/design/cluster.md`): a UDP socket on the control port takes the RTP packets
//!   other nodes send for a relayed session and hands them to the sender thread, which sends them
//!   on to the client from this node's address.
//! - **Block writes**: an ingest through any node writes each block on its owner's disk with an
//!   HTTP `PUT` to the owner ([`HttpBlocks`]), accepted only from cluster members.
//!
//! - **Live feeds** ([`feeds`]): a feed published on one node is announced in etcd and served
//!   by every other node, its chunks crossing once to each over HTTP.
//!
//! One submodule per transport: `membership` (etcd), `control` (TCP), `relay` (UDP), `blocks`
//! (HTTP); what they share (the settings, a node's id) is here.

use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use isochron_base::NodeId;

pub use crate::cluster_view::{ClusterView, NodeRecord};

mod blocks;
mod control;
pub mod feeds;
mod membership;
mod relay;

pub use blocks::HttpBlocks;
pub use control::{ControlOut, accept_control};
pub use membership::{Poller, SharedLease, check_not_live, connect, register};
pub use relay::receive_relay;

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

/// Warnings that repeat while a peer stays down (a connection to it failing on every message, a
/// subscription retried every second): the first of a run is logged, then at most one every
/// [`Quiet::EVERY`], with how many were left out meanwhile; once the peer answers again
/// ([`Quiet::clear`]), the next failure is logged at once.
#[derive(Default)]
pub(crate) struct Quiet {
    runs: Mutex<std::collections::HashMap<String, (std::time::Instant, u64)>>,
}

impl Quiet {
    /// At most one warning of a run this often.
    pub(crate) const EVERY: Duration = Duration::from_secs(10);

    /// Whether to log the warning about `what` now: `Some(n)`, `n` warnings about it having
    /// been left out since the last logged; `None`: leave this one out.
    pub(crate) fn admit(&self, what: &str) -> Option<u64> {
        let now = std::time::Instant::now();
        let mut runs = lock(&self.runs);
        match runs.get_mut(what) {
            Some((last, left_out)) if now.duration_since(*last) < Self::EVERY => {
                *left_out += 1;
                None
            }
            Some((last, left_out)) => {
                *last = now;
                Some(std::mem::take(left_out))
            }
            None => {
                runs.insert(what.to_owned(), (now, 0));
                Some(0)
            }
        }
    }

    /// `what` works again: a run of warnings about it is over.
    pub(crate) fn clear(&self, what: &str) {
        lock(&self.runs).remove(what);
    }
}

#[cfg(test)]
mod quiet_tests {
    use super::Quiet;

    #[test]
    fn a_run_of_warnings_is_logged_once_until_it_ends() {
        let q = Quiet::default();
        assert_eq!(q.admit("n2"), Some(0), "the first is logged");
        assert_eq!(q.admit("n2"), None, "the next are left out");
        assert_eq!(q.admit("n2"), None);
        assert_eq!(q.admit("n3"), Some(0), "another peer's are its own");
        q.clear("n2");
        assert_eq!(q.admit("n2"), Some(0), "after it answered, at once again");
    }
}
