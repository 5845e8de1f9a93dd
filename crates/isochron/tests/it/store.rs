//! The store through the CLI and the server: ingest, ls, rm, bad input, restarts, and the watched
//! media directory.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;

fn isochron(args: &[&str], data: &Path) -> Output {
    run(Command::new(bin()).args(args).arg("--data").arg(data), 120)
}

/// Every file under `dir` with its size and modification time, except the catalog database
/// (redb rewrites its header when opened; the catalog's contents are compared through
/// `isochron ls --json` instead): "unchanged" means equal.
fn snapshot(dir: &Path) -> Vec<(PathBuf, u64, std::time::SystemTime)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            } else if e.file_name() != "catalog.redb" {
                out.push((e.path(), m.len(), m.modified().unwrap()));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn bad_input_is_refused_naming_the_file_and_the_store_is_unchanged() {
    let _load = load(weight::LIGHT);
    let dir = tempdir();
    let data = dir.path().join("store");
    let ok = isochron(&["ingest", demo().to_str().unwrap()], &data);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let before = snapshot(&data);
    let ls_before = isochron(&["ls", "--json"], &data).stdout;

    let text = dir.path().join("notes.ts");
    std::fs::write(&text, "this is a text file, not a transport stream\n".repeat(20)).unwrap();
    let random = dir.path().join("random.ts");
    let mut g = isochron_base::mix::SplitMix64::new(7);
    std::fs::write(&random, (0..100_000).map(|_| g.next_u64() as u8).collect::<Vec<_>>()).unwrap();
    let empty = dir.path().join("empty.ts");
    std::fs::write(&empty, b"").unwrap();
    let missing = dir.path().join("missing.ts");
    // A TS file with one PCR only cannot be paced.
    let one_pcr = dir.path().join("onepcr.ts");
    std::fs::write(&one_pcr, &std::fs::read(demo()).unwrap()[..188 * 3]).unwrap();

    for (file, why) in [
        (&text, "sync byte"),
        (&random, "sync byte"),
        (&empty, "empty"),
        (&missing, "No such file"),
        (&one_pcr, "PCR"),
    ] {
        let out = isochron(&["ingest", file.to_str().unwrap()], &data);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{} was accepted", file.display());
        assert!(err.contains(file.to_str().unwrap()), "message does not name the file: {err}");
        assert!(err.contains(why), "message does not say why ({why}): {err}");
    }
    // A name that is taken is refused too, and so is an invalid one.
    let out = isochron(&["ingest", "--name", "demo", demo().to_str().unwrap()], &data);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("already exists"));
    let out = isochron(&["ingest", "--name", "../etc", demo().to_str().unwrap()], &data);
    assert!(!out.status.success());

    assert_eq!(snapshot(&data), before, "the store changed");
    assert_eq!(isochron(&["ls", "--json"], &data).stdout, ls_before);
}

#[test]
fn a_file_cut_mid_packet_is_ingested_up_to_the_last_whole_packet_with_a_warning() {
    let _load = load(weight::LIGHT);
    require("gst-launch-1.0");
    let dir = tempdir();
    let data = dir.path().join("store");
    let src = std::fs::read(demo()).unwrap();
    let cut = dir.path().join("cut.ts");
    let whole = (src.len() / 188 - 100) * 188;
    std::fs::write(&cut, &src[..whole + 77]).unwrap();
    let out = isochron(&["ingest", cut.to_str().unwrap()], &data);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("partial") && err.contains("77 bytes"), "no warning: {err}");
    let server = Server::start(&data, ServeOptions::default());
    let (got, _) = gst_fetch(&server.url("cut"), &dir.path().join("out.ts"), "tcp");
    assert_same_bytes(&got, &src[..whole], "truncated file");
}

#[test]
fn ingest_ls_rm_round_trip_over_several_disks() {
    let _load = load(weight::LIGHT);
    let dir = tempdir();
    let data = dir.path().join("store");
    let d0 = dir.path().join("d0");
    let d1 = dir.path().join("d1");
    let d2 = dir.path().join("d2");
    let vbr = fixture("vbr60");
    let out = run(
        Command::new(bin())
            .args(["ingest", "--data"])
            .arg(&data)
            .args(["--block-size-kib", "256", "--disk"])
            .arg(&d0)
            .arg("--disk")
            .arg(&d1)
            .arg("--disk")
            .arg(&d2)
            .arg(&vbr)
            .arg(demo()),
        120,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let ls: serde_json::Value =
        serde_json::from_slice(&isochron(&["ls", "--json"], &data).stdout).unwrap();
    let names: Vec<&str> =
        ls.as_array().unwrap().iter().map(|o| o["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["demo", "vbr60"]);
    let vbr_obj = &ls.as_array().unwrap()[1];
    let blocks = vbr_obj["blocks"].as_u64().unwrap();
    assert!(blocks > 100, "256 KiB blocks of a 30 MB file: {blocks}");
    // Every disk got a share (Yima placement over 3 disks).
    let counts: Vec<usize> = [&d0, &d1, &d2]
        .iter()
        .map(|d| {
            snapshot(d).iter().filter(|(p, ..)| p.extension().is_some_and(|e| e == "blk")).count()
        })
        .collect();
    assert_eq!(counts.iter().sum::<usize>() as u64, blocks + ls[0]["blocks"].as_u64().unwrap());
    assert!(counts.iter().all(|&c| c > 20), "unbalanced placement: {counts:?}");
    let out = isochron(&["rm", "vbr60"], &data);
    assert!(out.status.success());
    let ls: serde_json::Value =
        serde_json::from_slice(&isochron(&["ls", "--json"], &data).stdout).unwrap();
    assert_eq!(ls.as_array().unwrap().len(), 1);
    let left: usize = [&d0, &d1, &d2]
        .iter()
        .map(|d| {
            snapshot(d).iter().filter(|(p, ..)| p.extension().is_some_and(|e| e == "blk")).count()
        })
        .sum();
    assert_eq!(left as u64, ls[0]["blocks"].as_u64().unwrap(), "rm left block files behind");
    let out = isochron(&["rm", "vbr60"], &data);
    assert!(!out.status.success(), "removing twice succeeds");
}

#[test]
fn objects_still_play_byte_exact_after_a_restart() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let dir = tempdir();
    let data = dir.path().join("store");
    let vbr = fixture("rate5m");
    let out = isochron(&["ingest", vbr.to_str().unwrap(), demo().to_str().unwrap()], &data);
    assert!(out.status.success());
    for round in 0..2 {
        let server = Server::start(&data, ServeOptions::default());
        // Both at once, as two players would.
        std::thread::scope(|s| {
            for (name, file) in [("rate5m", vbr.clone()), ("demo", demo())] {
                let (server, dir) = (&server, &dir);
                s.spawn(move || {
                    let out = dir.path().join(format!("{name}{round}.ts"));
                    let (got, _) = gst_fetch(&server.url(name), &out, "udp");
                    assert_same_bytes(
                        &got,
                        &std::fs::read(&file).unwrap(),
                        &format!("{name} in round {round}"),
                    );
                });
            }
        });
        server.stop();
    }
}

#[test]
fn a_file_dropped_into_the_media_directory_starts_streaming() {
    let _load = load(weight::PLAYER);
    require("gst-launch-1.0");
    let dir = tempdir();
    let data = dir.path().join("store");
    let media = dir.path().join("media");
    std::fs::create_dir(&media).unwrap();
    std::fs::copy(demo(), media.join("first.ts")).unwrap();
    std::fs::write(media.join("junk.ts"), b"not a transport stream").unwrap();
    let server = Server::start(
        &data,
        ServeOptions { media: Some(&media), no_demo: true, ..Default::default() },
    );
    let objects = server.http_get("/api/v1/objects");
    assert!(objects.contains("\"first\""), "file present at start not served: {objects}");
    assert!(!objects.contains("\"demo\""), "--no-demo seeded the demo: {objects}");
    assert!(server.log().contains("junk.ts"), "bad file in the media dir is not reported");
    // Drop a new file in, written slowly, as a copy would be.
    let src = std::fs::read(demo()).unwrap();
    let tmp = media.join("second.ts");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&tmp).unwrap();
        for chunk in src.chunks(src.len() / 4 + 1) {
            f.write_all(chunk).unwrap();
            f.flush().unwrap();
            std::thread::sleep(Duration::from_millis(300));
        }
    }
    let deadline = Instant::now() + Duration::from_secs(15);
    while !server.http_get("/api/v1/objects").contains("\"second\"") {
        assert!(Instant::now() < deadline, "dropped file not picked up; log:\n{}", server.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    let (got, _) = gst_fetch(&server.url("second"), &dir.path().join("second-out.ts"), "tcp");
    assert_same_bytes(&got, &src, "dropped-in file");
}
