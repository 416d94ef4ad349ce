//! Render a report from a synthetic results file and look at it the way a
//! person would: headless Chromium screenshots the page and dumps its DOM.
//! Needs the Debian package `chromium` (project set-up installs it, and
//! `fonts-dejavu-core` so the page's own text has a font in Chromium; the
//! PNG charts need none); without Chromium the test fails, it never skips.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use reports::{ReportOptions, write_report};

/// Labels as the bench writes them, plus one that tries to inject markup.
const SERIES: [(&str, &str, bool, f64, f64); 4] = [
    // label, backend, peer, alpha µs, GB/s
    ("reference-shm", "reference", false, 4.0, 6.0),
    ("gloo", "gloo", false, 25.0, 9.0),
    ("torch-gloo", "torch", true, 40.0, 8.0),
    ("mpi<script>alert(1)</script>", "mpi", false, 8.0, 3.0),
];

fn synthetic_results() -> serde_json::Value {
    let mut records = Vec::new();
    let world = 4usize;
    for (i, (label, backend, peer, alpha, gbps)) in SERIES.iter().enumerate() {
        for (collective, factor) in [("all_reduce", 1.5), ("broadcast", 1.0)] {
            for k in 3..=26u32 {
                let bytes = 1u64 << k;
                // Deterministic ±4 % wobble so the fit is not trivially exact.
                let wobble = 1.0 + 0.04 * (((k as usize * 7 + i * 3) % 5) as f64 - 2.0) / 2.0;
                let median = (alpha + bytes as f64 * factor / (gbps * 1e3)) * wobble;
                let algbw = bytes as f64 / median / 1e3;
                records.push(serde_json::json!({
                    "label": label, "backend": backend, "algo": "auto", "peer": peer,
                    "collective": collective, "world": world, "bytes": bytes, "count": bytes / 4,
                    "dtype": "f32", "op": if collective == "all_reduce" { "sum" } else { "none" },
                    "root": if collective == "broadcast" { 0 } else { -1 },
                    "in_place": false, "iters": 20,
                    "min_us": median * 0.9, "median_us": median, "mean_us": median * 1.02,
                    "p99_us": median * 1.3, "max_us": median * 1.4,
                    "algbw_gbps": algbw, "busbw_gbps": algbw * factor, "wrong": 0
                }));
            }
        }
    }
    serde_json::json!({
        "format": "ringside-results/1",
        "manifest": {
            "created": "2026-11-21T10:30:00Z",
            "command": "ringside bench --backend reference,gloo,mpi",
            "ringside": {"version": "0.1.0", "git_sha": "749c484", "rustc": "rustc 1.95.0"},
            "libraries": {"gloo": "0.0~git20220518", "openmpi": "4.1.4", "nccl": null, "torch": "2.11.0"},
            "host": {"hostname": "<h1>host</h1>", "cpu": "test cpu", "cores": 2, "memory_bytes": 25000000000u64, "os": "Debian GNU/Linux 12"},
            "env": {"GLOO_SOCKET_IFNAME": "lo"},
            "world": world, "transport": "shm", "combine": "max"
        },
        "records": records
    })
}

/// Run `cmd` with a deadline, returning its stdout. Fails (not skips) when
/// Chromium is missing.
fn run_with_deadline(mut cmd: Command, limit: Duration) -> String {
    let mut child = match cmd.stdout(Stdio::piped()).stderr(Stdio::null()).spawn() {
        Ok(c) => c,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "chromium is not installed: `apt-get install chromium` (project set-up installs it)"
        ),
        Err(e) => panic!("cannot start chromium: {e}"),
    };
    // Read stdout on a thread so a full pipe cannot stall the child while we
    // poll for its exit.
    let mut out = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).map(|_| s)
    });
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium exited with {status}");
            break;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap().unwrap()
}

fn chromium(profile: &Path, extra: &[String]) -> Command {
    let mut cmd = Command::new("chromium");
    cmd.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--no-first-run",
        "--disable-extensions",
        "--disable-dev-shm-usage",
    ])
    // A private profile: parallel runs must not share Chromium's lock files.
    .arg(format!("--user-data-dir={}", profile.display()))
    .args(extra);
    cmd
}

/// Relative `href`/`src` targets in a DOM dump.
fn local_refs(dom: &str) -> BTreeSet<String> {
    let mut refs = BTreeSet::new();
    for attr in ["href=\"", "src=\""] {
        let mut rest = dom;
        while let Some(i) = rest.find(attr) {
            rest = &rest[i + attr.len()..];
            let Some(end) = rest.find('"') else { break };
            let target = &rest[..end];
            assert!(
                !target.contains("://") && !target.starts_with("//"),
                "the page references a network or absolute URL: {target}"
            );
            if !target.starts_with('#') {
                refs.insert(target.to_string());
            }
        }
    }
    refs
}

#[test]
fn report_renders_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bench.json");
    std::fs::write(
        &input,
        serde_json::to_vec_pretty(&synthetic_results()).unwrap(),
    )
    .unwrap();
    let out = dir.path().join("report");
    let report = write_report(&[&input], &ReportOptions::new(&out)).unwrap();

    // 2 collectives × 3 chart kinds plus all_reduce's residuals, each as
    // SVG and PNG.
    assert_eq!(report.charts.len(), 7, "{:?}", report.charts);
    assert_eq!(report.files.len(), 15);
    assert!(report.charts.contains(&"residuals-all_reduce".to_string()));
    for f in &report.files {
        assert!(
            std::fs::metadata(f).unwrap().len() > 500,
            "{} is (nearly) empty",
            f.display()
        );
    }
    let text = report.summary.to_string();
    assert!(text.contains("reference-shm"), "{text}");

    let latency = std::fs::read_to_string(out.join("latency-all_reduce.svg")).unwrap();
    for legend in ["regime model", "torch-gloo (peer)", "reference-shm"] {
        assert!(
            latency.contains(legend),
            "latency chart lacks legend entry {legend}"
        );
    }

    let html = std::fs::read_to_string(&report.index).unwrap();
    assert!(!html.contains("<script"), "a label was not escaped");

    let url = format!("file://{}", report.index.display());
    let profile = dir.path().join("chromium-profile");

    // What a person sees: a tall screenshot that is not one flat colour.
    let shot = dir.path().join("shot.png");
    run_with_deadline(
        chromium(
            &profile,
            &[
                format!("--screenshot={}", shot.display()),
                "--window-size=1280,4000".into(),
                url.clone(),
            ],
        ),
        Duration::from_secs(60),
    );
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(&shot).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1280, 4000));
    let channels = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(channels).collect();
    let colours: BTreeSet<&[u8]> = pixels.iter().step_by(7).copied().collect();
    let background = pixels[0];
    let inked = pixels.iter().filter(|p| **p != background).count();
    assert!(
        colours.len() > 50,
        "screenshot has only {} colours",
        colours.len()
    );
    assert!(
        inked * 100 > pixels.len() * 3,
        "screenshot is nearly blank: {inked} of {} pixels differ from the background",
        pixels.len()
    );

    // What the browser parsed: every chart inline, every linked file there.
    let dom = run_with_deadline(
        chromium(&profile, &["--dump-dom".into(), url]),
        Duration::from_secs(60),
    );
    assert!(dom.contains("name=\"viewport\""), "no viewport meta");
    assert!(!dom.contains("<script"), "the DOM has a script element");
    assert!(
        dom.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "label missing or mangled"
    );
    for stem in &report.charts {
        let fig = format!("id=\"chart-{stem}\"");
        let at = dom
            .find(&fig)
            .unwrap_or_else(|| panic!("chart {stem} missing from the DOM"));
        let rest = &dom[at..];
        let end = rest.find("</figure>").unwrap();
        assert!(
            rest[..end].contains("<svg"),
            "chart {stem} has no inline <svg>"
        );
    }
    assert!(dom.matches("<svg").count() >= report.charts.len());
    let refs = local_refs(&dom);
    for stem in &report.charts {
        for ext in ["png", "svg"] {
            assert!(
                refs.contains(&format!("{stem}.{ext}")),
                "no link to {stem}.{ext}"
            );
        }
    }
    for r in &refs {
        let path: PathBuf = out.join(r);
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(
            len > 0,
            "referenced file {} is missing or empty",
            path.display()
        );
    }
}

#[test]
fn garbled_input_names_the_file_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.json");
    std::fs::write(&good, serde_json::to_vec(&synthetic_results()).unwrap()).unwrap();
    let bad = dir.path().join("truncated.json");
    std::fs::write(
        &bad,
        b"{\"format\": \"ringside-results/1\", \"records\": [{\"label\"",
    )
    .unwrap();
    let out = dir.path().join("report");
    let err = write_report(&[&good, &bad], &ReportOptions::new(&out)).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("truncated.json"), "{msg}");
    assert!(!out.exists(), "a failed report must not leave files behind");
}
