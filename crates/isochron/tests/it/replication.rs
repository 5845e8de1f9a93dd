//! Block replication end to end (`store.replication`, `serve --replication K`): a store of two
//! disks keeping two copies of every block. While a stream plays, one block file ahead of the
//! play position is corrupted (bytes overwritten in the middle) and another deleted, both on the
//! disk that holds the block's first copy; the stream still ends byte-exact against the source
//! (the reads fail over to the other copy within the stream's deadline), the bad copies are
//! repaired in the non-real-time share (counted in `/metrics` and `/api/v1/reorg`), and
//! `isochron fsck` afterwards finds the store clean with two copies of every block. Once with
//! `isochron play --out` over UDP, once with GStreamer (`rtspsrc ! rtpmp2tdepay ! filesink`)
//! over TCP, each on a fresh server (an empty block cache); HTTP delivery (`/objects`) fails over
//! too. And the refusals: more copies than disks, and a `--replication` other than the store's.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use isochron_base::{BlockIndex, BlockKey};
use isochron_diskio::Store;

/// One block of the demo object: its index, media time, and the file of each of its copies,
/// replica 0 first.
#[derive(Clone, Debug)]
struct BlockFiles {
    index: u32,
    at_s: f64,
    copies: Vec<PathBuf>,
}

/// Creates `data` on two disks with two copies of every block, holding the demo clip in 64 KiB
/// blocks (about 25, two a second), and returns every block's files.
fn replicated_demo(dir: &Path) -> (PathBuf, Vec<BlockFiles>) {
    let data = dir.join("store");
    let (d0, d1) = (dir.join("d0"), dir.join("d1"));
    let out = run(
        Command::new(bin())
            .arg("ingest")
            .arg("--data")
            .arg(&data)
            .arg("--disk")
            .arg(&d0)
            .arg("--disk")
            .arg(&d1)
            .args(["--replication", "2", "--block-size-kib", "64"])
            .arg(demo()),
        120,
    );
    assert!(out.status.success(), "ingest: {}", String::from_utf8_lossy(&out.stderr));
    // The store is read here, then closed (its catalog is locked while open) before serving.
    let store = Store::open(&data).expect("open the store");
    assert_eq!(store.replication(), 2);
    let rec = store.catalog().object("demo").unwrap().expect("demo ingested");
    let blocks = (0..rec.block_count())
        .map(|i| {
            let index = BlockIndex(i);
            let copies = store.replicas(&rec, index);
            assert_eq!(copies.len(), 2, "block {i}: {copies:?}");
            let key = BlockKey::new(rec.id, index);
            BlockFiles {
                index: i,
                at_s: rec.blocks[i as usize].first_send_time.as_secs_f64(),
                copies: copies.iter().map(|d| store.disk(d).unwrap().block_path(key)).collect(),
            }
        })
        .collect::<Vec<_>>();
    assert!(blocks.len() >= 15, "{} blocks", blocks.len());
    for b in &blocks {
        assert_ne!(b.copies[0], b.copies[1]);
        assert!(b.copies.iter().all(|p| p.is_file()), "{b:?}");
    }
    (data, blocks)
}

/// The block playing at `t` seconds.
fn block_at(blocks: &[BlockFiles], t: f64) -> BlockFiles {
    blocks.iter().rev().find(|b| b.at_s <= t).cloned().expect("a block")
}

/// Flips 64 bytes in the middle of a block file (its checksum no longer matches).
fn corrupt(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let mid = bytes.len() / 2;
    for b in &mut bytes[mid..mid + 64] {
        *b ^= 0xA5;
    }
    let mut f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all(&bytes).unwrap();
    f.sync_all().unwrap();
}

/// The body of `GET path` (HTTP/1.0), bytes.
fn http_get_bytes(server: &Server, path: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(server.http).expect("connect HTTP");
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").unwrap();
    let mut resp = Vec::new();
    s.read_to_end(&mut resp).unwrap();
    let split = resp.windows(4).position(|w| w == b"\r\n\r\n").expect("headers");
    let head = String::from_utf8_lossy(&resp[..split]);
    assert!(head.starts_with("HTTP/1.1 200") || head.starts_with("HTTP/1.0 200"), "{head}");
    resp[split + 4..].to_vec()
}

/// Waits (at most 20 s) until `/metrics` shows `name` at `want`, and returns what it shows.
fn wait_metric(server: &Server, name: &str, want: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let v = server.metric(name);
        if v >= want || Instant::now() > deadline {
            return v;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `isochron fsck --data DATA` (no repair): its output, which must say the store is clean.
fn fsck_clean(data: &Path) -> String {
    let out = run(Command::new(bin()).arg("fsck").arg("--data").arg(data), 60);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "fsck: {text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("clean: 2 copies of every block"), "{text}");
    text
}

/// Plays the demo with `player` on a fresh server; at about 1.5 s into the stream, corrupts the
/// first copy of the block playing at `corrupt_at` s and deletes the first copy of the block
/// playing at `delete_at` s (both still several seconds ahead of the play position, so not yet
/// read); returns the bytes the player wrote. Checks the failovers and the repairs in
/// `/metrics`, then stops the server.
fn play_through_faults(
    data: &Path,
    blocks: &[BlockFiles],
    (corrupt_at, delete_at): (f64, f64),
    player: impl FnOnce(String) -> Vec<u8> + Send + 'static,
    before: impl FnOnce(&Server),
) -> (Vec<u8>, String) {
    let server = Server::start(
        data,
        ServeOptions { config: Some("[store]\nreplication = 2\n"), ..ServeOptions::default() },
    );
    before(&server);
    let base_failovers = server.metric("isochron_read_failovers_total");
    let base_repaired = server.metric("isochron_repaired_copies_total");
    let (bad, gone) = (block_at(blocks, corrupt_at), block_at(blocks, delete_at));
    assert_ne!(bad.index, gone.index);
    let url = server.url("demo");
    let started = Instant::now();
    let play = std::thread::spawn(move || player(url));
    // The scheduler reads two cycles (2 s) ahead: at 1.5 s it has read up to about 4 s.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(started.elapsed() < Duration::from_secs(3), "too slow to inject the faults in time");
    corrupt(&bad.copies[0]);
    std::fs::remove_file(&gone.copies[0]).unwrap();
    let got = play.join().unwrap_or_else(|_| panic!("player failed; log:\n{}", server.log()));

    let failovers = server.metric("isochron_read_failovers_total") - base_failovers;
    assert_eq!(failovers, 2.0, "one failover per bad copy; log:\n{}", server.log());
    let repaired =
        wait_metric(&server, "isochron_repaired_copies_total", base_repaired + 2.0) - base_repaired;
    assert_eq!(repaired, 2.0, "both copies repaired; log:\n{}", server.log());
    assert_eq!(server.metric("isochron_repair_failed_total"), 0.0);
    assert_eq!(server.metric("isochron_bad_copies"), 0.0, "repaired copies are read again");
    let reorg = server.http_get("/api/v1/reorg");
    let log = server.log();
    server.stop();
    // The repaired copies are back, valid, on the disk of the first copy.
    assert!(bad.copies[0].is_file() && gone.copies[0].is_file());
    (got, format!("{reorg}\n{log}"))
}

/// The must-show test: `isochron play --out` over UDP through a corrupted and a deleted block,
/// byte-exact; an HTTP download through a deleted block, byte-exact; fsck clean afterwards.
#[test]
fn a_stream_survives_a_corrupted_and_a_deleted_block_with_two_copies() {
    let _load = load(weight::PLAYER);
    let dir = tempdir();
    let (data, blocks) = replicated_demo(dir.path());
    let want = std::fs::read(demo()).unwrap();
    let out2 = dir.path().join("played.ts");
    let http_block = block_at(&blocks, 3.0);
    let (got, status) = play_through_faults(
        &data,
        &blocks,
        (7.0, 9.5),
        move |url| {
            let o: Output =
                run(Command::new(bin()).args(["play", &url, "--out"]).arg(&out2).arg("--json"), 60);
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(o.status.success(), "play: {stdout}{}", String::from_utf8_lossy(&o.stderr));
            let s: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
            assert_eq!(s["ended"], "bye", "{s:#}");
            assert_eq!(s["lost"], 0, "{s:#}");
            std::fs::read(&out2).unwrap()
        },
        |server| {
            // HTTP delivery: the first copy of a block deleted, the download still complete.
            std::fs::remove_file(&http_block.copies[0]).unwrap();
            let body = http_get_bytes(server, "/objects/demo");
            assert_same_bytes(&body, &std::fs::read(demo()).unwrap(), "GET /objects/demo");
            assert_eq!(server.metric("isochron_http_read_failovers_total"), 1.0);
            assert_eq!(wait_metric(server, "isochron_repaired_copies_total", 1.0), 1.0);
        },
    );
    assert_same_bytes(&got, &want, "isochron play --out through two bad copies");
    assert!(status.contains("\"repair\""), "{status}");
    let report = fsck_clean(&data);
    let n = blocks.len();
    assert!(report.contains(&format!("{n} blocks checked ({} copies)", 2 * n)), "{report}");
    assert!(http_block.copies[0].is_file(), "the HTTP download's bad copy was repaired");
}

/// A block with no good copy left ends the stream with an RTCP BYE giving the reason (RFC 3550
/// §6.6), not a silent normal end: both copies of a block ahead of the play position are
/// corrupted; `isochron play` receives the BYE with the block named, and less than the source.
#[test]
fn a_block_with_no_good_copy_ends_the_stream_with_a_bye_saying_why() {
    let _load = load(weight::PLAYER);
    let dir = tempdir();
    let (data, blocks) = replicated_demo(dir.path());
    let server = Server::start(&data, ServeOptions::default());
    let bad = block_at(&blocks, 7.0);
    let out = dir.path().join("played.ts");
    let url = server.url("demo");
    let out2 = out.clone();
    let play = std::thread::spawn(move || {
        run(Command::new(bin()).args(["play", &url, "--json", "--out"]).arg(&out2), 60)
    });
    // The scheduler reads two cycles (2 s) ahead: at 1.5 s it has read up to about 4 s.
    std::thread::sleep(Duration::from_millis(1500));
    for copy in &bad.copies {
        corrupt(copy);
    }
    let o = play.join().unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let s: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout}{}", String::from_utf8_lossy(&o.stderr)));
    assert!(!o.status.success(), "a cut stream is a failure: {s:#}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("the server ended the stream") && err.contains("could not be read"),
        "{err}"
    );
    assert_eq!(s["ended"], "bye", "{s:#}\n{}", server.log());
    let reason = s["bye_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("could not be read"), "BYE reason {reason:?}: {s:#}");
    let got = std::fs::metadata(&out).map_or(0, |m| m.len());
    assert!(got < std::fs::metadata(demo()).unwrap().len(), "{got} bytes: the stream was cut");
    assert!(server.log().contains("block read failed on every copy"), "{}", server.log());
}

/// The same faults under GStreamer over TCP, on a fresh server.
#[test]
fn gstreamer_plays_byte_exact_through_bad_copies() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let dir = tempdir();
    let (data, blocks) = replicated_demo(dir.path());
    let out = dir.path().join("gst.ts");
    let (got, _) = play_through_faults(
        &data,
        &blocks,
        (8.0, 10.5),
        move |url| {
            let (got, stderr) = gst_fetch(&url, &out, "tcp");
            assert!(!got.is_empty(), "GStreamer wrote nothing: {stderr}");
            got
        },
        |_| {},
    );
    assert_same_bytes(&got, &std::fs::read(demo()).unwrap(), "GStreamer through two bad copies");
    fsck_clean(&data);
}

/// More copies than disks is refused before anything is created, and a number of copies other
/// than an existing store's is refused naming the key; `fsck` reports a lost copy and
/// `--repair` re-creates it.
#[test]
fn replication_refusals_and_offline_repair() {
    let _load = load(weight::PLAYER);
    let dir = tempdir();
    let serve = |data: &Path, extra: &[&str]| {
        run(
            Command::new(bin())
                .args(["serve", "--rtsp", "127.0.0.1:0", "--http", "", "--rtp-port", "0"])
                .arg("--data")
                .arg(data)
                .args(extra),
            30,
        )
    };
    let fresh = dir.path().join("fresh");
    let d = |n: &str| dir.path().join(n).display().to_string();
    let out = serve(&fresh, &["--disk", &d("x0"), "--disk", &d("x1"), "--replication", "3"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("store.replication is 3") && err.contains("2 disk(s)"), "{err}");
    assert!(!fresh.join("catalog.redb").exists(), "nothing created");

    let (data, blocks) = replicated_demo(dir.path());
    let out = serve(&data, &["--replication", "1"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("keeps 2 copies") && err.contains("store.replication"), "{err}");

    // Offline: a lost second copy is reported, and `fsck --repair` re-creates it.
    let b = block_at(&blocks, 5.0);
    std::fs::remove_file(&b.copies[1]).unwrap();
    let out = run(Command::new(bin()).arg("fsck").arg("--data").arg(&data), 60);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && text.contains("missing:") && text.contains("NOT clean"),
        "{text}"
    );
    let out = run(Command::new(bin()).args(["fsck", "--repair"]).arg("--data").arg(&data), 60);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.contains("restored on disk"), "{text}");
    assert!(b.copies[1].is_file());
    fsck_clean(&data);
}

/// Every copy file on the store's open disks is where the placement puts a copy, and every copy
/// the placement asks for is there: `2 × blocks` files for two copies.
fn assert_exact_copies(data: &Path) -> usize {
    let store = Store::open(data).expect("open the store");
    let mut want = Vec::new();
    for rec in store.catalog().objects().unwrap() {
        for i in 0..rec.block_count() {
            let index = BlockIndex(i);
            let copies = store.replicas(&rec, index);
            assert_eq!(copies.len(), 2);
            want.extend(copies.iter().map(|d| (d, BlockKey::new(rec.id, index))));
        }
    }
    let mut got = Vec::new();
    for (id, d) in store.disks() {
        got.extend(d.list_blocks().map(|f| (id, f.expect("a block file").key)));
    }
    want.sort_unstable();
    got.sort_unstable();
    assert_eq!(got, want, "the copy files are exactly the placement's");
    got.len()
}

/// Online SCADDAR scaling with two copies while a stream plays: a disk joins, an original disk
/// leaves (every copy whose disk changes moves; only files no copy uses are deleted), the
/// stream is byte-exact; a recording writes both copies; afterwards fsck is clean and the copy
/// files are exactly the placement's.
#[test]
fn online_scaling_and_recording_keep_two_copies() {
    let _load = load(weight::PLAYER);
    require("curl");
    let dir = tempdir();
    let (data, _) = replicated_demo(dir.path());
    let server = Server::start(
        &data,
        ServeOptions { config: Some("[store]\nreplication = 2\n"), ..ServeOptions::default() },
    );
    let api = format!("http://{}", server.http);
    let out = dir.path().join("played.ts");
    let (url, out2) = (server.url("demo"), out.clone());
    let play = std::thread::spawn(move || {
        run(Command::new(bin()).args(["play", &url, "--out"]).arg(&out2), 60)
    });
    std::thread::sleep(Duration::from_secs(1));
    let d2 = dir.path().join("d2");
    std::fs::create_dir_all(&d2).unwrap();
    let d2 = d2.display().to_string();
    for args in [["disk", "add", "--server", &api, &d2], ["disk", "remove", "--server", &api, "0"]]
    {
        let o = run(Command::new(bin()).args(args), 120);
        assert!(
            o.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&o.stderr),
            server.log()
        );
    }
    let o = play.join().unwrap();
    assert!(o.status.success(), "play: {}", String::from_utf8_lossy(&o.stderr));
    let demo_bytes = std::fs::read(demo()).unwrap();
    assert_same_bytes(&std::fs::read(&out).unwrap(), &demo_bytes, "the demo across add and remove");
    let reorg: serde_json::Value = serde_json::from_str(&server.http_get("/api/v1/reorg")).unwrap();
    assert_eq!(reorg["state"], "idle", "{reorg:#}");
    let disks: serde_json::Value = serde_json::from_str(&server.http_get("/api/v1/disks")).unwrap();
    assert_eq!(disks["replication"], 2, "{disks:#}");

    // A recording (declared at four times the clip's rate, so it takes about 3 s) writes both
    // copies of every block before it is committed.
    let rate = ts_index(&demo()).avg_bitrate().0 * 4;
    let rec = run(
        Command::new("curl")
            .args(["-sS", "-o", "-", "-w", "\n%{http_code}", "-T"])
            .arg(demo())
            .arg(format!("{api}/api/v1/record/rec?rate={rate}")),
        60,
    );
    let text = String::from_utf8_lossy(&rec.stdout);
    assert!(text.trim_end().ends_with("201"), "{text}");
    let rec_url = server.url("rec");
    let got = runtime().block_on(async move {
        let (mut c, _) = start_play(&rec_url, isochron_loadgen::Transport::Tcp).await;
        let got = c.collect(Duration::from_secs(5), Duration::from_secs(60)).await;
        let _ = c.teardown().await;
        got.expect("the recording plays")
    });
    assert_same_bytes(&got.payload(), &demo_bytes, "the recording over RTSP");
    server.stop();

    fsck_clean(&data);
    let files = assert_exact_copies(&data);
    assert!(files >= 4 * 15, "{files} copy files");
    // Disk 0 left: nothing of the store is on it any more.
    let blocks_left: Vec<PathBuf> = walk_files(&dir.path().join("d0"))
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "blk"))
        .collect();
    assert!(blocks_left.is_empty(), "block files on the retired disk: {blocks_left:?}");
}

/// Every file under `dir`, recursively.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// What players make of a block with no good copy: the server sends its BYE and then resets the
/// RTSP connection (no RTSP 1.0 message tells a player of an error mid-stream). GStreamer over
/// UDP ends with an error (exit 1), over TCP with a warning that the server closed the
/// connection; both with less than the source. (ffmpeg ends either as a normal end, exit 0:
/// docs/design/closing.md.)
#[test]
fn gstreamer_is_told_when_a_block_has_no_good_copy() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    for transport in ["udp", "tcp"] {
        let dir = tempdir();
        let (data, blocks) = replicated_demo(dir.path());
        let server = Server::start(&data, ServeOptions::default());
        let bad = block_at(&blocks, 7.0);
        let out = dir.path().join("played.ts");
        let (url, out2) = (server.url("demo"), out.clone());
        let play = std::thread::spawn(move || {
            run(
                Command::new("gst-launch-1.0")
                    .args(["-e", "rtspsrc", &format!("location={url}")])
                    .args([&format!("protocols={transport}"), "latency=500"])
                    .args(["!", "rtpmp2tdepay", "!", "filesink"])
                    .arg(format!("location={}", out2.display())),
                60,
            )
        });
        // The scheduler reads two cycles (2 s) ahead: at 1.5 s it has read up to about 4 s.
        std::thread::sleep(Duration::from_millis(1500));
        for copy in &bad.copies {
            corrupt(copy);
        }
        let o = play.join().unwrap();
        let said =
            format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
        assert!(said.contains("The server closed the connection"), "{transport}: {said}");
        if transport == "udp" {
            assert!(!o.status.success(), "GStreamer over UDP: {said}");
        }
        let got = std::fs::metadata(&out).map_or(0, |m| m.len());
        assert!(got < std::fs::metadata(demo()).unwrap().len(), "{transport}: {got} bytes");
        assert!(server.log().contains("block read failed on every copy"), "{}", server.log());
    }
}
