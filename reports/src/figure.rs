//! A lab's own figures ([`measure::Figure`]): lines (a log x axis where x spans
//! two decades or more, with the crossover of two measured curves marked),
//! stacked bars, or grouped bars for categories, drawn with the same font,
//! palette and SVG/PNG pair as the bench charts, inside a frame (`frame.rs`) that keeps
//! the legend and every label off the data.

use std::ops::Range;

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::charts::{self, Chart, ChartKind, ChartOptions, Drawable};
use crate::crossover::{self, Crossing};
use crate::error::{Error, Result};
use crate::frame::{self, Layout, LegendEntry, Spec, Swatch, Tick, XLabels};
use crate::units::{axis_bytes, fmt_bytes, sig3};
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
            FigureKind::StackedBars | FigureKind::GroupedBars => draw_bars(root, self),
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

/// Whether `xs` span two decades or more, all positive: then a linear axis
/// piles the small ones at zero (lab 7's bucket sweep from 16 KiB to 25 MiB,
/// lab 6's α–β chart), and the x axis is logarithmic.
fn spans_decades(xs: impl Iterator<Item = f64> + Clone) -> bool {
    let lo = xs.clone().fold(f64::INFINITY, f64::min);
    let hi = xs.fold(f64::NEG_INFINITY, f64::max);
    lo > 0.0 && hi.is_finite() && hi / lo >= 100.0
}

/// An axis title saying its axis is logarithmic: "time (µs, log)", not
/// "time (µs) (log)".
fn log_desc(label: &str) -> String {
    match label.strip_suffix(')') {
        Some(head) if head.contains('(') => format!("{head}, log)"),
        _ => format!("{label} (log)"),
    }
}

/// Whether a figure's x axis counts bytes (its label says so, as every lab's
/// size axis does): its ticks fall on powers of two, written 4K, 1M.
fn counts_bytes(f: &Figure) -> bool {
    f.x_label.contains("bytes")
}

/// Which way is better, as lab titles say it: "(lower is better)".
fn lower_is_better(title: &str) -> Option<bool> {
    if title.contains("lower is better") {
        Some(true)
    } else if title.contains("higher is better") {
        Some(false)
    } else {
        None
    }
}

/// The last crossing of a line figure's two measured series, when it has
/// exactly two and a log x axis (where sizes span decades and "from which
/// size" is the question), with its note.
fn figure_crossing(f: &Figure, log_x: bool) -> Option<(Crossing, String)> {
    let measured: Vec<_> = f.series.iter().filter(|s| !s.theory).collect();
    let [a, b] = measured.as_slice() else {
        return None;
    };
    if !log_x {
        return None;
    }
    let pts = |s: &measure::FigureSeries| -> Vec<(f64, f64)> {
        s.points.iter().map(|p| (p[0], p[1])).collect()
    };
    let c = crossover::crossing(&pts(a), &pts(b))?;
    let at = if counts_bytes(f) {
        fmt_bytes(c.x)
    } else {
        sig3(c.x)
    };
    let note = crossover::note(&a.name, &b.name, &c, &at, lower_is_better(&f.title));
    Some((c, note))
}

/// Each series' colour: a prediction named after a measured series ("your
/// ring, α–β fit" after "your ring") takes that series' colour, so a fit
/// reads as belonging to its data; every other series the next colour.
fn series_colors(f: &Figure) -> Vec<RGBColor> {
    let owner = |i: usize| -> Option<usize> {
        let name = &f.series[i].name;
        f.series
            .iter()
            .enumerate()
            .filter(|(j, s)| *j != i && !s.theory && !s.name.is_empty())
            .filter(|(_, s)| {
                name.strip_prefix(s.name.as_str())
                    .is_some_and(|rest| rest.starts_with([',', ' ', '(']))
            })
            .max_by_key(|(_, s)| s.name.len())
            .map(|(j, _)| j)
    };
    let mut slot = vec![None; f.series.len()];
    let mut next = 0;
    for (i, s) in f.series.iter().enumerate() {
        if !(s.theory && owner(i).is_some()) {
            slot[i] = Some(next);
            next += 1;
        }
    }
    (0..f.series.len())
        .map(|i| {
            let k = slot[i]
                .or_else(|| owner(i).and_then(|j| slot[j]))
                .unwrap_or(i);
            charts::color(k)
        })
        .collect()
}

/// The legend entry of a line series.
fn line_entry(name: &str, color: RGBColor, theory: bool) -> LegendEntry {
    LegendEntry {
        name: name.to_owned(),
        swatch: Swatch::Line {
            color,
            width: if theory { 1 } else { 2 },
            dash: theory.then_some((6, 4)),
        },
    }
}

/// What a line figure's frame holds, before anything is drawn.
struct LinesPlan {
    log_x: bool,
    log_y: bool,
    x: (f64, f64),
    y: (f64, f64),
    x_desc: String,
    y_desc: String,
    legend: Vec<LegendEntry>,
    y_candidates: Vec<Vec<f64>>,
    y_labels: Vec<String>,
    crossing: Option<(Crossing, String)>,
}

fn lines_plan(f: &Figure) -> Result<LinesPlan, String> {
    let points = || f.series.iter().flat_map(|s| s.points.iter());
    let log_x = spans_decades(points().map(|p| p[0]));
    let (x, x_desc) = if log_x {
        let lo = points().map(|p| p[0]).fold(f64::INFINITY, f64::min);
        let hi = points().map(|p| p[0]).fold(f64::NEG_INFINITY, f64::max);
        charts::check_axis("x", lo, hi, true)?;
        ((lo / 1.15, hi * 1.15), log_desc(&f.x_label))
    } else {
        let (x0, x1) = range(points().map(|p| p[0]));
        charts::check_axis("x", x0, x1, false)?;
        ((x0, x1), f.x_label.clone())
    };
    // Times over sizes span decades both ways (lab 6's α–β chart): on a
    // linear y axis every size below the largest few lay flat at zero.
    let log_y = spans_decades(points().map(|p| p[1]));
    let (y, y_desc, y_candidates) = if log_y {
        let lo = points().map(|p| p[1]).fold(f64::INFINITY, f64::min);
        let hi = points().map(|p| p[1]).fold(f64::NEG_INFINITY, f64::max);
        charts::check_axis("y", lo, hi, true)?;
        let y = (lo / 1.15, hi * 1.15);
        let axis: LogCoord<f64> = (y.0..y.1).log_scale().into();
        (y, log_desc(&f.y_label), frame::candidates(&axis))
    } else {
        let y = range(points().map(|p| p[1]));
        charts::check_axis("y", y.0, y.1, false)?;
        let axis = RangedCoordf64::from(y.0..y.1);
        (y, f.y_label.clone(), frame::candidates(&axis))
    };
    let y_labels = y_candidates
        .first()
        .map(|v| v.iter().map(|v| sig3(*v)).collect())
        .unwrap_or_default();
    Ok(LinesPlan {
        log_x,
        log_y,
        x,
        y,
        x_desc,
        y_desc,
        legend: f
            .series
            .iter()
            .zip(series_colors(f))
            .map(|(s, color)| line_entry(&s.name, color, s.theory))
            .collect(),
        y_candidates,
        y_labels,
        crossing: figure_crossing(f, log_x),
    })
}

impl LinesPlan {
    fn spec<'a>(&'a self, f: &'a Figure) -> Spec<'a> {
        Spec {
            title: &f.title,
            x_title: &self.x_desc,
            y_title: &self.y_desc,
            legend: &self.legend,
            y_labels: &self.y_labels,
            x_labels: XLabels::Numeric,
            note_row: self.crossing.is_some(),
        }
    }
}

/// A line figure's frame at a size, with its ticks and the crossing's
/// column: what is drawn, and what the tests check.
struct LinesFrame {
    layout: Layout,
    x: Vec<(Tick, i32)>,
    y: Vec<(Tick, i32)>,
    crossing_px: Option<i32>,
}

fn lines_frame(f: &Figure, plan: &LinesPlan, size: (u32, u32)) -> Result<LinesFrame, String> {
    let layout = frame::layout(&plan.spec(f), size)?;
    let (lo, hi) = plan.x;
    let bytes = plan.log_x && counts_bytes(f);
    let fmt_x = |v: f64| if bytes { axis_bytes(v) } else { sig3(v) };
    let crossing = plan.crossing.as_ref().map(|(c, _)| c.x);
    let (x, crossing_px) = if plan.log_x {
        let axis: LogCoord<f64> = (lo..hi).log_scale().into();
        let candidates = if bytes {
            size_candidates(lo, hi)
        } else {
            frame::candidates(&axis)
        };
        let px = |v: f64| frame::x_pixel(&axis, &layout, v);
        let ticks = frame::x_ticks(&layout, &candidates, px, fmt_x);
        (placed(ticks, px), crossing.map(px))
    } else {
        let axis = RangedCoordf64::from(lo..hi);
        let px = |v: f64| frame::x_pixel(&axis, &layout, v);
        let ticks = frame::x_ticks(&layout, &frame::candidates(&axis), px, fmt_x);
        (placed(ticks, px), crossing.map(px))
    };
    let (y0, y1) = plan.y;
    let y = if plan.log_y {
        let axis: LogCoord<f64> = (y0..y1).log_scale().into();
        let py = |v: f64| frame::y_pixel(&axis, &layout, v);
        placed(frame::y_ticks(&layout, &plan.y_candidates, py, sig3), py)
    } else {
        let axis = RangedCoordf64::from(y0..y1);
        let py = |v: f64| frame::y_pixel(&axis, &layout, v);
        placed(frame::y_ticks(&layout, &plan.y_candidates, py, sig3), py)
    };
    Ok(LinesFrame {
        layout,
        x,
        y,
        crossing_px,
    })
}

fn draw_lines<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Figure) -> Result<(), String> {
    let plan = lines_plan(f)?;
    let drawn = lines_frame(f, &plan, root.dim_in_pixel())?;
    let ((x0, x1), (y0, y1)) = (plan.x, plan.y);
    match (plan.log_x, plan.log_y) {
        (true, true) => draw_lines_on(
            root,
            f,
            &plan,
            &drawn,
            (x0..x1).log_scale(),
            (y0..y1).log_scale(),
        ),
        (true, false) => draw_lines_on(root, f, &plan, &drawn, (x0..x1).log_scale(), y0..y1),
        (false, true) => draw_lines_on(root, f, &plan, &drawn, x0..x1, (y0..y1).log_scale()),
        (false, false) => draw_lines_on(root, f, &plan, &drawn, x0..x1, y0..y1),
    }
}

/// Powers of two from dense to sparse, for a size axis.
fn size_candidates(lo: f64, hi: f64) -> Vec<Vec<f64>> {
    let mut sets: Vec<Vec<f64>> = (2..=12)
        .rev()
        .map(|n| charts::size_ticks(lo, hi, n))
        .collect();
    sets.dedup();
    sets
}

/// Ticks with their pixel column (x) or row (y).
fn placed(ticks: Vec<Tick>, px: impl Fn(f64) -> i32) -> Vec<(Tick, i32)> {
    ticks
        .into_iter()
        .map(|t| {
            let p = px(t.value);
            (t, p)
        })
        .collect()
}

/// The area of `root` that is `layout`'s plot.
fn plot_area<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    layout: &Layout,
) -> DrawingArea<DB, Shift> {
    let p = layout.plot;
    let (w, h) = layout.size;
    root.margin(p.top, h - p.bottom, p.left, w - p.right)
}

fn draw_lines_on<DB, X, Y>(
    root: &DrawingArea<DB, Shift>,
    f: &Figure,
    plan: &LinesPlan,
    drawn: &LinesFrame,
    x: X,
    y: Y,
) -> Result<(), String>
where
    DB: DrawingBackend,
    X: AsRangedCoord<Value = f64>,
    Y: AsRangedCoord<Value = f64>,
{
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let layout = &drawn.layout;
    let area = plot_area(root, layout);
    let mut chart = ChartBuilder::on(&area)
        .build_cartesian_2d(x, y)
        .map_err(s)?;
    frame::draw_grid(root, layout, &drawn.x, &drawn.y)?;
    for (series, color) in f.series.iter().zip(series_colors(f)) {
        let style = color.stroke_width(if series.theory { 1 } else { 2 });
        let pts: Vec<(f64, f64)> = series.points.iter().map(|p| (p[0], p[1])).collect();
        if series.theory {
            chart.draw_series(DashedLineSeries::new(pts.clone(), 6, 4, style))
        } else {
            chart.draw_series(LineSeries::new(pts.clone(), style))
        }
        .map_err(s)?;
        // Few points: mark them, so a two-point "curve" is not mistaken for data
        // in between.
        if !series.theory && pts.len() <= 24 {
            chart
                .draw_series(pts.iter().map(|&p| Circle::new(p, 3, color.filled())))
                .map_err(s)?;
        }
    }
    if let (Some(x), Some((_, note))) = (drawn.crossing_px, &plan.crossing) {
        frame::draw_crossing(root, layout, x, note)?;
    }
    frame::draw_frame(root, layout, &plan.spec(f), &drawn.x, &drawn.y, &[])
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

    fn key_points<H: KeyPointHint>(&self, _: H) -> Vec<f64> {
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

/// What a bar figure's frame holds, before anything is drawn.
struct BarsPlan {
    stacked: bool,
    /// The value written above each category (stacked) or bar (grouped).
    tops: Vec<f64>,
    y1: f64,
    legend: Vec<LegendEntry>,
    y_candidates: Vec<Vec<f64>>,
    y_labels: Vec<String>,
}

fn bars_plan(f: &Figure) -> Result<BarsPlan, String> {
    let n = f.categories.len().max(1);
    let stacked = f.kind == FigureKind::StackedBars;
    let mut totals = vec![0.0; n];
    for series in &f.series {
        for p in &series.points {
            let k = p[0] as usize;
            totals[k] = if stacked {
                totals[k] + p[1]
            } else {
                f64::max(totals[k], p[1])
            };
        }
    }
    let (_, y1) = range(totals.iter().copied().chain([0.0]));
    // Room above the tallest bar for the value written on it.
    let y1 = y1 * 1.08;
    charts::check_axis("y", 0.0, y1, false)?;
    let y_candidates = frame::candidates(&RangedCoordf64::from(0.0..y1));
    let y_labels = y_candidates
        .first()
        .map(|v| v.iter().map(|v| sig3(*v)).collect())
        .unwrap_or_default();
    let legend = f
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| LegendEntry {
            name: s.name.clone(),
            swatch: Swatch::Block(bar_color(i, s.theory)),
        })
        .collect();
    Ok(BarsPlan {
        stacked,
        tops: totals,
        y1,
        legend,
        y_candidates,
        y_labels,
    })
}

/// A bar's colour: a predicted one paler than a measured one.
fn bar_color(i: usize, theory: bool) -> RGBColor {
    let c = charts::color(i);
    if theory {
        let pale = |v: u8| ((u16::from(v) + 2 * 255) / 3) as u8;
        RGBColor(pale(c.0), pale(c.1), pale(c.2))
    } else {
        c
    }
}

impl BarsPlan {
    fn spec<'a>(&'a self, f: &'a Figure) -> Spec<'a> {
        Spec {
            title: &f.title,
            x_title: &f.x_label,
            y_title: &f.y_label,
            legend: &self.legend,
            y_labels: &self.y_labels,
            x_labels: XLabels::Categories(&f.categories),
            note_row: false,
        }
    }
}

/// A bar figure's y ticks and the centre column of each of its `n` slots.
fn bars_ticks(plan: &BarsPlan, layout: &Layout, n: usize) -> (Vec<(Tick, i32)>, Vec<i32>) {
    let y_axis = RangedCoordf64::from(0.0..plan.y1);
    let py = |v: f64| frame::y_pixel(&y_axis, layout, v);
    let yt = placed(frame::y_ticks(layout, &plan.y_candidates, py, sig3), py);
    let slots = Slots(n);
    let category_px = (0..n)
        .map(|k| frame::x_pixel(&slots, layout, k as f64))
        .collect();
    (yt, category_px)
}

fn draw_bars<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, f: &Figure) -> Result<(), String> {
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    let plan = bars_plan(f)?;
    let spec = plan.spec(f);
    let layout = frame::layout(&spec, root.dim_in_pixel())?;
    let n = f.categories.len().max(1);
    let (yt, category_px) = bars_ticks(&plan, &layout, n);
    let area = plot_area(root, &layout);
    let mut chart = ChartBuilder::on(&area)
        .build_cartesian_2d(Slots(n), RangedCoordf64::from(0.0..plan.y1))
        .map_err(s)?;
    frame::draw_grid(root, &layout, &[], &yt)?;
    let px_per_slot = f64::from((layout.plot.right - layout.plot.left).max(1)) / n as f64;
    let label_font = ("sans-serif", 14)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Center, VPos::Bottom));
    let above = plan.y1 * 0.01;
    if plan.stacked {
        // Half a bar in axis units: 36 % of its slot, at most MAX_BAR_PX wide.
        let half = 0.36f64.min(0.5 * MAX_BAR_PX / px_per_slot);
        let mut base = vec![0.0; n];
        for (i, series) in f.series.iter().enumerate() {
            let color = bar_color(i, series.theory);
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
            chart.draw_series(bars).map_err(s)?;
        }
        chart
            .draw_series(
                plan.tops
                    .iter()
                    .enumerate()
                    .map(|(k, &t)| Text::new(sig3(t), (k as f64, t + above), label_font.clone())),
            )
            .map_err(s)?;
    } else {
        // Each bar a share of 80 % of its slot, at most MAX_BAR_PX wide,
        // side by side in series order, a small gap between.
        let m = f.series.len().max(1) as f64;
        let bar = (0.8 / m).min(MAX_BAR_PX / px_per_slot);
        let bar_px = bar * px_per_slot;
        for (i, series) in f.series.iter().enumerate() {
            let color = bar_color(i, series.theory);
            let x_of = |k: f64| k - bar * m / 2.0 + bar * (i as f64 + 0.5);
            chart
                .draw_series(series.points.iter().map(|p| {
                    let x = x_of(p[0]);
                    Rectangle::new(
                        [(x - 0.45 * bar, 0.0), (x + 0.45 * bar, p[1])],
                        color.filled(),
                    )
                }))
                .map_err(s)?;
            // The value above its bar when it fits the bar's width: the
            // y axis gives the rest.
            chart
                .draw_series(
                    series
                        .points
                        .iter()
                        .filter(|p| f64::from(frame::text_width(&sig3(p[1]), 14)) <= bar_px)
                        .map(|p| {
                            Text::new(sig3(p[1]), (x_of(p[0]), p[1] + above), label_font.clone())
                        }),
                )
                .map_err(s)?;
        }
    }
    frame::draw_frame(root, &layout, &spec, &[], &yt, &category_px)
}

#[cfg(test)]
mod tests;
