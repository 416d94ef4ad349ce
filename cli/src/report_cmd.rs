//! `ringside report`: results files to charts, a cost model and index.html.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;

/// Merge results files (`ringside bench --json`) into one HTML report.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Results files (format ringside-results/1); labels that repeat across
    /// files are told apart by file name.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Output folder for index.html and the SVG/PNG charts
    /// [default: report/ next to the first FILE].
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub out: Option<PathBuf>,
    /// TTF/OTF file for chart text [default: the built-in DejaVu Sans, no
    /// font needs to be installed].
    #[arg(long, value_name = "TTF")]
    pub font: Option<PathBuf>,
}

/// Write the report, print the summary and where the page is; exit code 0.
pub fn run(args: ReportArgs) -> anyhow::Result<i32> {
    let out = match args.out {
        Some(dir) => dir,
        // `required = true` guarantees a first file; the fallback only keeps
        // this free of an unwrap.
        None => args
            .files
            .first()
            .map(|f| reports::default_out_dir(f))
            .unwrap_or_else(|| PathBuf::from("report")),
    };
    let mut opts = reports::ReportOptions::new(&out);
    opts.charts.font = args.font;
    // Only a failed write is about the output folder: a bad input names its
    // file itself (it was once reported as "cannot write the report into …").
    let report = match reports::write_report(&args.files, &opts) {
        Err(e @ reports::Error::Write { .. }) => {
            return Err(e)
                .with_context(|| format!("cannot write the report into {}", out.display()));
        }
        other => other?,
    };
    print!("{}", report.summary);
    println!(
        "wrote {} ({} charts as SVG and PNG beside it)",
        report.index.display(),
        report.charts.len()
    );
    Ok(0)
}
