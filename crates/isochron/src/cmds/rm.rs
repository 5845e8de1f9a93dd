//! `isochron rm`.

#![allow(clippy::print_stdout)]

use std::process::ExitCode;

use isochron_diskio::Store;

use super::DataArg;

/// rm arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    data: DataArg,
    /// The object to remove.
    name: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let store = Store::open(&args.data.data)?;
    let rec = store.remove(&args.name)?;
    println!("removed {} ({} blocks)", rec.name, rec.blocks.len());
    Ok(ExitCode::SUCCESS)
}
