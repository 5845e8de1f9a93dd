//! `fsck`: check every block of every object, find what does not belong, and repair what can be
//! repaired.
//!
//! Why: the store's crash ordering (`docs/design/scaling.md`) guarantees that a crash leaves at
//! worst garbage (orphan block files, temporary files) or a pending reorganisation, and that
//! [`Store::open`](crate::Store::open) cleans the garbage; but disks also lose and corrupt data
//! on their own, and operators copy directories around. `fsck` is the one place that looks at
//! everything:
//!
//! - every block of every catalogued object is read at the disk readers use (the active epoch's,
//!   [`locate_active`]) and verified: the block's own checksum and key, and its checksum against
//!   the catalog's;
//! - with a reorganisation pending (SCADDAR, Goel et al. ICDE 2002; `research/algorithms.md`
//!   §2.7), the copies already made at the pending epoch's disks are counted (they are progress,
//!   not orphans);
//! - every block file on every open disk is classified: it belongs (the active or pending
//!   placement puts it there) or it is an orphan (unknown object, index past the object's end,
//!   or a disk where neither placement puts it); leftover temporary files are listed.
//!
//! With `repair`, in this order (so that no copy is deleted before it has been used): a missing
//! or corrupt block is restored from any valid copy on another disk (a pending copy, an undeleted
//! source, a misplaced file); an interrupted reorganisation is completed
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
use isochron_store::catalog::{ObjectRecord, locate_active};
use isochron_store::{Epoch, reorg};

use crate::store::{Store, StoreError, placed_on};
use crate::{DiskDir, DiskError};

/// A block that is missing or corrupt where readers look for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockProblem {
    /// The object's name.
    pub object: String,
    /// The block.
    pub key: BlockKey,
    /// The disk readers look on.
    pub disk: DiskId,
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
    /// Blocks read and verified.
    pub blocks_checked: u64,
    /// Blocks with no file where readers look.
    pub missing: Vec<BlockProblem>,
    /// Blocks whose file there is corrupt (checksum, format, key, or a checksum other than the
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
    let mut report = FsckReport { objects: objects.len() as u64, ..FsckReport::default() };

    // Every block where readers look.
    for rec in &objects {
        for (i, entry) in rec.blocks.iter().enumerate() {
            let key = BlockKey::new(rec.id, BlockIndex(i as u32));
            let disk_id = locate_active(&meta, rec, key.index);
            report.blocks_checked += 1;
            let problem = |error: String, path: PathBuf| BlockProblem {
                object: rec.name.clone(),
                key,
                disk: disk_id,
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

/// Restores every missing or corrupt block from a valid copy on another disk.
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
            (Some((from, bytes)), Some(to)) => match to.write_block(p.key, &bytes) {
                Ok(()) => report.repaired.push(format!(
                    "block {} of {:?}: restored on disk {} from the copy on disk {from}",
                    p.key, p.object, p.disk
                )),
                Err(e) => report.unrepairable.push(format!("{p}: restoring failed: {e}")),
            },
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
    use isochron_store::reorg::Move;

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
}
