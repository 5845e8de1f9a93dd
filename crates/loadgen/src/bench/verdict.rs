//! Naming the bottleneck, in the manner of He et al. (§4–5: "CPU is not fully used … I/O
//! ability become the server performance bottleneck"; "CPU utilization reaches about 80 %, CPU
//! becomes the server bottleneck"; memory "is not exhausted, it is not a bottleneck") and of Yima
//! §3.2 (100 Mb/s: B_net ≈ 70 % of the link while CPU and disk stay under 50 % → network; 1 Gb/s:
//! CPU ≈ 80 % → CPU).
//!
//! The rules look at the resources at the load where the service first failed (the first N
//! past N_max), in this order, and the first that holds names the bottleneck; the others that
//! hold are listed as further evidence:
//!
//! 1. **network**: B_net (received by the clients, or sent by the server) ≥ 90 % of the link, or
//!    ≥ 75 % with packets lost (a link's queue drops VBR peaks before the mean fills it);
//! 2. **CPU**: the machine's CPUs busy ≥ 80 % of the time — He et al.'s and Yima's "about 80 %"
//!    — counting everything but idle and iowait: user, system, interrupts, and on a VM the time
//!    the host stole, which the guest cannot use either (the evidence says how much of it the
//!    server and the bench used: a busy machine with an idle server is someone else's load);
//! 3. **disk**: iowait ≥ 50 %, the busiest disk busy ≥ 90 % of the time, or the server reports
//!    missed deadlines or admission rejects (its admission control is by disk profile);
//! 4. **memory**: less than 5 % of memory available;
//! 5. **client**: the bench process itself used ≥ 90 % of a CPU (the measurement is suspect).
//!
//! None holding at a failure → "undetermined"; no failure → "none reached".
//!
//! Not here: the numbers (see [`super::report`]).

use std::fmt;

use serde::Serialize;

use super::report::PerN;

/// The resource that limits N.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bottleneck {
    /// The network link.
    Network,
    /// The CPU.
    Cpu,
    /// The disks (or the server's disk-based admission).
    Disk,
    /// Memory.
    Memory,
    /// The bench client itself.
    Client,
    /// Service failed, but no resource rule held.
    Undetermined,
    /// The service never failed in the loads tried.
    NoneReached,
}

impl fmt::Display for Bottleneck {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Network => "network link",
            Self::Cpu => "CPU",
            Self::Disk => "disk",
            Self::Memory => "memory",
            Self::Client => "bench client",
            Self::Undetermined => "undetermined",
            Self::NoneReached => "none reached",
        })
    }
}

/// The rules' thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Thresholds {
    /// Share of the link counted as saturated.
    pub link_share: f64,
    /// Share of the link counted as saturated when packets were lost: a link's queue drops the
    /// peaks of VBR traffic before its mean reaches the rate.
    pub link_share_lossy: f64,
    /// CPU busy (100 − idle − iowait: user, system, interrupts, steal), %.
    pub cpu_busy_pct: f64,
    /// iowait, %.
    pub iowait_pct: f64,
    /// Busiest disk's utilisation, %.
    pub disk_util_pct: f64,
    /// Memory available below this, %.
    pub mem_available_pct: f64,
    /// The bench's own CPU, % of one CPU.
    pub bench_cpu_pct: f64,
}

impl Default for Thresholds {
    fn default() -> Self {
        Self {
            link_share: 0.9,
            link_share_lossy: 0.75,
            cpu_busy_pct: 80.0,
            iowait_pct: 50.0,
            disk_util_pct: 90.0,
            mem_available_pct: 5.0,
            bench_cpu_pct: 90.0,
        }
    }
}

/// The verdict and its evidence.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// The bottleneck named.
    pub bottleneck: Bottleneck,
    /// The number of clients the evidence was taken at.
    pub at_n: Option<usize>,
    /// One line per observation, the deciding one first.
    pub evidence: Vec<String>,
}

/// Applies the rules to `at`, the aggregate at the first failing N (`failed`), or at the
/// highest N tried when nothing failed. `link_bits_s` is the link rate when known.
#[must_use]
pub fn decide(
    at: Option<&PerN>,
    failed: bool,
    link_bits_s: Option<f64>,
    t: &Thresholds,
) -> Verdict {
    let Some(a) = at else {
        return Verdict {
            bottleneck: Bottleneck::NoneReached,
            at_n: None,
            evidence: vec!["no sample with clients playing".into()],
        };
    };
    let mut fired: Vec<(Bottleneck, String)> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let net_bits = a.b_net_bits_s.max(a.net_tx_bytes_s * 8.0);
    match link_bits_s {
        Some(link) => {
            let share = net_bits / link;
            let line = format!(
                "B_net {:.1} Mb/s = {:.0} % of the {:.1} Mb/s link",
                net_bits / 1e6,
                share * 100.0,
                link / 1e6
            );
            if share >= t.link_share {
                fired.push((Bottleneck::Network, line));
            } else if a.lost > 0 && share >= t.link_share_lossy {
                fired.push((Bottleneck::Network, format!("{line}, {} packets lost", a.lost)));
            } else {
                notes.push(line);
            }
        }
        None => notes.push(format!(
            "B_net {:.1} Mb/s (link rate unknown: give --link or --shape)",
            net_bits / 1e6
        )),
    }
    // No CPU figures at all (every one zero): nothing was sampled, nothing is busy.
    let sampled = a.cpu_idle_pct + a.cpu_iowait_pct + a.cpu_user_pct + a.cpu_system_pct > 0.0;
    let busy = if sampled {
        (100.0 - a.cpu_idle_pct - a.cpu_iowait_pct).max(a.cpu_user_pct + a.cpu_system_pct)
    } else {
        0.0
    };
    let mut line = format!(
        "CPU {busy:.0} % busy (µ_user {:.0} %, µ_system {:.0} %, idle {:.0} %, iowait {:.0} %; \
         the rest is interrupts and steal)",
        a.cpu_user_pct, a.cpu_system_pct, a.cpu_idle_pct, a.cpu_iowait_pct
    );
    if a.server_cpu_pct > 0.0 {
        // Whose CPU it is: a busy machine with an idle server is someone else's load.
        line.push_str(&format!(
            "; the server used {:.0} % and the bench {:.0} % of a CPU",
            a.server_cpu_pct, a.bench_cpu_pct
        ));
    }
    if busy >= t.cpu_busy_pct {
        fired.push((Bottleneck::Cpu, line));
    } else {
        notes.push(line);
    }
    let mut disk = Vec::new();
    if a.cpu_iowait_pct >= t.iowait_pct {
        disk.push(format!("iowait {:.0} %", a.cpu_iowait_pct));
    }
    if a.disk_util_pct >= t.disk_util_pct {
        disk.push(format!("busiest disk {:.0} % busy", a.disk_util_pct));
    }
    if a.missed_deadlines.is_some_and(|m| m > 0.0) {
        disk.push(format!("{:.0} missed block deadlines", a.missed_deadlines.unwrap_or(0.0)));
    }
    if a.admission_rejects.is_some_and(|r| r > 0.0) {
        disk.push(format!(
            "{:.0} PLAYs refused by disk admission",
            a.admission_rejects.unwrap_or(0.0)
        ));
    }
    if disk.is_empty() {
        notes.push(format!(
            "disk: iowait {:.0} %, busiest disk {:.0} % busy, {:.1} MB/s read",
            a.cpu_iowait_pct,
            a.disk_util_pct,
            a.disk_read_bytes_s / 1e6
        ));
    } else {
        fired.push((Bottleneck::Disk, format!("disk: {}", disk.join(", "))));
    }
    let line = format!("memory {:.0} % available", a.mem_available_pct);
    if a.mem_available_pct < t.mem_available_pct {
        fired.push((Bottleneck::Memory, line));
    } else {
        notes.push(line);
    }
    let line = format!("the bench itself used {:.0} % of a CPU", a.bench_cpu_pct);
    if a.bench_cpu_pct >= t.bench_cpu_pct {
        fired.push((Bottleneck::Client, line));
    } else {
        notes.push(line);
    }
    let service = format!(
        "at N = {}: B_avgNet {:.2} Mb/s for content of {:.2} Mb/s, {} starvations",
        a.n,
        a.b_avgnet_bits_s / 1e6,
        a.content_bits_s / 1e6,
        a.starvations
    );
    let bottleneck = match (failed, fired.first()) {
        (false, _) => Bottleneck::NoneReached,
        (true, Some((b, _))) => *b,
        (true, None) => Bottleneck::Undetermined,
    };
    let mut evidence = vec![service];
    evidence.extend(fired.into_iter().map(|(_, l)| l));
    evidence.extend(notes);
    Verdict { bottleneck, at_n: Some(a.n), evidence }
}

impl Verdict {
    /// The text of `verdict.txt`.
    #[must_use]
    pub fn text(&self, n_max: Option<usize>) -> String {
        let mut s = match (self.bottleneck, n_max) {
            (Bottleneck::NoneReached, _) => format!(
                "bottleneck: none reached (every load tried was served; N_max ≥ {})\n",
                n_max.map_or_else(|| "?".into(), |n| n.to_string())
            ),
            (b, Some(n)) => format!("bottleneck: {b} (N_max = {n})\n"),
            (b, None) => format!("bottleneck: {b} (no load was served)\n"),
        };
        for e in &self.evidence {
            s.push_str("  - ");
            s.push_str(e);
            s.push('\n');
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(n: usize) -> PerN {
        PerN {
            n,
            samples: 10,
            b_net_bits_s: n as f64 * 5.3e6,
            b_avgnet_bits_s: 5.0e6,
            content_bits_s: 5.3e6,
            starvations: 3,
            cpu_user_pct: 10.0,
            cpu_system_pct: 20.0,
            cpu_idle_pct: 70.0,
            mem_available_pct: 60.0,
            bench_cpu_pct: 5.0,
            ..PerN::default()
        }
    }

    #[test]
    fn network_when_b_net_nears_the_link() {
        // Yima 100 Mb/s: 13 clients × 5.3 Mb/s ≈ 69 Mb/s on a link shaped to 75 Mb/s.
        let v = decide(Some(&at(13)), true, Some(75e6), &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Network);
        assert!(v.evidence[1].contains("92 % of the 75.0 Mb/s link"), "{v:?}");
        assert!(v.text(Some(12)).starts_with("bottleneck: network link (N_max = 12)"));
    }

    #[test]
    fn network_when_a_nearly_full_link_loses_packets_even_on_a_busy_machine() {
        // The 100 Mb/s Figure 3 set-up at N = 15 while other work kept the CPU busy.
        let mut a = at(15);
        (a.b_net_bits_s, a.lost, a.server_cpu_pct) = (85.6e6, 1958, 16.0);
        (a.cpu_user_pct, a.cpu_system_pct, a.cpu_idle_pct) = (84.0, 13.0, 0.0);
        let v = decide(Some(&a), true, Some(100e6), &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Network, "{v:?}");
        assert!(v.evidence[1].contains("86 % of the 100.0 Mb/s link, 1958 packets lost"), "{v:?}");
        assert!(v.evidence[2].contains("the server used 16 % and the bench 5 % of a CPU"), "{v:?}");
        a.lost = 0;
        let v = decide(Some(&a), true, Some(100e6), &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Cpu, "no loss: the link is not full");
    }

    #[test]
    fn cpu_counts_steal_and_interrupts_as_busy() {
        // Loopback, one object, cache hot (docs/results/loopback.md): the first failing N had
        // 2 starvations with 12 % idle; user + system alone was 84 %.
        let mut a = at(312);
        (a.cpu_user_pct, a.cpu_system_pct, a.cpu_idle_pct) = (26.0, 58.0, 12.0);
        (a.server_cpu_pct, a.bench_cpu_pct) = (90.0, 79.0);
        let v = decide(Some(&a), true, None, &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Cpu, "{v:?}");
        assert!(v.evidence[1].starts_with("CPU 88 % busy"), "{v:?}");
        assert!(v.evidence[1].contains("the server used 90 % and the bench 79 %"), "{v:?}");
        // Idle enough: not the CPU.
        (a.cpu_user_pct, a.cpu_system_pct, a.cpu_idle_pct) = (26.0, 40.0, 30.0);
        assert_ne!(
            decide(Some(&a), true, None, &Thresholds::default()).bottleneck,
            Bottleneck::Cpu
        );
    }

    #[test]
    fn cpu_when_busy_and_the_link_is_not_full() {
        let mut a = at(35);
        (a.cpu_user_pct, a.cpu_system_pct, a.cpu_idle_pct) = (30.0, 62.0, 8.0);
        let v = decide(Some(&a), true, Some(1e9), &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Cpu);
        assert!(v.evidence.iter().any(|e| e.contains("% of the 1000.0 Mb/s link")));
    }

    #[test]
    fn disk_on_iowait_or_missed_deadlines_or_admission() {
        let mut a = at(30);
        a.cpu_iowait_pct = 80.0; // He et al. Fig. 2: 30 files, iowait 80 %
        assert_eq!(
            decide(Some(&a), true, None, &Thresholds::default()).bottleneck,
            Bottleneck::Disk
        );
        let mut a = at(30);
        a.missed_deadlines = Some(4.0);
        let v = decide(Some(&a), true, None, &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Disk);
        assert!(v.evidence[1].contains("4 missed block deadlines"));
        let mut a = at(30);
        a.admission_rejects = Some(2.0);
        assert_eq!(
            decide(Some(&a), true, None, &Thresholds::default()).bottleneck,
            Bottleneck::Disk
        );
    }

    #[test]
    fn memory_then_client_then_undetermined() {
        let mut a = at(30);
        a.mem_available_pct = 2.0;
        assert_eq!(
            decide(Some(&a), true, None, &Thresholds::default()).bottleneck,
            Bottleneck::Memory
        );
        let mut a = at(30);
        a.bench_cpu_pct = 99.0;
        assert_eq!(
            decide(Some(&a), true, None, &Thresholds::default()).bottleneck,
            Bottleneck::Client
        );
        let v = decide(Some(&at(30)), true, None, &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Undetermined);
        assert!(v.evidence[0].contains("3 starvations"));
    }

    #[test]
    fn first_rule_wins_and_no_failure_is_none_reached() {
        let mut a = at(13);
        (a.cpu_user_pct, a.cpu_system_pct) = (45.0, 50.0);
        let v = decide(Some(&a), true, Some(75e6), &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::Network);
        assert!(v.evidence[2].starts_with("CPU 95 % busy"), "{v:?}");
        let v = decide(Some(&a), false, Some(75e6), &Thresholds::default());
        assert_eq!(v.bottleneck, Bottleneck::NoneReached);
        assert!(v.text(Some(13)).contains("N_max ≥ 13"));
        assert_eq!(
            decide(None, false, None, &Thresholds::default()).bottleneck,
            Bottleneck::NoneReached
        );
    }
}
