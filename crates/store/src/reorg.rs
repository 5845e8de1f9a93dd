//! Planning a SCADDAR reorganisation: which blocks move where (pure).
//!
//! Why: SCADDAR (Goel, Shahabi, Yao, Zimmermann, ICDE 2002) keeps data movement minimal because a
//! block's disk changes between two epochs only when the REMAP step says so — onto an added disk,
//! or off a removed one. Online scaling (`docs/design/scaling.md`) therefore copies exactly
//! the blocks whose disk differs between the **active** epoch (what readers use) and the
//! **pending** one (the operation just logged), then flips the active epoch atomically.
//!
//! This module only computes that list from the store metadata and the object records. Copying,
//! flipping, deleting sources and recovering from crashes are `isochron-diskio`'s
//! (`docs/design/scaling.md`).
//!
//! Objects ingested while the operation is pending have `first_epoch` = the pending epoch: they
//! were written where the pending epoch puts them and never move, so they are skipped.
//!
//! With replication (K copies of every block, `crate::replica`), a block's copies are a set of K
//! disks in each epoch. Every disk in the pending set that is not in the active set needs a
//! copy, and every disk in the active set that is not in the pending set loses its copy after
//! the flip; there are as many of one as of the other. They are paired in replica order into
//! [`Move`]s, so `from` is both where the copy is read (a valid copy until the flip) and the file
//! that becomes garbage, exactly as with one copy. A copy that only changes replica number (the
//! disk is in both sets) does not move. With K = 1 this is the one-copy list, move for move.

use isochron_base::{BlockIndex, BlockKey, DiskId};

use crate::catalog::{ObjectRecord, StoreMeta};

/// One block copy of a reorganisation: block `key` is read on `from` (a disk with a copy in the
/// active epoch, which has none in the pending one) and written to `to` (a disk with a copy in
/// the pending epoch and none in the active one).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Move {
    /// The block.
    pub key: BlockKey,
    /// Where readers find it until the flip.
    pub from: DiskId,
    /// Where readers find it after the flip.
    pub to: DiskId,
}

/// Every block move of the pending operation of `meta`, object by object in the order of
/// `objects`, blocks in index order. Empty when nothing is pending. Objects with a `first_epoch`
/// after the active epoch (written directly at the pending epoch) are skipped.
pub fn moves<'a>(
    meta: &'a StoreMeta,
    objects: &'a [ObjectRecord],
) -> impl Iterator<Item = Move> + 'a {
    let pending = meta.pending();
    objects
        .iter()
        .filter(move |rec| pending.is_some_and(|(active, _)| rec.first_epoch <= active))
        .flat_map(move |rec| {
            // `pending` is Some here (the filter above).
            let (active, to_epoch) = pending.unwrap_or_default();
            (0..rec.block_count()).flat_map(move |i| {
                let index = BlockIndex(i);
                let key = BlockKey::new(rec.id, index);
                let from = meta.replicas_at(rec, index, active);
                let to = meta.replicas_at(rec, index, to_epoch);
                let gone = from.iter().filter(move |d| !to.contains(*d));
                let new = to.iter().filter(move |d| !from.contains(*d));
                gone.zip(new).map(move |(from, to)| Move { key, from, to }).collect::<Vec<_>>()
            })
        })
}

/// The number of block moves of the pending operation ([`moves`]`.count()`).
#[must_use]
pub fn count_moves(meta: &StoreMeta, objects: &[ObjectRecord]) -> u64 {
    moves(meta, objects).count() as u64
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use isochron_base::{BitRate, Bytes, Gsn, MediaTime, ObjectId};

    use super::*;
    use crate::catalog::{BlockEntry, DiskRecord, DiskState, STORE_FORMAT_VERSION};
    use crate::placement::{Epoch, PlacementLog, ScaleOp};

    fn record(id: u64, seed: u64, first_epoch: u32, blocks: u32) -> ObjectRecord {
        let blocks: Vec<BlockEntry> = (0..blocks)
            .map(|i| BlockEntry {
                first_gsn: Gsn(u64::from(i)),
                first_send_time: MediaTime::ZERO,
                packets: 1,
                payload_bytes: 188,
                encoded_len: 64 + 16 + 188,
                checksum: 0,
            })
            .collect();
        ObjectRecord {
            id: ObjectId(id),
            name: format!("o{id}"),
            seed,
            first_epoch: Epoch(first_epoch),
            block_size: Bytes::kib(64),
            packets: blocks.len() as u64,
            blocks,
            ts_bytes: Bytes(0),
            duration: MediaTime::ZERO,
            avg_bitrate: BitRate(1),
            peak_bitrate: BitRate(1),
            seek_points: vec![],
            streams: vec![],
            source_file: String::new(),
            created_unix_s: 0,
            media: None,
        }
    }

    /// A store of disks 0..4 with `ops` logged; the last one pending if `pending`.
    fn meta(ops: &[ScaleOp], pending: bool) -> StoreMeta {
        meta_k(ops, pending, 1)
    }

    /// [`meta`] keeping `k` copies of every block.
    fn meta_k(ops: &[ScaleOp], pending: bool, k: u8) -> StoreMeta {
        let mut placement = PlacementLog::new((0..4).map(DiskId).collect()).unwrap();
        for op in ops {
            placement.push(op.clone()).unwrap();
        }
        let current = placement.current_epoch();
        let active = if pending { Epoch(current.0 - 1) } else { current };
        let mut m = StoreMeta {
            store_id: 1,
            format_version: STORE_FORMAT_VERSION,
            block_size: Bytes::kib(64),
            disks: vec![],
            placement,
            active_epoch: active,
            next_object_id: 100,
            replication: k,
        };
        m.disks = (0..8)
            .map(DiskId)
            .map(|id| DiskRecord {
                id,
                path: format!("d{}", id.0).into(),
                state: DiskState::Active,
                model: None,
                owner: None,
            })
            .collect();
        for i in 0..m.disks.len() {
            m.disks[i].state = m.expected_state(m.disks[i].id);
        }
        m.validate().unwrap();
        m
    }

    fn objects() -> Vec<ObjectRecord> {
        vec![record(1, 11, 0, 3000), record(2, 22, 0, 1), record(3, 33, 1, 2000)]
    }

    #[test]
    fn nothing_pending_nothing_moves() {
        let m = meta(&[ScaleOp::Add { disks: vec![DiskId(4)] }], false);
        assert_eq!(moves(&m, &objects()).count(), 0);
        assert_eq!(count_moves(&m, &objects()), 0);
    }

    /// A pending addition moves exactly the blocks whose disk differs between the epochs, all
    /// onto the added disk, and none of the objects written at the pending epoch.
    #[test]
    fn pending_addition_moves_onto_the_new_disk() {
        let m = meta(&[ScaleOp::Add { disks: vec![DiskId(4)] }], true);
        let objs = objects();
        let got: Vec<Move> = moves(&m, &objs).collect();
        let mut want = Vec::new();
        for rec in objs.iter().filter(|r| r.first_epoch == Epoch(0)) {
            for i in 0..rec.block_count() {
                let i = BlockIndex(i);
                let from = m.placement.locate(rec.seed, Epoch(0), i, Epoch(0));
                let to = m.placement.locate(rec.seed, Epoch(0), i, Epoch(1));
                if from != to {
                    want.push(Move { key: BlockKey::new(rec.id, i), from, to });
                }
            }
        }
        assert_eq!(got, want);
        assert!(got.iter().all(|mv| mv.to == DiskId(4) && mv.from != DiskId(4)));
        assert!(got.iter().all(|mv| mv.key.object != ObjectId(3)), "object 3 is at epoch 1");
        // About a fifth of object 1's 3000 blocks.
        let n1 = got.iter().filter(|mv| mv.key.object == ObjectId(1)).count();
        assert!((450..750).contains(&n1), "{n1} moves");
        assert_eq!(count_moves(&m, &objs), got.len() as u64);
    }

    /// A pending removal moves exactly the blocks on the removed disk, spread over the others.
    #[test]
    fn pending_removal_moves_off_the_removed_disk() {
        let ops = [
            ScaleOp::Add { disks: vec![DiskId(4), DiskId(5)] },
            ScaleOp::Remove { disks: vec![DiskId(1)] },
        ];
        let m = meta(&ops, true);
        let objs = vec![record(1, 11, 0, 3000), record(5, 55, 1, 3000), record(6, 66, 2, 500)];
        let got: Vec<Move> = moves(&m, &objs).collect();
        let mut on_removed = 0;
        for rec in &objs[..2] {
            for i in 0..rec.block_count() {
                let i = BlockIndex(i);
                if m.placement.locate(rec.seed, rec.first_epoch, i, Epoch(1)) == DiskId(1) {
                    on_removed += 1;
                }
            }
        }
        assert_eq!(got.len(), on_removed);
        let mut to: HashMap<DiskId, usize> = HashMap::new();
        for mv in &got {
            assert_eq!(mv.from, DiskId(1));
            assert_ne!(mv.to, DiskId(1));
            *to.entry(mv.to).or_default() += 1;
        }
        assert_eq!(to.len(), 5, "moved blocks spread over every survivor: {to:?}");
        assert!(got.iter().all(|mv| mv.key.object != ObjectId(6)));
    }

    /// With K = 2: every copy whose disk changes moves, from a disk that loses its copy to one
    /// that gains it; afterwards the pending epoch's copies are exactly the active ones with
    /// the moves applied; an addition moves copies only onto the new disk, a removal only off
    /// the removed one; about K/N of the copies move.
    #[test]
    fn two_copies_move_as_sets() {
        type Shape = Box<dyn Fn(&Move) -> bool>;
        let cases: [(Vec<ScaleOp>, Shape); 2] = [
            (
                vec![ScaleOp::Add { disks: vec![DiskId(4)] }],
                Box::new(|mv: &Move| mv.to == DiskId(4) && mv.from != DiskId(4)),
            ),
            (
                vec![
                    ScaleOp::Add { disks: vec![DiskId(4)] },
                    ScaleOp::Remove { disks: vec![DiskId(2)] },
                ],
                Box::new(|mv: &Move| mv.from == DiskId(2) && mv.to != DiskId(2)),
            ),
        ];
        for (ops, shape) in cases {
            let m = meta_k(&ops, true, 2);
            let (active, pending) = m.pending().unwrap();
            let objs = vec![record(1, 11, 0, 3000)];
            let got: Vec<Move> = moves(&m, &objs).collect();
            let mut by_key: HashMap<BlockKey, Vec<Move>> = HashMap::new();
            for mv in &got {
                assert!(shape(mv), "{ops:?}: {mv:?}");
                by_key.entry(mv.key).or_default().push(*mv);
            }
            let rec = &objs[0];
            for i in 0..rec.block_count() {
                let i = BlockIndex(i);
                let before = m.replicas_at(rec, i, active);
                let after = m.replicas_at(rec, i, pending);
                let mut set: Vec<DiskId> = before.iter().collect();
                for mv in by_key.get(&BlockKey::new(rec.id, i)).into_iter().flatten() {
                    assert!(before.contains(mv.from) && !after.contains(mv.from), "{mv:?}");
                    assert!(after.contains(mv.to) && !before.contains(mv.to), "{mv:?}");
                    set.retain(|&d| d != mv.from);
                    set.push(mv.to);
                }
                let mut want: Vec<DiskId> = after.iter().collect();
                set.sort_unstable();
                want.sort_unstable();
                assert_eq!(set, want, "block {i}: {before:?} → {after:?}");
            }
            // Each disk holds 2/N of the copies; the operation touches one disk.
            let n = m.placement.disks(pending).len().max(m.placement.disks(active).len());
            let want = 3000.0 * 2.0 / n as f64;
            let got = got.len() as f64;
            assert!((got - want).abs() < 5.0 * want.sqrt(), "{ops:?}: {got} moves, want {want}");
            // One copy: the moves are the one-copy list.
            let one = meta_k(&ops, true, 1);
            let single: Vec<Move> = moves(&one, &objs).collect();
            for mv in &single {
                let p0 = |e| one.placement.locate(11, Epoch(0), mv.key.index, e);
                assert_eq!((mv.from, mv.to), (p0(active), p0(pending)));
            }
        }
    }
}
