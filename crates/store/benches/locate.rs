//! `PlacementLog::locate` throughput with 50 scaling operations in the log
//! (the target: ≥ 10^6 lookups/s on one core; results in `docs/results/scaling.md`).
//!
//! Each iteration looks up 1024 blocks of objects created in epoch 0 as of the last epoch, so
//! every lookup walks all 50 REMAP steps (the worst case). Criterion reports elements/s =
//! lookups/s.
//!
//! ```sh
//! cargo bench -p isochron-store --bench locate -- --quick
//! ```

// `criterion_group!` generates an undocumented public function.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use isochron_base::mix::SplitMix64;
use isochron_base::{BlockIndex, DiskId};
use isochron_store::{Epoch, PlacementLog, PlacementVariant, ScaleOp};

const LOOKUPS: u32 = 1024;
const OPS: usize = 50;

/// A log of 50 random additions and removals over 8 to 40 disks (Hashed).
fn hashed_log() -> PlacementLog {
    let mut rng = SplitMix64::new(7);
    let mut log = PlacementLog::new((0..16).map(DiskId).collect()).expect("16 disks");
    let mut next = 16u16;
    while log.ops().len() < OPS {
        let disks = log.disks(log.current_epoch()).to_vec();
        let op = if disks.len() < 8 || (disks.len() < 40 && rng.next_u64().is_multiple_of(2)) {
            let k = 1 + (rng.next_u64() % 3) as u16;
            next += k;
            ScaleOp::Add { disks: (next - k..next).map(DiskId).collect() }
        } else {
            let victim = disks[(rng.next_u64() % disks.len() as u64) as usize];
            ScaleOp::Remove { disks: vec![victim] }
        };
        log.push(op).expect("valid op");
    }
    log
}

/// A Faithful log of 50 operations: alternately adding and removing one disk on 4 disks, the
/// most operations its randomness budget allows (about 2.2 bits each).
fn faithful_log() -> PlacementLog {
    let mut log =
        PlacementLog::with_variant((0..4).map(DiskId).collect(), PlacementVariant::Faithful)
            .expect("4 disks");
    let mut next = 4u16;
    while log.ops().len() < OPS {
        let op = if log.disks(log.current_epoch()).len() == 4 {
            next += 1;
            ScaleOp::Add { disks: vec![DiskId(next - 1)] }
        } else {
            ScaleOp::Remove { disks: vec![DiskId(next - 1)] }
        };
        log.push(op).expect("within the randomness budget");
    }
    log
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("locate_50_ops");
    group.throughput(Throughput::Elements(u64::from(LOOKUPS)));
    for (name, log) in [("hashed", hashed_log()), ("faithful", faithful_log())] {
        let at = log.current_epoch();
        assert_eq!(at, Epoch(OPS as u32));
        let mut seed = 0x5EED_u64;
        group.bench_function(name, |b| {
            b.iter(|| {
                seed = seed.wrapping_add(1);
                let mut acc = 0u32;
                for i in 0..LOOKUPS {
                    let d = log.locate(black_box(seed), Epoch(0), BlockIndex(i), at);
                    acc = acc.wrapping_add(u32::from(d.0));
                }
                black_box(acc)
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
