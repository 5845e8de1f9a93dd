//! isochron's node core (sans-IO): one node's session decisions.
//!
//! Between the protocol cores and the threads sits what a node *decides*: which run a PLAY
//! starts and where (RFC 2326 §10.5, a seek point; §12.34 trick play; §12.35 speed), how
//! sequence numbers continue across seeks, where each track goes, what a share of a cluster
//! session reads and sends (Yima §2.2), and which blocks a node takes over when another is lost
//! and gives back when it returns. [`NodeCore`] holds those decisions in quinn's shape: every
//! input is a `handle_*(now, …)` call, every consequence an output of [`NodeCore::poll_output`]
//! ([`NodeOutput`]: an answer, work for the scheduler or the sender in their own cores' words,
//! a message for a peer). It
//! reads no clock, opens no socket and holds no channel, so the server's session task, the
//! simulator and the tests drive the same decisions.
//!
//! ```text
//!   RTSP requests ─┐                        ┌─▶ Respond (the request's ticket)
//!   RTCP reports  ─┤   ┌──────────────────┐ ├─▶ Admit, Read(ReadOp)        → the cycle scheduler
//!   sender/sched  ─┼──▶│ NodeCore          │─┼─▶ AddStream, Send(StreamOp)  → the pacer
//!   peers, etcd   ─┤   │  ServerCore (RTSP)│ ├─▶ Transmit                   → a peer
//!   timer         ─┘   │  ClusterCore      │ └─▶ CloseConn                  → an RTSP connection
//!                      └──────────────────┘
//! ```
//!
//! A title played from its ladder of renditions switches between them as its player's reports
//! say the path allows ([`abr`]).
//!
//! Objects and placement come through a [`Catalog`] the owner implements (the server: its
//! library and shared store; a test: objects in memory).

pub mod abr;
mod core;
mod entry;
mod output;
mod report;

pub use crate::core::{AbrStats, FeedEvent, NodeConfig, NodeCore, TakeoverStats};
pub use crate::entry::{Catalog, ObjectEntry};
pub use crate::output::{NodeOutput, Ticket, Transport};
pub use crate::report::{ClusterInfo, MemberSummary, SessionInfo};
