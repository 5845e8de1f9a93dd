//! `isochron disk add | remove | list`: online disk scaling (SCADDAR, Goel et al. ICDE 2002).
//!
//! Offline (`--data DIR`, the store not in use) the command does the whole reorganisation in the
//! foreground: the disk joins (or starts draining), every block whose disk changes is copied, the
//! placement epoch flips atomically, the sources are deleted. Online (`--server URL`) it asks a
//! running server through its HTTP API, which reorganises in the background using only the
//! non-real-time share of disk time while streams play; the command follows the progress until
//! the reorganisation is done.

#![allow(clippy::print_stdout)]

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use isochron_base::DiskId;
use isochron_diskio::Store;
use isochron_diskio::store::ReorgProgress;
use isochron_store::catalog::DiskSpec;
use serde::Deserialize;

use super::DEFAULT_DATA;

/// Where the store is: a directory, or a running server.
#[derive(Debug, clap::Args)]
pub(crate) struct Target {
    /// Store directory (the store must not be in use by a server).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA, conflicts_with = "server")]
    data: PathBuf,
    /// A running server's HTTP API, e.g. http://127.0.0.1:8080.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

/// disk subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Add a disk: PATH or PATH,seek_ms=10,rate_mib_s=4 for an emulated disk.
    Add {
        #[command(flatten)]
        target: Target,
        /// The disk directory, optionally with an emulation model.
        spec: String,
    },
    /// Remove (drain, then retire) a disk.
    Remove {
        #[command(flatten)]
        target: Target,
        /// The disk's id, as `disk list` shows it.
        id: u16,
    },
    /// List the disks and the reorganisation's state.
    List {
        #[command(flatten)]
        target: Target,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
}

/// The JSON of `disk list --json` and of `GET /api/v1/disks`.
#[derive(Debug, Deserialize, serde::Serialize)]
pub(crate) struct DiskListing {
    disks: Vec<DiskJson>,
    /// Copies of every block (`store.replication`); a server before replication sends none: 1.
    #[serde(default = "one_copy")]
    replication: u8,
    reorganisation: ReorgJson,
}

fn one_copy() -> u8 {
    1
}

#[derive(Debug, Deserialize, serde::Serialize)]
struct DiskJson {
    id: u16,
    path: String,
    blocks: u64,
    state: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    model: Option<String>,
}

#[derive(Debug, Deserialize, serde::Serialize)]
struct ReorgJson {
    state: String,
    moved: u64,
    total: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Add { target, spec } => {
            let spec: DiskSpec = spec.parse().map_err(|e| anyhow::anyhow!("{spec:?}: {e}"))?;
            let spec = super::absolute_spec(&spec)?.to_string();
            match target.server {
                Some(url) => {
                    let resp = api(&url)?
                        .post(&format!("{}/api/v1/disks", url.trim_end_matches('/')))
                        .send_json(serde_json::json!({ "spec": spec }))
                        .map_err(|e| http_error(&url, e))?;
                    let r = accepted(resp)?;
                    println!("disk {} joining; reorganising", r["id"]);
                    follow(&url)
                }
                None => {
                    let store = Store::open(&target.data)?;
                    let id = store.add_disk(&spec)?;
                    println!("disk {id} joining; reorganising");
                    reorganize_offline(&store)
                }
            }
        }
        Command::Remove { target, id } => match target.server {
            Some(url) => {
                let resp = api(&url)?
                    .delete(&format!("{}/api/v1/disks/{id}", url.trim_end_matches('/')))
                    .call()
                    .map_err(|e| http_error(&url, e))?;
                accepted(resp)?;
                println!("disk {id} draining; reorganising");
                follow(&url)
            }
            None => {
                let store = Store::open(&target.data)?;
                store.remove_disk(DiskId(id))?;
                println!("disk {id} draining; reorganising");
                reorganize_offline(&store)
            }
        },
        Command::List { target, json } => {
            let listing = match target.server {
                Some(url) => listing(&url)?,
                None => offline_listing(&Store::open(&target.data)?)?,
            };
            if json {
                println!("{}", serde_json::to_string_pretty(&listing)?);
            } else {
                println!("{:>4}  {:<9} {:>9}  PATH", "ID", "STATE", "BLOCKS");
                for d in &listing.disks {
                    let model = d.model.as_deref().map(|m| format!("  ({m})")).unwrap_or_default();
                    println!("{:>4}  {:<9} {:>9}  {}{model}", d.id, d.state, d.blocks, d.path);
                }
                let k = listing.replication;
                println!("{k} {} of every block", if k == 1 { "copy" } else { "copies" });
                let r = &listing.reorganisation;
                println!("reorganisation: {} ({} of {} blocks moved)", r.state, r.moved, r.total);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The listing of an offline store, in the API's shape.
pub(crate) fn offline_listing(store: &Store) -> anyhow::Result<DiskListing> {
    let pending = store.meta().pending().is_some();
    let total = if pending { store.reorg_moves()?.len() as u64 } else { 0 };
    let disks = store
        .disk_usage()?
        .into_iter()
        .map(|(rec, usage)| DiskJson {
            id: rec.id.0,
            path: rec.path.display().to_string(),
            blocks: usage.blocks,
            state: format!("{:?}", rec.state).to_lowercase(),
            model: rec.model.map(|m| m.to_string()),
        })
        .collect();
    let state = if pending { "interrupted" } else { "idle" };
    Ok(DiskListing {
        disks,
        replication: store.replication(),
        reorganisation: ReorgJson { state: state.into(), moved: 0, total, error: None },
    })
}

fn reorganize_offline(store: &Store) -> anyhow::Result<ExitCode> {
    let bar = progress_bar();
    let report = store.reorganize(&mut |p: ReorgProgress| {
        if let Some(b) = &bar {
            b.set_length(p.total);
            b.set_position(p.moved);
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    println!(
        "reorganised: {} blocks ({}) moved in {:.1} s",
        report.moved,
        isochron_base::Bytes(report.bytes),
        report.elapsed.as_secs_f64()
    );
    Ok(ExitCode::SUCCESS)
}

fn api(_url: &str) -> anyhow::Result<ureq::Agent> {
    super::api_agent(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false),
    )
}

fn http_error(url: &str, e: ureq::Error) -> anyhow::Error {
    anyhow::anyhow!("cannot reach the server at {}: {e}", super::redacted(url))
}

/// The JSON body of a `202 Accepted`, or the server's `{"error": …}` as the error.
fn accepted(mut resp: ureq::http::Response<ureq::Body>) -> anyhow::Result<serde_json::Value> {
    let status = resp.status();
    let text = resp.body_mut().read_to_string()?;
    let body: serde_json::Value = serde_json::from_str(&text).unwrap_or(serde_json::Value::Null);
    if status != 202 {
        match body["error"].as_str() {
            Some(e) => bail!("the server refused ({status}): {e}"),
            None => bail!("the server answered {status}: {text}"),
        }
    }
    Ok(body)
}

fn listing(url: &str) -> anyhow::Result<DiskListing> {
    let mut resp = api(url)?
        .get(&format!("{}/api/v1/disks", url.trim_end_matches('/')))
        .call()
        .map_err(|e| http_error(url, e))?;
    if resp.status() != 200 {
        bail!("server answered {}: {}", resp.status(), resp.body_mut().read_to_string()?);
    }
    resp.body_mut().read_json().context("decoding the server's disk list")
}

/// Follows an online reorganisation until it is done, with a progress bar on a terminal.
fn follow(url: &str) -> anyhow::Result<ExitCode> {
    let started = Instant::now();
    let bar = progress_bar();
    loop {
        let l = listing(url)?;
        let r = &l.reorganisation;
        if let Some(b) = &bar {
            b.set_length(r.total);
            b.set_position(r.moved);
        }
        match r.state.as_str() {
            "idle" => break,
            "failed" => bail!("reorganisation failed: {}", r.error.as_deref().unwrap_or("?")),
            _ => std::thread::sleep(Duration::from_millis(250)),
        }
    }
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    println!("reorganised in {:.1} s", started.elapsed().as_secs_f64());
    Ok(ExitCode::SUCCESS)
}

fn progress_bar() -> Option<indicatif::ProgressBar> {
    use std::io::IsTerminal as _;
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let b = indicatif::ProgressBar::new(0);
    b.set_style(
        indicatif::ProgressStyle::with_template("moving {wide_bar} {pos}/{len} blocks, eta {eta}")
            .ok()?,
    );
    Some(b)
}
