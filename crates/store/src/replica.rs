//! Block replication: where the K copies of a block are (pure).
//!
//! Why: with one copy per block, a disk that loses or corrupts a block ends every stream that
//! reaches it. Yima separates physical disks from the logical disks the scheduler reads "to
//! support fault tolerance" (Yima §2.1), and notes that surviving a disk crash, unlike a planned
//! removal, needs a fault-tolerant design (§2.7). isochron keeps `store.replication` = K copies
//! of every block (fixed when the store is created, recorded in
//! [`StoreMeta`](crate::StoreMeta)), reads the first and fails over to the next (the scheduler),
//! and repairs the bad copy from a good one.
//!
//! Like placement itself (Yima §2.3: only a per-object seed is stored), the copies' disks are a
//! **pure function** of `(seed, block, epoch)` and the disks' owners; nothing is stored per block:
//!
//! - **replica 0** is the block's SCADDAR placement, [`PlacementLog::locate`]: a store with K = 1
//!   is exactly the store without replication, and its golden vectors still hold;
//! - **replicas 1 … K−1** are picked from a seeded ranking of the epoch's disks, highest random
//!   weight first (rendezvous hashing: Thaler and Ravishankar, "Using name-based mappings to
//!   increase hit rates", IEEE/ACM ToN 6(1), 1998): disk `d` scores `hash_words(&[seed, block,
//!   RANK_TAG, d])`, and replica `r` is the best-scoring disk not used by replicas `< r` whose
//!   node is not used either; when every node is used (fewer nodes than K, or one node), the
//!   best-scoring disk not used. So copies are on K distinct nodes when there are K nodes, else
//!   on K distinct disks.
//!
//! The ranking does not depend on the epoch, only on which disks it has, which is what keeps a
//! scaling operation's data movement small (the rendezvous property): adding a disk moves a
//! copy only when the new disk outranks the copy's disk (or replica 0 moves onto it), and
//! removing one moves only the copies it held. [`crate::reorg::moves`] lists them.
//!
//! `testdata/replicas_v1.csv` pins this function with golden vectors: it is persistent state.

use isochron_base::mix::hash_words;
use isochron_base::{BlockIndex, DiskId, Replicas};

use crate::placement::{Epoch, PlacementLog};

/// The word that makes a disk's ranking score independent of every placement hash (placement
/// hashes `[seed, block, epoch]` with a `u32` epoch).
const RANK_TAG: u64 = 0x5245_504C_4943_4153; // "REPLICAS"

/// The ranking score of `disk` for block `block` of the object with `seed`: replicas 1 … K−1
/// go to the best-scoring disks (see the module docs).
#[must_use]
pub fn rank_score(seed: u64, block: BlockIndex, disk: DiskId) -> u64 {
    hash_words(&[seed, u64::from(block.0), RANK_TAG, u64::from(disk.0)])
}

/// The disks of the `k` copies of block `block` of the object with `seed`, created in
/// `first_epoch`, as of epoch `at` (clamped as [`PlacementLog::locate`] clamps it). `group`
/// names each disk's node (equal values: the same node). Replica 0 is
/// [`PlacementLog::locate`]; `k` is capped at [`isochron_base::MAX_REPLICAS`] and at the epoch's
/// disk count (callers refuse a store whose K exceeds it before writing anything).
#[must_use]
pub fn locate_replicas(
    log: &PlacementLog,
    seed: u64,
    first_epoch: Epoch,
    block: BlockIndex,
    at: Epoch,
    k: usize,
    group: &dyn Fn(DiskId) -> u64,
) -> Replicas {
    let primary = log.locate(seed, first_epoch, block, at);
    let mut out = Replicas::single(primary);
    if k <= 1 {
        return out;
    }
    let disks = log.disks(log.effective_epoch(first_epoch, at));
    let k = k.min(disks.len()).min(isochron_base::MAX_REPLICAS);
    // The epoch's disks by descending score (ties, which need a 64-bit collision, by id).
    let mut ranked: Vec<(u64, DiskId)> =
        disks.iter().map(|&d| (rank_score(seed, block, d), d)).collect();
    ranked.sort_unstable_by(|a, b| b.cmp(a));
    let mut groups: Vec<u64> = vec![group(primary)];
    while out.len() < k {
        let fresh = ranked
            .iter()
            .map(|&(_, d)| d)
            .find(|&d| !out.contains(d) && !groups.contains(&group(d)));
        let pick = fresh.or_else(|| ranked.iter().map(|&(_, d)| d).find(|&d| !out.contains(d)));
        let Some(d) = pick else { break };
        groups.push(group(d));
        let _ = out.push(d);
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};
    use std::fmt::Write as _;

    use super::*;
    use crate::placement::ScaleOp;

    fn ids(v: &[u16]) -> Vec<DiskId> {
        v.iter().map(|&d| DiskId(d)).collect()
    }

    /// Every disk on its own node.
    fn own(d: DiskId) -> u64 {
        u64::from(d.0)
    }

    /// One node.
    fn one(_: DiskId) -> u64 {
        0
    }

    /// The log of the placement golden vectors (`placement.rs`), never to change.
    fn golden_log() -> PlacementLog {
        let mut log = PlacementLog::new(ids(&[10, 11, 12, 13])).unwrap();
        log.push(ScaleOp::Add { disks: ids(&[20]) }).unwrap();
        log.push(ScaleOp::Add { disks: ids(&[21, 22]) }).unwrap();
        log.push(ScaleOp::Remove { disks: ids(&[11]) }).unwrap();
        log.push(ScaleOp::Add { disks: ids(&[23]) }).unwrap();
        log.push(ScaleOp::Remove { disks: ids(&[20, 13]) }).unwrap();
        log
    }

    /// Nodes of the golden vectors: disks 10–13 on node 1, 20–21 on node 2, 22–23 on node 3.
    fn golden_group(d: DiskId) -> u64 {
        u64::from(d.0 / 10 + u16::from(d.0 >= 22))
    }

    const SEEDS: [u64; 4] = [0, 1, 0xDEAD_BEEF_0BAD_F00D, u64::MAX];
    const HEADER: &str = "seed,first_epoch,block,epoch,k,nodes,disks";

    fn golden_csv() -> String {
        let log = golden_log();
        let mut out = String::from(HEADER);
        out.push('\n');
        for seed in SEEDS {
            for first in [0u32, 2] {
                for block in (0..8).chain([1000, u32::MAX]) {
                    for at in first..=log.current_epoch().0 {
                        for (k, nodes) in [(2, "one"), (3, "one"), (3, "three")] {
                            let group: &dyn Fn(DiskId) -> u64 =
                                if nodes == "one" { &one } else { &golden_group };
                            let r = locate_replicas(
                                &log,
                                seed,
                                Epoch(first),
                                BlockIndex(block),
                                Epoch(at),
                                k,
                                group,
                            );
                            let disks: Vec<String> = r.iter().map(|d| d.to_string()).collect();
                            writeln!(
                                out,
                                "{seed},{first},{block},{at},{k},{nodes},{}",
                                disks.join(" ")
                            )
                            .unwrap();
                        }
                    }
                }
            }
        }
        out
    }

    /// Regenerates `testdata/replicas_v1.csv`. Run only when adding a new golden file, never to
    /// "fix" a failing `replica_golden_vectors` (that failure means stored copies would be
    /// looked for on the wrong disks):
    /// `cargo test -p isochron-store -- --ignored regenerate_replica_golden`.
    #[test]
    #[ignore = "writes testdata/replicas_v1.csv"]
    #[allow(clippy::disallowed_methods)] // A test tool writing a fixture, not core IO.
    fn regenerate_replica_golden() {
        let path = format!("{}/testdata/replicas_v1.csv", env!("CARGO_MANIFEST_DIR"));
        std::fs::write(path, golden_csv()).unwrap();
    }

    #[test]
    fn replica_golden_vectors() {
        let csv = include_str!("../testdata/replicas_v1.csv");
        assert!(csv.lines().count() > 500);
        assert_eq!(csv, golden_csv());
        // Replica 0 of every row is the placement golden vectors' disk.
        let log = golden_log();
        for line in csv.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let [seed, first, block, at] =
                [f[0], f[1], f[2], f[3]].map(|x| x.parse::<u64>().unwrap());
            let primary: u16 = f[6].split(' ').next().unwrap().parse().unwrap();
            let want =
                log.locate(seed, Epoch(first as u32), BlockIndex(block as u32), Epoch(at as u32));
            assert_eq!(DiskId(primary), want, "{line}");
        }
    }

    /// K copies on K distinct disks; replica 0 is the placement; the same inputs give the same
    /// copies; with enough nodes, the copies are on distinct nodes.
    #[test]
    fn distinct_deterministic_node_aware() {
        let log = golden_log();
        let at = log.current_epoch();
        let disks = log.disks(at).to_vec(); // 10 12 21 22 23: nodes 1 1 2 3 3
        for seed in [3u64, 99, 12345] {
            for b in 0..2000 {
                let block = BlockIndex(b);
                for k in 1..=disks.len() {
                    let r = locate_replicas(&log, seed, Epoch(0), block, at, k, &one);
                    assert_eq!(r.len(), k);
                    assert_eq!(r.primary(), log.locate(seed, Epoch(0), block, at));
                    let set: HashSet<DiskId> = r.iter().collect();
                    assert_eq!(set.len(), k, "{r:?}");
                    assert!(r.iter().all(|d| disks.contains(&d)));
                    assert_eq!(r, locate_replicas(&log, seed, Epoch(0), block, at, k, &one));
                    // Each list extends the shorter one.
                    let shorter = locate_replicas(&log, seed, Epoch(0), block, at, k - 1, &one);
                    assert_eq!(&r.as_slice()[..k.max(2) - 1], &shorter.as_slice()[..k.max(2) - 1]);
                }
                let r = locate_replicas(&log, seed, Epoch(0), block, at, 3, &golden_group);
                let nodes: HashSet<u64> = r.iter().map(golden_group).collect();
                assert_eq!(nodes.len(), 3, "three nodes, three copies: {r:?}");
                // Four copies on three nodes: every node has one, one node two.
                let r = locate_replicas(&log, seed, Epoch(0), block, at, 4, &golden_group);
                let nodes: HashSet<u64> = r.iter().map(golden_group).collect();
                assert_eq!((r.len(), nodes.len()), (4, 3), "{r:?}");
            }
        }
        // K above the disk count is capped, never a panic or a repeated disk.
        let r = locate_replicas(&log, 7, Epoch(0), BlockIndex(1), at, 8, &own);
        assert_eq!(r.len(), disks.len());
    }

    /// Every disk holds about K/N of the copies, and replica 1 is spread evenly over the disks
    /// other than the primary.
    #[test]
    fn copies_are_balanced() {
        let log = PlacementLog::new((0..6).map(DiskId).collect()).unwrap();
        let blocks = if cfg!(debug_assertions) { 12_000 } else { 60_000 };
        let mut per_disk: HashMap<DiskId, u64> = HashMap::new();
        let mut pairs: HashMap<(DiskId, DiskId), u64> = HashMap::new();
        for b in 0..blocks {
            let r = locate_replicas(&log, 42, Epoch(0), BlockIndex(b), Epoch(0), 2, &own);
            for d in r.iter() {
                *per_disk.entry(d).or_default() += 1;
            }
            *pairs.entry((r.as_slice()[0], r.as_slice()[1])).or_default() += 1;
        }
        let want = f64::from(blocks) * 2.0 / 6.0;
        for (d, n) in &per_disk {
            assert!((*n as f64 - want).abs() < 5.0 * want.sqrt(), "disk {d}: {n} vs {want}");
        }
        // 30 ordered pairs, each about blocks / 30.
        assert_eq!(pairs.len(), 30);
        let want = f64::from(blocks) / 30.0;
        for (p, n) in &pairs {
            assert!((*n as f64 - want).abs() < 5.0 * want.sqrt(), "pair {p:?}: {n} vs {want}");
        }
    }

    /// Scaling moves few copies: adding one disk to N changes about K/(N+1) of the copies' disks
    /// (each copy moves only onto the new disk), and removing a disk moves only the copies it
    /// held.
    #[test]
    fn scaling_moves_few_copies() {
        let mut log = PlacementLog::new((0..5).map(DiskId).collect()).unwrap();
        log.push(ScaleOp::Add { disks: vec![DiskId(5)] }).unwrap();
        log.push(ScaleOp::Remove { disks: vec![DiskId(2)] }).unwrap();
        let blocks = 6000;
        for k in [2usize, 3] {
            let (mut added, mut removed) = (0u64, 0u64);
            for b in 0..blocks {
                let at = |e| locate_replicas(&log, 9, Epoch(0), BlockIndex(b), Epoch(e), k, &own);
                let (e0, e1, e2) = (at(0), at(1), at(2));
                let new: Vec<DiskId> = e1.iter().filter(|d| !e0.contains(*d)).collect();
                assert!(new.iter().all(|&d| d == DiskId(5)), "k {k}: {e0:?} → {e1:?}");
                added += new.len() as u64;
                let gone: Vec<DiskId> = e1.iter().filter(|d| !e2.contains(*d)).collect();
                assert!(gone.iter().all(|&d| d == DiskId(2)), "k {k}: {e1:?} → {e2:?}");
                assert_eq!(gone.len(), usize::from(e1.contains(DiskId(2))));
                removed += gone.len() as u64;
            }
            let want = (blocks * k as u32) as f64 / 6.0;
            assert!((added as f64 - want).abs() < 5.0 * want.sqrt(), "k {k}: {added} vs {want}");
            assert!((removed as f64 - want).abs() < 5.0 * want.sqrt(), "k {k}: {removed}");
        }
    }
}
