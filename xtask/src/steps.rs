//! The test suite of `cargo xtask test`: one list of steps, each timed.
//!
//! To add a check, add a [`Step`] to [`TEST_STEPS`]; `.ci/run` picks it up.

use crate::cargo::cargo;
use crate::ui;
use anyhow::{Result, bail};
use std::path::Path;
use std::time::{Duration, Instant};

/// What a step does.
pub enum Action {
    /// `cargo <args>` in the repository root.
    Cargo(&'static [&'static str]),
    /// A check written in Rust inside xtask (for checks no cargo command does).
    Xtask(fn(&Path) -> Result<()>),
}

/// One named check.
pub struct Step {
    /// Short name for `--skip` / `--only` and the summary.
    pub name: &'static str,
    /// One line saying what it checks.
    pub about: &'static str,
    /// How to run it.
    pub action: Action,
}

/// The cargo arguments of the `test` step. The labs gate builds with these too
/// (plus `--no-run`), so it reuses every unit this step built.
pub const CARGO_TEST: &[&str] = &["test", "--workspace"];

/// Every check the project has, in the order they run. The cheap ones come first so a
/// formatting slip shows up in seconds, but a failure does not stop the later steps.
pub const TEST_STEPS: &[Step] = &[
    Step {
        name: "fmt",
        about: "formatting",
        action: Action::Cargo(&["fmt", "--all", "--", "--check"]),
    },
    Step {
        name: "book",
        about: "the book builds: includes and anchors resolve, a chapter per lab, \
                no empty code block, every link resolves, every page renders in Chromium",
        action: Action::Xtask(crate::book::check),
    },
    Step {
        name: "test",
        about: "every crate's unit, integration and doc tests",
        action: Action::Cargo(CARGO_TEST),
    },
    Step {
        name: "labs",
        about: "every lab's starter fails its check naming its TODO, every solution \
                passes, every quick run draws its charts",
        action: Action::Xtask(crate::labs::gate),
    },
    Step {
        name: "clippy",
        about: "lints, warnings as errors",
        action: Action::Cargo(&[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]),
    },
    Step {
        name: "doc",
        about: "the API docs build: every intra-doc link resolves, warnings as errors",
        action: Action::Cargo(&[
            "doc",
            "--workspace",
            "--no-deps",
            "--config",
            "build.rustdocflags=[\"-D\", \"warnings\"]",
        ]),
    },
];

/// Prints the step names.
pub fn list() {
    for s in TEST_STEPS {
        let how = match s.action {
            Action::Cargo(args) => format!("cargo {}", args.join(" ")),
            Action::Xtask(_) => "(in xtask)".to_owned(),
        };
        println!("{:<8} {} — {how}", s.name, s.about);
    }
}

/// The steps chosen by `--skip` / `--only`; unknown names are an error, not a no-op.
pub fn select(skip: &[String], only: &[String]) -> Result<Vec<&'static Step>> {
    for name in skip.iter().chain(only) {
        if !TEST_STEPS.iter().any(|s| s.name == name) {
            let names: Vec<&str> = TEST_STEPS.iter().map(|s| s.name).collect();
            bail!("no step named {name:?}; steps: {}", names.join(", "));
        }
    }
    Ok(TEST_STEPS
        .iter()
        .filter(|s| !skip.iter().any(|n| n == s.name))
        .filter(|s| only.is_empty() || only.iter().any(|n| n == s.name))
        .collect())
}

/// Runs the steps, all of them even after a failure, then prints a timed summary.
pub fn run(root: &Path, steps: &[&Step]) -> Result<()> {
    let total = Instant::now();
    let mut results: Vec<(&str, bool, Duration)> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let start = Instant::now();
        let ok = match step.action {
            Action::Cargo(args) => {
                let mut cmd = cargo(root);
                cmd.args(args);
                ui::say(&format!(
                    "[{}/{}] {}: {}",
                    i + 1,
                    steps.len(),
                    step.name,
                    ui::show_command(&cmd)
                ));
                match cmd.status() {
                    Ok(status) => status.success(),
                    Err(e) => {
                        eprintln!("xtask: could not start cargo: {e}");
                        false
                    }
                }
            }
            Action::Xtask(check) => {
                ui::say(&format!("[{}/{}] {}", i + 1, steps.len(), step.name));
                match check(root) {
                    Ok(()) => true,
                    Err(e) => {
                        eprintln!("xtask: {}: {e:#}", step.name);
                        false
                    }
                }
            }
        };
        let took = start.elapsed();
        let verdict = if ok { "ok" } else { "FAILED" };
        ui::say(&format!(
            "{} {verdict} in {}",
            step.name,
            ui::fmt_duration(took)
        ));
        results.push((step.name, ok, took));
    }
    // Deliberately not shaped like a test runner's "N passed" line: the counts that
    // matter are cargo test's own, printed above.
    println!("\nxtask test summary:");
    for (name, ok, took) in &results {
        let verdict = if *ok { "ok" } else { "FAILED" };
        println!("  {name:<8} {verdict:<7} {:>8}", ui::fmt_duration(*took));
    }
    println!(
        "  {:<8} {:<7} {:>8}",
        "total",
        "",
        ui::fmt_duration(total.elapsed())
    );
    let failed: Vec<&str> = results.iter().filter(|r| !r.1).map(|r| r.0).collect();
    if !failed.is_empty() {
        bail!("failed step(s): {}", failed.join(", "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(steps: &[&Step]) -> Vec<&'static str> {
        steps.iter().map(|s| s.name).collect()
    }

    #[test]
    fn selection_by_skip_and_only() {
        let all = names(&select(&[], &[]).unwrap());
        assert_eq!(all.len(), TEST_STEPS.len());
        assert!(all.contains(&"test"), "the suite must run cargo test");
        let no_fmt = names(&select(&["fmt".into()], &[]).unwrap());
        assert!(!no_fmt.contains(&"fmt") && no_fmt.len() == all.len() - 1);
        assert_eq!(names(&select(&[], &["test".into()]).unwrap()), ["test"]);
    }

    #[test]
    fn unknown_step_name_is_an_error() {
        let err = select(&["tset".into()], &[]).err().unwrap();
        assert!(err.to_string().contains("tset"), "{err}");
    }

    #[test]
    fn step_names_are_unique() {
        for (i, a) in TEST_STEPS.iter().enumerate() {
            assert!(
                TEST_STEPS[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
        }
    }
}
