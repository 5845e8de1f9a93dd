//! `isochron bench --shape RATE --server-cmd CMD`: the bench over a link of a given rate, as in
//! Yima §3.2 (100 Mb/s against 1 Gb/s Ethernet) on one machine.
//!
//! Two hosts of a [`Testbed`] (network namespaces `isochron_bench-<pid>-<n>-server` and
//! `…-clients`, each joined to the testbed's bridge by a veth pair), both shaped to RATE with a
//! token bucket (`tc … tbf`, [`Host::shape`](isochron_loadgen::testbed::Host::shape)) on both ends of their veth, so both directions
//! of the path between them see the link. The server also answers at 10.77.0.1 (a testbed
//! alias, routed on-link from the clients' namespace), the address the command lines name,
//! whatever /24 the testbed got. The server command runs in its namespace (`ip netns exec`,
//! then `exec`, so its PID is the server's); once it listens on the first URL's port, the bench
//! re-runs itself in the clients' namespace with the same flags minus
//! `--shape`/`--server-cmd`, plus `--link RATE` and `--server-pid PID` (so the samples read the
//! server's namespace's `/proc/PID/net/dev`). Everything is removed at the end, also on failure
//! (the testbed's drop). Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2.
//!
//! Not here: the measurement itself (`cmds::bench`), the namespaces and shaping
//! (`isochron_loadgen::testbed`).

use std::net::Ipv4Addr;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use isochron_loadgen::testbed::{Testbed, wait_listening};

/// The server's address in its namespace.
const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);

/// The prefix of the bench's testbed namespaces.
const PREFIX: &str = "isochron_bench";

/// The server process, stopped (TERM, then KILL after 10 s) on drop, before the testbed goes.
struct Server(Option<Child>);

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            stop_child(c, Duration::from_secs(10));
        }
    }
}

/// Stops a server process: `SIGTERM`, then `SIGKILL` if it has not exited within `grace`.
pub(crate) fn stop_child(mut c: Child, grace: Duration) {
    let _ = Command::new("kill")
        .args(["-TERM", &c.id().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = c.try_wait() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = c.kill();
    let _ = c.wait();
}

/// Sets up the shaped link, runs the server and the bench, tears everything down.
pub(crate) fn run(rate_bits_s: f64, server_cmd: &str, urls: &[String]) -> anyhow::Result<ExitCode> {
    let _ = Testbed::cleanup_stale(PREFIX);
    let testbed = Testbed::new(PREFIX).context("building the network (needs root)")?;
    let server_host = testbed.add_host("server")?;
    let clients = testbed.add_host("clients")?;
    testbed.add_alias(&server_host, SERVER_ADDR)?;
    let rate_bits_s = rate_bits_s.round() as u64;
    server_host.shape(rate_bits_s).context("shaping the server's link")?;
    clients.shape(rate_bits_s).context("shaping the clients' link")?;
    let rate = format!("{rate_bits_s}bit");
    let server = server_host
        .command("sh")
        .args(["-c", &format!("exec {server_cmd}")])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .context("starting --server-cmd")?;
    let pid = server.id();
    let server = Server(Some(server));
    let port = urls
        .first()
        .and_then(|u| u.strip_prefix("rtsp://"))
        .and_then(|r| r.split('/').next())
        .and_then(|hp| hp.rsplit_once(':'))
        .and_then(|(_, p)| p.parse::<u16>().ok())
        .unwrap_or(554);
    wait_listening(pid, port, Duration::from_secs(60)).context("--server-cmd")?;
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
    let status = clients
        .command(exe)
        .args(&args)
        .status()
        .context("running the bench in the clients' namespace")?;
    drop(server);
    drop(testbed);
    Ok(if status.success() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
