//! `cargo lab`: the workshop's commands (the alias is in `.cargo/config.toml`).
//!
//! * `cargo lab list`: every lab with its status, read from the learner's files;
//! * `cargo lab N [--solution] [-- ARGS]`: run lab N with the learner's code (or the
//!   reference solution);
//! * `cargo lab check N`: the lab's self-check, then the next hint if it fails;
//! * `cargo lab hint N`: the hints, one more each time;
//! * `cargo lab reset N`: restore the starter exercise, after asking, keeping a backup.
//!
//! Labs build and run with the release profile, the tour's, so a lab's first run
//! after the tour compiles only the lab. [`gate`] is the test suite's `labs` step.

pub mod info;
pub mod progress;

use crate::cargo::cargo;
use crate::ui;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use info::Lab;
use progress::{Checked, Progress, fingerprint};
use std::io::Write as _;
use std::path::Path;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output, Stdio};

/// The environment variable that makes a lab (its binary and its self-check) use
/// the reference solution instead of the learner's exercise. Read by `labkit`.
pub const SOLUTION_ENV: &str = "RINGSIDE_LAB_SOLUTION";

/// `cargo lab ...`.
#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    override_usage = "cargo lab [--solution] [NUMBER] [-- <ARGS>...]\n       cargo lab <COMMAND>"
)]
pub struct LabArgs {
    #[command(subcommand)]
    command: Option<LabCommand>,
    /// Run this lab (its number, e.g. 3).
    number: Option<u32>,
    /// Run the reference solution instead of your exercise.
    #[arg(long)]
    solution: bool,
    /// Arguments for the lab's program (after `--`), e.g. `-- --nproc 2 --quick`.
    #[arg(last = true)]
    args: Vec<String>,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Every lab with its status (not started / edited / fails / passes).
    List,
    /// Run lab N's self-check on your exercise; on failure, show the next hint.
    Check {
        /// The lab's number.
        number: u32,
    },
    /// Show lab N's hints, one more each time.
    Hint {
        /// The lab's number.
        number: u32,
    },
    /// Put lab N's starter exercise back (your version is kept in .ringside/backups/).
    Reset {
        /// The lab's number.
        number: u32,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
    },
}

/// Runs a `cargo lab` command.
pub fn run(root: &Path, args: LabArgs) -> Result<()> {
    let labs = info::load(root)?;
    match (args.command, args.number) {
        (Some(LabCommand::List), _) | (None, None) => list(root, &labs),
        (Some(LabCommand::Check { number }), _) => check(root, info::find(&labs, number)?),
        (Some(LabCommand::Hint { number }), _) => hint(root, info::find(&labs, number)?),
        (Some(LabCommand::Reset { number, yes }), _) => {
            reset(root, info::find(&labs, number)?, yes)
        }
        (None, Some(number)) => {
            let lab = info::find(&labs, number)?;
            let status = run_lab(root, lab, args.solution, &args.args)?;
            if !status.success() {
                bail!(
                    "lab {number} failed ({status}). `cargo lab check {number}` checks your \
                     exercise; `cargo lab hint {number}` gives a hint"
                );
            }
            Ok(())
        }
    }
}

/// What `cargo lab list` says about a lab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    NotStarted,
    Edited,
    Fails,
    Passes,
}

impl Status {
    fn word(self) -> &'static str {
        match self {
            Status::NotStarted => "not started",
            Status::Edited => "edited, not checked",
            Status::Fails => "fails its check",
            Status::Passes => "passes",
        }
    }
}

fn status(root: &Path, lab: &Lab, progress: &Progress) -> Result<Status> {
    let mine = std::fs::read(lab.exercise(root))
        .with_context(|| format!("reading {}", lab.exercise_rel()))?;
    if starter(root, lab).is_ok_and(|s| s == mine) {
        return Ok(Status::NotStarted);
    }
    Ok(match progress.get(&lab.short()).last_check {
        Some(Checked { passed, exercise }) if exercise == fingerprint(&mine) => {
            if passed {
                Status::Passes
            } else {
                Status::Fails
            }
        }
        _ => Status::Edited,
    })
}

fn list(root: &Path, labs: &[Lab]) -> Result<()> {
    let progress = Progress::load(root);
    println!(
        "{:<4} {:<38} {:>5}  {:<4} status",
        "lab", "title", "min", "gpu"
    );
    for lab in labs {
        let s = status(root, lab, &progress)?;
        println!(
            "{:<4} {:<38} {:>5}  {:<4} {}",
            lab.number,
            lab.title,
            lab.minutes,
            if lab.gpu { "yes" } else { "" },
            s.word()
        );
    }
    println!(
        "\n`cargo lab N` runs lab N, `cargo lab check N` checks your exercise, \
         `cargo lab hint N` helps; `cargo xtask book` builds the book with your figures."
    );
    Ok(())
}

/// Builds `target` with the workspace's feature set and returns the executables
/// cargo reports. Every `cargo lab` build goes through here with `--workspace`, as
/// `cargo test --workspace` and the tour build: selecting one package (`-p`) would
/// resolve features differently and recompile shared dependencies.
fn build(root: &Path, release: bool, target: &[&str]) -> Result<Vec<Artifact>> {
    let mut cmd = cargo(root);
    cmd.args(target);
    if release {
        cmd.arg("--release");
    }
    cmd.args(["--workspace", "--message-format", "json-render-diagnostics"])
        .stderr(Stdio::inherit());
    let shown = ui::show_command(&cmd);
    let out = ui::with_spinner("building", || Ok(cmd.output()?))
        .with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!("`{shown}` failed ({})", out.status);
    }
    Ok(artifacts(&String::from_utf8_lossy(&out.stdout)))
}

/// An executable cargo built: its package folder and target name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Artifact {
    dir: PathBuf,
    target: String,
    executable: PathBuf,
}

/// The executables in cargo's `--message-format json` output.
fn artifacts(json_lines: &str) -> Vec<Artifact> {
    json_lines
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["reason"] == "compiler-artifact")
        .filter_map(|v| {
            Some(Artifact {
                dir: Path::new(v["manifest_path"].as_str()?)
                    .parent()?
                    .to_path_buf(),
                target: v["target"]["name"].as_str()?.to_owned(),
                executable: PathBuf::from(v["executable"].as_str()?),
            })
        })
        .collect()
}

/// The executable of `lab`'s `target` among `built`.
fn find_artifact(built: &[Artifact], root: &Path, lab: &Lab, target: &str) -> Result<PathBuf> {
    let dir = lab.dir(root);
    built
        .iter()
        .find(|a| a.target == target && a.dir.ends_with(Path::new("labs").join(lab.dir_name())))
        .map(|a| a.executable.clone())
        .with_context(|| {
            format!(
                "cargo built no `{target}` for {} (is {} a workspace member?)",
                lab.package(),
                dir.display()
            )
        })
}

/// Builds lab `lab`'s program (release) and runs it with `args`; the solution
/// switch goes in the environment, so the lab's own flags stay its own.
fn run_lab(root: &Path, lab: &Lab, solution: bool, args: &[String]) -> Result<ExitStatus> {
    println!(
        "lab {}: {} — {}{}",
        lab.number,
        lab.title,
        lab.goal,
        if solution {
            " (reference solution)"
        } else {
            ""
        }
    );
    let built = build(root, true, &["build", "--bin", &lab.package()])?;
    let exe = find_artifact(&built, root, lab, &lab.package())?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(root).args(args);
    if solution {
        cmd.env(SOLUTION_ENV, "1");
    } else {
        cmd.env_remove(SOLUTION_ENV);
    }
    Ok(cmd.status()?)
}

/// Runs a lab's self-check executable on the exercise or the solution.
fn self_check(check_exe: &Path, root: &Path, solution: bool) -> Result<Output> {
    let mut cmd = Command::new(check_exe);
    // The panic message is the verdict; a backtrace would bury it.
    cmd.current_dir(root)
        .arg("--color=never")
        .env("RUST_BACKTRACE", "0");
    if solution {
        cmd.env(SOLUTION_ENV, "1");
    } else {
        cmd.env_remove(SOLUTION_ENV);
    }
    cmd.output()
        .with_context(|| format!("running {}", check_exe.display()))
}

/// Builds every lab's self-check (one cargo call).
fn build_checks(root: &Path, release: bool) -> Result<Vec<Artifact>> {
    build(root, release, &["test", "--no-run", "--test", "check"])
}

fn check(root: &Path, lab: &Lab) -> Result<()> {
    let mine = std::fs::read(lab.exercise(root))?;
    ui::say(&format!(
        "checking lab {} ({})",
        lab.number,
        lab.exercise_rel()
    ));
    let built = build_checks(root, true)?;
    let exe = find_artifact(&built, root, lab, "check")?;
    let out = ui::with_spinner("checking", || self_check(&exe, root, false))?;
    let passed = out.status.success();
    let mut progress = Progress::load(root);
    progress.update(&lab.short(), |p| {
        p.last_check = Some(Checked {
            passed,
            exercise: fingerprint(&mine),
        })
    })?;
    if passed {
        println!(
            "lab {} passes its check. Run it: `cargo lab {}`; then read its chapter \
             (`cargo xtask book`) and its questions.",
            lab.number, lab.number
        );
        return Ok(());
    }
    std::io::stdout().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    println!("\nlab {} does not pass yet. {}", lab.number, lab.done);
    hint(root, lab)?;
    bail!("lab {} fails its check", lab.number)
}

fn hint(root: &Path, lab: &Lab) -> Result<()> {
    let mut progress = Progress::load(root);
    let shown = progress.get(&lab.short()).hints_shown;
    let upto = (shown + 1).min(lab.hints.len());
    println!(
        "hints for lab {} ({} of {}):",
        lab.number,
        upto,
        lab.hints.len()
    );
    for (i, h) in lab.hints[..upto].iter().enumerate() {
        println!("  {}. {h}", i + 1);
    }
    if upto == lab.hints.len() {
        println!(
            "  (that is every hint; the solution is in the book's chapter {})",
            lab.chapter()
        );
    }
    progress.update(&lab.short(), |p| p.hints_shown = upto)
}

/// The starter exercise: the committed version of the learner's file.
fn starter(root: &Path, lab: &Lab) -> Result<Vec<u8>> {
    let out = Command::new("git")
        .current_dir(root)
        .args(["show", &format!("HEAD:{}", lab.exercise_rel())])
        .output()
        .context("running git (the starter is the committed version of the exercise)")?;
    if !out.status.success() {
        bail!(
            "git cannot show the committed {}: {}",
            lab.exercise_rel(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

fn reset(root: &Path, lab: &Lab, yes: bool) -> Result<()> {
    let path = lab.exercise(root);
    let starter = starter(root, lab)?;
    if !String::from_utf8_lossy(&starter).contains(&lab.todo_marker()) {
        bail!(
            "the committed {} has no {} markers: you committed your own version. \
             The starter is in the commit that added the lab: \
             `git log --diff-filter=A -- {}`",
            lab.exercise_rel(),
            lab.todo_marker(),
            lab.exercise_rel()
        );
    }
    let mine = std::fs::read(&path)?;
    if mine == starter {
        println!("{} is already the starter", lab.exercise_rel());
        return Ok(());
    }
    let backups = root.join(".ringside/backups");
    std::fs::create_dir_all(&backups)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let backup = backups.join(format!("{}-exercise-{secs}.rs", lab.short()));
    if !yes {
        print!(
            "Replace {} with the starter? Your version is kept as {}. [y/N] ",
            lab.exercise_rel(),
            backup.strip_prefix(root).unwrap_or(&backup).display()
        );
        std::io::stdout().flush()?;
        let mut answer = String::new();
        std::io::stdin().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("nothing changed");
            return Ok(());
        }
    }
    std::fs::write(&backup, &mine).with_context(|| format!("writing {}", backup.display()))?;
    // Write beside and rename, so an interrupted reset leaves one whole file.
    let tmp = path.with_extension("rs.reset-tmp");
    std::fs::write(&tmp, &starter)?;
    std::fs::rename(&tmp, &path)?;
    Progress::load(root).update(&lab.short(), |p| p.last_check = None)?;
    println!(
        "{} is the starter again; yours is in {}",
        lab.exercise_rel(),
        backup.display()
    );
    Ok(())
}

/// The test suite's `labs` step, rustlings' `dev check --require-solutions`: every
/// starter fails its self-check naming its TODO, every solution passes, and every
/// lab's quick run (`--quick` with the solution) completes and draws its charts.
/// Debug profile, as the rest of the suite, so nothing is compiled twice.
pub fn gate(root: &Path) -> Result<()> {
    let labs = info::load(root)?;
    let checks = build_checks(root, false)?;
    let packages: Vec<String> = labs.iter().map(Lab::package).collect();
    let mut target = vec!["build"];
    for p in &packages {
        target.extend(["--bin", p.as_str()]);
    }
    let programs = build(root, false, &target)?;
    let mut problems = Vec::new();
    for lab in &labs {
        let marker = lab.todo_marker();
        let started = std::time::Instant::now();
        let before = problems.len();
        let exe = find_artifact(&checks, root, lab, "check")?;
        let starter = self_check(&exe, root, false)?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&starter.stdout),
            String::from_utf8_lossy(&starter.stderr)
        );
        if starter.status.success() {
            problems.push(format!("lab {}: the starter passes its check", lab.number));
        } else if !text.contains(&marker) {
            problems.push(format!(
                "lab {}: the starter fails its check without naming {marker}:\n{}",
                lab.number,
                ui::tail_str(&text, 20)
            ));
        }
        let solution = self_check(&exe, root, true)?;
        if !solution.status.success() {
            problems.push(format!(
                "lab {}: the solution fails its check:\n{}{}",
                lab.number,
                String::from_utf8_lossy(&solution.stdout),
                String::from_utf8_lossy(&solution.stderr)
            ));
        }
        let program = find_artifact(&programs, root, lab, &lab.package())?;
        if let Err(e) = quick_run(&program, root) {
            problems.push(format!("lab {}: quick run: {e:#}", lab.number));
        }
        if problems.len() == before {
            ui::say(&format!(
                "lab {}: starter fails, solution passes, quick run drew its charts ({})",
                lab.number,
                ui::fmt_duration(started.elapsed())
            ));
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// Runs the lab's solution with `--quick` into a temporary results folder and
/// checks it wrote a results file and at least one SVG and one PNG chart.
fn quick_run(program: &Path, root: &Path) -> Result<()> {
    let results = tempfile::tempdir()?;
    let mut cmd = Command::new(program);
    cmd.current_dir(root)
        .arg("--quick")
        .env(SOLUTION_ENV, "1")
        .env(measure::RESULTS_DIR_ENV, results.path());
    let out = cmd.output()?;
    if !out.status.success() {
        bail!(
            "{} failed ({}):\n{}{}",
            ui::show_command(&cmd),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let mut found = Vec::new();
    walk(results.path(), &mut |p| found.push(p.to_path_buf()))?;
    for ext in ["json", "svg", "png"] {
        if !found
            .iter()
            .any(|p| p.extension().is_some_and(|e| e == ext))
        {
            bail!(
                "no .{ext} file under the results folder; it wrote {:?}",
                found
            );
        }
    }
    Ok(())
}

/// Calls `f` on every file below `dir`.
pub fn walk(dir: &Path, f: &mut dyn FnMut(&Path)) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            walk(&path, f)?;
        } else {
            f(&path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn executables_are_read_from_cargos_json_messages() {
        let lines = [
            r#"{"reason":"compiler-artifact","manifest_path":"/w/labs/01-a/Cargo.toml","target":{"name":"check"},"executable":"/w/target/debug/deps/check-1"}"#,
            r#"{"reason":"compiler-artifact","manifest_path":"/w/labs/kit/Cargo.toml","target":{"name":"labkit"},"executable":null}"#,
            r#"{"reason":"build-finished","success":true}"#,
            "not json",
        ]
        .join("\n");
        let got = artifacts(&lines);
        assert_eq!(
            got,
            [Artifact {
                dir: PathBuf::from("/w/labs/01-a"),
                target: "check".into(),
                executable: PathBuf::from("/w/target/debug/deps/check-1"),
            }]
        );
    }
}
