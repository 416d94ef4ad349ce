//! Times [`reports::write_report`] on results files, step by step:
//! `cargo run --release -p reports --example time_report -- FILE... [-o DIR]`
//! (issue 25 measured 100k records of 6,250 labels with it).

use std::time::Instant;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let out = match args.iter().position(|a| a == "-o") {
        Some(i) if i + 1 < args.len() => {
            let dir = args.remove(i + 1);
            args.remove(i);
            dir
        }
        _ => std::env::temp_dir()
            .join("ringside-time-report")
            .display()
            .to_string(),
    };
    if args.is_empty() {
        return Err("usage: time_report FILE... [-o DIR]".into());
    }
    let start = Instant::now();
    let ds = reports::Dataset::load(&args)?;
    let loaded = start.elapsed();
    let fits = reports::fit_dataset(&ds);
    let fitted = start.elapsed();
    let report = reports::write_report(&args, &reports::ReportOptions::new(&out))?;
    let total = start.elapsed();
    let page = std::fs::metadata(&report.index)?.len();
    println!(
        "{} records, {} series: load {:.2} s, fit {:.2} s ({} fits); whole report {:.2} s \
         (load and fit again), page {:.2} MB, {} charts",
        ds.entries.len(),
        ds.series.len(),
        loaded.as_secs_f64(),
        (fitted - loaded).as_secs_f64(),
        fits.len(),
        (total - fitted).as_secs_f64(),
        page as f64 / 1e6,
        report.charts.len()
    );
    Ok(())
}
