//! `GET /hls/{title}/master.m3u8`: the master playlist of a title's renditions (RFC 8216
//! §4.3.4.2), one `EXT-X-STREAM-INF` per rendition (`TITLE~RUNG`, highest rate first) pointing at
//! the rendition's own media playlist. A title without renditions gets a master playlist of
//! itself, so that a page can always load `master.m3u8`.
//!
//! Attributes: `BANDWIDTH` is the rendition's peak bit rate (§4.3.4.2: the peak segment bit
//! rate; ingest's peak is over a one-second window, an upper bound of a segment's), and
//! `AVERAGE-BANDWIDTH` its mean; `RESOLUTION` and `CODECS` (RFC 6381: `avc1.PPCCLL` from the
//! H.264 track's `profile-level-id`, `mp4a.40.N` from the AAC track's audio object type) where
//! the record knows them: a native object's tracks do, an MPEG-TS object's do not, and `CODECS`
//! is left out rather than guessed when any track's is unknown.
//!
//! A ladder's renditions are listed by their tracks: each variant is the rendition's video track
//! alone (`../TITLE~RUNG/t0/index.m3u8`) with the highest rendition's audio as the one member of
//! an audio group (`EXT-X-MEDIA`, §4.3.4.1; a ladder's renditions carry the same audio), so HLS
//! and DASH (`crate::dash`) play the very same per-track CMAF segments.

use std::fmt::Write as _;

use isochron_store::catalog::{ObjectRecord, TrackDesc};

/// The master playlist listing `variants` (each with its playlist URI relative to the master's),
/// and with `audio` (its playlist's URI) an audio group every variant plays with.
#[must_use]
pub(crate) fn master_playlist(variants: &[(&ObjectRecord, String)], audio: Option<&str>) -> String {
    let mut out = String::from("#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-INDEPENDENT-SEGMENTS\n");
    if let Some(uri) = audio {
        let _ = writeln!(
            out,
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"audio\",DEFAULT=YES,\
             AUTOSELECT=YES,URI=\"{uri}\""
        );
    }
    for (rec, uri) in variants {
        let _ = write!(
            out,
            "#EXT-X-STREAM-INF:BANDWIDTH={},AVERAGE-BANDWIDTH={}",
            rec.peak_bitrate.0.max(rec.avg_bitrate.0),
            rec.avg_bitrate.0
        );
        let tracks = rec.media.as_ref().map(|m| m.tracks.as_slice()).unwrap_or_default();
        if let Some(v) = tracks.iter().find(|t| t.kind == "video" && t.width > 0 && t.height > 0) {
            let _ = write!(out, ",RESOLUTION={}x{}", v.width, v.height);
        }
        let codecs: Option<Vec<String>> =
            if tracks.is_empty() { None } else { tracks.iter().map(codec_of).collect() };
        if let Some(c) = codecs {
            let _ = write!(out, ",CODECS=\"{}\"", c.join(","));
        }
        if audio.is_some() {
            out.push_str(",AUDIO=\"audio\"");
        }
        let _ = write!(out, "\n{uri}\n");
    }
    out
}

/// A track's RFC 6381 codec string, when we can tell it.
pub(crate) fn codec_of(t: &TrackDesc) -> Option<String> {
    match t.codec.as_str() {
        "h264" => {
            let id = t.fmtp.split(';').find_map(|p| p.trim().strip_prefix("profile-level-id="))?;
            (id.len() == 6 && id.bytes().all(|b| b.is_ascii_hexdigit()))
                .then(|| format!("avc1.{}", id.to_ascii_lowercase()))
        }
        // The audio object type: the AudioSpecificConfig's first five bits (ISO/IEC 14496-3
        // §1.6.2.1); 31 escapes to a longer form we do not list.
        "aac" => {
            let aot = t.config.first()? >> 3;
            (1..31).contains(&aot).then(|| format!("mp4a.40.{aot}"))
        }
        "opus" => Some("opus".into()),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use isochron_base::{BitRate, Bytes, MediaTime, ObjectId};
    use isochron_store::catalog::NativeMedia;

    use super::*;

    /// A record of `name` with these rates and tracks (none: an MPEG-TS object).
    pub(crate) fn rendition(
        name: &str,
        avg: u64,
        peak: u64,
        tracks: Vec<TrackDesc>,
    ) -> ObjectRecord {
        ObjectRecord {
            id: ObjectId(1),
            name: name.into(),
            seed: 0,
            first_epoch: Default::default(),
            block_size: Bytes::mib(1),
            blocks: Vec::new(),
            packets: 0,
            ts_bytes: Bytes(0),
            duration: MediaTime::ZERO,
            avg_bitrate: BitRate(avg),
            peak_bitrate: BitRate(peak),
            seek_points: Vec::new(),
            streams: Vec::new(),
            source_file: String::new(),
            created_unix_s: 0,
            media: (!tracks.is_empty()).then(|| NativeMedia {
                container: "mp4".into(),
                tracks,
                ..Default::default()
            }),
        }
    }

    #[test]
    fn lists_rate_resolution_and_codecs() {
        let video = TrackDesc {
            kind: "video".into(),
            codec: "h264".into(),
            fmtp: "packetization-mode=1;profile-level-id=64001F;sprop-parameter-sets=Z,a".into(),
            width: 1280,
            height: 720,
            ..Default::default()
        };
        let audio = TrackDesc {
            kind: "audio".into(),
            codec: "aac".into(),
            config: vec![0x11, 0x90],
            ..Default::default()
        };
        let hi = rendition("film~720p", 3_300_000, 3_600_000, vec![video, audio]);
        let ts = rendition("film~240p", 600_000, 500_000, Vec::new());
        let text = master_playlist(
            &[(&hi, "../film~720p/index.m3u8".into()), (&ts, "../film~240p/index.m3u8".into())],
            None,
        );
        assert_eq!(
            text,
            "#EXTM3U\n#EXT-X-VERSION:3\n#EXT-X-INDEPENDENT-SEGMENTS\n\
             #EXT-X-STREAM-INF:BANDWIDTH=3600000,AVERAGE-BANDWIDTH=3300000,RESOLUTION=1280x720,\
             CODECS=\"avc1.64001f,mp4a.40.2\"\n../film~720p/index.m3u8\n\
             #EXT-X-STREAM-INF:BANDWIDTH=600000,AVERAGE-BANDWIDTH=600000\n../film~240p/index.m3u8\n"
        );
        let text = master_playlist(
            &[(&hi, "../film~720p/t0/index.m3u8".into())],
            Some("../film~720p/t1/index.m3u8"),
        );
        assert!(text.contains(
            "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"audio\",NAME=\"audio\",DEFAULT=YES,AUTOSELECT=YES,\
             URI=\"../film~720p/t1/index.m3u8\"\n"
        ));
        assert!(text.contains("mp4a.40.2\",AUDIO=\"audio\"\n../film~720p/t0/index.m3u8\n"));
    }
}
