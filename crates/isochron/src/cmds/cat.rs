//! `isochron cat`: writes a stored object's bytes, read back block by block from the disks.
//!
//! For MPEG-TS the payloads of an object's packets concatenated are the original file (DESIGN
//! §2.2), so this is the byte-exact read-back the crash and scaling tests compare with the source.
//! An object ingested from MP4 or Matroska keeps its file in source blocks after its packets:
//! those are written. Every block is checksum-verified on the way.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use isochron_base::BlockIndex;
use isochron_diskio::Store;

use super::DataArg;

/// cat arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    data: DataArg,
    /// Write to FILE instead of standard output.
    #[arg(short, long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// The object.
    name: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let store = Store::open(&args.data.data)?;
    let rec = store
        .catalog()
        .object(&args.name)?
        .with_context(|| format!("no object named {:?}", args.name))?;
    let mut out: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    let (first, blocks) = rec.source_blocks();
    for i in first..first + blocks.len() {
        let index = BlockIndex(i as u32);
        let block = store
            .read_block_sync(&rec, index)
            .with_context(|| format!("reading block {i} of {}", rec.name))?;
        out.write_all(block.payload())?;
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}
