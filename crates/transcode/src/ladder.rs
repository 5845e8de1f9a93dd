//! The ladder: which renditions, how each is encoded, and the checks against the source.
//!
//! A rung is named after its height (`1080p`, `720p` …) and carries a video bit rate; a ladder
//! is a list of rungs, highest first. [`LadderPlan::new`] checks a ladder against a source
//! (as `ffprobe -show_streams -show_format -print_format json` describes it, parsed by
//! [`SourceInfo::from_ffprobe_json`]) and [`LadderPlan::ffmpeg_args`] is the one `ffmpeg`
//! command that makes every rung: one decode, a `split` filter, one encoder per rung.
//!
//! Alignment: `-force_key_frames expr:gte(t,n_forced*D)` forces a key frame on the first frame
//! at or after every multiple of D seconds of the *source's* timeline, which every rung shares
//! (no rung changes the frame rate), and `-forced-idr 1` makes each an IDR; `-sc_threshold 0`
//! stops x264 adding key frames at scene cuts, which would differ between resolutions. x264's
//! GOPs are closed by default. Rate: x264's average-bit-rate mode with a VBV cap at 1.1× the
//! target over a 2-second buffer keeps each rung within a few percent of its target.

use std::fmt;
use std::time::Duration;

/// One rendition of a ladder: its name, its height in lines (width follows the source's aspect
/// ratio, rounded to even) and its video bit rate.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Rung {
    /// The rung's name, used in the rendition's object name (`TITLE~NAME`): `[a-z0-9]+`.
    pub name: String,
    /// Picture height in lines.
    pub height: u32,
    /// Target video bit rate, in bits per second.
    pub video_bps: u64,
}

/// The rungs isochron knows by name: height and a video bit rate in the range the common
/// authoring guides give for H.264 at 25–30 frames per second.
pub const RUNGS: &[(&str, u32, u64)] = &[
    ("2160p", 2160, 14_000_000),
    ("1440p", 1440, 8_000_000),
    ("1080p", 1080, 5_000_000),
    ("720p", 720, 3_000_000),
    ("480p", 480, 1_200_000),
    ("360p", 360, 800_000),
    ("240p", 240, 400_000),
];

/// The audio every rung carries: AAC-LC, stereo, at this rate (the same in every rung, so a
/// switch never changes the sound).
pub const AUDIO_BPS: u64 = 128_000;

impl Rung {
    /// The rung known by `name` (see [`RUNGS`]), or `NAME:RATE` for a known height at another
    /// video rate (`720p:2500k`, `480p:900000`, `1080p:6M`).
    pub fn parse(spec: &str) -> Result<Self, LadderError> {
        let (name, rate) = match spec.split_once(':') {
            Some((n, r)) => (n, Some(r)),
            None => (spec, None),
        };
        let &(known, height, default_bps) = RUNGS
            .iter()
            .find(|(n, _, _)| *n == name)
            .ok_or_else(|| LadderError::UnknownRung { rung: spec.to_owned() })?;
        let video_bps = match rate {
            None => default_bps,
            Some(r) => parse_rate(r).ok_or_else(|| LadderError::BadRate {
                rung: spec.to_owned(),
                rate: r.to_owned(),
            })?,
        };
        Ok(Self { name: known.to_owned(), height, video_bps })
    }
}

impl fmt::Display for Rung {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({} lines, {} kb/s)", self.name, self.height, self.video_bps / 1000)
    }
}

/// `2500k`, `6M`, `900000`: bits per second, at least 50 kb/s and at most 1 Gb/s.
fn parse_rate(s: &str) -> Option<u64> {
    let (digits, mult) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1_000),
        b'm' | b'M' => (&s[..s.len() - 1], 1_000_000),
        _ => (s, 1),
    };
    let v = digits.parse::<u64>().ok()?.checked_mul(mult)?;
    (50_000..=1_000_000_000).contains(&v).then_some(v)
}

/// The rungs a user asked for, highest first, each height once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ladder {
    rungs: Vec<Rung>,
}

impl Ladder {
    /// Parses `1080p,720p,480p` (or `720p:2500k,480p`): a comma-separated list of rungs.
    pub fn parse(spec: &str) -> Result<Self, LadderError> {
        let mut rungs = Vec::new();
        for part in spec.split(',').map(str::trim) {
            if part.is_empty() {
                return Err(LadderError::Empty { spec: spec.to_owned() });
            }
            let rung = Rung::parse(part)?;
            if rungs.iter().any(|r: &Rung| r.name == rung.name) {
                return Err(LadderError::Repeated { rung: rung.name });
            }
            rungs.push(rung);
        }
        rungs.sort_by_key(|r| std::cmp::Reverse(r.height));
        Ok(Self { rungs })
    }

    /// The rungs, highest first.
    #[must_use]
    pub fn rungs(&self) -> &[Rung] {
        &self.rungs
    }
}

/// What the ladder needs to know of a source: its picture, its length, whether it has sound.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SourceInfo {
    /// The first video stream's width.
    pub width: u32,
    /// The first video stream's height.
    pub height: u32,
    /// Its codec, as ffprobe names it (`h264`, `hevc`, `mpeg2video` …).
    pub video_codec: String,
    /// Whether the source has an audio stream.
    pub has_audio: bool,
    /// The container's duration, when it states one.
    pub duration: Option<Duration>,
}

impl SourceInfo {
    /// Reads `ffprobe -v error -print_format json -show_streams -show_format FILE`'s output.
    pub fn from_ffprobe_json(json: &str) -> Result<Self, LadderError> {
        let bad = |why: &str| LadderError::Undecodable { why: why.to_owned() };
        let v: serde_json::Value =
            serde_json::from_str(json).map_err(|e| bad(&format!("ffprobe said no JSON ({e})")))?;
        let streams = v["streams"].as_array().ok_or_else(|| bad("no streams"))?;
        let video = streams
            .iter()
            .find(|s| {
                s["codec_type"] == "video"
                    && s["disposition"]["attached_pic"].as_i64().unwrap_or(0) == 0
            })
            .ok_or_else(|| bad("no video stream"))?;
        let dim =
            |k: &str| video[k].as_u64().and_then(|d| u32::try_from(d).ok()).filter(|&d| d > 0);
        let (Some(width), Some(height)) = (dim("width"), dim("height")) else {
            return Err(bad("the video stream has no picture size"));
        };
        let duration = v["format"]["duration"]
            .as_str()
            .and_then(|d| d.parse::<f64>().ok())
            .filter(|d| d.is_finite() && *d > 0.0)
            .map(Duration::from_secs_f64);
        Ok(Self {
            width,
            height,
            video_codec: video["codec_name"].as_str().unwrap_or("unknown").to_owned(),
            has_audio: streams.iter().any(|s| s["codec_type"] == "audio"),
            duration,
        })
    }
}

/// How much of the machine a ladder job may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    /// Threads for the decoder, the filters and each encoder (`ffmpeg -threads`); 0 lets
    /// ffmpeg choose (one per core each).
    pub threads: u32,
    /// The job's `nice` level (0 to 19): playback threads, at 0, come first.
    pub nice: u8,
    /// Whether the job runs in the idle scheduling class (`SCHED_IDLE`): only on CPU time no
    /// other thread wants. A server's jobs do (`transcode.idle_class`); `isochron ingest`'s
    /// does not (nothing else of its own to keep first).
    pub idle: bool,
}

impl Default for Budget {
    /// ffmpeg's own thread counts at nice 10. One thread each is no budget worth having: the
    /// `split` and four scalers then share one filter thread and the decoder another, and a
    /// 1080p ladder took 1.9× as long as ffmpeg alone on two cores (`docs/design/renditions.md`);
    /// the nice level is what keeps playback first.
    fn default() -> Self {
        Self { threads: 0, nice: 10, idle: false }
    }
}

/// A ladder checked against a source: the encodes to run.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LadderPlan {
    /// The source.
    pub source: SourceInfo,
    /// The rungs, highest first.
    pub rungs: Vec<Rung>,
    /// The time between two IDR frames, the same in every rung.
    pub idr_interval: Duration,
}

impl LadderPlan {
    /// Checks `ladder` against `source`: no rung may be taller than the source (upscaling adds
    /// bits, not picture). `idr_interval` is between 0.5 and 10 s.
    pub fn new(
        source: SourceInfo,
        ladder: &Ladder,
        idr_interval: Duration,
    ) -> Result<Self, LadderError> {
        if !(Duration::from_millis(500)..=Duration::from_secs(10)).contains(&idr_interval) {
            return Err(LadderError::BadInterval { interval: idr_interval });
        }
        if let Some(r) = ladder.rungs().iter().find(|r| r.height > source.height) {
            return Err(LadderError::LargerThanSource {
                rung: r.name.clone(),
                rung_height: r.height,
                source_height: source.height,
            });
        }
        Ok(Self { source, rungs: ladder.rungs().to_vec(), idr_interval })
    }

    /// [`Self::new`] with the rungs taller than the source left out: a server-wide ladder
    /// (`transcode.ladder`) made of every title, whatever its size. An error only when no rung
    /// is left (it names the smallest).
    pub fn fitting(
        source: SourceInfo,
        ladder: &Ladder,
        idr_interval: Duration,
    ) -> Result<Self, LadderError> {
        let rungs: Vec<Rung> =
            ladder.rungs().iter().filter(|r| r.height <= source.height).cloned().collect();
        if rungs.is_empty() {
            return Self::new(source, ladder, idr_interval);
        }
        Self::new(source, &Ladder { rungs }, idr_interval)
    }

    /// The file name of `rung`'s output in the job's directory.
    #[must_use]
    pub fn output_name(rung: &Rung) -> String {
        format!("{}.mp4", rung.name)
    }

    /// The arguments of the one `ffmpeg` that decodes `input` once and writes every rung as an
    /// MP4 file (`moov` first) into `out_dir` ([`Self::output_name`]), with `-progress pipe:1`
    /// on stdout. MP4, not MPEG-TS: a rendition is then stored as native H.264 and AAC tracks,
    /// which RTSP sends as RFC 6184 and RFC 3640 RTP, HLS as CMAF fragments, and whose record
    /// keeps each track's picture size and codec parameters (what a master playlist lists).
    #[must_use]
    pub fn ffmpeg_args(&self, input: &str, out_dir: &str, budget: Budget) -> Vec<String> {
        let mut a: Vec<String> =
            ["-nostdin", "-hide_banner", "-v", "error", "-nostats", "-progress", "pipe:1", "-y"]
                .map(String::from)
                .to_vec();
        let threads = budget.threads.to_string();
        a.extend(["-threads".into(), threads.clone(), "-i".into(), input.into()]);
        let n = self.rungs.len();
        let mut graph = format!("[0:v:0]split={n}");
        for i in 0..n {
            graph.push_str(&format!("[s{i}]"));
        }
        for (i, r) in self.rungs.iter().enumerate() {
            // Width follows the aspect ratio, even (4:2:0 needs even sizes).
            graph.push_str(&format!(";[s{i}]scale=-2:{}[o{i}]", r.height));
        }
        a.extend(["-filter_threads".into(), threads.clone(), "-filter_complex".into(), graph]);
        let idr = self.idr_interval.as_secs_f64();
        for (i, r) in self.rungs.iter().enumerate() {
            let k = |bps: u64| format!("{}k", bps / 1000);
            a.extend(["-map".into(), format!("[o{i}]")]);
            if self.source.has_audio {
                a.extend(["-map".into(), "0:a:0".into()]);
            }
            a.extend(
                [
                    "-c:v",
                    "libx264",
                    "-preset",
                    "veryfast",
                    "-pix_fmt",
                    "yuv420p",
                    "-threads",
                    &threads,
                    "-b:v",
                    &k(r.video_bps),
                    "-maxrate",
                    &k(r.video_bps * 11 / 10),
                    "-bufsize",
                    &k(r.video_bps * 2),
                    "-force_key_frames",
                    &format!("expr:gte(t,n_forced*{idr})"),
                    "-forced-idr",
                    "1",
                    "-sc_threshold",
                    "0",
                ]
                .map(String::from),
            );
            if self.source.has_audio {
                a.extend(["-c:a", "aac", "-b:a", &k(AUDIO_BPS), "-ac", "2"].map(String::from));
            }
            a.extend(
                ["-movflags", "+faststart", "-f", "mp4"]
                    .map(String::from)
                    .into_iter()
                    .chain([format!("{out_dir}/{}", Self::output_name(r))]),
            );
        }
        a
    }
}

/// Why a ladder cannot be made, naming the rung at fault. The callers add the file.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LadderError {
    /// A rung name isochron does not know.
    #[error(
        "unknown rung {rung:?} (known: {}; a rate may follow, as in 720p:2500k)",
        RUNGS.iter().map(|r| r.0).collect::<Vec<_>>().join(", ")
    )]
    UnknownRung {
        /// The rung as given.
        rung: String,
    },
    /// A rung's rate that is not a bit rate.
    #[error("rung {rung:?}: {rate:?} is not a bit rate between 50k and 1000M")]
    BadRate {
        /// The rung as given.
        rung: String,
        /// The rate as given.
        rate: String,
    },
    /// An empty entry in the list.
    #[error("ladder {spec:?} has an empty rung")]
    Empty {
        /// The ladder as given.
        spec: String,
    },
    /// The same rung twice.
    #[error("rung {rung} is given twice")]
    Repeated {
        /// The rung.
        rung: String,
    },
    /// A rung taller than the source.
    #[error("rung {rung} ({rung_height} lines) is larger than the source ({source_height} lines)")]
    LargerThanSource {
        /// The rung.
        rung: String,
        /// Its height.
        rung_height: u32,
        /// The source's.
        source_height: u32,
    },
    /// A key-frame interval out of range.
    #[error("a key-frame interval of {interval:?} is outside 0.5 s to 10 s")]
    BadInterval {
        /// The interval asked for.
        interval: Duration,
    },
    /// The source cannot be decoded as video.
    #[error("cannot be decoded: {why}")]
    Undecodable {
        /// What ffprobe said or lacked.
        why: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROBE: &str = r#"{"streams":[
        {"index":0,"codec_name":"h264","codec_type":"video","width":1920,"height":1080,
         "disposition":{"attached_pic":0}},
        {"index":1,"codec_name":"aac","codec_type":"audio"}],
        "format":{"duration":"20.010667"}}"#;

    fn source() -> SourceInfo {
        SourceInfo::from_ffprobe_json(PROBE).unwrap()
    }

    #[test]
    fn reads_ffprobe() {
        let s = source();
        assert_eq!((s.width, s.height, s.has_audio), (1920, 1080, true));
        assert_eq!(s.video_codec, "h264");
        assert_eq!(s.duration, Some(Duration::from_secs_f64(20.010667)));
        let audio_only = r#"{"streams":[{"codec_type":"audio"}],"format":{}}"#;
        assert_eq!(
            SourceInfo::from_ffprobe_json(audio_only),
            Err(LadderError::Undecodable { why: "no video stream".into() })
        );
        assert!(SourceInfo::from_ffprobe_json("garbage").is_err());
    }

    #[test]
    fn parses_ladders_highest_first() {
        let l = Ladder::parse("480p, 1080p,720p:2500k").unwrap();
        let names: Vec<_> = l.rungs().iter().map(|r| (r.name.as_str(), r.video_bps)).collect();
        assert_eq!(names, [("1080p", 5_000_000), ("720p", 2_500_000), ("480p", 1_200_000)]);
        assert!(
            matches!(Ladder::parse("720p,999p"), Err(LadderError::UnknownRung { rung }) if rung == "999p")
        );
        assert!(matches!(Ladder::parse("720p,,480p"), Err(LadderError::Empty { .. })));
        assert!(matches!(Ladder::parse("720p,720p:1M"), Err(LadderError::Repeated { .. })));
        assert!(matches!(Ladder::parse("720p:fast"), Err(LadderError::BadRate { .. })));
        assert!(matches!(Ladder::parse("720p:10k"), Err(LadderError::BadRate { .. })));
    }

    #[test]
    fn refuses_a_rung_taller_than_the_source() {
        let mut s = source();
        s.height = 720;
        let l = Ladder::parse("1080p,480p").unwrap();
        let e = LadderPlan::new(s, &l, Duration::from_secs(2)).unwrap_err();
        assert_eq!(e.to_string(), "rung 1080p (1080 lines) is larger than the source (720 lines)");
    }

    #[test]
    fn one_decode_every_rung_aligned() {
        let l = Ladder::parse("720p,240p").unwrap();
        let p = LadderPlan::new(source(), &l, Duration::from_secs(2)).unwrap();
        let a = p.ffmpeg_args("in.mp4", "/tmp/o", Budget::default()).join(" ");
        assert!(
            a.contains("[0:v:0]split=2[s0][s1];[s0]scale=-2:720[o0];[s1]scale=-2:240[o1]"),
            "{a}"
        );
        assert_eq!(a.matches("expr:gte(t,n_forced*2)").count(), 2, "{a}");
        assert_eq!(a.matches("-map 0:a:0").count(), 2, "{a}");
        assert!(a.contains("-b:v 3000k -maxrate 3300k -bufsize 6000k"), "{a}");
        assert!(a.ends_with("-movflags +faststart -f mp4 /tmp/o/240p.mp4"), "{a}");
        let mut silent = source();
        silent.has_audio = false;
        let p = LadderPlan::new(silent, &l, Duration::from_millis(1500)).unwrap();
        let a = p.ffmpeg_args("in.mp4", "/tmp/o", Budget::default()).join(" ");
        assert!(!a.contains("0:a:0") && a.contains("n_forced*1.5"), "{a}");
    }

    proptest::proptest! {
        #[test]
        fn ladder_parsing_never_panics(s in "\\PC{0,40}") {
            let _ = Ladder::parse(&s);
        }

        #[test]
        fn probe_parsing_never_panics(s in "\\PC{0,200}") {
            let _ = SourceInfo::from_ffprobe_json(&s);
        }
    }
}
