//! A rank's stderr, forwarded line by line as `[rank N] …`, with the last
//! lines kept for the report (backtraces left out of that tail).

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::ChildStderr;
use std::sync::{Arc, Mutex};

/// How many stderr lines per rank a report keeps.
pub const TAIL_LINES: usize = 20;
/// A forwarded line longer than this is split (bounds the launcher's memory).
const MAX_LINE: u64 = 64 * 1024;

/// Forwards a rank's stderr as `[rank N] line`, keeping the last lines.
pub(super) fn forward(rank: usize, pipe: ChildStderr, tail: Arc<Mutex<VecDeque<String>>>) {
    let mut reader = BufReader::new(pipe);
    let mut line = Vec::new();
    let mut backtrace = BacktraceFilter::default();
    loop {
        line.clear();
        match (&mut reader).take(MAX_LINE).read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        }
        let text = String::from_utf8_lossy(line.strip_suffix(b"\n").unwrap_or(&line));
        let text = text.strip_suffix('\r').unwrap_or(&text).to_owned();
        {
            // One write per line, under the lock, so ranks' lines never mix.
            let mut err = std::io::stderr().lock();
            let _ = writeln!(err, "[rank {rank}] {text}");
        }
        let Some(kept) = backtrace.keep(text) else {
            continue;
        };
        let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
        if t.len() == TAIL_LINES {
            t.pop_front();
        }
        t.push_back(kept);
    }
}

/// Keeps a backtrace out of a rank's stderr tail (the lines are still forwarded):
/// with `RUST_BACKTRACE=1` in the environment, the last 20 lines of a failed rank
/// were all frames, and the error itself was cut off.
#[derive(Default)]
pub(super) struct BacktraceFilter {
    inside: bool,
}

impl BacktraceFilter {
    /// The line to keep in the tail for `text`, if any: `(backtrace omitted)` for the
    /// header of a backtrace, nothing for its frames (indented) and its closing note.
    pub(super) fn keep(&mut self, text: String) -> Option<String> {
        let t = text.trim();
        if t.eq_ignore_ascii_case("stack backtrace:") {
            self.inside = true;
            return Some("(backtrace omitted; the rank's full stderr is above)".into());
        }
        if self.inside {
            if text.starts_with(char::is_whitespace) || t.is_empty() {
                return None;
            }
            self.inside = false;
            if t.starts_with("note: Some details are omitted") {
                return None;
            }
        }
        Some(text)
    }
}
