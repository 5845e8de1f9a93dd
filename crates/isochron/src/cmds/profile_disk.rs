//! `isochron profile-disk`: measures a disk's throughput against IO size (Diskbench; XTREAM
//! §2.3, Fig. 3) and saves it where admission control looks for it.
//!
//! `PATH` is a directory on the disk to measure (the profile goes to
//! `PATH/isochron-profile.json` and its plot next to it), or a store root, in which case every
//! disk of the store gets its profile in its own directory. An emulated disk (a store disk with a
//! model, or `--model seek_ms=…,rate_mib_s=…`) is not measured: its profile is its model's.
//! The measurement itself is `isochron_diskio::profile`.

#![allow(clippy::print_stdout)]

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use isochron_base::Bytes;
use isochron_diskbench::{Curve, plot};
use isochron_diskio::Store;
use isochron_diskio::profile::{self, ProfileOptions};
use isochron_store::DiskModel;

/// profile-disk arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A directory on the disk to profile, or a store root (profiles every disk of the store).
    path: PathBuf,
    /// Where to write the JSON profile [default: PATH/isochron-profile.json].
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
    /// Where to write the plot (SVG) [default: the JSON file's path with .svg].
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
    /// Reads per IO size.
    #[arg(long, value_name = "M", default_value_t = profile::DEFAULT_SAMPLES)]
    samples: usize,
    /// Size of the scratch file read from, MiB (kept in PATH for the next run).
    #[arg(long, value_name = "N", default_value_t = 1024)]
    file_size_mib: u64,
    /// Quantile of the read times the min curve uses (1 = the slowest read).
    #[arg(long, value_name = "Q", default_value_t = 0.99)]
    min_quantile: f64,
    /// Profile an emulated disk from its model instead of measuring (no IO).
    #[arg(long, value_name = "seek_ms=M,rate_mib_s=R")]
    model: Option<String>,
    /// Delete the scratch file afterwards.
    #[arg(long)]
    remove_scratch: bool,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let opts = ProfileOptions {
        samples: args.samples,
        file_size: Bytes::mib(args.file_size_mib),
        min_quantile: args.min_quantile,
        ..ProfileOptions::default()
    };
    let model = match &args.model {
        Some(spec) => match DiskModel::parse_spec(&format!("-,{spec}"))? {
            (_, Some(m)) => Some(m),
            (_, None) => bail!("--model {spec:?}: expected seek_ms=M,rate_mib_s=R"),
        },
        None => None,
    };
    if Store::exists(&args.path) {
        if args.out.is_some() || args.plot.is_some() || model.is_some() {
            bail!("--out, --plot and --model apply to one directory, not to a store");
        }
        let store = Store::open_without_recovery(&args.path)?;
        for (id, disk) in store.disks() {
            println!("disk {id} ({}):", disk.path().display());
            one(disk.path(), disk.model(), None, None, &opts, args.remove_scratch)?;
        }
    } else {
        if !args.path.is_dir() {
            bail!("{} is not a directory", args.path.display());
        }
        one(&args.path, model, args.out, args.plot, &opts, args.remove_scratch)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn one(
    dir: &Path,
    model: Option<DiskModel>,
    out: Option<PathBuf>,
    plot_path: Option<PathBuf>,
    opts: &ProfileOptions,
    remove_scratch: bool,
) -> anyhow::Result<()> {
    let out = out.unwrap_or_else(|| profile::profile_path(dir));
    let plot_path = plot_path.unwrap_or_else(|| out.with_extension("svg"));
    let (p, title) = match model {
        Some(m) => {
            println!("  emulated ({m}): profile from the model, no IO");
            (profile::from_model(&m)?, format!("{} (model {m})", dir.display()))
        }
        None => {
            let m = profile::profile_dir(dir, opts)?;
            println!(
                "  measured {} reads per size in {:.1} s{}{}",
                m.samples,
                m.elapsed.as_secs_f64(),
                if m.created_scratch { " (wrote the scratch file first)" } else { "" },
                if m.direct_io { "" } else { "; WITHOUT O_DIRECT: page cache effects included" }
            );
            if remove_scratch {
                std::fs::remove_file(&m.scratch)
                    .with_context(|| format!("removing {}", m.scratch.display()))?;
            }
            (m.profile, format!("{} (O_DIRECT random reads, QD 1)", dir.display()))
        }
    };
    profile::save(&out, &p)?;
    plot::profile_svg(&p, &title, &plot_path)?;
    println!("  {:>8}  {:>10}  {:>10}  {:>10}", "size", "min MiB/s", "mean MiB/s", "max MiB/s");
    let (min, mean, max) =
        (p.curve_mib_s(Curve::Min), p.curve_mib_s(Curve::Mean), p.curve_mib_s(Curve::Max));
    for (i, s) in p.sizes().iter().enumerate() {
        println!("  {:>8}  {:>10.1}  {:>10.1}  {:>10.1}", s.to_string(), min[i], mean[i], max[i]);
    }
    println!("  wrote {} and {}", out.display(), plot_path.display());
    Ok(())
}
