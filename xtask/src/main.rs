//! `cargo xtask`: everything a newcomer needs besides Rust.
//!
//! * `cargo xtask setup` installs what the workspace needs (Debian packages, a per-user
//!   torch install, the `.ringside/` links) and is quick when all is there already.
//! * `cargo xtask test` runs the set-up, then every check the project has (see
//!   [`steps::TEST_STEPS`]), timing each.
//! * `cargo xtask tour` runs the set-up, then the guided tour.
//! * `cargo xtask book [--serve]` builds the book with the reader's own lab figures.
//! * `cargo lab ...` (= `cargo xtask lab ...`): the workshop's commands ([`labs`]).
//!
//! The aliases live in `.cargo/config.toml`.

mod book;
mod cargo;
mod labs;
mod setup;
mod steps;
mod ui;

use anyhow::Result;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "xtask",
    bin_name = "cargo xtask",
    about = "ringside set-up and project tasks",
    version
)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what the workspace needs (idempotent; fast when already done).
    ///
    /// Debian packages (apt-get as root, otherwise prints the sudo line), torch into a
    /// per-user cache (RINGSIDE_CACHE, default ~/.cache/ringside), and the .ringside/
    /// links that .cargo/config.toml points LIBTORCH at.
    Setup,
    /// Set up, then run the whole test suite: formatting, every crate's tests, lints.
    Test {
        /// Skip a step by name (repeatable); `--list` shows the names.
        #[arg(long, value_name = "STEP")]
        skip: Vec<String>,
        /// Run only these steps (repeatable).
        #[arg(long, value_name = "STEP", conflicts_with = "skip")]
        only: Vec<String>,
        /// List the steps and exit.
        #[arg(long)]
        list: bool,
    },
    /// Build the book (mdBook, installed once per user) with your own lab figures.
    ///
    /// Each lab chapter shows the charts of your latest run of that lab
    /// (results/labNN/), or a committed reference run until you have one.
    Book {
        /// Serve it at http://localhost:3000 and rebuild when a page changes.
        #[arg(long)]
        serve: bool,
    },
    /// The workshop's labs: list, run, check, hint, reset (`cargo lab --help`).
    #[command(name = "lab")]
    Lab(labs::LabArgs),
    /// Set up, then run the guided tour (`cargo run --release -p ringside -- tour`).
    Tour {
        /// Arguments passed on to `ringside tour`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // The error chain in one line; a backtrace (RUST_BACKTRACE) helps nobody here.
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<()> {
    let root = repo_root();
    match cli.task {
        Task::Setup => {
            setup::run(&root)?;
        }
        Task::Test { skip, only, list } => {
            if list {
                steps::list();
                return Ok(());
            }
            let selected = steps::select(&skip, &only)?;
            setup::run(&root)?;
            steps::run(&root, &selected)?;
        }
        Task::Book { serve } => {
            setup::run(&root)?;
            book::build(&root, serve)?;
        }
        Task::Lab(args) => {
            setup::run(&root)?;
            labs::run(&root, args)?;
        }
        Task::Tour { args } => {
            setup::run(&root)?;
            // ringside and every lab's program, with the workspace's feature set as
            // `cargo lab` builds them: a lab's first run after the tour then
            // compiles nothing (selecting one package would resolve features
            // differently and recompile the shared dependencies).
            let mut build = cargo::cargo(&root);
            build.args(["build", "--release", "--workspace", "--bin", "ringside"]);
            for lab in labs::info::load(&root)? {
                build.args(["--bin", &lab.package()]);
            }
            ui::say(&format!("running {}", ui::show_command(&build)));
            if !build.status()?.success() {
                anyhow::bail!("building ringside and the labs failed");
            }
            let mut cmd = tour_command(&root, &args)?;
            ui::say(&format!("running {}", ui::show_command(&cmd)));
            let status = cmd.status()?;
            if !status.success() {
                anyhow::bail!("the tour failed ({status})");
            }
        }
    }
    Ok(())
}

/// The tour runs its 2 ranks under `mpirun` when OpenMPI is installed (set-up
/// installs it), so the MPI backend takes part beside the others; ringside's own
/// store gets a free port so a stray job on 29500 cannot get in the way.
fn tour_command(root: &std::path::Path, args: &[String]) -> Result<std::process::Command> {
    let ringside = root.join("target/release/ringside");
    let have_mpirun = std::process::Command::new("mpirun")
        .arg("--version")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !have_mpirun {
        let mut cmd = std::process::Command::new(ringside);
        cmd.arg("tour").args(args);
        return Ok(cmd);
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let mut cmd = std::process::Command::new("mpirun");
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.arg("--allow-run-as-root");
    }
    // No core binding by mpirun: the torch peer each rank starts would inherit
    // its rank's core, where torch's Gloo loop spins on the core of the thread
    // it waits for (1.2–3.8 ms at 5 or 6 of the 9 sizes from 4 B to 256 KiB
    // in 2 runs on 2026-11-28; unbound mostly 0.2–0.5 ms), which is not how
    // torchrun runs it.
    // ringside's shared-memory transport and Gloo backend bind their own
    // ranks (`collectives::sys::affinity`).
    cmd.args(["--oversubscribe", "--bind-to", "none", "-np", "2", "-x"])
        .arg(format!("MASTER_PORT={port}"))
        .arg(ringside)
        .arg("tour")
        .args(args);
    Ok(cmd)
}

/// The workspace root: the parent of this crate's folder.
fn repo_root() -> PathBuf {
    // `cargo run` sets CARGO_MANIFEST_DIR at run time too; the compile-time value is the
    // fallback for running the binary directly.
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}
