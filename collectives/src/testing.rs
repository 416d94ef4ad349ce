//! Visible skips for tests that need hardware this machine may lack (a CUDA
//! device, two of them). libtest captures `eprintln!`, so a skipped test
//! would look like a pass; these write to the real stderr instead, and on a
//! machine that promises GPUs (`RINGSIDE_REQUIRE_CUDA=1`, set by
//! `scripts/gpu-check.sh`) a missing device fails the test.
//!
//! Used by collectives' and trainers' GPU tests, in the form
//! `if available { ... } else { skip_without_cuda(test, why) }`, so no test
//! ends early with a bare `return`.

use std::io::Write;

/// The variable that turns a missing CUDA device into a failure.
pub const REQUIRE_CUDA_ENV: &str = "RINGSIDE_REQUIRE_CUDA";

/// Whether `RINGSIDE_REQUIRE_CUDA=1`: this machine promises CUDA devices.
pub fn cuda_required() -> bool {
    std::env::var_os(REQUIRE_CUDA_ENV).is_some_and(|v| v == "1")
}

/// One line straight to file descriptor 2 (libtest does not capture it).
pub fn note(line: &str) {
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// Says `test: skipped: reason` where people see it.
pub fn skip(test: &str, reason: &str) {
    note(&format!("{test}: skipped: {reason}"));
}

/// As [`skip`] for a missing CUDA device, but a failure (panic) when
/// [`cuda_required`].
pub fn skip_without_cuda(test: &str, reason: &str) {
    assert!(
        !cuda_required(),
        "{REQUIRE_CUDA_ENV}=1 but {test} found {reason}"
    );
    skip(test, reason);
}

/// Field `n` of a `/proc/<pid>/stat` (or `/proc/<pid>/task/<tid>/stat`)
/// file, numbered as in proc(5) (4 the parent, 14 and 15 user and system
/// time, 19 the nice value), if the file can still be read. The name in
/// parentheses (field 2) may hold spaces, so fields count from its end.
pub fn proc_stat_field(path: &str, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(path).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(n.checked_sub(3)?).map(str::to_owned)
}

/// Runs the ignored test `name` (its path in this test binary, as libtest
/// prints it) again, alone, in a child process started as the launcher
/// starts a rank ([`crate::launch::supervised`]: a session of its own), with
/// `env=1` set so the test knows it is the child; panics with the child's
/// output unless exactly that one test ran and passed.
///
/// For tests that need a process to themselves: no other test's threads or
/// descriptors beside them, or a session of their own. Only for this crate's
/// unit tests (the binary must be a libtest one), so not part of its API.
#[cfg(test)]
pub(crate) fn run_alone_in_child(name: &str, env: &str) {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = std::process::Command::new(exe);
    cmd.args([
        name,
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(env, "1");
    crate::launch::supervised(&mut cmd);
    let out = cmd.output().expect("starting the test binary again");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the child failed:\n{text}");
    // A renamed test would match nothing and "pass".
    assert!(text.contains("1 passed"), "the child ran no test:\n{text}");
}
