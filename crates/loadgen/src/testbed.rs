//! A network of Linux network namespaces on one machine, for integration tests and for
//! `isochron bench --shape`.
//!
//! Why: a cluster media server is judged by what happens on the network between machines — a
//! link of a given rate, packets lost, several nodes each with an address of its own — and
//! loopback shows none of it. Namespaces give every node and client its own network stack on
//! one machine, so tests can build that network, run real processes on it (the server, players,
//! `iperf3`, etcd in the root namespace) and tear it down, without a second machine and without
//! `netem` (which the kernels we run on may lack: shaping is `tc tbf`, loss is an nftables rule).
//!
//! ```text
//!   root namespace: bridge tb<pid>-<n>, 10.200.X.1/24  (Testbed::host_ip)
//!        │ veth tb<pid>-<n>-<k>   (tbf on its egress: traffic towards the host)
//!   namespace <prefix>-<pid>-<n>-<label>: eth0, 10.200.X.k/24, default via 10.200.X.1
//!                                         (tbf on eth0's egress: traffic from the host)
//! ```
//!
//! [`Testbed::new`] makes the bridge; [`Testbed::add_host`] a namespace joined to it by a veth
//! pair; [`Host::command`] runs a program in the namespace, [`Host::in_namespace`] runs a
//! closure on a thread that joined it (sockets made there stay in the namespace);
//! [`Host::shape`] limits both directions of the host's link; [`Host::drop_udp_percent`] drops a
//! share of the UDP datagrams the host receives. Dropping the [`Testbed`] removes everything it
//! made, also when a test panics; [`Testbed::cleanup_stale`] removes what killed processes left.
//!
//! Every end knows every other's link-layer address from the start (permanent neighbour
//! entries): no ARP crosses a shaped link, where it would wait behind the queue it shapes and
//! fail, and the kernel would discard what it sent meanwhile without a qdisc counting it
//! ([`Testbed::add_host`] says how that showed).
//!
//! Names never collide, between testbeds of one process or of several: every name carries the
//! process id and a per-process counter (interface names, limited to 15 bytes, in base 36), and
//! the /24 is chosen under a file lock among the subnets of 10.200.0.0/16 that no address or
//! route of the root namespace overlaps.
//!
//! Needs root (`CAP_NET_ADMIN`, `CAP_SYS_ADMIN`) and iproute2; [`Host::drop_udp_percent`] also
//! needs `nft`. [`Testbed::available`] says why a machine cannot run it.
//!
//! Not here: what runs on the network (the server, clients, measurements).

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Write as _;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd as _;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

/// The /16 from which every testbed takes a /24.
const SUPERNET: [u8; 2] = [10, 200];

/// The nftables table [`Host::drop_udp_percent`] owns in a host's namespace.
const NFT_TABLE: &str = "isochron_testbed";

/// At most this many testbeds per process, so that a veth's name (`tb` + pid + `-` + counter
/// + `-` + host, in base 36) fits in 15 bytes.
const MAX_TESTBEDS: u32 = 36 * 36 * 36 * 36;

/// Testbeds made by this process, for unique names.
static TESTBEDS: AtomicU32 = AtomicU32::new(0);

/// A bridge in the root namespace with a /24 of its own, and the namespaces joined to it.
///
/// Dropping it removes every namespace (killing what still runs in them), veth pair, nftables
/// table and the bridge.
#[derive(Debug)]
pub struct Testbed {
    id: String,
    bridge: String,
    /// The bridge's link-layer address (set, so that it never follows its ports').
    mac: String,
    subnet: u8,
    hosts: Mutex<Hosts>,
}

#[derive(Debug, Default)]
struct Hosts {
    /// Every host made, in order: (namespace, root-side veth).
    made: Vec<(String, String)>,
    /// Extra addresses: (host's namespace, address), routed on-link from every other host.
    aliases: Vec<(String, Ipv4Addr)>,
    /// Every address a host answers for, with its namespace and its eth0's link-layer
    /// address: the permanent neighbour entries every other end holds (see [`Testbed::add_host`]).
    neighbours: Vec<(String, Ipv4Addr, String)>,
}

/// A network namespace on a [`Testbed`]: `lo` and `eth0` (its address on the testbed's /24,
/// default route via the bridge).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The namespace's name (`ip netns exec NS …`).
    pub ns: String,
    /// The address of its `eth0`.
    pub ip: Ipv4Addr,
    /// The veth end on the bridge, in the root namespace.
    veth: String,
}

impl Testbed {
    /// Whether this machine can build testbeds; if not, why (not root, no `ip` binary).
    pub fn available() -> Result<(), String> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            return Err("not root: namespaces, veth pairs and tc need CAP_NET_ADMIN and \
                        CAP_SYS_ADMIN"
                .into());
        }
        match Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status() {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(format!("`ip -V` failed ({s}): iproute2 broken?")),
            Err(e) => Err(format!("no `ip` binary (install iproute2): {e}")),
        }
    }

    /// Whether this process runs as root (the one reason tests may skip a testbed).
    pub fn is_root() -> bool {
        // SAFETY: geteuid has no preconditions and cannot fail.
        unsafe { libc::geteuid() == 0 }
    }

    /// Makes a bridge with a /24 of 10.200.0.0/16 that nothing in the root namespace uses, and
    /// gives it the subnet's .1. `name_prefix` (letters, digits, `_`, `.`; at most 32 bytes)
    /// starts the name of every namespace of the testbed, and is what
    /// [`Testbed::cleanup_stale`] looks for.
    pub fn new(name_prefix: &str) -> anyhow::Result<Self> {
        check_name(name_prefix, "name prefix", 32)?;
        if let Err(why) = Self::available() {
            bail!("cannot build a testbed: {why}");
        }
        let pid = std::process::id();
        let _lock = SubnetLock::take()?;
        let subnet = free_subnet(pid)?;
        // A leftover of a dead process with our pid may hold a name: try the next counter.
        let mut last = None;
        for _ in 0..8 {
            let n = TESTBEDS.fetch_add(1, Ordering::Relaxed);
            if n >= MAX_TESTBEDS {
                bail!("{MAX_TESTBEDS} testbeds made by this process: no more interface names");
            }
            let bridge = format!("tb{}-{}", base36(pid), base36(n));
            let id = format!("{name_prefix}-{pid}-{n}");
            let mac = format!(
                "02:1b:{:02x}:{:02x}:{:02x}:{subnet:02x}",
                pid & 0xff,
                n & 0xff,
                n >> 8 & 0xff
            );
            match ip(&["link", "add", "name", &bridge, "address", &mac, "type", "bridge"]) {
                Ok(_) => {}
                Err(e) => {
                    last = Some(e);
                    continue;
                }
            }
            let tb = Self { id, bridge, mac, subnet, hosts: Mutex::new(Hosts::default()) };
            ip(&["link", "set", "dev", &tb.bridge, "alias", &tb.id])?;
            let cidr = format!("{}/24", tb.host_ip());
            ip(&["addr", "add", &cidr, "dev", &tb.bridge])?;
            ip(&["link", "set", "dev", &tb.bridge, "up"])?;
            return Ok(tb);
        }
        Err(last.expect("tried at least once")).context("creating the testbed's bridge")
    }

    /// The bridge's address: the root namespace as every host of the testbed reaches it.
    pub fn host_ip(&self) -> Ipv4Addr {
        Ipv4Addr::new(SUPERNET[0], SUPERNET[1], self.subnet, 1)
    }

    /// The testbed's subnet (its network address; the prefix length is 24).
    pub fn subnet(&self) -> Ipv4Addr {
        Ipv4Addr::new(SUPERNET[0], SUPERNET[1], self.subnet, 0)
    }

    /// The bridge's interface name in the root namespace.
    pub fn bridge(&self) -> &str {
        &self.bridge
    }

    /// `prefix-pid-n`: the start of every namespace name of this testbed, and the bridge's
    /// and veths' alias (`ip link` shows it).
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The namespaces of the hosts made so far, in order.
    pub fn namespaces(&self) -> Vec<String> {
        self.lock().made.iter().map(|(ns, _)| ns.clone()).collect()
    }

    /// The root-namespace interfaces of the testbed: the bridge and each host's veth end.
    pub fn interfaces(&self) -> Vec<String> {
        let mut v = vec![self.bridge.clone()];
        v.extend(self.lock().made.iter().map(|(_, veth)| veth.clone()));
        v
    }

    /// Makes a namespace `<id>-<label>` joined to the bridge: `eth0` with the next address
    /// (.2, .3, …), a default route via the bridge's .1, `lo` up. `label`: letters, digits,
    /// `_`, `.`; at most 32 bytes.
    pub fn add_host(&self, label: &str) -> anyhow::Result<Host> {
        check_name(label, "host label", 32)?;
        let mut hosts = self.lock();
        let k = hosts.made.len() + 2;
        if k > 254 {
            bail!("testbed {}: 253 hosts is the most a /24 holds", self.id);
        }
        let ns = format!("{}-{label}", self.id);
        let veth = format!("{}-{}", self.bridge, base36(k as u32));
        let host =
            Host { ns, ip: Ipv4Addr::new(SUPERNET[0], SUPERNET[1], self.subnet, k as u8), veth };
        ip(&["netns", "add", &host.ns]).context("creating a namespace")?;
        // Recorded at once, so that drop removes it whatever fails next.
        hosts.made.push((host.ns.clone(), host.veth.clone()));
        ip(&[
            "link", "add", "name", &host.veth, "type", "veth", "peer", "name", "eth0", "netns",
            &host.ns,
        ])?;
        ip(&["link", "set", "dev", &host.veth, "alias", &format!("{}-veth", host.ns)])?;
        ip(&["link", "set", "dev", &host.veth, "master", &self.bridge])?;
        ip(&["link", "set", "dev", &host.veth, "up"])?;
        let n = &host.ns;
        ip(&["-n", n, "addr", "add", &format!("{}/24", host.ip), "dev", "eth0"])?;
        ip(&["-n", n, "link", "set", "dev", "eth0", "up"])?;
        ip(&["-n", n, "link", "set", "dev", "lo", "up"])?;
        ip(&["-n", n, "route", "add", "default", "via", &self.host_ip().to_string()])?;
        // Permanent neighbour entries both ways, with the bridge and with every other host:
        // no ARP crosses a shaped link. An ARP probe queued behind seconds of media in a
        // host's token bucket went unanswered (the kernel probes for 3 s), the neighbour
        // failed, and the datagrams sent to it meanwhile were discarded unresolved
        // (`/proc/net/stat/arp_cache`), counted by no qdisc: a UDP player lost seconds of
        // media that the server had sent.
        let link = ip(&["-n", n, "-j", "link", "show", "dev", "eth0"])?;
        let mac = serde_json::from_str::<serde_json::Value>(&link)
            .ok()
            .and_then(|v| v[0]["address"].as_str().map(str::to_owned))
            .with_context(|| format!("{n}: no link-layer address in {link}"))?;
        neighbour(None, host.ip, &mac, &self.bridge)?;
        neighbour(Some(n), self.host_ip(), &self.mac, "eth0")?;
        for (other, addr, other_mac) in &hosts.neighbours {
            neighbour(Some(n), *addr, other_mac, "eth0")?;
            neighbour(Some(other), host.ip, &mac, "eth0")?;
        }
        hosts.neighbours.push((n.clone(), host.ip, mac));
        for (owner, addr) in &hosts.aliases {
            if owner != n {
                ip(&[
                    "-n",
                    n,
                    "route",
                    "add",
                    &format!("{addr}/32"),
                    "dev",
                    "eth0",
                    "scope",
                    "link",
                ])?;
            }
        }
        Ok(host)
    }

    /// Gives `host` the extra address `addr` (on its `eth0`, /32) and routes it on-link from
    /// every other host of the testbed, present and future; so an address a command line names
    /// (e.g. `isochron bench --shape`'s 10.77.0.1) works whatever /24 the testbed got. Not
    /// routed from the root namespace: two testbeds may use the same alias.
    pub fn add_alias(&self, host: &Host, addr: Ipv4Addr) -> anyhow::Result<()> {
        let mut hosts = self.lock();
        if !hosts.made.iter().any(|(ns, _)| *ns == host.ns) {
            bail!("{} is not a host of testbed {}", host.ns, self.id);
        }
        ip(&["-n", &host.ns, "addr", "add", &format!("{addr}/32"), "dev", "eth0"])?;
        let mac = hosts
            .neighbours
            .iter()
            .find(|(ns, ..)| *ns == host.ns)
            .map(|(.., mac)| mac.clone())
            .with_context(|| format!("{}: no link-layer address recorded", host.ns))?;
        for (ns, _) in hosts.made.iter().filter(|(ns, _)| *ns != host.ns) {
            ip(&["-n", ns, "route", "add", &format!("{addr}/32"), "dev", "eth0", "scope", "link"])?;
            neighbour(Some(ns), addr, &mac, "eth0")?;
        }
        hosts.neighbours.push((host.ns.clone(), addr, mac));
        hosts.aliases.push((host.ns.clone(), addr));
        Ok(())
    }

    /// Removes what processes no longer alive left of testbeds with `name_prefix`: namespaces
    /// named `<prefix>-<pid>-…` (killing what still runs in them) and bridges and veths whose
    /// alias is. A pid reused by a live process keeps its leftovers until that process ends.
    /// Returns the names removed.
    pub fn cleanup_stale(name_prefix: &str) -> anyhow::Result<Vec<String>> {
        check_name(name_prefix, "name prefix", 32)?;
        let stale = |name: &str| -> bool {
            name.strip_prefix(name_prefix)
                .and_then(|r| r.strip_prefix('-'))
                .and_then(|r| r.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !pid_alive(pid))
        };
        let mut removed = Vec::new();
        for ns in list_namespaces()? {
            if stale(&ns) {
                kill_namespace_processes(&ns);
                let _ = ip(&["netns", "del", &ns]);
                removed.push(ns);
            }
        }
        let links = ip(&["-j", "link", "show"])?;
        let links: serde_json::Value =
            serde_json::from_str(&links).context("parsing `ip -j link show`")?;
        // Veths first (deleting one end removes the pair), then bridges.
        let mut found: Vec<(bool, String)> = Vec::new();
        for l in links.as_array().into_iter().flatten() {
            let (Some(name), Some(alias)) = (l["ifname"].as_str(), l["ifalias"].as_str()) else {
                continue;
            };
            if stale(alias) {
                found.push((!alias.ends_with("-veth"), name.to_string()));
            }
        }
        found.sort();
        for (_, name) in found {
            if ip(&["link", "del", "dev", &name]).is_ok() {
                removed.push(name);
            }
        }
        Ok(removed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Hosts> {
        self.hosts.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        let hosts = std::mem::take(&mut *self.lock());
        for (ns, veth) in hosts.made.iter().rev() {
            let _ = Command::new("ip")
                .args(["netns", "exec", ns, "nft", "delete", "table", "inet", NFT_TABLE])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            kill_namespace_processes(ns);
            // Deleting this end deletes the pair, even if a process still holds the namespace.
            let _ = ip(&["link", "del", "dev", veth]);
            if let Err(e) = ip(&["netns", "del", ns]) {
                tracing::warn!("testbed {}: {e:#}", self.id);
            }
        }
        if let Err(e) = ip(&["link", "del", "dev", &self.bridge]) {
            tracing::warn!("testbed {}: {e:#}", self.id);
        }
    }
}

impl Host {
    /// `ip netns exec NS program`: `program` run in the host's namespace (add its arguments
    /// with [`Command::arg`]). `ip` execs it, so the child's pid is the program's.
    pub fn command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.ns]).arg(program);
        c
    }

    /// Runs `f` on a new thread that has joined the host's namespace, and returns its result.
    /// Sockets `f` opens belong to the namespace wherever they are used afterwards.
    pub fn in_namespace<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> anyhow::Result<T> {
        let path = format!("/run/netns/{}", self.ns);
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        std::thread::spawn(move || {
            // SAFETY: `file` is an open namespace file; setns only changes this thread's
            // network namespace, which no other thread shares.
            if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                return Err(anyhow::Error::from(std::io::Error::last_os_error()))
                    .with_context(|| format!("setns {path}"));
            }
            Ok(f())
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread in namespace {} panicked", self.ns))?
    }

    /// Limits both directions of the host's link to `rate_bits_per_s`: a token bucket (`tc
    /// qdisc … tbf`) on the egress of both veth ends, `eth0` for what the host sends and the
    /// bridge's end for what it receives. Replaces an earlier shape.
    ///
    /// The burst is 10 ms of traffic at the rate, and at least 64 KiB: veth passes GSO packets
    /// of up to 64 KiB, which a smaller bucket would have to cut, and timers on a loaded
    /// machine fire late, so a bucket must hold what arrives between two of them for the
    /// average to reach the rate. `latency 50ms` bounds the queue (50 ms at the rate, plus the
    /// burst): deep enough for TCP to fill the link, shallow enough that a link that is too
    /// slow shows as loss and delay, as on a real one.
    pub fn shape(&self, rate_bits_per_s: u64) -> anyhow::Result<()> {
        self.shape_with_queue(rate_bits_per_s, Duration::from_millis(50))
    }

    /// [`Host::shape`] with a queue of `queue` at the rate: a deep one (seconds) stands for a
    /// link whose buffers delay what it cannot carry at once rather than drop it (a cable or
    /// cellular link's "bufferbloat"). Changing the rate keeps what is queued (`tc qdisc
    /// replace` of a tbf changes it in place).
    pub fn shape_with_queue(&self, rate_bits_per_s: u64, queue: Duration) -> anyhow::Result<()> {
        if rate_bits_per_s < 8_000 {
            bail!("shape: {rate_bits_per_s} bit/s is below tbf's useful range (8 kbit/s)");
        }
        let rate = format!("{rate_bits_per_s}bit");
        let burst = (rate_bits_per_s / 8 / 100).max(65_536).to_string();
        let latency = format!("{}ms", queue.as_millis().max(1));
        let tbf = ["root", "tbf", "rate", &rate, "burst", &burst, "latency", &latency];
        tc(None, &[&["qdisc", "replace", "dev", &self.veth][..], &tbf].concat())?;
        tc(Some(&self.ns), &[&["qdisc", "replace", "dev", "eth0"][..], &tbf].concat())?;
        Ok(())
    }

    /// Packets the link towards the host has dropped: its token bucket's queue full (since it
    /// was shaped), and the veth pair's own drops on the way (the bridge's end refusing to
    /// transmit, the host's end to receive). What a receiver misses that the server did send.
    pub fn downlink_drops(&self) -> anyhow::Result<u64> {
        let text = tc(None, &["-s", "qdisc", "show", "dev", &self.veth])?;
        let dropped = tc_dropped(&text)?;
        let (sent, received) = self.veth_drops()?;
        Ok(dropped + sent + received)
    }

    /// Packets the host's own link dropped on their way out: its token bucket's queue full
    /// (since it was shaped). What a server sent faster than its link carries.
    pub fn uplink_drops(&self) -> anyhow::Result<u64> {
        let text = tc(Some(&self.ns), &["-s", "qdisc", "show", "dev", "eth0"])?;
        tc_dropped(&text)
    }

    /// The veth pair's drops towards the host: `(transmit drops of the bridge's end, receive
    /// drops of the host's eth0)`, from `ip -s link` (zero where a counter is absent).
    pub fn veth_drops(&self) -> anyhow::Result<(u64, u64)> {
        let count = |text: &str, dir: &str| -> anyhow::Result<u64> {
            let v: serde_json::Value = serde_json::from_str(text)
                .with_context(|| format!("ip -j -s link: not JSON: {text}"))?;
            Ok(v[0]["stats64"][dir]["dropped"].as_u64().unwrap_or(0))
        };
        let tx = count(&ip(&["-j", "-s", "link", "show", "dev", &self.veth])?, "tx")?;
        let rx = count(&ip(&["-n", &self.ns, "-j", "-s", "link", "show", "dev", "eth0"])?, "rx")?;
        Ok((tx, rx))
    }

    /// Removes [`Host::shape`]'s limits.
    pub fn unshape(&self) -> anyhow::Result<()> {
        // Deleting a root qdisc that is the default fails: nothing to remove then.
        let _ = tc(None, &["qdisc", "del", "dev", &self.veth, "root"]);
        let _ = tc(Some(&self.ns), &["qdisc", "del", "dev", "eth0", "root"]);
        Ok(())
    }

    /// Drops `percent` % of the UDP datagrams the host receives, at random (an nftables table
    /// `inet isochron_testbed` in its namespace: `meta l4proto udp numgen random mod 100 <
    /// percent drop` on input). 0 removes the rule; a new call replaces the last.
    pub fn drop_udp_percent(&self, percent: u8) -> anyhow::Result<()> {
        if percent > 100 {
            bail!("drop_udp_percent: {percent} is not a percentage");
        }
        // Declaring the table first makes the delete succeed when it does not exist yet.
        let mut script = format!("table inet {NFT_TABLE}\ndelete table inet {NFT_TABLE}\n");
        if percent > 0 {
            let _ = write!(
                script,
                "table inet {NFT_TABLE} {{\n  chain input {{\n    type filter hook input \
                 priority 0; policy accept;\n    meta l4proto udp numgen random mod 100 < \
                 {percent} drop\n  }}\n}}\n"
            );
        }
        let mut child = self
            .command("nft")
            .args(["-f", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("running nft (nftables)")?;
        child.stdin.take().expect("piped").write_all(script.as_bytes()).context("nft stdin")?;
        let out = child.wait_with_output().context("running nft")?;
        if !out.status.success() {
            bail!("nft in {}: {}", self.ns, String::from_utf8_lossy(&out.stderr).trim());
        }
        Ok(())
    }
}

/// Waits until process `pid`'s network namespace has a TCP socket listening on `port`; fails
/// when the process exits first or `limit` passes. For a server started with
/// [`Host::command`], whose pid is the server's.
pub fn wait_listening(pid: u32, port: u16, limit: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + limit;
    loop {
        for f in ["tcp", "tcp6"] {
            let text = std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).unwrap_or_default();
            if listening(&text, port) {
                return Ok(());
            }
        }
        if !pid_alive(pid) || zombie(pid) {
            bail!("process {pid} exited before listening on port {port}");
        }
        if Instant::now() >= deadline {
            bail!("process {pid} did not listen on port {port} within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
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

fn pid_alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().starts_with('Z')))
        .unwrap_or(false)
}

/// Makes `addr` a permanent neighbour at link-layer address `mac` on `dev` (in namespace `ns`,
/// or the root one): never resolved, never probed.
fn neighbour(ns: Option<&str>, addr: Ipv4Addr, mac: &str, dev: &str) -> anyhow::Result<String> {
    let addr = addr.to_string();
    let args = ["neigh", "replace", &addr, "lladdr", mac, "dev", dev, "nud", "permanent"];
    match ns {
        Some(ns) => ip(&[&["-n", ns][..], &args].concat()),
        None => ip(&args),
    }
}

/// Runs `ip ARGS`, returning its stdout; the error names the command and quotes its stderr.
fn ip(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Datagrams the kernel has dropped since boot because a CPU's input backlog was full
/// (`net.core.netdev_max_backlog`; the second column of `/proc/net/softnet_stat`, summed over
/// CPUs). Every packet over loopback or a veth pair passes that backlog, whatever its namespace:
/// on a loaded machine, bursts fill it and lose packets no qdisc counts.
pub fn softnet_drops() -> anyhow::Result<u64> {
    let text = std::fs::read_to_string("/proc/net/softnet_stat")
        .context("reading /proc/net/softnet_stat")?;
    text.lines()
        .map(|l| {
            let col = l.split_whitespace().nth(1).unwrap_or("");
            u64::from_str_radix(col, 16)
                .with_context(|| format!("/proc/net/softnet_stat: not a hex count in {l:?}"))
        })
        .sum()
}

/// The drop count of `tc -s qdisc show`'s first qdisc:
/// `" Sent 123 bytes 4 pkt (dropped 5, overlimits 6 requeues 0)"`.
fn tc_dropped(text: &str) -> anyhow::Result<u64> {
    text.split("dropped ")
        .nth(1)
        .and_then(|t| t.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse().ok())
        .with_context(|| format!("no drop count in tc's statistics: {text}"))
}

/// Runs `tc` (in namespace `ns`, if given); its output.
fn tc(ns: Option<&str>, args: &[&str]) -> anyhow::Result<String> {
    let mut c = Command::new("tc");
    if let Some(ns) = ns {
        c.args(["-n", ns]);
    }
    let out = c.args(args).stdin(Stdio::null()).output().context("running tc (iproute2)")?;
    if !out.status.success() {
        bail!("tc {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn list_namespaces() -> anyhow::Result<Vec<String>> {
    // `ip netns list` prints "NAME" or "NAME (id: N)".
    Ok(ip(&["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect())
}

/// SIGKILLs every process in namespace `ns` (they are the testbed's: it made the namespace).
fn kill_namespace_processes(ns: &str) {
    let Ok(pids) = ip(&["netns", "pids", ns]) else { return };
    for pid in pids.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
        // SAFETY: kill has no memory-safety preconditions.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

fn check_name(s: &str, what: &str, max: usize) -> anyhow::Result<()> {
    if s.is_empty()
        || s.len() > max
        || !s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        bail!("{what} {s:?}: expected 1 to {max} letters, digits, '_' or '.'");
    }
    Ok(())
}

fn base36(mut n: u32) -> String {
    const DIGITS: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    let mut out = Vec::new();
    loop {
        out.push(DIGITS[(n % 36) as usize]);
        n /= 36;
        if n == 0 {
            break;
        }
    }
    out.reverse();
    String::from_utf8(out).expect("ascii")
}

/// An exclusive `flock` over subnet choice and bridge creation, across processes.
struct SubnetLock(std::fs::File);

impl SubnetLock {
    fn take() -> anyhow::Result<Self> {
        let path = if std::path::Path::new("/run").is_dir() {
            std::path::PathBuf::from("/run/isochron-testbed.lock")
        } else {
            std::env::temp_dir().join("isochron-testbed.lock")
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .with_context(|| format!("opening {}", path.display()))?;
        // SAFETY: a valid open file descriptor; flock blocks until the lock is ours.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error())
                .with_context(|| format!("locking {}", path.display()));
        }
        Ok(Self(file))
    }
}

impl Drop for SubnetLock {
    fn drop(&mut self) {
        // SAFETY: a valid open file descriptor.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// A /24 of [`SUPERNET`] that no address or route of the root namespace overlaps, starting at
/// one the pid and counter pick (so parallel processes rarely probe the same ones).
fn free_subnet(pid: u32) -> anyhow::Result<u8> {
    let mut used = [false; 256];
    let text = ip(&["-o", "-4", "addr", "show"])? + &ip(&["-4", "route", "show", "table", "all"])?;
    for net in text.split_whitespace().filter_map(parse_cidr) {
        let (a, len) = net;
        let o = a.octets();
        // A route of the whole /16 or wider is less specific than a testbed's /24: no matter.
        if len > 16 && [o[0], o[1]] == SUPERNET {
            // A /17../32 inside the /16: mark the /24s it touches.
            let span = if len >= 24 { 1 } else { 1usize << (24 - len) };
            let first = (o[2] as usize) & !(span - 1);
            for x in used.iter_mut().skip(first).take(span) {
                *x = true;
            }
        }
    }
    let start = (pid.wrapping_mul(2_654_435_761) >> 24) as usize
        + TESTBEDS.load(Ordering::Relaxed) as usize;
    (0..256)
        .map(|i| (start + i * 37) % 256)
        .find(|&x| !used[x] && x != 0 && x != 255)
        .map(|x| x as u8)
        .context("every /24 of 10.200.0.0/16 is in use")
}

/// `a.b.c.d/len` (or a bare address, /32) to (address, len).
fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u32)> {
    let (a, len) = s.split_once('/').map_or((s, Some(32)), |(a, l)| (a, l.parse().ok()));
    let len = len.filter(|l| *l <= 32)?;
    Some((a.parse().ok()?, len))
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

    #[test]
    fn interface_names_fit_in_15_bytes() {
        let worst = format!("tb{}-{}-{}", base36(4_194_304), base36(MAX_TESTBEDS - 1), base36(254));
        assert!(worst.len() <= 15, "{worst}");
        assert_eq!(base36(0), "0");
        assert_eq!(base36(36), "10");
    }

    #[test]
    fn parses_cidrs() {
        assert_eq!(parse_cidr("10.200.3.1/24"), Some((Ipv4Addr::new(10, 200, 3, 1), 24)));
        assert_eq!(parse_cidr("10.0.0.1"), Some((Ipv4Addr::new(10, 0, 0, 1), 32)));
        assert_eq!(parse_cidr("default"), None);
        assert_eq!(parse_cidr("1.2.3.4/33"), None);
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("itest", "p", 32).is_ok());
        assert!(check_name("a-b", "p", 32).is_err(), "'-' separates the pid");
        assert!(check_name("", "p", 32).is_err());
        assert!(check_name("a/b", "p", 32).is_err());
    }
}
