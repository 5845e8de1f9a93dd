//! `isochron bench --shape RATE --server-cmd CMD`: the bench over a link of a given rate, as in
//! Yima §3.2 (100 Mb/s against 1 Gb/s Ethernet) on one machine.
//!
//! Two network namespaces, `isochron-s<pid>` for the server and `isochron-c<pid>` for the
//! clients, joined by a veth pair (10.77.0.1 ↔ 10.77.0.2) whose two ends are shaped to RATE
//! with a token bucket (`tc qdisc … tbf`), so both directions see the link. The server command
//! runs in its namespace (`ip netns exec`, then `exec`, so its PID is the server's); once it
//! listens on the first URL's port, the bench re-runs itself in the clients' namespace with the
//! same flags minus `--shape`/`--server-cmd`, plus `--link RATE` and `--server-pid PID` (so the
//! samples read the server's namespace's `/proc/PID/net/dev`). Everything is removed at the end,
//! also on failure. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.
//!
//! Not here: the measurement itself (`cmds::bench`).

use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// The server's address in its namespace.
pub(crate) const SERVER_ADDR: &str = "10.77.0.1";
const CLIENT_ADDR: &str = "10.77.0.2";

/// Namespaces, veth pair and server process, removed on drop.
struct ShapedLink {
    server_ns: String,
    client_ns: String,
    server: Option<Child>,
}

impl Drop for ShapedLink {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = Command::new("kill").args(["-TERM", &c.id().to_string()]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting a namespace deletes the veth end in it, and with it the pair.
        for ns in [&self.server_ns, &self.client_ns] {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

/// Sets up the shaped link, runs the server and the bench, tears everything down.
pub(crate) fn run(rate_bits_s: f64, server_cmd: &str, urls: &[String]) -> anyhow::Result<ExitCode> {
    let id = std::process::id();
    let mut link = ShapedLink {
        server_ns: format!("isochron-s{id}"),
        client_ns: format!("isochron-c{id}"),
        server: None,
    };
    let (sv, cv) = (format!("isvs{id}"), format!("isvc{id}"));
    let (sv, cv) = (&sv[..sv.len().min(15)], &cv[..cv.len().min(15)]);
    let (sns, cns) = (link.server_ns.clone(), link.client_ns.clone());
    ip(&["netns", "add", &sns]).context("creating the server namespace (needs root)")?;
    ip(&["netns", "add", &cns])?;
    ip(&["link", "add", sv, "type", "veth", "peer", "name", cv])?;
    ip(&["link", "set", sv, "netns", &sns])?;
    ip(&["link", "set", cv, "netns", &cns])?;
    let rate = format!("{}bit", rate_bits_s.round() as u64);
    // A burst of at least one 10 ms worth of traffic (and 64 KiB), as tbf needs for high rates.
    let burst = format!("{}", ((rate_bits_s / 8.0 / 100.0) as u64).max(65_536));
    for (ns, dev, addr) in [(&sns, sv, SERVER_ADDR), (&cns, cv, CLIENT_ADDR)] {
        ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", dev])?;
        ip(&["-n", ns, "link", "set", dev, "up"])?;
        ip(&["-n", ns, "link", "set", "lo", "up"])?;
        let out = Command::new("ip")
            .args(["netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf"])
            .args(["rate", &rate, "burst", &burst, "latency", "50ms"])
            .output()
            .context("running tc")?;
        if !out.status.success() {
            bail!("tc on {dev}: {}", String::from_utf8_lossy(&out.stderr).trim());
        }
    }
    let server = Command::new("ip")
        .args(["netns", "exec", &sns, "sh", "-c", &format!("exec {server_cmd}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("starting --server-cmd")?;
    let pid = server.id();
    link.server = Some(server);
    let port = urls
        .first()
        .and_then(|u| u.strip_prefix("rtsp://"))
        .and_then(|r| r.split('/').next())
        .and_then(|hp| hp.rsplit_once(':'))
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .unwrap_or(554);
    wait_listening(pid, port, Duration::from_secs(60))?;
    // The bench again, in the clients' namespace, without the shaping flags.
    let mut args: Vec<String> = Vec::new();
    let mut skip = false;
    for a in std::env::args().skip(1) {
        if skip {
            skip = false;
            continue;
        }
        if a == "--shape" || a == "--server-cmd" {
            skip = true;
            continue;
        }
        if a.starts_with("--shape=") || a.starts_with("--server-cmd=") {
            continue;
        }
        args.push(a);
    }
    if !args.iter().any(|a| a == "--link" || a.starts_with("--link=")) {
        args.extend(["--link".into(), rate]);
    }
    if !args.iter().any(|a| a == "--server-pid" || a.starts_with("--server-pid=")) {
        args.extend(["--server-pid".into(), pid.to_string()]);
    }
    let exe = std::env::current_exe().context("finding the isochron binary")?;
    let status = Command::new("ip")
        .args(["netns", "exec", &cns])
        .arg(exe)
        .args(&args)
        .status()
        .context("running the bench in the clients' namespace")?;
    drop(link);
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// Waits until process `pid`'s network namespace has a TCP socket listening on `port`.
fn wait_listening(pid: u32, port: u16, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        for f in ["tcp", "tcp6"] {
            let text = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).unwrap_or_default();
            if listening(&text, port) {
                return Ok(());
            }
        }
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            bail!("--server-cmd exited before listening on port {port}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    bail!("--server-cmd did not listen on port {port} within {limit:?}")
}

/// Whether a `/proc/net/tcp` table has a socket in LISTEN (0A) on `port`.
fn listening(table: &str, port: u16) -> bool {
    table.lines().skip(1).any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3
            && f[3] == "0A"
            && f[1].rsplit_once(':').and_then(|(_, p)| u16::from_str_radix(p, 16).ok())
                == Some(port)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_listening_port() {
        let t = "  sl  local_address rem_address   st tx_queue rx_queue\n   \
                 0: 0100000A:21CA 00000000:0000 0A 00000000:00000000 00:00000000 00000000\n   \
                 1: 0100000A:1F90 0200000A:C350 01 00000000:00000000 00:00000000 00000000\n";
        assert!(listening(t, 8650));
        assert!(!listening(t, 8080), "established, not listening");
        assert!(!listening(t, 554));
    }
}
