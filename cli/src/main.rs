//! `ringside`: the workbench's command line. Each subcommand lives in its own
//! module; this file only parses and dispatches.

mod launch_cmd;

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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let code = match cli.command {
        Command::Launch(args) => launch_cmd::run(args)?,
    };
    std::process::exit(code)
}
