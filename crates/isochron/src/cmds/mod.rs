//! The subcommands.

pub(crate) mod cat;
pub(crate) mod disk;
pub(crate) mod fsck;
pub(crate) mod ingest;
pub(crate) mod ls;
pub(crate) mod rm;
pub(crate) mod serve;

use std::path::PathBuf;

/// The default store directory, shared by every subcommand.
pub(crate) const DEFAULT_DATA: &str = "isochron-data";

/// `--data DIR`, shared by the store subcommands.
#[derive(Debug, clap::Args)]
pub(crate) struct DataArg {
    /// Store directory (catalog and default disk).
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DATA)]
    pub(crate) data: PathBuf,
}
