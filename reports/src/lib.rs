//! Benchmark results (`ringside-results/1` files) to charts, a cost model
//! (α plus a bandwidth per size regime, the α–β model as its baseline),
//! scale predictions and a self-contained HTML report.
//!
//! The pipeline, each step usable on its own:
//! [`Dataset::load`] → [`fit_dataset`] → [`summarize`] / [`link_models`] →
//! [`scale_predictions`] → [`render_charts`] → [`render_html`];
//! [`write_report`] runs all of it and writes the files.
#![deny(missing_docs)]

mod charts;
mod crossover;
mod dataset;
mod error;
mod figure;
mod fit;
mod frame;
mod html;
mod predict;
mod results;
mod summary;
#[cfg(test)]
mod testing;
mod units;

use std::path::{Path, PathBuf};

pub use charts::{
    Chart, ChartFailure, ChartKind, ChartOptions, Drawn, EMBEDDED_FONT, MAX_CHART_SERIES,
    render_charts,
};
pub use dataset::{Dataset, Entry, MAX_TIME_US, Series, Source};
pub use error::{Error, Result};
pub use figure::render_figure;
pub use fit::{
    AlphaBeta, Crossover, Fit, Join, LatencyStep, MAX_REGIMES, MIN_SIZES_AFTER_BREAK,
    MIN_SIZES_FIRST, OneRegime, PARALLEL_SLOPES, PLATEAU_FACTOR, Pinned, Reduction, Regime,
    Regimes, SeriesFit, Side, fit_alpha_beta, fit_dataset, fit_regimes, fits_cross, lines_cross,
    predict_crossover,
};
pub use html::{MAX_TABLE_ROWS, Page, escape_html, render_html};
pub use predict::{
    AllReduceAlgorithm, LinkModel, LinkRegime, LinkSource, SCALE_RANKS, SCALE_SIZES, ScaleRow,
    link_models, scale_predictions,
};
pub use results::{Collective, FORMAT, Record, ResultsFile, parse_results, read_results};
pub use summary::{RangeBest, SizeRange, Summary, summarize};

/// What to write and how.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportOptions {
    /// Output folder (created if missing; files in it are overwritten).
    pub out_dir: PathBuf,
    /// Chart size and font.
    pub charts: ChartOptions,
    /// Message sizes for the scale predictions.
    pub scale_sizes: Vec<u64>,
    /// Rank counts for the scale predictions.
    pub scale_ranks: Vec<usize>,
}

impl ReportOptions {
    /// Defaults for everything but the output folder.
    pub fn new(out_dir: impl Into<PathBuf>) -> Self {
        ReportOptions {
            out_dir: out_dir.into(),
            charts: ChartOptions::default(),
            scale_sizes: SCALE_SIZES.to_vec(),
            scale_ranks: SCALE_RANKS.to_vec(),
        }
    }
}

/// The default output folder: `report/` next to the first input.
pub fn default_out_dir(first_input: &Path) -> PathBuf {
    match first_input.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.join("report"),
        _ => PathBuf::from("report"),
    }
}

/// What [`write_report`] wrote.
#[derive(Debug, Clone)]
pub struct Report {
    /// The page.
    pub index: PathBuf,
    /// Every file written (index.html first, then SVG/PNG pairs).
    pub files: Vec<PathBuf>,
    /// Chart file stems, in page order.
    pub charts: Vec<String>,
    /// The one-screen summary.
    pub summary: Summary,
}

fn write(path: PathBuf, bytes: &[u8], files: &mut Vec<PathBuf>) -> Result<()> {
    std::fs::write(&path, bytes).map_err(|source| Error::Write {
        path: path.clone(),
        source,
    })?;
    files.push(path);
    Ok(())
}

/// Read `inputs`, fit, predict, draw and write `index.html` plus one SVG and
/// one PNG per chart into `opts.out_dir`.
///
/// Everything is computed before the first file is written, so a bad input
/// or a font file that cannot be used leaves an earlier report untouched.
/// A chart that cannot be drawn does not fail the report: the others are
/// written, and the page and [`Summary::charts_not_drawn`] say which one is
/// missing and why (the inputs, a lab's finished measurement, are never
/// touched).
pub fn write_report<P: AsRef<Path>>(inputs: &[P], opts: &ReportOptions) -> Result<Report> {
    let ds = Dataset::load(inputs)?;
    let fits = fit_dataset(&ds);
    let mut summary = summarize(&ds, &fits);
    let links = link_models(&fits);
    let scale = scale_predictions(&links, &opts.scale_sizes, &opts.scale_ranks);
    // Bad options (size, font file) fail the whole report, up front.
    charts::prepare(&opts.charts)?;
    // A lab's own figures first: they are what its run is about.
    let mut charts = Vec::new();
    for f in &ds.figures {
        match render_figure(f, &opts.charts) {
            Ok(c) => charts.push(c),
            Err(e) => summary
                .charts_not_drawn
                .push(ChartFailure::from_error(&f.name, &e)),
        }
    }
    let drawn = render_charts(&ds, &fits, &opts.charts)?;
    charts.extend(drawn.charts);
    summary.charts_not_drawn.extend(drawn.failed);
    let html = render_html(&Page {
        dataset: &ds,
        fits: &fits,
        summary: &summary,
        charts: &charts,
        links: &links,
        scale: &scale,
    });

    std::fs::create_dir_all(&opts.out_dir).map_err(|source| Error::Write {
        path: opts.out_dir.clone(),
        source,
    })?;
    let mut files = Vec::with_capacity(1 + 2 * charts.len());
    let index = opts.out_dir.join("index.html");
    write(index.clone(), html.as_bytes(), &mut files)?;
    for c in &charts {
        write(
            opts.out_dir.join(format!("{}.svg", c.stem)),
            c.svg.as_bytes(),
            &mut files,
        )?;
        write(
            opts.out_dir.join(format!("{}.png", c.stem)),
            &c.png,
            &mut files,
        )?;
    }
    Ok(Report {
        index,
        files,
        charts: charts.iter().map(|c| c.stem.clone()).collect(),
        summary,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing;

    #[test]
    fn default_out_dir_is_next_to_the_first_input() {
        assert_eq!(
            default_out_dir(Path::new("results/2026/bench.json")),
            PathBuf::from("results/2026/report")
        );
        assert_eq!(
            default_out_dir(Path::new("bench.json")),
            PathBuf::from("report")
        );
    }

    /// `labels` labels × 16 sizes of all_reduce, each label a little slower.
    fn many_labels(labels: usize) -> ResultsFile {
        let mut records = Vec::with_capacity(labels * 16);
        for l in 0..labels {
            for k in 3..19 {
                let bytes = 1u64 << k;
                let t = 2.0 + l as f64 * 0.01 + bytes as f64 / 5e3;
                let label = format!("label{l:05}");
                records.push(testing::record(&label, Collective::AllReduce, 2, bytes, t));
            }
        }
        testing::file(records)
    }

    #[test]
    fn many_labels_keep_the_page_small() {
        // 300 labels, not issue 25's 6,250, so the debug-build test
        // stays quick; the bounds do not grow with the labels.
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("results.json");
        std::fs::write(&input, serde_json::to_vec(&many_labels(300)).unwrap()).unwrap();
        let report = write_report(&[&input], &ReportOptions::new(dir.path().join("r"))).unwrap();
        let total: u64 = report
            .files
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum();
        let page = std::fs::read_to_string(&report.index).unwrap();
        assert!(page.len() < 2_000_000, "page is {} bytes", page.len());
        assert!(total < 6_000_000, "report is {total} bytes");
        assert!(page.contains("all_reduce: showing 12 of 300 series"));
        assert!(page.contains("Showing the first 500 of 4800 rows"));
        let latency = std::fs::read_to_string(dir.path().join("r/latency-all_reduce.svg")).unwrap();
        assert!(latency.contains("fastest 12 of 300 series"));
        // The fastest labels are the first ones; label00012 is the 13th.
        assert!(latency.contains("label00011") && !latency.contains("label00012"));
        let text = report.summary.to_string();
        assert!(text.lines().count() < 40, "{text}");
    }
}
