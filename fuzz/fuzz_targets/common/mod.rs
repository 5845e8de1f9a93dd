//! The checks shared by the container fuzz targets.

use std::cmp::Ordering;

use isochron_media::{ContainerKind, Demuxer, MediaIndex, StreamKind, demux_bytes, sniff};

/// Demuxes `data` (after its first byte, the read size) as `kind`, both ways, and checks the
/// index.
pub fn check(kind: ContainerKind, data: &[u8]) {
    let Some((&chunk, file)) = data.split_first() else { return };
    let chunk = usize::from(chunk) * 7 + 1;

    let mut d = Demuxer::new(kind, file.len() as u64);
    let mut streamed = None;
    while let Some(need) = d.poll_need() {
        assert!(need.len > 0 && need.offset + need.len <= file.len() as u64, "{need:?}");
        let start = need.offset as usize;
        let end = start + (need.len as usize).min(chunk);
        if let Err(e) = d.handle_data(need.offset, &file[start..end]) {
            streamed = Some(Err(e));
            break;
        }
    }
    let streamed = streamed.unwrap_or_else(|| d.finish());
    if sniff(file) == Some(kind) {
        assert_eq!(streamed, demux_bytes(file), "streamed and in-memory results differ");
    }
    if let Ok(index) = streamed {
        check_index(&index, file.len() as u64);
    }
}

fn check_index(ix: &MediaIndex, file_len: u64) {
    assert!(!ix.tracks.is_empty());
    for t in &ix.tracks {
        assert!(t.timescale > 0);
        assert_eq!(t.kind, t.codec.kind());
    }
    let mut prev: Option<(i64, u32, u16)> = None;
    for s in &ix.samples {
        assert!(usize::from(s.track) < ix.tracks.len());
        assert!(s.offset + u64::from(s.size) <= file_len, "{s:?} outside {file_len}");
        let t = &ix.tracks[usize::from(s.track)];
        if ix.kind == ContainerKind::Matroska && t.kind == StreamKind::Video {
            assert!(s.dts <= s.pts, "{s:?}");
        }
        if let Some((dts, ts, track)) = prev {
            let a = i128::from(dts) * i128::from(t.timescale);
            let b = i128::from(s.dts) * i128::from(ts);
            let ord = a.cmp(&b);
            assert!(ord == Ordering::Less || (ord == Ordering::Equal && track <= s.track));
        }
        prev = Some((s.dts, t.timescale, s.track));
        let _ = ix.time_ns(s.track, s.pts);
    }
}
