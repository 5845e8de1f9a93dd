//! `isochron bench`: emulation clients, resource sampling, N_max and the bottleneck (Yima §3;
//! He et al.).
//!
//! Why: the seed papers judge a media server by how many concurrent streams it serves without a
//! hiccup (Yima's N_max, Figure 3) and by which resource runs out first (He et al.). This module
//! measures both against any RTSP server, with clients that behave like players:
//!
//! * [`playout`]: the player of an emulation client, consuming the MPEG-TS by its PCR clock
//!   behind a playout buffer and counting starvations;
//! * [`native_playout`]: the same player for a native presentation (one RTP stream per track,
//!   from MP4 or Matroska), consuming each track by its RTP timestamps from `RTP-Info`'s start;
//! * [`mtfc`]: multi-threshold rate requests (Yima §2.5), sent with SET_PARAMETER;
//! * [`session`]: one client (the receive-path sink and the RTSP controller); [`digest`]: what
//!   an MP2T session received, checked against its file without keeping it;
//! * [`procfs`] and [`prom`]: the server side, from `/proc` and from the server's metrics;
//! * [`run`](mod@run): load shapes, the per-second samples, the N_max search;
//! * [`feed`]: a live feed published for each trial, whose viewers are the load;
//! * [`report`]: per-N aggregates and N_max; [`verdict`]: the bottleneck's rules;
//!   [`plot`]: Yima's Figure 3 panels, and with several sources (a cluster's nodes) Figure 4's
//!   cumulative per-node panels.
//!
//! Not here: the server, and the network namespaces of `--shape` (the binary).

pub mod digest;
pub mod feed;
pub mod mtfc;
pub mod native_playout;
pub mod playout;
pub mod plot;
pub mod procfs;
pub mod prom;
pub mod report;
pub mod run;
pub mod session;
pub mod verdict;

pub use isochron_base::LatencySummary;
pub use mtfc::{Mtfc, MtfcConfig};
pub use report::{PerN, Sample};
pub use run::{Load, RunConfig, RunResult, Trial, run};
pub use session::{ClientSettings, Outcome, Popularity, SessionRecord};
pub use verdict::{Bottleneck, Thresholds, Verdict, decide};
