//! isochron's load generator: RTSP/RTP clients for tests and benchmarks.
//!
//! [`client::Client`] is one RTSP session over UDP or interleaved TCP that records every packet
//! with its arrival time. The integration tests use it as an independent oracle of what the
//! server sends; `isochron bench` (Yima §3.1's emulation clients) builds on it, for MP2T
//! objects and for native ones (one RTP stream per track, described by
//! [`isochron_rtsp::sdp::parse`]).
//!
//! [`player::Player`] is the sans-IO core of `isochron play`: a jitter buffer that restores the
//! global order of a session received from several cluster nodes, the PCR playout clock, and
//! per-source counts with each node's LSN gaps ([`sources`]).
//!
//! [`testbed::Testbed`] builds a network of Linux namespaces on one machine (a bridge, hosts
//! on veth pairs, links shaped with `tc`, UDP loss with nftables) for the integration tests
//! and `isochron bench --shape`.
//!
//! Not here: the server. This crate talks to any RTSP server over real sockets.

pub mod bench;
pub mod client;
pub mod player;
pub mod reception;
pub mod recv;
pub mod sources;
pub mod testbed;

pub use client::{
    Client, Collected, Incoming, MediaSink, PlayInfo, RtpInfoEntry, RtpPacket, Transport,
};
pub use isochron_rtsp::sdp::parse::Presentation;
