//! isochron's cluster core (sans-IO): membership, session fan-out, shares, and the control wire
//! format (Yima §2.2, "Multi-node architecture").
//!
//! Why a crate of its own: a cluster's control logic — who reserves what, which node sends which
//! packet when, where a paused session resumes — is where distributed bugs hide, so it is written
//! as a state machine that never touches a socket, a clock or etcd. The server drives it with
//! real connections and etcd; the virtual-time harness in `tests/` drives several of them
//! over a simulated network with injected delays, losses and node failures (quinn's `Pair`,
//! generalised to N nodes).
//!
//! - [`core`]: [`ClusterCore`], one per node.
//! - [`message`]: the typed control messages.
//! - [`wire`]: their versioned, length-prefixed encoding.
//! - [`clock`]: clock offsets between nodes from the heartbeats (RFC 5905 §8).
//!
//! Not here: etcd (`isochron-etcd`), the connections' sockets
//! (`isochron-server`), and what a node's scheduler and sender do with a share.

pub mod clock;
pub mod core;
pub mod message;
pub mod wire;

pub use crate::core::{
    ClusterConfig, ClusterCore, Delivery, Health, LocalAction, LocalAnchor, LossCause, MemberInfo,
    MemberView, OpenSpec, SessionEvent, StartSpec, StopKind,
};
pub use crate::message::{
    Dest, Message, Refusal, Role, RunSpec, RunTracks, ShareFailure, ShareKey, ShareReport,
    TrackSpec, WallAnchor,
};
