//! The simulator's figures as SVG text, in the layout of Gennart et al.'s Figures 4, 5 and 6.
//!
//! Why: the paper reports its results as plots (throughput on the left axis and component
//! utilisations on the right against the number of disk nodes, Fig. 4 and 6; strand-delay
//! cumulative distributions per utilisation, Fig. 5); drawing ours the same way makes the
//! comparison direct. Rendering goes to a `String` (plotters' SVG backend), so this stays pure:
//! `isochron simulate --out DIR` writes the files.

use plotters::prelude::*;

use crate::experiment::{Jitter, Sweep};
use crate::model::Component;

/// Plotting failed (plotters' own error, as text).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("plotting {figure}: {message}")]
pub struct PlotError {
    /// Which figure.
    pub figure: String,
    /// What plotters said.
    pub message: String,
}

const PALETTE: [RGBColor; 8] = [
    RGBColor(200, 30, 30),
    RGBColor(30, 120, 200),
    RGBColor(20, 150, 60),
    RGBColor(150, 60, 170),
    RGBColor(230, 140, 20),
    RGBColor(90, 90, 90),
    RGBColor(0, 170, 170),
    RGBColor(160, 110, 40),
];

fn class_color(c: Component) -> RGBColor {
    PALETTE[c as usize % PALETTE.len()]
}

/// Throughput (simulated, and the analytic bound dashed) on the left axis and the mean
/// utilisation of each component class on the right, against the number of disk nodes.
pub fn sweep_svg(sweep: &Sweep, title: &str) -> Result<String, PlotError> {
    let err =
        |e: &dyn std::fmt::Display| PlotError { figure: title.into(), message: e.to_string() };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let lo = sweep.points.first().map_or(1, |p| p.nodes);
        let hi = sweep.points.last().map_or(1, |p| p.nodes).max(lo + 1);
        let top = sweep
            .points
            .iter()
            .map(|p| p.throughput_mb_s.max(p.analytic_mb_s))
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .right_y_label_area_size(65)
            .build_cartesian_2d(f64::from(lo)..f64::from(hi), 0.0..top)
            .map_err(|e| err(&e))?
            .set_secondary_coord(f64::from(lo)..f64::from(hi), 0.0..1.05);
        chart
            .configure_mesh()
            .x_desc("disk nodes")
            .y_desc("throughput (MB/s)")
            .x_label_formatter(&|v| format!("{v:.0}"))
            .draw()
            .map_err(|e| err(&e))?;
        chart.configure_secondary_axes().y_desc("utilisation").draw().map_err(|e| err(&e))?;
        let sim: Vec<(f64, f64)> =
            sweep.points.iter().map(|p| (f64::from(p.nodes), p.throughput_mb_s)).collect();
        let ana: Vec<(f64, f64)> =
            sweep.points.iter().map(|p| (f64::from(p.nodes), p.analytic_mb_s)).collect();
        chart
            .draw_series(LineSeries::new(sim.clone(), BLACK.stroke_width(3)))
            .map_err(|e| err(&e))?
            .label("throughput (simulated)")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK.stroke_width(3)));
        chart
            .draw_series(sim.iter().map(|p| Circle::new(*p, 3, BLACK.filled())))
            .map_err(|e| err(&e))?;
        chart
            .draw_series(DashedLineSeries::new(ana, 6, 4, BLACK.stroke_width(1)))
            .map_err(|e| err(&e))?
            .label("analytic bound")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
        let classes: Vec<Component> = sweep
            .points
            .first()
            .map(|p| p.utilization.keys().copied().collect())
            .unwrap_or_default();
        for c in classes {
            let color = class_color(c);
            let pts: Vec<(f64, f64)> = sweep
                .points
                .iter()
                .map(|p| (f64::from(p.nodes), p.utilization.get(&c).copied().unwrap_or(0.0)))
                .collect();
            chart
                .draw_secondary_series(LineSeries::new(pts, color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(format!("{c} utilisation"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(out)
}

/// Strand-delay cumulative distributions, one curve per run (per utilisation), as in Fig. 5.
pub fn jitter_svg(runs: &[Jitter], title: &str) -> Result<String, PlotError> {
    let err =
        |e: &dyn std::fmt::Display| PlotError { figure: title.into(), message: e.to_string() };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (900, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let lo = runs.iter().flat_map(|j| j.cdf.first()).map(|p| p.0).fold(f64::INFINITY, f64::min);
        let hi = runs.iter().flat_map(|j| j.cdf.last()).map(|p| p.0).fold(0.0f64, f64::max);
        let lo = if lo.is_finite() { (lo - 5.0).max(0.0) } else { 0.0 };
        let hi = hi.max(lo + 1.0) + 5.0;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(65)
            .build_cartesian_2d(lo..hi, 0.0..1.02)
            .map_err(|e| err(&e))?;
        chart
            .configure_mesh()
            .x_desc("strand delay (ms)")
            .y_desc("cumulative probability")
            .draw()
            .map_err(|e| err(&e))?;
        for (i, j) in runs.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(j.cdf.clone(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(format!(
                    "utilisation {:.2}: mean {:.1} ms, sd {:.1} ms",
                    j.measured_utilization, j.mean_ms, j.std_ms
                ))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|e| err(&e))?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::experiment::{jitter, sweep};
    use crate::model::{Architecture, Operation};
    use crate::scenario::Scenario;

    #[test]
    fn sweep_figure_has_the_curves() {
        let s = Scenario::default();
        let w = sweep(&s, Architecture::SharedBus, Operation::Read, 1..=3);
        let svg = sweep_svg(&w, "shared-bus read").unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..40]);
        for label in ["shared-bus read", "analytic bound", "disk utilisation", "bus utilisation"] {
            assert!(svg.contains(label), "{label}");
        }
        assert_eq!(svg, sweep_svg(&w, "shared-bus read").unwrap());
    }

    #[test]
    fn jitter_figure_has_one_curve_per_run() {
        let s = Scenario::default();
        let runs: Vec<Jitter> = [0.3, 0.9]
            .iter()
            .map(|u| jitter(&s, Architecture::PointToPoint, Operation::Read, 4, *u, 500))
            .collect();
        let svg = jitter_svg(&runs, "p2p jitter").unwrap();
        assert!(svg.contains("utilisation 0.30") && svg.contains("utilisation 0.9"), "labels");
        assert!(svg.contains("strand delay (ms)"));
    }
}
