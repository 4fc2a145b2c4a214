//! An SVG chart of latency and bandwidth against message size, one line per
//! path and operation.

use super::report::title;
use super::Sample;
use plotters::prelude::*;
use std::path::Path;

fn series(samples: &[Sample], f: impl Fn(&Sample) -> f64) -> Vec<(String, Vec<(f64, f64)>)> {
    let mut keys: Vec<(String, String)> =
        samples.iter().filter(|s| s.bytes > 0).map(|s| (s.path.clone(), s.op.clone())).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|(p, o)| {
            let pts = samples
                .iter()
                .filter(|s| s.path == p && s.op == o && s.bytes > 0 && f(s) > 0.0)
                .map(|s| (s.bytes as f64, f(s)))
                .collect();
            (format!("{p} {o}"), pts)
        })
        .collect()
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    ylabel: &str,
    data: &[(String, Vec<(f64, f64)>)],
) -> Result<(), String> {
    let xs = data.iter().flat_map(|(_, v)| v.iter().map(|p| p.0));
    let ys: Vec<f64> = data.iter().flat_map(|(_, v)| v.iter().map(|p| p.1)).collect();
    let (xmin, xmax) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (ymin, ymax) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(*y), b.max(*y)));
    if xmin > xmax || ymin > ymax {
        return Ok(());
    }
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 16))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(60)
        .build_cartesian_2d((xmin..xmax * 1.01).log_scale(), (ymin * 0.9..ymax * 1.1).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(ylabel)
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [RED, BLUE, GREEN, MAGENTA, CYAN, BLACK, RGBColor(200, 120, 0), RGBColor(120, 60, 200)];
    for (i, (name, pts)) in data.iter().enumerate() {
        let c = colors[i % colors.len()];
        chart
            .draw_series(LineSeries::new(pts.clone(), c.stroke_width(2)))
            .map_err(|e| e.to_string())?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], c));
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, c.filled()))).map_err(|e| e.to_string())?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| e.to_string())
}

/// Writes the chart; the title says "emulated" when it applies.
pub fn write_svg(path: &Path, samples: &[Sample], emulated: bool) -> Result<(), String> {
    let root = SVGBackend::new(path, (1100, 520)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root.titled(&title(emulated, "rust-gin: direct (device-initiated) vs proxy"), ("sans-serif", 18)).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(550);
    panel(&left, "round-trip latency (median)", "microseconds", &series(samples, |s| s.rtt_median_us))?;
    panel(&right, "bandwidth", "GB/s", &series(samples, |s| s.bandwidth_gbs))?;
    root.present().map_err(|e| e.to_string())
}
