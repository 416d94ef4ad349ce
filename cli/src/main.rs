//! `ringside`: the workbench's command line. Each subcommand lives in its own
//! module; this file only parses and dispatches.

mod bench_cmd;
mod conformance_cmd;
mod cpu_share;
mod label;
mod launch_cmd;
mod progress;
mod report_cmd;
mod sweep;
mod torch_peer;
mod tour;

use clap::{Parser, Subcommand};

/// ringside: measure and learn the communication behind distributed training.
#[derive(Debug, Parser)]
#[command(name = "ringside", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start N local ranks of a program, like torchrun (exits with the job's code).
    Launch(launch_cmd::LaunchArgs),
    /// The main job: check every collective on local ranks and sweep all_reduce sizes.
    Tour(tour::TourArgs),
    /// Time all_reduce across message sizes: `bench -c all_reduce` in short, JSON lines with --jsonl.
    Sweep(sweep::SweepArgs),
    /// nccl-tests for every backend: any collective, table, #wrong, JSON results with a manifest.
    Bench(bench_cmd::BenchArgs),
    /// Turn results files into charts, a cost model (α, a bandwidth per cache regime, R² and residuals) and an HTML report.
    Report(report_cmd::ReportArgs),
    /// Run the conformance suite on this job's ranks (any launcher).
    Conformance(conformance_cmd::ConformanceArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Launch(args) => launch_cmd::run(args)?,
        Command::Tour(args) => tour::run(args)?,
        Command::Sweep(args) => sweep::run(args)?,
        Command::Bench(args) => bench_cmd::run(args)?,
        Command::Report(args) => report_cmd::run(args)?,
        Command::Conformance(args) => conformance_cmd::run(args)?,
    };
    std::process::exit(code)
}
