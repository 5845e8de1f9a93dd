//! Resource sampling from `/proc`, the server-side half of the measurement (He et al. §3: "CPU
//! utilization, I/O wait, memory free size, reading and writing bit rate of disk and network
//! flow rate", sampled every second; Yima §3.1: µ_idle, µ_system, µ_user).
//!
//! The parsers are pure functions over the files' text (tested with sample text); [`ProcSampler`]
//! reads the files and turns two snapshots into rates and shares. Without a server PID it
//! measures the whole machine (`/proc/stat`, `/proc/meminfo`, `/proc/diskstats`,
//! `/proc/net/dev`); with one it adds the process's own CPU, resident memory and IO
//! (`/proc/PID/stat`, `status`, `io`) and reads the network counters of the process's network
//! namespace (`/proc/PID/net/dev`), which is what a shaped run (`--shape`) needs. iowait and idle
//! exist only machine-wide.
//!
//! Not here: the server's own counters (see [`super::prom`]).

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

/// Machine CPU time counters (`/proc/stat`'s `cpu` line), in clock ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// user + nice.
    pub user: u64,
    /// system + irq + softirq.
    pub system: u64,
    /// idle.
    pub idle: u64,
    /// iowait.
    pub iowait: u64,
    /// steal (time a hypervisor gave to others).
    pub steal: u64,
}

impl CpuTimes {
    fn total(&self) -> u64 {
        self.user + self.system + self.idle + self.iowait + self.steal
    }
}

/// Parses the aggregate `cpu` line of `/proc/stat`.
#[must_use]
pub fn parse_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line.split_whitespace().skip(1).map_while(|f| f.parse().ok()).collect();
    let f = |i: usize| v.get(i).copied().unwrap_or(0);
    if v.len() < 4 {
        return None;
    }
    Some(CpuTimes {
        user: f(0) + f(1),
        system: f(2) + f(5) + f(6),
        idle: f(3),
        iowait: f(4),
        steal: f(7),
    })
}

/// `/proc/meminfo`'s total and available memory, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// MemTotal.
    pub total: u64,
    /// MemAvailable.
    pub available: u64,
}

/// Parses `/proc/meminfo`.
#[must_use]
pub fn parse_meminfo(text: &str) -> Option<MemInfo> {
    let kib = |name: &str| {
        text.lines().find_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix(':')?;
            rest.split_whitespace().next()?.parse::<u64>().ok().map(|k| k * 1024)
        })
    };
    Some(MemInfo { total: kib("MemTotal")?, available: kib("MemAvailable")? })
}

/// Disk counters summed over the disks selected.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskCounters {
    /// Bytes read.
    pub read_bytes: u64,
    /// Bytes written.
    pub write_bytes: u64,
    /// Milliseconds spent doing IO, of the busiest disk.
    pub io_ms_max: u64,
    /// Per disk milliseconds spent doing IO (for the busiest disk over an interval).
    pub io_ms: Vec<(String, u64)>,
}

/// Parses `/proc/diskstats`, keeping the devices `include` accepts (sectors are 512 bytes).
#[must_use]
pub fn parse_diskstats(text: &str, include: impl Fn(&str) -> bool) -> DiskCounters {
    let mut c = DiskCounters::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 || !include(f[2]) {
            continue;
        }
        let n = |i: usize| f[i].parse::<u64>().unwrap_or(0);
        c.read_bytes += n(5) * 512;
        c.write_bytes += n(9) * 512;
        c.io_ms_max = c.io_ms_max.max(n(12));
        c.io_ms.push((f[2].to_string(), n(12)));
    }
    c
}

/// Whether a `/proc/diskstats` device is a real whole disk: listed in `/sys/block` and not a
/// loop, RAM or zram device.
#[must_use]
pub fn is_real_disk(name: &str) -> bool {
    !["loop", "ram", "zram"].iter().any(|p| name.starts_with(p))
        && std::path::Path::new("/sys/block").join(name).exists()
}

/// Network counters summed over the interfaces selected.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetCounters {
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
}

/// Parses `/proc/net/dev`, keeping the interfaces `include` accepts.
#[must_use]
pub fn parse_net_dev(text: &str, include: impl Fn(&str) -> bool) -> NetCounters {
    let mut c = NetCounters::default();
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else { continue };
        if !include(name.trim()) {
            continue;
        }
        let f: Vec<u64> = rest.split_whitespace().map_while(|x| x.parse().ok()).collect();
        if f.len() >= 9 {
            c.rx_bytes += f[0];
            c.tx_bytes += f[8];
        }
    }
    c
}

/// A process's user and system CPU time (`/proc/PID/stat` fields 14 and 15), clock ticks.
#[must_use]
pub fn parse_pid_stat(text: &str) -> Option<(u64, u64)> {
    // The command name may hold spaces and parentheses: fields resume after the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15.
    Some((f.get(11)?.parse().ok()?, f.get(12)?.parse().ok()?))
}

/// A process's resident set (`VmRSS` in `/proc/PID/status`), bytes.
#[must_use]
pub fn parse_status_rss(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix("VmRSS:")?;
        rest.split_whitespace().next()?.parse::<u64>().ok().map(|k| k * 1024)
    })
}

/// A process's storage IO (`read_bytes`, `write_bytes` of `/proc/PID/io`).
#[must_use]
pub fn parse_pid_io(text: &str) -> Option<(u64, u64)> {
    let field = |name: &str| {
        text.lines().find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse().ok())
    };
    Some((field("read_bytes")?, field("write_bytes")?))
}

/// One second's resources (shares in %, rates in bytes per second).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct Resources {
    /// Machine CPU in user mode, % of all CPUs.
    pub cpu_user_pct: f64,
    /// Machine CPU in the kernel (system, irq, softirq), % of all CPUs.
    pub cpu_system_pct: f64,
    /// Machine CPU idle, %.
    pub cpu_idle_pct: f64,
    /// Machine CPU waiting for IO, %.
    pub cpu_iowait_pct: f64,
    /// Machine CPU stolen by the hypervisor, %.
    pub cpu_steal_pct: f64,
    /// The server process's CPU (user + system), % of one CPU; 0 without a PID.
    pub server_cpu_pct: f64,
    /// Memory in use on the machine (total − available), bytes.
    pub mem_used_bytes: u64,
    /// Memory available, % of total.
    pub mem_available_pct: f64,
    /// The server process's resident memory, bytes; 0 without a PID.
    pub server_rss_bytes: u64,
    /// Disk reads (of the server process with a PID, else of the machine's disks).
    pub disk_read_bytes_s: f64,
    /// Disk writes (likewise).
    pub disk_write_bytes_s: f64,
    /// Utilisation of the busiest disk, % of the interval it was busy.
    pub disk_util_pct: f64,
    /// Network bytes received (the interfaces selected).
    pub net_rx_bytes_s: f64,
    /// Network bytes sent.
    pub net_tx_bytes_s: f64,
    /// This bench process's CPU, % of one CPU.
    pub bench_cpu_pct: f64,
}

#[derive(Clone, Debug, Default)]
struct Snapshot {
    cpu: CpuTimes,
    mem: MemInfo,
    disk: DiskCounters,
    net: NetCounters,
    server_cpu: Option<(u64, u64)>,
    server_rss: Option<u64>,
    server_io: Option<(u64, u64)>,
    bench_cpu: Option<(u64, u64)>,
}

/// Reads `/proc` once a second and reports rates over the interval.
#[derive(Debug)]
pub struct ProcSampler {
    pid: Option<u32>,
    iface: Option<String>,
    tick_hz: f64,
    prev: Option<(Instant, Snapshot)>,
}

impl ProcSampler {
    /// A sampler for the machine, plus process `pid` if given; `iface` restricts the network
    /// counters to one interface (default: every interface, loopback included, since a bench on
    /// one machine talks over `lo`).
    #[must_use]
    pub fn new(pid: Option<u32>, iface: Option<String>) -> Self {
        // SAFETY: sysconf has no preconditions.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Self { pid, iface, tick_hz: if hz > 0 { hz as f64 } else { 100.0 }, prev: None }
    }

    /// Takes a snapshot; returns the rates since the previous one (`None` the first time).
    pub fn sample(&mut self, now: Instant) -> Option<Resources> {
        let snap = self.read();
        let out = self.prev.as_ref().map(|(t, prev)| self.rates(*t, prev, now, &snap));
        self.prev = Some((now, snap));
        out
    }

    fn read(&self) -> Snapshot {
        let file = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let iface = self.iface.clone();
        let net_file = match self.pid {
            Some(pid) => file(&format!("/proc/{pid}/net/dev")),
            None => file("/proc/net/dev"),
        };
        let net = parse_net_dev(&net_file, |n| iface.as_deref().is_none_or(|i| i == n));
        let pid_file = |what: &str| self.pid.map(|p| file(&format!("/proc/{p}/{what}")));
        Snapshot {
            cpu: parse_stat(&file("/proc/stat")).unwrap_or_default(),
            mem: parse_meminfo(&file("/proc/meminfo")).unwrap_or_default(),
            disk: parse_diskstats(&file("/proc/diskstats"), is_real_disk),
            net,
            server_cpu: pid_file("stat").and_then(|t| parse_pid_stat(&t)),
            server_rss: pid_file("status").and_then(|t| parse_status_rss(&t)),
            server_io: pid_file("io").and_then(|t| parse_pid_io(&t)),
            bench_cpu: parse_pid_stat(&file("/proc/self/stat")),
        }
    }

    fn rates(&self, t0: Instant, a: &Snapshot, t1: Instant, b: &Snapshot) -> Resources {
        let secs = t1.saturating_duration_since(t0).as_secs_f64().max(1e-3);
        let per_s = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
        let ticks = b.cpu.total().saturating_sub(a.cpu.total()).max(1) as f64;
        let share = |x: u64, y: u64| 100.0 * y.saturating_sub(x) as f64 / ticks;
        let proc_pct = |x: Option<(u64, u64)>, y: Option<(u64, u64)>| match (x, y) {
            (Some((u0, s0)), Some((u1, s1))) => {
                100.0 * ((u1 + s1).saturating_sub(u0 + s0)) as f64 / self.tick_hz / secs
            }
            _ => 0.0,
        };
        let (disk_read, disk_write) = match (a.server_io, b.server_io) {
            (Some((r0, w0)), Some((r1, w1))) => (per_s(r0, r1), per_s(w0, w1)),
            _ => (
                per_s(a.disk.read_bytes, b.disk.read_bytes),
                per_s(a.disk.write_bytes, b.disk.write_bytes),
            ),
        };
        let before: HashMap<&str, u64> =
            a.disk.io_ms.iter().map(|(n, v)| (n.as_str(), *v)).collect();
        let busiest_ms = b
            .disk
            .io_ms
            .iter()
            .map(|(n, v)| v.saturating_sub(before.get(n.as_str()).copied().unwrap_or(*v)))
            .max()
            .unwrap_or(0);
        Resources {
            cpu_user_pct: share(a.cpu.user, b.cpu.user),
            cpu_system_pct: share(a.cpu.system, b.cpu.system),
            cpu_idle_pct: share(a.cpu.idle, b.cpu.idle),
            cpu_iowait_pct: share(a.cpu.iowait, b.cpu.iowait),
            cpu_steal_pct: share(a.cpu.steal, b.cpu.steal),
            server_cpu_pct: proc_pct(a.server_cpu, b.server_cpu),
            mem_used_bytes: b.mem.total.saturating_sub(b.mem.available),
            mem_available_pct: if b.mem.total > 0 {
                100.0 * b.mem.available as f64 / b.mem.total as f64
            } else {
                100.0
            },
            server_rss_bytes: b.server_rss.unwrap_or(0),
            disk_read_bytes_s: disk_read,
            disk_write_bytes_s: disk_write,
            disk_util_pct: (100.0 * busiest_ms as f64 / 1000.0 / secs).min(100.0),
            net_rx_bytes_s: per_s(a.net.rx_bytes, b.net.rx_bytes),
            net_tx_bytes_s: per_s(a.net.tx_bytes, b.net.tx_bytes),
            bench_cpu_pct: proc_pct(a.bench_cpu, b.bench_cpu),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat() {
        let text = "cpu  1181320 103906 114212 1628980 19975 0 10674 130392 0 0\n\
                    cpu0 607097 51173 56951 798202 12441 0 4643 63786 0 0\nintr 1 2 3\n";
        let c = parse_stat(text).unwrap();
        assert_eq!(
            c,
            CpuTimes {
                user: 1_181_320 + 103_906,
                system: 114_212 + 10_674,
                idle: 1_628_980,
                iowait: 19_975,
                steal: 130_392
            }
        );
        assert_eq!(parse_stat("intr 1 2\n"), None);
    }

    #[test]
    fn parses_meminfo() {
        let text = "MemTotal:       24729600 kB\nMemFree:         3053568 kB\n\
                    MemAvailable:   22151168 kB\nBuffers: 1 kB\n";
        let m = parse_meminfo(text).unwrap();
        assert_eq!(m.total, 24_729_600 * 1024);
        assert_eq!(m.available, 22_151_168 * 1024);
        assert_eq!(parse_meminfo("MemTotal: 5 kB\n"), None);
    }

    #[test]
    fn parses_diskstats_keeping_the_selected_disks() {
        let text = "   7       0 loop0 9 0 99 0 0 0 0 0 0 0 0 0 0 0 0 0 0\n\
                    253       0 vda 120466 44021 9553578 52381 500954 505410 16466064 621717 0 419212 695346 0 0 0 0 0 0\n\
                    253       1 vda1 120000 44021 9553000 52381 500954 505410 16466000 621717 0 419000 695346 0 0 0 0 0 0\n";
        let c = parse_diskstats(text, |n| n == "vda");
        assert_eq!(c.read_bytes, 9_553_578 * 512);
        assert_eq!(c.write_bytes, 16_466_064 * 512);
        assert_eq!(c.io_ms_max, 419_212);
        assert_eq!(c.io_ms, vec![("vda".to_string(), 419_212)]);
    }

    #[test]
    fn parses_net_dev() {
        let text = "Inter-|   Receive                                                |  Transmit\n \
                    face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
                    lo: 1000 10 0 0 0 0 0 0 2000 20 0 0 0 0 0 0\n  \
                    eth0: 300 3 0 0 0 0 0 0 400 4 0 0 0 0 0 0\n";
        assert_eq!(parse_net_dev(text, |_| true), NetCounters { rx_bytes: 1300, tx_bytes: 2400 });
        assert_eq!(
            parse_net_dev(text, |n| n == "eth0"),
            NetCounters { rx_bytes: 300, tx_bytes: 400 }
        );
    }

    #[test]
    fn parses_process_files() {
        let stat = "19828 (my (odd) prog) R 19781 19781 4361 0 -1 4194304 101 0 0 0 \
                    250 40 0 0 20 0 1 0 1567621 3133440 383";
        assert_eq!(parse_pid_stat(stat), Some((250, 40)));
        assert_eq!(parse_status_rss("Name: x\nVmRSS:\t  2048 kB\n"), Some(2 * 1024 * 1024));
        let io = "rchar: 10\nwchar: 20\nread_bytes: 4096\nwrite_bytes: 8192\n";
        assert_eq!(parse_pid_io(io), Some((4096, 8192)));
    }

    #[test]
    fn samples_this_machine() {
        let mut s = ProcSampler::new(Some(std::process::id()), None);
        let t0 = Instant::now();
        assert!(s.sample(t0).is_none());
        // Burn CPU until this process has used a tenth of a second of it (by its own clock
        // ticks, not the wall's: on a busy machine 200 ms of wall time may hold little of it),
        // so the bench's own share is visible.
        let ticks = || {
            let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
            let after = stat.rsplit_once(')').unwrap().1;
            let f: Vec<&str> = after.split_whitespace().collect();
            // utime and stime: fields 14 and 15 of proc_pid_stat(5), after the name (field 2)
            // the 12th and 13th.
            f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
        };
        let start = ticks();
        let mut x = 0u64;
        while ticks() < start + 10 && t0.elapsed().as_secs() < 30 {
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        assert_ne!(x, 1);
        let r = s.sample(Instant::now()).unwrap();
        let sum =
            r.cpu_user_pct + r.cpu_system_pct + r.cpu_idle_pct + r.cpu_iowait_pct + r.cpu_steal_pct;
        assert!((99.0..=101.0).contains(&sum), "{r:?}");
        assert!(r.mem_used_bytes > 0 && r.mem_available_pct > 0.0);
        assert!(r.server_rss_bytes > 0, "our own RSS");
        assert!(r.bench_cpu_pct > 0.0, "{r:?}");
    }
}
