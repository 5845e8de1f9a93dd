//! Identifiers, unit newtypes, the time type and the IO failure shared by every isochron crate.
//!
//! Why a crate of its own: the sans-IO cores (`media`, `rtp`, `rtsp`, `store`, `sched`) and the
//! drivers (`server`, the simulator, tests) must agree on what a block key, a stream id or an
//! instant *is* without depending on each other. Bare integers invite mixing a block index with a
//! packet number, so every id and every unit gets a newtype here (rustls: "avoid type aliases").
//!
//! This crate does not read clocks, allocate threads or do IO: [`Instant`] is a plain number that
//! drivers produce from their own clock, which is what lets the simulator run in virtual time.

pub mod failure;
pub mod ids;
pub mod latency;
pub mod mix;
pub mod position;
pub mod replicas;
pub mod time;
pub mod tracks;
pub mod units;

pub use failure::{IoFailure, IoFailureKind};
pub use ids::{BlockIndex, BlockKey, DiskId, Epoch, Gsn, NodeId, ObjectId, RunId, StreamId};
pub use latency::LatencySummary;
pub use position::Position;
pub use replicas::{MAX_REPLICAS, Replicas};
pub use time::{Instant, MediaTime, Pace};
pub use tracks::{MAX_TRACKS, TrackSeqs};
pub use units::{BitRate, Bytes, MbPerSec, ParseRateError};
