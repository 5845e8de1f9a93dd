//! Live feeds, sans-IO: a published feed's *live edge* and its viewers (`docs/design/live.md`).
//!
//! A feed published over RTSP RECORD (RFC 2326 §10.11) is recorded as it arrives (XTREAM §2.2: a
//! write stream at a guaranteed rate) and watched live by many players at once. What this crate
//! decides, with no sockets and no clock of its own (`handle_*(now, …)` in, `poll_*` out, so the
//! server and a virtual-time test drive the same code):
//!
//! - [`chunk::ChunkPacker`]: the feed's units, as the recording numbers them, cut into small
//!   blocks of the store's own format (*chunks*), each held once and shared by every viewer;
//! - [`edge::Edge`]: which chunks are kept, where a joining viewer starts (the newest seek
//!   point), and which chunk goes to which viewer when;
//! - [`relay`]: the frames that carry a feed's chunks from the publisher's node to the other
//!   nodes of a cluster that serve it;
//! - [`srt`]: what an SRT publisher's stream id asks, and its messages of MPEG-TS cut into the
//!   RTP payloads a feed takes.
//!
//! Not here: the chunks' bytes once sealed (the glue holds them), the viewers' pacing and RTP
//! stamping (the sender's pacer, as for any stream), the RTSP dialog (the node core).

pub mod chunk;
pub mod edge;
pub mod relay;
pub mod srt;

pub use chunk::{Chunk, ChunkConfig, ChunkInfo, ChunkPacker};
pub use edge::{Edge, EdgeConfig, EdgeOutput, VIEWER_DELAY};
