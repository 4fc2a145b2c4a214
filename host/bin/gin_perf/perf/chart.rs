//! An SVG chart against message size: round-trip latency, message rate and
//! bandwidth. One colour per operation; direct solid, proxy dashed; sizes on
//! a log2 axis labelled in B/KiB/MiB; the legend in its own strip below the
//! panels, clear of the data. gin-scale draws its panels (against the number
//! of ranks) with the same code ([`xy_panel`], [`legend`]).

use super::report::{size_label, title};
use super::stats::Sample;
use plotters::prelude::*;
use std::path::Path;

/// One line of a panel: operation, path, points (log2 size, value).
#[derive(Clone, Debug, PartialEq)]
pub struct Line {
    pub op: String,
    pub path: String,
    pub points: Vec<(f64, f64)>,
}

impl Line {
    /// Solid: the direct path (gin-perf), RC with its default UAR sharing
    /// (gin-scale); dashed: everything else.
    pub fn dashed(&self) -> bool {
        self.path != "direct" && self.path != "RC"
    }
}

/// The operations' colours, fixed so that every panel agrees.
pub fn colour(op: &str) -> RGBColor {
    match op {
        "put" => RGBColor(31, 119, 180),
        "put+signal" => RGBColor(214, 39, 40),
        "get" => RGBColor(44, 160, 44),
        // gin-scale's connection scopes.
        "full mesh" => RGBColor(31, 119, 180),
        "rail-only" => RGBColor(214, 39, 40),
        "peer list" => RGBColor(44, 160, 44),
        _ => RGBColor(80, 80, 80),
    }
}

/// The lines of one panel (operations that carry data; `signal` has no size).
pub fn lines(samples: &[Sample], f: impl Fn(&Sample) -> f64) -> Vec<Line> {
    let mut keys: Vec<(String, String)> =
        samples.iter().filter(|s| s.bytes > 0).map(|s| (s.op.clone(), s.path.clone())).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .map(|(op, path)| {
            let points = samples
                .iter()
                .filter(|s| s.path == path && s.op == op && s.bytes > 0 && f(s) > 0.0)
                .map(|s| ((s.bytes as f64).log2(), f(s)))
                .collect();
            Line { op, path, points }
        })
        .filter(|l| !l.points.is_empty())
        .collect()
}

/// A tick value without trailing zeros: 700, 2.5, 0.01.
pub fn axis_number(y: f64) -> String {
    let t = if y >= 10.0 { format!("{y:.0}") } else { format!("{y:.4}") };
    if t.contains('.') { t.trim_end_matches('0').trim_end_matches('.').to_string() } else { t }
}

fn panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    ylabel: &str,
    data: &[Line],
) -> Result<(), String> {
    xy_panel(area, caption, "message size", ylabel, data, &|x| size_label(1u64 << x as u32))
}

/// A panel of lines on a log2 x axis (`x_label` names each power of two) and
/// a log y axis.
pub fn xy_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    caption: &str,
    x_desc: &str,
    ylabel: &str,
    data: &[Line],
    x_label: &dyn Fn(f64) -> String,
) -> Result<(), String> {
    let xs = data.iter().flat_map(|l| l.points.iter().map(|p| p.0));
    let ys: Vec<f64> = data.iter().flat_map(|l| l.points.iter().map(|p| p.1)).collect();
    let (xmin, xmax) = xs.fold((f64::MAX, f64::MIN), |(a, b), x| (a.min(x), b.max(x)));
    let (ymin, ymax) = ys.iter().fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(*y), b.max(*y)));
    if xmin > xmax || ymin > ymax {
        return Ok(());
    }
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(xmin - 0.3..xmax + 0.3, (ymin * 0.8..ymax * 1.25).log_scale())
        .map_err(|x| e(&x))?;
    let span = (xmax - xmin).round() as usize;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(ylabel)
        // One label per power of two up to 8, then every other one.
        .x_labels(if span <= 8 { span + 1 } else { span / 2 + 1 })
        .x_label_formatter(&|x| {
            let r = x.round();
            if (x - r).abs() < 1e-6 && r >= 0.0 { x_label(r) } else { String::new() }
        })
        .y_labels(8)
        .y_label_formatter(&|y| axis_number(*y))
        .light_line_style(RGBColor(238, 238, 238))
        .draw()
        .map_err(|x| e(&x))?;
    for l in data {
        let style = colour(&l.op).stroke_width(2);
        if l.dashed() {
            chart.draw_series(DashedLineSeries::new(l.points.clone(), 6, 4, style)).map_err(|x| e(&x))?;
            chart
                .draw_series(l.points.iter().map(|p| Circle::new(*p, 3, colour(&l.op).stroke_width(1))))
                .map_err(|x| e(&x))?;
        } else {
            chart.draw_series(LineSeries::new(l.points.clone(), style)).map_err(|x| e(&x))?;
            chart.draw_series(l.points.iter().map(|p| Circle::new(*p, 3, colour(&l.op).filled()))).map_err(|x| e(&x))?;
        }
    }
    Ok(())
}

/// The legend strip: one entry per (operation, path) drawn, and `note`
/// saying what solid and dashed mean.
pub fn legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    entries: &[Line],
    note: &str,
) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let mut x = 60;
    for l in entries {
        let c = colour(&l.op);
        if l.dashed() {
            for k in 0..3 {
                area.draw(&PathElement::new(vec![(x + k * 10, 15), (x + k * 10 + 6, 15)], c.stroke_width(2))).map_err(|x| e(&x))?;
            }
        } else {
            area.draw(&PathElement::new(vec![(x, 15), (x + 26, 15)], c.stroke_width(2))).map_err(|x| e(&x))?;
        }
        let label = format!("{} {}", l.path, l.op);
        area.draw(&Text::new(label.clone(), (x + 32, 8), ("sans-serif", 13))).map_err(|x| e(&x))?;
        x += 40 + 8 * label.len() as i32;
    }
    area.draw(&Text::new(note, (60, 32), ("sans-serif", 12))).map_err(|x| e(&x))?;
    Ok(())
}

/// Writes the chart; the title says "emulated" when it applies.
pub fn write_svg(path: &Path, samples: &[Sample], emulated: bool) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let root = SVGBackend::new(path, (1500, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let root = root.titled(&title(emulated, "rust-gin: direct (device-initiated) vs proxy"), ("sans-serif", 18)).map_err(|x| e(&x))?;
    let (panels, strip) = root.split_vertically(460);
    let areas = panels.split_evenly((1, 3));
    let rtt = lines(samples, |s| s.rtt_us.median);
    panel(&areas[0], "round trip (median of repeats)", "microseconds", &rtt)?;
    panel(&areas[1], "message rate", "M operations/s", &lines(samples, |s| s.mops.median))?;
    panel(&areas[2], "bandwidth (one lane)", "GB/s", &lines(samples, |s| s.bandwidth_gbs.median))?;
    legend(&strip, &rtt, "solid: direct (device-initiated); dashed: proxy")?;
    root.present().map_err(|x| e(&x))
}
