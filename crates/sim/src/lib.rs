//! isochron's discrete-event architecture simulator and capacity planner, as a pure library.
//!
//! Why a crate of its own: isochron needs a deterministic discrete-event engine that
//! models the architectures of Gennart, Messerli and Hersch (*Performances of multiprocessor
//! multidisk architectures for continuous media storage*): components with measured
//! elementary-operation costs (disks, SCSI buses, backplane bus, processors, compression
//! circuits, links, the server interface processor), composed into the paper's operations on
//! its point-to-point and shared-bus architectures, so that a design can be judged before it is
//! built; and a capacity planner that answers "how many streams per node, and how many nodes"
//! from a format table (CineGrid), measured disk profiles and isochron's own admission and
//! scheduler cores (`isochron-sched`).
//!
//! * [`scenario`]: every parameter, Table 2 as the default, TOML overrides;
//! * [`engine`]: the event engine (resources, FIFO queues, multi-resource steps, seeded seeks);
//! * [`model`]: the architectures and operations as resources and strand routes; analytic bounds;
//! * [`experiment`]: the throughput sweep (Fig. 4, 6) and the jitter experiment (Fig. 5);
//! * [`plot`]: the figures as SVG text;
//! * [`plan`]: the format table and the capacity planner.
//!
//! Like the other cores, nothing here reads a clock, sleeps, spawns or does IO: time is
//! virtual, randomness comes from the scenario's seed, and files are read and written by the
//! `isochron simulate` and `isochron plan` commands. The same scenario and seed give the same
//! report, byte for byte.

pub mod engine;
pub mod experiment;
pub mod model;
pub mod plan;
pub mod plot;
pub mod scenario;

pub use experiment::{Jitter, Point, Sweep, jitter, sweep, throughput};
pub use model::{Architecture, Component, Machine, Operation, network_bound};
pub use scenario::{Scenario, ScenarioError};
