//! `isochron node`: a cluster's nodes through any node's HTTP API (Yima §2.1: a node is a group
//! of disks, added and removed with SCADDAR).
//!
//! `node ls --server URL` lists every node etcd knows (`GET /api/v1/nodes`); `node remove NAME
//! --server URL` drains node `NAME` (`DELETE /api/v1/nodes/NAME`): its disks leave the placement
//! as one SCADDAR removal, it copies its blocks to the other nodes' disks in their non-real-time
//! share while streams play, and the epoch flips when every copy is durable. `--wait` follows
//! the removing node's `/api/v1/reorg` until it is done. A node joins by starting it
//! (`serve --etcd … --node NAME`).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};

/// node subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// List the cluster's nodes.
    Ls {
        /// Any node's HTTP address (`http://host:8080`).
        #[arg(long, value_name = "URL")]
        server: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Drain a node's disks onto the other nodes and retire them.
    Remove {
        /// The node's name.
        name: String,
        /// Any node's HTTP address (`http://host:8080`).
        #[arg(long, value_name = "URL")]
        server: String,
        /// Wait until the reorganisation is done (at most S seconds).
        #[arg(long, value_name = "S")]
        wait: Option<u64>,
    },
}

fn agent() -> anyhow::Result<ureq::Agent> {
    super::api_agent(
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(30)))
            .http_status_as_error(false),
    )
}

fn get_json(agent: &ureq::Agent, url: &str) -> anyhow::Result<serde_json::Value> {
    let shown = super::redacted(url);
    let resp = agent.get(url).call().map_err(|e| anyhow!("{shown}: {e}"))?;
    let status = resp.status();
    let body = resp.into_body().read_to_string().map_err(|e| anyhow!("{shown}: {e}"))?;
    if !status.is_success() {
        bail!("{shown}: {status} {}", body.trim());
    }
    serde_json::from_str(&body).with_context(|| format!("{shown}: not JSON"))
}

/// Runs `isochron node …`.
pub(crate) fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    let agent = agent()?;
    match cmd {
        Command::Ls { server, json } => {
            let url = format!("{}/api/v1/nodes", server.trim_end_matches('/'));
            let v = get_json(&agent, &url)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("{:<12} {:>6} {:<5} {:<22} DISKS", "NAME", "ID", "STATE", "RTSP");
            for n in v.as_array().map(Vec::as_slice).unwrap_or_default() {
                let disks: Vec<String> = n["disks"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                println!(
                    "{:<12} {:>6} {:<5} {:<22} {}",
                    n["name"].as_str().unwrap_or("?"),
                    n["id"],
                    n["state"].as_str().unwrap_or("?"),
                    n["rtsp"].as_str().unwrap_or("?"),
                    disks.join(",")
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Remove { name, server, wait } => {
            let base = server.trim_end_matches('/');
            let url = format!("{base}/api/v1/nodes/{name}");
            let shown = super::redacted(&url);
            let resp = agent.delete(&url).call().map_err(|e| anyhow!("{shown}: {e}"))?;
            let status = resp.status();
            let body = resp.into_body().read_to_string().unwrap_or_default();
            if !status.is_success() {
                let msg = serde_json::from_str::<serde_json::Value>(&body)
                    .ok()
                    .and_then(|v| v["error"].as_str().map(str::to_owned))
                    .unwrap_or(body);
                bail!("{shown}: {status}: {}", msg.trim());
            }
            eprintln!("node {name} is draining: {}", body.trim());
            let Some(limit) = wait else { return Ok(ExitCode::SUCCESS) };
            let target = serde_json::from_str::<serde_json::Value>(&body)
                .ok()
                .and_then(|v| v["epoch"].as_u64())
                .ok_or_else(|| anyhow!("{shown}: no epoch in the answer: {body}"))?;
            // The removed node runs the reorganisation: follow its status.
            let nodes = get_json(&agent, &format!("{base}/api/v1/nodes"))?;
            let http = nodes
                .as_array()
                .and_then(|a| a.iter().find(|n| n["name"] == name.as_str()))
                .and_then(|n| n["http"].as_str().map(str::to_owned))
                .ok_or_else(|| anyhow!("node {name} has no HTTP address to follow"))?;
            let deadline = Instant::now() + Duration::from_secs(limit);
            loop {
                let r = get_json(&agent, &format!("http://{http}/api/v1/reorg"))?;
                let done = r["state"] == "idle" && r["epoch"].as_u64() >= Some(target);
                if r["state"] == "failed" {
                    bail!("node {name}'s reorganisation failed: {}", r["error"]);
                }
                if done {
                    eprintln!("node {name} is drained: {} blocks moved", r["moved"]);
                    return Ok(ExitCode::SUCCESS);
                }
                if Instant::now() >= deadline {
                    bail!("node {name} is still draining after {limit} s: {r}");
                }
                std::thread::sleep(Duration::from_millis(500));
            }
        }
    }
}
