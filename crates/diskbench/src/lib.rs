//! isochron's disk bench. Dummy-stream disk benchmarks in real time: XTREAM's evaluation (§3: "dummy" CBR and VBR
//! streams, read or write, not sent over the network; Table 1, Fig. 5) on real or emulated disks.
//!
//! Why: the scheduler core (`isochron_sched::CycleScheduler`) is measured in virtual time by
//! `isochron_sched::sim` against a disk *model*; this crate drives the same core in real time
//! with the real per-disk IO threads (`isochron_diskio::IoWorker`, `O_DIRECT` reads of block
//! files), so that what admission predicts from a measured profile (Diskbench) can be compared
//! with what a real disk does. It is what `isochron bench-disk` and `isochron profile-disk` run.
//!
//! * [`data`]: a throw-away store of random blocks laid out as a store lays them out (the read
//!   pool), its disks and their profiles;
//! * [`trace`]: VBR traces from a real MPEG-TS clip (`isochron_media::TsScanner`);
//! * [`run`](mod@run): one run: N streams of a workload arrive, are admitted (or not), and consumers take
//!   every block at its deadline, counting a miss when it is not in memory by then;
//! * [`search`]: MaxN, the most streams that run with no missed deadline (XTREAM Table 1), and
//!   how many each admission policy admits;
//! * [`plot`]: the profile's throughput-against-size plot (SVG).
//!
//! Not here: the network (no RTSP, no RTP; the RTSP bench is `isochron-loadgen`'s), and the
//! server's own scheduler thread.

pub mod data;
pub mod plot;
pub mod run;
pub mod search;
pub mod trace;

pub use data::{BenchStore, PrepareOptions};
pub use isochron_base::LatencySummary;
pub use run::{BenchConfig, BenchReport, run};
pub use search::{MaxNReport, SearchConfig, SearchRun, admitted_count, find_max_n};
pub use trace::{ClipTrace, TraceScale};

/// Re-exported for the binary, which does not depend on the scheduler crate itself.
pub use isochron_sched::admission::{AdmissionPolicy, Direction};
/// Re-exported for the binary.
pub use isochron_sched::profile::{Curve, DiskProfile};
/// Re-exported for the binary.
pub use isochron_sched::workload::WorkloadKind;
