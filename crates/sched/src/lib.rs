//! isochron's block scheduler and shared block cache, as a sans-IO core.
//!
//! The scheduler decides which block each stream needs next, from which disk, by when; the cache
//! keeps blocks in memory with a reference count of the streams using them (Yima's file I/O
//! module) and counts `B_disk` / `B_cache`. Neither performs IO nor reads a clock: the server's
//! scheduler thread, the simulator and tests drive the same [`Scheduler`] through
//! `handle_*(now, …)` inputs and `poll_*()` outputs.
//!
//! Not here: the disk threads that carry reads out (`isochron-diskio`), and pacing (the server's
//! sender thread).

pub mod admission;
pub mod cache;
pub mod cycle;
pub mod profile;
pub mod scheduler;
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
pub use profile::{Curve, DiskModel, DiskProfile, ProfileError};
pub use scheduler::{
    Admission, Anchor, Event, IoRequest, ObjectPlan, OpenStream, PlannedBlock, ReadDone,
    RejectReason, SchedConfig, SchedStats, Scheduler,
};
