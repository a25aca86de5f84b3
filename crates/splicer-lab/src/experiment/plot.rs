//! Plots of a run, as SVG (the `plotters` crate): latency CDFs and throughput over time.

use std::path::Path;

use plotters::prelude::*;

/// One line of a plot.
pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

/// The ranges the finite points span. A range of one value is widened by one unit each way:
/// plotters draws a mesh line per step of a range, and a range of 1e-9 took it minutes.
fn bounds(series: &[Series]) -> (f64, f64, f64, f64) {
    bounds_of(series.iter())
}

fn bounds_of<'a>(series: impl Iterator<Item = &'a Series>) -> (f64, f64, f64, f64) {
    let mut b = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    let finite = series
        .flat_map(|s| s.points.iter())
        .filter(|(x, y)| x.is_finite() && y.is_finite());
    for (x, y) in finite {
        b = (b.0.min(*x), b.1.max(*x), b.2.min(*y), b.3.max(*y));
    }
    if b.0 > b.1 {
        return (0.0, 1.0, 0.0, 1.0);
    }
    let widen = |lo: f64, hi: f64| {
        if hi - lo < 1e-6 {
            (lo - 1.0, hi + 1.0)
        } else {
            (lo, hi)
        }
    };
    let (x0, x1) = widen(b.0, b.1);
    let (y0, y1) = widen(b.2, b.3);
    (x0, x1, y0, y1)
}

/// Draws `series` as lines into an SVG file.
pub fn lines(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
    y_from_zero: bool,
) -> anyhow::Result<()> {
    draw_lines(path, (title, x_desc, y_desc), series, None, y_from_zero)
}

/// Draws `series` as lines with error bars: `half[i][j]` is half the confidence interval of
/// point `j` of series `i` (NaN: no bar).
pub fn lines_with_errors(
    path: &Path,
    (title, x_desc, y_desc): (&str, &str, &str),
    series: &[Series],
    half: &[Vec<f64>],
) -> anyhow::Result<()> {
    // The bars' ends count in the ranges.
    let ends: Vec<Series> = series
        .iter()
        .zip(half)
        .flat_map(|(s, h)| {
            [-1.0, 1.0].map(|sign| Series {
                label: String::new(),
                points: s
                    .points
                    .iter()
                    .zip(h)
                    .filter(|(_, h)| h.is_finite())
                    .map(|((x, y), h)| (*x, y + sign * h))
                    .collect(),
            })
        })
        .collect();
    let all: Vec<&Series> = series.iter().chain(&ends).collect();
    draw_lines(
        path,
        (title, x_desc, y_desc),
        series,
        Some((half, &all)),
        false,
    )
}

fn draw_lines(
    path: &Path,
    (title, x_desc, y_desc): (&str, &str, &str),
    series: &[Series],
    errors: Option<(&[Vec<f64>], &[&Series])>,
    y_from_zero: bool,
) -> anyhow::Result<()> {
    let (x0, x1, y0, y1) = match errors {
        Some((_, all)) => bounds_of(all.iter().copied()),
        None => bounds(series),
    };
    let y0 = if y_from_zero { 0.0 } else { y0 };
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, y0..y1 * 1.05)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points
                    .iter()
                    .copied()
                    .filter(|(x, y)| x.is_finite() && y.is_finite()),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .label(s.label.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        if let Some(half) = errors.and_then(|(h, _)| h.get(i)) {
            let bars = s
                .points
                .iter()
                .zip(half)
                .filter(|((x, y), h)| x.is_finite() && y.is_finite() && h.is_finite())
                .map(|((x, y), h)| {
                    ErrorBar::new_vertical(*x, y - h, *y, y + h, color.stroke_width(1), 8)
                });
            chart
                .draw_series(bars)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
        }
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    root.present().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(())
}

/// Draws `series` as points into an SVG file, the y axis in log scale (for latencies that
/// differ by orders of magnitude between series). Values at or below 0 are left out.
pub fn points_log_y(
    path: &Path,
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[Series],
) -> anyhow::Result<()> {
    let (x0, x1, _, _) = bounds(series);
    let ys = || {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|y| *y > 0.0)
    };
    let y0 = ys().fold(f64::MAX, f64::min);
    let y1 = ys().fold(f64::MIN, f64::max);
    let (y0, y1) = if y0 <= y1 {
        (y0 / 1.5, y1 * 1.5)
    } else {
        (0.001, 1.0)
    };
    let e = |e: &dyn std::fmt::Display| anyhow::anyhow!("{e}");
    let root = SVGBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(x0..x1, (y0..y1).log_scale())
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .draw()
        .map_err(|x| e(&x))?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(
                s.points
                    .iter()
                    .filter(|p| p.1 > 0.0)
                    .map(|p| Circle::new(*p, 2, color.filled())),
            )
            .map_err(|x| e(&x))?
            .label(s.label.clone())
            .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_point_or_none_finite_still_draws() {
        let dir = std::env::temp_dir().join(format!("plot-one-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let one = [Series {
            label: "one".into(),
            points: vec![(1.0, -29.0), (f64::NAN, 3.0), (2.0, f64::INFINITY)],
        }];
        assert_eq!(bounds(&one), (0.0, 2.0, -30.0, -28.0));
        let t = std::time::Instant::now();
        lines(&dir.join("one.svg"), "t", "x", "y", &one, false).unwrap();
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        let none = [Series {
            label: "none".into(),
            points: vec![(f64::NAN, f64::NAN)],
        }];
        assert_eq!(bounds(&none), (0.0, 1.0, 0.0, 1.0));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn writes_an_svg_with_its_labels() {
        let path = std::env::temp_dir().join(format!("splab-plot-{}.svg", std::process::id()));
        let s = vec![
            Series {
                label: "direct".into(),
                points: vec![(1.0, 0.1), (2.0, 0.6), (5.0, 1.0)],
            },
            Series {
                label: "splicer".into(),
                points: vec![(1.5, 0.2), (3.0, 1.0)],
            },
        ];
        lines(&path, "latency CDF", "ms", "fraction", &s, true).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(svg.starts_with("<svg") && svg.contains("splicer") && svg.contains("latency CDF"));
        assert!(
            svg.contains("<polyline") || svg.contains("<path"),
            "no lines drawn"
        );
        points_log_y(&path, "latency", "MB", "ms", &s).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(
            svg.contains("<circle") && svg.contains("direct"),
            "no points drawn"
        );
    }
}
