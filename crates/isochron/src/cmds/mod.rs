//! The subcommands.

pub(crate) mod bench;
pub(crate) mod bench_cluster;
pub(crate) mod bench_disk;
pub(crate) mod cat;
pub(crate) mod disk;
pub(crate) mod fsck;
pub(crate) mod ingest;
pub(crate) mod ls;
pub(crate) mod node;
pub(crate) mod plan;
pub(crate) mod play;
pub(crate) mod profile_disk;
pub(crate) mod rm;
pub(crate) mod serve;
pub(crate) mod shape;
pub(crate) mod simulate;

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

/// A disk spec whose path is made absolute against the working directory: paths on the command
/// line mean what the shell means (the store would resolve a relative one against its root).
pub(crate) fn absolute_spec(
    spec: &isochron_store::catalog::DiskSpec,
) -> anyhow::Result<isochron_store::catalog::DiskSpec> {
    let path = std::path::absolute(&spec.path)
        .map_err(|e| anyhow::anyhow!("disk path {}: {e}", spec.path.display()))?;
    Ok(isochron_store::catalog::DiskSpec { path, model: spec.model })
}
