//! `isochron cert --self-signed DIR`: a certificate and key for `[tls]`, to test RTSPS and
//! HTTPS or to serve a closed network whose clients are told to trust it. A public server wants
//! a certificate from a CA (any PEM chain and key work in `[tls]`).

#![allow(clippy::print_stdout)]

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};

/// `isochron cert`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Write a new self-signed pair as DIR/cert.pem and DIR/key.pem (the key readable by its
    /// owner only). Existing files are not overwritten.
    #[arg(long, value_name = "DIR")]
    self_signed: PathBuf,
    /// A name the certificate is for (repeat for several): a DNS name or an IP address.
    /// Default: localhost, 127.0.0.1, ::1 and this host's name.
    #[arg(long = "name", value_name = "HOST")]
    names: Vec<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let names = if args.names.is_empty() { default_names() } else { args.names };
    let pair =
        rcgen::generate_simple_self_signed(names.clone()).context("making the certificate")?;
    let dir = &args.self_signed;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    for f in [&cert, &key] {
        if f.exists() {
            bail!("{} exists; remove it or choose another directory", f.display());
        }
    }
    write_new(&key, pair.signing_key.serialize_pem().as_bytes(), 0o600)?;
    write_new(&cert, pair.cert.pem().as_bytes(), 0o644)?;
    println!("wrote {} and {} for {}", cert.display(), key.display(), names.join(", "));
    println!("[tls]\ncert_file = \"{}\"\nkey_file = \"{}\"", cert.display(), key.display());
    Ok(ExitCode::SUCCESS)
}

fn default_names() -> Vec<String> {
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned(), "::1".to_owned()];
    if let Ok(h) = std::fs::read_to_string("/proc/sys/kernel/hostname") {
        let h = h.trim();
        if !h.is_empty() && !names.iter().any(|n| n == h) {
            names.push(h.to_owned());
        }
    }
    names
}

/// Creates `path` (never replacing a file) with `mode`, then writes `bytes`.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    f.write_all(bytes).with_context(|| format!("writing {}", path.display()))
}
