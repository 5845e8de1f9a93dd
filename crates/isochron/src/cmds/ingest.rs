//! `isochron ingest`.

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use isochron_base::Bytes;
use isochron_diskio::Store;
use isochron_diskio::ingest::{IngestProgress, ingest_file};
use isochron_store::catalog::DiskSpec;

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
        let name = match &args.name {
            Some(n) => n.clone(),
            None => match file.file_stem() {
                Some(s) => s.to_string_lossy().into_owned(),
                None => {
                    eprintln!("isochron: cannot ingest {}: no file name", file.display());
                    failed += 1;
                    continue;
                }
            },
        };
        let bar = progress_bar(file);
        let result = ingest_file(&store, file, &name, &mut |p: IngestProgress| {
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
                    eprintln!(
                        "isochron: warning: {}: {s}; ingested the other tracks",
                        file.display()
                    );
                }
                let r = report.record;
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
            Err(e) => {
                eprintln!("isochron: cannot ingest {}: {e}", file.display());
                failed += 1;
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The object name of `file`: `--name`, else the file stem.
fn object_name(args: &Args, file: &std::path::Path) -> Option<String> {
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
        let target = format!("{}/api/v1/objects/{name}", url.trim_end_matches('/'));
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
        match result.and_then(|v| wait_listed(url, &name).map(|()| v)) {
            Ok(v) => println!(
                "ingested {}: {:.1} s, {} bytes, {} blocks (through {})",
                v["name"].as_str().unwrap_or(&name),
                v["duration_s"].as_f64().unwrap_or(0.0),
                v["bytes"].as_u64().unwrap_or(0),
                v["blocks"].as_u64().unwrap_or(0),
                super::redacted(url),
            ),
            Err(e) => {
                eprintln!("isochron: cannot ingest {}: {e:#}", file.display());
                failed += 1;
            }
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
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

fn progress_bar(file: &std::path::Path) -> Option<indicatif::ProgressBar> {
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
