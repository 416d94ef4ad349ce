//! Lab 8's command line: the roles one binary plays (the lab starts itself in
//! each) and their flags.

use std::process::Command;

use clap::{Parser, ValueEnum};
use collectives::job::ConnectArgs;

/// What a process of the lab is: the lab itself, or one it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Role {
    /// Run the whole lab (what a learner runs).
    Lab,
    /// A rank that prints what its launcher set.
    Show,
    /// One node's launcher (`ringside launch`'s code) of `bench` ranks.
    Node,
    /// A rank that times all_reduce and DDP steps.
    Bench,
    /// The failure drill's launcher.
    DrillLaunch,
    /// A rank of the failure drill.
    Drill,
}

/// Lab 8: the same binary under four launchers, simulated hosts with shaped
/// links, and a failure drill.
#[derive(Parser)]
#[command(version)]
pub struct Args {
    #[command(flatten)]
    pub connect: ConnectArgs,
    /// What this process is (the lab starts itself in the other roles).
    #[arg(long, value_enum, default_value = "lab", hide = true)]
    pub role: Role,
    /// Nodes of the job (node role).
    #[arg(long, default_value_t = 1, hide = true)]
    pub nnodes: usize,
    /// This node's index (node role).
    #[arg(long, default_value_t = 0, hide = true)]
    pub node_rank: usize,
    /// Ranks per node (node role).
    #[arg(long, default_value_t = 1, hide = true)]
    pub nproc_per_node: usize,
    /// Rank 0's host (node role).
    #[arg(long, default_value = "127.0.0.1", hide = true)]
    pub master_addr: String,
    /// Rank 0's store port (node role).
    #[arg(long, hide = true)]
    pub master_port: Option<u16>,
    /// The job token every node shares (node role).
    #[arg(long, hide = true)]
    pub token: Option<String>,
    /// What the node role's ranks are.
    #[arg(long, value_enum, default_value = "bench", hide = true)]
    pub rank_role: Role,
    /// Label of the link being measured (bench role).
    #[arg(long, default_value = "1host", hide = true)]
    pub link: String,
    /// Largest all_reduce to time, in bytes.
    #[arg(long, default_value = "16M", value_parser = measure::size::parse_size)]
    pub max_size: u64,
    /// A short run: small sizes, 2 nodes only, no torchrun/mpirun (what CI runs).
    #[arg(long)]
    pub quick: bool,
}

/// This program with `args`, as a command.
pub fn me(args: &[&str]) -> anyhow::Result<Command> {
    let mut c = Command::new(std::env::current_exe()?);
    c.args(args);
    Ok(c)
}
