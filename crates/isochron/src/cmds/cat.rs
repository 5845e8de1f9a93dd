//! `isochron cat`: writes a stored object's bytes, read back block by block from the disks, or
//! (`--server URL`) from a running server's `GET /objects/{name}` (a cluster's: any node reads
//! every block, its own and through their owners).
//!
//! For MPEG-TS the payloads of an object's packets concatenated are the original file
//! (`docs/design/block-format.md`), so this is the byte-exact read-back the crash and scaling tests
//! compare with the source. An object ingested from MP4 or Matroska keeps its file in source blocks
//! after its packets: those are written. Every block is checksum-verified on the way.

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
    /// Read the object from a running server (a cluster node) over HTTP instead.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// The object.
    name: String,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    if let Some(url) = &args.server {
        return cat_remote(url, &args.name, args.output.as_deref());
    }
    let store = Store::open(&args.data.data)?;
    let rec = store
        .catalog()
        .object(&args.name)?
        .with_context(|| format!("no object named {:?}", args.name))?;
    let mut out = open_output(args.output.as_deref())?;
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

/// `cat --server URL NAME`: the server's `GET /objects/{name}`, streamed to the output.
fn cat_remote(url: &str, name: &str, output: Option<&std::path::Path>) -> anyhow::Result<ExitCode> {
    let url = format!("{}/objects/{}", url.trim_end_matches('/'), urlencoding_path(name));
    let shown = super::redacted(&url);
    let res = super::api_agent(ureq::Agent::config_builder())?
        .get(&url)
        .call()
        .map_err(|e| anyhow::anyhow!("{shown}: {e}"))?;
    let mut body = res.into_body().into_reader();
    let mut out = open_output(output)?;
    std::io::copy(&mut body, &mut out).with_context(|| format!("reading {shown}"))?;
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// `name` as one path segment: everything but unreserved characters percent-encoded.
fn urlencoding_path(name: &str) -> String {
    name.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The output: FILE, or standard output.
fn open_output(output: Option<&std::path::Path>) -> anyhow::Result<Box<dyn Write>> {
    Ok(match output {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}
