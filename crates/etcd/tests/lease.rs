//! Leases against a real etcd: expiry within the TTL, the keeper's renewals and states, and
//! `register_live`.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use isochron_etcd::membership::{live_key, live_prefix};
use isochron_etcd::testing::{EtcdCluster, closed_endpoint};
use isochron_etcd::{Client, LeaseKeeper, LeaseState, RegisterError, register_live};

fn cluster() -> EtcdCluster {
    EtcdCluster::start(1).unwrap_or_else(|e| panic!("{e}"))
}

/// Waits until `key` is gone; returns how long that took.
fn wait_gone(c: &Client, key: &[u8], within: Duration) -> Duration {
    let start = Instant::now();
    while c.get(key).unwrap().is_some() {
        assert!(start.elapsed() < within, "{:?} still there", String::from_utf8_lossy(key));
        std::thread::sleep(Duration::from_millis(50));
    }
    start.elapsed()
}

/// Waits for the next state a keeper reports.
fn next_state(rx: &mpsc::Receiver<LeaseState>, within: Duration) -> LeaseState {
    rx.recv_timeout(within).unwrap_or_else(|e| panic!("no state change within {within:?}: {e}"))
}

#[test]
fn a_lease_expires_within_its_ttl_when_keepalives_stop() {
    let etcd = cluster();
    let c = etcd.client().unwrap();
    let lease = c.lease_grant(Duration::from_secs(2)).unwrap();
    c.put(b"/l/node", b"alive", Some(lease.id)).unwrap();
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(700));
        assert!(!c.lease_keepalive(lease.id).unwrap().is_zero());
    }
    // 2.1 s after the lease was granted, the renewals kept the key.
    assert!(c.get(b"/l/node").unwrap().is_some());
    let gone = wait_gone(&c, b"/l/node", Duration::from_secs(10));
    // etcd checks expiries every 500 ms and deletes through raft: allow for that and a loaded
    // machine.
    assert!(gone <= lease.ttl + Duration::from_secs(2), "gone after {gone:?}");
    assert!(gone >= lease.ttl - Duration::from_millis(500), "gone after {gone:?}");
    assert_eq!(c.lease_keepalive(lease.id).unwrap(), Duration::ZERO);
}

#[test]
fn the_keeper_renews_and_revokes_on_drop() {
    let etcd = cluster();
    let c = etcd.client().unwrap();
    let keeper = LeaseKeeper::start(&c, Duration::from_secs(2)).unwrap();
    assert_eq!(keeper.ttl(), Duration::from_secs(2));
    c.put(b"/k/node", b"alive", Some(keeper.id())).unwrap();
    std::thread::sleep(Duration::from_secs(5));
    assert!(c.get(b"/k/node").unwrap().is_some(), "renewed past two TTLs");
    assert_eq!(keeper.state(), LeaseState::Alive);
    let id = keeper.id();
    drop(keeper);
    assert_eq!(c.get(b"/k/node").unwrap(), None, "revoked at once");
    assert_eq!(c.lease_time_to_live(id).unwrap(), None);
    let keeper = LeaseKeeper::start(&c, Duration::from_secs(2)).unwrap();
    assert!(keeper.shutdown().unwrap(), "the lease existed");
}

/// The keeper reports the outage of its only member, recovers when it is back, and reports the
/// lease lost when someone revokes it.
#[test]
fn the_keeper_reports_unreachable_and_lost() {
    let mut etcd = cluster();
    let c = etcd.client().unwrap();
    let (tx, rx) = mpsc::channel();
    let keeper = LeaseKeeper::start_with_callback(&c, Duration::from_secs(3), move |s| {
        let _ = tx.send(s.clone());
    })
    .unwrap();
    let killed = Instant::now();
    etcd.kill(0).unwrap();
    let LeaseState::Unreachable { since, error } = next_state(&rx, Duration::from_secs(10)) else {
        panic!("expected Unreachable")
    };
    assert!(since >= killed, "since the first failure");
    assert!(
        error.contains(&format!("etcd unreachable for lease keep-alive: {}", etcd.endpoint(0))),
        "{error}"
    );
    assert!(matches!(keeper.state(), LeaseState::Unreachable { .. }));
    // etcd restores leases on restart and extends them, so the lease survives a short outage.
    etcd.restart(0).unwrap();
    assert_eq!(next_state(&rx, Duration::from_secs(10)), LeaseState::Alive);
    assert!(c.lease_revoke(keeper.id()).unwrap());
    assert_eq!(next_state(&rx, Duration::from_secs(10)), LeaseState::Lost);
    assert_eq!(keeper.state(), LeaseState::Lost);
    assert!(!keeper.shutdown().unwrap(), "the lease was already gone");
}

#[test]
fn register_live_refuses_a_live_name() {
    let etcd = cluster();
    let c = etcd.client().unwrap();
    let p = "/isochron/m";
    let a = LeaseKeeper::start(&c, Duration::from_secs(5)).unwrap();
    register_live(&c, p, "node-a", b"A", a.id()).unwrap();
    // A retry by the holder (same value, same lease) succeeds.
    register_live(&c, p, "node-a", b"A", a.id()).unwrap();
    let b = LeaseKeeper::start(&c, Duration::from_secs(5)).unwrap();
    let err = register_live(&c, p, "node-a", b"B", b.id()).unwrap_err();
    assert!(
        matches!(&err, RegisterError::AlreadyLive { name, holder_value } if name == "node-a" && holder_value == b"A"),
        "{err}"
    );
    assert_eq!(err.to_string(), "node \"node-a\" is already live (holder: \"A\")");
    // The same value under another lease is another holder.
    assert!(matches!(
        register_live(&c, p, "node-a", b"A", b.id()),
        Err(RegisterError::AlreadyLive { .. })
    ));
    assert!(matches!(
        register_live(&c, p, "no/de", b"B", b.id()),
        Err(RegisterError::InvalidName(_))
    ));
    register_live(&c, p, "node-b", b"B", b.id()).unwrap();
    // When A's lease ends, the name is free.
    a.shutdown().unwrap();
    register_live(&c, p, "node-a", b"B2", b.id()).unwrap();
    let live = c.get_prefix(live_prefix(p).as_bytes()).unwrap();
    let held: Vec<(String, Vec<u8>)> = live
        .kvs
        .iter()
        .map(|kv| (String::from_utf8_lossy(&kv.key).into_owned(), kv.value.clone()))
        .collect();
    assert_eq!(
        held,
        [(live_key(p, "node-a"), b"B2".to_vec()), (live_key(p, "node-b"), b"B".to_vec())]
    );
    assert!(live.kvs.iter().all(|kv| kv.lease == Some(b.id())));
    drop(b);
    assert!(c.get_prefix(live_prefix(p).as_bytes()).unwrap().kvs.is_empty());
    // Unreachable etcd is an etcd error, not a refusal.
    let dead = Client::connect(&[closed_endpoint().unwrap()], Default::default()).unwrap();
    assert!(matches!(
        register_live(&dead, p, "node-c", b"C", isochron_etcd::LeaseId(1)),
        Err(RegisterError::Etcd(e)) if e.is_unreachable()
    ));
}
