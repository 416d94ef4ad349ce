//! A report draws on a machine with no font installed (GPU nodes and slim
//! cluster images have none; issue 26): the test re-runs itself in a private
//! mount namespace with an empty tmpfs over `/usr/share/fonts`.
//!
//! Needs root (or a user namespace) for `unshare -m`; where that is refused
//! it says "skipped: <reason>" on stderr instead of passing quietly.

use std::path::Path;
use std::process::Command;

use reports::{ReportOptions, write_report};

/// Set in the re-executed child, where the fonts are hidden.
const HIDDEN: &str = "RINGSIDE_TEST_FONTS_HIDDEN";
const FONTS: &str = "/usr/share/fonts";

fn results() -> serde_json::Value {
    let mut records = Vec::new();
    for k in 3..=20u32 {
        let bytes = 1u64 << k;
        let median = 5.0 + bytes as f64 / 4e3;
        records.push(serde_json::json!({
            "label": "reference-shm", "backend": "reference", "algo": "auto", "peer": false,
            "collective": "all_reduce", "world": 2, "bytes": bytes, "count": bytes / 4,
            "dtype": "f32", "op": "sum", "root": -1, "in_place": false, "iters": 10,
            "min_us": median * 0.9, "median_us": median, "max_us": median * 1.2, "wrong": 0
        }));
    }
    serde_json::json!({
        "format": "ringside-results/1",
        "manifest": {},
        "records": records,
        "figures": [{
            "name": "phases", "title": "Step phases", "kind": "stacked_bars",
            "x_label": "", "y_label": "ms", "categories": ["cpu"],
            "series": [{"name": "forward", "points": [[0.0, 3.0]]}]
        }]
    })
}

/// The report, every chart drawn, with whatever fonts this process sees.
fn report_draws_every_chart() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("results.json");
    std::fs::write(&input, serde_json::to_vec(&results()).unwrap()).unwrap();
    let report = write_report(&[&input], &ReportOptions::new(dir.path().join("report"))).unwrap();
    assert!(
        report.summary.charts_not_drawn.is_empty(),
        "{:?}",
        report.summary.charts_not_drawn
    );
    // The lab's figure plus all_reduce's latency, residuals, busbw, spread.
    assert_eq!(report.charts.len(), 5, "{:?}", report.charts);
    for f in &report.files {
        assert!(std::fs::metadata(f).unwrap().len() > 500, "{}", f.display());
    }
}

#[test]
fn report_draws_with_system_fonts_hidden() {
    if std::env::var_os(HIDDEN).is_some() {
        // The child: the tmpfs must really hide the fonts, or this proves nothing.
        let entries = std::fs::read_dir(FONTS).unwrap().count();
        assert_eq!(entries, 0, "{FONTS} is not hidden");
        report_draws_every_chart();
        return;
    }
    if !Path::new(FONTS).exists() {
        // Already a machine without system fonts: the real case, in process.
        report_draws_every_chart();
        return;
    }
    let mount = format!("mount -t tmpfs none {FONTS}");
    let probe = Command::new("unshare")
        .args(["-m", "sh", "-c", &mount])
        .output();
    match probe {
        Ok(out) if out.status.success() => {}
        Ok(out) => {
            eprintln!(
                "skipped: cannot hide {FONTS} (`unshare -m` + `{mount}` failed: {}); \
                 run the suite as root to check charts draw without system fonts",
                String::from_utf8_lossy(&out.stderr).trim()
            );
            return;
        }
        Err(e) => {
            eprintln!("skipped: cannot run `unshare` ({e}) to hide {FONTS}");
            return;
        }
    }
    let me = std::env::current_exe().unwrap();
    // `$0` is the test binary, the rest its arguments: this test only.
    let out = Command::new("unshare")
        .args(["-m", "sh", "-c", &format!("{mount} && exec \"$0\" \"$@\"")])
        .arg(&me)
        .args([
            "--exact",
            "report_draws_with_system_fonts_hidden",
            "--nocapture",
        ])
        .env(HIDDEN, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "with {FONTS} hidden the report failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
}
