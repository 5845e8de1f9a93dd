//! The disk profile's plot: throughput against IO size on a log axis, min / mean / max curves
//! (XTREAM Fig. 3, Diskbench), as SVG.
//!
//! Not here: measuring (`isochron_diskio::profile`).

use std::path::Path;

use anyhow::{Context as _, anyhow};
use isochron_sched::profile::{Curve, DiskProfile};
use plotters::prelude::*;

/// Draws `profile` to an SVG file at `path`, titled `title`.
pub fn profile_svg(profile: &DiskProfile, title: &str, path: &Path) -> anyhow::Result<()> {
    let sizes: Vec<f64> = profile.sizes().iter().map(|s| s.0 as f64 / 1024.0).collect();
    let (lo, hi) = (sizes[0], sizes[sizes.len() - 1]);
    let top = profile.curve_mib_s(Curve::Max).iter().copied().fold(0.0f64, f64::max) * 1.05;
    let root = SVGBackend::new(path, (800, 500)).into_drawing_area();
    let err = |e: &dyn std::fmt::Display| anyhow!("plotting {}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d((lo..hi).log_scale(), 0.0..top.max(1e-6))
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("IO size (KiB, log scale)")
        .y_desc("throughput (MiB/s)")
        .x_label_formatter(&|v| format!("{v:.0}"))
        .draw()
        .map_err(|e| err(&e))?;
    for (curve, color) in [(Curve::Max, GREEN), (Curve::Mean, BLUE), (Curve::Min, RED)] {
        let pts: Vec<(f64, f64)> = sizes.iter().copied().zip(profile.curve_mib_s(curve)).collect();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))
            .map_err(|e| err(&e))?
            .label(curve.to_string())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
        chart
            .draw_series(pts.into_iter().map(|p| Circle::new(p, 3, color.filled())))
            .map_err(|e| err(&e))?;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn writes_an_svg_with_three_curves() {
        let p = DiskProfile::from_model(Duration::from_millis(10), 4.0 * 1_048_576.0).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.svg");
        profile_svg(&p, "emulated disk", &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..50]);
        for label in ["min", "mean", "max", "emulated disk", "IO size"] {
            assert!(svg.contains(label), "{label}");
        }
    }
}
