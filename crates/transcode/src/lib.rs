//! Renditions: the server-side processing of Gennart et al. (format and resolution conversion,
//! rate adaptation) as a ladder of H.264 + AAC renditions of one title.
//!
//! Every rung is encoded with closed GOPs whose IDR frames fall at the **same presentation
//! times** in every rung (every [`LadderPlan::idr_interval`], 2 s by default), and the same
//! audio, so that a player or the server can switch from one rung to another at any key frame
//! without a gap (the alignment HLS requires of variant streams, RFC 8216 §6.2.4, and DASH of
//! an adaptation set's representations, ISO/IEC 23009-1 §7.2.2).
//!
//! The crate is split the way the rest of isochron is:
//! - [`ladder`] (pure): the rungs, the ladder a user asks for, the source as `ffprobe` describes
//!   it, the checks (no rung larger than the source, no unknown rung, something to decode) and
//!   the one `ffmpeg` command that decodes the source once and encodes every rung from it;
//! - [`progress`] (pure): `ffmpeg -progress` key=value lines to a fraction done;
//! - [`process`] (IO, quarantined): running `ffprobe` and the supervised `ffmpeg` (niced, a
//!   thread bound if asked, killed when dropped, its error output kept for the error).
//!
//! Why a supervised `ffmpeg` and not a library binding: `docs/design/renditions.md`.

pub mod ladder;
pub mod process;
pub mod progress;

pub use ladder::{Budget, Ladder, LadderError, LadderPlan, Rung, SourceInfo};
pub use process::{TranscodeError, probe, run_ladder};
pub use progress::ProgressParser;
