//! `isochron fsck`: checks every copy of every block of every object and the disks for strays.
//!
//! Reports missing, corrupt and orphaned copies, leftover temporary files and an interrupted
//! reorganisation; with `--repair`, repairs what can be repaired: a missing or corrupt copy is
//! re-created from a good one (with `store.replication` K > 1, another replica), read back
//! verified (docs/design/scaling.md, docs/design/block-format.md). Without `--repair` nothing
//! is changed. A clean store is reported as "clean: K copies of every block". Exits 0 when the
//! store is clean (after repair, if asked), 1 otherwise.
//!
//! `--server URL` checks a running server instead, a cluster's every node (`POST /api/v1/fsck`
//! on any node: each node reads the copies on its own disks in their non-real-time share, and
//! repairs a bad one from a good copy on any node); copies on a node that is down count as not
//! checked, so the cluster is not clean until it is back or its copies are re-created.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use isochron_diskio::Store;
use isochron_diskio::fsck::fsck;

use super::DataArg;

/// fsck arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    data: DataArg,
    /// Check a running server (in a cluster, every node) through its HTTP API
    /// (`http://host:8080`) instead of a store directory.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Repair what can be repaired: delete orphans and temporary files, re-create missing or
    /// corrupt copies from good ones, finish an interrupted reorganisation.
    #[arg(long)]
    repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(server) = &args.server {
        return run_server(server, args.repair, args.json);
    }
    // Without the recovery a normal open runs, so that fsck sees (and reports) what recovery
    // would silently clean up: orphans and temporary files of interrupted writes.
    let store = Store::open_without_recovery(&args.data.data)?;
    let report = fsck(&store, args.repair)?;
    let clean = if args.repair { report.unrepairable.is_empty() } else { report.is_clean() };
    if args.json {
        let list = |v: &[String]| serde_json::json!(v);
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "clean": clean,
                "objects": report.objects,
                "replication": report.replication,
                "blocks_checked": report.blocks_checked,
                "copies_checked": report.copies_checked,
                "missing": report.missing.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                "corrupt": report.corrupt.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                "orphaned": report.orphaned.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
                "temp_files": report.temp_files,
                "interrupted": report.interrupted.as_ref().map(|i| serde_json::json!({"moved": i.moved, "total": i.total})),
                "repaired": list(&report.repaired),
                "unrepairable": list(&report.unrepairable),
            }))?
        );
    } else {
        println!(
            "{} objects, {} blocks checked ({} copies)",
            report.objects, report.blocks_checked, report.copies_checked
        );
        for p in &report.missing {
            println!("missing:  {p}");
        }
        for p in &report.corrupt {
            println!("corrupt:  {p}");
        }
        for p in &report.orphaned {
            println!("orphaned: {p}");
        }
        if report.temp_files > 0 {
            println!("temporary files left by an interrupted write: {}", report.temp_files);
        }
        if let Some(i) = &report.interrupted {
            println!("interrupted reorganisation: {} of {} blocks copied", i.moved, i.total);
        }
        for r in &report.repaired {
            println!("repaired: {r}");
        }
        for r in &report.unrepairable {
            println!("cannot repair: {r}");
        }
        if clean {
            let k = report.replication;
            println!("clean: {k} {} of every block", if k == 1 { "copy" } else { "copies" });
        } else {
            println!("NOT clean");
        }
    }
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// `fsck --server URL`: the cluster's check through any node.
fn run_server(server: &str, repair: bool, json: bool) -> anyhow::Result<ExitCode> {
    use anyhow::{Context as _, anyhow, bail};
    let url = format!("{}/api/v1/fsck?repair={}", server.trim_end_matches('/'), u8::from(repair));
    let shown = super::redacted(&url);
    let agent = super::api_agent(
        ureq::Agent::config_builder()
            .timeout_global(Some(std::time::Duration::from_secs(900)))
            .http_status_as_error(false),
    )?;
    let resp = agent.post(&url).send_empty().map_err(|e| anyhow!("{shown}: {e}"))?;
    let status = resp.status();
    let body = resp.into_body().read_to_string().map_err(|e| anyhow!("{shown}: {e}"))?;
    if !status.is_success() {
        bail!("{shown}: {status} {}", body.trim());
    }
    let v: serde_json::Value =
        serde_json::from_str(&body).with_context(|| format!("{shown}: not JSON"))?;
    let clean = v["clean"].as_bool().unwrap_or(false);
    if json {
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE });
    }
    println!(
        "{} objects, {} blocks, {} of {} copies checked",
        v["objects"], v["blocks"], v["copies_checked"], v["copies_expected"]
    );
    for n in v["nodes"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let node = n["node"].as_str().unwrap_or("?");
        println!("{node}: {} copies checked", n["copies_checked"]);
        let list = |k: &str| n[k].as_array().cloned().unwrap_or_default();
        for b in list("bad") {
            println!(
                "  bad:      {} block {} copy {} on disk {}: {}",
                b["object"].as_str().unwrap_or("?"),
                b["index"],
                b["replica"],
                b["disk"],
                b["error"].as_str().unwrap_or("?")
            );
        }
        for b in list("repaired") {
            println!(
                "  repaired: {} block {} on disk {}",
                b["object"].as_str().unwrap_or("?"),
                b["index"],
                b["disk"]
            );
        }
        if repair {
            for b in list("unrepaired") {
                println!(
                    "  cannot repair: {} block {} on disk {}",
                    b["object"].as_str().unwrap_or("?"),
                    b["index"],
                    b["disk"]
                );
            }
        }
    }
    if let Some(m) = v["unchecked"].as_object() {
        for (node, n) in m {
            println!("{node}: {n} copies not checked (the node is down or did not answer)");
        }
    }
    if clean {
        let k = v["replication"].as_u64().unwrap_or(1);
        println!("clean: {k} {} of every block", if k == 1 { "copy" } else { "copies" });
    } else {
        println!("NOT clean");
    }
    Ok(if clean { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
