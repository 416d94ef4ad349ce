//! A lab's own figures ([`measure::Figure`]): lines (a log x axis where x spans
//! two decades or more, linear otherwise), or stacked
//! bars, drawn with the same font, palette and SVG/PNG pair as the bench charts.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::charts::{self, Chart, ChartKind, ChartOptions, Drawable};
use crate::error::{Error, Result};
use crate::units::sig3;
use measure::{Figure, FigureKind};

/// Draws `figure` as a chart whose stem is the figure's name.
pub fn render_figure(figure: &Figure, opts: &ChartOptions) -> Result<Chart> {
    if let Some(reason) = figure.problem() {
        return Err(Error::Chart {
            chart: figure.name.clone(),
            reason,
        });
    }
    charts::prepare(opts)?;
    charts::render(
        figure,
        figure.name.clone(),
        &figure.title,
        ChartKind::Figure,
        None,
        (opts.width, opts.height),
    )
}

impl Drawable for Figure {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        match self.kind {
            FigureKind::Lines => draw_lines(root, self),
            FigureKind::StackedBars => draw_bars(root, self),
        }?;
        root.present().map_err(|e| e.to_string())
    }
}

/// `lo..hi` of `values` widened by 5 % each side, starting at 0 when every
/// value is positive (a loss, a time: the eye reads bars and curves from 0).
fn range(values: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let lo = values.clone().fold(f64::INFINITY, f64::min);
    let hi = values.fold(f64::NEG_INFINITY, f64::max);
    let lo = if lo >= 0.0 { 0.0 } else { lo };
    let pad = ((hi - lo) * 0.05).max(hi.abs() * 1e-3).max(1e-12);
    (lo - if lo == 0.0 { 0.0 } else { pad }, hi + pad)
}

fn chart_builder<'a, 'b, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    title: &str,
) -> ChartBuilder<'a, 'b, DB> {
    let mut b = ChartBuilder::on(root);
    b.caption(title, ("sans-serif", 22))
        .margin(14)
        .x_label_area_size(48)
        .y_label_area_size(76);
    b
}

/// Whether `xs` span two decades or more, all positive: then a linear axis
/// piles the small ones at zero (lab 7's bucket sweep from 16 KiB to 25 MiB,
/// lab 6's α–β chart), and the x axis is logarithmic.
fn spans_decades(xs: impl Iterator<Item = f64> + Clone) -> bool {
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(f64::NEG_INFINITY, f64::max);
    lo > 0.0 && hi.is_finite() && hi / lo >= 100.0
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Figure) -> Result<(), String> {
    let points = || f.series.iter().flat_map(|s| s.points.iter());
    if spans_decades(points().map(|p| p[0])) {
        let lo = points().map(|p| p[0]).fold(f64::INFINITY, f64::min);
        let hi = points().map(|p| p[0]).fold(f64::NEG_INFINITY, f64::max);
        charts::check_axis("x", lo, hi, true)?;
        let x_desc = format!("{} (log)", f.x_label);
        draw_lines_on(root, f, (lo / 1.15..hi * 1.15).log_scale(), &x_desc)
    } else {
        let (x0, x1) = range(points().map(|p| p[0]));
        charts::check_axis("x", x0, x1, false)?;
        draw_lines_on(root, f, x0..x1, &f.x_label)
    }
}

fn draw_lines_on<DB, X>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    x: X,
    x_desc: &str,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    X::CoordDescType: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let points = || f.series.iter().flat_map(|s| s.points.iter());
    let (y0, y1) = range(points().map(|p| p[1]));
    charts::check_axis("y", y0, y1, false)?;
    let mut chart = chart_builder(root, &f.title)
        .build_cartesian_2d(x, y0..y1)
        .map_err(s)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(f.y_label.as_str())
        .x_label_formatter(&|v| sig3(*v))
        .y_label_formatter(&|v| sig3(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(s)?;
    for (i, series) in f.series.iter().enumerate() {
        let color = charts::color(i);
        let style = color.stroke_width(if series.theory { 1 } else { 2 });
        let pts: Vec<(f64, f64)> = series.points.iter().map(|p| (p[0], p[1])).collect();
        let anno = if series.theory {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))
        }
        .map_err(s)?;
        let dashed = series.theory;
        anno.label(series.name.clone()).legend(move |(x, y)| {
            let seg = |a: i32, b: i32| PathElement::new(vec![(x + a, y), (x + b, y)], style);
            let pieces = if dashed {
                [(0, 8), (13, 22)]
            } else {
                [(0, 11), (11, 22)]
            };
            EmptyElement::at((0, 0)) + seg(pieces[0].0, pieces[0].1) + seg(pieces[1].0, pieces[1].1)
        });
        // Few points: mark them, so a two-point "curve" is not mistaken for data
        // in between.
        if !series.theory && pts.len() <= 24 {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(s)?;
        }
    }
    legend(&mut chart)
}

/// A bar chart's x axis: `n` slots, slot `k` spanning `k ± 0.5` and labelled
/// at its centre `k`. plotters' segmented axis over `0..n-1` is empty for a
/// single bar: it gave that bar a negative width in the SVG and pushed it
/// onto the tick labels in the PNG (issue 24).
struct Slots(usize);

impl Ranged for Slots {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let at = (value + 0.5) / self.0.max(1) as f64;
        limit.0 + (at * f64::from(limit.1 - limit.0)).round() as i32
    }

    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        // Labels at the centres only; no light grid lines between them.
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        (0..self.0).map(|k| k as f64).collect()
    }

    fn range(&self) -> Range<f64> {
        -0.5..self.0 as f64 - 0.5
    }
}

impl ValueFormatter<f64> for Slots {
    fn format(value: &f64) -> String {
        sig3(*value)
    }
}

/// The widest a bar is drawn, in pixels: one or two bars across the whole
/// plot read as a wall, not a bar.
const MAX_BAR_PX: f64 = 140.0;

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Figure) -> Result<(), String> {
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let n = f.categories.len().max(1);
    let mut totals = vec![0.0; n];
    for series in &f.series {
        for p in &series.points {
            totals[p[0] as usize] += p[1];
        }
    }
    let (_, y1) = range(totals.iter().copied().chain([0.0]));
    // Room above the tallest bar for its total and for the legend (top right, about
    // 7 % of the plot's height per row), so neither covers a bar.
    let y1 = y1 * (1.10 + 0.07 * f.series.len() as f64);
    charts::check_axis("y", 0.0, y1, false)?;
    let mut chart = chart_builder(root, &f.title)
        .build_cartesian_2d(Slots(n), 0.0..y1)
        .map_err(s)?;
    let label = |v: &f64| {
        let k = v.round();
        if (v - k).abs() < 1e-6 && k >= 0.0 {
            f.categories.get(k as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(f.x_label.as_str())
        .y_desc(f.y_label.as_str())
        .x_labels(n)
        .x_label_formatter(&label)
        .y_label_formatter(&|v| sig3(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(s)?;
    // Half a bar in axis units: 36 % of its slot, at most MAX_BAR_PX wide.
    let (plot_px, _) = chart.plotting_area().dim_in_pixel();
    let px_per_slot = f64::from(plot_px.max(1)) / n as f64;
    let half = 0.36f64.min(0.5 * MAX_BAR_PX / px_per_slot);
    let mut base = vec![0.0; n];
    for (i, series) in f.series.iter().enumerate() {
        let color = charts::color(i);
        let bars: Vec<Rectangle<(f64, f64)>> = series
            .points
            .iter()
            .map(|p| {
                let k = p[0] as usize;
                let (lo, hi) = (base[k], base[k] + p[1]);
                base[k] = hi;
                let x = k as f64;
                Rectangle::new([(x - half, lo), (x + half, hi)], color.filled())
            })
            .collect();
        chart
            .draw_series(bars)
            .map_err(s)?
            .label(series.name.clone())
            .legend(move |(x, y)| Rectangle::new([(x, y - 6), (x + 16, y + 6)], color.filled()));
    }
    chart
        .draw_series(totals.iter().enumerate().map(|(k, &t)| {
            Text::new(
                sig3(t),
                (k as f64, t + y1 * 0.01),
                ("sans-serif", 15)
                    .into_font()
                    .color(&BLACK)
                    .pos(Pos::new(HPos::Center, VPos::Bottom)),
            )
        }))
        .map_err(s)?;
    legend(&mut chart)
}

fn legend<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate,
{
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 15))
        .draw()
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use measure::FigureSeries;

    fn opts() -> ChartOptions {
        ChartOptions::default()
    }

    /// Lab 7's bucket sweep (16 KiB to 25 MiB) piled its small buckets at
    /// zero on a linear axis: x spanning decades is drawn on a log axis.
    #[test]
    fn bucket_sweep_from_16k_to_25m_piled_at_zero_on_a_linear_axis() {
        let sweep = Figure::lines("buckets", "Exposed communication", "bucket (bytes)", "ms").with(
            FigureSeries::measured(
                "exposed",
                vec![[16384.0, 1.0], [262144.0, 0.8], [26214400.0, 2.0]],
            ),
        );
        let c = render_figure(&sweep, &opts()).unwrap();
        assert!(c.svg.contains("bucket (bytes) (log)"), "no log axis label");
        // The three points' circles: on a log axis the middle one sits near the
        // middle of the plot, not against the left edge.
        let xs: Vec<f64> = c
            .svg
            .split("<circle")
            .skip(1)
            .filter_map(|t| t.split("cx=\"").nth(1)?.split('"').next()?.parse().ok())
            .collect();
        assert_eq!(xs.len(), 3, "{xs:?}");
        let frac = (xs[1] - xs[0]) / (xs[2] - xs[0]);
        assert!(
            (0.25..0.6).contains(&frac),
            "middle point at {frac} of the span"
        );
        assert!(!spans_decades([1.0, 50.0].into_iter()));
        assert!(
            !spans_decades([0.0, 1000.0].into_iter()),
            "zero cannot go on a log axis"
        );
    }

    #[test]
    fn lines_and_bars_draw_their_names_and_labels() {
        let lines = Figure::lines("loss", "Training loss", "wall time (s)", "loss")
            .with(FigureSeries::measured(
                "2 workers",
                vec![[0.0, 2.3], [1.5, 0.9]],
            ))
            .with(FigureSeries::theory(
                "(p−1)/(m+p−1)",
                vec![[0.0, 1.0], [1.5, 0.5]],
            ));
        let c = render_figure(&lines, &opts()).unwrap();
        assert_eq!(
            (c.stem.as_str(), c.kind, c.collective),
            ("loss", ChartKind::Figure, None)
        );
        for text in [
            "Training loss",
            "2 workers",
            "wall time (s)",
            "(p−1)/(m+p−1)",
        ] {
            assert!(c.svg.contains(text), "{text} missing");
        }
        assert!(c.png.starts_with(b"\x89PNG"));

        let bars = Figure::stacked_bars(
            "phases",
            "Step phases",
            vec!["cpu".into(), "cuda:0".into()],
            "ms",
        )
        .with_layer("forward", &[3.0, 0.25])
        .with_layer("backward", &[6.0, 0.5]);
        let c = render_figure(&bars, &opts()).unwrap();
        if let Ok(dir) = std::env::var("RINGSIDE_FIGURE_DUMP") {
            std::fs::write(format!("{dir}/bars.png"), &c.png).unwrap();
        }
        // The total of the first bar (3 + 6) is written above it.
        for text in ["cpu", "cuda:0", "forward", "backward", "\n9\n"] {
            assert!(c.svg.contains(text), "{text} missing from the bars");
        }
    }

    /// `(x, y, width, height)` of every `<rect>` filled with `fill` (plotters
    /// writes one element per line).
    fn rects(svg: &str, fill: &str) -> Vec<(f64, f64, f64, f64)> {
        let attr = |line: &str, name: &str| -> f64 {
            let key = format!(" {name}=\"");
            let at = line
                .find(&key)
                .unwrap_or_else(|| panic!("no {name} in {line}"))
                + key.len();
            let end = line[at..].find('"').unwrap();
            line[at..at + end].parse().unwrap()
        };
        svg.lines()
            .filter(|l| l.starts_with("<rect") && l.contains(&format!("fill=\"{fill}\"")))
            .map(|l| {
                (
                    attr(l, "x"),
                    attr(l, "y"),
                    attr(l, "width"),
                    attr(l, "height"),
                )
            })
            .collect()
    }

    /// The first palette colour as plotters writes it in SVG.
    const FIRST: &str = "#1F77B4";

    /// Draws `figure`, checks each of its `bars` layer-0 rects lies inside the
    /// plot with a sensible width, and returns the chart.
    fn bars_fit_the_plot(figure: &Figure, bars: usize) -> Chart {
        let c = render_figure(figure, &opts()).unwrap();
        let (w, h) = (f64::from(opts().width), f64::from(opts().height));
        // The legend's swatch is a rect of the same colour, 16 px wide.
        let found: Vec<_> = rects(&c.svg, FIRST)
            .into_iter()
            .filter(|r| r.2 != 16.0)
            .collect();
        assert_eq!(found.len(), bars, "{found:?}");
        for (x, y, width, height) in found {
            // Right of the y axis' labels (76 px + 14 px margin), inside the
            // picture, neither a sliver nor a wall.
            assert!(width >= 20.0 && width <= 0.5 * w, "bar width {width}");
            assert!(x >= 90.0 && x + width <= w, "bar at x {x}..{}", x + width);
            assert!(
                height > 0.0 && y >= 0.0 && y + height <= h,
                "bar y {y} h {height}"
            );
        }
        c
    }

    #[test]
    fn one_bar_chart_has_positive_width() {
        // Lab 2 on a machine without a GPU: one category, one layer.
        let one = Figure::stacked_bars("phases", "Step phases", vec!["cpu".into()], "ms")
            .with_layer("forward", &[3.0]);
        let c = bars_fit_the_plot(&one, 1);
        assert!(
            c.svg.contains(">cpu<") || c.svg.contains("\ncpu\n"),
            "no category label"
        );
        if let Ok(dir) = std::env::var("RINGSIDE_FIGURE_DUMP") {
            std::fs::write(format!("{dir}/one-bar.png"), &c.png).unwrap();
        }
        // One bar, two layers; and three bars of one layer.
        let two_layers = one.clone().with_layer("backward", &[6.0]);
        let c = bars_fit_the_plot(&two_layers, 1);
        if let Ok(dir) = std::env::var("RINGSIDE_FIGURE_DUMP") {
            std::fs::write(format!("{dir}/one-bar-two-layers.png"), &c.png).unwrap();
        }
        let three = Figure::stacked_bars(
            "phases",
            "Step phases",
            vec!["a".into(), "b".into(), "c".into()],
            "ms",
        )
        .with_layer("forward", &[3.0, 1.0, 2.0]);
        bars_fit_the_plot(&three, 3);
    }

    #[test]
    fn a_figure_too_large_for_its_axes_fails_fast_naming_them() {
        let huge = Figure::lines("loss", "L", "s", "loss").with(FigureSeries::measured(
            "a",
            vec![[0.0, -1e308], [1.0, 1e308]],
        ));
        let e = render_figure(&huge, &opts()).unwrap_err().to_string();
        assert!(e.contains("loss") && e.contains("y axis"), "{e}");
        let bars = Figure::stacked_bars("phases", "P", vec!["cpu".into()], "ms")
            .with_layer("a", &[1e308])
            .with_layer("b", &[1e308]);
        let e = render_figure(&bars, &opts()).unwrap_err().to_string();
        assert!(e.contains("phases") && e.contains("y axis"), "{e}");
    }

    #[test]
    fn an_undrawable_figure_is_an_error_naming_it() {
        let e = render_figure(&Figure::lines("nothing", "N", "x", "y"), &opts()).unwrap_err();
        assert!(e.to_string().contains("nothing"), "{e}");
    }
}
