//! isochron's load generator: RTSP/RTP clients for tests and benchmarks.
//!
//! [`client::Client`] is one RTSP session over UDP or interleaved TCP that records every packet
//! with its arrival time. The integration tests use it as an independent oracle of what the
//! server sends; `isochron bench` (Yima §3.1's emulation clients) builds on it.
//!
//! Not here: the server. This crate talks to any RTSP server over real sockets.

pub mod bench;
pub mod client;
pub mod diskbench;
pub mod latency;
pub mod recv;
pub mod sources;

pub use client::{Client, Collected, Incoming, MediaSink, PlayInfo, RtpPacket, Transport};
