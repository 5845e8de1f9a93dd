//! `isochron`, the command-line entry point: thin subcommands over the libraries.
//!
//! Each subcommand lives in `cmds/`; this file parses arguments, sets up logging and maps errors
//! to a message on stderr and a non-zero exit status.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cmds;

/// isochron: a scalable continuous-media server.
#[derive(Debug, Parser)]
#[command(name = "isochron", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve every stored object over RTSP (and the HTTP API).
    Serve(cmds::serve::Args),
    /// Ingest MPEG-TS files into the store.
    Ingest(cmds::ingest::Args),
    /// List stored objects.
    Ls(cmds::ls::Args),
    /// Remove a stored object.
    Rm(cmds::rm::Args),
    /// Write a stored object's bytes, read back from the disks.
    Cat(cmds::cat::Args),
    /// Add, remove and list disks (online SCADDAR reorganisation).
    #[command(subcommand)]
    Disk(cmds::disk::Command),
    /// A cluster's nodes: list them, remove one (its disks drain onto the others).
    #[command(subcommand)]
    Node(cmds::node::Command),
    /// Check every block and the disks; --repair fixes what it can.
    Fsck(cmds::fsck::Args),
    /// Measure a disk's throughput against IO size (Diskbench) for admission control.
    ProfileDisk(cmds::profile_disk::Args),
    /// Run dummy streams on the disks under the cycle scheduler (XTREAM's evaluation).
    BenchDisk(cmds::bench_disk::Args),
    /// Simulate multiprocessor-multidisk architectures (Gennart et al.): throughput,
    /// utilisation, bottleneck and strand-delay jitter against the number of disk nodes.
    Simulate(cmds::simulate::Args),
    /// Plan capacity: the CineGrid format table; streams per node, bottleneck, nodes needed.
    Plan(cmds::plan::Args),
    /// Measure an RTSP server with emulation clients: N_max, the bottleneck, Yima's Figure 3.
    Bench(Box<cmds::bench::Args>),
    /// TLS helpers: `cert --self-signed DIR` writes a certificate and key for `[tls]`.
    Cert(cmds::cert::Args),
    /// Access control helpers: `auth hash` makes a password_hash for `[[auth.users]]`.
    #[command(subcommand)]
    Auth(cmds::auth::Command),
    /// Play an RTSP URL as a player does: jitter buffer in RTP sequence order, the PCR clock,
    /// per-source counts; --out writes the MPEG-TS received, --json the summary.
    Play(cmds::play::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default_level = match cli.command {
        Command::Serve(_) => "info",
        _ => "warn",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    use std::io::IsTerminal as _;
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let result = match cli.command {
        Command::Serve(a) => cmds::serve::run(a),
        Command::Ingest(a) => cmds::ingest::run(a),
        Command::Ls(a) => cmds::ls::run(a),
        Command::Rm(a) => cmds::rm::run(a),
        Command::Cat(a) => cmds::cat::run(a),
        Command::Disk(c) => cmds::disk::run(c),
        Command::Node(c) => cmds::node::run(c),
        Command::Fsck(a) => cmds::fsck::run(a),
        Command::ProfileDisk(a) => cmds::profile_disk::run(a),
        Command::BenchDisk(a) => cmds::bench_disk::run(a),
        Command::Simulate(a) => cmds::simulate::run(a),
        Command::Plan(a) => cmds::plan::run(a),
        Command::Bench(a) => cmds::bench::run(*a),
        Command::Play(a) => cmds::play::run(a),
        Command::Auth(c) => cmds::auth::run(c),
        Command::Cert(a) => cmds::cert::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("isochron: {e:#}");
            }
            ExitCode::FAILURE
        }
    }
}
