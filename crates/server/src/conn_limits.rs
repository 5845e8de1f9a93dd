//! Connection caps: how many RTSP connections the server holds at once, and how many one client
//! address may hold, so that one client (or a crowd of half-open ones) cannot exhaust the file
//! descriptors every other client needs (`[rtsp] max_connections`,
//! `max_connections_per_client`).
//!
//! Why a type of its own: the accept loop asks [`ConnLimits::admit`] before serving a
//! connection and holds the returned [`ConnPermit`] for the connection's life; dropping it
//! gives the slot back, whatever way the connection ends. Loopback clients (local tools and
//! benches) and, over HTTP, cluster members count toward the total but not toward a per-client
//! cap. Refusals are counted for `/metrics`.
//!
//! The last `reserved` slots are a reserve (`rtsp.reserved_connections`): a connection that
//! takes one is *on probation* ([`ConnPermit::on_probation`]), and its first request must show
//! that it belongs there (credentials that verify, or the session of a client already playing);
//! the RTSP connection answers anything else 503 and closes. Idle connections from a crowd of
//! addresses can fill the table only up to the reserve (docs/design/security.md).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The caps and the counts (shared by the accept loop and the connections' permits).
#[derive(Debug)]
pub struct ConnLimits {
    max_total: usize,
    max_per_client: usize,
    /// The last slots, given only on probation.
    reserved: usize,
    /// The prefix lengths (IPv4, IPv6) by which clients are counted: an IPv6 client holds a /64.
    prefix: (u8, u8),
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
    /// Connections refused because the server held `max_total`.
    pub refused_total: AtomicU64,
    /// Connections refused because their client held `max_per_client`.
    pub refused_per_client: AtomicU64,
    /// Connections on probation closed because their first request proved nothing.
    pub refused_on_probation: AtomicU64,
}

/// Why a connection is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnRefusal {
    /// The server holds its most connections.
    Total(usize),
    /// The client holds its most connections.
    PerClient(usize),
}

/// A connection's slot; released on drop.
#[derive(Debug)]
pub struct ConnPermit {
    limits: Arc<ConnLimits>,
    client: IpAddr,
    /// Whether the slot is one of the reserve: the connection must prove with its first
    /// request that it may hold it.
    pub on_probation: bool,
}

impl ConnLimits {
    /// Caps of `max_total` connections, and `max_per_client` per client network (an address
    /// at `prefix` lengths, [`isochron_rtsp::server::client_network`]).
    #[must_use]
    pub fn new(max_total: usize, max_per_client: usize, prefix: (u8, u8)) -> Arc<Self> {
        Self::with_reserve(max_total, 0, max_per_client, prefix)
    }

    /// [`Self::new`], the last `reserved` of the `max_total` slots given only on probation.
    #[must_use]
    pub fn with_reserve(
        max_total: usize,
        reserved: usize,
        max_per_client: usize,
        prefix: (u8, u8),
    ) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_client,
            reserved: reserved.min(max_total),
            prefix,
            open: Mutex::new((0, HashMap::new())),
            refused_total: AtomicU64::new(0),
            refused_per_client: AtomicU64::new(0),
            refused_on_probation: AtomicU64::new(0),
        })
    }

    /// A slot for a connection from `client`, or why not.
    pub fn admit(self: &Arc<Self>, client: IpAddr) -> Result<ConnPermit, ConnRefusal> {
        self.admit_as(client, !client.is_loopback())
    }

    /// [`Self::admit`], with the per-client cap applied only if `capped` (loopback and, over
    /// HTTP, cluster members are not).
    pub fn admit_as(
        self: &Arc<Self>,
        client: IpAddr,
        capped: bool,
    ) -> Result<ConnPermit, ConnRefusal> {
        let client = isochron_rtsp::server::client_network(client, self.prefix);
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        if open.0 >= self.max_total {
            self.refused_total.fetch_add(1, Ordering::Relaxed);
            return Err(ConnRefusal::Total(self.max_total));
        }
        let mine = open.1.get(&client).copied().unwrap_or(0);
        if capped && mine >= self.max_per_client {
            self.refused_per_client.fetch_add(1, Ordering::Relaxed);
            return Err(ConnRefusal::PerClient(self.max_per_client));
        }
        let on_probation = capped && open.0 >= self.max_total - self.reserved;
        open.0 += 1;
        *open.1.entry(client).or_insert(0) += 1;
        Ok(ConnPermit { limits: Arc::clone(self), client, on_probation })
    }

    /// Connections open now.
    #[must_use]
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).0
    }
}

impl ConnPermit {
    /// Counts the connection as refused on probation (its slot is given back on drop).
    pub fn refuse_on_probation(&self) {
        self.limits.refused_on_probation.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        let mut open = self.limits.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                open.1.remove(&self.client);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_hold_and_slots_come_back() {
        let l = ConnLimits::new(3, 2, (32, 64));
        let a: IpAddr = [10, 0, 0, 1].into();
        let b: IpAddr = [10, 0, 0, 2].into();
        let p1 = l.admit(a).unwrap();
        let _p2 = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), ConnRefusal::PerClient(2));
        let _p3 = l.admit(b).unwrap();
        assert_eq!(l.admit(b).unwrap_err(), ConnRefusal::Total(3));
        drop(p1);
        assert_eq!(l.open(), 2);
        let _p4 = l.admit(a).unwrap();
        assert_eq!(l.refused_per_client.load(Ordering::Relaxed), 1);
        assert_eq!(l.refused_total.load(Ordering::Relaxed), 1);
        // Loopback is not capped per client, only in total.
        let l = ConnLimits::new(10, 1, (32, 64));
        let lo: IpAddr = [127, 0, 0, 1].into();
        let _held: Vec<ConnPermit> = (0..5).map(|_| l.admit(lo).unwrap()).collect();
        assert!(_held.iter().all(|p| !p.on_probation));
    }

    #[test]
    fn the_last_slots_are_given_on_probation() {
        let l = ConnLimits::with_reserve(4, 2, 4, (32, 64));
        let a: IpAddr = [10, 0, 0, 1].into();
        let lo: IpAddr = [127, 0, 0, 1].into();
        let first: Vec<bool> = (0..2).map(|_| l.admit(a).unwrap().on_probation).collect();
        assert_eq!(first, [false, false], "slots come back when the permits drop");
        let held: Vec<ConnPermit> = (0..2).map(|_| l.admit(a).unwrap()).collect();
        assert!(held.iter().all(|p| !p.on_probation));
        let third = l.admit(a).unwrap();
        assert!(third.on_probation);
        assert!(!l.admit(lo).unwrap().on_probation, "loopback is trusted");
        let _fourth = l.admit(a).unwrap();
        assert_eq!(l.admit(a).unwrap_err(), ConnRefusal::Total(4));
    }
}
