//! The client against a real etcd: KV, transactions with every compare target, paging, leases,
//! member status, failover, and the errors when nothing answers.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use isochron_etcd::testing::{EtcdCluster, closed_endpoint};
use isochron_etcd::{
    Client, Compare, CompareOp, EtcdError, LeaseId, Timeouts, TxnOp, TxnOpResponse,
};

fn cluster() -> EtcdCluster {
    EtcdCluster::start(1).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn kv_and_transactions() {
    let etcd = cluster();
    let c = etcd.client().unwrap();
    assert_eq!(c.get(b"/t/a").unwrap(), None);
    let rev = c.put(b"/t/a", &[0, 255, 1], None).unwrap();
    let kv = c.get(b"/t/a").unwrap().unwrap();
    assert_eq!(kv.value, [0, 255, 1], "binary values round-trip");
    assert_eq!((kv.create_revision, kv.mod_revision, kv.version, kv.lease), (rev, rev, 1, None));
    c.put(b"/t/b", b"2", None).unwrap();
    c.put(b"/t0", b"outside", None).unwrap();
    let all = c.get_prefix(b"/t/").unwrap();
    let keys: Vec<&[u8]> = all.kvs.iter().map(|kv| kv.key.as_slice()).collect();
    assert_eq!(keys, [&b"/t/a"[..], b"/t/b"]);
    assert!(all.revision >= rev + 2);

    // Every compare target holds: the success branch runs, atomically.
    let r = c
        .txn(
            &[
                Compare::version(b"/t/a".to_vec(), CompareOp::Equal, 1),
                Compare::create_revision(b"/t/a".to_vec(), CompareOp::Equal, rev),
                Compare::mod_revision(b"/t/a".to_vec(), CompareOp::Less, rev + 1),
                Compare::value(b"/t/a".to_vec(), CompareOp::Equal, vec![0, 255, 1]),
                Compare::lease(b"/t/a".to_vec(), CompareOp::Equal, LeaseId(0)),
                Compare::create_revision(b"/t/none".to_vec(), CompareOp::Equal, 0),
                Compare::version(b"/t/b".to_vec(), CompareOp::NotEqual, 0),
            ],
            &[TxnOp::put("/t/a", "new", None), TxnOp::get("/t/a"), TxnOp::delete("/t/b")],
            &[],
        )
        .unwrap();
    assert!(r.succeeded);
    assert_eq!(r.responses.len(), 3);
    assert_eq!(r.responses[0], TxnOpResponse::Put);
    assert_eq!(r.responses[1].first_kv().unwrap().value, b"new");
    assert_eq!(r.responses[2], TxnOpResponse::Delete { deleted: 1 });
    assert_eq!(c.get(b"/t/b").unwrap(), None);

    // A failing compare runs the failure branch.
    let r = c
        .txn(
            &[Compare::version(b"/t/a".to_vec(), CompareOp::Greater, 5)],
            &[TxnOp::delete("/t/a")],
            &[TxnOp::Get { key: b"/t/".to_vec(), prefix: true }],
        )
        .unwrap();
    assert!(!r.succeeded);
    let TxnOpResponse::Get(g) = &r.responses[0] else { panic!("{r:?}") };
    assert_eq!(g.kvs.len(), 1);
    // A value compare against a missing key fails.
    let r = c
        .txn(&[Compare::value(b"/t/none".to_vec(), CompareOp::Less, vec![0xff])], &[], &[])
        .unwrap();
    assert!(!r.succeeded);

    assert_eq!(c.delete(b"/t/a").unwrap(), 1);
    assert_eq!(c.delete(b"/t/a").unwrap(), 0);
    for i in 0..5 {
        c.put(format!("/p/{i}").as_bytes(), b"x", None).unwrap();
    }
    assert_eq!(c.delete_prefix(b"/p/").unwrap(), 5);
    assert!(c.get_prefix(b"/p/").unwrap().kvs.is_empty());
    assert_eq!(c.get(b"/t0").unwrap().unwrap().value, b"outside");
}

/// More keys than a page: all come back in key order, read at one revision.
#[test]
fn get_prefix_pages() {
    let etcd = cluster();
    let c = etcd.client().unwrap();
    let n = 1_234;
    let keys: Vec<String> = (0..n).map(|i| format!("/many/{i:05}")).collect();
    // etcd allows 128 operations per transaction.
    for chunk in keys.chunks(100) {
        let ops: Vec<TxnOp> =
            chunk.iter().map(|k| TxnOp::put(k.as_str(), k.as_str(), None)).collect();
        assert!(c.txn(&[], &ops, &[]).unwrap().succeeded);
    }
    let before = c.get_prefix(b"/many/").unwrap();
    assert_eq!(before.kvs.len(), n);
    assert!(
        before
            .kvs
            .iter()
            .zip(&keys)
            .all(|(kv, k)| kv.key == k.as_bytes() && kv.value == k.as_bytes())
    );
    assert!(before.kvs.iter().all(|kv| kv.mod_revision <= before.revision));
}

#[test]
fn leases() {
    let etcd = cluster();
    let c = etcd.client().unwrap();
    let lease = c.lease_grant(Duration::from_secs(5)).unwrap();
    assert_eq!(lease.ttl, Duration::from_secs(5));
    assert_ne!(lease.id, LeaseId(0));
    assert!(!c.lease_keepalive(lease.id).unwrap().is_zero());
    c.put(b"/l/k", b"v", Some(lease.id)).unwrap();
    assert_eq!(c.get(b"/l/k").unwrap().unwrap().lease, Some(lease.id));
    let left = c.lease_time_to_live(lease.id).unwrap().unwrap();
    assert!(left <= Duration::from_secs(5), "{left:?}");
    assert!(c.lease_revoke(lease.id).unwrap());
    assert_eq!(c.get(b"/l/k").unwrap(), None, "revoking deletes the lease's keys");
    assert!(!c.lease_revoke(lease.id).unwrap(), "a second revoke finds no lease");
    assert_eq!(c.lease_keepalive(lease.id).unwrap(), Duration::ZERO);
    assert_eq!(c.lease_time_to_live(lease.id).unwrap(), None);
    // etcd's refusal is its own error, not "unreachable".
    let err = c.put(b"/l/k", b"v", Some(LeaseId(12345))).unwrap_err();
    assert!(matches!(err, EtcdError::Etcd { code: 5, .. }), "{err}");
    assert!(!err.is_unreachable());
    assert!(err.to_string().contains("lease not found"), "{err}");
    assert!(err.to_string().contains(&format!("etcd at {}: put:", etcd.endpoint(0))), "{err}");
}

/// Closed ports are refused at once: the error names every endpoint, quickly.
#[test]
fn unreachable_endpoints_fail_fast_and_name_every_endpoint() {
    let (a, b) = (closed_endpoint().unwrap(), closed_endpoint().unwrap());
    let c = Client::connect(&[a.clone(), b.clone()], Timeouts::default()).unwrap();
    let start = Instant::now();
    let err = c.put(b"k", b"v", None).unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    assert!(err.is_unreachable(), "{err}");
    assert_eq!(
        err.to_string(),
        format!("etcd unreachable for put: {a} (connection refused), {b} (connection refused)")
    );
    let EtcdError::Unreachable { attempts, .. } = &err else { panic!() };
    assert_eq!(attempts.len(), 2);
    let statuses = c.status();
    assert_eq!(statuses.len(), 2);
    assert!(statuses.iter().all(|s| s.status.as_ref().is_err_and(EtcdError::is_unreachable)));
}

/// A server that accepts and never answers costs the request timeout, per endpoint.
#[test]
fn silent_endpoints_time_out() {
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let timeouts = Timeouts { request: Duration::from_secs(1), ..Timeouts::default() };
    let c = Client::connect(std::slice::from_ref(&endpoint), timeouts).unwrap();
    let start = Instant::now();
    let err = c.get(b"k").unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    assert_eq!(
        err.to_string(),
        format!("etcd unreachable for get: {endpoint} (timed out after 1 s)")
    );
}

/// A dead first endpoint is skipped, and the live one is tried first afterwards.
#[test]
fn fails_over_to_a_live_endpoint() {
    let etcd = cluster();
    let dead = closed_endpoint().unwrap();
    let c = Client::connect(&[dead.clone(), etcd.endpoint(0)], Timeouts::default()).unwrap();
    c.put(b"/f/k", b"v", None).unwrap();
    assert_eq!(c.get(b"/f/k").unwrap().unwrap().value, b"v");
    let statuses = c.status();
    assert_eq!(statuses[0].endpoint, dead);
    assert!(statuses[0].status.is_err());
    let s = statuses[1].status.as_ref().unwrap();
    assert!(s.is_healthy() && s.is_leader(), "{s:?}");
    assert!(s.version.starts_with("3."), "{s:?}");
    assert!(s.raft_index > 0 && s.db_size > 0, "{s:?}");
}

/// Three members: every one reports the same leader; killing one leaves the others serving.
#[test]
fn three_members_status_and_failover() {
    let mut etcd = EtcdCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let c = etcd.client().unwrap();
    let statuses: Vec<_> = c.status().into_iter().map(|s| s.status.unwrap()).collect();
    assert!(statuses.iter().all(|s| s.is_healthy() && s.leader == statuses[0].leader));
    assert_eq!(statuses.iter().filter(|s| s.is_leader()).count(), 1);
    c.put(b"/3/a", b"1", None).unwrap();
    etcd.kill(0).unwrap();
    // The next call fails over (the first endpoint refuses) and waits out an election if the
    // leader died.
    let start = Instant::now();
    loop {
        match c.put(b"/3/b", b"2", None) {
            Ok(_) => break,
            Err(_) if start.elapsed() < Duration::from_secs(30) => {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(c.get_prefix(b"/3/").unwrap().kvs.len(), 2);
    assert!(c.status()[0].status.is_err());
}
