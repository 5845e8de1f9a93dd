//! What a bench run measured, aggregated per number of clients N, and N_max (Yima §3.1–3.2).
//!
//! Every second the runner writes a [`Sample`]: the client side (sessions, B_net, B_avgNet,
//! R_Δr, starvations) next to the server side ([`super::procfs::Resources`] and the server's
//! own counters). Samples taken while the load is steady (every client of the target playing,
//! and the same number as a second before) are grouped by N into [`PerN`] means — the points of
//! Yima's Figure 3. N *passes* when no client starved, at most [`LOSS_TOLERANCE`] of the
//! packets were lost, and B_avgNet kept up with the content being played: at least
//! `1 − tolerance` of the content's own rate over the same samples (bytes per media second
//! received, lost packets counted at the mean size; for Yima's CBR-like DVD trace this is the
//! "mean rate" dashed line). N_max is the largest N below the first N that fails.
//!
//! Per source IP (in a cluster, per node: each sends its own blocks from its own address, Yima
//! §2.2) a sample keeps what was received from it, and a [`PerN`] each source's mean B_net and
//! B_avgNet and its share of the total (Yima Figure 4 (c)(d)(i)(j)); `samples.csv` has one
//! `b_net_bits_s[IP]` column per source seen, after the fixed columns.
//!
//! Not here: taking the samples (the runner), the rules that name the bottleneck
//! ([`super::verdict`]), drawing ([`super::plot`]).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use serde::Serialize;

/// One second of a run (one row of `samples.csv`).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Sample {
    /// Seconds since the run started.
    pub t_s: f64,
    /// The trial (N_max bisection), else 0.
    pub trial: u32,
    /// Clients the load shape wants now.
    pub n_target: usize,
    /// Sessions set up and receiving (Yima's N, "number of clients served").
    pub sessions: usize,
    /// Sessions paused by their client.
    pub paused: usize,
    /// Sessions stalled (starved) at the sample.
    pub stalled: usize,
    /// Whether the load was steady (sessions = target, unchanged since the last sample).
    pub steady: bool,
    /// Whether every session served played through the sample: none was starting, filling its
    /// buffer, seeking, pausing or looping ([`RateVariation`]'s aggregate counts only these).
    pub played_through: bool,
    /// Aggregate received rate, bits/s (Yima B_net).
    pub b_net_bits_s: f64,
    /// Mean received rate per session, bits/s (Yima B_avgNet).
    pub b_avgnet_bits_s: f64,
    /// The content's rate over the data received in this second: bytes per media second × 8.
    pub content_bits_s: f64,
    /// Bytes received in this second, all sessions.
    pub rx_bytes: u64,
    /// RTP packets received in this second, all sessions.
    pub rx_packets: u64,
    /// The content's bytes in the media time received: received plus lost (at the mean size).
    pub content_bytes: u64,
    /// Media time received in this second, all sessions, s.
    pub media_s: f64,
    /// Rate changes accepted per second, all clients (Yima R_Δr).
    pub r_dr: f64,
    /// Starvation events in this second.
    pub starvations: u64,
    /// Starvation events since the start.
    pub starvations_total: u64,
    /// Packets lost in this second.
    pub lost: u64,
    /// Packets late in this second.
    pub late: u64,
    /// Mean playout buffer level of the sessions, ms.
    pub level_ms_mean: f64,
    /// Machine CPU, user, %.
    pub cpu_user_pct: f64,
    /// Machine CPU, system, %.
    pub cpu_system_pct: f64,
    /// Machine CPU, idle, %.
    pub cpu_idle_pct: f64,
    /// Machine CPU, iowait, %.
    pub cpu_iowait_pct: f64,
    /// Machine CPU, steal, %.
    pub cpu_steal_pct: f64,
    /// Server process CPU, % of one CPU (0 without `--server-pid`).
    pub server_cpu_pct: f64,
    /// Machine memory in use, bytes.
    pub mem_used_bytes: u64,
    /// Machine memory available, %.
    pub mem_available_pct: f64,
    /// Server resident memory, bytes.
    pub server_rss_bytes: u64,
    /// Disk reads, bytes/s.
    pub disk_read_bytes_s: f64,
    /// Disk writes, bytes/s.
    pub disk_write_bytes_s: f64,
    /// Busiest disk's utilisation, %.
    pub disk_util_pct: f64,
    /// Network received, bytes/s.
    pub net_rx_bytes_s: f64,
    /// Network sent, bytes/s.
    pub net_tx_bytes_s: f64,
    /// The bench's own CPU, % of one CPU.
    pub bench_cpu_pct: f64,
    /// Server: block bytes read from disk per second (Yima B_disk).
    pub b_disk_bytes_s: Option<f64>,
    /// Server: block bytes served from its cache per second (Yima B_cache).
    pub b_cache_bytes_s: Option<f64>,
    /// Server: PLAYs refused by admission in this second.
    pub admission_rejects: Option<f64>,
    /// Server: block deadlines missed in this second.
    pub missed_deadlines: Option<f64>,
    /// Server: RTP packets sent per second.
    pub packets_sent_s: Option<f64>,
    /// Server: pace changes carried out per second.
    pub pace_changes_s: Option<f64>,
    /// Server: packets due whose block was not in memory, in this second.
    pub underruns: Option<f64>,
    /// Server: packets it sent more than 50 ms past their send times, in this second (its
    /// `isochron_packet_lateness_seconds` histogram).
    pub server_late_packets: Option<f64>,
    /// What each source IP sent in this second, all sessions (`samples.csv`: a
    /// `b_net_bits_s[IP]` column each, after the fixed ones).
    #[serde(skip)]
    pub sources: BTreeMap<IpAddr, SourceSample>,
    /// What each server said of itself in this second, by the address of its `/metrics` (a
    /// cluster's nodes; `samples.csv`: `b_disk_bytes_s[IP]` and `b_cache_bytes_s[IP]` columns
    /// each, after the sources').
    #[serde(skip)]
    pub servers: BTreeMap<IpAddr, ServerSample>,
}

/// One server's counters in one sample (Yima Fig. 4e/f: each node's B_disk and B_cache).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct ServerSample {
    /// Block bytes it read from disk per second.
    pub b_disk_bytes_s: Option<f64>,
    /// Block bytes it served from its cache per second.
    pub b_cache_bytes_s: Option<f64>,
}

/// What one source sent in one sample.
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct SourceSample {
    /// RTP packets received from it.
    pub packets: u64,
    /// Payload bytes received from it.
    pub bytes: u64,
    /// Its part of B_net, bits/s.
    pub b_net_bits_s: f64,
}

/// One source's part of a [`PerN`] (a point of each curve of Yima's Figure 4 (c)(d)(i)(j)).
#[derive(Clone, Copy, Debug, Default, Serialize, PartialEq)]
pub struct SourceShare {
    /// Its mean part of B_net, Mb/s.
    pub b_net_mbit_s: f64,
    /// Its mean part of B_avgNet (per session), Mb/s.
    pub b_avgnet_mbit_s: f64,
    /// Its share of what every source sent, 0–1.
    pub share: f64,
    /// Its mean B_disk, MB/s, when its `/metrics` were read (Yima Fig. 4e/f).
    pub b_disk_mbyte_s: Option<f64>,
    /// Its mean B_cache, MB/s, likewise.
    pub b_cache_mbyte_s: Option<f64>,
}

/// The means of the steady samples at one N (a point of Yima's Figure 3).
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct PerN {
    /// Number of sessions.
    pub n: usize,
    /// Samples averaged.
    pub samples: usize,
    /// B_net, bits/s.
    pub b_net_bits_s: f64,
    /// B_avgNet, bits/s.
    pub b_avgnet_bits_s: f64,
    /// The content's rate over the same samples (their bytes over their media time), bits/s.
    pub content_bits_s: f64,
    /// R_Δr, changes/s.
    pub r_dr: f64,
    /// Starvations (sum).
    pub starvations: u64,
    /// Packets lost (sum).
    pub lost: u64,
    /// Packets late (sum).
    pub late: u64,
    /// µ_user, %.
    pub cpu_user_pct: f64,
    /// µ_system, %.
    pub cpu_system_pct: f64,
    /// µ_idle, %.
    pub cpu_idle_pct: f64,
    /// iowait, %.
    pub cpu_iowait_pct: f64,
    /// Server process CPU, % of one CPU.
    pub server_cpu_pct: f64,
    /// Memory available, %.
    pub mem_available_pct: f64,
    /// Busiest disk's utilisation, %.
    pub disk_util_pct: f64,
    /// Disk reads, bytes/s.
    pub disk_read_bytes_s: f64,
    /// Network sent, bytes/s.
    pub net_tx_bytes_s: f64,
    /// The bench's CPU, % of one CPU.
    pub bench_cpu_pct: f64,
    /// B_disk, bytes/s.
    pub b_disk_bytes_s: Option<f64>,
    /// B_cache, bytes/s.
    pub b_cache_bytes_s: Option<f64>,
    /// Missed deadlines (sum).
    pub missed_deadlines: Option<f64>,
    /// Packets the server sent more than 50 ms late (sum).
    pub server_late_packets: Option<f64>,
    /// Admission rejects (sum).
    pub admission_rejects: Option<f64>,
    /// Per source IP (per node of a cluster): its mean bandwidth and share.
    pub per_source: BTreeMap<IpAddr, SourceShare>,
    /// Whether this N was served (see the module docs).
    pub pass: bool,
}

/// The share of packets that may be lost at an N that passes (a stray drop, not a saturated link).
pub const LOSS_TOLERANCE: f64 = 0.001;

/// Groups the steady samples by N and decides which N pass.
#[must_use]
pub fn aggregate(samples: &[Sample], tolerance: f64) -> Vec<PerN> {
    let mut groups: BTreeMap<usize, Vec<&Sample>> = BTreeMap::new();
    for s in samples.iter().filter(|s| s.steady && s.sessions > 0) {
        groups.entry(s.sessions).or_default().push(s);
    }
    groups
        .into_iter()
        .map(|(n, g)| {
            let k = g.len() as f64;
            let mean = |f: &dyn Fn(&Sample) -> f64| g.iter().map(|s| f(s)).sum::<f64>() / k;
            // A second without a scrape (the first, or a timed-out one) has no server counters:
            // means are over the seconds that have them, and the next scrape's difference
            // covers the gap in sums.
            let opt_mean = |f: &dyn Fn(&Sample) -> Option<f64>| {
                let (sum, n) =
                    g.iter().filter_map(|s| f(s)).fold((0.0, 0u32), |(a, n), v| (a + v, n + 1));
                (n > 0).then(|| sum / f64::from(n))
            };
            let opt_sum =
                |f: &dyn Fn(&Sample) -> Option<f64>| sum_present(g.iter().filter_map(|s| f(s)));
            let mut p = PerN {
                n,
                samples: g.len(),
                b_net_bits_s: mean(&|s| s.b_net_bits_s),
                b_avgnet_bits_s: mean(&|s| s.b_avgnet_bits_s),
                content_bits_s: {
                    let media: f64 = g.iter().map(|s| s.media_s).sum();
                    let bytes: u64 = g.iter().map(|s| s.content_bytes).sum();
                    if media > 0.0 { bytes as f64 * 8.0 / media } else { 0.0 }
                },
                r_dr: mean(&|s| s.r_dr),
                starvations: g.iter().map(|s| s.starvations).sum(),
                lost: g.iter().map(|s| s.lost).sum(),
                late: g.iter().map(|s| s.late).sum(),
                cpu_user_pct: mean(&|s| s.cpu_user_pct),
                cpu_system_pct: mean(&|s| s.cpu_system_pct),
                cpu_idle_pct: mean(&|s| s.cpu_idle_pct),
                cpu_iowait_pct: mean(&|s| s.cpu_iowait_pct),
                server_cpu_pct: mean(&|s| s.server_cpu_pct),
                mem_available_pct: mean(&|s| s.mem_available_pct),
                disk_util_pct: mean(&|s| s.disk_util_pct),
                disk_read_bytes_s: mean(&|s| s.disk_read_bytes_s),
                net_tx_bytes_s: mean(&|s| s.net_tx_bytes_s),
                bench_cpu_pct: mean(&|s| s.bench_cpu_pct),
                b_disk_bytes_s: opt_mean(&|s| s.b_disk_bytes_s),
                b_cache_bytes_s: opt_mean(&|s| s.b_cache_bytes_s),
                missed_deadlines: opt_sum(&|s| s.missed_deadlines),
                server_late_packets: opt_sum(&|s| s.server_late_packets),
                admission_rejects: opt_sum(&|s| s.admission_rejects),
                per_source: per_source(&g, n),
                pass: false,
            };
            let packets: u64 = g.iter().map(|s| s.rx_packets).sum();
            p.pass = p.starvations == 0
                && p.b_avgnet_bits_s >= (1.0 - tolerance) * p.content_bits_s
                && p.lost as f64 <= LOSS_TOLERANCE * (packets + p.lost) as f64;
            p
        })
        .collect()
}

/// Each source's mean B_net over `group` (a sample without it counts 0), its B_avgNet (over
/// `n` sessions) and its share of the sum.
fn per_source(group: &[&Sample], n: usize) -> BTreeMap<IpAddr, SourceShare> {
    let ips: BTreeSet<IpAddr> =
        group.iter().flat_map(|s| s.sources.keys().chain(s.servers.keys()).copied()).collect();
    let k = group.len().max(1) as f64;
    // A server counter's mean over the samples that read it, MB/s.
    let server_mean = |ip: IpAddr, f: fn(&ServerSample) -> Option<f64>| {
        let got: Vec<f64> = group.iter().filter_map(|s| s.servers.get(&ip).and_then(f)).collect();
        (!got.is_empty()).then(|| got.iter().sum::<f64>() / got.len() as f64 / 1e6)
    };
    let means: Vec<(IpAddr, f64)> = ips
        .into_iter()
        .map(|ip| {
            let sum: f64 =
                group.iter().filter_map(|s| s.sources.get(&ip)).map(|x| x.b_net_bits_s).sum();
            (ip, sum / k)
        })
        .collect();
    let total: f64 = means.iter().map(|(_, m)| m).sum();
    means
        .into_iter()
        .map(|(ip, m)| {
            let share = SourceShare {
                b_net_mbit_s: m / 1e6,
                b_avgnet_mbit_s: m / 1e6 / n.max(1) as f64,
                share: if total > 0.0 { m / total } else { 0.0 },
                b_disk_mbyte_s: server_mean(ip, |s| s.b_disk_bytes_s),
                b_cache_mbyte_s: server_mean(ip, |s| s.b_cache_bytes_s),
            };
            (ip, share)
        })
        .collect()
}

/// The aggregate of every sample taken while `n` clients were the target, steady or not, as a
/// failed N: for a load that never settled (clients refused or timing out), so that the verdict
/// can still look at the resources while it was tried. `None` without such samples.
#[must_use]
pub fn aggregate_target(samples: &[Sample], n: usize, tolerance: f64) -> Option<PerN> {
    let at: Vec<Sample> = samples
        .iter()
        .filter(|s| s.n_target == n && s.sessions > 0)
        .map(|s| Sample { steady: true, sessions: n, ..s.clone() })
        .collect();
    let mut p = aggregate(&at, tolerance).pop()?;
    p.pass = false;
    Some(p)
}

/// N_max (the largest N below the first failing one; `None` if N = 1 already failed or
/// nothing was measured) and the first failing N.
#[must_use]
pub fn n_max(per_n: &[PerN]) -> (Option<usize>, Option<usize>) {
    let mut best = None;
    for p in per_n {
        if !p.pass {
            return (best, Some(p.n));
        }
        best = Some(p.n);
    }
    (best, None)
}

/// Writes `samples` as CSV to `path`: the fixed columns (the fields of [`Sample`]), then one
/// `b_net_bits_s[IP]` column per source seen in any sample, in IP order.
pub fn write_samples(path: &std::path::Path, samples: &[Sample]) -> anyhow::Result<()> {
    let err = |e: csv::Error| anyhow::anyhow!("writing {}: {e}", path.display());
    let ips: BTreeSet<IpAddr> = samples.iter().flat_map(|s| s.sources.keys().copied()).collect();
    let servers: BTreeSet<IpAddr> =
        samples.iter().flat_map(|s| s.servers.keys().copied()).collect();
    let mut header = sample_columns().map_err(err)?;
    for ip in &ips {
        header.push_field(&format!("b_net_bits_s[{ip}]"));
    }
    for ip in &servers {
        header.push_field(&format!("b_disk_bytes_s[{ip}]"));
        header.push_field(&format!("b_cache_bytes_s[{ip}]"));
    }
    let mut w = csv::WriterBuilder::new().has_headers(false).from_path(path).map_err(err)?;
    w.write_record(&header).map_err(err)?;
    for s in samples {
        let by_source: Vec<f64> =
            ips.iter().map(|ip| s.sources.get(ip).map_or(0.0, |x| x.b_net_bits_s)).collect();
        // A server not read in this second: an empty cell.
        let by_server: Vec<Option<f64>> = servers
            .iter()
            .flat_map(|ip| {
                let x = s.servers.get(ip);
                [x.and_then(|x| x.b_disk_bytes_s), x.and_then(|x| x.b_cache_bytes_s)]
            })
            .collect();
        w.serialize((s, by_source, by_server)).map_err(err)?;
    }
    w.flush().map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    Ok(())
}

/// The names of the fixed columns: the fields of [`Sample`], as the csv crate writes them.
fn sample_columns() -> Result<csv::StringRecord, csv::Error> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.serialize(Sample::default())?;
    let bytes = w.into_inner().map_err(|e| csv::Error::from(e.into_error()))?;
    Ok(csv::Reader::from_reader(bytes.as_slice()).headers()?.clone())
}

/// The sum of the values present, `None` when there are none: a server counter summed over the
/// seconds that have it (a second without a scrape, always the first, has none; the next
/// scrape's difference covers it).
pub fn sum_present(values: impl IntoIterator<Item = f64>) -> Option<f64> {
    values.into_iter().fold(None, |a, v| Some(a.unwrap_or(0.0) + v))
}

/// How much the received rate varies over a run's steady samples: the measure of Yima §2.5's
/// claim that MTFC cuts the standard deviation of a VBR stream's traffic (by up to 81 %).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct RateVariation {
    /// Steady samples counted for the clients.
    pub samples: usize,
    /// Of those, the samples every client played through, counted for the aggregate.
    pub aggregate_samples: usize,
    /// The aggregate received rate over them: mean and standard deviation, bits/s.
    pub aggregate_mean_bits_s: f64,
    /// See `aggregate_mean_bits_s`.
    pub aggregate_sd_bits_s: f64,
    /// Clients counted: those with two steady samples or more that they played through (playing
    /// at both ends, no seek, pause or loop between: not a start-up, nor a new PLAY's gap).
    pub clients: usize,
    /// A client's rate over its samples, bits/s: the mean over all of them.
    pub client_mean_bits_s: f64,
    /// The pooled standard deviation of a client's rate around its own mean, bits/s: every
    /// sample of every client counted once, so a short session (a loop's restart) weighs as
    /// little as it lasted.
    pub client_sd_bits_s: f64,
}

/// The mean and (population) standard deviation of `xs`; `None` for fewer than two.
fn mean_sd(xs: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    let xs: Vec<f64> = xs.into_iter().collect();
    if xs.len() < 2 {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / xs.len() as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / xs.len() as f64;
    Some((mean, var.sqrt()))
}

/// The run's [`RateVariation`]: `clients` holds, per client, its rate (bits/s) in each sample it
/// played through, by the sample's index in `samples`; only steady samples count.
#[must_use]
pub fn rate_variation(samples: &[Sample], clients: &[Vec<(usize, f64)>]) -> RateVariation {
    let steady = |i: usize| samples.get(i).is_some_and(|s| s.steady);
    let through = || samples.iter().filter(|s| s.steady && s.played_through);
    let aggregate = mean_sd(through().map(|s| s.b_net_bits_s));
    // (samples, mean, sd) per client.
    let per_client: Vec<(f64, f64, f64)> = clients
        .iter()
        .filter_map(|rates| {
            let mine: Vec<f64> =
                rates.iter().filter(|(i, _)| steady(*i)).map(|(_, r)| *r).collect();
            mean_sd(mine.iter().copied()).map(|(m, sd)| (mine.len() as f64, m, sd))
        })
        .collect();
    let n = per_client.iter().map(|c| c.0).sum::<f64>().max(1.0);
    RateVariation {
        samples: samples.iter().filter(|s| s.steady).count(),
        aggregate_samples: through().count(),
        aggregate_mean_bits_s: aggregate.map_or(0.0, |a| a.0),
        aggregate_sd_bits_s: aggregate.map_or(0.0, |a| a.1),
        clients: per_client.len(),
        client_mean_bits_s: per_client.iter().map(|c| c.0 * c.1).sum::<f64>() / n,
        client_sd_bits_s: (per_client.iter().map(|c| c.0 * c.2 * c.2).sum::<f64>() / n).sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_variation_counts_steady_samples_and_each_clients_own_spread() {
        let mut samples: Vec<Sample> = (0..4).map(|_| sample(2, 5e6, 0, true)).collect();
        samples[3].steady = false;
        samples[0].b_net_bits_s = 8e6;
        samples[1].b_net_bits_s = 12e6;
        samples[2].b_net_bits_s = 10e6;
        // Client 0 alternates 4 and 6 Mb/s (its unsteady sample's 100 does not count);
        // client 1 is flat; client 2 has one sample only.
        let clients = vec![
            vec![(0, 4e6), (1, 6e6), (2, 4e6), (3, 100e6)],
            vec![(0, 5e6), (1, 5e6), (2, 5e6)],
            vec![(2, 5e6)],
        ];
        let v = rate_variation(&samples, &clients);
        assert_eq!((v.samples, v.aggregate_samples, v.clients), (3, 3, 2));
        assert!((v.aggregate_mean_bits_s - 10e6).abs() < 1.0);
        assert!((v.aggregate_sd_bits_s - (8e12f64 / 3.0).sqrt()).abs() < 1.0);
        // Pooled: client 0's squared deviations (8/9 Mb/s² a sample over 3) and client 1's
        // none, over 6 samples.
        let var0 = ((4.0f64 - 14.0 / 3.0).powi(2) * 2.0 + (6.0f64 - 14.0 / 3.0).powi(2)) / 3.0;
        assert!((v.client_sd_bits_s - (var0 * 3.0 / 6.0).sqrt() * 1e6).abs() < 1.0);
        assert!((v.client_mean_bits_s - (14e6 + 15e6) / 6.0).abs() < 1.0);
        // A sample some client did not play through is left out of the aggregate only.
        samples[1].played_through = false;
        let v = rate_variation(&samples, &clients);
        assert_eq!((v.samples, v.aggregate_samples), (3, 2));
        assert!((v.aggregate_sd_bits_s - 1e6).abs() < 1.0);
    }

    fn sample(sessions: usize, avg: f64, starv: u64, steady: bool) -> Sample {
        Sample {
            sessions,
            n_target: sessions,
            steady,
            played_through: true,
            b_avgnet_bits_s: avg,
            b_net_bits_s: avg * sessions as f64,
            content_bits_s: 5.3e6,
            rx_bytes: 5_300_000 / 8 * sessions as u64,
            content_bytes: 5_300_000 / 8 * sessions as u64,
            rx_packets: 500 * sessions as u64,
            media_s: sessions as f64,
            starvations: starv,
            b_disk_bytes_s: Some(1.0),
            ..Sample::default()
        }
    }

    #[test]
    fn groups_steady_samples_and_finds_n_max() {
        let s = vec![
            sample(1, 5.4e6, 0, true),
            sample(1, 5.2e6, 0, true),
            sample(2, 1.0, 0, false), // a transition: ignored
            sample(2, 5.3e6, 0, true),
            sample(3, 5.1e6, 0, true), // within 5 % of 5.3 Mb/s
            sample(4, 5.3e6, 1, true), // a starvation
            sample(5, 4.0e6, 0, true),
            Sample { lost: 10, ..sample(6, 5.3e6, 0, true) }, // 10 lost of 3 010: over 0.1 %
        ];
        let per_n = aggregate(&s, 0.05);
        assert_eq!(per_n.iter().map(|p| p.n).collect::<Vec<_>>(), vec![1, 2, 3, 4, 5, 6]);
        assert!(!per_n[5].pass);
        assert_eq!(per_n[0].samples, 2);
        assert!((per_n[0].b_avgnet_bits_s - 5.3e6).abs() < 1.0);
        assert_eq!(per_n[0].b_disk_bytes_s, Some(1.0));
        assert_eq!(per_n[1].samples, 1);
        assert!(per_n[2].pass);
        assert!(!per_n[3].pass && !per_n[4].pass);
        assert_eq!(n_max(&per_n), (Some(3), Some(4)));
        assert_eq!(n_max(&per_n[..3]), (Some(3), None));
        assert_eq!(n_max(&per_n[3..]), (None, Some(4)));
    }

    #[test]
    fn a_target_that_never_settled_is_aggregated_as_failed() {
        let mut s = vec![sample(4, 5.3e6, 0, true)];
        for sessions in [5, 3, 0] {
            s.push(Sample { n_target: 6, ..sample(sessions, 5.3e6, 0, false) });
        }
        assert!(aggregate(&s, 0.05).iter().all(|p| p.n == 4));
        let p = aggregate_target(&s, 6, 0.05).expect("two samples with sessions");
        assert_eq!((p.n, p.samples, p.pass), (6, 2, false));
        assert_eq!(aggregate_target(&s, 7, 0.05), None);
    }

    #[test]
    fn samples_csv_has_a_header_and_empty_optional_columns() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        let mut a = sample(2, 5e6, 0, true);
        a.b_disk_bytes_s = None;
        write_samples(&path, &[a, sample(2, 5e6, 0, true)]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(header[0], "t_s");
        let col = header.iter().position(|h| *h == "b_disk_bytes_s").unwrap();
        let row1: Vec<&str> = lines.next().unwrap().split(',').collect();
        let row2: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(row1.len(), header.len());
        assert_eq!(row1[col], "");
        assert_eq!(row2[col], "1.0");
    }

    fn from(ip: u8, mbit: f64) -> (IpAddr, SourceSample) {
        let b_net_bits_s = mbit * 1e6;
        (IpAddr::from([10, 0, 0, ip]), SourceSample { packets: 1, bytes: 1, b_net_bits_s })
    }

    #[test]
    fn each_source_gets_its_mean_and_share_per_n_and_a_samples_column() {
        let with = |sources: &[(u8, f64)]| Sample {
            sources: sources.iter().map(|&(ip, m)| from(ip, m)).collect(),
            ..sample(2, 5e6, 0, true)
        };
        // Two nodes at 6 and 2 Mb/s, then a third appears at 4 Mb/s in one of two samples.
        let s = vec![with(&[(1, 6.0), (2, 2.0)]), with(&[(1, 6.0), (2, 2.0), (3, 8.0)])];
        let per_n = aggregate(&s, 0.05);
        let p = &per_n[0].per_source;
        assert_eq!(p.len(), 3);
        let at = |ip: u8| p[&IpAddr::from([10, 0, 0, ip])];
        assert!((at(1).b_net_mbit_s - 6.0).abs() < 1e-9);
        assert!((at(1).b_avgnet_mbit_s - 3.0).abs() < 1e-9, "over N = 2");
        assert!((at(3).b_net_mbit_s - 4.0).abs() < 1e-9, "absent from one sample: 0 there");
        assert!((at(1).share - 0.5).abs() < 1e-9 && (at(2).share - 1.0 / 6.0).abs() < 1e-9);
        let json = serde_json::to_value(&per_n[0]).unwrap();
        assert_eq!(json["per_source"]["10.0.0.3"]["b_net_mbit_s"], 4.0);

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.csv");
        write_samples(&path, &s).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let fixed = sample_columns().unwrap();
        assert_eq!(
            header[..fixed.len()],
            fixed.iter().collect::<Vec<_>>()[..],
            "fixed columns first"
        );
        assert_eq!(
            header[fixed.len()..],
            ["b_net_bits_s[10.0.0.1]", "b_net_bits_s[10.0.0.2]", "b_net_bits_s[10.0.0.3]"]
        );
        let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
        assert!(rows.iter().all(|r| r.len() == header.len()));
        assert_eq!(rows[0][fixed.len()..], ["6000000.0", "2000000.0", "0.0"]);
        assert_eq!(rows[1][fixed.len() + 2], "8000000.0");
    }
}
