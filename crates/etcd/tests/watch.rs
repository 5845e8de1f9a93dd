//! Watches against real etcd members: order, resumption on another member after a SIGKILL,
//! outages, cancellation.

use std::time::{Duration, Instant};

use isochron_etcd::testing::{EtcdCluster, closed_endpoint};
use isochron_etcd::{Client, TxnOp, Watch, WatchError, WatchEvent};

/// Collects `n` events (or fails after `within`), treating outage reports as noise.
fn collect(watch: &mut Watch, n: usize, within: Duration) -> Vec<WatchEvent> {
    let deadline = Instant::now() + within;
    let mut events = Vec::new();
    while events.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} events: {events:?}", events.len());
        match watch.next_batch(Duration::from_millis(500)) {
            Ok(Some(batch)) => events.extend(batch),
            Ok(None) | Err(WatchError::Unreachable(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    events
}

fn keys(events: &[WatchEvent]) -> Vec<String> {
    events.iter().map(|e| String::from_utf8_lossy(e.key()).into_owned()).collect()
}

/// Retries a write while a cluster elects a new leader.
fn put_eventually(c: &Client, key: &str, value: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while let Err(e) = c.put(key.as_bytes(), value.as_bytes(), None) {
        assert!(Instant::now() < deadline, "{e}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn events_arrive_in_order_from_a_past_revision() {
    let etcd = EtcdCluster::start(1).unwrap_or_else(|e| panic!("{e}"));
    let c = etcd.client().unwrap();
    let first = c.put(b"/w/a", b"1", None).unwrap();
    c.put(b"/other", b"x", None).unwrap();
    c.txn(&[], &[TxnOp::put("/w/b", "2", None), TxnOp::put("/w/c", "3", None)], &[]).unwrap();
    c.delete(b"/w/a").unwrap();
    let mut watch = c.watch_prefix(b"/w/", first);
    let events = collect(&mut watch, 4, Duration::from_secs(20));
    assert_eq!(keys(&events), ["/w/a", "/w/b", "/w/c", "/w/a"]);
    assert_eq!(
        events[0],
        WatchEvent::Put { key: b"/w/a".to_vec(), value: b"1".to_vec(), mod_revision: first }
    );
    assert_eq!(events[1].mod_revision(), events[2].mod_revision(), "one transaction, one revision");
    assert!(
        matches!(&events[3], WatchEvent::Delete { mod_revision, .. } if *mod_revision == first + 3)
    );
    // From now on (revision 0): only later changes.
    let mut now = c.watch_prefix(b"/w/", 0);
    // Give the stream time to be created before writing.
    assert!(now.next_batch(Duration::from_millis(500)).unwrap().is_none());
    c.put(b"/w/d", b"4", None).unwrap();
    assert_eq!(keys(&collect(&mut now, 1, Duration::from_secs(20))), ["/w/d"]);
    assert_eq!(keys(&collect(&mut watch, 1, Duration::from_secs(20))), ["/w/d"]);
}

/// Three members: the member serving the watch is killed; the watch goes on through another
/// one from the next revision, without losing or repeating an event.
#[test]
fn watch_resumes_after_its_member_is_killed() {
    let mut etcd = EtcdCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let c = etcd.client().unwrap();
    let start = c.put(b"/r/0", b"0", None).unwrap();
    // A fresh client prefers the first endpoint: the watch's stream is on member 0.
    let mut watch = c.watch_prefix(b"/r/", start);
    assert_eq!(keys(&collect(&mut watch, 1, Duration::from_secs(20))), ["/r/0"]);
    c.put(b"/r/1", b"1", None).unwrap();
    assert_eq!(keys(&collect(&mut watch, 1, Duration::from_secs(20))), ["/r/1"]);
    etcd.kill(0).unwrap();
    for i in 2..6 {
        put_eventually(&c, &format!("/r/{i}"), "v");
    }
    let events = collect(&mut watch, 4, Duration::from_secs(60));
    assert_eq!(keys(&events), ["/r/2", "/r/3", "/r/4", "/r/5"]);
    assert!(events.windows(2).all(|w| w[0].mod_revision() < w[1].mod_revision()));
    // Nothing is repeated.
    assert!(watch.next_batch(Duration::from_millis(500)).unwrap().is_none());
    // The member comes back; the watch is unaffected.
    etcd.restart(0).unwrap();
    put_eventually(&c, "/r/6", "v");
    assert_eq!(keys(&collect(&mut watch, 1, Duration::from_secs(30))), ["/r/6"]);
}

/// One member: while it is down the watch reports the outage (and keeps trying); when it is
/// back the watch resumes where it stopped.
#[test]
fn watch_reports_an_outage_and_recovers() {
    let mut etcd = EtcdCluster::start(1).unwrap_or_else(|e| panic!("{e}"));
    let c = etcd.client().unwrap();
    let start = c.put(b"/o/a", b"1", None).unwrap();
    let mut watch = c.watch_prefix(b"/o/", start);
    assert_eq!(keys(&collect(&mut watch, 1, Duration::from_secs(20))), ["/o/a"]);
    etcd.kill(0).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let err = loop {
        assert!(Instant::now() < deadline, "no outage reported");
        match watch.next_batch(Duration::from_millis(500)) {
            Err(e) => break e,
            Ok(b) => assert!(b.is_none(), "{b:?}"),
        }
    };
    assert!(matches!(err, WatchError::Unreachable(_)) && !err.is_terminal(), "{err}");
    // Refused, or reset when the kill raced the reconnection: either way the endpoint is named.
    assert!(
        err.to_string().contains(&format!("etcd unreachable for watch: {}", etcd.endpoint(0))),
        "{err}"
    );
    etcd.restart(0).unwrap();
    put_eventually(&c, "/o/b", "2");
    assert_eq!(keys(&collect(&mut watch, 1, Duration::from_secs(30))), ["/o/b"]);
}

/// Cancelling from another thread ends a blocked `next_batch`; dropping never blocks.
#[test]
fn cancel_and_drop_do_not_hang() {
    let etcd = EtcdCluster::start(1).unwrap_or_else(|e| panic!("{e}"));
    let c = etcd.client().unwrap();
    let mut watch = c.watch_prefix(b"/c/", 0);
    let canceller = watch.canceller();
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        canceller.cancel();
    });
    let start = Instant::now();
    let r = watch.next_batch(Duration::from_secs(30));
    assert!(matches!(r, Err(WatchError::Closed)), "{r:?}");
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
    t.join().unwrap();
    assert!(watch.next().is_none(), "the iterator ends too");

    let watch = c.watch_prefix(b"/c/", 0);
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    drop(watch);
    assert!(start.elapsed() < Duration::from_millis(100), "{:?}", start.elapsed());

    let watch = c.watch_prefix(b"/c/", 0);
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    watch.cancel();
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());

    // A watch of endpoints that refuse ends as quickly.
    let dead = Client::connect(&[closed_endpoint().unwrap()], Default::default()).unwrap();
    let watch = dead.watch_prefix(b"/c/", 0);
    std::thread::sleep(Duration::from_millis(300));
    let start = Instant::now();
    watch.cancel();
    assert!(start.elapsed() < Duration::from_secs(5), "{:?}", start.elapsed());
}
