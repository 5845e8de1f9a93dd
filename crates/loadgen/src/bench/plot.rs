//! The panels of Yima's Figure 3 as SVG, against the number of clients N: CPU (µ_system and
//! µ_system + µ_user, panels a/b), B_avgNet with the content's mean rate (c/d), B_disk and
//! B_disk + B_cache (e/f), R_Δr (g/h) and B_net with the link rate when known (i/j). A vertical
//! dashed line marks N_max, as in the paper. When the clients heard from more than one source (a
//! cluster's nodes), Figure 4's cumulative panels too: B_avgNet and B_net of node 1, of nodes 1
//! and 2, … (`b_avgnet_nodes.svg`, `b_net_nodes.svg`), which show each node's share.
//!
//! For a cluster, also [`node_bars`] (each node's bandwidth against the mean) and
//! [`scale_up`] (Yima's Figure 4 summary: N_max against the number of nodes, with the linear
//! ideal from one node).
//!
//! Not here: the numbers ([`super::report`]).

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow};
use plotters::prelude::*;

use super::report::{PerN, SourceShare};

/// One curve.
struct Series {
    label: String,
    points: Vec<(f64, f64)>,
    color: RGBColor,
}

/// A horizontal reference line.
struct HLine {
    label: String,
    y: f64,
}

/// A per-node panel: file, title, the share's value it sums, reference lines.
type NodePanel = (&'static str, &'static str, fn(&SourceShare) -> f64, Vec<HLine>);

/// Colours of the cumulative curves, in turn.
const PALETTE: [RGBColor; 6] = [
    BLUE,
    RED,
    RGBColor(0x2c, 0xa0, 0x2c),
    RGBColor(0xff, 0x7f, 0x0e),
    RGBColor(0x94, 0x67, 0xbd),
    RGBColor(0x8c, 0x56, 0x4b),
];

/// Draws the five panels into `dir`, and with several sources the two per-node panels; returns
/// the files written.
pub fn figure3(
    dir: &Path,
    per_n: &[PerN],
    n_max: Option<usize>,
    content_bits_s: f64,
    link_bits_s: Option<f64>,
) -> anyhow::Result<Vec<PathBuf>> {
    let pts = |f: &dyn Fn(&PerN) -> f64| -> Vec<(f64, f64)> {
        per_n.iter().map(|p| (p.n as f64, f(p))).collect()
    };
    let mut files = Vec::new();
    let vline = n_max.map(|n| n as f64);

    let path = dir.join("cpu.svg");
    line_plot(
        &path,
        "CPU utilisation (Yima Fig. 3a/b)",
        "CPU (%)",
        &[
            Series { label: "µ_system".into(), points: pts(&|p| p.cpu_system_pct), color: BLUE },
            Series {
                label: "µ_system + µ_user".into(),
                points: pts(&|p| p.cpu_system_pct + p.cpu_user_pct),
                color: RED,
            },
            Series {
                label: "iowait".into(),
                points: pts(&|p| p.cpu_iowait_pct),
                color: RGBColor(0x80, 0x80, 0x80),
            },
        ],
        &[],
        vline,
        Some(100.0),
    )?;
    files.push(path);

    let path = dir.join("b_avgnet.svg");
    line_plot(
        &path,
        "Mean bandwidth per client, B_avgNet (Yima Fig. 3c/d)",
        "Mb/s",
        &[Series {
            label: "B_avgNet".into(),
            points: pts(&|p| p.b_avgnet_bits_s / 1e6),
            color: BLUE,
        }],
        &[HLine { label: "content mean rate".into(), y: content_bits_s / 1e6 }],
        vline,
        None,
    )?;
    files.push(path);

    let path = dir.join("b_disk_cache.svg");
    let from_server = per_n.iter().all(|p| p.b_disk_bytes_s.is_some());
    let disk = |p: &PerN| p.b_disk_bytes_s.unwrap_or(p.disk_read_bytes_s) / 1e6;
    let mut series = vec![Series {
        label: if from_server { "B_disk".into() } else { "disk reads (/proc)".into() },
        points: pts(&disk),
        color: BLUE,
    }];
    if from_server {
        series.push(Series {
            label: "B_disk + B_cache".into(),
            points: pts(&|p| disk(p) + p.b_cache_bytes_s.unwrap_or(0.0) / 1e6),
            color: RED,
        });
    }
    line_plot(
        &path,
        "Disk and cache bandwidth (Yima Fig. 3e/f)",
        "MB/s",
        &series,
        &[],
        vline,
        None,
    )?;
    files.push(path);

    let path = dir.join("r_dr.svg");
    line_plot(
        &path,
        "Rate changes per second, R_Δr (Yima Fig. 3g/h)",
        "changes/s",
        &[Series { label: "R_Δr".into(), points: pts(&|p| p.r_dr), color: BLUE }],
        &[],
        vline,
        None,
    )?;
    files.push(path);

    let path = dir.join("b_net.svg");
    let hl: Vec<HLine> =
        link_bits_s.map(|l| HLine { label: "link rate".into(), y: l / 1e6 }).into_iter().collect();
    line_plot(
        &path,
        "Total network bandwidth, B_net (Yima Fig. 3i/j)",
        "Mb/s",
        &[Series { label: "B_net".into(), points: pts(&|p| p.b_net_bits_s / 1e6), color: BLUE }],
        &hl,
        vline,
        None,
    )?;
    files.push(path);

    let nodes: BTreeSet<IpAddr> = per_n.iter().flat_map(|p| p.per_source.keys().copied()).collect();
    if nodes.len() > 1 {
        let content = vec![HLine { label: "content mean rate".into(), y: content_bits_s / 1e6 }];
        let panels: [NodePanel; 2] = [
            (
                "b_avgnet_nodes.svg",
                "B_avgNet per node, cumulative (Yima Fig. 4c/d)",
                |s| s.b_avgnet_mbit_s,
                content,
            ),
            (
                "b_net_nodes.svg",
                "B_net per node, cumulative (Yima Fig. 4i/j)",
                |s| s.b_net_mbit_s,
                hl,
            ),
        ];
        for (file, title, f, hlines) in panels {
            let path = dir.join(file);
            line_plot(&path, title, "Mb/s", &cumulative(per_n, &nodes, f), &hlines, vline, None)?;
            files.push(path);
        }
        let read = |p: &PerN| p.per_source.values().any(|s| s.b_disk_mbyte_s.is_some());
        if per_n.iter().any(read) {
            let path = dir.join("b_disk_cache_nodes.svg");
            line_plot(
                &path,
                "B_disk + B_cache per node, cumulative (Yima Fig. 4e/f)",
                "MB/s",
                &disk_and_cache(per_n, &nodes),
                &[],
                vline,
                None,
            )?;
            files.push(path);
        }
    }
    Ok(files)
}

/// One of a node's server counters in its [`SourceShare`].
type ServerPart = fn(&SourceShare) -> Option<f64>;

/// Yima Figure 4 (e)(f)'s curves: node 1's B_disk, then + its B_cache, then + node 2's B_disk,
/// + its B_cache, and so on.
fn disk_and_cache(per_n: &[PerN], nodes: &BTreeSet<IpAddr>) -> Vec<Series> {
    let parts: [(&str, ServerPart); 2] =
        [("B_disk", |s| s.b_disk_mbyte_s), ("B_cache", |s| s.b_cache_mbyte_s)];
    let layers = nodes.iter().enumerate().flat_map(|(k, ip)| {
        parts.into_iter().enumerate().map(move |(j, (what, f))| {
            let label = match (k, j) {
                (0, 0) => format!("{what}[1] ({ip})"),
                _ => format!("… + {what}[{}]", k + 1),
            };
            let value = move |s: &SourceShare| f(s).unwrap_or(0.0);
            (label, *ip, Box::new(value) as Layer)
        })
    });
    stacked(per_n, layers.collect())
}

/// Curve k: the sum over the first k+1 `nodes` of `f` of their share (Yima Figure 4: "Server
/// 2" is Server 1 + Server 2).
fn cumulative(
    per_n: &[PerN],
    nodes: &BTreeSet<IpAddr>,
    f: impl Fn(&SourceShare) -> f64 + Copy + 'static,
) -> Vec<Series> {
    let layers = nodes.iter().enumerate().map(|(k, ip)| {
        let label = match k {
            0 => format!("node 1 ({ip})"),
            _ => format!("nodes 1–{} (+ {ip})", k + 1),
        };
        (label, *ip, Box::new(f) as Layer)
    });
    stacked(per_n, layers.collect())
}

/// A node's value in one layer of a stacked panel.
type Layer = Box<dyn Fn(&SourceShare) -> f64>;

/// Curve k: the sum of the first k+1 layers (label, node, its value), at every N.
fn stacked(per_n: &[PerN], layers: Vec<(String, IpAddr, Layer)>) -> Vec<Series> {
    let mut below: Vec<f64> = vec![0.0; per_n.len()];
    layers
        .into_iter()
        .enumerate()
        .map(|(k, (label, ip, f))| {
            let points = per_n
                .iter()
                .zip(below.iter_mut())
                .map(|(p, acc)| {
                    *acc += p.per_source.get(&ip).map_or(0.0, &f);
                    (p.n as f64, *acc)
                })
                .collect();
            Series { label, points, color: PALETTE[k % PALETTE.len()] }
        })
        .collect()
}

/// A bar per node (`bars`: label, value), the mean dashed, and `limit` (e.g. the link rate)
/// dashed in red when given.
pub fn node_bars(
    path: &Path,
    title: &str,
    y_label: &str,
    bars: &[(String, f64)],
    limit: Option<f64>,
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let n = bars.len().max(1);
    let mean = bars.iter().map(|b| b.1).sum::<f64>() / n as f64;
    let top = bars.iter().map(|b| b.1).chain(limit).fold(0.0f64, f64::max);
    let y_hi = (top * 1.2).max(1e-3);
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_hi)
        .map_err(|e| err(&e))?;
    let labels: Vec<String> = bars.iter().map(|b| b.0.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 1e-6 {
                labels.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_label)
        .draw()
        .map_err(|e| err(&e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            Rectangle::new([(i as f64 + 0.15, 0.0), (i as f64 + 0.85, b.1)], BLUE.mix(0.7).filled())
        }))
        .map_err(|e| err(&e))?;
    chart
        .draw_series(bars.iter().enumerate().map(|(i, b)| {
            let share = if mean > 0.0 { 100.0 * (b.1 / mean - 1.0) } else { 0.0 };
            Text::new(
                format!("{:.1} ({share:+.1} %)", b.1),
                (i as f64 + 0.2, b.1 + y_hi * 0.02),
                ("sans-serif", 14),
            )
        }))
        .map_err(|e| err(&e))?;
    let mut lines = vec![(format!("mean ({mean:.2})"), mean, BLACK)];
    if let Some(l) = limit {
        lines.push((format!("link rate ({l:.2})"), l, RED));
    }
    for (label, y, color) in lines {
        let dashes = dashed((0.0, y), (n as f64, y), n as f64 / 60.0, true);
        chart
            .draw_series(dashes.into_iter().map(|seg| PathElement::new(seg, color)))
            .map_err(|e| err(&e))?
            .label(label)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// Yima's Figure 4 summary: N_max against the number of nodes (`points`: nodes, N_max), with
/// the linear ideal (one node's N_max × nodes) dashed.
pub fn scale_up(path: &Path, points: &[(usize, usize)]) -> anyhow::Result<()> {
    let mut pts: Vec<(f64, f64)> = points.iter().map(|&(k, n)| (k as f64, n as f64)).collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    let one = points.iter().find(|p| p.0 == 1).map(|p| p.1 as f64);
    let mut series =
        vec![Series { label: "measured N_max".into(), points: pts.clone(), color: BLUE }];
    if let Some(one) = one {
        series.push(Series {
            label: "linear (N_max of one node × nodes)".into(),
            points: pts.iter().map(|p| (p.0, one * p.0)).collect(),
            color: RGBColor(0x80, 0x80, 0x80),
        });
    }
    line_plot_x(
        path,
        "N_max against the number of nodes (Yima Fig. 4)",
        "number of nodes",
        "N_max (clients)",
        &series,
        &[],
        None,
        None,
    )
}

#[allow(clippy::too_many_arguments)]
fn line_plot(
    path: &Path,
    title: &str,
    y_label: &str,
    series: &[Series],
    hlines: &[HLine],
    vline: Option<f64>,
    y_max: Option<f64>,
) -> anyhow::Result<()> {
    line_plot_x(path, title, "number of clients N", y_label, series, hlines, vline, y_max)
}

#[allow(clippy::too_many_arguments)]
fn line_plot_x(
    path: &Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
    hlines: &[HLine],
    vline: Option<f64>,
    y_max: Option<f64>,
) -> anyhow::Result<()> {
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let x_hi = xs.fold(1.0f64, f64::max) + 1.0;
    let y_data = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .chain(hlines.iter().map(|h| h.y))
        .fold(0.0f64, f64::max);
    let y_hi = y_max.unwrap_or_else(|| (y_data * 1.15).max(1e-3));
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(0.0..x_hi, 0.0..y_hi)
        .map_err(|e| err(&e))?;
    chart.configure_mesh().x_desc(x_label).y_desc(y_label).draw().map_err(|e| err(&e))?;
    for s in series {
        let color = s.color;
        chart
            .draw_series(LineSeries::new(s.points.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(s.points.iter().map(|p| Circle::new(*p, 3, color.filled())))
            .map_err(|e| err(&e))?;
    }
    for h in hlines {
        let dashes = dashed((0.0, h.y), (x_hi, h.y), x_hi / 60.0, true);
        chart
            .draw_series(dashes.into_iter().map(|seg| PathElement::new(seg, BLACK)))
            .map_err(|e| err(&e))?
            .label(format!("{} ({:.2})", h.label, h.y))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    if let Some(n) = vline {
        let dashes = dashed((n, 0.0), (n, y_hi), y_hi / 40.0, false);
        chart
            .draw_series(dashes.into_iter().map(|seg| PathElement::new(seg, GREEN)))
            .map_err(|e| err(&e))?
            .label(format!("N_max = {n}"))
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], GREEN));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().with_context(|| format!("writing {}", path.display()))?;
    Ok(())
}

/// The dashes of a horizontal (`horizontal`) or vertical line from `a` to `b`, `step` long.
fn dashed(a: (f64, f64), b: (f64, f64), step: f64, horizontal: bool) -> Vec<Vec<(f64, f64)>> {
    let (from, to) = if horizontal { (a.0, b.0) } else { (a.1, b.1) };
    let mut out = Vec::new();
    let mut t = from;
    while t < to {
        let e = (t + step).min(to);
        out.push(if horizontal { vec![(t, a.1), (e, a.1)] } else { vec![(a.0, t), (a.0, e)] });
        t += 2.0 * step;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_the_five_panels() {
        let per_n: Vec<PerN> = (1..=4)
            .map(|n| PerN {
                n,
                b_avgnet_bits_s: 5.3e6,
                b_net_bits_s: 5.3e6 * n as f64,
                cpu_user_pct: 5.0 * n as f64,
                cpu_system_pct: 10.0 * n as f64,
                r_dr: 1.0,
                b_disk_bytes_s: Some(6e5 * n as f64),
                b_cache_bytes_s: Some(1e5),
                ..PerN::default()
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let files = figure3(dir.path(), &per_n, Some(3), 5.3e6, Some(100e6)).unwrap();
        assert_eq!(files.len(), 5);
        let svg = std::fs::read_to_string(dir.path().join("b_avgnet.svg")).unwrap();
        assert!(svg.starts_with("<svg"));
        for label in ["B_avgNet", "content mean rate (5.30)", "N_max = 3", "number of clients N"] {
            assert!(svg.contains(label), "{label}");
        }
        let svg = std::fs::read_to_string(dir.path().join("b_disk_cache.svg")).unwrap();
        assert!(svg.contains("B_disk + B_cache"));
        let svg = std::fs::read_to_string(dir.path().join("b_net.svg")).unwrap();
        assert!(svg.contains("link rate (100.00)"));
        assert!(!dir.path().join("b_net_nodes.svg").exists(), "one source: no per-node panels");
    }

    #[test]
    fn node_bars_and_the_scale_up_panel() {
        let dir = tempfile::tempdir().unwrap();
        let bars = vec![("n1".to_string(), 90.0), ("n2".into(), 110.0)];
        node_bars(&dir.path().join("b.svg"), "per node", "Mb/s", &bars, Some(100.0)).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("b.svg")).unwrap();
        for label in ["n1", "n2", "mean (100.00)", "link rate (100.00)", "(-10.0 %)", "(+10.0 %)"] {
            assert!(svg.contains(label), "{label}");
        }
        scale_up(&dir.path().join("s.svg"), &[(1, 17), (2, 34), (4, 66)]).unwrap();
        let svg = std::fs::read_to_string(dir.path().join("s.svg")).unwrap();
        assert!(svg.contains("number of nodes") && svg.contains("linear (N_max of one node"));
    }

    #[test]
    fn several_sources_add_the_cumulative_per_node_panels() {
        let ip = |i: u8| IpAddr::from([10, 0, 0, i]);
        let per_n: Vec<PerN> = (1..=4)
            .map(|n| PerN {
                n,
                b_net_bits_s: 6e6 * n as f64,
                b_avgnet_bits_s: 6e6,
                per_source: (1..=3)
                    .map(|i| {
                        let b_net_mbit_s = 2.0 * n as f64;
                        (
                            ip(i),
                            SourceShare {
                                b_net_mbit_s,
                                b_avgnet_mbit_s: 2.0,
                                share: 1.0 / 3.0,
                                b_disk_mbyte_s: Some(0.5),
                                b_cache_mbyte_s: Some(0.1),
                            },
                        )
                    })
                    .collect(),
                ..PerN::default()
            })
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let files = figure3(dir.path(), &per_n, Some(4), 6e6, None).unwrap();
        assert_eq!(files.len(), 8);
        let svg = std::fs::read_to_string(dir.path().join("b_avgnet_nodes.svg")).unwrap();
        for label in ["node 1 (10.0.0.1)", "nodes 1–2 (+ 10.0.0.2)", "nodes 1–3 (+ 10.0.0.3)"] {
            assert!(svg.contains(label), "{label}");
        }
        assert!(svg.contains("Fig. 4c/d"));
        let svg = std::fs::read_to_string(dir.path().join("b_net_nodes.svg")).unwrap();
        assert!(svg.contains("Fig. 4i/j") && svg.contains("N_max = 4"));
        // The top curve is the total: 3 × 2 Mb/s per session.
        let curves = cumulative(&per_n, &(1..=3).map(ip).collect(), |s| s.b_avgnet_mbit_s);
        assert_eq!(curves[2].points, [(1.0, 6.0), (2.0, 6.0), (3.0, 6.0), (4.0, 6.0)]);
        // Fig. 4e/f: disk, + cache, node after node; the top one is every node's both.
        let svg = std::fs::read_to_string(dir.path().join("b_disk_cache_nodes.svg")).unwrap();
        assert!(svg.contains("Fig. 4e/f") && svg.contains("B_disk[1] (10.0.0.1)"));
        assert!(svg.contains("… + B_cache[3]"));
        let curves = disk_and_cache(&per_n, &(1..=3).map(ip).collect());
        assert_eq!(curves.len(), 6);
        assert_eq!(curves[1].points[0], (1.0, 0.6));
        assert!((curves[5].points[3].1 - 1.8).abs() < 1e-9);
    }
}
