//! Objects ingested from MP4 and Matroska, served as native RTP (H.264 RFC 6184, H.265
//! RFC 7798, AAC RFC 3640, Opus RFC 7587) to players nobody here wrote: retina (a strict Rust
//! RTSP client), ffmpeg and GStreamer. The oracle is ffprobe's own reading of the source file
//! (every packet's bytes and timestamps), never isochron's demuxer.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::*;
use futures_util::StreamExt as _;
use md5::{Digest as _, Md5};

/// One packet of a file as ffprobe reads it.
#[derive(Clone, Debug)]
struct Packet {
    stream: usize,
    /// Presentation and decode times in seconds (after the container's edit lists).
    pts: f64,
    dts: f64,
    data: Vec<u8>,
}

/// The streams of a file: codec names by index, and every packet in file order.
struct Probe {
    codecs: Vec<String>,
    packets: Vec<Packet>,
}

impl Probe {
    fn of(path: &Path) -> Self {
        let out = run(
            Command::new("ffprobe")
                .args(["-v", "error", "-show_streams", "-show_packets", "-show_data"])
                .args(["-of", "json"])
                .arg(path),
            120,
        );
        assert!(out.status.success(), "ffprobe: {}", String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let codecs = v["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["codec_name"].as_str().unwrap_or("").to_owned())
            .collect();
        let time = |p: &serde_json::Value, k: &str| {
            p[k].as_str().and_then(|t| t.parse::<f64>().ok()).unwrap_or(f64::NAN)
        };
        let packets = v["packets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| Packet {
                stream: p["stream_index"].as_u64().unwrap() as usize,
                pts: time(p, "pts_time"),
                dts: time(p, "dts_time"),
                data: hexdump(p["data"].as_str().unwrap_or("")),
            })
            .collect();
        Self { codecs, packets }
    }

    fn stream(&self, i: usize) -> Vec<&Packet> {
        self.packets.iter().filter(|p| p.stream == i).collect()
    }

    /// The object's zero as isochron defines it: the earliest decode time of any packet.
    fn zero(&self) -> f64 {
        self.packets.iter().map(|p| if p.dts.is_nan() { p.pts } else { p.dts }).fold(f64::MAX, f64::min)
    }
}

/// The bytes of an ffprobe `-show_data` hex dump (`00000000: 0000 0002 0910 …  ascii`).
fn hexdump(text: &str) -> Vec<u8> {
    let mut out = Vec::new();
    for line in text.lines() {
        let Some((_, rest)) = line.split_once(": ") else { continue };
        let hex: String = rest.chars().take(40).filter(|c| !c.is_whitespace()).collect();
        for i in (0..hex.len() / 2 * 2).step_by(2) {
            out.push(u8::from_str_radix(&hex[i..i + 2], 16).unwrap());
        }
    }
    out
}

/// The NAL units of a length-prefixed (4-byte) access unit, without parameter sets and access
/// unit delimiters (the server sends parameter sets in-band before key frames, and players
/// keep or drop them as they like).
fn slices(au: &[u8], h265: bool) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 4 <= au.len() {
        let n = u32::from_be_bytes(au[at..at + 4].try_into().unwrap()) as usize;
        let Some(nal) = au.get(at + 4..at + 4 + n) else { break };
        let skip = match (h265, nal.first()) {
            (true, Some(b)) => matches!((b >> 1) & 0x3f, 32..=35),
            (false, Some(b)) => matches!(b & 0x1f, 7..=9),
            (_, None) => true,
        };
        if !skip {
            out.push(nal.to_vec());
        }
        at += 4 + n;
    }
    out
}

fn md5_hex(b: &[u8]) -> String {
    Md5::digest(b).iter().map(|x| format!("{x:02x}")).collect()
}

/// A server with `files` ingested (object names are the file stems).
fn serve_media(files: &[&Path]) -> (tempfile::TempDir, Server) {
    let dir = tempdir();
    let data = dir.path().join("store");
    for f in files {
        let out = run(Command::new(bin()).arg("ingest").arg("--data").arg(&data).arg(f), 120);
        assert!(out.status.success(), "ingest {}: {}", f.display(), String::from_utf8_lossy(&out.stderr));
    }
    let server = Server::start(&data, ServeOptions { no_demo: true, ..ServeOptions::default() });
    (dir, server)
}

fn stem(p: &Path) -> String {
    p.file_stem().unwrap().to_string_lossy().into_owned()
}

/// What retina received of one stream: each frame's data and its elapsed time in seconds since
/// the stream's `RTP-Info` start.
type Received = BTreeMap<usize, Vec<(Vec<u8>, f64, i64)>>;

async fn retina_play(url: &str, transport: &str) -> (Vec<String>, Received) {
    use retina::client::{PlayOptions, Session, SessionGroup, SessionOptions, SetupOptions};
    use retina::codec::CodecItem;
    let url = url::Url::parse(url).unwrap();
    let group = std::sync::Arc::new(SessionGroup::default());
    let mut session =
        Session::describe(url, SessionOptions::default().session_group(group)).await.unwrap();
    let encodings: Vec<String> =
        session.streams().iter().map(|s| s.encoding_name().to_owned()).collect();
    for i in 0..session.streams().len() {
        let t = transport.parse().unwrap();
        session.setup(i, SetupOptions::default().transport(t)).await.unwrap();
    }
    let mut demuxed = session.play(PlayOptions::default()).await.unwrap().demuxed().unwrap();
    let mut got: Received = BTreeMap::new();
    let start = tokio::time::Instant::now();
    loop {
        // The stream is paced in real time; retina does not end it on the server's RTCP BYE,
        // so three quiet seconds after the last frame end it here.
        let idle = std::time::Duration::from_secs(if got.is_empty() { 20 } else { 3 });
        assert!(start.elapsed().as_secs() < 120, "retina: still playing after 120 s");
        let item = tokio::time::timeout(idle, demuxed.next()).await;
        match item {
            Ok(Some(Ok(CodecItem::VideoFrame(f)))) => got.entry(f.stream_id()).or_default().push((
                f.data().to_vec(),
                f.timestamp().elapsed_secs(),
                f.timestamp().elapsed(),
            )),
            Ok(Some(Ok(CodecItem::AudioFrame(f)))) => got.entry(f.stream_id()).or_default().push((
                f.data().to_vec(),
                f.timestamp().elapsed_secs(),
                f.timestamp().elapsed(),
            )),
            Ok(Some(Ok(_))) => {}
            Ok(Some(Err(e))) => panic!("retina: {e}"),
            Ok(None) | Err(_) => break,
        }
    }
    (encodings, got)
}

/// retina plays an H.264 + AAC MP4 (B-frames, edit lists) over TCP and over UDP: every access
/// unit it depacketizes equals the source's sample (parameter sets aside), in order, and its
/// timestamp is the source's presentation time on the object's timeline.
#[test]
fn retina_receives_every_access_unit_with_its_source_timestamp() {
    require("ffprobe");
    let src = media_fixture("h264_aac.mp4");
    let probe = Probe::of(&src);
    assert_eq!(probe.codecs, ["h264", "aac"]);
    let (_dir, server) = serve_media(&[&src]);
    let url = server.url(&stem(&src));
    let rt = runtime();
    for transport in ["tcp", "udp"] {
        let (encodings, got) = rt.block_on(retina_play(&url, transport));
        assert_eq!(encodings, ["h264", "mpeg4-generic"], "{transport}");
        // Times are relative to the PLAY's `Range` start (RTP-Info's `rtptime`, which retina
        // takes as NPT 0 when it plays several streams): one constant for every stream, read
        // off the first video frame.
        let zero = probe.zero();
        let first = got.get(&0).and_then(|v| v.first()).map_or(0.0, |f| f.1);
        let offset = first - (probe.stream(0)[0].pts - zero);
        for (stream, h) in [(0usize, true), (1, false)] {
            let want = probe.stream(stream);
            let frames = got.get(&stream).map(Vec::as_slice).unwrap_or_default();
            assert_eq!(frames.len(), want.len(), "{transport}: stream {stream} frame count");
            for (i, ((data, t, _), p)) in frames.iter().zip(&want).enumerate() {
                if h {
                    assert!(
                        slices(data, false) == slices(&p.data, false),
                        "{transport}: video frame {i} differs (md5 {} vs {})",
                        md5_hex(data),
                        md5_hex(&p.data)
                    );
                } else {
                    assert!(data == &p.data, "{transport}: audio frame {i} differs");
                }
                let expect = p.pts - zero + offset;
                assert!(
                    (t - expect).abs() < 1.5e-4,
                    "{transport}: stream {stream} frame {i} at {t:.6} s, source {expect:.6} s"
                );
            }
        }
    }
}
