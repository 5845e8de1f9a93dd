//! `isochron ls`.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use isochron_base::{BitRate, Bytes};
use isochron_diskio::Store;
use isochron_server::library::ObjectSummary;
use isochron_store::catalog::RENDITION_SEP;

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
    // Each object as the API summarises it, with its source file's name.
    let mut objects: Vec<(ObjectSummary, String)> = store
        .catalog()
        .objects()?
        .into_iter()
        .map(|r| (ObjectSummary::from(&r), r.source_file))
        .collect();
    objects.sort_by(|a, b| listing_order(&a.0).cmp(&listing_order(&b.0)));
    if args.json {
        // The API's summary (`/api/v1/objects`), and the source file's name besides.
        let v = objects
            .into_iter()
            .map(|(summary, source)| {
                let mut o = serde_json::to_value(summary)?;
                o["source"] = source.into();
                Ok(o)
            })
            .collect::<serde_json::Result<Vec<_>>>()?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let summaries: Vec<ObjectSummary> = objects.into_iter().map(|(o, _)| o).collect();
    print_table(&summaries);
    Ok(ExitCode::SUCCESS)
}

/// The listing's table: each title, then its renditions under it as `  ~RUNG`.
fn print_table(objects: &[ObjectSummary]) {
    println!(
        "{:<24} {:>9} {:>11} {:>12} {:>7}  STREAMS",
        "NAME", "DURATION", "SIZE", "AVG RATE", "BLOCKS"
    );
    for o in objects {
        let shown = match &o.rendition {
            Some(rung) => format!("  {RENDITION_SEP}{rung}"),
            None => o.name.clone(),
        };
        // Streams are listed `kind codec`: the table shows the codecs.
        let codecs: Vec<&str> =
            o.streams.iter().map(|s| s.rsplit(' ').next().unwrap_or(s)).collect();
        println!(
            "{:<24} {:>8.1}s {:>11} {:>12} {:>7}  {}",
            shown,
            o.duration_s,
            Bytes(o.bytes).to_string(),
            BitRate(o.avg_bitrate_bps).to_string(),
            o.blocks,
            codecs.join("+"),
        );
    }
}

/// `ls --server URL`: the server's `/api/v1/objects`, listed as a store is.
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
    if json {
        let v: serde_json::Value =
            serde_json::from_str(&body).map_err(|e| anyhow::anyhow!("{shown}: not JSON ({e})"))?;
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(ExitCode::SUCCESS);
    }
    let mut objects: Vec<ObjectSummary> = serde_json::from_str(&body)
        .map_err(|e| anyhow::anyhow!("{shown}: not a list of objects ({e})"))?;
    objects.sort_by(|a, b| listing_order(a).cmp(&listing_order(b)));
    print_table(&objects);
    Ok(ExitCode::SUCCESS)
}

/// Where an object goes in a listing: each title, then its renditions (TITLE~RUNG), highest
/// mean rate first.
fn listing_order(o: &ObjectSummary) -> (&str, bool, std::cmp::Reverse<u64>) {
    let rate = if o.rendition.is_some() { o.avg_bitrate_bps } else { 0 };
    (o.title.as_str(), o.rendition.is_some(), std::cmp::Reverse(rate))
}
