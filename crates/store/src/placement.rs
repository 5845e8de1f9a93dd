//! Yima pseudo-random block placement with SCADDAR scaling epochs.
//!
//! Why: a continuous-media store spreads every object's blocks pseudo-randomly over all disks so
//! that any mix of streams loads the disks evenly (Yima §2.2: random placement suits many delivery
//! rates with one block size, interactive access, and reorganisation). Keeping a directory entry
//! per block would be large and would have to be replicated; instead Yima stores only a
//! **per-object seed** and recomputes a block's disk on every lookup.
//!
//! When disks are added or removed, SCADDAR (Goel, Shahabi, Yao, Zimmermann, "SCADDAR: An
//! Efficient Randomized Technique to Reorganize Continuous Media Blocks", ICDE 2002) keeps an
//! append-only log of scaling operations. Each operation starts a new [`Epoch`], and a block's disk
//! in epoch `j` is derived from its disk in epoch `j - 1` by a REMAP step, so that
//!
//! - an **addition** moves a block only onto one of the added disks, with probability
//!   `added / new total` (the minimum that keeps the load uniform), and
//! - a **removal** moves only the blocks that were on the removed disks, uniformly onto the
//!   survivors; survivors are renumbered (keeping their relative order) but their blocks stay put.
//!
//! The REMAP used is the **fresh-randomness-per-operation** variant
//! ([`PlacementVariant::Hashed`], `research/algorithms.md` §2.6): each step draws an independent
//! hash of `(seed, block, epoch)` instead of consuming the bits of one random number as the
//! paper's REMAP does, so it never degrades however many operations are logged. The variant is
//! part of the log, which leaves room for the paper-faithful variant later.
//!
//! Placement is persistent state: the functions here (and [`isochron_base::mix`]) must never change
//! their output. `testdata/placement_v1.csv` pins them with golden vectors.
//!
//! This module does not move data: it answers "where is block *i* of this object in epoch *j*".
//! Migration between epochs (`algorithms.md` §2.7) is planned and executed elsewhere.

use std::fmt;

use isochron_base::mix::{hash_words, reduce};
use isochron_base::{BlockIndex, DiskId};

/// A placement epoch: epoch 0 is the initial disk set, epoch `j` follows the `j`-th scaling
/// operation of the [`PlacementLog`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Epoch(pub u32);

impl fmt::Display for Epoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

/// One storage scaling operation (one SCADDAR epoch change).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ScaleOp {
    /// Disks join the store. They get the logical indices after the existing disks, in the order
    /// given.
    Add {
        /// The joining disks' physical ids; never seen before in the log.
        disks: Vec<DiskId>,
    },
    /// Disks leave the store. The survivors are renumbered, keeping their relative order.
    Remove {
        /// The leaving disks' physical ids; all present in the current epoch.
        disks: Vec<DiskId>,
    },
}

/// How a block's disk is computed. Stored in the log so that a store keeps the variant it was
/// created with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlacementVariant {
    /// Fresh randomness per operation: `hash_words(&[seed, block, epoch])` reduced onto the
    /// epoch's disk count (`algorithms.md` §2.6).
    #[default]
    Hashed,
}

/// Why a placement log or a scaling operation was rejected.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// The initial disk list is empty.
    #[error("a store needs at least one disk")]
    NoDisks,
    /// A scaling operation lists no disks.
    #[error("a scaling operation must name at least one disk")]
    EmptyOp,
    /// A disk appears twice in the initial list or in one operation.
    #[error("disk {disk} is listed twice")]
    DuplicateDisk {
        /// The repeated disk.
        disk: DiskId,
    },
    /// An added disk id is already in use, or was used by a disk removed earlier (ids are never
    /// reused).
    #[error("disk id {disk} is already in use or was used before; disk ids are never reused")]
    DiskIdReused {
        /// The offending disk.
        disk: DiskId,
    },
    /// A removed disk is not part of the current epoch.
    #[error("disk {disk} is not part of the current disk set")]
    UnknownDisk {
        /// The offending disk.
        disk: DiskId,
    },
    /// The operation would remove every disk.
    #[error("removing disks {disks:?} would leave the store with no disk")]
    RemovesAll {
        /// The disks the operation named.
        disks: Vec<DiskId>,
    },
    /// The log holds as many operations as an [`Epoch`] can count.
    #[error("the placement log is full ({max} operations)")]
    TooManyOps {
        /// The limit.
        max: u32,
    },
}

/// The initial disk set plus the append-only list of scaling operations, with the derived
/// logical-index → physical-disk table of every epoch.
///
/// Logical indices are what placement computes; the per-epoch table maps them to [`DiskId`]s, so
/// renumbering on removal never moves data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementLog {
    variant: PlacementVariant,
    initial: Vec<DiskId>,
    ops: Vec<ScaleOp>,
    /// `epochs[j]` describes epoch `j`; `epochs.len() == ops.len() + 1`.
    epochs: Vec<EpochTable>,
}

/// The derived description of one epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
struct EpochTable {
    /// Physical disks in logical order.
    disks: Vec<DiskId>,
    /// How this epoch was reached from the previous one.
    step: Step,
}

/// The REMAP step into an epoch, in logical indices.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    /// Epoch 0.
    Initial,
    /// Disks were appended; the previous epoch had `prev` disks.
    Add { prev: u32 },
    /// The previous epoch's logical indices `removed` (sorted) were dropped.
    Remove { removed: Vec<u32> },
}

impl PlacementLog {
    /// A log of the initial disk set, in logical order, with the default
    /// [`PlacementVariant::Hashed`].
    pub fn new(initial: Vec<DiskId>) -> Result<Self, PlacementError> {
        Self::with_variant(initial, PlacementVariant::default())
    }

    /// A log of the initial disk set using `variant`.
    pub fn with_variant(
        initial: Vec<DiskId>,
        variant: PlacementVariant,
    ) -> Result<Self, PlacementError> {
        if initial.is_empty() {
            return Err(PlacementError::NoDisks);
        }
        check_unique(&initial)?;
        let table = EpochTable { disks: initial.clone(), step: Step::Initial };
        Ok(Self { variant, initial, ops: Vec::new(), epochs: vec![table] })
    }

    /// The log's placement variant.
    #[must_use]
    pub fn variant(&self) -> PlacementVariant {
        self.variant
    }

    /// The latest epoch (the number of operations logged).
    #[must_use]
    pub fn current_epoch(&self) -> Epoch {
        // `push` refuses to grow the log past `u32::MAX` operations.
        Epoch(self.ops.len() as u32)
    }

    /// The disks of `epoch` in logical order. An epoch after the current one is clamped to it.
    #[must_use]
    pub fn disks(&self, epoch: Epoch) -> &[DiskId] {
        &self.table(epoch).disks
    }

    /// Appends a scaling operation and returns the epoch it starts.
    pub fn push(&mut self, op: ScaleOp) -> Result<Epoch, PlacementError> {
        if self.ops.len() >= u32::MAX as usize {
            return Err(PlacementError::TooManyOps { max: u32::MAX });
        }
        let current = self.disks(self.current_epoch());
        let table = match &op {
            ScaleOp::Add { disks } => {
                if disks.is_empty() {
                    return Err(PlacementError::EmptyOp);
                }
                check_unique(disks)?;
                if let Some(&disk) = disks.iter().find(|d| self.ever_used(**d)) {
                    return Err(PlacementError::DiskIdReused { disk });
                }
                let mut all = current.to_vec();
                all.extend_from_slice(disks);
                EpochTable { step: Step::Add { prev: current.len() as u32 }, disks: all }
            }
            ScaleOp::Remove { disks } => {
                if disks.is_empty() {
                    return Err(PlacementError::EmptyOp);
                }
                check_unique(disks)?;
                let mut removed = Vec::with_capacity(disks.len());
                for &disk in disks {
                    match current.iter().position(|&d| d == disk) {
                        Some(i) => removed.push(i as u32),
                        None => return Err(PlacementError::UnknownDisk { disk }),
                    }
                }
                if removed.len() == current.len() {
                    return Err(PlacementError::RemovesAll { disks: disks.clone() });
                }
                removed.sort_unstable();
                let survivors = current.iter().copied().filter(|d| !disks.contains(d)).collect();
                EpochTable { disks: survivors, step: Step::Remove { removed } }
            }
        };
        self.ops.push(op);
        self.epochs.push(table);
        Ok(self.current_epoch())
    }

    /// The disk that holds block `block` of the object with `seed`, created in `first_epoch`, as
    /// of epoch `at`.
    ///
    /// Costs one hash for the initial placement plus at most one per operation between
    /// `first_epoch` and `at`; allocates nothing. `at` after the current epoch is clamped to it,
    /// and an `at` before `first_epoch` answers for `first_epoch` (where the object was written).
    #[must_use]
    pub fn locate(&self, seed: u64, first_epoch: Epoch, block: BlockIndex, at: Epoch) -> DiskId {
        let current = self.current_epoch();
        let first = first_epoch.min(current);
        let at = at.clamp(first, current);
        let d = self.locate_logical(seed, first, block, at);
        self.table(at).disks[d as usize]
    }

    /// The operations logged so far; operation `j - 1` starts epoch `j`.
    #[must_use]
    pub fn ops(&self) -> &[ScaleOp] {
        &self.ops
    }

    /// The initial disk set (epoch 0) in logical order.
    #[must_use]
    pub fn initial(&self) -> &[DiskId] {
        &self.initial
    }

    /// Every disk id that appears anywhere in the log, current or removed.
    fn ever_used(&self, disk: DiskId) -> bool {
        self.initial.contains(&disk)
            || self.ops.iter().any(|op| match op {
                ScaleOp::Add { disks } => disks.contains(&disk),
                ScaleOp::Remove { .. } => false,
            })
    }

    fn table(&self, epoch: Epoch) -> &EpochTable {
        let last = self.epochs.len() - 1;
        &self.epochs[(epoch.0 as usize).min(last)]
    }

    /// The logical index of the block's disk in epoch `at`; requires
    /// `first <= at <= current_epoch()`.
    fn locate_logical(&self, seed: u64, first: Epoch, block: BlockIndex, at: Epoch) -> u32 {
        let mut d = self.initial_logical(seed, first, block);
        for j in first.0 + 1..=at.0 {
            d = self.step_logical(seed, block, Epoch(j), d);
        }
        d
    }

    /// The logical disk of a block of an object created in `first`.
    pub(crate) fn initial_logical(&self, seed: u64, first: Epoch, block: BlockIndex) -> u32 {
        match self.variant {
            PlacementVariant::Hashed => {
                let n = self.table(first).disks.len() as u32;
                reduce(hash_words(&[seed, u64::from(block.0), u64::from(first.0)]), n)
            }
        }
    }

    /// REMAP into epoch `j` (≥ 1): the logical disk in `j` of a block on logical disk `d` in
    /// `j - 1`.
    pub(crate) fn step_logical(&self, seed: u64, block: BlockIndex, j: Epoch, d: u32) -> u32 {
        match self.variant {
            PlacementVariant::Hashed => {
                let table = self.table(j);
                let n = table.disks.len() as u32;
                let draw = || reduce(hash_words(&[seed, u64::from(block.0), u64::from(j.0)]), n);
                match &table.step {
                    Step::Initial => d,
                    Step::Add { prev } => {
                        let c = draw();
                        if c >= *prev { c } else { d }
                    }
                    Step::Remove { removed } => match removed.binary_search(&d) {
                        Ok(_) => draw(),
                        Err(below) => d - below as u32,
                    },
                }
            }
        }
    }
}

/// Rejects a list with a repeated disk.
fn check_unique(disks: &[DiskId]) -> Result<(), PlacementError> {
    for (i, d) in disks.iter().enumerate() {
        if disks[..i].contains(d) {
            return Err(PlacementError::DuplicateDisk { disk: *d });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::fmt::Write as _;

    use isochron_base::mix::SplitMix64;

    use super::*;

    fn ids(v: &[u16]) -> Vec<DiskId> {
        v.iter().map(|&d| DiskId(d)).collect()
    }

    /// The fixed log the golden vectors are computed on. Never change it.
    fn golden_log() -> PlacementLog {
        let mut log = PlacementLog::new(ids(&[10, 11, 12, 13])).unwrap();
        log.push(ScaleOp::Add { disks: ids(&[20]) }).unwrap();
        log.push(ScaleOp::Add { disks: ids(&[21, 22]) }).unwrap();
        log.push(ScaleOp::Remove { disks: ids(&[11]) }).unwrap();
        log.push(ScaleOp::Add { disks: ids(&[23]) }).unwrap();
        log.push(ScaleOp::Remove { disks: ids(&[20, 13]) }).unwrap();
        log
    }

    const GOLDEN_SEEDS: [u64; 4] = [0, 1, 0xDEAD_BEEF_0BAD_F00D, u64::MAX];
    const GOLDEN_HEADER: &str = "seed,first_epoch,block,epoch,disk";

    fn golden_csv() -> String {
        let log = golden_log();
        let mut out = String::from(GOLDEN_HEADER);
        out.push('\n');
        for seed in GOLDEN_SEEDS {
            for first in 0..=2 {
                for block in (0..12).chain([1000, 65_537, u32::MAX]) {
                    for at in first..=log.current_epoch().0 {
                        let disk = log.locate(seed, Epoch(first), BlockIndex(block), Epoch(at));
                        writeln!(out, "{seed},{first},{block},{at},{disk}").unwrap();
                    }
                }
            }
        }
        out
    }

    /// Regenerates `testdata/placement_v1.csv`. Run only when adding a new golden file, never to
    /// "fix" a failing `golden_vectors` (that failure means stored blocks would be lost):
    /// `cargo test -p isochron-store -- --ignored regenerate_placement_golden`.
    #[test]
    #[ignore = "writes testdata/placement_v1.csv"]
    #[allow(clippy::disallowed_methods)] // A test tool writing a fixture, not core IO.
    fn regenerate_placement_golden() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/placement_v1.csv");
        std::fs::write(path, golden_csv()).unwrap();
    }

    #[test]
    fn golden_vectors() {
        let log = golden_log();
        let csv = include_str!("../testdata/placement_v1.csv");
        let mut lines = csv.lines();
        assert_eq!(lines.next(), Some(GOLDEN_HEADER));
        let mut rows = 0;
        for line in lines {
            let f: Vec<u64> = line.split(',').map(|x| x.parse().unwrap()).collect();
            let [seed, first, block, at, disk] = f[..] else { panic!("bad row {line}") };
            let got =
                log.locate(seed, Epoch(first as u32), BlockIndex(block as u32), Epoch(at as u32));
            assert_eq!(got, DiskId(disk as u16), "row {line}");
            rows += 1;
        }
        assert!(rows > 500, "only {rows} golden rows");
        assert_eq!(csv, golden_csv());
    }

    #[test]
    fn log_validation() {
        assert_eq!(PlacementLog::new(vec![]), Err(PlacementError::NoDisks));
        assert_eq!(
            PlacementLog::new(ids(&[1, 2, 1])),
            Err(PlacementError::DuplicateDisk { disk: DiskId(1) })
        );
        let mut log = PlacementLog::new(ids(&[1, 2, 3])).unwrap();
        assert_eq!(log.push(ScaleOp::Add { disks: vec![] }), Err(PlacementError::EmptyOp));
        assert_eq!(log.push(ScaleOp::Remove { disks: vec![] }), Err(PlacementError::EmptyOp));
        assert_eq!(
            log.push(ScaleOp::Add { disks: ids(&[2]) }),
            Err(PlacementError::DiskIdReused { disk: DiskId(2) })
        );
        assert_eq!(
            log.push(ScaleOp::Add { disks: ids(&[4, 4]) }),
            Err(PlacementError::DuplicateDisk { disk: DiskId(4) })
        );
        assert_eq!(
            log.push(ScaleOp::Remove { disks: ids(&[9]) }),
            Err(PlacementError::UnknownDisk { disk: DiskId(9) })
        );
        assert!(matches!(
            log.push(ScaleOp::Remove { disks: ids(&[3, 1, 2]) }),
            Err(PlacementError::RemovesAll { .. })
        ));
        assert_eq!(log.current_epoch(), Epoch(0));
        assert_eq!(log.push(ScaleOp::Remove { disks: ids(&[2]) }), Ok(Epoch(1)));
        assert_eq!(log.disks(Epoch(1)), ids(&[1, 3]));
        // A removed id can never come back.
        assert_eq!(
            log.push(ScaleOp::Add { disks: ids(&[2]) }),
            Err(PlacementError::DiskIdReused { disk: DiskId(2) })
        );
        assert_eq!(log.push(ScaleOp::Add { disks: ids(&[7, 5]) }), Ok(Epoch(2)));
        assert_eq!(log.disks(Epoch(2)), ids(&[1, 3, 7, 5]));
        assert_eq!(log.disks(Epoch(0)), ids(&[1, 2, 3]));
        assert_eq!(log.disks(Epoch(99)), ids(&[1, 3, 7, 5]));
        assert_eq!(log.initial(), ids(&[1, 2, 3]));
        assert_eq!(log.ops().len(), 2);
    }

    #[test]
    fn locate_clamps_epochs() {
        let log = golden_log();
        for b in 0..100 {
            let b = BlockIndex(b);
            let cur = log.current_epoch();
            assert_eq!(log.locate(7, Epoch(0), b, Epoch(99)), log.locate(7, Epoch(0), b, cur));
            assert_eq!(log.locate(7, Epoch(3), b, Epoch(1)), log.locate(7, Epoch(3), b, Epoch(3)));
        }
    }

    /// Upper 0.999 quantile of χ² with `df` degrees of freedom (Wilson–Hilferty).
    fn chi2_999(df: f64) -> f64 {
        let z = 3.090_232;
        let a = 2.0 / (9.0 * df);
        df * (1.0 - a + z * a.sqrt()).powi(3)
    }

    fn chi2_uniform(counts: &[u64]) -> f64 {
        let total: u64 = counts.iter().sum();
        let e = total as f64 / counts.len() as f64;
        counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
    }

    #[test]
    fn wilson_hilferty_matches_table() {
        // algorithms.md §1 quotes ≈ 24.5, 37.8, 61.2, 103.5 for df 7, 15, 31, 63.
        for (df, q) in [(7.0, 24.3), (15.0, 37.7), (31.0, 61.1), (63.0, 103.4)] {
            assert!((chi2_999(df) - q).abs() < 0.3, "df {df}: {}", chi2_999(df));
        }
    }

    /// P1, P3–P6 of algorithms.md §2.8 over 100 random scaling operations on 100k blocks of one
    /// object. Blocks are advanced one REMAP step per operation (so the test stays fast in debug
    /// builds), and `locate` is checked against that incremental state on a sample.
    #[test]
    fn properties_over_random_ops() {
        const BLOCKS: u32 = 100_000;
        let seed = 0x1503_C402_5EED_0001;
        let mut rng = SplitMix64::new(42);
        let mut log = PlacementLog::new((0..8).map(DiskId).collect()).unwrap();
        let mut next_id = 8u16;
        let mut logical: Vec<u32> =
            (0..BLOCKS).map(|b| log.initial_logical(seed, Epoch(0), BlockIndex(b))).collect();

        let check_balance = |log: &PlacementLog, logical: &[u32], what: &str| {
            let n = log.disks(log.current_epoch()).len();
            let mut counts = vec![0u64; n];
            for &d in logical {
                assert!((d as usize) < n, "P1 violated: {d} >= {n}");
                counts[d as usize] += 1;
            }
            if n > 1 {
                let chi2 = chi2_uniform(&counts);
                let limit = chi2_999((n - 1) as f64);
                assert!(chi2 < limit, "{what}: χ² {chi2:.1} ≥ {limit:.1} over {n} disks");
            }
        };
        check_balance(&log, &logical, "initial");

        for op_no in 0..100 {
            let n = log.disks(log.current_epoch()).len();
            let add = n <= 2 || (n < 48 && rng.next_u64().is_multiple_of(2));
            let before: Vec<DiskId> = log.disks(log.current_epoch()).to_vec();
            let op = if add {
                let k = 1 + (rng.next_u64() % 4) as u16;
                let disks: Vec<DiskId> = (next_id..next_id + k).map(DiskId).collect();
                next_id += k;
                ScaleOp::Add { disks }
            } else {
                let k = 1 + (rng.next_u64() % 3).min(n as u64 - 2) as usize;
                let mut pool = before.clone();
                let disks = (0..k)
                    .map(|_| pool.swap_remove((rng.next_u64() % pool.len() as u64) as usize))
                    .collect();
                ScaleOp::Remove { disks }
            };
            let epoch = log.push(op.clone()).unwrap();
            let after = log.disks(epoch).to_vec();
            let mut moved = 0u64;
            for (b, d) in logical.iter_mut().enumerate() {
                let old = before[*d as usize];
                *d = log.step_logical(seed, BlockIndex(b as u32), epoch, *d);
                let new = after[*d as usize];
                if old != new {
                    moved += 1;
                    match &op {
                        ScaleOp::Add { disks } => assert!(disks.contains(&new), "P3 {op:?}"),
                        ScaleOp::Remove { disks } => assert!(disks.contains(&old), "P4 {op:?}"),
                    }
                } else if let ScaleOp::Remove { disks } = &op {
                    assert!(!disks.contains(&old), "block left on removed disk {old}");
                }
            }
            if let ScaleOp::Add { disks } = &op {
                let p = disks.len() as f64 / after.len() as f64;
                let n = f64::from(BLOCKS);
                let frac = moved as f64 / n;
                let sigma = (p * (1.0 - p) / n).sqrt();
                assert!((frac - p).abs() < 4.0 * sigma, "P5 op {op_no}: moved {frac} vs {p}");
            }
            check_balance(&log, &logical, &format!("after op {op_no} {op:?}"));
            for b in (0..BLOCKS).step_by(997) {
                let phys = after[logical[b as usize] as usize];
                assert_eq!(log.locate(seed, Epoch(0), BlockIndex(b), epoch), phys);
            }
        }
        assert_eq!(log.current_epoch(), Epoch(100));
    }

    /// Objects created in later epochs are placed uniformly over that epoch's disks.
    #[test]
    fn later_objects_use_their_first_epoch() {
        let log = golden_log();
        let first = Epoch(3);
        let n = log.disks(first).len();
        let mut counts = vec![0u64; n];
        for b in 0..20_000 {
            let disk = log.locate(99, first, BlockIndex(b), first);
            let i = log.disks(first).iter().position(|&d| d == disk).unwrap();
            counts[i] += 1;
        }
        assert!(chi2_uniform(&counts) < chi2_999((n - 1) as f64));
        let current: HashSet<DiskId> = log.disks(log.current_epoch()).iter().copied().collect();
        for b in 0..1000 {
            let disk = log.locate(99, first, BlockIndex(b), log.current_epoch());
            assert!(current.contains(&disk));
        }
    }
}
