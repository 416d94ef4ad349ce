//! Hogwild!: worker processes (this program, re-run) train one MLP whose parameters
//! live in shared memory, without locks.
//!
//! `cargo run -p trainers --release --example hogwild -- --workers 2 --sharing file-descriptor`

use std::time::Duration;

use anyhow::Result;
use clap::Parser;
use trainers::hogwild::{self, HogwildConfig, Sharing, WorkerProgram};

/// Starts N worker processes that train a shared MLP lock-free, then reports what
/// each did and the loss of the shared parameters before and after.
#[derive(Debug, Parser)]
struct Args {
    /// Worker processes.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// How the workers get the shared memory.
    #[arg(long, value_enum, default_value_t = Sharing::FileDescriptor)]
    sharing: Sharing,
    /// SGD steps per worker.
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Examples per step.
    #[arg(long, default_value_t = 32)]
    batch: usize,
    /// Learning rate.
    #[arg(long, default_value_t = 0.05)]
    lr: f64,
    /// Seconds before the workers are killed.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
}

fn main() -> Result<()> {
    // A worker is this same program, started by the parent with the role set.
    if let Some(report) = hogwild::worker_from_env() {
        report?;
        return Ok(());
    }
    let args = Args::parse();
    tch::set_num_threads(1);
    let config = HogwildConfig {
        workers: args.workers,
        steps: args.steps,
        batch: args.batch,
        lr: args.lr,
        sharing: args.sharing,
        timeout: Duration::from_secs(args.timeout),
        ..Default::default()
    };
    let report = hogwild::run(&config, &WorkerProgram::current_exe()?)?;
    for path in &report.stale_removed {
        println!("removed stale {}", path.display());
    }
    println!(
        "{} workers, {:?} sharing, {} shared parameters, {:.2} s",
        args.workers,
        args.sharing,
        report.parameters,
        report.elapsed.as_secs_f64()
    );
    for w in &report.workers {
        println!(
            "  worker {} (pid {}): {} steps counted in shared memory",
            w.rank, w.pid, w.steps
        );
    }
    println!(
        "loss of the shared parameters: {:.4} -> {:.4} (largest change {:.4})",
        report.initial_loss, report.final_loss, report.max_change
    );
    if let Some(path) = &report.shm_path {
        println!("{} exists afterwards: {}", path.display(), path.exists());
    }
    Ok(())
}
