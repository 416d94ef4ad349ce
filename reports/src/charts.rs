//! Charts with plotters, each rendered twice from one description: SVG (for
//! the page) and PNG (for slides and chats).
//!
//! Text goes through plotters' `ab_glyph` feature with a font compiled into
//! the binary ([`EMBEDDED_FONT`]), so neither building nor drawing needs a
//! font package, fontconfig or freetype: GPU nodes and slim cluster images
//! often have no font at all, and a lab's measurement must not fail at its
//! charts because of that. A TTF/OTF file can still be chosen instead.

use std::collections::HashMap;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

use crate::dataset::Dataset;
use crate::error::{Error, Result};
use crate::fit::{Regimes, SeriesFit};
use crate::frame::{self, Layout, LegendEntry, Spec, Swatch, Tick, XLabels};
use crate::results::Collective;
use crate::units::{axis_bytes, fmt_bytes, fmt_us, sig3};

/// DejaVu Sans 2.37 (copied from Debian's `fonts-dejavu-core` 2.37-6; the
/// Bitstream Vera licence, which allows embedding, is `reports/fonts/LICENSE`):
/// the charts' font unless [`ChartOptions::font`] names a file.
pub const EMBEDDED_FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// Size and font of the charts.
#[derive(Debug, Clone, PartialEq)]
pub struct ChartOptions {
    /// Width in pixels (SVG user units).
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// A TTF/OTF file for all chart text; `None` (the default) draws with
    /// [`EMBEDDED_FONT`] and reads no file.
    pub font: Option<PathBuf>,
    /// Draw the fitted cost model over the measurements (its curves, its
    /// breaks, the residuals chart). The report explains them beside the
    /// chart; a lab's chart in the book does not, and at the book's width
    /// the break labels were unreadable, so labs turn this off.
    pub models: bool,
}

impl Default for ChartOptions {
    fn default() -> Self {
        ChartOptions {
            width: 960,
            height: 560,
            font: None,
            models: true,
        }
    }
}

/// A chart that could not be drawn, and why. The report keeps every other
/// chart and all the numbers, and says which chart is missing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChartFailure {
    /// The chart's file stem (`latency-all_reduce`) or figure name.
    pub chart: String,
    /// What went wrong.
    pub reason: String,
}

impl ChartFailure {
    /// The failure of chart `chart` from the error drawing it returned.
    pub fn from_error(chart: &str, e: &Error) -> Self {
        let reason = match e {
            Error::Chart { reason, .. } => reason.clone(),
            other => other.to_string(),
        };
        ChartFailure {
            chart: chart.to_owned(),
            reason,
        }
    }
}

impl fmt::Display for ChartFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "chart {} not drawn: {}", self.chart, self.reason)
    }
}

/// What [`render_charts`] drew, and what it could not.
#[derive(Debug, Clone, Default)]
pub struct Drawn {
    /// The charts, in page order.
    pub charts: Vec<Chart>,
    /// The charts that failed, in page order.
    pub failed: Vec<ChartFailure>,
}

/// The kinds of chart drawn per collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ChartKind {
    /// Median time vs size, log–log, with the model curves and their breaks.
    Latency,
    /// Bus bandwidth vs size, log x.
    BusBandwidth,
    /// Min–max band around the median, log–log.
    Spread,
    /// Relative residual (measured − model)/model vs size, log x: drawn for
    /// all_reduce only, the collective the model is judged on.
    Residuals,
    /// A lab's own [`measure::Figure`] (lines or stacked bars).
    Figure,
}

impl ChartKind {
    /// All kinds drawn per collective, in page order.
    pub const ALL: [ChartKind; 4] = [
        ChartKind::Latency,
        ChartKind::Residuals,
        ChartKind::BusBandwidth,
        ChartKind::Spread,
    ];

    /// File-name prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            ChartKind::Latency => "latency",
            ChartKind::BusBandwidth => "busbw",
            ChartKind::Spread => "spread",
            ChartKind::Residuals => "residuals",
            ChartKind::Figure => "figure",
        }
    }
}

/// One rendered chart.
#[derive(Debug, Clone)]
pub struct Chart {
    /// What it shows.
    pub kind: ChartKind,
    /// Of which collective (`None` for a lab's figure).
    pub collective: Option<Collective>,
    /// File stem, e.g. `latency-all_reduce` (only `[a-z_-]`, safe in paths,
    /// ids and URLs).
    pub stem: String,
    /// Caption.
    pub title: String,
    /// The SVG document.
    pub svg: String,
    /// The PNG file.
    pub png: Vec<u8>,
    /// Pixel size.
    pub size: (u32, u32),
}

/// Register `font` (or, for `None`, [`EMBEDDED_FONT`]) as plotters'
/// "sans-serif" font.
fn use_font(font: Option<&Path>) -> Result<()> {
    match font {
        Some(path) => use_font_file(path),
        None => plotters::style::register_font("sans-serif", FontStyle::Normal, EMBEDDED_FONT)
            .map_err(|_| Error::Chart {
                chart: "all".into(),
                reason: "the embedded DejaVu Sans does not parse as a font".into(),
            }),
    }
}

/// Register the file `path` as plotters' "sans-serif" font. plotters keeps
/// fonts as `&'static [u8]`, so each distinct file is read once and leaked;
/// the table keeps a second report in the same process from leaking it again.
fn use_font_file(path: &Path) -> Result<()> {
    static LOADED: OnceLock<Mutex<HashMap<PathBuf, &'static [u8]>>> = OnceLock::new();
    let font_err = |reason: String| Error::Font {
        path: path.to_path_buf(),
        reason,
    };
    let mut loaded = LOADED
        .get_or_init(Default::default)
        .lock()
        .map_err(|_| font_err("font table poisoned by an earlier panic".into()))?;
    let bytes = match loaded.get(path) {
        Some(b) => *b,
        None => {
            let data = std::fs::read(path).map_err(|e| font_err(e.to_string()))?;
            let leaked: &'static [u8] = Box::leak(data.into_boxed_slice());
            loaded.insert(path.to_path_buf(), leaked);
            leaked
        }
    };
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| font_err("not a TrueType/OpenType font".into()))
}

/// Tableau 10: distinct, colour-blind friendlier than plotters' defaults.
pub(crate) const PALETTE: [RGBColor; 10] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
    RGBColor(188, 189, 34),
    RGBColor(23, 190, 207),
];

/// The colour of a series, the same in every chart.
pub(crate) fn color(series: usize) -> RGBColor {
    PALETTE[series % PALETTE.len()]
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Stroke {
    /// Our own measurement.
    Solid,
    /// A peer (torch) measurement: long dashes.
    Peer,
    /// A model curve: thin short dashes.
    Model,
}

struct Line {
    legend: Option<String>,
    color: RGBColor,
    stroke: Stroke,
    points: Vec<(f64, f64)>,
    markers: bool,
}

/// A vertical line at a model's break, labelled at the bottom of the plot
/// unless the plot's data live there.
#[derive(Clone)]
struct Mark {
    x: f64,
    color: RGBColor,
    label: Option<String>,
}

struct Band {
    color: RGBColor,
    /// (x, low, high)
    points: Vec<(f64, f64, f64)>,
}

#[derive(Clone, Copy)]
enum YAxis {
    Log(f64, f64),
    Linear(f64, f64),
}

struct Plot {
    title: String,
    y_desc: &'static str,
    x_range: (f64, f64),
    y: YAxis,
    bands: Vec<Band>,
    lines: Vec<Line>,
    marks: Vec<Mark>,
    model_legend: bool,
    /// Where the chart's two series cross, with its note (lab 1: by hand
    /// against all_reduce): drawn as a dashed rule, the note above the plot.
    crossing: Option<(f64, String)>,
}

/// Powers of two for the size axis: aligned to a step of 1, 2, 4, 10 or 20
/// exponents, whichever keeps the labels to `max` or fewer.
pub(crate) fn size_ticks(lo: f64, hi: f64, max: usize) -> Vec<f64> {
    let (e0, e1) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
    for step in [1, 2, 4, 10, 20] {
        let ticks: Vec<f64> = (e0..=e1)
            .filter(|e| e.rem_euclid(step) == 0)
            .map(|e| 2f64.powi(e))
            .collect();
        if ticks.len() <= max {
            return ticks;
        }
    }
    vec![lo, hi]
}

/// A log axis range padded by a quarter decade-ish, never empty.
fn log_range(values: impl Iterator<Item = f64>) -> Option<(f64, f64)> {
    let (mut lo, mut hi) = (f64::INFINITY, 0f64);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !(lo.is_finite() && hi > 0.0) {
        return None;
    }
    if hi / lo < 4.0 {
        // sqrt of each, not of the product: hi·lo overflows near f64::MAX.
        let mid = hi.sqrt() * lo.sqrt();
        (lo, hi) = (mid / 2.0, mid * 2.0);
    }
    let (lo, hi) = (lo / 1.3, hi * 1.3);
    // Values near f64::MAX pad to infinity: no axis rather than an endless one.
    (lo > 0.0 && hi.is_finite()).then_some((lo, hi))
}

/// Refuses an axis that plotters cannot draw in bounded time and memory: it
/// makes tick marks per step (linear) or per decade (log) across the range,
/// so an infinite or empty range asks for endless ones (a 24 GB allocation
/// once, for times near 1e308).
pub(crate) fn check_axis(name: &str, lo: f64, hi: f64, log: bool) -> Result<(), String> {
    let finite = lo.is_finite() && hi.is_finite() && (hi - lo).is_finite();
    if finite && lo < hi && (!log || lo > 0.0) {
        Ok(())
    } else {
        Err(format!("the {name} axis would span {lo:e}..{hi:e}"))
    }
}

/// Sizes between `lo` and `hi`, evenly spaced in log, for model curves.
fn log_samples(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    let (a, b) = (lo.ln(), hi.ln());
    (0..n)
        .map(|i| (a + (b - a) * i as f64 / (n.max(2) - 1) as f64).exp())
        .collect()
}

/// `, 2 ranks, Intel Xeon, 2 cores`: the world size(s) of `ids` and the machine the
/// first results file was measured on, for chart titles (a chart read alone,
/// as a PNG, must say what it measured).
fn setting(ds: &Dataset, ids: &[usize]) -> String {
    let mut worlds: Vec<usize> = ids.iter().map(|&id| ds.series[id].world).collect();
    worlds.sort_unstable();
    worlds.dedup();
    let ranks = match worlds.as_slice() {
        [] => String::new(),
        [w] => format!(", {w} ranks"),
        [lo, .., hi] => format!(", {lo}–{hi} ranks"),
    };
    let host = ds.sources.first().map(|s| &s.manifest["host"]);
    let cpu = host
        .and_then(|h| h["cpu"].as_str())
        .map(short_cpu)
        .unwrap_or_default();
    let cores = host.and_then(|h| h["cores"].as_u64());
    match (cpu.is_empty(), cores) {
        (false, Some(c)) => format!("{ranks}, {cpu}, {c} cores"),
        (false, None) => format!("{ranks}, {cpu}"),
        (true, Some(c)) => format!("{ranks}, {c} cores"),
        (true, None) => ranks,
    }
}

/// `Intel(R) Xeon(R) Processor` → `Intel Xeon`: the model without marks.
fn short_cpu(model: &str) -> String {
    model
        .replace("(R)", "")
        .replace("(TM)", "")
        .split_whitespace()
        .filter(|w| !matches!(*w, "CPU" | "Processor" | "@"))
        .take_while(|w| !w.ends_with("GHz"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn legend_name(ds: &Dataset, id: usize) -> String {
    let s = &ds.series[id];
    if s.peer {
        format!("{} (peer)", s.name)
    } else {
        s.name.clone()
    }
}

/// The most series one chart draws: the fastest by geometric-mean median
/// time (the palette has 10 colours; beyond a dozen lines a chart is noise).
pub const MAX_CHART_SERIES: usize = 12;

/// The residuals chart's y axis stops at ±50 %.
const RESIDUAL_CLIP: f64 = 0.5;

/// `cache → memory (model, 8 MiB)`, prefixed with the series when several
/// series are drawn.
fn break_label(name: Option<&str>, m: &Regimes, k: usize) -> String {
    named(
        name,
        format!(
            "{} (model, {})",
            m.transition(k),
            fmt_bytes(m.regimes[k].from_bytes)
        ),
    )
}

/// A mark's label: `what`, after the series name when the chart has several.
fn named(name: Option<&str>, what: String) -> String {
    match name {
        Some(n) => format!("{n}: {what}"),
        None => what,
    }
}

/// Describe the charts of one collective (latency, residuals for
/// all_reduce, busbw, spread), or none when it has no positive size and time
/// (a barrier-only file).
fn plots_for(
    ds: &Dataset,
    fits: &[SeriesFit],
    collective: Collective,
) -> Option<Vec<(ChartKind, Plot)>> {
    let ids = ds.series_for(collective);
    let usable = |id: usize| {
        ds.points(id, collective)
            .into_iter()
            .filter(|r| r.bytes > 0 && r.median_us > 0.0)
            .collect::<Vec<_>>()
    };
    let mut data: Vec<(usize, Vec<&crate::results::Record>)> = ids
        .iter()
        .map(|&id| (id, usable(id)))
        .filter(|(_, p)| !p.is_empty())
        .collect();
    if data.is_empty() {
        return None;
    }
    // A chart of thousands of lines is unreadable, and drawing it took a
    // minute and 100 MB of page: the fastest few are drawn, the title says
    // how many of how many, and the tables and results file hold the rest.
    let total = data.len();
    if total > MAX_CHART_SERIES {
        let geomean = |pts: &[&crate::results::Record]| {
            pts.iter().map(|r| r.median_us.ln()).sum::<f64>() / pts.len() as f64
        };
        data.sort_by(|a, b| geomean(&a.1).total_cmp(&geomean(&b.1)));
        data.truncate(MAX_CHART_SERIES);
        data.sort_by_key(|(id, _)| *id);
    }
    let shown: Vec<usize> = data.iter().map(|(id, _)| *id).collect();
    let x_range = log_range(
        data.iter()
            .flat_map(|(_, p)| p.iter().map(|r| r.bytes as f64)),
    )?;
    let stroke = |id: usize| {
        if ds.series[id].peer {
            Stroke::Peer
        } else {
            Stroke::Solid
        }
    };

    // Model curves over each series' measured sizes (no extrapolation on
    // the chart: the scale table is where predictions belong), a mark at
    // each break, and the residuals.
    let mut model_lat = Vec::new();
    let mut model_bw = Vec::new();
    let mut marks = Vec::new();
    let mut residuals: Vec<Line> = Vec::new();
    let several = data.len() > 1;
    for (id, pts) in &data {
        let Some(model) = fits
            .iter()
            .find(|f| f.series == *id && f.collective == collective)
            .and_then(|f| f.model.as_ref())
        else {
            continue;
        };
        let (Some(first), Some(last)) = (pts.first(), pts.last()) else {
            continue;
        };
        let (lo, hi) = (first.bytes as f64, last.bytes as f64);
        let mut xs = log_samples(lo, hi, 96);
        // Sample both sides of each break and of the latency step so a
        // jump is drawn as one.
        let edges = model.regimes[1..]
            .iter()
            .map(|r| r.from_bytes)
            .chain(model.step.map(|st| st.from_bytes));
        for x in edges {
            if x > lo && x < hi {
                xs.extend([x * (1.0 - 1e-9), x]);
            }
        }
        xs.sort_by(f64::total_cmp);
        let bus = collective.bus_factor(ds.series[*id].world);
        let lat: Vec<(f64, f64)> = xs.iter().map(|&s| (s, model.predict_us(s))).collect();
        // busbw the model implies: S·bus / t(S), bytes/µs → GB/s.
        let bw: Vec<(f64, f64)> = lat.iter().map(|&(s, t)| (s, s * bus / t * 1e-3)).collect();
        for (v, target) in [(lat, &mut model_lat), (bw, &mut model_bw)] {
            target.push(Line {
                legend: None,
                color: color(*id),
                stroke: Stroke::Model,
                points: v,
                markers: false,
            });
        }
        for k in 1..model.regimes.len() {
            marks.push(Mark {
                x: model.regimes[k].from_bytes,
                color: color(*id),
                label: Some(break_label(
                    several.then(|| ds.series[*id].name.as_str()),
                    model,
                    k,
                )),
            });
        }
        if let Some(st) = model.step {
            marks.push(Mark {
                x: st.from_bytes,
                color: color(*id),
                label: Some(named(
                    several.then(|| ds.series[*id].name.as_str()),
                    format!("latency step (model, {})", fmt_bytes(st.from_bytes)),
                )),
            });
        }
        residuals.push(Line {
            legend: Some(format!(
                "{} (R² {:.3})",
                legend_name(ds, *id),
                model.r_squared
            )),
            color: color(*id),
            stroke: stroke(*id),
            points: pts
                .iter()
                .filter_map(|r| {
                    model
                        .relative_residual(r.bytes as f64, r.median_us)
                        .map(|v| (r.bytes as f64, v))
                })
                .collect(),
            markers: true,
        });
    }

    let median_lines = |y: &dyn Fn(&crate::results::Record) -> f64| -> Vec<Line> {
        data.iter()
            .map(|(id, pts)| Line {
                legend: Some(legend_name(ds, *id)),
                color: color(*id),
                stroke: stroke(*id),
                points: pts.iter().map(|r| (r.bytes as f64, y(r))).collect(),
                markers: true,
            })
            .collect()
    };

    let mut on = setting(ds, &shown);
    if total > data.len() {
        on.push_str(&format!(", fastest {} of {total} series", data.len()));
    }
    let lat_lines = median_lines(&|r| r.median_us);
    let lat_y = log_range(
        lat_lines
            .iter()
            .chain(&model_lat)
            .flat_map(|l| l.points.iter().map(|p| p.1)),
    )?;
    let has_model = !model_lat.is_empty();
    // Two series compared (lab 1's by hand and all_reduce, two backends):
    // from which size one is faster is the chart's point, so mark it.
    let crossing = match lat_lines.as_slice() {
        [a, b] => crate::crossover::crossing(&a.points, &b.points).map(|c| {
            let name = |l: &Line| l.legend.clone().unwrap_or_default();
            let at = fmt_bytes(c.x);
            let note = crate::crossover::note(&name(a), &name(b), &c, &at, Some(true));
            (c.x, note)
        }),
        _ => None,
    };
    let mut lines = lat_lines;
    lines.extend(model_lat);
    let latency = Plot {
        title: format!("{}{on}: median time per call", collective.key()),
        y_desc: "median time (log), lower is better",
        x_range,
        y: YAxis::Log(lat_y.0, lat_y.1),
        bands: Vec::new(),
        lines,
        marks: marks.clone(),
        model_legend: has_model,
        crossing,
    };

    let bw_lines = median_lines(&|r| r.busbw());
    let bw_max = bw_lines
        .iter()
        .chain(&model_bw)
        .flat_map(|l| l.points.iter().map(|p| p.1))
        .filter(|v| v.is_finite())
        .fold(0f64, f64::max);
    let mut lines = bw_lines;
    lines.extend(model_bw);
    let busbw = Plot {
        title: format!("{}{on}: bus bandwidth", collective.key()),
        y_desc: "busbw (GB/s), higher is better",
        x_range,
        y: YAxis::Linear(0.0, if bw_max > 0.0 { bw_max * 1.12 } else { 1.0 }),
        bands: Vec::new(),
        lines,
        // Lines only: small-size busbw hugs the bottom, where labels go, and
        // the latency chart above names every break.
        marks: marks
            .iter()
            .map(|m| Mark {
                label: None,
                ..m.clone()
            })
            .collect(),
        model_legend: has_model,
        crossing: None,
    };

    let bands: Vec<Band> = data
        .iter()
        .map(|(id, pts)| Band {
            color: color(*id),
            points: pts
                .iter()
                .map(|r| (r.bytes as f64, r.min_us.max(r.median_us * 1e-3), r.max_us))
                .collect(),
        })
        .collect();
    let spread_y = log_range(
        bands
            .iter()
            .flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2])),
    )?;
    let spread = Plot {
        title: format!(
            "{}{on}: per-iteration spread (min–max band, median line)",
            collective.key()
        ),
        y_desc: "time per iteration (log), narrower is steadier",
        x_range,
        y: YAxis::Log(spread_y.0, spread_y.1),
        bands,
        lines: median_lines(&|r| r.median_us),
        marks: Vec::new(),
        model_legend: false,
        crossing: None,
    };
    let mut plots = vec![(ChartKind::Latency, latency)];
    if collective == Collective::AllReduce && !residuals.is_empty() {
        // Symmetric around 0, at least ±10 % so a good fit looks flat rather
        // than zoomed-in noise, at most ±50 % so one hopeless series (a
        // bimodal peer at +1000 %) does not flatten the others: points beyond
        // are drawn at the edge, and the title says so.
        let worst = residuals
            .iter()
            .flat_map(|l| l.points.iter().map(|p| p.1.abs()))
            .fold(0.1f64, f64::max);
        let limit = worst.min(RESIDUAL_CLIP);
        let clipped = worst > RESIDUAL_CLIP;
        for l in &mut residuals {
            for p in &mut l.points {
                p.1 = p.1.clamp(-limit, limit);
            }
        }
        let zero = Line {
            legend: None,
            color: RGBColor(120, 120, 120),
            stroke: Stroke::Model,
            points: vec![x_range.0, x_range.1]
                .into_iter()
                .map(|x| (x, 0.0))
                .collect(),
            markers: false,
        };
        let mut lines = residuals;
        lines.push(zero);
        plots.push((
            ChartKind::Residuals,
            Plot {
                title: format!(
                    "{}{on}: model residuals{}",
                    collective.key(),
                    if clipped { ", clipped at ±50 %" } else { "" }
                ),
                y_desc: "(measured − model) / model, 0.1 = 10 %",
                x_range,
                y: YAxis::Linear(-limit * 1.25, limit * 1.25),
                bands: Vec::new(),
                lines,
                marks: marks.clone(),
                model_legend: false,
                crossing: None,
            },
        ));
    }
    plots.push((ChartKind::BusBandwidth, busbw));
    plots.push((ChartKind::Spread, spread));
    Some(plots)
}

fn style(color: RGBColor, stroke: Stroke) -> ShapeStyle {
    let width = if stroke == Stroke::Model { 1 } else { 2 };
    color.stroke_width(width)
}

/// The legend entries of `plot`: its named lines, then the model's dashes.
fn legend_entries(plot: &Plot) -> Vec<LegendEntry> {
    let mut entries: Vec<LegendEntry> = plot
        .lines
        .iter()
        .filter_map(|l| {
            Some(LegendEntry {
                name: l.legend.clone()?,
                swatch: Swatch::Line {
                    color: l.color,
                    width: if l.stroke == Stroke::Model { 1 } else { 2 },
                    dash: match l.stroke {
                        Stroke::Solid => None,
                        Stroke::Peer => Some((9, 5)),
                        Stroke::Model => Some((3, 3)),
                    },
                },
            })
        })
        .collect();
    if plot.model_legend {
        entries.push(LegendEntry {
            name: "regime model (thin dashes)".into(),
            swatch: Swatch::Line {
                color: RGBColor(90, 90, 90),
                width: 1,
                dash: Some((3, 3)),
            },
        });
    }
    entries
}

/// Draw bands, lines, markers and the model's marks on a ready chart (any y
/// axis); the legend is the frame's, outside the plot.
fn draw_content<'a, DB, CT>(chart: &mut ChartContext<'a, DB, CT>, plot: &Plot) -> Result<(), String>
where
    DB: DrawingBackend + 'a,
    CT: CoordTranslate<From = (f64, f64)>,
{
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    for band in &plot.bands {
        let mut outline: Vec<(f64, f64)> = band.points.iter().map(|p| (p.0, p.2)).collect();
        outline.extend(band.points.iter().rev().map(|p| (p.0, p.1)));
        chart
            .draw_series(std::iter::once(Polygon::new(
                outline,
                band.color.mix(0.18).filled(),
            )))
            .map_err(s)?;
    }
    for line in &plot.lines {
        let st = style(line.color, line.stroke);
        match line.stroke {
            Stroke::Solid => chart.draw_series(LineSeries::new(line.points.clone(), st)),
            Stroke::Peer => chart.draw_series(DashedLineSeries::new(line.points.clone(), 9, 5, st)),
            Stroke::Model => {
                chart.draw_series(DashedLineSeries::new(line.points.clone(), 3, 3, st))
            }
        }
        .map_err(s)?;
        if line.markers {
            chart
                .draw_series(
                    line.points
                        .iter()
                        .map(|&p| Circle::new(p, 3, line.color.filled())),
                )
                .map_err(s)?;
        }
    }
    let (y0, y1) = match plot.y {
        YAxis::Log(a, b) | YAxis::Linear(a, b) => (a, b),
    };
    let (x0, x1) = plot.x_range;
    for (i, m) in plot.marks.iter().enumerate() {
        if !(m.x > x0 && m.x < x1) {
            continue;
        }
        let st = m.color.mix(0.8).stroke_width(1);
        chart
            .draw_series(DashedLineSeries::new([(m.x, y0), (m.x, y1)], 6, 4, st))
            .map_err(s)?;
        let Some(label) = &m.label else {
            continue;
        };
        // Labels stack up from the bottom, one row per mark, on a white
        // box so data lines do not cross the text, and run away from the
        // nearer side so they stay inside the plot. Placed in pixels: the
        // stacking must not depend on the y scale.
        let area = chart.plotting_area().strip_coord_spec();
        let (base_x, _) = area.get_base_pixel();
        let (px, _) = chart.as_coord_spec().translate(&(m.x, y0));
        let style = ("sans-serif", 14).into_font().color(&m.color);
        let (w, h) = area.estimate_text_size(label, &style).map_err(s)?;
        let (w, h) = (w as i32, h as i32);
        let (_, height) = area.dim_in_pixel();
        let x_rel = px - base_x;
        let right_half = (m.x / x0).ln() > 0.5 * (x1 / x0).ln();
        let left = if right_half { x_rel - w - 6 } else { x_rel + 6 };
        let top = height as i32 - 8 - (h + 6) * (i as i32 + 1);
        area.draw(&Rectangle::new(
            [(left - 3, top - 2), (left + w + 3, top + h + 2)],
            WHITE.mix(0.85).filled(),
        ))
        .map_err(s)?;
        area.draw(&Text::new(label.clone(), (left, top), style))
            .map_err(s)?;
    }
    Ok(())
}

/// The x axis title of every size chart.
const X_TITLE: &str = "message size S (bytes)";

/// A size chart's frame at a size, with its ticks and the crossing's column:
/// what is drawn, and what the tests check.
struct PlotFrame {
    legend: Vec<LegendEntry>,
    y_labels: Vec<String>,
    layout: Layout,
    x: Vec<(Tick, i32)>,
    y: Vec<(Tick, i32)>,
    crossing_px: Option<i32>,
}

impl PlotFrame {
    fn spec<'a>(&'a self, plot: &'a Plot) -> Spec<'a> {
        Spec {
            title: &plot.title,
            x_title: X_TITLE,
            y_title: plot.y_desc,
            legend: &self.legend,
            y_labels: &self.y_labels,
            x_labels: XLabels::Numeric,
            note_row: plot.crossing.is_some(),
        }
    }
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

fn plot_frame(plot: &Plot, size: (u32, u32)) -> Result<PlotFrame, String> {
    let (x0, x1) = plot.x_range;
    let y_candidates = match plot.y {
        YAxis::Log(y0, y1) => frame::candidates(&LogCoord::from((y0..y1).log_scale())),
        YAxis::Linear(y0, y1) => frame::candidates(&RangedCoordf64::from(y0..y1)),
    };
    let fmt_y = |v: f64| match plot.y {
        YAxis::Log(..) => fmt_us(v),
        YAxis::Linear(..) => sig3(v),
    };
    let legend = legend_entries(plot);
    let y_labels: Vec<String> = y_candidates
        .first()
        .map(|v| v.iter().map(|&v| fmt_y(v)).collect())
        .unwrap_or_default();
    let spec = Spec {
        title: &plot.title,
        x_title: X_TITLE,
        y_title: plot.y_desc,
        legend: &legend,
        y_labels: &y_labels,
        x_labels: XLabels::Numeric,
        note_row: plot.crossing.is_some(),
    };
    let layout = frame::layout(&spec, size)?;
    let x_axis = LogCoord::from((x0..x1).log_scale());
    let px = |v: f64| frame::x_pixel(&x_axis, &layout, v);
    let mut x_candidates: Vec<Vec<f64>> = (2..=12).rev().map(|n| size_ticks(x0, x1, n)).collect();
    x_candidates.dedup();
    let x = placed(frame::x_ticks(&layout, &x_candidates, px, axis_bytes), px);
    let y = match plot.y {
        YAxis::Log(y0, y1) => {
            let axis = LogCoord::from((y0..y1).log_scale());
            let py = |v: f64| frame::y_pixel(&axis, &layout, v);
            placed(frame::y_ticks(&layout, &y_candidates, py, fmt_y), py)
        }
        YAxis::Linear(y0, y1) => {
            let axis = RangedCoordf64::from(y0..y1);
            let py = |v: f64| frame::y_pixel(&axis, &layout, v);
            placed(frame::y_ticks(&layout, &y_candidates, py, fmt_y), py)
        }
    };
    let crossing_px = plot.crossing.as_ref().map(|(x, _)| px(*x));
    Ok(PlotFrame {
        legend,
        y_labels,
        layout,
        x,
        y,
        crossing_px,
    })
}

fn draw_plot<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, plot: &Plot) -> Result<(), String> {
    let s = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(s)?;
    let (x0, x1) = plot.x_range;
    check_axis("x", x0, x1, true)?;
    match plot.y {
        YAxis::Log(y0, y1) => check_axis("y", y0, y1, true)?,
        YAxis::Linear(y0, y1) => check_axis("y", y0, y1, false)?,
    }
    let pf = plot_frame(plot, root.dim_in_pixel())?;
    let layout = &pf.layout;
    let p = layout.plot;
    let (w, h) = layout.size;
    let area = root.margin(p.top, h - p.bottom, p.left, w - p.right);
    // Grid under the data, the frame and the crossing's rule and note last.
    frame::draw_grid(root, layout, &pf.x, &pf.y)?;
    let x_spec = (x0..x1).log_scale();
    match plot.y {
        YAxis::Log(y0, y1) => {
            let mut chart = ChartBuilder::on(&area)
                .build_cartesian_2d(x_spec, (y0..y1).log_scale())
                .map_err(s)?;
            draw_content(&mut chart, plot)?;
        }
        YAxis::Linear(y0, y1) => {
            let mut chart = ChartBuilder::on(&area)
                .build_cartesian_2d(x_spec, y0..y1)
                .map_err(s)?;
            draw_content(&mut chart, plot)?;
        }
    }
    if let (Some(x), Some((_, note))) = (pf.crossing_px, &plot.crossing) {
        frame::draw_crossing(root, layout, x, note)?;
    }
    frame::draw_frame(root, layout, &pf.spec(plot), &pf.x, &pf.y, &[])?;
    root.present().map_err(s)
}

/// Merge runs of consecutive `<polyline>`s that share every attribute into
/// one `<path>`: plotters writes each dash of a dashed line as its own
/// element, which made one chart ~130 KB and the page with nine of them
/// ~1 MB. Lines that do not look like plotters' polylines pass unchanged.
fn compact_svg(svg: &str) -> String {
    const HEAD: &str = "<polyline ";
    const POINTS: &str = " points=\"";
    let split = |line: &str| -> Option<(String, String)> {
        let rest = line.strip_prefix(HEAD)?.strip_suffix("\"/>")?;
        let at = rest.find(POINTS)?;
        let points = &rest[at + POINTS.len()..];
        // Only digits, signs, dots, commas and spaces: safe to move into `d`.
        if !points
            .chars()
            .all(|c| c.is_ascii_digit() || " ,.-".contains(c))
        {
            return None;
        }
        Some((rest[..at].to_string(), points.trim().to_string()))
    };
    let mut out = String::with_capacity(svg.len() / 2);
    let mut run: Option<(String, Vec<String>)> = None;
    let flush = |run: &mut Option<(String, Vec<String>)>, out: &mut String| {
        if let Some((attrs, parts)) = run.take() {
            out.push_str(&format!("<path {attrs} d=\"M{}\"/>\n", parts.join(" M")));
        }
    };
    for line in svg.lines() {
        match split(line) {
            Some((attrs, points)) => match &mut run {
                Some((a, parts)) if *a == attrs => parts.push(points),
                _ => {
                    flush(&mut run, &mut out);
                    run = Some((attrs, vec![points]));
                }
            },
            None => {
                flush(&mut run, &mut out);
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    flush(&mut run, &mut out);
    out
}

fn encode_png(rgb: &[u8], (w, h): (u32, u32), stem: &str) -> Result<Vec<u8>> {
    let png_err = |source| Error::Png {
        chart: stem.to_string(),
        source,
    };
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, w, h);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    let mut writer = encoder.write_header().map_err(png_err)?;
    writer.write_image_data(rgb).map_err(png_err)?;
    writer.finish().map_err(png_err)?;
    Ok(out)
}

/// Something drawn twice, once per backend (SVG and bitmap).
pub(crate) trait Drawable {
    /// Draws the whole chart on `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

impl Drawable for Plot {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), String> {
        draw_plot(root, self)
    }
}

/// Draws `what` as SVG and PNG into a [`Chart`] called `stem`.
pub(crate) fn render(
    what: &impl Drawable,
    stem: String,
    title: &str,
    kind: ChartKind,
    collective: Option<Collective>,
    size: (u32, u32),
) -> Result<Chart> {
    let chart_err = |reason: String| Error::Chart {
        chart: stem.clone(),
        reason,
    };
    // plotters asserts on some inputs instead of returning an error; a
    // chart it cannot draw must cost that chart, not the whole report.
    let guarded = |draw: &mut dyn FnMut() -> Result<(), String>| {
        catch_unwind(AssertUnwindSafe(draw)).unwrap_or_else(|panic| {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown cause".into());
            Err(format!("the plotting library panicked: {what}"))
        })
    };
    let mut svg = String::new();
    guarded(&mut || {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        what.draw(&root)
    })
    .map_err(chart_err)?;
    let svg = compact_svg(&svg);
    let mut rgb = vec![0u8; size.0 as usize * size.1 as usize * 3];
    guarded(&mut || {
        let root = BitMapBackend::with_buffer(&mut rgb, size).into_drawing_area();
        what.draw(&root)
    })
    .map_err(chart_err)?;
    let png = encode_png(&rgb, size, &stem)?;
    Ok(Chart {
        kind,
        collective,
        title: title.to_owned(),
        stem,
        svg,
        png,
        size,
    })
}

/// Refuses chart sizes that would not draw (too small: the legend eats the
/// plot) or could exhaust memory (a typo'd PNG size), and loads the font.
pub(crate) fn prepare(opts: &ChartOptions) -> Result<()> {
    if !(320..=8192).contains(&opts.width) || !(200..=8192).contains(&opts.height) {
        return Err(Error::Chart {
            chart: "all".into(),
            reason: format!(
                "chart size {}x{} outside 320..=8192 x 200..=8192",
                opts.width, opts.height
            ),
        });
    }
    use_font(opts.font.as_deref())
}

/// Draw every chart for every collective with data: latency (with the model
/// curves and their breaks), residuals (all_reduce), bus bandwidth and
/// spread. Peer series are dashed.
///
/// Fails only on bad options (chart size, font file); a chart that cannot be
/// drawn is listed in [`Drawn::failed`] and the others are still drawn.
pub fn render_charts(ds: &Dataset, fits: &[SeriesFit], opts: &ChartOptions) -> Result<Drawn> {
    prepare(opts)?;
    // Without the models, no curve, break or residual is drawn.
    let fits = if opts.models { fits } else { &[] };
    let mut drawn = Drawn::default();
    for collective in ds.collectives() {
        if let Some(plots) = plots_for(ds, fits, collective) {
            for (kind, plot) in &plots {
                let kind = *kind;
                let stem = format!("{}-{}", kind.prefix(), collective.key());
                let size = (opts.width, opts.height);
                match render(
                    plot,
                    stem.clone(),
                    &plot.title,
                    kind,
                    Some(collective),
                    size,
                ) {
                    Ok(chart) => drawn.charts.push(chart),
                    Err(e) => drawn.failed.push(ChartFailure::from_error(&stem, &e)),
                }
            }
        }
    }
    Ok(drawn)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::fit_dataset;
    use crate::testing;

    /// all_reduce on 2 ranks: 20 GB/s in cache, 5 GB/s from memory,
    /// continuous at 3 MiB, α = 1 µs; and a one-regime broadcast.
    fn two_regime_dataset() -> Dataset {
        let rec = |collective, bytes: u64, median_us: f64| {
            testing::record("shm", collective, 2, bytes, median_us)
        };
        let c = 3.0 * 1048576.0;
        let mut records = Vec::new();
        for k in 3..=26u32 {
            let s = f64::from(1u32 << k);
            let t = 1.0 + s.min(c) / 20_000.0 + (s - c).max(0.0) / 5_000.0;
            records.push(rec(Collective::AllReduce, 1 << k, t));
            records.push(rec(Collective::Broadcast, 1 << k, 1.0 + s / 9_000.0));
        }
        testing::dataset(records)
    }

    #[test]
    fn the_break_is_marked_and_residuals_are_drawn_for_all_reduce_only() {
        let ds = two_regime_dataset();
        let fits = fit_dataset(&ds);
        let charts = render_charts(&ds, &fits, &ChartOptions::default())
            .unwrap()
            .charts;
        let stems: Vec<&str> = charts.iter().map(|c| c.stem.as_str()).collect();
        assert_eq!(
            stems,
            [
                "latency-all_reduce",
                "residuals-all_reduce",
                "busbw-all_reduce",
                "spread-all_reduce",
                "latency-broadcast",
                "busbw-broadcast",
                "spread-broadcast"
            ]
        );
        let latency = &charts[0].svg;
        // One series: the label needs no series name.
        assert!(
            latency.contains("cache → memory (model, 3 MiB)"),
            "no break label"
        );
        assert!(latency.contains("regime model (thin dashes)"));
        let residuals = &charts[1];
        assert_eq!(residuals.kind, ChartKind::Residuals);
        assert!(residuals.svg.contains("(R² 1.000)"), "legend lacks R²");
        assert!(residuals.svg.contains("cache → memory (model, 3 MiB)"));
        assert!(residuals.png.starts_with(b"\x89PNG") && residuals.png.len() > 5000);
        // The broadcast is one regime: no break to mark.
        assert!(!charts[4].svg.contains("(model,"));
    }

    #[test]
    fn compact_svg_merges_equal_polylines_only() {
        let svg = "<svg>\n\
            <polyline fill=\"none\" stroke=\"#000\" points=\"1,2 3,4 \"/>\n\
            <polyline fill=\"none\" stroke=\"#000\" points=\"5,6 7,8 \"/>\n\
            <polyline fill=\"none\" stroke=\"#F00\" points=\"9,9 1,1 \"/>\n\
            <text x=\"1\">\n&lt;a&gt;\n</text>\n</svg>\n";
        let out = compact_svg(svg);
        assert_eq!(
            out,
            "<svg>\n\
             <path fill=\"none\" stroke=\"#000\" d=\"M1,2 3,4 M5,6 7,8\"/>\n\
             <path fill=\"none\" stroke=\"#F00\" d=\"M9,9 1,1\"/>\n\
             <text x=\"1\">\n&lt;a&gt;\n</text>\n</svg>\n"
        );
    }

    #[test]
    fn size_ticks_stay_few_and_on_powers_of_two() {
        let t = size_ticks(5.0, 1e8, 10);
        assert!(t.len() <= 10 && t.len() >= 4, "{t:?}");
        assert!(t.iter().all(|v| v.log2().fract() == 0.0));
        assert_eq!(size_ticks(8.0, 64.0, 10), [8.0, 16.0, 32.0, 64.0]);
        assert!(size_ticks(5.0, 1e8, 3).len() <= 3);
    }

    #[test]
    fn log_range_pads_and_widens_a_single_value() {
        let (lo, hi) = log_range([5.0, 5.0].into_iter()).unwrap();
        assert!(lo < 5.0 && hi > 5.0 && hi / lo >= 4.0);
        assert!(log_range([0.0, f64::NAN].into_iter()).is_none());
    }

    #[test]
    fn log_range_near_the_largest_float_is_none_not_infinite() {
        for v in [[1e308, 1.7e308], [1e308, 1e308], [1.7e308, 1.7e308]] {
            assert!(log_range(v.into_iter()).is_none(), "{v:?}");
        }
        let (lo, hi) = log_range([1e3, 1e15].into_iter()).unwrap();
        assert!(lo < 1e3 && hi > 1e15 && hi.is_finite());
        assert!(check_axis("y", 1.0, f64::INFINITY, true).is_err());
        assert!(check_axis("y", -1e308, 1e308, false).is_err());
        assert!(check_axis("y", 0.0, 1.0, true).is_err());
        assert!(check_axis("y", 1e-300, 1e300, true).is_ok());
    }

    #[test]
    fn cpu_models_lose_their_marks_and_clock() {
        assert_eq!(short_cpu("Intel(R) Xeon(R) Processor"), "Intel Xeon");
        assert_eq!(
            short_cpu("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz"),
            "Intel Core i7-8700"
        );
        assert_eq!(
            short_cpu("AMD EPYC 7763 64-Core Processor"),
            "AMD EPYC 7763 64-Core"
        );
    }

    #[test]
    fn the_default_font_is_the_embedded_one_and_reads_no_file() {
        assert_eq!(ChartOptions::default().font, None);
        // A TrueType file starts with version 1.0; ~740 KiB is DejaVu Sans.
        assert!(EMBEDDED_FONT.starts_with(&[0, 1, 0, 0]) && EMBEDDED_FONT.len() > 500_000);
        use_font(None).unwrap();
        let ds = two_regime_dataset();
        let drawn = render_charts(&ds, &fit_dataset(&ds), &ChartOptions::default()).unwrap();
        assert!(drawn.failed.is_empty(), "{:?}", drawn.failed);
        // Text is drawn as text in the SVG and as glyphs in the PNG.
        assert!(drawn.charts[0].svg.contains("median time per call"));
    }

    /// Lab 1's and lab 6's latency charts carried the report's "regime
    /// model" curves and break labels, unexplained and unreadable in the book.
    #[test]
    fn lab_charts_carried_the_reports_regime_model_annotations() {
        let ds = two_regime_dataset();
        let fits = fit_dataset(&ds);
        let plain = ChartOptions {
            models: false,
            ..ChartOptions::default()
        };
        let drawn = render_charts(&ds, &fits, &plain).unwrap();
        let latency = drawn
            .charts
            .iter()
            .find(|c| c.stem == "latency-all_reduce")
            .expect("a latency chart");
        assert!(!latency.svg.contains("regime model"), "model legend drawn");
        assert!(
            !drawn.charts.iter().any(|c| c.stem.starts_with("residual")),
            "a residuals chart without a model"
        );
        let with = render_charts(&ds, &fits, &ChartOptions::default()).unwrap();
        assert!(with.charts.iter().any(|c| c.svg.contains("regime model")));
    }

    #[test]
    fn a_missing_font_file_is_an_error_naming_it() {
        let opts = ChartOptions {
            font: Some("/nonexistent/font.ttf".into()),
            ..ChartOptions::default()
        };
        let ds = two_regime_dataset();
        let err = render_charts(&ds, &fit_dataset(&ds), &opts).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("/nonexistent/font.ttf") && msg.contains("built-in DejaVu Sans"),
            "{msg}"
        );
    }

    #[test]
    fn a_file_that_is_not_a_font_is_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fake.ttf");
        std::fs::write(&p, b"not a font").unwrap();
        let err = use_font(Some(&p)).unwrap_err();
        assert!(err.to_string().contains("not a TrueType"), "{err}");
    }

    /// Lab 1's latency chart, drawn at the book's width (920 px): its
    /// legend sat on the data (upper left, where small sizes are), and the
    /// two curves' crossing was left to the reader.
    #[test]
    fn lab_one_latency_chart_had_its_legend_on_the_data_and_no_crossing() {
        let rec =
            |label, bytes: u64, t: f64| testing::record(label, Collective::AllReduce, 2, bytes, t);
        let mut records = Vec::new();
        for k in 3..=23u32 {
            let s = f64::from(1u32 << k);
            // By hand: fewer steps (α 20 µs) but twice the bytes per step.
            records.push(rec("by hand", 1 << k, 20.0 + s / 1000.0));
            records.push(rec("all_reduce (ring)", 1 << k, 60.0 + s / 2000.0));
        }
        let ds = testing::dataset(records);
        let opts = ChartOptions {
            width: 920,
            height: 540,
            models: false,
            ..ChartOptions::default()
        };
        prepare(&opts).unwrap();
        let plots = plots_for(&ds, &[], Collective::AllReduce).unwrap();
        let (_, latency) = &plots[0];
        let (x, note) = latency.crossing.clone().expect("the curves cross");
        // 20 + S/1000 = 60 + S/2000 at S = 80 000 B.
        assert!((60e3..100e3).contains(&x), "{x}");
        assert!(
            note.starts_with("all_reduce (ring) overtakes by hand at "),
            "{note}"
        );
        for (kind, plot) in &plots {
            let pf = plot_frame(plot, (opts.width, opts.height)).unwrap();
            let l = &pf.layout;
            assert!(!l.legend.is_empty(), "{kind:?}: no legend");
            for e in &l.legend {
                assert!(
                    !e.intersects(&l.plot),
                    "{kind:?}: legend {e:?} on {:?}",
                    l.plot
                );
            }
            for ticks in [&pf.x, &pf.y] {
                assert!(ticks.len() >= 2, "{kind:?}: {ticks:?}");
                for (i, (a, _)) in ticks.iter().enumerate() {
                    for (b, _) in &ticks[i + 1..] {
                        assert!(!a.rect.intersects(&b.rect), "{kind:?}: {a:?} and {b:?}");
                    }
                }
            }
        }
        let latency_chart = render_charts(&ds, &[], &opts).unwrap().charts.remove(0);
        assert!(
            latency_chart.svg.contains(&note),
            "the crossing's note is not drawn"
        );
        // One series, or curves that do not cross: nothing to mark.
        let one = testing::dataset(vec![rec("by hand", 8, 1.0), rec("by hand", 1 << 20, 9.0)]);
        let plots = plots_for(&one, &[], Collective::AllReduce).unwrap();
        assert!(plots[0].1.crossing.is_none());
    }

    #[test]
    fn a_panicking_chart_is_a_failure_naming_it() {
        struct Panics;
        impl Drawable for Panics {
            fn draw<DB: DrawingBackend>(&self, _: &DrawingArea<DB, Shift>) -> Result<(), String> {
                panic!("boom")
            }
        }
        let err = render(
            &Panics,
            "x-chart".into(),
            "X",
            ChartKind::Figure,
            None,
            (320, 200),
        )
        .unwrap_err();
        let failure = ChartFailure::from_error("x-chart", &err);
        assert_eq!(failure.chart, "x-chart");
        assert!(failure.reason.contains("boom"), "{failure}");
    }
}
