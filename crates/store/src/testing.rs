//! What every [`Catalog`] implementation must do, as one check the implementations' tests run
//! (feature `testing`): the embedded redb catalog and the cluster's etcd catalog are held to the
//! same behaviour by the same code.
//!
//! Pure: it only calls the trait. Persistence, locking and concurrency are the implementations'
//! own tests.

use isochron_base::{BitRate, Bytes, DiskId, Gsn, MediaTime, ObjectId};

use crate::catalog::{
    BlockEntry, Catalog, CatalogError, DiskRecord, DiskState, ObjectRecord, STORE_FORMAT_VERSION,
    StoreMeta,
};
use crate::placement::{Epoch, PlacementLog};

/// A small valid object record: one block of three packets.
#[must_use]
pub fn object_record(id: ObjectId, name: &str) -> ObjectRecord {
    ObjectRecord {
        id,
        name: name.into(),
        seed: 5,
        first_epoch: Epoch(0),
        block_size: Bytes::mib(1),
        blocks: vec![BlockEntry {
            first_gsn: Gsn(0),
            first_send_time: MediaTime::ZERO,
            packets: 3,
            payload_bytes: 3 * 1316,
            encoded_len: 64 + 3 * (16 + 1316),
            checksum: 1,
        }],
        packets: 3,
        ts_bytes: Bytes(3 * 1316),
        duration: MediaTime::from_nanos(2_000_000),
        avg_bitrate: BitRate(1_000_000),
        peak_bitrate: BitRate(2_000_000),
        seek_points: vec![],
        streams: vec![],
        source_file: format!("/src/{name}"),
        created_unix_s: 1,
        media: None,
    }
}

/// A valid store of one disk, `disk-0`, and a fresh id counter.
#[must_use]
pub fn store_meta() -> StoreMeta {
    let placement = match PlacementLog::new(vec![DiskId(0)]) {
        Ok(p) => p,
        Err(e) => panic!("a log of one disk is valid: {e}"),
    };
    StoreMeta {
        store_id: 77,
        format_version: STORE_FORMAT_VERSION,
        block_size: Bytes::mib(1),
        disks: vec![DiskRecord {
            id: DiskId(0),
            path: "disk-0".into(),
            state: DiskState::Active,
            model: None,
            owner: None,
        }],
        placement,
        active_epoch: Epoch(0),
        next_object_id: 1,
        replication: 1,
    }
}

/// Runs the behaviours every catalog has on `cat`, which must be empty (no metadata, no
/// objects, no id handed out). Panics on the first difference. Leaves one object, `zeta.ts`
/// (id 2), and the counter at 10.
pub fn check_catalog(cat: &dyn Catalog) {
    check_crud(cat);
    check_update_meta(cat);
    check_grow(cat);
}

fn check_crud(cat: &dyn Catalog) {
    assert!(matches!(cat.meta(), Err(CatalogError::NoMeta { .. })));
    let err = cat.update_meta(&mut |_| Ok(())).unwrap_err();
    assert!(matches!(err, CatalogError::NoMeta { .. }), "{err}");
    cat.put_meta(&store_meta()).unwrap();
    assert_eq!(cat.meta().unwrap(), store_meta());
    let a = cat.allocate_object_id().unwrap();
    let b = cat.allocate_object_id().unwrap();
    assert_eq!((a, b), (ObjectId(1), ObjectId(2)));
    cat.insert_object(&object_record(b, "zeta.ts")).unwrap();
    cat.insert_object(&object_record(a, "alpha.ts")).unwrap();
    assert!(matches!(
        cat.insert_object(&object_record(a, "alpha.ts")),
        Err(CatalogError::NameExists { .. })
    ));
    for id in [0, 3, 9] {
        assert!(matches!(
            cat.insert_object(&object_record(ObjectId(id), "never.ts")),
            Err(CatalogError::UnallocatedId { .. })
        ));
    }
    assert!(matches!(
        cat.insert_object(&object_record(a, "bad name")),
        Err(CatalogError::InvalidName { .. })
    ));
    let mut broken = object_record(a, "broken.ts");
    broken.packets = 4;
    assert!(matches!(cat.insert_object(&broken), Err(CatalogError::Invalid { .. })));
    // A stale meta cannot lower the counter.
    cat.put_meta(&store_meta()).unwrap();
    assert_eq!(cat.meta().unwrap().next_object_id, 3);
    // An invalid one is refused.
    let mut bad = store_meta();
    bad.disks[0].state = DiskState::Retired;
    assert!(cat.put_meta(&bad).is_err());
    assert_eq!(cat.meta().unwrap().disks[0].state, DiskState::Active);

    let names: Vec<String> = cat.objects().unwrap().into_iter().map(|r| r.name).collect();
    assert_eq!(names, ["alpha.ts", "zeta.ts"]);
    assert_eq!(cat.object("zeta.ts").unwrap(), Some(object_record(ObjectId(2), "zeta.ts")));
    assert_eq!(cat.object("nope").unwrap(), None);
    assert_eq!(cat.object("not/a name").unwrap(), None);
    assert_eq!(cat.allocate_object_id().unwrap(), ObjectId(3));
    assert_eq!(cat.remove_object("alpha.ts").unwrap(), Some(object_record(a, "alpha.ts")));
    assert_eq!(cat.remove_object("alpha.ts").unwrap(), None);
    assert_eq!(cat.objects().unwrap().len(), 1);
    // A removed name can be used again, with a new id.
    let c = cat.allocate_object_id().unwrap();
    assert_eq!(c, ObjectId(4));
    cat.insert_object(&object_record(c, "alpha.ts")).unwrap();
    assert_eq!(cat.remove_object("alpha.ts").unwrap(), Some(object_record(c, "alpha.ts")));
}

fn check_update_meta(cat: &dyn Catalog) {
    // `f` sees the counter; a lower next_object_id does not lower it.
    let got = cat
        .update_meta(&mut |m| {
            assert_eq!(m.next_object_id, 5);
            m.disks[0].owner = Some("node-a".into());
            m.next_object_id = 1;
            Ok(())
        })
        .unwrap();
    assert_eq!(got.disks[0].owner.as_deref(), Some("node-a"));
    assert_eq!(got.next_object_id, 5);
    assert_eq!(cat.meta().unwrap(), got);
    assert_eq!(cat.allocate_object_id().unwrap(), ObjectId(5));
    // Raising it reserves the ids below.
    let got = cat
        .update_meta(&mut |m| {
            m.next_object_id = 9;
            Ok(())
        })
        .unwrap();
    assert_eq!(got.next_object_id, 9);
    assert_eq!(cat.allocate_object_id().unwrap(), ObjectId(9));
    // An error from `f`, or an invalid result, writes nothing.
    let before = cat.meta().unwrap();
    let err = cat
        .update_meta(&mut |m| {
            m.store_id = 1;
            Err(CatalogError::Invalid { what: "test".into(), reason: "refused".into() })
        })
        .unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
    let err = cat
        .update_meta(&mut |m| {
            m.disks[0].state = DiskState::Retired;
            Ok(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("placement log makes it Active"), "{err}");
    let err = cat
        .update_meta(&mut |m| {
            m.disks[0].owner = Some("no/such node".into());
            Ok(())
        })
        .unwrap_err();
    assert!(err.to_string().contains("not a valid node name"), "{err}");
    assert_eq!(cat.meta().unwrap(), before);
    assert_eq!(before.next_object_id, 10);
}

/// A growing object's commits: inserted while the name is free, then replaced by longer
/// prefixes of itself only.
fn check_grow(cat: &dyn Catalog) {
    // An id allocated before (no other is, so that the counter stays where callers expect it).
    let id = ObjectId(1);
    let short = object_record(id, "growing.ts");
    let mut rec = short.clone();
    let mut second = rec.blocks[0];
    second.first_gsn = Gsn(3);
    second.first_send_time = MediaTime::from_nanos(1_000_000);
    rec.blocks.push(second);
    rec.packets = 6;
    rec.ts_bytes = Bytes(6 * 1316);
    rec.validate().unwrap();
    cat.grow_object(&short).unwrap();
    assert_eq!(cat.object("growing.ts").unwrap().unwrap(), short);
    cat.grow_object(&rec).unwrap();
    assert_eq!(cat.object("growing.ts").unwrap().unwrap(), rec);
    // Not shorter, not another object's name.
    assert!(matches!(cat.grow_object(&short), Err(CatalogError::NameExists { .. })));
    let other = object_record(id, "zeta.ts");
    assert!(matches!(cat.grow_object(&other), Err(CatalogError::NameExists { .. })));
    assert_eq!(cat.object("growing.ts").unwrap().unwrap(), rec);
    cat.remove_object("growing.ts").unwrap();
}
