//! `isochron ingest`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use isochron_base::Bytes;
use isochron_diskio::Store;
use isochron_diskio::ingest::{IngestProgress, ingest_file};
use isochron_store::catalog::{DiskSpec, validate_title};
use isochron_transcode::{Budget, Ladder, LadderPlan};

use super::DataArg;

/// Ingest arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    data: DataArg,
    /// Disk of a new store (repeat for several): DIR, or DIR,seek_ms=10,rate_mib_s=4 for an
    /// emulated disk. Default: one disk in the data dir.
    #[arg(long = "disk", value_name = "DIR[,seek_ms=N,rate_mib_s=N]")]
    disks: Vec<DiskSpec>,
    /// Object name (default: the file stem). Only with a single file.
    #[arg(long, value_name = "NAME")]
    name: Option<String>,
    /// Block size of a new store, in KiB.
    #[arg(long, value_name = "KIB", default_value_t = 1024)]
    block_size_kib: u64,
    /// Copies of every block a new store keeps, each on a distinct disk (1 to 8; at most the
    /// number of disks). An existing store keeps its own: another value is an error
    /// [config: store.replication].
    #[arg(long, value_name = "K")]
    replication: Option<u8>,
    /// Ingest through a running server (any node of a cluster) at this HTTP URL: the file is
    /// streamed to it, and it cuts it and writes each block on its owner's disk.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Also make a rendition ladder of each file (H.264 + AAC, key frames at the same times in
    /// every rendition): `1080p,720p,480p,240p`, a rung's rate may be given (`720p:2500k`).
    /// Each rendition is an object named TITLE~RUNG. Re-running the same command after an
    /// interruption keeps what is stored and makes the rest. With --server the server makes
    /// it (a job, followed here until it ends; `none`: not even the server's own ladder).
    #[arg(long, value_name = "RUNGS")]
    ladder: Option<String>,
    /// Seconds between two key frames of every rendition (0.5 to 10).
    #[arg(long, value_name = "SECS", default_value_t = 2.0)]
    idr_interval: f64,
    /// Threads for the decoder, the filters and each encoder of a ladder (0: ffmpeg chooses).
    #[arg(long, value_name = "N", default_value_t = Budget::default().threads)]
    transcode_threads: u32,
    /// The ladder job's nice level (0 to 19).
    #[arg(long, value_name = "N", default_value_t = Budget::default().nice)]
    transcode_nice: u8,
    /// Media files to ingest: MPEG-TS, M2TS (Blu-ray, AVCHD), MP4 (progressive, `moov` first or
    /// last, or fragmented) or Matroska/WebM with H.264, H.265, AAC, Opus, AC-3 or MP3 tracks.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    anyhow::ensure!(
        args.name.is_none() || args.files.len() == 1,
        "--name names one object; it cannot be used with {} files",
        args.files.len()
    );
    if let Some(url) = &args.server {
        return ingest_remote(url, &args);
    }
    let ladder = match args.ladder.as_deref() {
        None => None,
        Some("none") => anyhow::bail!("--ladder none only says so to a server (--server)"),
        Some(spec) => Some(Ladder::parse(spec).context("--ladder")?),
    };
    let root = &args.data.data;
    let store = if Store::exists(root) {
        anyhow::ensure!(
            args.disks.is_empty(),
            "the store at {} exists; --disk only applies when a store is created",
            root.display()
        );
        let store = Store::open(root)?;
        store.check_replication(args.replication)?;
        store
    } else {
        anyhow::ensure!(
            args.block_size_kib >= 16 && args.block_size_kib.is_multiple_of(4),
            "--block-size-kib {} is not a multiple of 4 of at least 16",
            args.block_size_kib
        );
        let disks =
            args.disks.iter().map(super::absolute_spec).collect::<anyhow::Result<Vec<_>>>()?;
        let k = args.replication.unwrap_or(1);
        let variant = isochron_store::PlacementVariant::default();
        Store::create_with(root, &disks, Bytes::kib(args.block_size_kib), variant, k)
            .with_context(|| format!("creating a store at {}", root.display()))?
    };
    let mut failed = 0;
    for file in &args.files {
        let Some(name) = object_name(&args, file) else {
            eprintln!("isochron: cannot ingest {}: no file name", file.display());
            failed += 1;
            continue;
        };
        if let Err(e) = validate_title(&name) {
            eprintln!("isochron: cannot ingest {}: {e}", file.display());
            failed += 1;
            continue;
        }
        // The ladder is checked against the file before anything is stored: a rung the file
        // cannot give leaves the store as it was.
        let plan = match &ladder {
            None => None,
            Some(ladder) => match plan_ladder(file, ladder, args.idr_interval) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("isochron: cannot ingest {}: {e:#}", file.display());
                    failed += 1;
                    continue;
                }
            },
        };
        let source = file.file_name().map(|n| n.to_string_lossy().into_owned());
        let kept = match (&plan, store.catalog().object(&name)?) {
            (Some(_), Some(rec)) if Some(&rec.source_file) == source.as_ref() => {
                println!("kept {name}: stored before from the same file; making its renditions");
                true
            }
            _ => false,
        };
        if !kept && !ingest_one(&store, file, &name) {
            failed += 1;
            continue;
        }
        if let Some(plan) = &plan {
            let budget =
                Budget { threads: args.transcode_threads, nice: args.transcode_nice, idle: false };
            if let Err(e) = make_renditions(&store, file, &name, plan, budget) {
                eprintln!("isochron: cannot make the renditions of {}: {e:#}", file.display());
                failed += 1;
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Ingests `file` as `name`, saying what was stored or why not. Whether it was.
fn ingest_one(store: &Store, file: &Path, name: &str) -> bool {
    let bar = progress_bar(file);
    let result = ingest_file(store, file, name, &mut |p: IngestProgress| {
        if let Some(b) = &bar {
            b.set_length(p.total_bytes);
            b.set_position(p.bytes_done);
            b.set_message(match p.pass {
                1 => "scanning",
                _ => "storing",
            });
        }
    });
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    match result {
        Ok(report) => {
            if report.trailing_bytes > 0 {
                eprintln!(
                    "isochron: warning: {} ends in a partial MPEG-TS packet ({} bytes); \
                     ingested the whole packets only",
                    file.display(),
                    report.trailing_bytes
                );
            }
            for s in &report.skipped {
                eprintln!("isochron: warning: {}: {s}; ingested the other tracks", file.display());
            }
            print_ingested(&report.record);
        }
        Err(e) => {
            eprintln!("isochron: cannot ingest {}: {e}", file.display());
            return false;
        }
    }
    true
}

/// One line of what an ingest stored.
fn print_ingested(r: &isochron_store::catalog::ObjectRecord) {
    println!(
        "ingested {}: {:.1} s, {}, {} avg / {} peak, {} blocks, {}",
        r.name,
        r.duration.as_secs_f64(),
        r.ts_bytes,
        r.avg_bitrate,
        r.peak_bitrate,
        r.blocks.len(),
        r.streams.iter().map(|s| s.codec.as_str()).collect::<Vec<_>>().join("+"),
    );
}

/// Checks `ladder` against what ffprobe says of `file`.
fn plan_ladder(file: &Path, ladder: &Ladder, idr_interval: f64) -> anyhow::Result<LadderPlan> {
    let interval = std::time::Duration::try_from_secs_f64(idr_interval)
        .map_err(|_| anyhow::anyhow!("--idr-interval {idr_interval} is not a duration"))?;
    let source = isochron_transcode::probe(file)?;
    Ok(LadderPlan::new(source, ladder, interval)?)
}

/// Makes `plan`'s renditions of `file` and stores each as `TITLE~RUNG` (the server's
/// [`make_renditions`](isochron_server::transcoder::make_renditions)), saying what it stored.
fn make_renditions(
    store: &Store,
    file: &Path,
    title: &str,
    plan: &LadderPlan,
    budget: Budget,
) -> anyhow::Result<()> {
    let names: Vec<&str> = plan.rungs.iter().map(|r| r.name.as_str()).collect();
    let bar = transcode_bar(plan.source.duration, &names.join(","));
    let started = std::time::Instant::now();
    // This command holds the store: nothing else runs a job of the title.
    isochron_server::transcoder::sweep_work(store, Some(title));
    let reports = isochron_server::transcoder::make_renditions(
        store,
        file,
        title,
        plan,
        budget,
        None,
        &mut |t| {
            if let Some(b) = &bar {
                b.set_position(t.as_millis() as u64);
            }
        },
    )?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if reports.is_empty() {
        println!("{title}: every rendition is stored");
        return Ok(());
    }
    let made: Vec<&str> = reports
        .iter()
        .map(|r| r.record.name.rsplit_once('~').map_or(r.record.name.as_str(), |(_, rung)| rung))
        .collect();
    println!(
        "transcoded {title} into {} in {:.1} s",
        made.join(", "),
        started.elapsed().as_secs_f64()
    );
    for r in &reports {
        print_ingested(&r.record);
    }
    Ok(())
}

/// A bar over the source's duration, on a terminal.
fn transcode_bar(
    duration: Option<std::time::Duration>,
    what: &str,
) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal as _;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new(duration?.as_millis() as u64);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "transcoding {msg} {wide_bar} {percent}% eta {eta}",
        )
        .ok()?,
    );
    b.set_message(what.to_owned());
    Some(b)
}

/// The object name of `file`: `--name`, else the file stem.
fn object_name(args: &Args, file: &Path) -> Option<String> {
    args.name.clone().or_else(|| file.file_stem().map(|s| s.to_string_lossy().into_owned()))
}

/// `ingest --server URL`: streams each file to the server's `PUT /api/v1/objects/NAME`.
fn ingest_remote(url: &str, args: &Args) -> anyhow::Result<ExitCode> {
    let mut failed = 0;
    for file in &args.files {
        let Some(name) = object_name(args, file) else {
            eprintln!("isochron: cannot ingest {}: no file name", file.display());
            failed += 1;
            continue;
        };
        let mut target = format!("{}/api/v1/objects/{name}", url.trim_end_matches('/'));
        if let Some(l) = &args.ladder {
            target.push_str(&format!("?ladder={l}"));
        }
        let result = (|| -> anyhow::Result<serde_json::Value> {
            let f = std::fs::File::open(file).with_context(|| format!("{}", file.display()))?;
            let len = f.metadata()?.len();
            let bar = progress_bar(file);
            if let Some(b) = &bar {
                b.set_length(len);
                b.set_message("sending");
            }
            let mut reader = Progress { inner: f, bar: bar.clone() };
            let resp = super::api_agent(ureq::Agent::config_builder().http_status_as_error(false))?
                .put(&target)
                // A refusal (401, 403, 409) then comes before the file is sent, not as a broken
                // pipe halfway (RFC 9110 §10.1.1).
                .header("Expect", "100-continue")
                .send(ureq::SendBody::from_reader(&mut reader))
                .map_err(|e| anyhow::anyhow!("{}: {e}", super::redacted(&target)))?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            let status = resp.status();
            let body = resp.into_body().read_to_string().unwrap_or_default();
            let v: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
            if !status.is_success() {
                let msg = v["error"].as_str().map_or_else(|| body.trim().to_owned(), str::to_owned);
                anyhow::bail!("{} answered {status}: {msg}", super::redacted(&target));
            }
            Ok(v)
        })();
        let result = result.and_then(|v| wait_listed(url, &name).map(|()| v)).and_then(|v| {
            println!(
                "ingested {}: {:.1} s, {} bytes, {} blocks (through {})",
                v["name"].as_str().unwrap_or(&name),
                v["duration_s"].as_f64().unwrap_or(0.0),
                v["bytes"].as_u64().unwrap_or(0),
                v["blocks"].as_u64().unwrap_or(0),
                super::redacted(url),
            );
            match v["job"].as_u64() {
                Some(job) => follow_job(url, job),
                None => Ok(()),
            }
        });
        match result {
            Ok(()) => {}
            Err(e) => {
                eprintln!("isochron: cannot ingest {}: {e:#}", file.display());
                failed += 1;
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Follows the server's ladder job `job` (`GET /api/v1/transcode`) until it ends, with a
/// progress bar on a terminal; an error if it failed.
fn follow_job(url: &str, job: u64) -> anyhow::Result<()> {
    let agent = super::api_agent(ureq::Agent::config_builder())?;
    let target = format!("{}/api/v1/transcode", url.trim_end_matches('/'));
    let mut bar: Option<indicatif::ProgressBar> = None;
    loop {
        let body = agent
            .get(&target)
            .call()
            .map_err(|e| anyhow::anyhow!("{}: {e}", super::redacted(&target)))?
            .into_body()
            .read_to_string()?;
        let v: serde_json::Value = serde_json::from_str(&body)?;
        let Some(j) = v["jobs"].as_array().into_iter().flatten().find(|j| j["id"] == job) else {
            anyhow::bail!("the server no longer lists ladder job {job}");
        };
        let rungs: Vec<&str> =
            j["rungs"].as_array().into_iter().flatten().filter_map(|r| r.as_str()).collect();
        if bar.is_none() {
            bar = transcode_bar(Some(std::time::Duration::from_secs(1)), &rungs.join(","));
        }
        if let Some(b) = &bar {
            b.set_position((j["progress"].as_f64().unwrap_or(0.0) * 1000.0) as u64);
        }
        match j["state"].as_str() {
            Some("done") => {
                if let Some(b) = bar {
                    b.finish_and_clear();
                }
                println!(
                    "transcoded {} into {} in {:.1} s (ladder job {job} on the server)",
                    j["title"].as_str().unwrap_or("?"),
                    rungs.join(", "),
                    j["seconds"].as_f64().unwrap_or(0.0)
                );
                return Ok(());
            }
            Some("failed") => {
                if let Some(b) = bar {
                    b.finish_and_clear();
                }
                anyhow::bail!(
                    "ladder job {job} failed: {}",
                    j["error"].as_str().unwrap_or("no reason given")
                );
            }
            _ => std::thread::sleep(std::time::Duration::from_millis(500)),
        }
    }
}

/// How long an ingest through a cluster node waits for every node to list the object.
const LISTED_WITHIN: std::time::Duration = std::time::Duration::from_secs(15);

/// After an ingest through `url`: waits until every node that is up (the cluster's
/// `/api/v1/nodes`; a single server has none) lists `name` in its `/api/v1/objects`, so that
/// the object plays through any node once this returns. An error names the nodes that do not.
fn wait_listed(url: &str, name: &str) -> anyhow::Result<()> {
    let agent = super::api_agent(ureq::Agent::config_builder())?;
    let get = |u: &str| -> Option<serde_json::Value> {
        let body = agent.get(u).call().ok()?.into_body().read_to_string().ok()?;
        serde_json::from_str(&body).ok()
    };
    let base = url.trim_end_matches('/');
    let scheme = if base.starts_with("https://") { "https" } else { "http" };
    let Some(nodes) = get(&format!("{base}/api/v1/nodes")) else { return Ok(()) };
    let up: Vec<(String, String)> = nodes
        .as_array()
        .into_iter()
        .flatten()
        .filter(|n| n["state"] == "up")
        .filter_map(|n| Some((n["name"].as_str()?.to_owned(), n["http"].as_str()?.to_owned())))
        .collect();
    let deadline = std::time::Instant::now() + LISTED_WITHIN;
    let mut missing = up;
    loop {
        missing.retain(|(_, http)| {
            let objects = get(&format!("{scheme}://{http}/api/v1/objects"));
            !objects
                .as_ref()
                .and_then(|o| o.as_array())
                .is_some_and(|a| a.iter().any(|o| o["name"].as_str() == Some(name)))
        });
        if missing.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() >= deadline {
            let names: Vec<&str> = missing.iter().map(|(n, _)| n.as_str()).collect();
            anyhow::bail!(
                "stored, but not listed by node(s) {} within {} s",
                names.join(", "),
                LISTED_WITHIN.as_secs()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A reader that moves a progress bar.
struct Progress<R> {
    inner: R,
    bar: Option<indicatif::ProgressBar>,
}

impl<R: std::io::Read> std::io::Read for Progress<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(b) = &self.bar {
            b.inc(n as u64);
        }
        Ok(n)
    }
}

fn progress_bar(file: &Path) -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal as _;
    let big = std::fs::metadata(file).map(|m| m.len() > 64 << 20).unwrap_or(false);
    if !big || !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new(0);
    b.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:>9} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
        )
        .ok()?,
    );
    Some(b)
}
