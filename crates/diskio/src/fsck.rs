//! `fsck`: check every block of every object, find what does not belong, and repair what can be
//! repaired.
//!
//! Why: the store's crash ordering (`docs/design/scaling.md`) guarantees that a crash leaves at
//! worst garbage (orphan block files, temporary files) or a pending reorganisation, and that
//! [`Store::open`](crate::Store::open) cleans the garbage; but disks also lose and corrupt data
//! on their own, and operators copy directories around. `fsck` is the one place that looks at
//! everything:
//!
//! - every copy of every block of every catalogued object (`store.replication` K of them, at the
//!   disks the active epoch puts them on, [`replicas_active`]; Yima §2.1's fault tolerance) is
//!   read and verified: the block's own checksum and key, and its checksum against the
//!   catalog's;
//! - with a reorganisation pending (SCADDAR, Goel et al. ICDE 2002; `docs/design/scaling.md`),
//!   the copies already made at the pending epoch's disks are counted (they are progress,
//!   not orphans);
//! - every block file on every open disk is classified: it belongs (the active or pending
//!   placement puts it there) or it is an orphan (unknown object, index past the object's end,
//!   or a disk where neither placement puts it); leftover temporary files are listed.
//!
//! With `repair`, in this order (so that no copy is deleted before it has been used): a missing
//! or corrupt copy is restored from any valid copy on another disk (another replica, a pending
//! copy, an undeleted source, a misplaced file), written durably and read back verified; an
//! interrupted reorganisation is completed
//! ([`Store::reorganize`](crate::Store::reorganize)); orphans and temporary files are deleted.
//! What cannot be repaired is listed.
//!
//! fsck holds the store's object-writer gate for its whole run, so no ingest is in flight while
//! it classifies files; it must not run while the server is reorganising (the catalog's lock
//! keeps the CLI's fsck away from a running server's store). Retired disks are not looked at
//! (their files are deleted when they retire, and again by recovery).

use std::collections::HashMap;
use std::fmt;
use std::path::PathBuf;

use isochron_base::{BlockIndex, BlockKey, DiskId, ObjectId};
use isochron_store::catalog::{ObjectRecord, replicas_active};
use isochron_store::{Epoch, reorg};

use crate::store::{Store, StoreError, placed_on};
use crate::{DiskDir, DiskError};

/// A copy of a block that is missing or corrupt where placement puts it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockProblem {
    /// The object's name.
    pub object: String,
    /// The block.
    pub key: BlockKey,
    /// The disk of the copy.
    pub disk: DiskId,
    /// Which copy: 0 is the one readers go to first.
    pub replica: usize,
    /// The file.
    pub path: PathBuf,
    /// What is wrong.
    pub error: String,
}

impl fmt::Display for BlockProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "block {} of {:?} on disk {}: {} ({})",
            self.key,
            self.object,
            self.disk,
            self.error,
            self.path.display()
        )
    }
}

/// Why a block file is an orphan.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrphanReason {
    /// No catalogued object has its object id (an interrupted ingest or removal).
    UnknownObject,
    /// Its index is past the end of its object.
    PastEnd {
        /// The object's block count.
        blocks: u32,
    },
    /// Neither the active nor the pending placement puts it on this disk (a source left after a
    /// reorganisation, a file copied by hand).
    Misplaced,
}

impl fmt::Display for OrphanReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownObject => f.write_str("no object in the catalog has this id"),
            Self::PastEnd { blocks } => write!(f, "past the end of its object ({blocks} blocks)"),
            Self::Misplaced => f.write_str("placement does not put this block on this disk"),
        }
    }
}

/// A block file that does not belong where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockFileRef {
    /// The disk it is on.
    pub disk: DiskId,
    /// The block its name says it is.
    pub key: BlockKey,
    /// The file.
    pub path: PathBuf,
    /// Why it is an orphan.
    pub reason: OrphanReason,
}

impl fmt::Display for BlockFileRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (block {} on disk {}): {}",
            self.path.display(),
            self.key,
            self.disk,
            self.reason
        )
    }
}

/// A reorganisation found pending: how far its copies got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InterruptedReorg {
    /// The active epoch.
    pub active: Epoch,
    /// The pending epoch.
    pub pending: Epoch,
    /// Moves whose target already holds a valid copy.
    pub moved: u64,
    /// Moves in all.
    pub total: u64,
}

/// What [`fsck`] found and, with `repair`, did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FsckReport {
    /// Objects in the catalog.
    pub objects: u64,
    /// Copies of every block the store keeps (`store.replication`).
    pub replication: u8,
    /// Blocks checked (each in all its copies).
    pub blocks_checked: u64,
    /// Copies read and verified (`blocks_checked` × K).
    pub copies_checked: u64,
    /// Copies with no file where placement puts them.
    pub missing: Vec<BlockProblem>,
    /// Copies whose file there is corrupt (checksum, format, key, or a checksum other than the
    /// catalog's).
    pub corrupt: Vec<BlockProblem>,
    /// Block files that do not belong where they are.
    pub orphaned: Vec<BlockFileRef>,
    /// Number of leftover temporary files of interrupted writes.
    pub temp_files: u64,
    /// Their paths.
    pub temp_paths: Vec<PathBuf>,
    /// A pending reorganisation and its progress.
    pub interrupted: Option<InterruptedReorg>,
    /// What was repaired (with `repair`).
    pub repaired: Vec<String>,
    /// What could not be repaired (with `repair`).
    pub unrepairable: Vec<String>,
}

impl FsckReport {
    /// Whether nothing at all was found wrong: no missing, corrupt or orphaned block, no
    /// temporary file, no pending reorganisation, nothing unrepairable. (After a repair run,
    /// `unrepairable.is_empty()` says whether the store is now clean; run fsck again to see.)
    #[must_use]
    pub fn is_clean(&self) -> bool {
        self.missing.is_empty()
            && self.corrupt.is_empty()
            && self.orphaned.is_empty()
            && self.temp_files == 0
            && self.interrupted.is_none()
            && self.unrepairable.is_empty()
    }
}

/// Checks the store (see the module docs); with `repair`, repairs what can be repaired.
pub fn fsck(store: &Store, repair: bool) -> Result<FsckReport, StoreError> {
    let gate = store.exclusive();
    let meta = store.meta();
    let objects = store.catalog().objects()?;
    let by_id: HashMap<ObjectId, &ObjectRecord> = objects.iter().map(|r| (r.id, r)).collect();
    let mut report = FsckReport {
        objects: objects.len() as u64,
        replication: meta.replication,
        ..FsckReport::default()
    };

    // Every copy of every block, where placement puts it.
    for rec in &objects {
        for (i, entry) in rec.blocks.iter().enumerate() {
            let key = BlockKey::new(rec.id, BlockIndex(i as u32));
            report.blocks_checked += 1;
            for (replica, disk_id) in replicas_active(&meta, rec, key.index).iter().enumerate() {
                report.copies_checked += 1;
                let problem = |error: String, path: PathBuf| BlockProblem {
                    object: rec.name.clone(),
                    key,
                    disk: disk_id,
                    replica,
                    path,
                    error,
                };
                let Some(disk) = store.disk(disk_id) else {
                    let p = problem(format!("disk {disk_id} is not open"), PathBuf::new());
                    report.missing.push(p);
                    continue;
                };
                let path = disk.block_path(key);
                match disk.read_block(key) {
                    Ok(b) if b.header().checksum == entry.checksum => {}
                    Ok(b) => report.corrupt.push(problem(
                        format!(
                            "checksum {:#018x} differs from the catalog's {:#018x}",
                            b.header().checksum,
                            entry.checksum
                        ),
                        path,
                    )),
                    Err(DiskError::BlockMissing { .. }) => {
                        report.missing.push(problem("missing".into(), path));
                    }
                    Err(DiskError::Corrupt { source, .. }) => {
                        report.corrupt.push(problem(source.to_string(), path));
                    }
                    Err(e) => report.corrupt.push(problem(e.to_string(), path)),
                }
            }
        }
    }

    // The progress of a pending reorganisation.
    if let Some((active, pending)) = meta.pending() {
        let mut r = InterruptedReorg { active, pending, moved: 0, total: 0 };
        for mv in reorg::moves(&meta, &objects) {
            r.total += 1;
            let expected = checksum_of(&by_id, mv.key);
            if store.holds_valid_copy(mv.to, mv.key, expected) {
                r.moved += 1;
            }
        }
        report.interrupted = Some(r);
    }

    // Every file on every open disk.
    for (id, disk) in store.disks() {
        let temps = disk.temp_files()?;
        report.temp_files += temps.len() as u64;
        report.temp_paths.extend(temps);
        for file in disk.list_blocks() {
            let file = file?;
            let key = file.key;
            let reason = match by_id.get(&key.object) {
                None => Some(OrphanReason::UnknownObject),
                Some(rec) if key.index.0 >= rec.block_count() => {
                    Some(OrphanReason::PastEnd { blocks: rec.block_count() })
                }
                Some(rec) if !placed_on(&meta, rec, key.index, id) => Some(OrphanReason::Misplaced),
                Some(_) => None,
            };
            if let Some(reason) = reason {
                report.orphaned.push(BlockFileRef { disk: id, key, path: file.path, reason });
            }
        }
    }

    if repair {
        restore_blocks(store, &by_id, &mut report);
        if let Some(r) = report.interrupted {
            // `reorganize` takes the scale lock; the gate comes first in the lock order.
            match store.reorganize(&mut |_| {}) {
                Ok(done) => report.repaired.push(format!(
                    "completed the interrupted reorganisation to epoch {}: {} blocks copied, {} \
                     already copied, {} source files deleted",
                    r.pending, done.moved, done.already, done.deleted
                )),
                Err(e) => report.unrepairable.push(format!(
                    "could not complete the reorganisation to epoch {}: {e}",
                    r.pending
                )),
            }
        }
        for o in &report.orphaned {
            match store.disk(o.disk).map(|d| d.remove_block(o.key)) {
                Some(Ok(true)) => report.repaired.push(format!("deleted orphan {o}")),
                Some(Ok(false)) => {} // already gone (a source deleted by the reorganisation)
                Some(Err(e)) => report.unrepairable.push(format!("orphan {o}: {e}")),
                None => report.unrepairable.push(format!("orphan {o}: disk {} closed", o.disk)),
            }
        }
        for (id, disk) in store.disks() {
            for path in report.temp_paths.iter().filter(|p| p.starts_with(disk.path())) {
                match disk.remove_temp_file(path) {
                    Ok(true) => report
                        .repaired
                        .push(format!("deleted temporary file {} on disk {id}", path.display())),
                    Ok(false) => {}
                    Err(e) => report.unrepairable.push(format!("temporary file: {e}")),
                }
            }
        }
    }
    drop(gate);
    Ok(report)
}

/// Restores every missing or corrupt copy from a valid copy on another disk (another replica
/// first), and reads it back verified.
fn restore_blocks(
    store: &Store,
    by_id: &HashMap<ObjectId, &ObjectRecord>,
    report: &mut FsckReport,
) {
    let disks = store.disks();
    let problems: Vec<BlockProblem> =
        report.missing.iter().chain(&report.corrupt).cloned().collect();
    for p in problems {
        let expected = checksum_of(by_id, p.key);
        let source = disks
            .iter()
            .filter(|(id, _)| *id != p.disk)
            .find_map(|(id, d)| valid_copy(d, p.key, expected).map(|bytes| (*id, bytes)));
        let target = store.disk(p.disk);
        match (source, target) {
            (Some((from, bytes)), Some(to)) => {
                match to.write_block(p.key, &bytes).map(|()| valid_copy(&to, p.key, expected)) {
                    Ok(Some(_)) => report.repaired.push(format!(
                        "block {} of {:?}: restored on disk {} from the copy on disk {from}",
                        p.key, p.object, p.disk
                    )),
                    Ok(None) => report
                        .unrepairable
                        .push(format!("{p}: the restored copy does not read back valid")),
                    Err(e) => report.unrepairable.push(format!("{p}: restoring failed: {e}")),
                }
            }
            (None, _) => report.unrepairable.push(format!("{p}: no valid copy on any disk")),
            (_, None) => report.unrepairable.push(format!("{p}: its disk is not open")),
        }
    }
}

/// The bytes of a valid copy of `key` on `disk` (checksum as the catalog's, if known).
fn valid_copy(disk: &DiskDir, key: BlockKey, expected: Option<u64>) -> Option<Vec<u8>> {
    if !disk.has_block_file(key) {
        return None;
    }
    let block = disk.read_block(key).ok()?;
    if expected.is_some_and(|c| block.header().checksum != c) {
        return None;
    }
    Some(block.as_bytes().to_vec())
}

fn checksum_of(by_id: &HashMap<ObjectId, &ObjectRecord>, key: BlockKey) -> Option<u64> {
    by_id.get(&key.object)?.blocks.get(key.index.0 as usize).map(|b| b.checksum)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::Path;
    use std::sync::Arc;

    use isochron_base::{Bytes, Gsn};
    use isochron_store::DiskSpec;
    use isochron_store::reorg::Move;

    use crate::store::CopyOutcome;

    use super::*;
    use crate::testutil::{contents, encode_block, ingest};

    /// A store of three disks with two objects (40 blocks).
    fn store(dir: &Path) -> (Store, Vec<ObjectRecord>) {
        let disks: Vec<PathBuf> = ["d0", "d1", "d2"].iter().map(PathBuf::from).collect();
        let store = Store::create(&dir.join("s"), &disks, Bytes::kib(64)).unwrap();
        let recs = vec![ingest(&store, "a", 24), ingest(&store, "b", 16)];
        (store, recs)
    }

    fn key(rec: &ObjectRecord, i: u32) -> BlockKey {
        BlockKey::new(rec.id, BlockIndex(i))
    }

    /// Where readers look for block `i` of `rec`, and another open disk.
    fn home_and_other(store: &Store, rec: &ObjectRecord, i: u32) -> (Arc<DiskDir>, Arc<DiskDir>) {
        let home = store.locate(rec, BlockIndex(i));
        let other = store.disk_ids().into_iter().find(|&d| d != home).unwrap();
        (store.disk(home).unwrap(), store.disk(other).unwrap())
    }

    #[test]
    fn clean_store_is_clean() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = store(dir.path());
        let r = fsck(&store, false).unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!((r.objects, r.blocks_checked), (2, 40));
        let r = fsck(&store, true).unwrap();
        assert!(r.is_clean() && r.repaired.is_empty(), "{r:?}");
    }

    /// Each fault is reported precisely; repair fixes what can be fixed and lists the rest;
    /// afterwards fsck is clean (but for the unrepairable block) and the objects read back.
    #[test]
    fn faults_are_reported_and_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let (store, recs) = store(dir.path());
        let (a, b) = (&recs[0], &recs[1]);
        let before = contents(&store);

        // 1. A missing block with no copy anywhere: unrepairable.
        let (home, _) = home_and_other(&store, a, 3);
        home.remove_block(key(a, 3)).unwrap();
        // 2. A missing block with a stray copy on another disk: restored from it.
        let (home5, other5) = home_and_other(&store, a, 5);
        fs::create_dir_all(other5.block_path(key(a, 5)).parent().unwrap()).unwrap();
        fs::copy(home5.block_path(key(a, 5)), other5.block_path(key(a, 5))).unwrap();
        home5.remove_block(key(a, 5)).unwrap();
        // 3. A flipped byte, with a stray copy elsewhere: restored.
        let (home7, other7) = home_and_other(&store, b, 7);
        let path7 = home7.block_path(key(b, 7));
        fs::create_dir_all(other7.block_path(key(b, 7)).parent().unwrap()).unwrap();
        fs::copy(&path7, other7.block_path(key(b, 7))).unwrap();
        let mut bytes = fs::read(&path7).unwrap();
        bytes[300] ^= 0x10;
        fs::write(&path7, &bytes).unwrap();
        // 4. Orphans: an unknown object, a block past the end.
        let d0 = store.disk(DiskId(0)).unwrap();
        let ghost = BlockKey::new(ObjectId(999), BlockIndex(0));
        d0.write_block(ghost, &encode_block(ghost, Gsn(0), 1)).unwrap();
        let past = key(b, 16);
        d0.write_block(past, &encode_block(past, Gsn(0), 1)).unwrap();
        // 5. A temporary file.
        let tmp = d0.block_path(key(a, 100)).with_extension("blk.tmp");
        fs::create_dir_all(tmp.parent().unwrap()).unwrap();
        fs::write(&tmp, b"half").unwrap();

        let r = fsck(&store, false).unwrap();
        assert!(!r.is_clean());
        let missing: Vec<(BlockKey, DiskId)> = r.missing.iter().map(|p| (p.key, p.disk)).collect();
        assert_eq!(missing, vec![(key(a, 3), home.id()), (key(a, 5), home5.id())]);
        assert_eq!(r.corrupt.len(), 1);
        assert_eq!((r.corrupt[0].key, r.corrupt[0].disk), (key(b, 7), home7.id()));
        assert!(r.corrupt[0].error.contains("checksum mismatch"), "{}", r.corrupt[0]);
        assert!(
            r.corrupt[0].to_string().starts_with(&format!("block {} of \"b\" on disk", key(b, 7)))
        );
        let mut orphans: Vec<(BlockKey, DiskId, OrphanReason)> =
            r.orphaned.iter().map(|o| (o.key, o.disk, o.reason)).collect();
        orphans.sort_by_key(|o| o.0);
        let mut want = vec![
            (key(a, 5), other5.id(), OrphanReason::Misplaced),
            (key(b, 7), other7.id(), OrphanReason::Misplaced),
            (past, DiskId(0), OrphanReason::PastEnd { blocks: 16 }),
            (ghost, DiskId(0), OrphanReason::UnknownObject),
        ];
        want.sort_by_key(|o| o.0);
        assert_eq!(orphans, want);
        assert_eq!(r.temp_files, 1);
        assert_eq!(r.temp_paths, vec![tmp.clone()]);
        assert!(r.interrupted.is_none());
        assert!(r.repaired.is_empty() && r.unrepairable.is_empty());

        let r = fsck(&store, true).unwrap();
        assert_eq!(r.unrepairable.len(), 1, "{:?}", r.unrepairable);
        assert!(
            r.unrepairable[0].contains(&format!("block {}", key(a, 3))),
            "{:?}",
            r.unrepairable
        );
        assert!(r.unrepairable[0].contains("no valid copy on any disk"));
        // Two restorations, four orphans and one temporary file deleted.
        assert_eq!(r.repaired.len(), 7, "{:?}", r.repaired);
        assert!(!tmp.exists());

        let r = fsck(&store, false).unwrap();
        assert_eq!(r.missing.len(), 1, "{r:?}");
        assert!(r.corrupt.is_empty() && r.orphaned.is_empty() && r.temp_files == 0, "{r:?}");
        // Everything but the lost block reads back as before.
        let rec_a = store.catalog().object("a").unwrap().unwrap();
        for i in (0..24).filter(|&i| i != 3) {
            store.read_block_sync(&rec_a, BlockIndex(i)).unwrap();
        }
        let rec_b = store.catalog().object("b").unwrap().unwrap();
        let mut payload_b = Vec::new();
        for i in 0..16 {
            payload_b
                .extend_from_slice(store.read_block_sync(&rec_b, BlockIndex(i)).unwrap().payload());
        }
        assert_eq!(before[1], ("b".to_string(), payload_b));
    }

    /// A reorganisation interrupted half-way: reported with its progress, the copies already
    /// made are not orphans, repair completes it, and fsck is clean afterwards.
    #[test]
    fn interrupted_reorganisation_is_completed() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = store(dir.path());
        let before = contents(&store);
        store.add_disk("d3").unwrap();
        let moves: Vec<Move> = store.reorg_moves().unwrap();
        let half = moves.len() / 2;
        for mv in &moves[..half] {
            store.copy_block(mv).unwrap();
        }
        let r = fsck(&store, false).unwrap();
        assert!(!r.is_clean());
        let i = r.interrupted.unwrap();
        assert_eq!((i.moved, i.total), (half as u64, moves.len() as u64));
        assert_eq!((i.active, i.pending), (Epoch(0), Epoch(1)));
        assert!(r.orphaned.is_empty(), "{:?}", r.orphaned);
        assert!(r.missing.is_empty() && r.corrupt.is_empty());

        let r = fsck(&store, true).unwrap();
        assert!(r.unrepairable.is_empty(), "{:?}", r.unrepairable);
        assert!(
            r.repaired[0].contains("completed the interrupted reorganisation"),
            "{:?}",
            r.repaired
        );
        assert!(store.pending().is_none());
        let r = fsck(&store, false).unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(contents(&store), before);
    }

    /// A store of `n` disks keeping `k` copies, with objects "a" (24 blocks) and "b" (16).
    fn replicated(dir: &Path, n: usize, k: u8) -> (Store, Vec<ObjectRecord>) {
        let disks: Vec<DiskSpec> =
            (0..n).map(|i| DiskSpec::from(PathBuf::from(format!("d{i}")))).collect();
        let store =
            Store::create_with(&dir.join("s"), &disks, Bytes::kib(64), Default::default(), k)
                .unwrap();
        let recs = vec![ingest(&store, "a", 24), ingest(&store, "b", 16)];
        (store, recs)
    }

    /// Every block file on every open disk, as `(disk, key)`, sorted.
    fn files(store: &Store) -> Vec<(DiskId, BlockKey)> {
        let mut out: Vec<(DiskId, BlockKey)> = Vec::new();
        for (id, d) in store.disks() {
            out.extend(d.list_blocks().map(|f| (id, f.unwrap().key)));
        }
        out.sort_unstable();
        out
    }

    /// The files K copies of every block make, from the placement.
    fn expected_files(store: &Store) -> Vec<(DiskId, BlockKey)> {
        let mut out = Vec::new();
        for rec in store.catalog().objects().unwrap() {
            for i in 0..rec.block_count() {
                let r = store.replicas(&rec, BlockIndex(i));
                assert_eq!(r.len(), usize::from(store.replication()));
                out.extend(r.iter().map(|d| (d, key(&rec, i))));
            }
        }
        out.sort_unstable();
        out
    }

    /// K = 2 on three disks: every block is written twice, on two distinct disks; fsck checks
    /// both copies; a lost or corrupt copy is reported by disk and replica, reads fail over to
    /// the other copy meanwhile, and repair restores it (read back verified).
    #[test]
    fn two_copies_are_checked_and_repaired() {
        let dir = tempfile::tempdir().unwrap();
        let (store, recs) = replicated(dir.path(), 3, 2);
        let before = contents(&store);
        assert_eq!(files(&store), expected_files(&store));
        assert_eq!(files(&store).len(), 2 * 40);
        let r = fsck(&store, false).unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!((r.blocks_checked, r.copies_checked, r.replication), (40, 80, 2));

        let a = &recs[0];
        // The primary of block 2 deleted, the second copy of block 9 corrupted.
        let r2 = store.replicas(a, BlockIndex(2));
        store.disk(r2.primary()).unwrap().remove_block(key(a, 2)).unwrap();
        let r9 = store.replicas(a, BlockIndex(9));
        let path9 = store.disk(r9.as_slice()[1]).unwrap().block_path(key(a, 9));
        let mut bytes = fs::read(&path9).unwrap();
        let mid = bytes.len() / 2;
        bytes[mid] ^= 0xFF;
        fs::write(&path9, &bytes).unwrap();
        // Reads go on from the other copy.
        assert_eq!(contents(&store), before);

        let r = fsck(&store, false).unwrap();
        assert!(!r.is_clean());
        let missing: Vec<_> = r.missing.iter().map(|p| (p.key, p.disk, p.replica)).collect();
        assert_eq!(missing, vec![(key(a, 2), r2.primary(), 0)]);
        let corrupt: Vec<_> = r.corrupt.iter().map(|p| (p.key, p.disk, p.replica)).collect();
        assert_eq!(corrupt, vec![(key(a, 9), r9.as_slice()[1], 1)]);
        assert!(r.orphaned.is_empty(), "{:?}", r.orphaned);

        let r = fsck(&store, true).unwrap();
        assert!(r.unrepairable.is_empty(), "{:?}", r.unrepairable);
        assert_eq!(r.repaired.len(), 2, "{:?}", r.repaired);
        let r = fsck(&store, false).unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(files(&store), expected_files(&store));
        assert_eq!(contents(&store), before);
        // Both copies lost: the block cannot be read, and fsck says so.
        for d in store.replicas(a, BlockIndex(4)).iter() {
            store.disk(d).unwrap().remove_block(key(a, 4)).unwrap();
        }
        let err = store.read_block_sync(a, BlockIndex(4)).unwrap_err().to_string();
        assert!(err.contains("no readable copy on disks"), "{err}");
        let r = fsck(&store, true).unwrap();
        assert_eq!(r.unrepairable.len(), 2, "{:?}", r.unrepairable);
    }

    /// K greater than the disks is refused at creation (nothing is left behind) and when a
    /// removal would leave too few disks, naming the key.
    #[test]
    fn replication_needs_as_many_disks() {
        let dir = tempfile::tempdir().unwrap();
        let disks: Vec<DiskSpec> = ["d0", "d1"].iter().map(|d| PathBuf::from(d).into()).collect();
        let root = dir.path().join("s");
        let err = Store::create_with(&root, &disks, Bytes::kib(64), Default::default(), 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("store.replication is 3") && err.contains("2 disk(s)"), "{err}");
        assert!(!root.exists(), "a refused store leaves nothing behind");
        let err = Store::create_with(&root, &disks, Bytes::kib(64), Default::default(), 9)
            .unwrap_err()
            .to_string();
        assert!(err.contains("store.replication"), "{err}");
        let store =
            Store::create_with(&root, &disks, Bytes::kib(64), Default::default(), 2).unwrap();
        let err = store.remove_disk(DiskId(0)).unwrap_err().to_string();
        assert!(err.contains("store.replication is 2") && err.contains("leave 1 disk"), "{err}");
        assert!(store.pending().is_none());
        // The number is fixed: another one is an error naming the key; none is fine.
        drop(store);
        let store = Store::open(&root).unwrap();
        assert_eq!(store.replication(), 2);
        store.check_replication(None).unwrap();
        store.check_replication(Some(2)).unwrap();
        let err = store.check_replication(Some(1)).unwrap_err().to_string();
        assert!(err.contains("keeps 2 copies") && err.contains("store.replication"), "{err}");
    }

    /// K = 2 through a disk addition and a removal (offline reorganiser): afterwards every block
    /// has exactly its two copies where the new epoch puts them, nothing else is left on the
    /// disks, fsck is clean and the objects read back unchanged. Half-way, the copies made are
    /// progress, not orphans.
    #[test]
    fn two_copies_survive_add_and_remove() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = replicated(dir.path(), 3, 2);
        let before = contents(&store);
        store.add_disk("d3").unwrap();
        let moves = store.reorg_moves().unwrap();
        assert!(moves.iter().all(|mv| mv.to == DiskId(3)), "{moves:?}");
        // About 2/4 of 40 blocks' copies move onto the new disk.
        assert!((10..=32).contains(&moves.len()), "{} moves", moves.len());
        for mv in &moves[..moves.len() / 2] {
            store.copy_block(mv).unwrap();
        }
        let r = fsck(&store, false).unwrap();
        assert!(r.orphaned.is_empty() && r.missing.is_empty(), "{r:?}");
        store.reorganize(&mut |_| {}).unwrap();
        assert!(fsck(&store, false).unwrap().is_clean());
        assert_eq!(files(&store), expected_files(&store));
        assert_eq!(contents(&store), before);

        store.remove_disk(DiskId(1)).unwrap();
        let moves = store.reorg_moves().unwrap();
        assert!(moves.iter().all(|mv| mv.from == DiskId(1) && mv.to != DiskId(1)));
        store.reorganize(&mut |_| {}).unwrap();
        let r = fsck(&store, false).unwrap();
        assert!(r.is_clean(), "{r:?}");
        assert_eq!(files(&store), expected_files(&store));
        assert!(files(&store).iter().all(|(d, _)| *d != DiskId(1)));
        assert_eq!(files(&store).len(), 80);
        assert_eq!(contents(&store), before);
    }

    /// A reorganisation whose source copy is lost copies from the other replica.
    #[test]
    fn a_move_copies_from_another_replica() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = replicated(dir.path(), 3, 2);
        let before = contents(&store);
        store.add_disk("d3").unwrap();
        let mv = store.reorg_moves().unwrap()[0];
        store.disk(mv.from).unwrap().remove_block(mv.key).unwrap();
        assert!(matches!(store.copy_block(&mv).unwrap(), CopyOutcome::Copied { .. }));
        store.reorganize(&mut |_| {}).unwrap();
        assert!(fsck(&store, false).unwrap().is_clean());
        assert_eq!(contents(&store), before);
    }
}
