//! Terse output: one line per thing done, spinners for the long waits.

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Prints one status line.
pub fn say(msg: &str) {
    println!("xtask: {msg}");
}

/// `1.2s`, `3m05s`: short enough for a summary column.
pub fn fmt_duration(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1}s")
    } else {
        let whole = d.as_secs();
        format!("{}m{:02}s", whole / 60, whole % 60)
    }
}

/// The command line as a person would type it (for messages).
pub fn show_command(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    // `$CARGO` is an absolute path to the toolchain's cargo; "cargo" reads better.
    if let Some(first) = parts.first_mut() {
        if Path::new(first.as_str())
            .file_name()
            .is_some_and(|n| n == "cargo")
        {
            *first = "cargo".to_owned();
        }
    }
    parts.join(" ")
}

fn spinner(msg: &str) -> ProgressBar {
    // Drawn on stderr only when it is a terminal; CI logs get the plain lines instead.
    let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} [{elapsed}] {prefix} {wide_msg}") {
        bar.set_style(style);
    }
    bar.set_prefix(msg.to_owned());
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// Runs `cmd` with its output going to `log`, showing a spinner with the latest line.
///
/// On failure the end of the log is printed, so the cause is visible without opening it.
pub fn run_logged(cmd: &mut Command, what: &str, log: &Path) -> Result<Duration> {
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let out = File::create(log).with_context(|| format!("creating {}", log.display()))?;
    let err = out.try_clone()?;
    let shown = show_command(cmd);
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting `{shown}`"))?;
    let bar = spinner(what);
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if let Some(line) = last_line(log) {
            bar.set_message(line);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    bar.finish_and_clear();
    if !status.success() {
        eprintln!("--- last lines of {} ---", log.display());
        eprintln!("{}", tail(log, 30));
        anyhow::bail!("`{shown}` failed ({status}); full log: {}", log.display());
    }
    Ok(start.elapsed())
}

/// Runs a short in-process job under a spinner (for waits that print nothing).
pub fn with_spinner<T>(what: &str, job: impl FnOnce() -> Result<T>) -> Result<T> {
    let bar = spinner(what);
    let out = job();
    bar.finish_and_clear();
    out
}

fn read_end(path: &Path, max: u64) -> Option<String> {
    let mut f = File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    f.seek(SeekFrom::Start(len.saturating_sub(max))).ok()?;
    let mut buf = Vec::new();
    f.read_to_end(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf).into_owned())
}

fn last_line(path: &Path) -> Option<String> {
    let text = read_end(path, 4096)?;
    // pip redraws progress with '\r'; the last segment is the current state.
    let line = text
        .lines()
        .rev()
        .flat_map(|l| l.rsplit('\r'))
        .map(str::trim)
        .find(|l| !l.is_empty())?;
    Some(line.chars().take(120).collect())
}

/// The last `n` lines of a file ("" when unreadable).
pub fn tail(path: &Path, n: usize) -> String {
    tail_str(&read_end(path, 64 * 1024).unwrap_or_default(), n)
}

/// The last `n` lines of `text`.
pub fn tail_str(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(fmt_duration(Duration::from_millis(1234)), "1.2s");
        assert_eq!(fmt_duration(Duration::from_secs(185)), "3m05s");
    }

    #[test]
    fn last_line_skips_blank_and_carriage_return_redraws() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("log");
        std::fs::write(&p, "first\nDownloading 10%\rDownloading 55%\n\n").unwrap();
        assert_eq!(last_line(&p).as_deref(), Some("Downloading 55%"));
        assert_eq!(tail(&p, 1), "");
        assert_eq!(tail(&p, 3), "first\nDownloading 10%\rDownloading 55%\n");
    }

    #[test]
    fn failed_command_reports_log_tail() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("logs/x.log");
        let err = run_logged(
            Command::new("sh").args(["-c", "echo the-cause >&2; exit 3"]),
            "failing",
            &log,
        )
        .unwrap_err();
        assert!(err.to_string().contains("failed"), "{err}");
        assert!(std::fs::read_to_string(&log).unwrap().contains("the-cause"));
    }
}
