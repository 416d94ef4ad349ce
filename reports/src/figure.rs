//! A lab's own figures ([`measure::Figure`]): lines on linear axes, or stacked
//! bars, drawn with the same font, palette and SVG/PNG pair as the bench charts.

use plotters::coord::Shift;
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

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Figure) -> Result<(), String> {
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let points = || f.series.iter().flat_map(|s| s.points.iter());
    let (x0, x1) = range(points().map(|p| p[0]));
    let (y0, y1) = range(points().map(|p| p[1]));
    let mut chart = chart_builder(root, &f.title)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(s)?;
    chart
        .configure_mesh()
        .x_desc(f.x_label.as_str())
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
    // Segmented x: one segment per bar, its label under its centre.
    let mut chart = chart_builder(root, &f.title)
        .build_cartesian_2d((0..n as i32 - 1).into_segmented(), 0.0..y1)
        .map_err(s)?;
    let label = |v: &SegmentValue<i32>| match v {
        SegmentValue::CenterOf(k) => f.categories.get(*k as usize).cloned().unwrap_or_default(),
        _ => String::new(),
    };
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc(f.x_label.as_str())
        .y_desc(f.y_label.as_str())
        .x_labels(n.max(1) + 1)
        .x_label_formatter(&label)
        .y_label_formatter(&|v| sig3(*v))
        .light_line_style(RGBColor(235, 235, 235))
        .label_style(("sans-serif", 16))
        .draw()
        .map_err(s)?;
    let mut base = vec![0.0; n];
    for (i, series) in f.series.iter().enumerate() {
        let color = charts::color(i);
        let bars: Vec<Rectangle<(SegmentValue<i32>, f64)>> = series
            .points
            .iter()
            .map(|p| {
                let k = p[0] as usize;
                let (lo, hi) = (base[k], base[k] + p[1]);
                base[k] = hi;
                let (l, r) = (
                    SegmentValue::Exact(k as i32),
                    SegmentValue::Exact(k as i32 + 1),
                );
                let mut bar = Rectangle::new([(l, lo), (r, hi)], color.filled());
                bar.set_margin(0, 0, 18, 18);
                bar
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
                (SegmentValue::CenterOf(k as i32), t + y1 * 0.01),
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

    #[test]
    fn an_undrawable_figure_is_an_error_naming_it() {
        let e = render_figure(&Figure::lines("nothing", "N", "x", "y"), &opts()).unwrap_err();
        assert!(e.to_string().contains("nothing"), "{e}");
    }
}
