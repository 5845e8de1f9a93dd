//! `isochron rm`.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use isochron_diskio::Store;
use isochron_store::catalog::{is_rendition_of, split_rendition};

use super::DataArg;

/// rm arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    data: DataArg,
    /// The object to remove: a title goes with its renditions (TITLE~RUNG); a rendition alone
    /// by its own name.
    name: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let store = Store::open(&args.data.data)?;
    // The renditions first: a title is never left listed without the ladder it had, only
    // the other way round if this stops half-way (and `rm` again finishes it).
    if split_rendition(&args.name).is_none() {
        let renditions: Vec<String> = store
            .catalog()
            .objects()?
            .into_iter()
            .filter(|r| is_rendition_of(&r.name, &args.name))
            .map(|r| r.name)
            .collect();
        for name in renditions {
            let rec = store.remove(&name)?;
            println!("removed {} ({} blocks)", rec.name, rec.blocks.len());
        }
    }
    let rec = store.remove(&args.name)?;
    println!("removed {} ({} blocks)", rec.name, rec.blocks.len());
    Ok(ExitCode::SUCCESS)
}
