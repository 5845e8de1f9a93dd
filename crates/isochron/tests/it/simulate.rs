//! `isochron simulate` and `isochron plan` end to end (issue 6): determinism through the binary,
//! the documented JSON form, the shipped scenario file, rejected keys, the files `--out` writes,
//! the CineGrid format table, and a plan from a profile file as `profile-disk` writes it.

use crate::common;
use std::path::PathBuf;
use std::process::{Command, Output};

fn isochron(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_isochron"))
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run isochron")
}

fn ok(args: &[&str]) -> Output {
    let out = isochron(args);
    assert!(
        out.status.success(),
        "isochron {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn repo_file(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..").join(rel)
}

#[test]
fn same_scenario_and_seed_give_identical_bytes() {
    let _load = common::load(common::weight::LIGHT);
    for (arch, op) in [("p2p", "read"), ("shared-bus", "resample")] {
        let args = ["simulate", "--arch", arch, "--op", op, "--nodes", "1-16", "--json"];
        let a = ok(&args).stdout;
        let b = ok(&args).stdout;
        assert_eq!(a, b, "{arch} {op}: two runs differ");
        // The shipped scenario file is the built-in default.
        let file = repo_file("config/sim-gennart.toml").display().to_string();
        let mut with_file = vec!["simulate", file.as_str()];
        with_file.extend_from_slice(&args[1..]);
        assert_eq!(ok(&with_file).stdout, a, "{arch} {op}: the file differs from the default");
        // Another seed draws other seeks.
        let mut seeded = args.to_vec();
        seeded.extend_from_slice(&["--seed", "2"]);
        assert_ne!(ok(&seeded).stdout, a, "{arch} {op}: the seed is not used");
    }
    let jit = ["simulate", "--arch", "shared-bus", "--jitter", "0.5,0.9", "--strands", "3000"];
    assert_eq!(ok(&jit).stdout, ok(&jit).stdout);
}

#[test]
fn json_has_exactly_the_documented_form() {
    let _load = common::load(common::weight::LIGHT);
    let out = ok(&["simulate", "--arch", "p2p", "--op", "read", "--nodes", "15-16", "--json"]);
    // Keys in the documented order.
    let text = String::from_utf8(out.stdout.clone()).unwrap();
    assert!(
        text.starts_with(r#"{"arch":"p2p","op":"read","points":[{"nodes":15,"throughput_mb_s":"#),
        "{text}"
    );
    let order = ["\"analytic_mb_s\":", "\"bottleneck\":", "\"utilization\":{"];
    let pos: Vec<usize> = order.iter().map(|k| text.find(k).unwrap()).collect();
    assert!(pos.windows(2).all(|w| w[0] < w[1]), "{text}");
    assert!(text.ends_with("}]}\n"), "{text}");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let top: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(top, ["arch", "op", "points"]);
    assert_eq!(v["arch"], "p2p");
    assert_eq!(v["op"], "read");
    let points = v["points"].as_array().unwrap();
    assert_eq!(points.len(), 2);
    for p in points {
        // (serde_json's Value sorts keys; the order is checked on the text above.)
        let keys: Vec<&str> = p.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            ["analytic_mb_s", "bottleneck", "nodes", "throughput_mb_s", "utilization"],
            "{p}"
        );
    }
    let p16 = &points[1];
    assert_eq!(p16["nodes"], 16);
    assert_eq!(p16["bottleneck"], "interface_link");
    let thr = p16["throughput_mb_s"].as_f64().unwrap();
    assert!((27.0..=33.0).contains(&thr), "{thr}");
    assert!(p16["analytic_mb_s"].as_f64().unwrap() >= thr);
    let util = p16["utilization"].as_object().unwrap();
    for c in
        ["disk", "scsi", "bus", "processor", "compressor", "link", "interface_link", "interface"]
    {
        let u = util[c].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&u), "{c} {u}");
    }
    // The shared bus has no links.
    let out = ok(&["simulate", "--arch", "shared-bus", "--nodes", "4", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let util = v["points"][0]["utilization"].as_object().unwrap();
    assert!(util.contains_key("bus") && !util.contains_key("link"), "{util:?}");
}

#[test]
fn unknown_keys_and_bad_arguments_are_named() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[disk]\nseek_ms = 3\n").unwrap();
    let out = isochron(&["simulate", bad.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("seek_ms") && err.contains("bad.toml"), "{err}");
    assert_eq!(err.matches("unknown field").count(), 1, "said once: {err}");

    let out = isochron(&["simulate", "--arch", "ring"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("ring"));
    let out = isochron(&["simulate", "--jitter", "1.5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("1.5"));
}

#[test]
fn overrides_change_the_result() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempfile::tempdir().unwrap();
    let fast = dir.path().join("fast-links.toml");
    std::fs::write(&fast, "[link]\nrate_mb_s = 16.0\n").unwrap();
    let json = |out: Output| -> serde_json::Value { serde_json::from_slice(&out.stdout).unwrap() };
    let base = json(ok(&["simulate", "--nodes", "16", "--json"]));
    let more = json(ok(&["simulate", fast.to_str().unwrap(), "--nodes", "16", "--json"]));
    let (b, m) = (
        base["points"][0]["throughput_mb_s"].as_f64().unwrap(),
        more["points"][0]["throughput_mb_s"].as_f64().unwrap(),
    );
    // Twice the link rate lifts the 32 MB/s link ceiling: the disks (51.7 MB/s) limit now.
    assert!(m > 1.4 * b, "{b} → {m}");
    assert_eq!(more["points"][0]["bottleneck"], "disk");
    // --print-scenario shows the override, and parses back to the same result.
    let printed = ok(&["simulate", fast.to_str().unwrap(), "--print-scenario"]);
    let again = dir.path().join("again.toml");
    std::fs::write(&again, &printed.stdout).unwrap();
    let m2 = json(ok(&["simulate", again.to_str().unwrap(), "--nodes", "16", "--json"]));
    assert_eq!(m2, more);
}

#[test]
fn out_writes_json_csv_and_svg() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    let json = ok(&[
        "simulate",
        "--arch",
        "shared-bus",
        "--op",
        "resample",
        "--nodes",
        "1-4",
        "--json",
        "--out",
        d,
    ])
    .stdout;
    let stem = dir.path().join("simulate-shared-bus-resample");
    let file = std::fs::read(stem.with_extension("json")).unwrap();
    assert_eq!(file, json, "the JSON file is what --json prints");
    let csv = std::fs::read_to_string(stem.with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 5, "{csv}");
    assert!(csv.starts_with("arch,op,nodes,throughput_mb_s,analytic_mb_s,bottleneck,util_disk"));
    let svg = std::fs::read_to_string(stem.with_extension("svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("bus utilisation"));

    let out =
        ok(&["simulate", "--arch", "p2p", "--jitter", "0.3,0.9", "--strands", "2000", "--out", d]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("sd ms") && text.contains("jitter-p2p-read-8.svg"), "{text}");
    let stem = dir.path().join("jitter-p2p-read-8");
    let csv = std::fs::read_to_string(stem.with_extension("csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 2 * 41, "{csv}");
    assert!(std::fs::read_to_string(stem.with_extension("svg")).unwrap().contains("strand delay"));
}

#[test]
fn formats_print_the_cinegrid_table() {
    let _load = common::load(common::weight::LIGHT);
    let out = ok(&["plan", "--formats"]);
    let text = String::from_utf8(out.stdout).unwrap();
    // name, X, Y, fps, bpp, pixels, frame MB, MB/s, Gb/s (CineGrid Table 1, from its formulas).
    let want = [
        ("720p", "1280", "720", "60", "24", "921600", "2.8", "166", "1.33"),
        ("1080p", "1920", "1080", "30", "24", "2073600", "6.2", "187", "1.49"),
        ("2k24", "2048", "1080", "24", "36", "2211840", "10.0", "239", "1.91"),
        ("2k48", "2048", "1080", "48", "36", "2211840", "10.0", "478", "3.82"),
        ("shd", "3840", "2160", "30", "24", "8294400", "24.9", "746", "5.97"),
        ("4k", "4096", "2160", "24", "36", "8847360", "39.8", "956", "7.64"),
    ];
    let rows: Vec<Vec<&str>> =
        text.lines().skip(1).map(|l| l.split_whitespace().collect()).collect();
    assert_eq!(rows.len(), want.len(), "{text}");
    for (row, w) in rows.iter().zip(want) {
        // The label column may hold two words ("720p HD").
        let n = row.len();
        let got = (
            row[0],
            row[n - 8],
            row[n - 7],
            row[n - 6],
            row[n - 5],
            row[n - 4],
            row[n - 3],
            row[n - 2],
            row[n - 1],
        );
        assert_eq!(got, w, "{text}");
    }
}

#[test]
fn plan_from_a_profile_file_and_a_model() {
    let _load = common::load(common::weight::LIGHT);
    let dir = tempfile::tempdir().unwrap();
    // A profile as `isochron profile-disk` writes it: a disk of 8 ms seeks and 100 MiB/s.
    let sizes: Vec<u64> = (12..=23).map(|k| 1u64 << k).collect();
    let mib =
        |s: u64, seek: f64| s as f64 / 1_048_576.0 / (seek + s as f64 / (100.0 * 1_048_576.0));
    let curve = |seek: f64| sizes.iter().map(|s| mib(*s, seek)).collect::<Vec<f64>>();
    let profile = serde_json::json!({
        "sizes": sizes, "min_mib_s": curve(0.0216), "mean_mib_s": curve(0.008), "max_mib_s": curve(0.00012),
    });
    let path = dir.path().join("isochron-profile.json");
    std::fs::write(&path, profile.to_string()).unwrap();
    let p = path.to_str().unwrap();
    let out = ok(&[
        "plan",
        "--format",
        "1080p",
        "--compression",
        "6",
        "--profile",
        p,
        "--disks",
        "4",
        "--link-gb-s",
        "1",
        "--audience",
        "100",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // 1080p at 6:1 is 31.1 MB/s; a 1 Gb/s link at 90 % carries 3 of them; four such disks more.
    assert!((v["stream_mb_s"].as_f64().unwrap() - 31.104).abs() < 1e-3, "{v}");
    assert_eq!(v["per_resource"]["link"], 3, "{v}");
    assert!(v["per_resource"]["disk"].as_u64().unwrap() > 3, "{v}");
    assert_eq!(v["bottleneck"], "link", "{v}");
    assert_eq!(v["streams_per_node"], 3);
    assert_eq!(v["nodes"], 34);

    // The same node with a 10 Gb/s link: the disks limit, and the cycle scheduler run in
    // virtual time over the fitted model misses nothing at what admission admits.
    let out = ok(&[
        "plan",
        "--bitrate",
        "248.832M",
        "--profile",
        p,
        "--disks",
        "4",
        "--link-gb-s",
        "10",
        "--audience",
        "100",
        "--sched",
        "--sched-limit",
        "40",
        "--sched-horizon-s",
        "10",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bottleneck"], "disk", "{v}");
    let disk = v["per_resource"]["disk"].as_u64().unwrap();
    assert_eq!(v["sched"]["admitted"].as_u64().unwrap(), disk, "{v}");
    assert!(v["sched"]["max_n"].as_u64().unwrap() >= disk, "{v}");
    assert_eq!(v["nodes"].as_u64().unwrap(), 100u64.div_ceil(disk));

    // Errors name what is wrong.
    let out = isochron(&["plan", "--format", "8k"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("8k"));
    let out = isochron(&["plan", "--bitrate", "10M", "--disk-seek-ms", "5"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--disk-rate-mb-s"));
}

/// The committed 100 Mb/s Figure 3 run (docs/results/fig3.md): one node, a 100 Mb/s link.
fn fig3_100m() -> (String, serde_json::Value) {
    let path = repo_file("docs/results/fig3-100m/report.json");
    let report = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    (path.display().to_string(), report)
}

#[test]
fn the_planner_predicts_the_measured_100_mb_s_n_max_within_15_percent() {
    let _load = common::load(common::weight::LIGHT);
    // Issue 6: the planner's N_max for the single-node 100 Mb/s bench set-up against the bench's.
    let (_, r) = fig3_100m();
    let measured = r["n_max"].as_u64().unwrap();
    let bits = r["content_mean_bits_s"].as_f64().unwrap().round() as u64;
    let link_gb_s = r["parameters"]["link_bits_s"].as_f64().unwrap() / 1e9;
    let out = ok(&[
        "plan",
        "--bitrate",
        &bits.to_string(),
        "--link-gb-s",
        &link_gb_s.to_string(),
        "--disk-seek-ms",
        "5",
        "--disk-rate-mb-s",
        "400",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let predicted = v["streams_per_node"].as_u64().unwrap();
    assert_eq!(v["bottleneck"], "link", "{v}");
    assert_eq!(r["bottleneck"], "network", "the bench's verdict");
    let err = (predicted as f64 / measured as f64 - 1.0).abs();
    assert!(err <= 0.15, "planned {predicted}, measured {measured}: {v}");
}

#[test]
fn a_bench_report_is_a_node_profile() {
    let _load = common::load(common::weight::LIGHT);
    let (path, r) = fig3_100m();
    let n_max = r["n_max"].as_u64().unwrap();
    let bits = r["content_mean_bits_s"].as_f64().unwrap().round() as u64;
    // Streams of twice the rate: half as many, measured; a tighter modelled CPU wins.
    let twice = (2 * bits).to_string();
    let out = ok(&["plan", "--bench", &path, "--bitrate", &twice, "--audience", "40", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["per_resource"]["bench"], n_max / 2, "{v}");
    assert_eq!(v["bottleneck"], "bench", "{v}");
    assert_eq!(v["bench"]["bottleneck"], "network", "{v}");
    assert_eq!(v["nodes"], 40u64.div_ceil(n_max / 2), "{v}");
    let out = ok(&["plan", "--bench", &path, "--bitrate", &twice, "--cpu-mb-s", "5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("(bottleneck: cpu)"), "{text}");
    assert!(text.contains(&format!("measured: N_max {n_max} of")), "{text}");
    // Not a bench report: the file and the problem are named.
    let other = repo_file("docs/results/simulate/simulate-p2p-read.json").display().to_string();
    let out = isochron(&["plan", "--bench", &other, "--bitrate", "1M"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("simulate-p2p-read.json") && err.contains("not an isochron bench"),
        "{err}"
    );
}
