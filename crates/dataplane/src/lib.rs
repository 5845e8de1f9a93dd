//! isochron's data plane: blocks from the disks to the wire, on a scheduler thread and K sender
//! threads.
//!
//! ```text
//!  session manager, recorders, reorganiser, HTTP          (isochron-server, isochron-http)
//!     │ SchedCommand                         ▲ SchedEvent through the SchedSink
//!     ▼                                      │
//!  scheduler thread (CycleScheduler + BlockCache) ──IoCommand──▶ per-disk IO threads
//!     │ SenderCommand::Block   ▲ BlockDone, Pace   ◀──ReadDone──┘  (isochron-diskio)
//!     ▼ (Senders: by stream)   │ PacerEvent through the SenderSink (wired by the server)
//!  K sender threads (each a Pacer, sendmmsg, its own socket) ──▶ UDP, or OutFrames to an RTSP
//!                                                                connection's writer
//! ```
//!
//! Why a crate of its own: this is the hot path, where a stream keeps or misses its deadlines,
//! and it has two owners that must stay separable from the control plane around them (RTSP
//! sessions, recordings, reorganisation, HTTP in `isochron-server` and `isochron-http`). The
//! scheduler thread ([`sched_thread`]) is the one owner of the XTREAM cycle scheduler and its
//! block cache; each sender thread ([`sender`]) is the one owner of a [`pacer`] and the
//! transports of the streams hashed to it ([`shards`]). Each is fed a closed command enum over
//! one channel. What a sender thread decides — the [`pacer`], the retransmission buffer
//! ([`rtx`]) and the relay resequencer ([`reseq`]) — is sans-IO and lives in `isochron-pacing`
//! (re-exported here), under the cores' guard.
//!
//! The modules depend downward only: [`clock`] ← [`net`] ← [`sender`] ←
//! [`shards`] ← [`sched_thread`] (which also keeps the [`admission_log`]). The scheduler thread hands blocks
//! down to the sender ([`sender::SenderCommand::Block`]); nothing here names a command type of a
//! higher owner. What goes up — a block sent, a pace change, the end of a stream from the sender;
//! a failed read from the scheduler thread — is an event of the lower module
//! ([`pacer::PacerEvent`], [`sched_thread::SchedEvent`]) passed to a sink given at construction
//! ([`sender::SenderSink`], [`sched_thread::SchedSink`]), which the server wires to the owners'
//! channels on the emitting thread (no extra thread hop).
//!
//! Not here: the async runtime. tokio appears only as the reply channels (`oneshot`, `mpsc`) in
//! the command enums and a TCP connection's frame queue; the threads are plain OS threads.

pub mod admission_log;
pub mod clock;
pub mod net;
pub mod sched_thread;
pub mod sender;
pub mod shards;

pub use isochron_pacing::{pacer, reseq, rtx};
