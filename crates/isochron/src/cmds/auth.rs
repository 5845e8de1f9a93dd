//! `isochron auth hash`: an argon2id hash of a password for `[[auth.users]] password_hash`, so
//! the configuration file need not hold the password itself (`isochron_auth`).

#![allow(clippy::print_stdout)]

use std::io::BufRead as _;
use std::process::ExitCode;

use anyhow::{Context as _, bail};

/// `isochron auth …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Read a password from stdin (one line) and print its argon2id PHC string.
    Hash,
}

pub(crate) fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Hash => {
            let mut line = String::new();
            std::io::stdin().lock().read_line(&mut line).context("reading the password")?;
            let password = line.trim_end_matches(['\r', '\n']);
            if password.is_empty() {
                bail!("no password on stdin (e.g. `echo -n … | isochron auth hash`)");
            }
            let salt: [u8; 16] = rand::random();
            let hash = isochron_auth::hash_password(password, &salt)
                .map_err(|e| anyhow::anyhow!("hashing: {e}"))?;
            println!("{hash}");
            Ok(ExitCode::SUCCESS)
        }
    }
}
