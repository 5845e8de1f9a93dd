//! isochron's integration tests, one module per subject, in one test binary.
//!
//! Why one binary: most of these tests wait — on a player that plays a clip in real time, on a
//! cluster that detects a dead node, on a session timeout — and use little CPU while they do. As
//! separate binaries, run one after the other by `cargo test`, their waits added up (32 minutes on
//! two cores for 15 minutes of CPU); in one binary the harness runs them side by side, and the
//! binary is linked once. Tests that must not share the machine with others of their kind say so
//! with a lock in [`common`] (the cluster tests run one cluster at a time), and each takes its
//! share of the machine with [`common::load`]. Tests that measure capacity or timing (the bench,
//! pacing, CineGrid, admission and disk-bench tests) are binaries of their own: they need the
//! machine to themselves, and `cargo test` runs binaries one at a time.
//!
//! Run one subject with `cargo test --release -p isochron --test it cluster::`, one test with its
//! full name.

#![allow(clippy::print_stderr)]

#[path = "../common/mod.rs"]
mod common;

mod api;
mod auth;
mod churn;
mod cluster;
mod crash;
mod dashboard;
mod http;
mod limits;
mod live;
mod live_probe;
mod native;
mod play;
mod players;
mod protocol;
mod recording;
mod renditions;
mod replication;
mod scaling;
mod security;
mod simulate;
mod store;
mod tls;
