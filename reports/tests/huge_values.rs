//! A results file with times of 1e200–1e308 µs once made `ringside report`
//! allocate 24 GB and be killed (issue 25): a chart's log axis padded to
//! infinity and plotters asked for endless tick marks. The report must now
//! refuse such a file, naming the record, and draw the largest times it
//! accepts, quickly and in bounded memory: the test runs both in a child
//! limited to 2 GiB of address space.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reports::{ReportOptions, write_report};

/// Set in the re-executed child, which runs under `ulimit -v`.
const CHILD: &str = "RINGSIDE_TEST_HUGE_CHILD";

/// Three labels whose (min, median, max) are each one of the shapes that
/// broke the report.
fn huge_results() -> serde_json::Value {
    let shapes = [
        (1e200, 1e250, 1e308),
        (1e308, 1e308, 1e308),
        (1.0, 1e200, 1.7e308),
    ];
    let mut records = Vec::new();
    for (i, (min, median, max)) in shapes.into_iter().enumerate() {
        for k in 3..=20u32 {
            let bytes = 1u64 << k;
            records.push(serde_json::json!({
                "label": format!("huge{i}"), "backend": "reference", "collective": "all_reduce",
                "world": 2, "bytes": bytes, "count": bytes / 4, "dtype": "f32", "op": "sum",
                "min_us": min, "median_us": median, "max_us": max, "wrong": 0
            }));
        }
    }
    serde_json::json!({"format": "ringside-results/1", "manifest": {}, "records": records})
}

fn child_body() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("huge.json");
    std::fs::write(&input, serde_json::to_vec(&huge_results()).unwrap()).unwrap();
    let out = dir.path().join("report");
    let err = write_report(&[&input], &ReportOptions::new(&out))
        .unwrap_err()
        .to_string();
    for part in [
        "huge.json",
        "\"huge0\" all_reduce 8 B, 2 ranks",
        "1e200 µs",
        "1e9 s",
    ] {
        assert!(err.contains(part), "{part} missing from: {err}");
    }
    assert!(!out.exists(), "a refused report must write nothing");

    // The largest times allowed draw every chart.
    let mut most = huge_results();
    for r in most["records"].as_array_mut().unwrap() {
        r["min_us"] = 1.0.into();
        r["median_us"] = 1e14.into();
        r["max_us"] = reports::MAX_TIME_US.into();
    }
    std::fs::write(&input, serde_json::to_vec(&most).unwrap()).unwrap();
    let report = write_report(&[&input], &ReportOptions::new(&out)).unwrap();
    assert!(
        report.summary.charts_not_drawn.is_empty(),
        "{:?}",
        report.summary.charts_not_drawn
    );
    assert_eq!(report.charts.len(), 4, "{:?}", report.charts);
}

#[test]
fn report_with_huge_times_stays_bounded() {
    if std::env::var_os(CHILD).is_some() {
        child_body();
        return;
    }
    let me = std::env::current_exe().unwrap();
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -v 2097152 && exec \"$0\" \"$@\""])
        .arg(&me)
        .args([
            "--exact",
            "report_with_huge_times_stays_bounded",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let limit = Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the report on huge times ran past {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "the report on huge times failed under a 2 GiB limit ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}
