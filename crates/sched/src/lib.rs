//! isochron's block scheduler and shared block cache, as a sans-IO core.
//!
//! The XTREAM cycle scheduler ([`CycleScheduler`]) decides which block each stream needs next,
//! from which disk, by when, admits streams from the disks' profiles ([`AdmissionController`]),
//! and keeps a share of every cycle for non-real-time work; the cache keeps blocks in memory with
//! a reference count of the streams using them (Yima's file I/O module) and counts `B_disk` /
//! `B_cache`. Nothing here performs IO or reads a clock: the server's scheduler thread,
//! `isochron bench-disk`, the virtual-time simulator and tests drive the same [`CycleScheduler`]
//! through `handle_*(now, …)` inputs and `poll_*()` outputs.
//!
//! Not here: the disk threads that carry reads out (`isochron-diskio`), and pacing (the server's
//! sender thread).

pub mod admission;
pub mod cache;
pub mod cycle;
pub mod plan;
pub mod profile;
pub mod sim;
pub mod workload;

pub use admission::{
    AdmissionConfig, AdmissionController, AdmissionPolicy, Decision, Direction, DiskLoad,
    DiskOverload, Overload, Placement, Refusal, StreamDemand,
};
pub use cache::{BlockCache, CacheStats, Pin};
pub use cycle::{
    CycleConfig, CycleEvent, CycleIo, CycleOrder, CycleReport, CycleScheduler, CycleStats, IoClass,
    NrtDone, NrtId, NrtKind, NrtRequest, OpenRecord, RecordBlock, StreamStats, WriteDone,
};
pub use plan::{Anchor, ObjectPlan, OpenStream, PlannedBlock, ReadDone, ReadOp};
pub use profile::{Curve, DiskModel, DiskProfile, ProfileError};
