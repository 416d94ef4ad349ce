//! `cargo lab`: the workshop's commands (the alias is in `.cargo/config.toml`).
//!
//! * `cargo lab list`: every lab with its status, read from the learner's files;
//! * `cargo lab N [--solution] [-- ARGS]`: run lab N with the learner's code (or the
//!   reference solution);
//! * `cargo lab check N [--solution]`: the lab's self-check on the learner's exercise
//!   (or the reference solution); if the exercise fails, the hint for that failure
//!   ([`hints`] has the protocol by which a check names a mistake);
//! * `cargo lab hint N`: the hint ladder (concept, approach, near-code), one step
//!   more each time;
//! * `cargo lab reset N`: restore the starter exercise, after asking, keeping a backup;
//! * `--stretch` on `check`, `hint` and `reset`: the same for the lab's optional
//!   stretch goal (`src/stretch.rs`, checked by its own test `tests/stretch.rs`,
//!   built apart from the main check so that neither depends on the other);
//! * `cargo lab N --cleanup`: remove the network namespaces, bridges and veths that
//!   an interrupted run of a lab with simulated hosts (8, 11) left behind.
//!
//! A lab builds alone (`-p labNN-name`, release), with one cargo call that makes
//! both its self-check and its program, so `cargo lab check N` and `cargo lab N`
//! share their artefacts, a lab whose exercise does not compile blocks no other lab,
//! and the warnings shown are this lab's. [`gate`] is the test suite's `labs` step; it
//! builds every lab in one call (debug, as the rest of the suite).

pub mod hints;
pub mod info;
pub mod progress;

use crate::cargo::cargo;
use crate::ui;
use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use info::{Lab, Part};
use progress::{Checked, Progress, fingerprint};
use std::io::Write as _;
use std::path::Path;
use std::path::PathBuf;
use std::process::{Command, ExitStatus, Output, Stdio};

/// The environment variable that makes a lab (its binary and its self-check) use
/// the reference solution instead of the learner's exercise. Read by `labkit`.
pub const SOLUTION_ENV: &str = "RINGSIDE_LAB_SOLUTION";

/// What a lab's program and self-check get for `RINGSIDE_TIMEOUT`,
/// `RINGSIDE_NOTICE` and `RINGSIDE_IDLE_LIMIT` unless the learner set them: a
/// learner's hang is named after 4 s of waiting (a collective called on one
/// rank only, within 5 s) and ends within 30 s, not after the library's
/// minutes-long defaults (issue 25: lab 6 printed nothing for two minutes).
/// Outside the labs a rank may work alone as long as the timeout (a
/// checkpoint save), so the short idle limit is the labs' alone.
pub const LAB_ENV_DEFAULTS: [(&str, &str); 3] = [
    ("RINGSIDE_TIMEOUT", "30"),
    ("RINGSIDE_NOTICE", "4"),
    ("RINGSIDE_IDLE_LIMIT", "4"),
];

/// What a self-check gets besides: ranks that call different collectives on
/// Gloo, MPI or NCCL are named before the call. Not in runs, whose figures
/// the check's store round trips (tens of µs per call) would skew.
pub const CHECK_ENV_DEFAULTS: [(&str, &str); 1] = [("RINGSIDE_DEBUG_COLLECTIVES", "1")];

/// Sets [`LAB_ENV_DEFAULTS`] (and, for a self-check, [`CHECK_ENV_DEFAULTS`])
/// on `cmd`, leaving alone what `set` (the learner's environment) already has.
fn lab_env(cmd: &mut Command, check: bool, set: impl Fn(&str) -> bool) {
    let extra: &[(&str, &str)] = if check { &CHECK_ENV_DEFAULTS } else { &[] };
    for (k, v) in LAB_ENV_DEFAULTS.iter().chain(extra) {
        if !set(k) {
            cmd.env(k, v);
        }
    }
}

/// Whether the learner's environment sets `k`.
fn env_set(k: &str) -> bool {
    std::env::var_os(k).is_some()
}

/// `cargo lab ...`.
#[derive(Args)]
#[command(
    args_conflicts_with_subcommands = true,
    override_usage = "cargo lab [--solution] [NUMBER] [-- <ARGS>...]\n       cargo lab NUMBER --cleanup\n       cargo lab <COMMAND>"
)]
pub struct LabArgs {
    #[command(subcommand)]
    command: Option<LabCommand>,
    /// Run this lab (its number, e.g. 3).
    number: Option<u32>,
    /// Run the reference solution instead of your exercise.
    #[arg(long)]
    solution: bool,
    /// Remove what an interrupted run (Ctrl-C, kill -9) of a lab with simulated
    /// hosts (8, 11) left behind: network namespaces, bridges, veths. Needs root.
    #[arg(long, requires = "number", conflicts_with = "solution")]
    cleanup: bool,
    /// Arguments for the lab's program (after `--`), e.g. `-- --nproc 2 --quick`.
    #[arg(last = true)]
    args: Vec<String>,
}

#[derive(Subcommand)]
enum LabCommand {
    /// Every lab with its status (not started / edited / fails / passes).
    List,
    /// Run lab N's self-check on your exercise; on failure, show the hint for it.
    Check {
        /// The lab's number.
        number: u32,
        /// Check the reference solution instead (it must pass; for lab authors).
        #[arg(long)]
        solution: bool,
        /// Check the lab's optional stretch goal (src/stretch.rs) instead.
        #[arg(long)]
        stretch: bool,
    },
    /// Show lab N's hints: the concept, then the approach, then near the code.
    Hint {
        /// The lab's number.
        number: u32,
        /// The stretch goal's hints instead.
        #[arg(long)]
        stretch: bool,
    },
    /// Put lab N's starter exercise back (your version is kept in .ringside/backups/).
    Reset {
        /// The lab's number.
        number: u32,
        /// Do not ask.
        #[arg(long)]
        yes: bool,
        /// Put the stretch goal's starter (src/stretch.rs) back instead.
        #[arg(long)]
        stretch: bool,
    },
}

/// The part `--stretch` selects.
fn part(stretch: bool) -> Part {
    if stretch { Part::Stretch } else { Part::Main }
}

/// Runs a `cargo lab` command.
pub fn run(root: &Path, args: LabArgs) -> Result<()> {
    let labs = info::load(root)?;
    match (args.command, args.number) {
        (Some(LabCommand::List), _) | (None, None) => list(root, &labs),
        (
            Some(LabCommand::Check {
                number,
                solution,
                stretch,
            }),
            _,
        ) => {
            let lab = info::find(&labs, number)?;
            let part = part(stretch);
            lab.require(part)?;
            if solution {
                check_solution(root, lab, part)
            } else {
                check(root, lab, part)
            }
        }
        (Some(LabCommand::Hint { number, stretch }), _) => {
            hint(root, info::find(&labs, number)?, part(stretch))
        }
        (
            Some(LabCommand::Reset {
                number,
                yes,
                stretch,
            }),
            _,
        ) => reset(root, info::find(&labs, number)?, part(stretch), yes),
        (None, Some(number)) if args.cleanup => {
            info::find(&labs, number)?;
            cleanup(number)
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

/// `cargo lab N --cleanup`: removes the simulated hosts of runs that are gone
/// (a run that ends normally removes its own; the next run removes a killed
/// one's, and says so).
fn cleanup(number: u32) -> Result<()> {
    let found = labhosts::stale_names();
    if found.is_empty() {
        println!(
            "lab {number}: nothing left behind (no network namespace, bridge or veth of a \
             run that is gone)"
        );
        return Ok(());
    }
    let removed = labhosts::remove_stale();
    let still = labhosts::stale_names();
    if !still.is_empty() {
        bail!(
            "lab {number}: could not remove {} (removing network namespaces needs root: \
             `sudo -E cargo lab {number} --cleanup`)",
            still.join(", ")
        );
    }
    println!(
        "lab {number}: removed what an interrupted run left behind: {} (their veths went \
         with them)",
        removed.join(", ")
    );
    Ok(())
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

/// What `cargo lab list` says about `part` of `lab`, from its file and the
/// last check remembered.
fn status(root: &Path, lab: &Lab, part: Part, progress: &Progress) -> Result<Status> {
    let mine = std::fs::read(lab.file(root, part))
        .with_context(|| format!("reading {}", lab.file_rel(part)))?;
    if starter(root, lab, part).is_ok_and(|s| s == mine) {
        return Ok(Status::NotStarted);
    }
    Ok(match progress.get(&lab.progress_key(part)).last_check {
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
    let mut rows = Vec::new();
    for lab in labs {
        rows.push([
            lab.number.to_string(),
            lab.title.clone(),
            lab.minutes.to_string(),
            if lab.gpu { "yes" } else { "" }.to_owned(),
            status(root, lab, Part::Main, &progress)?.word().to_owned(),
            match lab.stretch {
                Some(_) => status(root, lab, Part::Stretch, &progress)?
                    .word()
                    .to_owned(),
                None => String::new(),
            },
        ]);
    }
    print!("{}", table(&rows));
    println!(
        "\n`cargo lab N` runs lab N, `cargo lab check N` checks your exercise, \
         `cargo lab hint N` helps; `cargo xtask book` builds the book with your figures.\n\
         A lab with a stretch status has an optional stretch goal for when you are done: \
         `cargo lab check N --stretch`, `cargo lab hint N --stretch`."
    );
    Ok(())
}

/// `cargo lab list`'s table: every column as wide as its widest cell (counted in
/// characters, so a title with a `−` lines up), the minutes right-aligned. The
/// last column is the stretch goal's status, empty for a lab without one.
fn table(rows: &[[String; 6]]) -> String {
    let head = ["lab", "title", "min", "gpu", "status", "stretch"].map(String::from);
    let mut width = [0; 6];
    for row in std::iter::once(&head).chain(rows) {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(&head).chain(rows) {
        let line = format!(
            "{:<w0$}  {:<w1$}  {:>w2$}  {:<w3$}  {:<w4$}  {}",
            row[0],
            row[1],
            row[2],
            row[3],
            row[4],
            row[5],
            w0 = width[0],
            w1 = width[1],
            w2 = width[2],
            w3 = width[3],
            w4 = width[4],
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// What a build selects.
#[derive(Debug, Clone, Copy)]
enum Scope<'a> {
    /// One lab's package only: the self-check of one part and its program, in
    /// one cargo call. The main check's build never compiles `src/stretch.rs`
    /// (only `tests/stretch.rs` includes it), so a half-written stretch cannot
    /// break the main exercise's check or run.
    Lab(&'a Lab, Part),
    /// Every package (the CI gate, which needs every lab anyway): the targets
    /// the suite's `cargo test --workspace` step builds (lib, bins, examples,
    /// tests) with every integration test named by `--test '*'`, which takes in
    /// the `check` and `stretch` tests that `test = false` keeps out of a plain
    /// `cargo test` (an unsolved starter fails them). Naming only `--test check`
    /// resolved a second set of unit hashes (trainers, torch-link and every lab
    /// built twice), which filled a CI machine's disk; `--tests` would drop the
    /// `test = false` ones. So after the test step the gate compiles the checks
    /// and nothing else.
    Workspace,
}

/// The cargo arguments that build what `scope` selects.
///
/// A lab is built as `cargo test --no-run --release -p labNN-name --test check`,
/// for `cargo lab check N` *and* `cargo lab N`: building an integration test makes
/// cargo build the package's binary too, with the same profile and features, so the
/// run after a check (or the check after a run) compiles nothing. Selecting the one
/// package means a lab whose exercise does not compile cannot block another lab's
/// check, and cargo shows only this package's (and its dependencies') warnings.
fn build_args(scope: Scope<'_>, release: bool) -> Vec<String> {
    let mut args: Vec<String> = match scope {
        Scope::Lab(lab, part) => ["test", "--no-run", "--test", part.test(), "-p"]
            .map(String::from)
            .into_iter()
            .chain([lab.package()])
            .collect(),
        Scope::Workspace => crate::steps::CARGO_TEST
            .iter()
            .chain(&["--no-run", "--lib", "--bins", "--examples", "--test", "*"])
            .map(|a| a.to_string())
            .collect(),
    };
    if release {
        args.push("--release".into());
    }
    args.extend(["--message-format", "json-render-diagnostics"].map(String::from));
    args
}

/// Runs `cargo` with `args` and returns the executables it reports.
fn build(root: &Path, args: &[String]) -> Result<Vec<Artifact>> {
    let mut cmd = cargo(root);
    cmd.args(args).stderr(Stdio::inherit());
    let shown = ui::show_command(&cmd);
    let out = ui::with_spinner("building", || Ok(cmd.output()?))
        .with_context(|| format!("running {shown}"))?;
    if !out.status.success() {
        bail!("`{shown}` failed ({})", out.status);
    }
    Ok(artifacts(&String::from_utf8_lossy(&out.stdout)))
}

/// Builds lab `lab` (the self-check of `part` and its program, release), first
/// saying how long a first build takes when there is nothing built for it yet.
fn build_lab(root: &Path, lab: &Lab, part: Part) -> Result<Vec<Artifact>> {
    if let Some(note) = first_build_note(root, lab) {
        ui::say(&note);
    }
    build(root, &build_args(Scope::Lab(lab, part), true))
}

/// Where cargo puts what it builds: `$CARGO_TARGET_DIR`, else `target/`.
fn target_dir(root: &Path) -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| root.join("target"), |d| root.join(d))
}

/// What to say before a lab's first build on this machine (its program is not in
/// `target/release/` yet), or nothing when it has been built before.
fn first_build_note(root: &Path, lab: &Lab) -> Option<String> {
    let release = target_dir(root).join("release");
    if release.join(lab.package()).is_file() {
        return None;
    }
    // torch-sys's build folder exists once libtorch's bindings have been compiled.
    let torch_built = std::fs::read_dir(release.join("build")).is_ok_and(|mut it| {
        it.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy().starts_with("torch-sys-")))
    });
    Some(if uses_torch(root, lab) && !torch_built {
        format!(
            "lab {}: the first build compiles libtorch's bindings and the lab: about 8 \
             minutes on 2 cores; later checks take seconds",
            lab.number
        )
    } else {
        format!(
            "lab {}: the first build compiles the lab and the libraries it uses: a few \
             minutes on 2 cores; later checks take seconds",
            lab.number
        )
    })
}

/// Whether the lab's package depends on tch (its manifest names it).
fn uses_torch(root: &Path, lab: &Lab) -> bool {
    std::fs::read_to_string(lab.dir(root).join("Cargo.toml")).is_ok_and(|m| {
        m.lines()
            .any(|l| l.trim_start().starts_with("tch.") || l.trim_start().starts_with("tch ="))
    })
}

/// An executable cargo built: its package folder and target name.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Artifact {
    dir: PathBuf,
    target: String,
    executable: PathBuf,
    /// A binary target built as itself, not as a test harness: a lab's program
    /// and its unit tests share the target name.
    program: bool,
    /// Cargo had it already: nothing was compiled for it.
    fresh: bool,
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
                program: v["target"]["kind"]
                    .as_array()
                    .is_some_and(|k| k.iter().any(|k| k == "bin"))
                    && !v["profile"]["test"].as_bool().unwrap_or(false),
                fresh: v["fresh"].as_bool().unwrap_or(false),
            })
        })
        .collect()
}

/// The executable of `lab`'s `target` among `built`: the program when `target` is
/// the package's name, else that integration test.
fn find_artifact(built: &[Artifact], root: &Path, lab: &Lab, target: &str) -> Result<PathBuf> {
    let dir = lab.dir(root);
    let program = target == lab.package();
    built
        .iter()
        .find(|a| {
            a.target == target
                && a.program == program
                && a.dir.ends_with(Path::new("labs").join(lab.dir_name()))
        })
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
    let built = build_lab(root, lab, Part::Main)?;
    let exe = find_artifact(&built, root, lab, &lab.package())?;
    let mut cmd = Command::new(exe);
    cmd.current_dir(root).args(args);
    lab_env(&mut cmd, false, env_set);
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
    lab_env(&mut cmd, true, env_set);
    if solution {
        cmd.env(SOLUTION_ENV, "1");
    } else {
        cmd.env_remove(SOLUTION_ENV);
    }
    cmd.output()
        .with_context(|| format!("running {}", check_exe.display()))
}

fn check(root: &Path, lab: &Lab, part: Part) -> Result<()> {
    let mine = std::fs::read(lab.file(root, part))
        .with_context(|| format!("reading {}", lab.file_rel(part)))?;
    let (what, flag) = (what(lab, part), part.flag());
    ui::say(&format!("checking {what} ({})", lab.file_rel(part)));
    let built = build_lab(root, lab, part)?;
    let exe = find_artifact(&built, root, lab, part.test())?;
    let out = ui::with_spinner("checking", || self_check(&exe, root, false))?;
    let passed = out.status.success();
    let mut progress = Progress::load(root);
    progress.update(&lab.progress_key(part), |p| {
        p.last_check = Some(Checked {
            passed,
            exercise: fingerprint(&mine),
        });
        if passed {
            p.last_failure = None;
        }
    })?;
    if passed {
        match part {
            Part::Main => println!(
                "lab {} passes its check. Run it: `cargo lab {}`; then read its chapter \
                 (`cargo xtask book`) and its questions.{}",
                lab.number,
                lab.number,
                lab.stretch.as_ref().map_or(String::new(), |s| format!(
                    "\nDone early? An optional stretch goal: {} (`cargo lab check {} --stretch`).",
                    s.title, lab.number
                ))
            ),
            Part::Stretch => println!(
                "{what} passes its check. Its chapter's \"Stretch goal\" section has \
                 questions to go further."
            ),
        }
        return Ok(());
    }
    std::io::stdout().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    match (part, &lab.stretch) {
        (Part::Stretch, Some(s)) => println!("\n{what} does not pass yet. {}", s.ask),
        _ => println!("\nlab {} does not pass yet. {}", lab.number, lab.done),
    }
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    hint_for_failure(lab, part, &mut progress, &text)?;
    bail!(
        "{what} fails its check (`cargo lab check {}{flag}`)",
        lab.number
    )
}

/// "lab 6", or "lab 6's stretch goal".
fn what(lab: &Lab, part: Part) -> String {
    match part {
        Part::Main => format!("lab {}", lab.number),
        Part::Stretch => format!("lab {}'s stretch goal", lab.number),
    }
}

/// `cargo lab check N --solution [--stretch]`: the self-check on the reference
/// solution, as the suite's gate runs it; it records nothing and shows no hint.
fn check_solution(root: &Path, lab: &Lab, part: Part) -> Result<()> {
    let what = what(lab, part);
    ui::say(&format!("checking {what}'s reference solution"));
    let built = build_lab(root, lab, part)?;
    let exe = find_artifact(&built, root, lab, part.test())?;
    let out = ui::with_spinner("checking", || self_check(&exe, root, true))?;
    if out.status.success() {
        println!("{what}: the reference solution passes its check");
        return Ok(());
    }
    std::io::stdout().write_all(&out.stdout)?;
    std::io::stderr().write_all(&out.stderr)?;
    bail!("{what}: the reference solution fails its check")
}

/// Shows the hint for a failed check's output of `part` and remembers the failure.
fn hint_for_failure(lab: &Lab, part: Part, progress: &mut Progress, output: &str) -> Result<()> {
    let (ladder, diagnosis) = lab.hints_of(part)?;
    let key = lab.progress_key(part);
    let failure = hints::Failure::read(output);
    let before = progress.get(&key);
    let (shown, unknown) = hints::choose(
        ladder,
        diagnosis,
        &failure,
        before.hints_shown,
        before.last_failure.as_deref(),
    );
    for k in unknown {
        let table = match part {
            Part::Main => "[[lab.diagnosis]]",
            Part::Stretch => "[[lab.stretch.diagnosis]]",
        };
        ui::say(&format!(
            "the check names `hint: {k}`, which labs/info.toml does not define for {} \
             (a {table} with key = \"{k}\")",
            what(lab, part)
        ));
    }
    let mut spent = before.hints_shown;
    match shown {
        hints::Shown::Keyed { key, hint } => {
            println!("hint for this failure ({key}): {hint}");
        }
        hints::Shown::Ladder { step, new } => {
            println!(
                "hint {} of {} ({}){}: {}",
                step + 1,
                ladder.len(),
                hints::step_name(step, ladder.len()),
                if new {
                    ""
                } else {
                    ", the same failure as last time"
                },
                ladder[step]
            );
            spent = spent.max(step + 1);
        }
    }
    if matches!(shown, hints::Shown::Keyed { .. }) || spent < ladder.len() {
        println!(
            "(`cargo lab hint {}{}` climbs the hint ladder)",
            lab.number,
            part.flag()
        );
    }
    progress.update(&key, |p| {
        p.hints_shown = spent;
        p.last_failure = Some(failure.signature);
    })
}

/// `cargo lab hint N [--stretch]`: one more step of the part's ladder, with
/// the steps before it.
fn hint(root: &Path, lab: &Lab, part: Part) -> Result<()> {
    let (ladder, _) = lab.hints_of(part)?;
    let key = lab.progress_key(part);
    let mut progress = Progress::load(root);
    let shown = progress.get(&key).hints_shown;
    let upto = (shown + 1).min(ladder.len());
    match (part, &lab.stretch) {
        (Part::Stretch, Some(s)) => println!(
            "hints for lab {}'s stretch goal, {} ({} of {}):",
            lab.number,
            s.title,
            upto,
            ladder.len()
        ),
        _ => println!(
            "hints for lab {} ({} of {}):",
            lab.number,
            upto,
            ladder.len()
        ),
    }
    for (i, h) in ladder[..upto].iter().enumerate() {
        println!("  {}. {}: {h}", i + 1, hints::step_name(i, ladder.len()));
    }
    if upto == ladder.len() {
        let section = match part {
            Part::Main => "",
            Part::Stretch => "'s \"Stretch goal\" section",
        };
        println!(
            "  (that is every hint; the solution is in the book's chapter {}{section}, folded away)",
            lab.chapter()
        );
    }
    progress.update(&key, |p| p.hints_shown = upto)
}

/// The starter of `part`: the committed version of the learner's file.
fn starter(root: &Path, lab: &Lab, part: Part) -> Result<Vec<u8>> {
    let rel = lab.file_rel(part);
    let out = Command::new("git")
        .current_dir(root)
        .args(["show", &format!("HEAD:{rel}")])
        .output()
        .context("running git (the starter is the committed version of the exercise)")?;
    if !out.status.success() {
        bail!(
            "git cannot show the committed {rel}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

fn reset(root: &Path, lab: &Lab, part: Part, yes: bool) -> Result<()> {
    lab.require(part)?;
    let path = lab.file(root, part);
    let rel = lab.file_rel(part);
    let marker = lab.marker(part);
    let starter = starter(root, lab, part)?;
    if !String::from_utf8_lossy(&starter).contains(&marker) {
        bail!(
            "the committed {rel} has no {marker} markers: you committed your own version. \
             The starter is in the commit that added the lab: \
             `git log --diff-filter=A -- {rel}`"
        );
    }
    let mine = std::fs::read(&path)?;
    if mine == starter {
        println!("{rel} is already the starter");
        return Ok(());
    }
    let backups = root.join(".ringside/backups");
    std::fs::create_dir_all(&backups)?;
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let stem = match part {
        Part::Main => "exercise",
        Part::Stretch => "stretch",
    };
    let backup = backups.join(format!("{}-{stem}-{secs}.rs", lab.short()));
    if !yes {
        print!(
            "Replace {rel} with the starter? Your version is kept as {}. [y/N] ",
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
    Progress::load(root).update(&lab.progress_key(part), |p| p.last_check = None)?;
    println!(
        "{rel} is the starter again; yours is in {}",
        backup.display()
    );
    Ok(())
}

/// The test suite's `labs` step, rustlings' `dev check --require-solutions`: every
/// starter fails its self-check naming its TODO, every solution passes, and every
/// lab's quick run (`--quick` with the solution) completes and draws its charts.
/// The same for every stretch goal: its starter fails naming its own marker
/// (`TODO(lab NN stretch)`), its solution passes.
/// Debug profile, as the rest of the suite, so nothing is compiled twice.
pub fn gate(root: &Path) -> Result<()> {
    let labs = info::load(root)?;
    // One cargo call for every lab's checks and program (building an integration
    // test builds its package's binary too).
    let built = build(root, &build_args(Scope::Workspace, false))?;
    let mut problems = Vec::new();
    for lab in &labs {
        let started = std::time::Instant::now();
        let before = problems.len();
        let mut parts = vec![Part::Main];
        if lab.stretch.is_some() {
            parts.push(Part::Stretch);
        }
        for &part in &parts {
            let exe = find_artifact(&built, root, lab, part.test())?;
            problems.extend(judge_part(&exe, root, lab, part)?);
        }
        let program = find_artifact(&built, root, lab, &lab.package())?;
        if let Err(e) = quick_run(&program, root) {
            problems.push(format!("lab {}: quick run: {e:#}", lab.number));
        }
        if problems.len() == before {
            ui::say(&format!(
                "lab {}: starter fails, solution passes{}, quick run drew its charts ({})",
                lab.number,
                if parts.len() > 1 {
                    "; the stretch goal's too"
                } else {
                    ""
                },
                ui::fmt_duration(started.elapsed())
            ));
        }
    }
    if !problems.is_empty() {
        bail!("{}", problems.join("\n"));
    }
    Ok(())
}

/// The gate's verdict on one part of a lab, with its check executable `exe`:
/// what is wrong (the starter passes, or fails without naming its marker; the
/// solution fails), or nothing.
fn judge_part(exe: &Path, root: &Path, lab: &Lab, part: Part) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let marker = lab.marker(part);
    let what = what(lab, part);
    let starter = self_check(exe, root, false)?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&starter.stdout),
        String::from_utf8_lossy(&starter.stderr)
    );
    if starter.status.success() {
        problems.push(format!("{what}: the starter passes its check"));
    } else if !text.contains(&marker) {
        problems.push(format!(
            "{what}: the starter fails its check without naming {marker}:\n{}",
            ui::tail_str(&text, 20)
        ));
    }
    let solution = self_check(exe, root, true)?;
    if !solution.status.success() {
        problems.push(format!(
            "{what}: the solution fails its check:\n{}{}",
            String::from_utf8_lossy(&solution.stdout),
            String::from_utf8_lossy(&solution.stderr)
        ));
    }
    Ok(problems)
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
    lab_env(&mut cmd, false, env_set);
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
mod tests;
