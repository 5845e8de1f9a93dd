//! `isochron simulate`: Gennart et al.'s architecture simulations (throughput and utilisation
//! against the number of disk nodes, Figures 4 and 6; strand-delay jitter, Figure 5) from a
//! scenario file, or the paper's Table 2 when none is given.
//!
//! The simulator is `isochron_sim` (pure, deterministic); this command reads the scenario,
//! prints tables or JSON, and with `--out DIR` writes JSON, CSV and SVG files.

#![allow(clippy::print_stdout)]

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use isochron_base::MbPerSec;
use isochron_sim::experiment::DEFAULT_JITTER_STRANDS;
use isochron_sim::{
    Architecture, Jitter, Operation, Scenario, Sweep, jitter, network_bound, plot, sweep,
};

/// simulate arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// A scenario file (TOML; only the keys it changes) [default: the paper's Table 2, as in
    /// config/sim-gennart.toml].
    scenario: Option<PathBuf>,
    /// Architecture: p2p (point-to-point) or shared-bus.
    #[arg(long, value_name = "ARCH", default_value = "p2p")]
    arch: Architecture,
    /// Operation: read (parallel stream read) or resample (read + resample + compress).
    #[arg(long, value_name = "OP", default_value = "read")]
    op: Operation,
    /// Disk nodes: a range A-B, or one count [default: 1-16; 8 with --jitter].
    #[arg(long, value_name = "A-B")]
    nodes: Option<String>,
    /// Print the result as JSON instead of a table.
    #[arg(long)]
    json: bool,
    /// Write JSON, CSV and SVG plots to DIR.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Run the strand-delay (jitter) experiment at these architecture utilisations (0-1,
    /// comma-separated) instead of the throughput sweep.
    #[arg(long, value_name = "UTIL[,UTIL…]", value_delimiter = ',')]
    jitter: Vec<f64>,
    /// Strands requested in each jitter run.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_JITTER_STRANDS)]
    strands: u32,
    /// Print the effective scenario (TOML) and exit.
    #[arg(long)]
    print_scenario: bool,
}

fn parse_nodes(s: &str) -> anyhow::Result<(u32, u32)> {
    let parse = |t: &str| -> anyhow::Result<u32> {
        let n: u32 = t.trim().parse().with_context(|| format!("--nodes {s:?}: not a count"))?;
        if n == 0 || n > 4096 {
            bail!("--nodes {s:?}: node counts go from 1 to 4096");
        }
        Ok(n)
    };
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (parse(a)?, parse(b)?);
            if a > b {
                bail!("--nodes {s:?}: the range is empty");
            }
            Ok((a, b))
        }
        None => {
            let n = parse(s)?;
            Ok((n, n))
        }
    }
}

pub(crate) fn run(args: Args) -> anyhow::Result<ExitCode> {
    let mut scenario = match &args.scenario {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Scenario::from_toml(&text).with_context(|| path.display().to_string())?
        }
        None => Scenario::default(),
    };
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    if args.print_scenario {
        print!("{}", scenario.to_toml());
        return Ok(ExitCode::SUCCESS);
    }
    if !args.jitter.is_empty() {
        return run_jitter(&args, &scenario);
    }
    let (a, b) = parse_nodes(args.nodes.as_deref().unwrap_or("1-16"))?;
    let result = sweep(&scenario, args.arch, args.op, a..=b);
    let json = serde_json::to_string(&result)?;
    if args.json {
        println!("{json}");
    } else {
        print!("{}", sweep_table(&scenario, &result));
    }
    if let Some(dir) = &args.out {
        let stem = format!("simulate-{}-{}", args.arch, args.op);
        let title = format!(
            "{} {}: throughput and utilisation ({})",
            args.arch,
            args.op,
            args.scenario.as_deref().map_or_else(|| "Table 2".into(), |p| p.display().to_string())
        );
        let svg = plot::sweep_svg(&result, &title)?;
        write_out(dir, &stem, &(json + "\n"), &sweep_csv(&result), &svg, args.json)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn run_jitter(args: &Args, scenario: &Scenario) -> anyhow::Result<ExitCode> {
    let (a, b) = parse_nodes(args.nodes.as_deref().unwrap_or("8"))?;
    if a != b {
        bail!("--jitter runs on one node count: give --nodes N");
    }
    for u in &args.jitter {
        if !(*u > 0.0 && *u <= 1.0) {
            bail!("--jitter {u}: a utilisation is in (0, 1]");
        }
    }
    let runs: Vec<Jitter> = args
        .jitter
        .iter()
        .map(|u| jitter(scenario, args.arch, args.op, a, *u, args.strands))
        .collect();
    let json = serde_json::to_string(&runs)?;
    if args.json {
        println!("{json}");
    } else {
        print!("{}", jitter_table(&runs));
    }
    if let Some(dir) = &args.out {
        let stem = format!("jitter-{}-{}-{a}", args.arch, args.op);
        let title = format!("{} {}, {a} disk nodes: strand delay distribution", args.arch, args.op);
        let svg = plot::jitter_svg(&runs, &title)?;
        write_out(dir, &stem, &(json + "\n"), &jitter_csv(&runs), &svg, args.json)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn write_out(
    dir: &Path,
    stem: &str,
    json: &str,
    csv: &str,
    svg: &str,
    quiet: bool,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    for (ext, body) in [("json", json), ("csv", csv), ("svg", svg)] {
        let path = dir.join(format!("{stem}.{ext}"));
        std::fs::write(&path, body).with_context(|| format!("writing {}", path.display()))?;
        if !quiet {
            println!("wrote {}", path.display());
        }
    }
    Ok(())
}

fn sweep_table(s: &Scenario, w: &Sweep) -> String {
    let classes: Vec<String> = w
        .points
        .first()
        .map(|p| p.utilization.keys().map(ToString::to_string).collect())
        .unwrap_or_default();
    let mut t = format!("{} {} (utilisation: mean per component class)\n", w.arch, w.op);
    let _ = write!(t, "{:>5} {:>9} {:>9} {:<15}", "nodes", "sim MB/s", "bound", "bottleneck");
    for c in &classes {
        let _ = write!(t, " {:>10}", short(c));
    }
    t.push('\n');
    for p in &w.points {
        let _ = write!(
            t,
            "{:>5} {:>9.2} {:>9.2} {:<15}",
            p.nodes,
            p.throughput_mb_s,
            p.analytic_mb_s,
            p.bottleneck.as_str()
        );
        for u in p.utilization.values() {
            let _ = write!(t, " {u:>10.3}");
        }
        t.push('\n');
    }
    if let Some(last) = w.points.last() {
        let _ = writeln!(
            t,
            "analytic bound at {} nodes: {:.2} MB/s, set by the {} ({})",
            last.nodes,
            last.analytic_mb_s,
            last.analytic_bottleneck,
            last.bounds.iter().map(|(c, v)| format!("{c} {v:.2}")).collect::<Vec<_>>().join(", ")
        );
        if w.arch == Architecture::SharedBus && w.op == Operation::Read {
            let net = network_bound(s, MbPerSec(last.throughput_mb_s));
            let _ = writeln!(
                t,
                "read on to the network through the node processor (§5.1): \
                 1/(1/{:.2} + 1/{:.1} + 1/{:.1}) = {:.2} MB/s",
                last.throughput_mb_s,
                s.bus_op_rate(&s.cache.memcpy).0,
                s.bus_op_rate(&s.cache.device_read).0,
                net.0
            );
        }
    }
    t
}

fn short(class: &str) -> &str {
    match class {
        "interface_link" => "iface_link",
        "compressor" => "compress",
        "processor" => "cpu",
        other => other,
    }
}

fn sweep_csv(w: &Sweep) -> String {
    let classes: Vec<String> = w
        .points
        .first()
        .map(|p| p.utilization.keys().map(ToString::to_string).collect())
        .unwrap_or_default();
    let mut t = String::from("arch,op,nodes,throughput_mb_s,analytic_mb_s,bottleneck");
    for c in &classes {
        let _ = write!(t, ",util_{c}");
    }
    t.push('\n');
    for p in &w.points {
        let _ = write!(
            t,
            "{},{},{},{},{},{}",
            w.arch, w.op, p.nodes, p.throughput_mb_s, p.analytic_mb_s, p.bottleneck
        );
        for u in p.utilization.values() {
            let _ = write!(t, ",{u}");
        }
        t.push('\n');
    }
    t
}

fn jitter_table(runs: &[Jitter]) -> String {
    let mut t = String::new();
    if let Some(j) = runs.first() {
        let _ = writeln!(
            t,
            "{} {}, {} disk nodes: strand delay, request to done",
            j.arch, j.op, j.nodes
        );
    }
    let _ = writeln!(
        t,
        "{:>6} {:>8} {:<15} {:>9} {:>7} {:>8} {:>7} {:>9} {:>9} {:>9}",
        "target",
        "measured",
        "bottleneck",
        "interval",
        "strands",
        "mean ms",
        "sd ms",
        "disk sd",
        "model sd",
        "p97.5 ms"
    );
    for j in runs {
        let p975 = j.cdf.iter().find(|(_, q)| *q >= 0.975).map_or(0.0, |p| p.0);
        let _ = writeln!(
            t,
            "{:>6.2} {:>8.3} {:<15} {:>9.2} {:>7} {:>8.2} {:>7.2} {:>9.2} {:>9.2} {:>9.2}",
            j.target_utilization,
            j.measured_utilization,
            j.bottleneck.as_str(),
            j.interval_ms,
            j.strands,
            j.mean_ms,
            j.std_ms,
            j.disk_std_ms,
            j.disk_std_model_ms,
            p975
        );
    }
    t
}

fn jitter_csv(runs: &[Jitter]) -> String {
    let mut t = String::from(
        "arch,op,nodes,target_utilization,measured_utilization,delay_ms,probability\n",
    );
    for j in runs {
        for (d, q) in &j.cdf {
            let _ = writeln!(
                t,
                "{},{},{},{},{},{d},{q}",
                j.arch, j.op, j.nodes, j.target_utilization, j.measured_utilization
            );
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ranges() {
        assert_eq!(parse_nodes("1-16").unwrap(), (1, 16));
        assert_eq!(parse_nodes("8").unwrap(), (8, 8));
        assert!(parse_nodes("9-3").is_err());
        assert!(parse_nodes("0").is_err());
        assert!(parse_nodes("x-2").is_err());
    }
}
