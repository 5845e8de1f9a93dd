//! isochron's sender cores: what a sender thread decides, as state machines it drives.
//!
//! Why a crate of its own: the sender thread (`isochron-dataplane`) owns sockets, a clock and a
//! channel; what it decides — which packet of which stream is due when ([`pacer`], Yima §2.2's
//! shared clock and §2.5's paced rate), which packets it keeps to answer a NACK ([`rtx`], RBEC,
//! Yima §2.6 and RFC 4585 §6.2.1), and in which order a relayed session's packets leave its
//! origin ([`reseq`]) — is sans-IO (`handle_*(now, …)` / `poll_*()`), and lives here under the
//! same guard as the other cores (`clippy.toml`: no clock, no sleep, no thread, no file, no
//! socket). So the server, the tests and a virtual-time harness drive the same code.
//!
//! The modules are independent of each other; each is fed by the sender thread alone.

pub mod pacer;
pub mod reseq;
pub mod rtx;
