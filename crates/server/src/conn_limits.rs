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

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The caps and the counts (shared by the accept loop and the connections' permits).
#[derive(Debug)]
pub struct ConnLimits {
    max_total: usize,
    max_per_client: usize,
    /// The prefix lengths (IPv4, IPv6) by which clients are counted: an IPv6 client holds a /64.
    prefix: (u8, u8),
    open: Mutex<(usize, HashMap<IpAddr, usize>)>,
    /// Connections refused because the server held `max_total`.
    pub refused_total: AtomicU64,
    /// Connections refused because their client held `max_per_client`.
    pub refused_per_client: AtomicU64,
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
}

impl ConnLimits {
    /// Caps of `max_total` connections, and `max_per_client` per client network (an address
    /// at `prefix` lengths, [`isochron_rtsp::server::client_network`]).
    #[must_use]
    pub fn new(max_total: usize, max_per_client: usize, prefix: (u8, u8)) -> Arc<Self> {
        Arc::new(Self {
            max_total,
            max_per_client,
            prefix,
            open: Mutex::new((0, HashMap::new())),
            refused_total: AtomicU64::new(0),
            refused_per_client: AtomicU64::new(0),
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
        open.0 += 1;
        *open.1.entry(client).or_insert(0) += 1;
        Ok(ConnPermit { limits: Arc::clone(self), client })
    }

    /// Connections open now.
    #[must_use]
    pub fn open(&self) -> usize {
        self.open.lock().unwrap_or_else(PoisonError::into_inner).0
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
    }
}
