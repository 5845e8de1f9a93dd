//! EtcdCatalog against a real etcd: the behaviour every catalog has (the same check RedbCatalog
//! runs), concurrent writers that never lose an update or hand out an id twice, and a listing
//! followed by a watch without a gap.

use std::collections::BTreeSet;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use isochron_base::ObjectId;
use isochron_etcd::testing::EtcdCluster;
use isochron_etcd::{CatalogChange, EtcdCatalog, WatchError};
use isochron_store::testing::{check_catalog, object_record, store_meta};
use isochron_store::{Catalog, CatalogError, StoreMeta};

fn cluster() -> EtcdCluster {
    EtcdCluster::start(1).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn catalog_semantics() {
    let etcd = cluster();
    let cat = EtcdCatalog::new(etcd.client().unwrap(), "/isochron/one");
    assert_eq!(cat.prefix(), "/isochron/one/");
    check_catalog(&cat);
    // What the check left, as etcd holds it.
    let c = cat.client();
    let counter = c.get(b"/isochron/one/next_object_id").unwrap().unwrap();
    assert_eq!(counter.value, 10u64.to_be_bytes());
    // The record is StoreMeta's encoding, as in redb; its next_object_id field lags the counter
    // (allocations move only the counter).
    let stored = c.get(b"/isochron/one/meta").unwrap().unwrap().value;
    let mut meta = StoreMeta::decode(&stored).unwrap();
    assert_eq!(meta.encode(), stored);
    assert_eq!(meta.next_object_id, 9);
    meta.next_object_id = 10;
    assert_eq!(meta, cat.meta().unwrap());
    let listing = cat.list_with_revision().unwrap();
    assert_eq!(listing.meta.unwrap(), cat.meta().unwrap());
    assert_eq!(listing.objects, [object_record(ObjectId(2), "zeta.ts")]);
    assert!(listing.revision > 0);
    // Another prefix is another catalog.
    let other = EtcdCatalog::new(cat.client().clone(), "/isochron/one-b/");
    assert!(matches!(other.meta(), Err(CatalogError::NoMeta { .. })));
    assert!(other.objects().unwrap().is_empty());
    assert_eq!(other.allocate_object_id().unwrap(), ObjectId(1));
    // Membership keys under the same prefix are not the catalog's.
    c.put(b"/isochron/one/live/node-a", b"x", None).unwrap();
    assert_eq!(cat.objects().unwrap().len(), 1);
    assert_eq!(cat.list_with_revision().unwrap().objects.len(), 1);
}

/// A record that does not decode is reported with its key, never skipped.
#[test]
fn undecodable_records_are_reported_with_their_key() {
    let etcd = cluster();
    let cat = EtcdCatalog::new(etcd.client().unwrap(), "/isochron/bad");
    cat.put_meta(&store_meta()).unwrap();
    let c = cat.client();
    c.put(b"/isochron/bad/objects/junk.ts", &[1, 2, 3], None).unwrap();
    for err in [cat.objects().unwrap_err(), cat.list_with_revision().unwrap_err()] {
        assert!(err.to_string().contains("object \"junk.ts\""), "{err}");
    }
    let err = cat.object("junk.ts").unwrap_err();
    assert!(err.to_string().contains("junk.ts"), "{err}");
    assert!(cat.remove_object("junk.ts").is_err(), "left in place");
    assert!(c.get(b"/isochron/bad/objects/junk.ts").unwrap().is_some());
    // A record under another object's name.
    let rec = object_record(ObjectId(1), "real.ts");
    c.put(b"/isochron/bad/objects/fake.ts", &rec.encode(), None).unwrap();
    c.delete(b"/isochron/bad/objects/junk.ts").unwrap();
    let err = cat.objects().unwrap_err().to_string();
    assert!(err.contains("object \"fake.ts\": record is named \"real.ts\""), "{err}");
    // A key that is no valid name.
    c.delete(b"/isochron/bad/objects/fake.ts").unwrap();
    c.put(b"/isochron/bad/objects/a b", &rec.encode(), None).unwrap();
    let err = cat.objects().unwrap_err().to_string();
    assert!(err.contains("\"/isochron/bad/objects/a b\""), "{err}");
    c.put(b"/isochron/bad/next_object_id", b"seven", None).unwrap();
    let err = cat.allocate_object_id().unwrap_err().to_string();
    assert!(err.contains("object id counter: 5 bytes instead of 8"), "{err}");
}

/// Several threads allocate ids and update the metadata at once: every id is handed out once,
/// and every update is kept.
#[test]
fn concurrent_writers_lose_nothing() {
    const THREADS: usize = 4;
    const ALLOCATIONS: usize = 15;
    const UPDATES: u64 = 8;
    let etcd = cluster();
    let client = etcd.client().unwrap();
    let cat = EtcdCatalog::new(client.clone(), "/isochron/race");
    cat.put_meta(&store_meta()).unwrap();
    let start_id = cat.meta().unwrap().store_id;
    let barrier = Arc::new(Barrier::new(2 * THREADS));
    let allocators: Vec<_> = (0..THREADS)
        .map(|_| {
            let cat = EtcdCatalog::new(client.clone(), "/isochron/race");
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                (0..ALLOCATIONS).map(|_| cat.allocate_object_id().unwrap()).collect::<Vec<_>>()
            })
        })
        .collect();
    let updaters: Vec<_> = (0..THREADS)
        .map(|t| {
            let cat = EtcdCatalog::new(client.clone(), "/isochron/race");
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                barrier.wait();
                for _ in 0..UPDATES {
                    cat.update_meta(&mut |m| {
                        // Count the updates, and reserve one id each (raising the counter
                        // while the allocators move it).
                        m.store_id += 1;
                        m.next_object_id += 1;
                        m.disks[0].owner = Some(format!("node-{t}"));
                        Ok(())
                    })
                    .unwrap();
                }
            })
        })
        .collect();
    let mut ids = BTreeSet::new();
    for t in allocators {
        for id in t.join().unwrap() {
            assert!(ids.insert(id), "{id} handed out twice");
        }
    }
    for t in updaters {
        t.join().unwrap();
    }
    assert_eq!(ids.len(), THREADS * ALLOCATIONS);
    let meta = cat.meta().unwrap();
    assert_eq!(meta.store_id, start_id + THREADS as u64 * UPDATES, "an update was lost");
    let highest = ids.iter().next_back().unwrap().0;
    assert!(meta.next_object_id > highest);
    assert_eq!(meta.next_object_id, 1 + (THREADS * ALLOCATIONS) as u64 + THREADS as u64 * UPDATES);
    // The next allocation is above everything handed out.
    assert!(cat.allocate_object_id().unwrap().0 > highest);
}

/// List, then watch from the listing's revision + 1: every later change arrives, decoded, in
/// order; nothing before the listing does.
#[test]
fn list_then_watch_without_a_gap() {
    let etcd = cluster();
    let cat = EtcdCatalog::new(etcd.client().unwrap(), "/isochron/w");
    cat.put_meta(&store_meta()).unwrap();
    let a = cat.allocate_object_id().unwrap();
    cat.insert_object(&object_record(a, "a.ts")).unwrap();
    let listing = cat.list_with_revision().unwrap();
    assert_eq!(listing.objects.len(), 1);
    let mut watch = cat.watch(listing.revision + 1);

    let b = cat.allocate_object_id().unwrap();
    cat.insert_object(&object_record(b, "b.ts")).unwrap();
    cat.remove_object("a.ts").unwrap().unwrap();
    cat.update_meta(&mut |m| {
        m.disks[0].owner = Some("node-b".into());
        Ok(())
    })
    .unwrap();
    let c = cat.client();
    c.put(b"/isochron/w/live/node-b", b"ignored", None).unwrap();
    c.put(b"/isochron/w/objects/junk.ts", b"\x01junk", None).unwrap();
    c.delete(b"/isochron/w/meta").unwrap();

    let mut changes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while changes.len() < 5 && Instant::now() < deadline {
        if let Some(batch) = watch.next_batch(Duration::from_secs(1)).unwrap() {
            changes.extend(batch);
        }
    }
    assert_eq!(changes.len(), 5, "{changes:?}");
    assert!(matches!(&changes[0], CatalogChange::ObjectPut(r) if *r == object_record(b, "b.ts")));
    assert!(matches!(&changes[1], CatalogChange::ObjectRemoved(n) if n == "a.ts"));
    assert!(
        matches!(&changes[2], CatalogChange::MetaChanged(m) if m.disks[0].owner.as_deref() == Some("node-b"))
    );
    let CatalogChange::Invalid { key, error } = &changes[3] else { panic!("{changes:?}") };
    assert_eq!(key, "/isochron/w/objects/junk.ts");
    assert!(error.to_string().contains("junk.ts"), "{error}");
    assert!(matches!(changes[4], CatalogChange::MetaRemoved));
    assert!(watch.next_batch(Duration::from_millis(200)).unwrap().is_none());
    watch.cancel();
}

/// A watch from a compacted revision says so (the caller lists again).
#[test]
fn watch_from_a_compacted_revision_is_reported() {
    let etcd = cluster();
    let cat = EtcdCatalog::new(etcd.client().unwrap(), "/isochron/cmp");
    cat.put_meta(&store_meta()).unwrap();
    cat.allocate_object_id().unwrap();
    let rev = cat.list_with_revision().unwrap().revision;
    cat.client().compact(rev).unwrap();
    let mut watch = cat.watch(1);
    let err = match watch.next_batch(Duration::from_secs(20)) {
        Err(e) => e,
        Ok(None) => panic!("no answer from the watch"),
        Ok(Some(b)) => panic!("events from a compacted revision: {b:?}"),
    };
    assert!(
        matches!(err, WatchError::Compacted { compact_revision, requested: 1 } if compact_revision == rev),
        "{err}"
    );
    assert!(err.is_terminal());
    assert!(err.to_string().contains("list again"), "{err}");
    assert!(matches!(watch.next_batch(Duration::from_secs(5)), Err(WatchError::Closed)));
    // From the listing's revision + 1 it works.
    let mut watch = cat.watch(rev + 1);
    let b = cat.allocate_object_id().unwrap();
    cat.insert_object(&object_record(b, "late.ts")).unwrap();
    let batch = watch.next_batch(Duration::from_secs(20)).unwrap().unwrap();
    assert!(matches!(&batch[0], CatalogChange::ObjectPut(r) if r.name == "late.ts"));
}

/// Two nodes creating the cluster's store at once: exactly one metadata wins, the other learns
/// it lost and nothing it wrote survives.
#[test]
fn only_one_of_two_racing_creators_writes_the_store_metadata() {
    let etcd = cluster();
    let (a, b) = (etcd.client().unwrap(), etcd.client().unwrap());
    let mut first = store_meta();
    first.store_id = 1;
    let mut second = store_meta();
    second.store_id = 2;
    let barrier = Arc::new(Barrier::new(2));
    let race = |client, meta: StoreMeta| {
        let barrier = Arc::clone(&barrier);
        std::thread::spawn(move || {
            let cat = EtcdCatalog::new(client, "/isochron/race");
            barrier.wait();
            cat.create_meta(&meta)
        })
    };
    let (ra, rb) = (race(a, first), race(b, second));
    let results = [ra.join().unwrap(), rb.join().unwrap()];
    let won: Vec<usize> = (0..2).filter(|&i| results[i].is_ok()).collect();
    assert_eq!(won.len(), 1, "{results:?}");
    let lost = 1 - won[0];
    assert!(matches!(results[lost], Err(CatalogError::AlreadyExists { .. })), "{results:?}");
    let cat = EtcdCatalog::new(etcd.client().unwrap(), "/isochron/race");
    assert_eq!(cat.meta().unwrap().store_id, [1, 2][won[0]]);
}
