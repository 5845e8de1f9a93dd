//! Crash safety (docs/design/scaling.md): SIGKILL at random instants during ingest and during an
//! online reorganisation; after every restart `fsck` is clean and every object reads back
//! byte-exact.
//!
//! The instants are drawn from a seeded generator over the measured length of an uninterrupted
//! run, so failures reproduce (the seed and instant are in the assertion messages).

#![allow(clippy::print_stderr)] // tests report what they did on stderr

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use isochron_base::mix::SplitMix64;

const SEED: u64 = 0xC4A5_4E55;

fn isochron(args: &[&str], data: &Path) -> std::process::Output {
    run(Command::new(bin()).args(args).arg("--data").arg(data), 300)
}

fn fsck_clean(data: &Path, what: &str) {
    let out = isochron(&["fsck"], data);
    assert!(
        out.status.success(),
        "{what}: fsck not clean:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every object in the store reads back equal to its source.
fn all_exact(data: &Path, sources: &[(String, PathBuf)], what: &str) {
    let ls = isochron(&["ls", "--json"], data);
    let objects: serde_json::Value = serde_json::from_slice(&ls.stdout).unwrap();
    for o in objects.as_array().unwrap() {
        let name = o["name"].as_str().unwrap();
        let src = sources
            .iter()
            .find(|(n, _)| name == n || name.starts_with(&format!("{n}-")))
            .map(|(_, p)| p)
            .unwrap_or_else(|| panic!("{what}: unexpected object {name}"));
        let out = run(Command::new(bin()).args(["cat", "--data"]).arg(data).arg(name), 120);
        assert!(
            out.status.success(),
            "{what}: cat {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_same_bytes(&out.stdout, &std::fs::read(src).unwrap(), &format!("{what}: {name}"));
    }
}

fn kill9(child: &mut std::process::Child) {
    let _ = Command::new("kill").args(["-KILL", &child.id().to_string()]).status();
    let _ = child.wait();
}

#[test]
fn sigkill_during_ingest_leaves_a_store_that_recovers() {
    let _load = load(weight::PLAYER);
    let vbr = fixture("vbr60");
    let dir = tempdir();
    let data = dir.path().join("store");
    // Two emulated disks slow enough that an ingest lasts about a second.
    let d0 = format!("{},rate_mib_s=60", dir.path().join("d0").display());
    let d1 = format!("{},rate_mib_s=60", dir.path().join("d1").display());
    let out = run(
        Command::new(bin())
            .args(["ingest", "--block-size-kib", "256", "--data"])
            .arg(&data)
            .args(["--disk", &d0, "--disk", &d1])
            .arg(demo()),
        120,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sources = vec![("demo".to_string(), demo()), ("vbr60".to_string(), vbr.clone())];
    // How long an uninterrupted ingest takes.
    let t = Instant::now();
    let out = isochron(&["ingest", "--name", "vbr60-full", vbr.to_str().unwrap()], &data);
    assert!(out.status.success());
    let full = t.elapsed();
    eprintln!("uninterrupted ingest: {full:?}");
    let mut rng = SplitMix64::new(SEED);
    let mut kept = 0;
    for i in 0..25 {
        let at = Duration::from_micros(rng.next_u64() % (full.as_micros() as u64 * 11 / 10));
        let name = format!("vbr60-{i}");
        let mut child = Command::new(bin())
            .args(["ingest", "--name", &name, "--data"])
            .arg(&data)
            .arg(&vbr)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(at);
        kill9(&mut child);
        // Restart: the next start (any command that opens the store normally; here `ls`)
        // recovers; fsck, which does not recover by itself, must then find the store clean.
        let what = format!("ingest {i} killed at {at:?} (seed {SEED:#x})");
        assert!(isochron(&["ls"], &data).status.success(), "{what}: restart");
        fsck_clean(&data, &what);
        let ls = String::from_utf8_lossy(&isochron(&["ls", "--json"], &data).stdout).into_owned();
        if ls.contains(&format!("\"{name}\"")) {
            kept += 1;
        }
    }
    eprintln!("25 killed ingests: {kept} had committed, {} rolled back", 25 - kept);
    all_exact(&data, &sources, "after 25 killed ingests");
}

/// Waits until the server reports no reorganisation running.
fn wait_idle(server: &Server, limit: Duration) -> serde_json::Value {
    let deadline = Instant::now() + limit;
    loop {
        let v: serde_json::Value =
            serde_json::from_str(&server.http_get("/api/v1/disks")).unwrap_or_default();
        if v["reorganisation"]["state"] == "idle" {
            return v;
        }
        assert_ne!(v["reorganisation"]["state"], "failed", "reorganisation failed: {v}");
        assert!(Instant::now() < deadline, "reorganisation did not finish: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn api(server: &Server, method: &str, path: &str, body: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(server.http).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let body = body.unwrap_or("");
    write!(
        s,
        "{method} {path} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut resp = String::new();
    let _ = s.read_to_string(&mut resp);
    let code = resp.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (code, resp)
}

#[test]
fn sigkill_during_reorganisation_resumes_and_loses_nothing() {
    let _load = load(weight::PLAYER);
    let vbr = fixture("vbr60");
    let clip = fixture("rate5m");
    let dir = tempdir();
    let data = dir.path().join("store");
    // A disk added over HTTP must be an existing directory.
    let disk = |n: usize| {
        let d = dir.path().join(format!("d{n}"));
        std::fs::create_dir_all(&d).unwrap();
        format!("{},seek_ms=2,rate_mib_s=40", d.display())
    };
    let out = run(
        Command::new(bin())
            .args(["ingest", "--block-size-kib", "256", "--data"])
            .arg(&data)
            .args(["--disk", &disk(0), "--disk", &disk(1)])
            .arg(&vbr)
            .arg(&clip)
            .arg(demo()),
        300,
    );
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let sources = vec![
        ("demo".to_string(), demo()),
        ("vbr60".to_string(), vbr),
        ("rate5m".to_string(), clip),
    ];
    // Measure an uninterrupted addition.
    let server = Server::start(&data, ServeOptions::default());
    let t = Instant::now();
    let (code, resp) =
        api(&server, "POST", "/api/v1/disks", Some(&format!("{{\"spec\":\"{}\"}}", disk(2))));
    assert_eq!(code, 202, "{resp}");
    let v = wait_idle(&server, Duration::from_secs(120));
    let full = t.elapsed();
    eprintln!("uninterrupted addition of a disk: {full:?}: {}", v["reorganisation"]);
    server.stop();
    fsck_clean(&data, "after an uninterrupted addition");

    let mut rng = SplitMix64::new(SEED ^ 1);
    let mut next_disk = 3;
    let mut active: Vec<u64> = vec![0, 1, 2];
    for i in 0..25 {
        let server = Server::start(&data, ServeOptions::default());
        wait_idle(&server, Duration::from_secs(120));
        // Alternate: add a disk, remove one.
        let (code, resp) = if i % 2 == 0 {
            let spec = disk(next_disk);
            next_disk += 1;
            api(&server, "POST", "/api/v1/disks", Some(&format!("{{\"spec\":\"{spec}\"}}")))
        } else {
            let victim = active[(rng.next_u64() as usize) % active.len()];
            api(&server, "DELETE", &format!("/api/v1/disks/{victim}"), None)
        };
        assert_eq!(code, 202, "round {i}: {resp}");
        let at = Duration::from_micros(rng.next_u64() % (full.as_micros() as u64));
        std::thread::sleep(at);
        let mut server = server;
        server.kill();
        let what = format!("reorganisation {i} killed at {at:?} (seed {:#x})", SEED ^ 1);
        // Restart: the pending reorganisation resumes and completes (or had completed).
        let server = Server::start(&data, ServeOptions::default());
        let v = wait_idle(&server, Duration::from_secs(120));
        active = v["disks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["state"] == "active")
            .map(|d| d["id"].as_u64().unwrap())
            .collect();
        server.stop();
        fsck_clean(&data, &what);
        if i % 5 == 4 {
            all_exact(&data, &sources, &what);
        }
    }
    all_exact(&data, &sources, "after 25 killed reorganisations");
}
