//! `isochron fsck`: checks every copy of every block of every object and the disks for strays.
//!
//! Reports missing, corrupt and orphaned copies, leftover temporary files and an interrupted
//! reorganisation; with `--repair`, repairs what can be repaired: a missing or corrupt copy is
//! re-created from a good one (with `store.replication` K > 1, another replica), read back
//! verified (docs/design/scaling.md, docs/design/block-format.md). Without `--repair` nothing
//! is changed. A clean store is reported as "clean: K copies of every block". Exits 0 when the
//! store is clean (after repair, if asked), 1 otherwise.

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
    /// Repair what can be repaired: delete orphans and temporary files, re-create missing or
    /// corrupt copies from good ones, finish an interrupted reorganisation.
    #[arg(long)]
    repair: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
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
