//! `GET /dash/{title}/manifest.mpd`: MPEG-DASH (ISO/IEC 23009-1) of a title's renditions over
//! the same CMAF segments as HLS.
//!
//! Why per-track segments: a DASH player keeps one buffer per media type and chooses the video
//! representation alone, so each adaptation set's segments carry one track (dash.js refuses a
//! representation whose segments hold both). The segments are the HLS ones of one track,
//! `/hls/OBJECT/tK/N.m4s` with its `init.mp4` (`crate::media`): cut at the object's key frames
//! nearest every `http.hls_segment_s`, which a ladder puts at the same times in every rendition
//! (§7.2.2's segment alignment, hence `segmentAlignment="true"`), each starting with a key frame
//! (`startWithSAP="1"`).
//!
//! The manifest is static (a VOD presentation, §5.3.1.2), with the isoff-live profile's
//! `SegmentTemplate` (§5.3.9.4): `$Number$` addressing (from 0, the HLS names) over a
//! `SegmentTimeline` in the track's timescale, since segments cut at key frames differ in
//! length. One video adaptation set with a representation per rendition (highest first; its
//! `bandwidth` the rendition's peak, as HLS's `BANDWIDTH`), and one audio adaptation set with the
//! highest rendition's audio: a ladder's renditions carry the same audio.

use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use isochron_store::catalog::{ObjectRecord, TrackDesc};

use crate::media::{Segment, cors, first_track, not_found, plan_segments, set, text};
use crate::state::ApiState;

/// `GET /dash/{title}/manifest.mpd`: the title's renditions (or the title alone) as MPEG-DASH
/// over the per-track CMAF segments ([`crate::dash`]).
pub(crate) async fn serve(
    State(s): State<ApiState>,
    Path((name, file)): Path<(String, String)>,
) -> Response {
    let Some(title) = s.library.get(&name) else { return not_found(&name) };
    if file != "manifest.mpd" {
        return text(
            StatusCode::NOT_FOUND,
            format!("{file:?}: the DASH of {name:?} is manifest.mpd; its segments are HLS's\n"),
        );
    }
    let entries = s.library.renditions(&name);
    let records: Vec<&ObjectRecord> = if entries.is_empty() {
        vec![&title.record]
    } else {
        entries.iter().map(|e| &e.record).collect()
    };
    let segments: Vec<Vec<Segment>> =
        records.iter().map(|r| plan_segments(r, s.media.hls_segment)).collect();
    let video: Vec<Rep<'_>> = records
        .iter()
        .zip(&segments)
        .filter_map(|(r, segs)| {
            Some(Rep { record: r, track: first_track(r, "video")?, segments: segs })
        })
        .collect();
    let audio = records.first().zip(segments.first()).and_then(|(r, segs)| {
        Some(Rep { record: r, track: first_track(r, "audio")?, segments: segs })
    });
    if video.is_empty() && audio.is_none() {
        return text(
            StatusCode::NOT_FOUND,
            format!(
                "{name:?} has no track DASH can carry (H.264, H.265, AAC, Opus in MP4 or Matroska)\n"
            ),
        );
    }
    let mut r = manifest(&video, audio.as_ref()).into_response();
    set(&mut r, header::CONTENT_TYPE, "application/dash+xml");
    set(&mut r, header::CACHE_CONTROL, "no-cache");
    cors(r.headers_mut());
    r
}

/// One representation: the object, the index of its track, and its segments.
pub(crate) struct Rep<'a> {
    /// The rendition (or the title itself).
    pub(crate) record: &'a ObjectRecord,
    /// The track's index in the object.
    pub(crate) track: usize,
    /// The object's segments (the same cut as its HLS).
    pub(crate) segments: &'a [Segment],
}

impl Rep<'_> {
    fn desc(&self) -> Option<&TrackDesc> {
        self.record.media.as_ref()?.tracks.get(self.track)
    }
}

/// The MPD of `video` (highest first) and `audio`, each representation's segments at
/// `../../hls/OBJECT/tK/` relative to the manifest's URL.
#[must_use]
pub(crate) fn manifest(video: &[Rep<'_>], audio: Option<&Rep<'_>>) -> String {
    let duration = video
        .iter()
        .chain(audio)
        .map(|r| Duration::from_nanos(r.record.duration.as_nanos()))
        .max()
        .unwrap_or_default();
    let mut out = String::new();
    let _ = write!(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <MPD xmlns=\"urn:mpeg:dash:schema:mpd:2011\" \
         profiles=\"urn:mpeg:dash:profile:isoff-live:2011\" type=\"static\" \
         mediaPresentationDuration=\"{}\" minBufferTime=\"PT2S\">\n <Period id=\"0\" start=\"PT0S\">\n",
        iso_duration(duration)
    );
    if !video.is_empty() {
        out.push_str(
            "  <AdaptationSet id=\"0\" contentType=\"video\" mimeType=\"video/mp4\" \
             segmentAlignment=\"true\" startWithSAP=\"1\">\n",
        );
        for r in video {
            representation(&mut out, r);
        }
        out.push_str("  </AdaptationSet>\n");
    }
    if let Some(r) = audio {
        out.push_str(
            "  <AdaptationSet id=\"1\" contentType=\"audio\" mimeType=\"audio/mp4\" lang=\"und\" \
             segmentAlignment=\"true\" startWithSAP=\"1\">\n",
        );
        representation(&mut out, r);
        out.push_str("  </AdaptationSet>\n");
    }
    out.push_str(" </Period>\n</MPD>\n");
    out
}

fn representation(out: &mut String, r: &Rep<'_>) {
    let Some(t) = r.desc() else { return };
    let name = xml(&r.record.name);
    let id = if t.kind == "video" { name.clone() } else { format!("{name}-audio") };
    let bandwidth = if t.kind == "video" {
        r.record.peak_bitrate.0.max(r.record.avg_bitrate.0)
    } else {
        // The track's own rate is not recorded; AAC in a ladder is 128 kb/s.
        128_000
    };
    let _ = write!(out, "   <Representation id=\"{id}\" bandwidth=\"{bandwidth}\"");
    if let Some(c) = crate::master::codec_of(t) {
        let _ = write!(out, " codecs=\"{}\"", xml(&c));
    }
    if t.kind == "video" {
        let _ = write!(out, " width=\"{}\" height=\"{}\" sar=\"1:1\"", t.width, t.height);
    } else {
        let _ = write!(out, " audioSamplingRate=\"{}\"", t.clock_rate);
    }
    out.push_str(">\n");
    if t.kind == "audio" && t.channels > 0 {
        let _ = writeln!(
            out,
            "    <AudioChannelConfiguration \
             schemeIdUri=\"urn:mpeg:dash:23003:3:audio_channel_configuration:2011\" value=\"{}\"/>",
            t.channels
        );
    }
    let base = format!("../../hls/{name}/t{}", r.track);
    let _ = writeln!(
        out,
        "    <SegmentTemplate timescale=\"{}\" startNumber=\"0\" \
         initialization=\"{base}/init.mp4\" media=\"{base}/$Number$.m4s\">",
        t.clock_rate
    );
    out.push_str("     <SegmentTimeline>\n");
    timeline(out, r.segments, t.clock_rate);
    out.push_str("     </SegmentTimeline>\n    </SegmentTemplate>\n   </Representation>\n");
}

/// `S` elements of `segments` in ticks of `timescale`, equal neighbours folded into `r`
/// repeats (§5.3.9.6). Each segment's start is its first packet's time; its duration reaches
/// the next one's start, so that the timeline has no gap.
fn timeline(out: &mut String, segments: &[Segment], timescale: u32) {
    let ticks = |ns: u64| (u128::from(ns) * u128::from(timescale) / 1_000_000_000) as u64;
    let mut runs: Vec<(u64, u64, u32)> = Vec::new();
    for s in segments {
        let start = ticks(s.time.as_nanos());
        let end = ticks(s.time.as_nanos() + s.duration.as_nanos() as u64);
        let d = end.saturating_sub(start).max(1);
        match runs.last_mut() {
            Some((t, last, r)) if *last == d && *t + *last * (u64::from(*r) + 1) == start => {
                *r += 1;
            }
            _ => runs.push((start, d, 0)),
        }
    }
    for (t, d, r) in runs {
        if r > 0 {
            let _ = writeln!(out, "      <S t=\"{t}\" d=\"{d}\" r=\"{r}\"/>");
        } else {
            let _ = writeln!(out, "      <S t=\"{t}\" d=\"{d}\"/>");
        }
    }
}

/// An `xs:duration` of `d` to the millisecond (`PT90.000S`).
fn iso_duration(d: Duration) -> String {
    format!("PT{}.{:03}S", d.as_secs(), d.subsec_millis())
}

/// `s` escaped for an XML attribute.
fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use isochron_base::{Gsn, MediaTime};

    use super::*;

    fn record(name: &str, peak: u64, tracks: Vec<TrackDesc>) -> ObjectRecord {
        let mut r = crate::master::tests::rendition(name, peak - 100_000, peak, tracks);
        r.duration = MediaTime::from_nanos(5_500_000_000);
        r
    }

    fn seg(start_ms: u64, ms: u64) -> Segment {
        Segment {
            start: Gsn(start_ms),
            end: None,
            time: MediaTime::from_nanos(start_ms * 1_000_000),
            duration: Duration::from_millis(ms),
        }
    }

    #[test]
    fn lists_each_rendition_and_the_audio_over_a_timeline() {
        let video = TrackDesc {
            kind: "video".into(),
            codec: "h264".into(),
            fmtp: "packetization-mode=1;profile-level-id=64001E".into(),
            width: 640,
            height: 360,
            clock_rate: 90_000,
            ..Default::default()
        };
        let audio = TrackDesc {
            kind: "audio".into(),
            codec: "aac".into(),
            config: vec![0x11, 0x90],
            clock_rate: 48_000,
            channels: 2,
            ..Default::default()
        };
        let hi = record("a&b~360p", 1_600_000, vec![video.clone(), audio]);
        let lo = record("a&b~240p", 500_000, vec![TrackDesc { height: 240, ..video }]);
        let segs = [seg(0, 2000), seg(2000, 2000), seg(4000, 1500)];
        let reps = [
            Rep { record: &hi, track: 0, segments: &segs },
            Rep { record: &lo, track: 0, segments: &segs },
        ];
        let text = manifest(&reps, Some(&Rep { record: &hi, track: 1, segments: &segs }));
        assert!(text.contains("mediaPresentationDuration=\"PT5.500S\""), "{text}");
        assert!(text.contains(
            "<Representation id=\"a&amp;b~360p\" bandwidth=\"1600000\" codecs=\"avc1.64001e\" \
             width=\"640\" height=\"360\""
        ));
        assert!(text.contains("height=\"240\""));
        assert!(text.contains(
            "media=\"../../hls/a&amp;b~240p/t0/$Number$.m4s\"" // the rendition's own segments
        ));
        // Two equal segments folded into one S with a repeat, then the shorter last one.
        assert!(
            text.contains(
                "<S t=\"0\" d=\"180000\" r=\"1\"/>\n      <S t=\"360000\" d=\"135000\"/>"
            )
        );
        assert!(text.contains("<S t=\"0\" d=\"96000\" r=\"1\"/>"), "{text}");
        assert!(
            text.contains("id=\"a&amp;b~360p-audio\" bandwidth=\"128000\" codecs=\"mp4a.40.2\"")
        );
        assert!(text.contains("audio_channel_configuration:2011\" value=\"2\""));
        assert_eq!(text.matches("<AdaptationSet").count(), 2);
    }
}
