//! `isochron ls`.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use isochron_diskio::Store;
use isochron_server::library::ObjectSummary;
use isochron_store::catalog::{RENDITION_SEP, split_rendition, title_of};

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
    objects.sort_by(|a, b| listing_order(a).cmp(&listing_order(b)));
    if args.json {
        // The API's summary (`/api/v1/objects`), and the source file's name besides.
        let v = objects
            .iter()
            .map(|r| {
                let mut o = serde_json::to_value(ObjectSummary::from(r))?;
                o["source"] = r.source_file.clone().into();
                Ok(o)
            })
            .collect::<serde_json::Result<Vec<_>>>()?;
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

/// Where `r` goes in a listing: each title, then its renditions (TITLE~RUNG), highest mean
/// rate first.
fn listing_order(r: &isochron_store::ObjectRecord) -> (&str, bool, std::cmp::Reverse<u64>) {
    let rendition = split_rendition(&r.name).is_some();
    let rate = if rendition { r.avg_bitrate.0 } else { 0 };
    (title_of(&r.name), rendition, std::cmp::Reverse(rate))
}
