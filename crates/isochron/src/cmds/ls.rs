//! `isochron ls`.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use isochron_diskio::Store;
use isochron_store::catalog::{RENDITION_SEP, split_rendition};

use super::DataArg;

/// ls arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    data: DataArg,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// List a running server's (a cluster's) objects through its HTTP API instead.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(url) = &args.server {
        return list_remote(url, args.json);
    }
    let store = Store::open(&args.data.data)?;
    let mut objects = store.catalog().objects()?;
    // Each title, then its renditions (TITLE~RUNG), highest rate first.
    objects.sort_by(|a, b| {
        let key = |r: &isochron_store::ObjectRecord| match split_rendition(&r.name) {
            None => (r.name.clone(), 0, 0),
            Some((title, _)) => (title.to_owned(), 1, u64::MAX - r.avg_bitrate.0),
        };
        key(a).cmp(&key(b))
    });
    if args.json {
        let v: Vec<_> = objects
            .iter()
            .map(|r| {
                serde_json::json!({
                    "name": r.name,
                    "id": r.id.0,
                    "duration_s": r.duration.as_secs_f64(),
                    "bytes": r.ts_bytes.0,
                    "blocks": r.blocks.len(),
                    "packets": r.packets,
                    "avg_bitrate_bps": r.avg_bitrate.0,
                    "peak_bitrate_bps": r.peak_bitrate.0,
                    "streams": r.streams.iter().map(|s| format!("{} {}", s.kind, s.codec)).collect::<Vec<_>>(),
                    "source": r.source_file,
                    "title": split_rendition(&r.name).map_or(&*r.name, |(t, _)| t),
                    "rendition": split_rendition(&r.name).map(|(_, rung)| rung),
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<24} {:>9} {:>11} {:>12} {:>7}  STREAMS",
        "NAME", "DURATION", "SIZE", "AVG RATE", "BLOCKS"
    );
    for r in &objects {
        // A rendition is shown under its title as `  ~RUNG`.
        let shown = match split_rendition(&r.name) {
            Some((_, rung)) => format!("  {RENDITION_SEP}{rung}"),
            None => r.name.clone(),
        };
        println!(
            "{:<24} {:>8.1}s {:>11} {:>12} {:>7}  {}",
            shown,
            r.duration.as_secs_f64(),
            r.ts_bytes.to_string(),
            r.avg_bitrate.to_string(),
            r.blocks.len(),
            r.streams.iter().map(|s| s.codec.as_str()).collect::<Vec<_>>().join("+"),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `ls --server URL`: the server's `/api/v1/objects`.
fn list_remote(url: &str, json: bool) -> anyhow::Result<ExitCode> {
    let url = format!("{}/api/v1/objects", url.trim_end_matches('/'));
    let shown = super::redacted(&url);
    let body = super::api_agent(ureq::Agent::config_builder())?
        .get(&url)
        .call()
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?
        .into_body()
        .read_to_string()
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    let v: serde_json::Value =
        serde_json::from_str(&body).map_err(|e| anyhow::anyhow!("{shown}: not JSON ({e})"))?;
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    for o in v.as_array().into_iter().flatten() {
        println!(
            "{:<32} {:>8.1} s {:>12} bytes",
            o["name"].as_str().unwrap_or("?"),
            o["duration_s"].as_f64().unwrap_or(0.0),
            o["bytes"].as_u64().unwrap_or(0)
        );
    }
    Ok(ExitCode::SUCCESS)
}
